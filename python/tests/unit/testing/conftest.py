"""Fixtures for the in-process engine's own tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient


@pytest.fixture
async def client() -> AsyncIterator[InMemoryMongoClient]:
    engine = InMemoryMongoClient()
    yield engine
    if not engine.closed:
        await engine.close()


@pytest.fixture
def coll(client: InMemoryMongoClient) -> InMemoryCollection:
    return client["db"]["coll"]
