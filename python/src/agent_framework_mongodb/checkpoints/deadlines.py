"""Operation deadlines, and driver requests that end by them whatever the driver does inside.

Every public operation runs under one deadline (:func:`operation_deadline`): pymongo's client-side
operation timeout (``pymongo.timeout``), which pymongo enforces itself, and this module's record
of the same moment, which :func:`bounded` enforces when pymongo does not.

**Nothing inside pymongo is ever cancelled by the package** (docs/adr/0030-requests-never-cancelled.md).
On Python 3.10 and 3.11 a task cancelled while pymongo waits for its topology to change can leave
the client's topology lock orphaned: pymongo waits with ``asyncio.wait_for(condition.wait(),
0.5)`` (``pymongo/lock.py``, ``_async_cond_wait``); a cancellation that arrives while ``wait_for``
is cancelling the inner wait after its half-second timeout stops ``wait_for`` from waiting for it
(CPython bpo-41891, fixed by 3.12's rewrite of ``wait_for``), so ``select_servers`` leaves its
``async with`` without the lock (a bare ``RuntimeError('Lock is not acquired')``) and the orphaned
inner wait takes the lock afterwards and never gives it back. Every later operation of that client,
and its ``close()``, then waits for the lock for ever. Issue 28 saw this in 6 of 6 workflow runs
against an unreachable server, from ``concurrently`` cancelling a sibling request.

So each request runs in a task of its own, which copies the caller's context (pymongo's deadline
goes with it), and the caller waits for that task without passing its cancellation on:

- a caller that is cancelled stops waiting at once; the request is *left running* and ends under
  its own deadline (a write may still land, as when a reply is lost);
- a request still running at its operation's deadline plus :data:`DEADLINE_SLACK` is left running
  too, and the caller gets :class:`~agent_framework_mongodb.errors.MongoDBTimeoutError`: the
  backstop for a driver that does not end on its own.

A request left running is referenced until it ends, and its outcome is retrieved, so it is neither
collected mid-flight nor reported as an exception never retrieved.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Awaitable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final, TypeVar

import pymongo

from ..errors import MongoDBTimeoutError

__all__ = ["DEADLINE_SLACK", "bounded", "operation_deadline", "requests_left_running"]

_Result = TypeVar("_Result")

DEADLINE_SLACK: Final = 1.0
"""Seconds past its deadline before a request is abandoned. pymongo ends a request by its deadline
itself, up to half a second late: its server selection loop looks at the deadline every
``MIN_HEARTBEAT_INTERVAL`` (0.5 s, ``pymongo/common.py``), and a socket read is bounded by what
remains of the deadline. So the slack only takes over from a driver that does not end at all."""

_DEADLINE: ContextVar[float] = ContextVar("_DEADLINE", default=math.inf)
"""The monotonic time at which the innermost operation must have ended (inf: no deadline)."""

_LEFT_RUNNING: set[asyncio.Task[object]] = set()
"""Requests whose callers stopped waiting; held here until they end (asyncio keeps weak references)."""

_LOGGER: Final = logging.getLogger("agent_framework_mongodb")


@contextmanager
def operation_deadline(seconds: float | None) -> Generator[None]:
    """Run the block under a deadline ``seconds`` from now, for pymongo and for :func:`bounded`.

    ``None`` sets none of its own and leaves whatever encloses the block in force: an enclosing
    operation's deadline, a caller's ``pymongo.timeout`` block, the client's ``timeoutMS``.
    (``pymongo.timeout(None)`` would lift the enclosing ones for pymongo: its requests read the
    innermost block's timeout, and None means none.)
    """
    if seconds is None:
        yield
        return
    token = _DEADLINE.set(min(_DEADLINE.get(), _now() + seconds))
    try:
        with pymongo.timeout(seconds):
            yield
    finally:
        _DEADLINE.reset(token)


@contextmanager
def backstop_only(seconds: float) -> Generator[None]:
    """Bound :func:`bounded` requests in the block without setting pymongo's deadline: for opening
    a client, whose background tasks must not inherit an operation's ``pymongo.timeout``."""
    token = _DEADLINE.set(min(_DEADLINE.get(), _now() + seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


async def bounded(request: Awaitable[_Result]) -> _Result:
    """Await ``request`` (one driver call) in a task of its own, never cancelling it.

    Raises what the request raises; if the caller is cancelled, ``CancelledError`` at once.

    Raises:
        MongoDBTimeoutError: The request was still running at its operation's deadline plus
            :data:`DEADLINE_SLACK`; it is left to end on its own.
    """
    loop = asyncio.get_running_loop()
    task: asyncio.Task[_Result] = asyncio.ensure_future(request)
    # A future of our own to wait on, woken by the task's end or the backstop: cancelling the
    # caller cancels only this future. (asyncio.wait does the same at about twice the cost:
    # 22.7 against 14.5 us a request, measured side by side.)
    woken: asyncio.Future[None] = loop.create_future()
    task.add_done_callback(functools.partial(_wake, woken))
    deadline = _DEADLINE.get()
    backstop = (
        None
        if deadline == math.inf
        else loop.call_later(max(0.0, deadline + DEADLINE_SLACK - _now()), _wake, woken, None)
    )
    try:
        await woken
    except asyncio.CancelledError:
        _leave_running(task)
        raise
    finally:
        if backstop is not None:
            backstop.cancel()
    if not task.done():
        _leave_running(task)
        raise MongoDBTimeoutError(
            "MongoDB did not answer by the operation's deadline, and the driver did not end the "
            f"request either within {DEADLINE_SLACK:g} s after it; the request is left to end on its own."
        )
    return task.result()


def _wake(woken: asyncio.Future[None], _ended: object) -> None:
    if not woken.done():
        woken.set_result(None)


def requests_left_running() -> int:
    """How many requests whose callers stopped waiting are still running (for tests and metrics)."""
    return len(_LEFT_RUNNING)


def _leave_running(task: asyncio.Task[_Result]) -> None:
    if task.done():
        _retrieve(task)
        return
    _LEFT_RUNNING.add(task)
    task.add_done_callback(_forget)


def _forget(task: asyncio.Task[_Result]) -> None:
    _LEFT_RUNNING.discard(task)
    _retrieve(task)


def _retrieve(task: asyncio.Task[_Result]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        # Its caller has already been answered; the outcome only matters to someone debugging.
        _LOGGER.debug("A request left running ended with %s.", type(error).__name__)


def _now() -> float:
    return time.monotonic()  # what pymongo's deadlines are read against, and no loop is needed
