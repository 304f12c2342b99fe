"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent_framework_mongodb.testing import InMemoryMongoClient, Scheduling


@pytest.fixture
async def client(engine_scheduling: Scheduling | None) -> AsyncIterator[InMemoryMongoClient]:
    """A fresh in-process engine, closed after the test unless the test closed it; seeded
    scheduling under the ``seeded_engine`` marker (tests/conftest.py)."""
    engine = InMemoryMongoClient(scheduling=engine_scheduling)
    yield engine
    if not engine.closed:
        await engine.close()
