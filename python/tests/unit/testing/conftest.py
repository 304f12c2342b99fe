"""Fixtures for the in-process engine's own tests."""

from __future__ import annotations

import pytest

from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient


@pytest.fixture
def coll(client: InMemoryMongoClient) -> InMemoryCollection:
    return client["db"]["coll"]
