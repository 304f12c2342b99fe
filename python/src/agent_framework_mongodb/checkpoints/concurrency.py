"""Independent requests of one operation, sent together so the operation waits for one round trip.

A save's allocation and the retained-maximum read it may need do not depend on each other, nor do
its insert and the write that records a check; sending each pair at once costs one round trip of
latency instead of two. Each request runs in a task that copies the caller's context, so it keeps
the operation's deadline (``pymongo.timeout``) and counts against the operation's record.

When one request fails, the others are not cancelled: they end by the same deadline on their own
(``deadlines.py``: nothing inside pymongo is cancelled), and the operation reports its error once
every request has ended, so none outlives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["concurrently", "together"]

_First = TypeVar("_First")
_Second = TypeVar("_Second")


async def concurrently(first: Awaitable[_First], second: Awaitable[_Second]) -> tuple[_First, _Second]:
    """Await both at once and return both results.

    If either raises, the other still runs to its end (its requests are bounded by the operation's
    deadline), then the error propagates: the first argument's when both failed. If the caller is
    cancelled, both are cancelled and awaited before the cancellation propagates; their driver
    requests are left running rather than cancelled (``deadlines.bounded``). Python 3.10 has no
    ``TaskGroup``, hence by hand.
    """
    tasks = (asyncio.ensure_future(first), asyncio.ensure_future(second))
    try:
        await asyncio.wait(tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        # Shielded from a second cancellation of the caller: the tasks must finish unwinding,
        # which takes no round trip (their requests are left running, not awaited).
        await asyncio.shield(asyncio.wait(tasks))
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved: the caller's cancellation is what propagates
        raise
    # Every error is retrieved, so a second failure is not reported as never retrieved.
    errors = [task.exception() for task in tasks if not task.cancelled()]
    for error in errors:
        if error is not None:
            raise error
    return tasks[0].result(), tasks[1].result()


async def together(*requests: Awaitable[object]) -> None:
    """Await every one of ``requests`` at once, as :func:`concurrently` does; results are dropped."""
    if not requests:
        return
    first, *rest = requests
    if not rest:
        await first
        return
    await concurrently(first, together(*rest))
