"""Chunk documents: a chunked checkpoint's leaves, written once per run, fetched for loads, and
collected when no retained checkpoint references them (``docs/adr/0018-chunked-payloads.md``).

A chunk document is ``{_id: address, _kind: CHUNK_KIND, <scope fields>, data, touched_at,
expires_at}``. Its address (32 bytes, the ``_id``) is a SHA-256 over the run's chunk context and
the stored bytes, so the same bytes in two runs are two documents, and a load verifies every
chunk it reads against the address its checkpoint names.

**One round trip per save.** The leaves a save needs go out as one unordered ``bulk_write`` of
single-document updates, which pymongo sends as one ``update`` command (it groups an unordered bulk
by operation type) and, holding no multi-document statement, as a *retryable* write (pymongo
``bulk.py``: a multi-document update makes a bulk non-retryable), so a failover or network error
during it is retried by the driver: an upsert per leaf the storage has not written before (its bytes
under ``$setOnInsert``, so an existing chunk is left as it is), and an ``UpdateOne`` per leaf it wrote
before that *touches* it, moving ``touched_at`` and ``expires_at`` later with ``$max``. A touch
that matches fewer chunks than it names means another process removed some: they are written
again, whole, before the checkpoint that references them is inserted. An upsert that loses an insert
race to another writer of the same leaf (E11000 inside the bulk's ``BulkWriteError``; the server
retries such an upsert itself only when its filter names exactly the unique index's fields,
``write_ops_exec.cpp``, and the chunk filter also names the scope) means the chunk exists: it is
written again, which finds and touches it. Any other write error is raised, categorised by the
codes inside it (``errors.py``).

**Expiry.** A chunk expires no earlier than the latest-expiring checkpoint that references it:
every save moves it with ``$max`` to its own checkpoint's expiry plus a margin (the TTL monitor
removes documents in no particular order). A permanent checkpoint gives its chunks
:data:`PERMANENT_EXPIRY`, the greatest date ``$max`` can hold, so permanence dominates whichever
save comes later, and the TTL monitor never reaches it.

**Touches are coarse.** ``touched_at`` and ``expires_at`` are rounded *up* to a
:data:`TOUCH_WINDOW` boundary, so the saves of one window touch a chunk with equal values and
every touch but the window's first matches without modifying: the server rewrites no document
(a ``$max`` that does not raise the value changes nothing) and logs no oplog entry, while the
matched count still proves every remembered chunk exists. Rounding up only makes a chunk look
touched later and expire later, so neither collection nor expiry can take it sooner. Which chunks a
save touches at all is the storage's ``ChunkMemory`` to say: within the window its last touch fell
in, and under the same counter, none (``chunk_memory.py``).

**Collection** deletes the run's chunks that no retained checkpoint references and that no save
touched within a grace longer than any save takes, so a save that touched or wrote a chunk and has
not yet inserted its checkpoint never loses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Final

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from .._telemetry import count_payload_bytes, count_round_trip
from ..errors import (
    DUPLICATE_KEY_CODES,
    MongoDBConcurrencyError,
    MongoDBMappingError,
    MongoDBSerializationError,
    bulk_failures,
    translated_driver_errors,
)
from .codec.chunks import Chunk
from .documents import MAX_DOCUMENT_BYTES
from .driver import CheckpointCollection, Document
from .indexes import SIMPLE_COLLATION
from .options import MAX_OPERATION_TIMEOUT
from .queries import (
    CHUNK_DATA_FIELD,
    CHUNK_PROJECTION,
    CHUNK_TOUCHED_FIELD,
    chunk_filter,
    chunks_filter,
    run_chunks_filter,
    stale_chunks_filter,
)
from .scope import RunScope

__all__ = [
    "BULK_BYTES",
    "BULK_STATEMENTS",
    "CHUNK_EXPIRY_MARGIN",
    "CLOCK_MARGIN",
    "COLLECTION_GRACE",
    "FETCH_ADDRESSES",
    "PERMANENT_EXPIRY",
    "SERVER_WINDOW_END",
    "TOUCH_WINDOW",
    "check_chunk_sizes",
    "chunk_expiry",
    "collect_unreferenced_chunks",
    "delete_run_chunks",
    "fetch_chunks",
    "window_end",
    "write_chunks",
]

PERMANENT_EXPIRY: Final = datetime(9999, 12, 31, tzinfo=timezone.utc)
CHUNK_EXPIRY_MARGIN: Final = timedelta(hours=1)
"""How much later than the checkpoint that references it a chunk expires: the TTL monitor deletes
in passes of no set order, so a checkpoint may outlive its expiry by a pass while it is loaded."""
_BY_ADDRESS: Final = [("_id", 1)]
_ADDRESS_ONLY: Final = {"_id": 1}
_BY_TOUCH: Final = [(CHUNK_TOUCHED_FIELD, 1)]
"""The order ``checkpoint_chunk_scope`` keeps (scope, then ``touched_at``), so no sort in memory."""
_WRITE_ROUNDS: Final = 3
BULK_STATEMENTS: Final = 10_000
"""Most statements in one chunk bulk: a tenth of MongoDB's ``maxWriteBatchSize`` (100,000)."""
BULK_BYTES: Final = 8 * 1024 * 1024
"""Most chunk data (plus a statement allowance each) in one bulk: half of the 16 MiB a command
document may hold, so pymongo sends each bulk as one command well inside the limit."""
FETCH_ADDRESSES: Final = 50_000
"""Addresses in one ``find``'s ``$in``: about 2.3 MB of BSON (a 32-byte binary and its array key
each), whatever the run's size."""
_STATEMENT_BYTES: Final = 512
"""What one statement costs beside its data: the filter's scope fields and the update."""
TOUCH_WINDOW: Final = timedelta(minutes=15)
_WINDOW_MINUTES: Final = 15
SERVER_WINDOW_END: Final = {
    "$dateAdd": {
        "startDate": {"$dateTrunc": {"date": "$$NOW", "unit": "minute", "binSize": _WINDOW_MINUTES}},
        "unit": "minute",
        "amount": _WINDOW_MINUTES,
    }
}
"""The end of the server's current :data:`TOUCH_WINDOW` (``$dateTrunc`` and ``$dateAdd``: 5.0)."""
CLOCK_MARGIN: Final = timedelta(minutes=5)
"""For the members' clocks, which a failover may swap between a touch and a collection (NTP keeps
them within far less), and the second of slack a request may outlive its deadline by."""
COLLECTION_GRACE: Final = 3 * timedelta(seconds=MAX_OPERATION_TIMEOUT) + TOUCH_WINDOW + CLOCK_MARGIN
"""How long after its last touch an unreferenced chunk is spared (3 h 20 min): three of the longest
operations any storage can run (``operation_timeout`` is at most an hour) plus the window a touch is
rounded into, and a margin. Two operations are the saves that ADR 0029's bound spans (the one that
touched the chunk, and a later save in the same window that left its touch out); the third is the
collection itself, which reads the run's references and deletes afterwards, so a save that inserts
in between is not among the references it read (issue 29). Both ends are the server's clock, so no
writer's or collector's clock decides."""
SERVER_CUTOFF: Final = {
    "$dateSubtract": {
        "startDate": "$$NOW",
        "unit": "millisecond",
        "amount": int(COLLECTION_GRACE / timedelta(milliseconds=1)),
    }
}
"""The collection cut-off, evaluated by the server: its ``$$NOW`` less :data:`COLLECTION_GRACE`."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
# A chunk document beyond its data: _id, kind and scope fields (identifiers up to 1 KiB each),
# dates and BSON framing; measured generously, so the check needs no encoding.
_CHUNK_OVERHEAD: Final = 6 * 1024


def check_chunk_sizes(chunks: Sequence[Chunk]) -> None:
    """Raise, before any I/O, if a chunk document would exceed MongoDB's document limit.

    Raises:
        MongoDBSerializationError: One leaf is too large to store (an element of the state that
            the split cannot cut, such as a tuple of millions of items).
    """
    largest = max((len(chunk.data) for chunk in chunks), default=0)
    if largest + _CHUNK_OVERHEAD > MAX_DOCUMENT_BYTES:
        raise MongoDBSerializationError(
            f"A chunk of the checkpoint would be {largest:,} bytes; MongoDB stores at most "
            f"{MAX_DOCUMENT_BYTES:,} bytes per document. Split the value into smaller ones."
        )


async def write_chunks(
    collection: CheckpointCollection,
    scope: RunScope,
    upserts: Sequence[Chunk],
    touches: Sequence[Chunk],
    *,
    expiry: datetime,
) -> None:
    """Store ``upserts`` for the run and touch ``touches`` (chunks stored before), moving each to
    ``expiry`` and to now by the server's clock: one round trip; one more when a touched chunk was
    removed meanwhile, or another writer inserted a new one first.

    Raises:
        MongoDBConcurrencyError: Chunks kept vanishing or racing for :data:`_WRITE_ROUNDS` rounds
            (``retryable``).
        MongoDBIntegrationError: Other driver errors, translated by the codes inside them.
    """
    for _ in range(_WRITE_ROUNDS):
        outcome = await _write_batched(collection, scope, upserts, touches, expiry=expiry)
        # A chunk another writer inserted between this upsert's query and its insert exists now
        # (E11000: the server retries only upserts whose filter is exactly the unique key's fields);
        # it is written again, which finds it and touches it. A touch that matched fewer chunks than
        # it named means some were removed: those are written again, whole.
        again = [upserts[index] for index in sorted(outcome.raced)]
        if outcome.touched < len(touches):
            again += touches
        if not again:
            return
        upserts, touches = again, []
    raise MongoDBConcurrencyError(
        "The checkpoint's chunks kept being removed or raced by other writers while it was saved; "
        "nothing was stored for it. Retry the save.",
        retryable=True,
    )


def chunk_expiry(expires_at: datetime | None) -> datetime:
    """The expiry a save moves its chunks to: its checkpoint's plus :data:`CHUNK_EXPIRY_MARGIN`,
    rounded up to a window, or :data:`PERMANENT_EXPIRY` for a permanent checkpoint."""
    return PERMANENT_EXPIRY if expires_at is None else window_end(expires_at + CHUNK_EXPIRY_MARGIN)


def window_end(moment: datetime) -> datetime:
    """``moment`` rounded up to the next :data:`TOUCH_WINDOW` boundary (itself if on one)."""
    windows = -((_EPOCH - moment) // TOUCH_WINDOW)  # ceiling division of timedeltas
    return _EPOCH + windows * TOUCH_WINDOW


def _requests(
    scope: RunScope, upserts: Sequence[Chunk], touches: Sequence[Chunk], *, expiry: datetime
) -> list[UpdateOne]:
    """One single-document statement per chunk, upserts first: a bulk without a multi-document
    statement is a retryable write, so pymongo retries it across a failover (``bulk.py``).

    Each is a one-stage pipeline, so the server's clock (``$$NOW``) decides ``touched_at``; an
    upsert keeps stored ``data`` (``$ifNull``: an existing chunk is left as it is) and is seeded
    with the filter's kind, scope and ``_id``."""
    collation = dict(SIMPLE_COLLATION)
    return [
        *(
            UpdateOne(
                chunk_filter(scope, chunk.address),
                [
                    {
                        "$set": {
                            CHUNK_DATA_FIELD: {"$ifNull": [f"${CHUNK_DATA_FIELD}", {"$literal": chunk.data}]},
                            **_later(expiry),
                        }
                    }
                ],
                upsert=True,
                collation=collation,
            )
            for chunk in upserts
        ),
        *(
            UpdateOne(chunk_filter(scope, chunk.address), [{"$set": _later(expiry)}], collation=collation)
            for chunk in touches
        ),
    ]


