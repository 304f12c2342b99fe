"""Shared helpers of the integration suite: the target collection, checkpoints, storages, plans."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints import sequences
from agent_framework_mongodb.checkpoints.driver import CheckpointCursor
from agent_framework_mongodb.checkpoints.indexes import SIMPLE_COLLATION
from agent_framework_mongodb.checkpoints.queries import (
    IDEMPOTENCY_PROJECTION,
    checkpoint_filter,
    counter_filter,
    insert_if_absent,
)
from agent_framework_mongodb.checkpoints.scope import RunScope

DEFAULT_DATABASE = "agent_framework_test"
TENANT = "tenant-integration"
WORKFLOW = "integration-workflow"
SESSION = "run-1"


class ExplainDatabase(Protocol):
    """The database command ``explain`` is sent through."""

    async def command(self, command: dict[str, Any], *args: Any, **kwargs: Any) -> Mapping[str, Any]: ...


class IntegrationCollection(Protocol):
    """The collection as the suite uses it: pymongo's general signatures, wider than the storage's.

    Anything that satisfies this also satisfies the storage's ``CheckpointCollection``.
    """

    @property
    def name(self) -> str: ...

    @property
    def database(self) -> Any: ...

    @property
    def write_concern(self) -> Any: ...

    def with_options(self, *args: Any, **kwargs: Any) -> IntegrationCollection: ...

    async def aggregate(self, pipeline: Any, *args: Any, **kwargs: Any) -> Any: ...

    async def find_one(self, filter: Any = None, *args: Any, **kwargs: Any) -> dict[str, Any] | None: ...

    def find(self, *args: Any, **kwargs: Any) -> CheckpointCursor: ...

    async def insert_one(self, document: Any, *args: Any, **kwargs: Any) -> Any: ...

    async def insert_many(self, documents: Any, *args: Any, **kwargs: Any) -> Any: ...

    async def find_one_and_update(self, filter: Any, update: Any, *args: Any, **kwargs: Any) -> Any: ...

    async def delete_one(self, filter: Any, *args: Any, **kwargs: Any) -> Any: ...

    async def delete_many(self, filter: Any, *args: Any, **kwargs: Any) -> Any: ...

    async def update_many(self, filter: Any, update: Any, *args: Any, **kwargs: Any) -> Any: ...

    async def bulk_write(self, requests: Any, *args: Any, **kwargs: Any) -> Any: ...

    async def count_documents(self, filter: Mapping[str, Any], *args: Any, **kwargs: Any) -> int: ...

    async def create_indexes(self, indexes: Any, *args: Any, **kwargs: Any) -> list[str]: ...

    async def list_indexes(self, *args: Any, **kwargs: Any) -> Any: ...

    async def drop_index(self, index_or_name: Any, *args: Any, **kwargs: Any) -> None: ...


@dataclasses.dataclass(frozen=True)
class MongoTarget:
    """The collection one test owns, and whether a real server (with a planner) holds it."""

    collection: IntegrationCollection
    real_server: bool
    database_name: str
    collection_name: str

    def storage(
        self,
        *,
        tenant_id: str = TENANT,
        session_id: str = SESSION,
        workflow_name: str = WORKFLOW,
        application_id: str | None = None,
        ttl: timedelta | None = None,
        page_size: int = 100,
        max_page_size: int = 1000,
        allowed_checkpoint_types: tuple[str, ...] = (),
    ) -> MongoDBCheckpointStorage:
        """A storage over this collection, bound to the given run."""
        options = MongoDBCheckpointStorageOptions(
            tenant_id=tenant_id,
            workflow_name=workflow_name,
            session_id=session_id,
            application_id=application_id,
            ttl=ttl,
            page_size=page_size,
            max_page_size=max_page_size,
            allowed_checkpoint_types=allowed_checkpoint_types,
        )
        return MongoDBCheckpointStorage(self.collection, options=options)

    async def explain(self, command: Mapping[str, Any]) -> Mapping[str, Any]:
        """``explain`` of one command at ``executionStats`` verbosity."""
        database: Any = self.collection.database
        typed: ExplainDatabase = database
        return await typed.command({"explain": dict(command), "verbosity": "executionStats"})


def checkpoint(
    checkpoint_id: str,
    *,
    workflow_name: str = WORKFLOW,
    previous: str | None = None,
    timestamp: str = "2025-01-01T00:00:00+00:00",
    state: Mapping[str, Any] | None = None,
    iteration: int = 0,
) -> WorkflowCheckpoint:
    """A small checkpoint with plain state."""
    return WorkflowCheckpoint(
        workflow_name=workflow_name,
        graph_signature_hash="integration-graph",
        checkpoint_id=checkpoint_id,
        previous_checkpoint_id=previous,
        timestamp=timestamp,
        state=dict(state) if state is not None else {"step": checkpoint_id},
        iteration_count=iteration,
    )


async def save_chain(storage: MongoDBCheckpointStorage, count: int, *, prefix: str = "cp") -> list[str]:
    """Save ``count`` linked checkpoints one after another; returns their ids in order."""
    ids: list[str] = []
    previous: str | None = None
    for index in range(count):
        checkpoint_id = f"{prefix}-{index:03d}"
        await storage.save(checkpoint(checkpoint_id, previous=previous, iteration=index))
        ids.append(checkpoint_id)
        previous = checkpoint_id
    return ids


# -- sequences ----------------------------------------------------------------------------
#
# ADR 0006 promises unique, positive, increasing sequences, not contiguous ones: an identical
# retry and a collision on the sequence index each spend a number, and a real server interleaves
# concurrent saves differently from the in-process engine. These checks assert only the promise.


def assert_valid_sequences(sequences_by_id: Mapping[str, int], *, count: int) -> None:
    """``count`` checkpoints, each with its own positive sequence."""
    assert len(sequences_by_id) == count, f"{len(sequences_by_id)} checkpoints stored, expected {count}"
    values = list(sequences_by_id.values())
    assert all(value > 0 for value in values), f"a sequence is not positive: {sequences_by_id}"
    assert len(set(values)) == len(values), f"two checkpoints share a sequence: {sequences_by_id}"


def assert_in_save_order(sequences_by_id: Mapping[str, int], saved: Sequence[str]) -> None:
    """Saves made one after another (each returned before the next began) got increasing numbers."""
    in_order = [sequences_by_id[checkpoint_id] for checkpoint_id in saved]
    assert all(earlier < later for earlier, later in itertools.pairwise(in_order)), (
        f"sequences do not follow the save order {list(saved)}: {in_order}"
    )


# -- explain ------------------------------------------------------------------------------

ID_INDEX_NAME = "_id_"
"""The name MongoDB gives every collection's ``_id`` index."""

