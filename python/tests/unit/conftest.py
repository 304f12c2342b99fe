"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent_framework_mongodb.testing import InMemoryMongoClient


@pytest.fixture
async def client() -> AsyncIterator[InMemoryMongoClient]:
    """A fresh in-process engine, closed after the test unless the test closed it."""
    engine = InMemoryMongoClient()
    yield engine
    if not engine.closed:
        await engine.close()
