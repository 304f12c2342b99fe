"""Per-run sequence numbers: one atomic counter upsert per save, with recovery.

Each run has one counter document beside its checkpoints. A save allocates by a single
``find_one_and_update`` with an aggregation-pipeline upsert, so concurrent saves receive unique,
positive, increasing numbers and the first saves of a new run cannot fail on its creation.

A counter can vanish while checkpoints remain (TTL removes documents in any order; an operator
may delete it). A new counter would then restart below retained sequences, so every counter
records ``sequence_checked``: whether its value is known to be at least the greatest retained
checkpoint sequence. Only a counter that is not yet checked costs the recovery read, which fetches
the greatest retained sequence through the sequence index and then either marks the counter checked
(the allocation was already above it) or allocates again from that floor. A checked counter costs
one round trip. The read does not wait for the allocation's reply, nor the marking for the insert:
``SequenceAllocator`` sends each beside the other when it expects them, so a save waits for two
round trips from a run's first save on (ADR 0006, amended for issue 22).

A save that allocated from a counter which was then deleted may still insert after a new counter
was created and checked. So a new counter carries ``recheck_until`` (its creation plus a grace
longer than any save can take), and until then every allocation reads the retained maximum and no
check marks it: the first check after the grace sees every such late insert. ``allocated_at``
(the server's ``$$NOW`` at each allocation) tells the storage whether an allocation fell in the
grace. Both dates are the server's, so no client clock decides anything. See
docs/adr/0006-sequence-allocation.md for the reasoning and the races.

The run's summary rides on it too (``list_runs``, specs/storage.md "Run discovery"): each
allocation records the checkpoint id it allocated for and whether that checkpoint waits for input,
and a save's first allocation counts the save in ``allocations`` (a recovery's re-allocation, or a
save's next attempt after a collision, counts nothing more), so the summary costs no extra round
trip. It describes the latest *allocation*: a save that fails after allocating, or an identical
retry, still moves it and is counted. A retry that pymongo sends itself (a retryable write) is
applied once by the server, so it is counted once.

The run's epoch rides on it as well: the update that creates a counter draws 16 random bytes
(``run_epoch``) that every later update keeps, and each allocation returns them with the number, so
a save stores and signs the lifetime of the counter that numbered it (``ledger.py``).

Retention rides on the same update: an expiring save moves the counter's ``expires_at`` only
forward; a non-expiring save makes the counter permanent, and permanent is dominant. A counter
written before ``retention_mode`` existed (a sequence without ``expires_at``) counts as permanent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from bson.errors import BSONError
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from .._telemetry import count_round_trip
from ..errors import (
    DRIVER_ERRORS,
    MongoDBIntegrationError,
    MongoDBPersistenceError,
    translate_driver_error,
    translated_driver_errors,
)
from .concurrency import concurrently
from .documents import as_utc
from .driver import CheckpointCollection
from .indexes import SIMPLE_COLLATION
from .ledger import new_epoch
from .queries import (
    CHUNK_GENERATION_BYTES,
    CHUNK_GENERATION_FIELD,
    DESCENDING_SEQUENCE,
    SEQUENCE_PROJECTION,
    counter_filter,
    run_filter,
)
from .scope import RunScope
from .signatures import EPOCH_BYTES, EPOCH_FIELD

__all__ = [
    "Allocation",
    "RunActivity",
    "SequenceAllocator",
    "allocate_sequence",
    "retained_maximum",
    "sequence_of",
]

_Result = TypeVar("_Result")

PERMANENT: Final = "permanent"
EXPIRING: Final = "expiring"

_COUNTER_PROJECTION: Final = {
    "_id": 0,
    "sequence": 1,
    "sequence_checked": 1,
    "recheck_until": 1,
    "allocated_at": 1,
    EPOCH_FIELD: 1,
    CHUNK_GENERATION_FIELD: 1,
}
_UPSERT_ATTEMPTS: Final = 3


@dataclasses.dataclass(frozen=True, slots=True)
class RunActivity:
    """What a save records on the run's counter for ``list_runs``: nothing decoded later."""

    checkpoint_id: str
    waiting_for_input: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Allocation:
    """A sequence number and the run epoch of the counter that allocated it (``ledger.py``)."""

    sequence: int
    epoch: bytes
    allocated_at: datetime | None = None
    """The server's ``$$NOW`` when it allocated (``None`` if the counter returned no date)."""
    chunk_lineage: bytes | None = None
    """The run's chunk set as the counter names it: its epoch and the chunk generation
    ``clear_run`` last drew; equal lineages mean no ``clear_run`` deleted the run's chunks in
    between. ``None`` when the counter holds an invalid generation, which no save may rely on."""
    check: _Check | None = dataclasses.field(default=None, repr=False)
    """A check this allocation made and has yet to record (``SequenceAllocator.record_check``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Check:
    """A retained maximum read below an allocation, and the counter update that records it."""

    update: _CounterUpdate
    retained: int


class SequenceAllocator:
    """Allocates the sequence numbers of one storage's run.

    It remembers whether the run's counter was checked when this storage last allocated from it.
    While it may not be (a storage's first save, a new counter's grace), the retained-maximum
    read goes out beside the allocation, and a check found below the allocation is recorded
    beside the insert (``record_check``), so a save waits for two round trips from a run's first
    save on. That memory only decides what is sent together; what the counter returns decides
    everything else, so a counter lost since this storage saw it checked is still checked (one
    round trip later).
    """

    def __init__(
        self, collection: CheckpointCollection, scope: RunScope, *, recheck_grace: timedelta
    ) -> None:
        self._collection = collection
        self._scope = scope
        self._recheck_grace = recheck_grace
        self._expects_check = True

    async def allocate(
        self, *, activity: RunActivity, expires_at: datetime | None, recover: bool = False
    ) -> Allocation:
        """Allocate the next sequence number of the run, with the run's epoch.

        Args:
            activity: The checkpoint being saved, as the run's summary records it.
            expires_at: The saved checkpoint's expiry, or ``None`` for a permanent checkpoint.
            recover: Check against the retained maximum even if the counter says it is checked;
                the caller sets it after an insert collided on the sequence index. A save's first
                attempt is the one without it, and only that attempt's first update counts the save.
        """
        update = _CounterUpdate(self._collection, self._scope, activity, expires_at, self._recheck_grace)
        allocating = update.advance(floor=None, increment=1, upsert=True, counts_save=not recover)
        retained: int | None = None
        if recover or self._expects_check:
            # Issued after this save started, so the read sees every checkpoint of a save that
            # returned before it, whichever of the two the server runs first.
            counter, retained = await concurrently(
                allocating, retained_maximum(self._collection, self._scope)
            )
        else:
            counter = await allocating
        allocation = _allocation_of(counter)
        if _is_trusted(counter) and not recover:
            self._expects_check = False
            return allocation
        if retained is None:
            retained = await retained_maximum(self._collection, self._scope)
        if retained < allocation.sequence:
            # Already above every retained checkpoint. Record that without spending a number, unless
            # the counter is in its grace, where no check may mark it.
            in_grace = _in_grace(counter)
            self._expects_check = in_grace
            if not in_grace and counter.get("sequence_checked") is not True:
                return dataclasses.replace(allocation, check=_Check(update, retained))
            return allocation
        counter = await update.advance(floor=retained, increment=1, upsert=True, counts_save=False)
        self._expects_check = not _is_trusted(counter)
        return _allocation_of(counter)

    async def recording_check(self, allocation: Allocation, request: Awaitable[_Result]) -> _Result:
        """Await ``request`` (the save's insert), with ``allocation``'s check recorded beside it
        when it has one; a save with none creates no task (two tasks cost about 16 µs, measured
        beside a 0.7 ms save)."""
        if allocation.check is None:
            return await request
        result, _ = await concurrently(request, self.record_check(allocation))
        return result

    async def record_check(self, allocation: Allocation) -> None:
        """Mark the counter checked when ``allocation`` found it is: sent beside the insert.

        A failure is not raised, since the save's own outcome is the insert's; the next save
        checks again. If the counter vanished meanwhile this updates nothing, and the next save
        checks again too.
        """
        check = allocation.check
        if check is None:
            return
        try:
            await check.update.advance(floor=check.retained, increment=0, upsert=False, counts_save=False)
        except MongoDBIntegrationError:
            self._expects_check = True


async def allocate_sequence(
    collection: CheckpointCollection,
    scope: RunScope,
    *,
    activity: RunActivity,
    expires_at: datetime | None,
    recheck_grace: timedelta,
) -> Allocation:
    """One allocation outside a save, its check recorded before it returns."""
    allocator = SequenceAllocator(collection, scope, recheck_grace=recheck_grace)
    allocation = await allocator.allocate(activity=activity, expires_at=expires_at)
    await allocator.record_check(allocation)
    return allocation


async def retained_maximum(collection: CheckpointCollection, scope: RunScope) -> int:
    """The greatest sequence among the run's stored checkpoints, or 0 if it has none."""
    with translated_driver_errors(operation="read", action="read the greatest sequence"):
        count_round_trip()
        document = await collection.find_one(
            run_filter(scope), SEQUENCE_PROJECTION, sort=DESCENDING_SEQUENCE, collation=SIMPLE_COLLATION
        )
    if document is None:
        return 0
    return sequence_of(document)


class _CounterUpdate:
    """The one counter update a save issues, with what stays the same across its attempts."""

    def __init__(
        self,
        collection: CheckpointCollection,
        scope: RunScope,
        activity: RunActivity,
        expires_at: datetime | None,
        recheck_grace: timedelta,
    ) -> None:
        self._collection = collection
        self._query = counter_filter(scope)
        self._activity = activity
        self._expires_at = expires_at
        self._grace_ms = int(recheck_grace / timedelta(milliseconds=1))

    async def advance(
        self, *, floor: int | None, increment: int, upsert: bool, counts_save: bool
    ) -> Mapping[str, Any]:
        pipeline = _counter_pipeline(
            activity=self._activity,
            expires_at=self._expires_at,
            floor=floor,
            increment=increment,
            grace_ms=self._grace_ms,
            counts_save=counts_save,
        )
        for attempt in range(1, _UPSERT_ATTEMPTS + 1):
            count_round_trip()
            try:
                counter = await self._collection.find_one_and_update(
                    self._query,
                    pipeline,
                    _COUNTER_PROJECTION,
                    upsert=upsert,
                    return_document=ReturnDocument.AFTER,
                    collation=SIMPLE_COLLATION,
                )
            except DuplicateKeyError as error:
                # Two first saves of a run both found no counter and both inserted one. The server
                # retries such an upsert itself only when the filter's equality fields are exactly
                # the unique index's keys; ours also states the scope, so the loser retries here and
                # then finds the counter to update. See "Upsert with Unique Index" in
                # https://www.mongodb.com/docs/manual/reference/method/db.collection.findOneAndUpdate/
                if not upsert or attempt == _UPSERT_ATTEMPTS:
                    raise _allocation_error(error) from error
            except DRIVER_ERRORS as error:
                raise _allocation_error(error) from error
            else:
                return {} if counter is None else counter
        raise AssertionError("unreachable: the last attempt returns or raises")


def _allocation_error(error: PyMongoError | BSONError) -> MongoDBIntegrationError:
    return translate_driver_error(error, operation="write", action="allocate a sequence")


def _counter_pipeline(
    *,
    activity: RunActivity,
    expires_at: datetime | None,
    floor: int | None,
    increment: int,
    grace_ms: int,
    counts_save: bool,
) -> Sequence[Mapping[str, Any]]:
    """One ``$set`` stage: every expression reads the counter as it was before this update.

    ``floor`` is a retained maximum just read, or ``None``; applying one makes the counter checked,
    unless the counter is in its grace. ``counts_save``: this update is a save's first, which adds
    the save to ``allocations`` (the summary's ``saves``).
    """
    current = {"$ifNull": ["$sequence", 0]}
    created = {"$eq": [{"$type": "$sequence"}, "missing"]}
    # Set once, when this update creates the counter; null for a counter from before the field
    # existed, which is never in a grace.
    recheck_until = {"$ifNull": ["$recheck_until", {"$cond": [created, {"$add": ["$$NOW", grace_ms]}, None]}]}
    # BSON orders null below every date, so a null recheck_until is always past.
    grace_over = {"$gte": ["$$NOW", recheck_until]}
    # A counter from before `sequence_checked` existed was kept by an allocator that always read
    # the retained maximum first: a present sequence without the flag counts as checked.
    was_checked = {"$ifNull": ["$sequence_checked", {"$gt": [current, 0]}]}
    stage: dict[str, Any] = {
        "sequence": {"$add": [{"$max": [current, floor or 0]}, increment]},
        "sequence_checked": grace_over if floor is not None else was_checked,
        "recheck_until": recheck_until,
        "allocated_at": "$$NOW",
        # The run's summary: the saves made (kept under the field's first name). A counter from
        # before `allocations` existed counts its sequence.
        "allocations": {"$add": [{"$ifNull": ["$allocations", current]}, int(counts_save)]},
        # Drawn by the update that creates the counter (or first touches one from before epochs),
        # kept by every later one: the run's lifetime, which a signature binds (ledger.py).
        EPOCH_FIELD: {"$ifNull": [f"${EPOCH_FIELD}", {"$literal": new_epoch()}]},
    }
    if increment:
        # Only an update that allocates names the latest checkpoint. A check that marks the
        # counter (increment 0) may run after a concurrent save allocated a higher number, and
        # must not rename that save's checkpoint (ADR 0015).
        stage["latest_checkpoint_id"] = {"$literal": activity.checkpoint_id}
        stage["waiting_for_input"] = {"$literal": activity.waiting_for_input}
    stage.update(_retention_fields(expires_at))
    return [{"$set": stage}]


def _retention_fields(expires_at: datetime | None) -> dict[str, Any]:
    if expires_at is None:
        return {"retention_mode": PERMANENT, "expires_at": "$$REMOVE"}
    legacy_permanent = {
        "$and": [
            {"$eq": [{"$type": "$retention_mode"}, "missing"]},
            {"$ne": [{"$type": "$sequence"}, "missing"]},
            {"$eq": [{"$type": "$expires_at"}, "missing"]},
        ]
    }
    permanent = {"$or": [{"$eq": ["$retention_mode", PERMANENT]}, legacy_permanent]}
    later = {"$max": [{"$ifNull": ["$expires_at", expires_at]}, expires_at]}
    return {
        "retention_mode": {"$cond": [permanent, PERMANENT, EXPIRING]},
        "expires_at": {"$cond": [permanent, "$$REMOVE", later]},
    }


def _in_grace(counter: Mapping[str, Any]) -> bool:
    """Whether this allocation fell in the counter's grace, where marking it would be a wasted
    round trip; both dates are the server's."""
    recheck_until = counter.get("recheck_until")
    allocated_at = counter.get("allocated_at")
    if not isinstance(recheck_until, datetime) or not isinstance(allocated_at, datetime):
        return False
    return allocated_at < recheck_until


def _is_trusted(counter: Mapping[str, Any]) -> bool:
    """Whether this allocation may skip the recovery read. No check made during a counter's grace
    marks it (the server decides that with ``$$NOW``), so a counter in its grace is never trusted."""
    return counter.get("sequence_checked") is True


def _allocation_of(counter: Mapping[str, Any]) -> Allocation:
    epoch = counter.get(EPOCH_FIELD)
    if type(epoch) is not bytes or len(epoch) != EPOCH_BYTES:
        raise MongoDBPersistenceError("The run's sequence counter holds no valid run epoch.")
    allocated_at = counter.get("allocated_at")
    return Allocation(
        sequence_of(counter),
        epoch,
        as_utc(allocated_at) if isinstance(allocated_at, datetime) else None,
        _chunk_lineage(epoch, counter.get(CHUNK_GENERATION_FIELD, b"")),
    )


def _chunk_lineage(epoch: bytes, generation: object) -> bytes | None:
    """The epoch and the chunk generation (none until a ``clear_run`` draws one), or ``None``
    for a generation no ``clear_run`` wrote."""
    if type(generation) is not bytes or len(generation) not in (0, CHUNK_GENERATION_BYTES):
        return None
    return epoch + generation


def sequence_of(document: Mapping[str, Any]) -> int:
    """The document's sequence as a plain ``int``, whichever BSON integer width the server returns.

    Checkpoints store it as int64 (``bson.int64.Int64`` in Python). The counter starts as int32,
    because the update's literals are, and becomes int64 for good once an operand is int64 or a
    sum passes 2**31 - 1: the server's ``$add`` and ``$max`` keep the widest operand's type
    (specs/storage.md "Sequences"; the in-process engine's DIVERGENCES.md entry 23). Nothing here
    depends on which.
    """
    sequence = document.get("sequence")
    if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0:
        raise MongoDBPersistenceError("The run's sequence counter holds a value that is not a sequence.")
    return int(sequence)