EXPRESS_STAGES = frozenset({"EXPRESS_IXSCAN", "EXPRESS_UPDATE", "EXPRESS_DELETE"})
"""MongoDB 8.0's express path: a point lookup reported without an ``IXSCAN`` stage.

The express explainer (mongodb/mongo ``src/mongo/db/query/plan_explainer_express.cpp``, with
``IteratorStats::appendDataAccessStats`` in ``plan_explainer_express.h``) reports one stage: the
write stage's name (``EXPRESS_UPDATE``/``EXPRESS_DELETE``) or else the iterator's
(``EXPRESS_IXSCAN``), with the iterator's ``keyPattern`` and ``indexName`` beside it. The
iterators in ``src/mongo/db/exec/express/express_plan.h`` name the index they used:
``IdLookupViaIndex`` sets ``_id_`` and ``{ _id: 1 }``, while ``LookupViaUserIndex`` also reports
``EXPRESS_IXSCAN`` but with the user index's name, so the stage name alone does not say ``_id``.
(``EXPRESS_CLUSTERED_IXSCAN``, on a clustered collection, names no index and is not accepted.)
"""

IDHACK_STAGE = "IDHACK"
"""The classic engine's ``_id`` fast path (8.0 mostly takes the express path instead); always ``_id_``."""


