"""``concurrently``: two requests of one operation at once, and nothing of them outliving it
(unless the caller is cancelled, when the driver requests inside are left running: test_deadlines.py)."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from agent_framework_mongodb.checkpoints.concurrency import concurrently

_deadline: contextvars.ContextVar[str] = contextvars.ContextVar("deadline", default="none")


class _Request:
    """A request that records whether it started, finished or was cancelled."""

    def __init__(self, result: str, *, delay: float = 0, error: Exception | None = None) -> None:
        self.result = result
        self.delay = delay
        self.error = error
        self.started = False
        self.finished = False
        self.cancelled = False
        self.seen_deadline = ""

    async def __call__(self) -> str:
        self.started = True
        self.seen_deadline = _deadline.get()
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        self.finished = True
        if self.error is not None:
            raise self.error
        return self.result


async def test_both_run_at_once_and_both_results_come_back_in_order() -> None:
    first, second = _Request("a", delay=0.05), _Request("b", delay=0.05)
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await concurrently(first(), second()) == ("a", "b")
    # Sequential requests would take 0.1 s; together they take one delay.
    assert loop.time() - began < 0.09


async def test_a_failure_lets_the_other_end_before_it_propagates() -> None:
    # Nothing inside the driver is cancelled (deadlines.py): the other request ends on its own,
    # by the operation's deadline, and only then does the failure propagate, so none outlives it.
    failing, slow = _Request("a", error=ValueError("first")), _Request("b", delay=0.05)
    with pytest.raises(ValueError, match="first"):
        await concurrently(failing(), slow())
    assert slow.finished
    assert not slow.cancelled


async def test_the_second_failing_lets_the_first_end() -> None:
    slow, failing = _Request("a", delay=0.05), _Request("b", error=KeyError("second"))
    with pytest.raises(KeyError):
        await concurrently(slow(), failing())
    assert slow.finished
    assert not slow.cancelled


async def test_when_both_fail_the_first_arguments_error_propagates() -> None:
    # Whichever fails first, both end before the error propagates, and the first argument's wins.
    first = _Request("a", delay=0.02, error=ValueError("first"))
    second = _Request("b", error=KeyError("second"))
    with pytest.raises(ValueError, match="first"):
        await concurrently(first(), second())
    assert first.finished
    both = (_Request("a", error=ValueError("first")), _Request("b", error=KeyError("second")))
    with pytest.raises(ValueError, match="first"):
        await concurrently(both[0](), both[1]())


async def test_cancelling_the_caller_cancels_both_and_waits_for_them() -> None:
    first, second = _Request("a", delay=10), _Request("b", delay=10)
    task = asyncio.ensure_future(concurrently(first(), second()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert first.cancelled
    assert second.cancelled


async def test_each_request_keeps_the_callers_context() -> None:
    # pymongo's deadline (pymongo.timeout) and the operation's record are context variables.
    first, second = _Request("a"), _Request("b")
    _deadline.set("in 30 s")
    await concurrently(first(), second())
    assert first.seen_deadline == second.seen_deadline == "in 30 s"