def _later(expiry: datetime) -> dict[str, Any]:
    """Move ``touched_at`` to the end of the server's current window, and ``expires_at`` to
    ``expiry`` (the checkpoint's own expiry plus the margin, from the save), never earlier."""
    # $max skips a missing operand, so a new chunk takes the window's end and the expiry as given.
    return {
        CHUNK_TOUCHED_FIELD: {"$max": [f"${CHUNK_TOUCHED_FIELD}", SERVER_WINDOW_END]},
        "expires_at": {"$max": ["$expires_at", {"$literal": expiry}]},
    }


async def _write_batched(
    collection: CheckpointCollection,
    scope: RunScope,
    upserts: Sequence[Chunk],
    touches: Sequence[Chunk],
    *,
    expiry: datetime,
) -> _Outcome:
    """Send the statements in bulks of at most :data:`BULK_STATEMENTS` statements and
    :data:`BULK_BYTES` bytes of chunk data, so no command nears MongoDB's 16 MiB or 100,000
    statements whatever the run's size (one bulk for every save but the largest)."""
    touched = 0
    raced: set[Chunk] = set()
    for upsert_batch, touch_batch in _bulks(upserts, touches):
        requests = _requests(scope, upsert_batch, touch_batch, expiry=expiry)
        outcome = await _write(collection, requests, len(upsert_batch))
        count_payload_bytes(sum(len(chunk.data) for chunk in upsert_batch))
        touched += outcome.touched
        raced.update(upsert_batch[index] for index in outcome.raced)
    return _Outcome(touched, frozenset(index for index, chunk in enumerate(upserts) if chunk in raced))


