"""Replication to the other members, pausable, and the write concern a write waits for.

While replication runs, the members share one engine: a write is on every member when it is
acknowledged. ``pause`` stops it: the primary keeps acknowledging ``w: 1`` writes, and a write
that asks for more than the primary (``w: "majority"`` or a number above 1 in a set of two or more)
waits for replication as a server does: until ``wtimeout``, then a ``writeConcernError``
WriteConcernFailed (64) with ``errInfo.wtimeout``, or until ``maxTimeMS``, then one with
MaxTimeMSExpired (50), the write itself staying applied
(https://www.mongodb.com/docs/manual/reference/write-concern/#wtimeout). A failover while paused
elects a member whose data is the primary's as of the pause (``_server.py``), so the ``w: 1``
writes since then are lost, as a rollback loses them
(https://www.mongodb.com/docs/manual/core/replica-set-rollbacks/).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._codec import as_mapping
from ._replies import MAX_TIME_MS_EXPIRED as _MAX_TIME_MS_EXPIRED
from ._replies import code_name

_WRITE_CONCERN_FAILED = 64


@dataclass(frozen=True)
class WriteConcern:
    w: int | str
    wtimeout_ms: int

    @property
    def unacknowledged(self) -> bool:
        return self.w == 0

    def needs_replication(self, members: int) -> bool:
        if self.w == "majority":
            return members // 2 + 1 > 1
        return isinstance(self.w, int) and self.w > 1

    def document(self) -> dict[str, Any]:
        return {"w": self.w, "wtimeout": self.wtimeout_ms}


def write_concern(command: Mapping[str, Any]) -> WriteConcern:
    """The command's write concern; a replica set's implicit default is ``w: "majority"`` (5.0+)."""
    given = as_mapping(command.get("writeConcern"))
    if given is None:
        return WriteConcern("majority", 0)
    w = given.get("w", "majority")
    timeout = given.get("wtimeout", 0)
    return WriteConcern(w if isinstance(w, str) else int(w), int(timeout or 0))


class Replication:
    """Whether the primary's writes reach the other members, and the data as of a pause."""

    def __init__(self) -> None:
        self._running = asyncio.Event()
        self._running.set()
        self.snapshot: Path | None = None
        """A copy of the primary's engine file taken at the pause: the secondaries' data."""

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def pause(self, snapshot: Path) -> None:
        self.snapshot = snapshot
        self._running.clear()

    def resume(self) -> None:
        self.snapshot = None
        self._running.set()

    async def wait(
        self, concern: WriteConcern, members: int, max_time_ms: int | None
    ) -> dict[str, Any] | None:
        """Wait until ``concern`` is satisfied; the ``writeConcernError`` when it cannot be in time."""
        if not self.paused or not concern.needs_replication(members):
            return None
        limits = [(concern.wtimeout_ms, _WRITE_CONCERN_FAILED), (max_time_ms or 0, _MAX_TIME_MS_EXPIRED)]
        active = [(ms, code) for ms, code in limits if ms > 0]
        if not active:
            await self._running.wait()
            return None
        milliseconds, code = min(active)
        try:
            await asyncio.wait_for(self._running.wait(), milliseconds / 1000)
        except asyncio.TimeoutError:
            if code == _WRITE_CONCERN_FAILED:
                return {
                    "code": code,
                    "codeName": code_name(code),
                    "errmsg": "waiting for replication timed out",
                    "errInfo": {"wtimeout": True, "writeConcern": concern.document()},
                }
            return {"code": code, "codeName": code_name(code), "errmsg": "operation exceeded time limit"}
        return None
