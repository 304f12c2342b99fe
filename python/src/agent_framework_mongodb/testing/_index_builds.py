"""How long an index build takes, and the server aborting one that outlives its operation's deadline.

On a server ``createIndexes`` scans the collection once for all the indexes it builds and
returns when the build commits, so a build over many documents takes time. Since 4.4 the build
belongs to the command: when the command is interrupted, by its ``maxTimeMS`` among others, the
build is aborted and no index is left; the command fails with MaxTimeMSExpired (code 50,
"operation exceeded time limit") (jstests/noPassthrough/index_builds/index_max_time_ms.js:
"index builds on a primary are aborted when the createIndexes operation times out"). pymongo
sends ``maxTimeMS`` itself under a client-side operation timeout, the time remaining less the
round trip (``AsyncConnection.apply_timeout``), and raises ``ExecutionTimeout`` for code 50 with
its configured timeouts appended (``_check_command_response`` in pymongo/helpers_shared.py).

The engine gives a build ``documents / rate`` seconds, ``rate`` being the client's
``index_build_rate``; a build that fits its deadline completes at once, one that does not fails
when the deadline passes (the engine waits that long on the event loop, other operations running
meanwhile) and builds nothing.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Final

from pymongo.errors import ExecutionTimeout

from ._timeouts import Deadline

DEFAULT_INDEX_BUILD_RATE: Final = 100_000.0
"""Documents per second: a modest server building a small key over small documents (a build of a
million documents takes ten seconds); ``math.inf`` makes every build instant."""

_MAX_WIRE_VERSION: Final = 21


def check_build_rate(rate: object) -> float:
    """``rate`` as documents per second: a positive number (``math.inf`` allowed)."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise ValueError(f"index_build_rate must be a positive number of documents per second, not {rate!r}")
    return float(rate)


def build_seconds(documents: int, rate: float) -> float:
    """How long scanning ``documents`` for a build takes at ``rate`` documents per second."""
    return 0.0 if math.isinf(rate) else documents / rate


def server_limit(deadline: Deadline, max_time_ms: Any) -> float | None:
    """The seconds the server lets the command run: ``maxTimeMS`` as given or as pymongo derives
    it from the operation timeout, the smaller when both; None when unlimited."""
    limits = [deadline.remaining] if deadline.remaining is not None else []
    if isinstance(max_time_ms, (int, float)) and not isinstance(max_time_ms, bool) and max_time_ms > 0:
        limits.append(max_time_ms / 1000)
    return min(limits) if limits else None


async def abort_at_deadline(limit: float, deadline: Deadline) -> ExecutionTimeout:
    """Wait until the server's limit passes, then the error pymongo raises for the abort."""
    await asyncio.sleep(max(limit, 0.0))
    reply = {"ok": 0.0, "errmsg": "operation exceeded time limit", "code": 50, "codeName": "MaxTimeMSExpired"}
    return ExecutionTimeout(
        f"operation exceeded time limit{deadline.details()}", 50, reply, _MAX_WIRE_VERSION
    )
