"""The engine's counted swaps of mongomock_ng internals (``testing/_swaps.py``)."""

from __future__ import annotations

import asyncio

import pytest
from mongomock_ng import aggregate

from agent_framework_mongodb.testing._dates import server_date_expressions
from agent_framework_mongodb.testing._extremes import server_extremes
from agent_framework_mongodb.testing._swaps import CountedSwap


def _recording() -> tuple[CountedSwap, list[str]]:
    events: list[str] = []
    return CountedSwap(lambda: events.append("install"), lambda: events.append("restore")), events


async def test_holders_in_flight_together_share_one_install_and_the_last_restores() -> None:
    swap, events = _recording()
    first_in, second_out = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        with swap.held():
            first_in.set()
            await second_out.wait()  # leaves after the second, which entered after it
            events.append("first leaves")

    async def second() -> None:
        await first_in.wait()
        with swap.held():
            events.append("second inside")
        second_out.set()

    await asyncio.gather(first(), second())
    assert events == ["install", "second inside", "first leaves", "restore"]


def test_a_block_that_raises_still_restores() -> None:
    swap, events = _recording()
    with pytest.raises(RuntimeError), swap.held():
        raise RuntimeError("inside")
    assert events == ["install", "restore"]
    with swap.held():
        pass
    assert events == ["install", "restore", "install", "restore"]


def test_the_engine_swaps_restore_mongomock_ngs_own_handlers() -> None:
    add = aggregate._handle_date_add_operator  # pyright: ignore[reportPrivateUsage]
    table = dict(getattr(aggregate, "_GROUPING_OPERATOR_MAP"))  # noqa: B009 - private
    with server_date_expressions(), server_extremes():
        assert aggregate._handle_date_add_operator is not add  # pyright: ignore[reportPrivateUsage]
        assert getattr(aggregate, "_GROUPING_OPERATOR_MAP")["$max"] is not table["$max"]  # noqa: B009
    assert aggregate._handle_date_add_operator is add  # pyright: ignore[reportPrivateUsage]
    assert getattr(aggregate, "_GROUPING_OPERATOR_MAP") == table  # noqa: B009
