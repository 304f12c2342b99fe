"""Every query shape the storage sends: filters, sorts and projections, by name.

Each filter states, by equality, the document kind and the complete scope (the discriminator and
the raw fields), so a query can only match the bound run and satisfies the partial filter of the
index meant to serve it (see ``indexes``). Sorts use ``sequence`` alone: sequences are unique
within a run, so that order is the storage's ``(sequence, checkpoint_id)`` order, and the
sequence index serves it without an in-memory sort.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from .documents import PAYLOAD_BYTES_FIELD, PAYLOAD_PROJECTION
from .paging import RunPosition
from .scope import CHECKPOINT_KIND, CHUNK_KIND, COUNTER_KIND, RunListing, RunScope

__all__ = [
    "ASCENDING_SEQUENCE",
    "BY_ID",
    "CHECKPOINT_SUMMARY_PROJECTION",
    "CHUNK_DATA_FIELD",
    "CHUNK_GENERATION_BYTES",
    "CHUNK_GENERATION_FIELD",
    "CHUNK_PROJECTION",
    "CHUNK_TOUCHED_FIELD",
    "COUNTED_FIELD",
    "DESCENDING_SEQUENCE",
    "IDEMPOTENCY_PROJECTION",
    "ID_PROJECTION",
    "PAYLOAD_PROJECTION",
    "RETAINED_FIELD",
    "RUN_ACTIVITY_SORT",
    "RUN_COUNT_MATCH",
    "RUN_SUMMARY_PROJECTION",
    "SEQUENCE_PROJECTION",
    "UNEXPIRED",
    "checkpoint_filter",
    "chunk_filter",
    "chunks_cleared_update",
    "chunks_filter",
    "counter_filter",
    "insert_if_absent",
    "older_than_filter",
    "page_filter",
    "run_chunks_filter",
    "run_filter",
    "run_listing_filter",
    "run_page_pipeline",
    "stale_chunks_filter",
    "unexpired",
    "with_counter",
]

ASCENDING_SEQUENCE: Final = [("sequence", 1)]
UNEXPIRED: Final[Mapping[str, Any]] = {
    "$expr": {"$or": [{"$ne": [{"$type": "$expires_at"}, "date"]}, {"$gt": ["$expires_at", "$$NOW"]}]}
}
"""A checkpoint that has not expired by the server's clock: permanent, or expiring later (an
``expires_at`` that is not a date never expires, as for the TTL monitor: a signed storage refuses
it with the signature, the summaries' reader as damaged). Every
read of checkpoints adds it (a residual filter), so an expired checkpoint is not found whether or
not the TTL monitor, which runs every 60 s and removes roots and chunks in no set order, has
removed it yet, and one a writer put back after it expired is not found either."""


def unexpired(query: Mapping[str, Any]) -> dict[str, Any]:
    """``query``, restricted to checkpoints that have not expired (:data:`UNEXPIRED`)."""
    return {**query, **UNEXPIRED}


BY_ID: Final = [("_id", 1)]
DESCENDING_SEQUENCE: Final = [("sequence", -1)]

ID_PROJECTION: Final[Mapping[str, int]] = {"_id": 1, "checkpoint_id": 1, "sequence": 1}
"""``list_checkpoint_ids`` never fetches payloads; the ``_id`` is read to check each document's
place, so a copy under another checkpoint's ``_id`` is not listed twice."""

CHECKPOINT_SUMMARY_PROJECTION: Final[Mapping[str, int]] = {
    "_id": 1,
    "checkpoint_id": 1,
    "sequence": 1,
    "parent_checkpoint_id": 1,
    "created_at": 1,
    "expires_at": 1,
    PAYLOAD_BYTES_FIELD: 1,
}
"""``list_checkpoint_summaries`` reads envelopes; the payload stays on the server."""

RUN_ACTIVITY_SORT: Final = [("allocated_at", -1), ("_id", -1)]
"""Newest activity first; the counter ``_id`` breaks ties, so the order is total."""

RUN_COUNT_MATCH: Final[Mapping[str, str]] = {"_kind": CHECKPOINT_KIND}
"""What a run page's ``$lookup`` states beside its join on ``scope_discriminator``. The join names
the run exactly (the discriminator is a digest of all four scope fields), and with the kind, which
is ``checkpoint_scope_sequence``'s partial filter, it names nothing outside that index's first key:
from MongoDB 7.0 the planner drops a predicate the partial filter implies, so each count is an
index-only scan (mongodb/mongo, jstests/core/index/partial_index_optimization.js, tagged
``requires_fcv_70``); before 7.0 the kind is checked on each counted document. Stating the tenant
and application as well, as this count once did, fetched every counted document on every version,
since neither is a key of that index: about a million fetches for a page of 100 runs of 10,000.
A document planted with a run's discriminator counts in that run, as one planted with all its scope
fields did: the count is a listing's figure, and no load reads through it."""

