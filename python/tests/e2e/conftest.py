"""Fixtures for the end-to-end tests: a client on the in-process engine, or on MONGODB_URI when set.

Every test gets its own database, so tests never see each other's checkpoints on a real server, and
the database's indexes are provisioned first, as a deployment would.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.testing import InMemoryMongoClient, Scheduling

from .support import Client


@pytest.fixture
def database_name() -> str:
    return f"e2e_{uuid.uuid4().hex[:12]}"


async def provision_indexes(client: Client, database_name: str) -> None:
    # Indexes belong to the collection; any run's options reach it.
    options = MongoDBCheckpointStorageOptions(tenant_id="deploy", workflow_name="any", session_id="deploy")
    storage = MongoDBCheckpointStorage(mongo_client=client, options=options, database_name=database_name)
    await storage.ensure_indexes()
    await storage.validate_indexes()


@pytest.fixture
async def mongo_client(database_name: str, engine_scheduling: Scheduling | None) -> AsyncIterator[Client]:
    uri = os.environ.get("MONGODB_URI")
    if not uri:
        # Seeded under the seeded_engine marker (tests/conftest.py); a server needs no seed.
        engine = InMemoryMongoClient(scheduling=engine_scheduling)
        await provision_indexes(engine, database_name)
        yield engine
        await engine.close()
        return
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, serverSelectionTimeoutMS=10_000)
    try:
        await provision_indexes(client, database_name)
        yield client
    finally:
        await client.drop_database(database_name)
        await client.close()
