"""pymongo's async API and the in-process engine satisfy the storage's driver protocols.

The storage duck-types its client and collection; these assignments are checked by mypy --strict
(a gate), so a pymongo release or an engine change that breaks the fit fails CI.
"""

from __future__ import annotations

from pymongo import AsyncMongoClient

from agent_framework_mongodb.checkpoints.driver import (
    CheckpointClient,
    CheckpointCollection,
    Document,
)
from agent_framework_mongodb.testing import InMemoryMongoClient


async def test_pymongo_and_the_engine_fit_the_protocols() -> None:
    pymongo_client: AsyncMongoClient[Document] = AsyncMongoClient("mongodb://127.0.0.1:1", connect=False)
    engine_client = InMemoryMongoClient()
    clients: list[CheckpointClient] = [pymongo_client, engine_client]
    collections: list[CheckpointCollection] = [pymongo_client["db"]["coll"], engine_client["db"]["coll"]]
    assert len(clients) == len(collections) == 2
    for client in clients:
        await client.close()
    assert engine_client.close_count == 1
