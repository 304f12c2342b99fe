"""Seeded scheduling: server-like latency, so operations in flight together can finish in any order.

Off by default, every operation yields to the event loop once and then runs, so operations that are
in flight together run in the order they were sent, and all of them before any of their callers
resumes. On a server each request and each reply spends its own time on the network and in the
server's queues, so a later request can run first and a reply can arrive after later requests ran.

``Scheduling(seed=...)`` models that without wall-clock time: each operation draws two delays, one
before the server runs it (the request) and one after (the reply), each a number of event-loop turns
from a heavy-tailed (Pareto) distribution. Every task that is ready runs once per turn, so a turn is
a unit of virtual time shared by all operations in flight; operations whose delays differ are
reordered, and most delays are short while a few are very long, as latencies measured on real
networks are. The delays come from one ``random.Random(seed)`` per client, drawn in the order
operations are sent; asyncio runs ready tasks in a fixed order, so the same seed and the same test
give the same interleaving and the same outcome.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass
from typing import cast


@dataclass(frozen=True)
class Scheduling:
    """How an :class:`InMemoryMongoClient` delays operations: give it as ``scheduling=``.

    Each operation waits ``floor(scale * (X - 1))`` event-loop turns before the server runs it and
    as many again, drawn separately, before its caller resumes, ``X`` being Pareto-distributed with
    shape ``tail_index``, and each wait capped at ``max_turns``. With the defaults about two in
    five waits are zero turns, the median is one turn, one in nine is ten or more and one in a
    hundred a hundred or more. An upsert whose query finds nothing draws one more wait, between
    that query and its insert, so concurrent upserts race to insert as on a server (DIVERGENCES.md
    entry 2). Latency is counted in turns, not seconds: it reorders operations but takes no time
    on any clock, so it never makes an operation time out.
    """

    seed: int
    """Seeds the client's random draws; the same seed gives the same interleaving."""
    tail_index: float = 1.2
    """The Pareto shape: smaller is heavier-tailed (below 2 the variance is infinite)."""
    scale: float = 2.0
    """Turns per unit of the Pareto variable above its minimum."""
    max_turns: int = 1000
    """The longest wait of one phase, so a test's runtime stays bounded."""

    def __post_init__(self) -> None:
        for name in ("seed", "max_turns"):
            value = cast("object", getattr(self, name))
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"Scheduling.{name} must be an int, not {type(value).__name__}")
        if self.max_turns < 0:
            raise ValueError("Scheduling.max_turns must be at least 0")
        if not (math.isfinite(self.tail_index) and self.tail_index > 0):
            raise ValueError("Scheduling.tail_index must be a positive number")
        if not (math.isfinite(self.scale) and self.scale >= 0):
            raise ValueError("Scheduling.scale must be a number of at least 0")


@dataclass(frozen=True)
class Trip:
    """One operation's two waits, in event-loop turns."""

    request: int
    reply: int


NO_DELAY = Trip(0, 0)


class Scheduler:
    """Draws each operation's waits for one client; draws nothing when scheduling is off."""

    def __init__(self, scheduling: Scheduling | None) -> None:
        self.scheduling = scheduling
        self.drawn = 0
        """How many operations have drawn their waits (only counted with scheduling on)."""
        seeded = None if scheduling is None else random.Random(scheduling.seed)  # noqa: S311 - not a security use
        self._random = seeded

    def draw(self) -> Trip:
        """The waits of the operation being sent now."""
        if self.scheduling is None or self._random is None:
            return NO_DELAY
        self.drawn += 1
        return Trip(self._turns(self.scheduling, self._random), self._turns(self.scheduling, self._random))

    @staticmethod
    def _turns(scheduling: Scheduling, source: random.Random) -> int:
        excess = source.paretovariate(scheduling.tail_index) - 1.0
        return min(scheduling.max_turns, math.floor(scheduling.scale * excess))


async def pass_turns(turns: int) -> None:
    """Let every ready task run ``turns`` times; no time passes on any clock."""
    for _ in range(turns):
        await asyncio.sleep(0)