def _bulks(upserts: Sequence[Chunk], touches: Sequence[Chunk]) -> Iterator[tuple[list[Chunk], list[Chunk]]]:
    """Consecutive groups of the statements, upserts first, each within the bulk limits."""
    upsert_batch: list[Chunk] = []
    touch_batch: list[Chunk] = []
    size = 0
    for chunk, is_upsert in [*((chunk, True) for chunk in upserts), *((chunk, False) for chunk in touches)]:
        weight = len(chunk.data) + _STATEMENT_BYTES if is_upsert else _STATEMENT_BYTES
        if upsert_batch or touch_batch:
            full = len(upsert_batch) + len(touch_batch) >= BULK_STATEMENTS or size + weight > BULK_BYTES
            if full:
                yield upsert_batch, touch_batch
                upsert_batch, touch_batch, size = [], [], 0
        (upsert_batch if is_upsert else touch_batch).append(chunk)
        size += weight
    if upsert_batch or touch_batch:
        yield upsert_batch, touch_batch


@dataclasses.dataclass(frozen=True, slots=True)
class _Outcome:
    """What one chunk bulk did: how many of its touches matched, and which of its upserts (by
    position) lost an insert race to another writer."""

    touched: int
    raced: frozenset[int]


async def _write(collection: CheckpointCollection, requests: list[UpdateOne], upserts: int) -> _Outcome:
    """Send ``requests`` (``upserts`` upserts first, then the touches)."""
    if not requests:
        return _Outcome(0, frozenset())
    with translated_driver_errors(operation="write", action="store the checkpoint's chunks"):
        count_round_trip()
        try:
            result = await collection.bulk_write(requests, ordered=False)
        except BulkWriteError as error:
            return _outcome_of_races(error, upserts)
    # An upsert that found its chunk counts as matched, as the touches do.
    return _Outcome(result.matched_count - (upserts - result.upserted_count), frozenset())