def winning_plan_stages(explain: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every stage of the winning plan, outermost first.

    Walks ``inputStage``/``inputStages``, the slot-based engine's ``queryPlan`` and a sharded
    cluster's ``shards[].winningPlan`` alike, by descending into every nested mapping and list.
    """
    planner = explain.get("queryPlanner")
    assert isinstance(planner, Mapping), f"explain has no queryPlanner: {sorted(explain)}"
    return list(_stages(planner.get("winningPlan")))


def _stages(node: object) -> Iterator[Mapping[str, Any]]:
    if isinstance(node, Mapping):
        if isinstance(node.get("stage"), str):
            yield node
        for key, value in node.items():
            if key not in ("rejectedPlans", "parsedQuery", "filter"):
                yield from _stages(value)
    elif isinstance(node, list):
        for item in node:
            yield from _stages(item)


def stage_names(stages: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(stage["stage"]) for stage in stages]


def index_scans(stages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [stage for stage in stages if stage["stage"] == "IXSCAN"]


def uses_id_index(stages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the plan finds its document through the ``_id`` index.

    ``IDHACK`` always does; an ``IXSCAN`` or an express stage does when it names ``_id_``.
    """
    for stage in stages:
        name = stage["stage"]
        if name == IDHACK_STAGE:
            return True
        if (name == "IXSCAN" or name in EXPRESS_STAGES) and stage.get("indexName") == ID_INDEX_NAME:
            return True
    return False


def sort_document(sort: Sequence[tuple[str, int]]) -> dict[str, int]:
    return dict(sort)


def find_command(
    collection_name: str,
    query: Mapping[str, Any],
    projection: Mapping[str, int],
    *,
    sort: Sequence[tuple[str, int]] | None = None,
    limit: int,
    single: bool,
) -> dict[str, Any]:
    """The ``find`` command pymongo sends for ``find``/``find_one`` with these arguments."""
    command: dict[str, Any] = {
        "find": collection_name,
        "filter": dict(query),
        "projection": dict(projection),
        "limit": limit,
        "collation": dict(SIMPLE_COLLATION),
    }
    if sort is not None:
        command["sort"] = sort_document(sort)
    if single:
        command["singleBatch"] = True
    return command


def delete_command(collection_name: str, query: Mapping[str, Any], *, many: bool) -> dict[str, Any]:
    """The ``delete`` command of ``delete_one`` (limit 1) or ``delete_many`` (limit 0)."""
    return {
        "delete": collection_name,
        "deletes": [{"q": dict(query), "limit": 0 if many else 1, "collation": dict(SIMPLE_COLLATION)}],
    }


COUNTER_RECHECK_GRACE_MS = 60_000
"""The default options' grace (twice the 30 s operation timeout), in milliseconds."""


def insert_if_absent_command(
    collection_name: str, scope: RunScope, checkpoint_id: str, fields: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``findAndModify`` command a save's insert sends for a checkpoint with ``fields``."""
    query = checkpoint_filter(scope, checkpoint_id)
    return {
        "findAndModify": collection_name,
        "query": query,
        "update": insert_if_absent({**query, **fields}, query),
        "fields": dict(IDEMPOTENCY_PROJECTION),
        "upsert": True,
        "new": False,
        "collation": dict(SIMPLE_COLLATION),
    }


def counter_allocation_command(
    collection_name: str, scope: RunScope, *, expires_at: datetime | None
) -> dict[str, Any]:
    """The ``findAndModify`` command a save's sequence allocation sends for ``scope``."""
    return {
        "findAndModify": collection_name,
        "query": counter_filter(scope),
        "update": list(
            sequences._counter_pipeline(
                activity=sequences.RunActivity("explained", waiting_for_input=False),
                expires_at=expires_at,
                floor=None,
                increment=1,
                grace_ms=COUNTER_RECHECK_GRACE_MS,
                counts_save=True,
            )
        ),
        "fields": dict(sequences._COUNTER_PROJECTION),
        "upsert": True,
        "new": True,
        "collation": dict(SIMPLE_COLLATION),
    }