RETAINED_FIELD: Final = "retained"
"""What a run page's ``$lookup`` adds to each counter: ``[]`` for a run without checkpoints, else
``[{"checkpoints": n}]``, n at most ``RUN_COUNT_LIMIT + 1`` (``$count`` emits nothing for none)."""
COUNTED_FIELD: Final = "checkpoints"

RUN_SUMMARY_PROJECTION: Final[Mapping[str, int]] = {
    "_id": 1,
    "workflow_name": 1,
    "session_id": 1,
    "latest_checkpoint_id": 1,
    "sequence": 1,
    "allocations": 1,
    "allocated_at": 1,
    "waiting_for_input": 1,
    RETAINED_FIELD: 1,
}
"""A run page returns counter fields and the count its lookup added; no checkpoint is returned."""

CHUNK_DATA_FIELD: Final = "data"
CHUNK_TOUCHED_FIELD: Final = "touched_at"
"""When a save last wrote or referenced the chunk (the server's clock, rounded up to a window);
collection spares a chunk touched within its grace, so a save between its touch and its
checkpoint's insert keeps it."""
CHUNK_GENERATION_FIELD: Final = "chunk_generation"
"""Random bytes on the run's counter that ``clear_run`` draws anew before it deletes the run's
chunks; every allocation returns them, so a storage that remembers chunks learns they may be gone
even when that ``clear_run`` failed before deleting the counter (``chunk_memory.py``)."""
CHUNK_GENERATION_BYTES: Final = 16
CHUNK_PROJECTION: Final[Mapping[str, int]] = {"_id": 1, CHUNK_DATA_FIELD: 1}
"""A load reads a chunk's address (its ``_id``) and stored bytes, nothing else."""
SEQUENCE_PROJECTION: Final[Mapping[str, int]] = {"_id": 0, "sequence": 1}
IDEMPOTENCY_PROJECTION: Final[Mapping[str, int]] = {
    "_id": 0,
    "payload_hash": 1,
    "idempotency_hash_version": 1,
    "sequence": 1,
}
"""What a save learns of a stored checkpoint with its id: its identity, and where ``keep_last``
must not prune."""


def run_filter(scope: RunScope) -> dict[str, Any]:
    """Every checkpoint of the run."""
    return {"_kind": CHECKPOINT_KIND, **scope.fields()}


def checkpoint_filter(scope: RunScope, checkpoint_id: str) -> dict[str, Any]:
    """One checkpoint of the run: its deterministic ``_id`` and the complete scope."""
    return {"_id": scope.checkpoint_document_id(checkpoint_id), **run_filter(scope)}


def page_filter(
    scope: RunScope,
    after_sequence: int | None,
    live: Mapping[str, Any] | None = None,
    *,
    unexpired: bool = False,
) -> dict[str, Any]:
    """The run's checkpoints after a page position (all of them without one).

    ``live`` is a signed storage's ledger condition on ``sequence`` (``ledger.LedgerCheck``), a
    range on the same index key and, for deleted sequences, a residual ``$nin``; ``unexpired``
    adds :data:`UNEXPIRED` (a residual ``$expr``).
    """
    query = run_filter(scope)
    condition: dict[str, Any] = dict(live or {})
    if after_sequence is not None:
        condition["$gt"] = after_sequence
    if condition:
        query["sequence"] = condition
    if unexpired:
        query.update(UNEXPIRED)
    return query


def older_than_filter(scope: RunScope, sequence: int) -> dict[str, Any]:
    """The run's checkpoints below ``sequence``: what a ``keep_last`` prune deletes."""
    return {**run_filter(scope), "sequence": {"$lt": sequence}}


def counter_filter(scope: RunScope) -> dict[str, Any]:
    """The run's sequence counter document."""
    return {"_id": scope.counter_document_id, "_kind": COUNTER_KIND, **scope.fields()}


def with_counter(scope: RunScope, query: Mapping[str, Any]) -> dict[str, Any]:
    """``query`` (one unexpired document by ``_id``) or the run's counter: a signed ``load`` reads
    the checkpoint and the run's ledger in one round trip, each branch a point of the ``_id_`` index."""
    return {"$or": [unexpired(query), counter_filter(scope)]}