def _outcome_of_races(error: BulkWriteError, upserts: int) -> _Outcome:
    """The outcome of a bulk whose only failures are upserts that lost an insert race; any other
    failure is raised (translated by the caller from the codes inside it)."""
    failures = bulk_failures(error)
    raced = frozenset(failures.codes)
    if (
        failures.write_concern_failed
        or any(code not in DUPLICATE_KEY_CODES for code in failures.codes.values())
        or not all(0 <= index < upserts for index in raced)
    ):
        raise error
    return _Outcome(failures.matched - (upserts - failures.upserted - len(raced)), raced)


async def fetch_chunks(
    collection: CheckpointCollection, scope: RunScope, addresses: Iterable[bytes], *, max_bytes: int
) -> dict[bytes, object]:
    """The run's stored chunks among ``addresses``: address -> stored bytes (unverified).

    Read as a stream, one cursor batch at a time, and refused once the chunks read pass
    ``max_bytes``: what a load may fetch is bounded whatever the stored documents hold (their data
    is verified against the addresses only after the fetch).

    Raises:
        MongoDBMappingError: The chunks pass ``max_bytes``.
    """
    wanted = sorted(set(addresses))
    found: dict[bytes, object] = {}
    fetched = 0
    # One find per FETCH_ADDRESSES addresses, so the query stays far below 16 MiB for any run.
    for start in range(0, len(wanted), FETCH_ADDRESSES):
        batch = wanted[start : start + FETCH_ADDRESSES]
        with translated_driver_errors(operation="read", action="read the checkpoint's chunks"):
            count_round_trip()  # find() sends nothing; the first batch is the round trip
            cursor = collection.find(
                chunks_filter(scope, batch),
                CHUNK_PROJECTION,
                sort=_BY_ADDRESS,
                limit=0,
                collation=SIMPLE_COLLATION,
            )
            async for document in cursor:
                data = document.get(CHUNK_DATA_FIELD)
                fetched += len(data) if isinstance(data, bytes) else 0
                if fetched > max_bytes:
                    raise MongoDBMappingError(
                        "A stored checkpoint's chunks are larger than the checkpoint size limit; they were "
                        "modified outside this storage."
                    )
                found[_address_of(document)] = data
    count_payload_bytes(fetched)
    return found


