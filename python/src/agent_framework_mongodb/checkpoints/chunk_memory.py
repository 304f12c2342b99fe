"""What a storage knows of the chunks it stored for its run, and which of them a save must touch.

A chunked save names every leaf of its checkpoint. A leaf this storage never wrote is upserted; one
it wrote is *touched* (``chunk_store.py``): ``touched_at`` and ``expires_at`` moved later, and the
match counted, which proves the chunk still exists. Within a touch window a touch changes nothing,
yet each is a statement of about 560 bytes of BSON (the full-scope filter and the touch pipeline):
at 1,000 supersteps about 70 of them, 40 KB a save, 55x what the superstep added
(``benchmarks/results/long_runs.md``, 2026-12-03 12:52).

So the storage keeps, for each chunk, a :class:`ChunkStamp` of the save that last wrote or touched
it, and a later save leaves the touch out while the stamp still *covers* the chunk:

- **No collection can reach it.** The save's allocation falls before the stamp's window end (the
  server's ``allocated_at``, by the server's clock). The stamped write ran during its own save, so
  within ``MAX_OPERATION_TIMEOUT`` of that save's allocation; this save inserts within as long of
  its own allocation, and the two allocations are less than a ``TOUCH_WINDOW`` apart. So the
  chunk's ``touched_at`` is less than ``2 x MAX_OPERATION_TIMEOUT + TOUCH_WINDOW`` before the
  insert. A collection that read the run's references before that insert deletes within one more
  ``MAX_OPERATION_TIMEOUT``, and ``COLLECTION_GRACE`` (three of them, the window and a margin)
  spares the chunk through it. A skipped chunk keeps its old stamp, so skips cannot stretch the
  bound.
- **No ``clear_run`` deleted it.** The allocation's chunk lineage (the counter's epoch, and the
  chunk generation ``clear_run`` draws before it deletes chunks) is the stamp's.
- **Expiry cannot take it first.** The expiry this save would set is no later than the stamp's;
  ``$max`` kept the stored one at least that.
- **No failover lost it.** Only under a ``w: "majority"`` write concern, stated by the collection
  (the client or the URI): a write a majority acknowledged is not rolled back. With ``w: 1``, or
  none stated (the server's implicit default may be ``w: 1``: a primary-secondary-arbiter set), a
  primary can acknowledge a chunk and fail before any secondary has it; the new primary keeps the
  counter's lineage, so nothing else would tell. Such a storage stamps nothing and touches every
  remembered chunk, whose matched count finds one gone and has it written again (issue 29).

The chunk write goes out beside the allocation, so which touches to leave out is decided before
the allocation's reply, from an estimate of the server's clock (the last allocation's
``allocated_at`` plus the monotonic time since). The reply then decides: a deferred chunk its
stamp does not cover is touched, or under another lineage written whole, in one more round trip
before the insert. The client's clock only chooses what is sent together, never what is skipped.

A chunk deleted by hand (not by ``clear_run``, a prune's collection or the TTL monitor) is
noticed by the first save of the next window at the latest; until then a save may reference it,
and that checkpoint's load fails with ``MongoDBMappingError`` (specs/storage.md "Chunks").
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from .chunk_store import chunk_expiry, window_end
from .codec.chunks import Chunk
from .sequences import Allocation

__all__ = ["ChunkMemory", "ChunkStamp", "ChunkWrites"]

_MEMORY_LIMIT: Final = 100_000
"""Addresses a storage remembers: about 5 MB, a checkpoint of 3 GiB in 32 KiB leaves."""
_ESTIMATE_MARGIN: Final = timedelta(minutes=1)
"""How far inside a window the estimated server clock must be for a touch to be deferred: more
than the round trips and clock drift between two saves, so the reply rarely disagrees (a second
round trip when it does), and the last minute of each window touches beside the allocation."""


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkStamp:
    """What holds for a chunk after the save that last wrote or touched it."""

    lineage: bytes
    """The chunk lineage of that save's allocation (``Allocation.chunk_lineage``)."""
    window_end: datetime
    """The end of the server's touch window at that save's allocation."""
    expiry: datetime
    """The expiry that save set: the stored ``expires_at`` is at least this."""

    def covers(self, allocation: Allocation, expiry: datetime) -> bool:
        """Whether a save allocated as ``allocation``, setting ``expiry``, may leave the touch out."""
        allocated_at = allocation.allocated_at
        return (
            allocation.chunk_lineage == self.lineage
            and allocated_at is not None
            and self.spans(allocated_at, expiry)
        )

    def spans(self, moment: datetime, expiry: datetime) -> bool:
        """Whether a save at ``moment`` (the server's time) setting ``expiry`` is within the
        window and the expiry of this stamp; the lineage is the allocation's to say."""
        return moment < self.window_end and expiry <= self.expiry


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkWrites:
    """One save's chunks, as sent beside its allocation and as deferred until its reply."""

    upserts: tuple[Chunk, ...]
    """Chunks this storage does not remember: written whole."""
    touches: tuple[Chunk, ...]
    """Remembered chunks whose stamp may not cover this save: touched."""
    deferred: tuple[Chunk, ...]
    """Remembered chunks whose stamp the estimate says covers this save: the reply decides."""
    expiry: datetime
    """The expiry the save moves its chunks to (``chunk_store.chunk_expiry``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _ServerClock:
    """The last server time an allocation returned, and the monotonic time it was read."""

    server: datetime
    monotonic: float

    def estimate(self) -> datetime:
        return self.server + timedelta(seconds=time.monotonic() - self.monotonic)


class ChunkMemory:
    """The chunks a storage wrote (after proving them) for its run, newest kept, with a stamp each.

    Only a hint: a remembered chunk is touched, or left alone while its stamp covers the save,
    instead of sent, and written again if a touch finds it gone. Never shared between runs
    (addresses differ by run anyway).
    """

    __slots__ = ("_clock", "_leave_out", "_stamps")

    def __init__(self, *, leave_out_touches: bool) -> None:
        """``leave_out_touches``: whether stamps may cover chunks at all, which only a majority write
        concern allows (see the module's docstring); without it every remembered chunk is touched."""
        self._stamps: dict[bytes, ChunkStamp | None] = {}
        self._clock: _ServerClock | None = None
        self._leave_out = leave_out_touches

    def __contains__(self, address: object) -> bool:
        return address in self._stamps

    def __bool__(self) -> bool:
        return bool(self._stamps)

    def plan(self, chunks: Sequence[Chunk], expires_at: datetime | None) -> ChunkWrites:
        """Sort a save's chunks into upserts, touches and deferred touches (no I/O)."""
        expiry = chunk_expiry(expires_at)
        estimated = None if self._clock is None else self._clock.estimate() + _ESTIMATE_MARGIN
        upserts: list[Chunk] = []
        touches: list[Chunk] = []
        deferred: list[Chunk] = []
        for chunk in chunks:
            if chunk.address not in self._stamps:
                upserts.append(chunk)
                continue
            stamp = self._stamps[chunk.address]
            likely = stamp is not None and estimated is not None and stamp.spans(estimated, expiry)
            (deferred if likely else touches).append(chunk)
        return ChunkWrites(tuple(upserts), tuple(touches), tuple(deferred), expiry)

    def follow_up(self, writes: ChunkWrites, allocation: Allocation) -> tuple[list[Chunk], list[Chunk]]:
        """What the save must still send before its insert, now that its allocation returned:
        the deferred chunks written whole (another lineage: a ``clear_run`` may have deleted them)
        and those touched (their stamp's window passed)."""
        if allocation.allocated_at is not None:
            self._clock = _ServerClock(allocation.allocated_at, time.monotonic())
        upserts: list[Chunk] = []
        touches: list[Chunk] = []
        for chunk in writes.deferred:
            stamp = self._stamps.get(chunk.address)
            if stamp is not None and stamp.covers(allocation, writes.expiry):
                continue
            if stamp is None or stamp.lineage != allocation.chunk_lineage:
                upserts.append(chunk)
            else:
                touches.append(chunk)
        return upserts, touches

    def remember(self, writes: ChunkWrites, allocation: Allocation, followed: Sequence[Chunk]) -> None:
        """Record the save's chunks as stored: those it wrote or touched, beside the allocation or
        in the follow-up (``followed``), stamped by its allocation; those it left alone keep the
        stamp they have. The oldest are forgotten beyond the limit."""
        for chunk in writes.deferred:
            self._stamps[chunk.address] = self._stamps.pop(chunk.address, None)
        stamp = _stamp_of(allocation, writes.expiry) if self._leave_out else None
        for chunk in (*writes.upserts, *writes.touches, *followed):
            self._stamps.pop(chunk.address, None)
            self._stamps[chunk.address] = stamp
        while len(self._stamps) > _MEMORY_LIMIT:
            del self._stamps[next(iter(self._stamps))]

    def forget_all(self) -> None:
        """Forget every chunk (the run was cleared)."""
        self._stamps.clear()


def _stamp_of(allocation: Allocation, expiry: datetime) -> ChunkStamp | None:
    """The stamp a write beside ``allocation`` gives its chunks; ``None`` (touch next time) when
    the counter named no server time or no valid lineage."""
    if allocation.allocated_at is None or allocation.chunk_lineage is None:
        return None
    return ChunkStamp(allocation.chunk_lineage, window_end(allocation.allocated_at), expiry)
