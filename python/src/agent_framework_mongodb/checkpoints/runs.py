"""Run pages: a tenant's runs, newest activity first, each with its retained checkpoints counted.

``MongoDBCheckpointStorage.list_runs`` and ``MongoDBCheckpointCatalog.list_runs`` share these steps,
so they list the same runs with the same cursors. A page is one ``aggregate`` (one round trip): the
run listing's find over the counters, and a ``$lookup`` counting each listed run's checkpoint
documents through the scoped sequence index (``queries.run_page_pipeline``). It is a read, so
pymongo retries it once after a transient error; it writes nothing, so a retry counts nothing twice.
No clock decides anything but a prune's idle cut-off, which is the server's ``$$NOW``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from .._telemetry import count_round_trip
from ..errors import translated_driver_errors
from .driver import CheckpointCollection, Document
from .indexes import SIMPLE_COLLATION
from .options import validate_identifier
from .paging import RunPosition, decode_run_cursor, encode_run_cursor
from .queries import run_page_pipeline
from .results import RUN_COUNT_LIMIT, MongoDBRunPage
from .scope import RunListing
from .summaries import run_position_of, run_summary_of

__all__ = ["idle_for", "listing_of", "read_run_documents", "read_run_page"]


def listing_of(tenant_id: str, application_id: str | None, workflow_name: object) -> RunListing:
    """The listing a request names; raises ``MongoDBConfigurationError`` for an invalid workflow name."""
    if workflow_name is not None:
        validate_identifier("workflow_name", workflow_name)
    return RunListing.of_tenant(
        tenant_id, application_id, workflow_name if isinstance(workflow_name, str) else None
    )


async def read_run_page(
    collection: CheckpointCollection, listing: RunListing, *, cursor: object, limit: int
) -> MongoDBRunPage:
    """One page of ``listing`` after ``cursor`` (checked before any I/O), with its next cursor."""
    after = None if cursor is None else decode_run_cursor(listing, cursor)
    documents = await read_run_documents(collection, listing, after=after, limit=limit)
    runs = tuple(run_summary_of(document) for document in documents)
    following = None if len(documents) < limit else encode_run_cursor(listing, run_position_of(documents[-1]))
    return MongoDBRunPage(runs, following)


async def read_run_documents(
    collection: CheckpointCollection,
    listing: RunListing,
    *,
    after: RunPosition | None,
    limit: int,
    idle: Mapping[str, Any] | None = None,
) -> list[Document]:
    """The page's documents: counters with their counts (``run_summary_of`` reads them), and,
    with ``idle`` (:func:`idle_for`), only runs idle by the server's clock."""
    pipeline = run_page_pipeline(
        listing, after, limit=limit, collection_name=collection.name, count_limit=RUN_COUNT_LIMIT, idle=idle
    )
    with translated_driver_errors(operation="read", action="read a page of runs"):
        count_round_trip()  # the aggregate command; to_list only drains the batches it opened
        cursor = await collection.aggregate(pipeline, collation=SIMPLE_COLLATION)
        return await cursor.to_list(limit)


def idle_for(older_than: timedelta) -> dict[str, Any]:
    """A counter whose latest update (``allocated_at``) is more than ``older_than`` before the
    server's ``$$NOW``: the server's clock decides, as it wrote ``allocated_at``."""
    milliseconds = int(older_than / timedelta(milliseconds=1))
    cutoff = {"$dateSubtract": {"startDate": "$$NOW", "unit": "millisecond", "amount": milliseconds}}
    return {"$expr": {"$lt": ["$allocated_at", cutoff]}}
