"""Fixtures of the driver tests: the storage through a real ``pymongo.AsyncMongoClient`` on the front.

``front`` is a ``WireProtocolServer`` over an engine with the test's scheduling seed (tests marked
``seeded_engine`` run once per seed of ``ENGINE_SEEDS``, tests/conftest.py); ``connect`` makes
clients of it, each closed at teardown, so no socket of this folder outlives its test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from agent_framework_mongodb.testing import Scheduling, WireProtocolServer

from ...conftest import WireServerFactory
from ._front import Drivers

Driver = AsyncMongoClient[dict[str, Any]]
Connect = Callable[..., Driver]
"""``connect(server, **options)``: a client of ``server`` (pymongo's URI options as keywords)."""

SERVER_SELECTION_MS = 5_000
"""Far below pymongo's 30 s default: a test that cannot reach its front fails quickly."""


@pytest.fixture
async def front(
    make_wire_server: WireServerFactory, engine_scheduling: Scheduling | None
) -> WireProtocolServer:
    """A one-member replica set on 127.0.0.1 over a fresh engine with the test's seed, if any."""
    return await make_wire_server(scheduling=engine_scheduling)


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    made: list[Driver] = []

    def make(server: WireProtocolServer, **options: Any) -> Driver:
        options.setdefault("serverSelectionTimeoutMS", SERVER_SELECTION_MS)
        client: Driver = AsyncMongoClient(server.uri, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


@pytest.fixture
async def drivers(make_wire_server: WireServerFactory) -> AsyncIterator[Drivers]:
    """Clients and storages of the test (``_front.Drivers``), closed before its fronts stop (it
    depends on their factory)."""
    del make_wire_server
    made = Drivers()
    yield made
    await made.close_all()
