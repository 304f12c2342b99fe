"""Fixtures for the MongoDBCheckpointStorage unit tests, all on the in-process engine."""

from __future__ import annotations

import pytest

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

from ._support import ProxyCollection, make_storage


@pytest.fixture
def collection(client: InMemoryMongoClient) -> InMemoryCollection:
    return client["checkpoint_db"]["checkpoint_coll"]


@pytest.fixture
def storage(collection: InMemoryCollection) -> MongoDBCheckpointStorage:
    return make_storage(collection)


@pytest.fixture
def proxy(collection: InMemoryCollection) -> ProxyCollection:
    return ProxyCollection(collection)


@pytest.fixture
def proxied_storage(proxy: ProxyCollection) -> MongoDBCheckpointStorage:
    return make_storage(proxy)