def run_listing_filter(listing: RunListing, after: RunPosition | None) -> dict[str, Any]:
    """The counters of the listing's tenant and application (and workflow), after a position.

    The tenant fields are stated by equality, so no other tenant's run can match. A counter
    without an allocation time (none written by this version) is not listed until it saves again.
    After a position: strictly older, or as old with a smaller ``_id``. The ``$nor`` is a residual
    filter on the index keys, so the scan stays one range on ``allocated_at``.
    """
    query: dict[str, Any] = {
        "_kind": COUNTER_KIND,
        "tenant_id": listing.tenant_id,
        "application_id": listing.application_id,
    }
    if listing.workflow_name is not None:
        query["workflow_name"] = listing.workflow_name
    if after is None:
        query["allocated_at"] = {"$type": "date"}
    else:
        query["allocated_at"] = {"$lte": after.allocated_at}
        query["$nor"] = [{"allocated_at": after.allocated_at, "_id": {"$gte": after.counter_id}}]
    return query


def run_page_pipeline(
    listing: RunListing,
    after: RunPosition | None,
    *,
    limit: int,
    collection_name: str,
    count_limit: int,
    idle: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One page of runs with each run's retained checkpoints counted, as one ``aggregate``.

    The leading ``$match``, ``$sort`` and ``$limit`` are the run listing's find (one backward walk
    of ``checkpoint_run_activity``). The ``$lookup`` then counts, for each of the page's counters,
    the checkpoints with its ``scope_discriminator`` (``RUN_COUNT_MATCH``). ``$limit`` stops each
    count one past ``count_limit``, so a page reads at most ``limit * (count_limit + 1)`` index
    entries however long its runs are. Nothing reads a payload: ``$count`` keeps no field of what
    it counts. ``idle`` (an ``$expr`` on ``allocated_at``) keeps only idle runs, a residual filter
    on the same walk.
    """
    return [
        {"$match": {**run_listing_filter(listing, after), **(idle or {})}},
        {"$sort": dict(RUN_ACTIVITY_SORT)},
        {"$limit": limit},
        {
            "$lookup": {
                "from": collection_name,
                "localField": "scope_discriminator",
                "foreignField": "scope_discriminator",
                "pipeline": [
                    {"$match": dict(RUN_COUNT_MATCH)},
                    {"$limit": count_limit + 1},
                    {"$count": COUNTED_FIELD},
                ],
                "as": RETAINED_FIELD,
            }
        },
        {"$project": dict(RUN_SUMMARY_PROJECTION)},
    ]


def chunk_filter(scope: RunScope, address: bytes) -> dict[str, Any]:
    """One chunk of the run: its address is its ``_id`` (addresses cover the run's scope)."""
    return {"_id": address, **run_chunks_filter(scope)}


def chunks_filter(scope: RunScope, addresses: list[bytes]) -> dict[str, Any]:
    """These chunks of the run, by address."""
    return {"_id": {"$in": addresses}, **run_chunks_filter(scope)}


def run_chunks_filter(scope: RunScope) -> dict[str, Any]:
    """Every chunk of the run: what ``clear_run`` deletes."""
    return {"_kind": CHUNK_KIND, **scope.fields()}


def chunks_cleared_update() -> list[dict[str, Any]]:
    """What ``clear_run`` sets on the run's counter before deleting its chunks: a new generation,
    drawn here (a pipeline, as every counter update is)."""
    return [{"$set": {CHUNK_GENERATION_FIELD: {"$literal": os.urandom(CHUNK_GENERATION_BYTES)}}}]


def stale_chunks_filter(
    scope: RunScope, touched_before: Mapping[str, Any], addresses: list[bytes] | None = None
) -> dict[str, Any]:
    """The run's chunks no save touched since ``touched_before``, a server-side date expression
    (``$$NOW`` less the grace), among ``addresses``: what a collection reads, then deletes, in
    bounded batches (the cut-off is stated again on the delete, so a chunk a save touched in between
    is spared)."""
    query: dict[str, Any] = {
        **run_chunks_filter(scope),
        "$expr": {"$lt": [f"${CHUNK_TOUCHED_FIELD}", dict(touched_before)]},
    }
    if addresses is not None:
        query["_id"] = {"$in": addresses}
    return query


def insert_if_absent(document: Mapping[str, Any], query: Mapping[str, Any]) -> dict[str, Any]:
    """The update of an upsert on ``query`` that creates exactly ``document`` and changes nothing
    when one matches.

    An upsert seeds the new document with the query's equality fields
    (https://www.mongodb.com/docs/manual/reference/operator/update/setOnInsert/), so only the other
    fields are set, and ``_id`` is never named in the update.
    """
    return {"$setOnInsert": {field: value for field, value in document.items() if field not in query}}
