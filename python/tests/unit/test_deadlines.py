"""``deadlines``: requests that end by their operation's deadline and are never cancelled (ADR 0030)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time

import pymongo
import pytest
from pymongo import _csot  # private: read to check the deadline reaches the request's task

from agent_framework_mongodb import MongoDBTimeoutError
from agent_framework_mongodb.checkpoints import deadlines
from agent_framework_mongodb.checkpoints.connection import close_client
from agent_framework_mongodb.checkpoints.deadlines import (
    backstop_only,
    bounded,
    operation_deadline,
    requests_left_running,
)

_marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")


class _Request:
    """A driver request that waits for ``release``, recording whether it was cancelled."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.cancelled = False
        self.ended = False

    async def __call__(self) -> str:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.ended = True
        return "answer"


@pytest.fixture(autouse=True)
def _short_slack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines, "DEADLINE_SLACK", 0.1)


async def test_the_answer_comes_back_and_nothing_is_left_running() -> None:
    request = _Request()
    request.release.set()
    assert await bounded(request()) == "answer"
    assert requests_left_running() == 0


async def test_the_request_runs_with_the_callers_context_and_pymongos_deadline() -> None:
    seen: list[tuple[str, float | None]] = []

    async def request() -> None:
        seen.append((_marker.get(), _csot.get_timeout()))

    _marker.set("caller's")
    with operation_deadline(12.5):
        await bounded(request())
    assert seen == [("caller's", 12.5)]


async def test_a_cancelled_caller_returns_at_once_and_the_request_goes_on() -> None:
    request = _Request()
    caller = asyncio.ensure_future(bounded(request()))
    await request.started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert not request.cancelled
    assert requests_left_running() == 1

    request.release.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert request.ended
    assert not request.cancelled
    assert requests_left_running() == 0


async def test_a_request_past_its_deadline_plus_the_slack_is_abandoned_not_cancelled() -> None:
    request = _Request()
    started = time.monotonic()
    with operation_deadline(0.1), pytest.raises(MongoDBTimeoutError, match="left to end on its own"):
        await bounded(request())
    assert 0.15 <= time.monotonic() - started < 2
    assert not request.cancelled
    assert requests_left_running() == 1
    request.release.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert requests_left_running() == 0


async def test_without_a_deadline_nothing_is_abandoned() -> None:
    request = _Request()
    waiting = asyncio.ensure_future(bounded(request()))
    await asyncio.sleep(0.3)  # three times the slack: no backstop without a deadline
    assert not waiting.done()
    request.release.set()
    assert await waiting == "answer"


async def test_deadlines_nest_to_the_earlier() -> None:
    request = _Request()
    started = time.monotonic()
    with operation_deadline(0.1), operation_deadline(30), pytest.raises(MongoDBTimeoutError):
        await bounded(request())
    assert time.monotonic() - started < 2
    with operation_deadline(0.1), operation_deadline(None), pytest.raises(MongoDBTimeoutError):
        await bounded(request())
    request.release.set()


async def test_a_backstop_alone_leaves_pymongos_deadline_unset() -> None:
    seen: list[float | None] = []

    async def request() -> None:
        seen.append(_csot.get_timeout())

    with backstop_only(5):
        await bounded(request())
    assert seen == [None]


async def test_a_request_left_running_that_fails_is_retrieved(caplog: pytest.LogCaptureFixture) -> None:
    reported: list[object] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def failing_late(gate: asyncio.Event) -> None:
        await gate.wait()
        raise pymongo.errors.AutoReconnect("the connection closed")

    gate = asyncio.Event()
    caller = asyncio.ensure_future(bounded(failing_late(gate)))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    caplog.set_level(logging.DEBUG, logger="agent_framework_mongodb")
    gate.set()
    for _ in range(3):
        await asyncio.sleep(0)
    loop.set_exception_handler(None)
    assert reported == []
    assert [record.getMessage() for record in caplog.records] == [
        "A request left running ended with AutoReconnect."
    ]


class _Client:
    """A client whose close takes ``seconds`` (for ever when None)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.closed = False

    async def close(self) -> None:
        if self.seconds is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.seconds or 0)
        self.closed = True

    def __getitem__(self, name: str) -> object:
        raise NotImplementedError


async def test_close_client_returns_by_its_timeout_even_if_the_close_never_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = time.monotonic()
    await close_client(_Client(None), timeout=0.1)  # type: ignore[arg-type]
    assert time.monotonic() - started < 2
    assert "did not close within 0.1 seconds" in caplog.text
    await close_client(closing := _Client(0), timeout=5)  # type: ignore[arg-type]
    assert closing.closed
