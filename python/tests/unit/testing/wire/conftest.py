"""Fixtures of the wire front's tests: a real pymongo client connected to ``wire_server``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from agent_framework_mongodb.testing import WireProtocolServer

Driver = AsyncMongoClient[dict[str, Any]]


def connect(server: WireProtocolServer, **options: Any) -> Driver:
    """A client of ``server``; quick to give up when it cannot be reached, so failures fail fast."""
    options.setdefault("serverSelectionTimeoutMS", 5000)
    return AsyncMongoClient(server.uri, **options)


@pytest.fixture
async def driver(wire_server: WireProtocolServer) -> AsyncIterator[Driver]:
    client = connect(wire_server)
    yield client
    await client.close()