async def collect_unreferenced_chunks(
    collection: CheckpointCollection, scope: RunScope, referenced: Iterable[bytes]
) -> int:
    """Delete the run's chunks outside ``referenced`` that no save touched within
    :data:`COLLECTION_GRACE` of the server's clock.

    Reads the addresses of the run's stale chunks (one ``find`` through ``checkpoint_chunk_scope``),
    then deletes those no retained checkpoint references in batches of :data:`FETCH_ADDRESSES`:
    no command grows with the run (a ``$nin`` of every referenced address did, past 16 MiB at about
    350,000 chunks). Returns how many were deleted.
    """
    touched_before = SERVER_CUTOFF
    kept = set(referenced)
    with translated_driver_errors(operation="read", action="find stale chunks"):
        count_round_trip()  # find() sends nothing; to_list() sends the query, then cursor batches
        cursor = collection.find(
            stale_chunks_filter(scope, touched_before),
            _ADDRESS_ONLY,
            sort=_BY_TOUCH,
            limit=0,
            collation=SIMPLE_COLLATION,
        )
        stale = [_address_of(document) for document in await cursor.to_list(None)]
    doomed = sorted(address for address in stale if address not in kept)
    deleted = 0
    for start in range(0, len(doomed), FETCH_ADDRESSES):
        batch = doomed[start : start + FETCH_ADDRESSES]
        with translated_driver_errors(operation="write", action="delete unreferenced chunks"):
            count_round_trip()
            result = await collection.delete_many(
                stale_chunks_filter(scope, touched_before, batch), collation=SIMPLE_COLLATION
            )
        deleted += result.deleted_count
    return deleted


async def delete_run_chunks(collection: CheckpointCollection, scope: RunScope) -> int:
    """Delete every chunk of the run (``clear_run``); the caller translates driver errors."""
    count_round_trip()
    result = await collection.delete_many(run_chunks_filter(scope), collation=SIMPLE_COLLATION)
    return result.deleted_count


def _address_of(document: Document) -> bytes:
    address: Any = document.get("_id")
    return bytes(address) if isinstance(address, bytes) else b""
