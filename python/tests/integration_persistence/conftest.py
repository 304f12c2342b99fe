"""Fixtures of the real-MongoDB integration suite (marker ``integration_persistence``).

Environment:

``MONGODB_URI``
    The server to test against. Without it every test of this suite skips.
``MONGODB_DATABASE``
    The database holding the throw-away collections; ``agent_framework_test`` by default.
``AFM_INTEGRATION_ENGINE=1``
    Self-check of the suite's own logic without a server: the tests run against the in-process
    engine (``agent_framework_mongodb.testing.InMemoryMongoClient``) instead, and the ``explain``
    tests skip, since the engine has no query planner. Takes precedence over ``MONGODB_URI``.

Each test gets its own collection ``test-checkpoint-<uuid4 hex>``, dropped in the fixture's
teardown even when the test fails; the client is closed afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from pymongo import AsyncMongoClient

from agent_framework_mongodb.testing import InMemoryMongoClient

from ._support import DEFAULT_DATABASE, IntegrationCollection, MongoTarget

ENGINE_VARIABLE = "AFM_INTEGRATION_ENGINE"


@pytest.fixture
async def target() -> AsyncIterator[MongoTarget]:
    """A fresh, uniquely named collection on the server (or the engine), dropped afterwards."""
    use_engine = os.environ.get(ENGINE_VARIABLE) == "1"
    uri = os.environ.get("MONGODB_URI")
    if not use_engine and not uri:
        pytest.skip("MONGODB_URI is not set: the real-MongoDB integration suite is skipped.")
    database_name = os.environ.get("MONGODB_DATABASE") or DEFAULT_DATABASE
    collection_name = f"test-checkpoint-{uuid.uuid4().hex}"
    client: AsyncMongoClient[dict[str, object]] | InMemoryMongoClient
    client = InMemoryMongoClient() if use_engine else AsyncMongoClient(uri)
    try:
        database = client[database_name]
        collection: IntegrationCollection = database[collection_name]
        try:
            yield MongoTarget(
                collection=collection,
                real_server=not use_engine,
                database_name=database_name,
                collection_name=collection_name,
            )
        finally:
            await database.drop_collection(collection_name)
    finally:
        await client.close()


@pytest.fixture
def server(target: MongoTarget) -> MongoTarget:
    """The target, for tests that need a real server's query planner (``explain``)."""
    if not target.real_server:
        pytest.skip("explain needs a real MongoDB server; the in-process engine has no planner.")
    return target
