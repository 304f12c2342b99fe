"""Client ownership: a storage closes only the client it built, exactly once."""

from __future__ import annotations

from typing import Any

import pytest

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBIntegrationError
from agent_framework_mongodb.checkpoints import connection
from agent_framework_mongodb.testing import InMemoryMongoClient

from ._support import WORKFLOW, make_checkpoint, make_options

URI = "mongodb://owner.invalid:27017/"


@pytest.fixture
def built_clients(monkeypatch: pytest.MonkeyPatch) -> list[InMemoryMongoClient]:
    built: list[InMemoryMongoClient] = []

    def factory(host: Any = None, *args: Any, **kwargs: Any) -> InMemoryMongoClient:
        client = InMemoryMongoClient(host, *args, **kwargs)
        built.append(client)
        return client

    monkeypatch.setattr(connection, "AsyncMongoClient", factory)
    return built


async def test_owner_closes_its_client_exactly_once(built_clients: list[InMemoryMongoClient]) -> None:
    storage = MongoDBCheckpointStorage(connection_string=URI, options=make_options())
    (client,) = built_clients
    await storage.save(make_checkpoint("cp-owned"))

    await storage.close()
    await storage.close()

    assert client.close_count == 1
    assert client.closed


async def test_async_with_closes_the_owned_client_once(built_clients: list[InMemoryMongoClient]) -> None:
    async with MongoDBCheckpointStorage(connection_string=URI, options=make_options()) as storage:
        await storage.save(make_checkpoint("cp-ctx"))
        assert (await storage.load("cp-ctx")).checkpoint_id == "cp-ctx"
    (client,) = built_clients
    assert client.close_count == 1
    await storage.close()
    assert client.close_count == 1


async def test_async_with_closes_the_owned_client_on_error(built_clients: list[InMemoryMongoClient]) -> None:
    with pytest.raises(RuntimeError):
        async with MongoDBCheckpointStorage(connection_string=URI, options=make_options()):
            raise RuntimeError("body failed")
    (client,) = built_clients
    assert client.close_count == 1


async def test_ownership_survives_a_failed_operation(built_clients: list[InMemoryMongoClient]) -> None:
    from pymongo.errors import AutoReconnect

    storage = MongoDBCheckpointStorage(connection_string=URI, options=make_options())
    (client,) = built_clients
    client.fail_next("find_one_and_update", AutoReconnect("reset"))
    with pytest.raises(MongoDBIntegrationError):
        await storage.save(make_checkpoint("cp-fails"))
    assert client.close_count == 0

    await storage.close()
    assert client.close_count == 1


async def test_for_session_storages_never_own(built_clients: list[InMemoryMongoClient]) -> None:
    owner = MongoDBCheckpointStorage(connection_string=URI, options=make_options())
    (client,) = built_clients
    sibling = owner.for_session("session-sibling")
    await sibling.save(make_checkpoint("cp-sibling"))

    await sibling.close()
    async with sibling:
        pass
    assert client.close_count == 0
    assert await owner.list_checkpoint_ids(workflow_name=WORKFLOW) == []
    assert await sibling.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-sibling"]

    await owner.close()
    assert client.close_count == 1
    with pytest.raises(MongoDBIntegrationError):
        await sibling.load("cp-sibling")
    assert len(built_clients) == 1


async def test_injected_client_is_never_closed() -> None:
    client = InMemoryMongoClient()
    storage = MongoDBCheckpointStorage(mongo_client=client, options=make_options())
    sibling = storage.for_session("session-sibling")
    await storage.save(make_checkpoint("cp-injected"))

    async with storage:
        pass
    await storage.close()
    await sibling.close()

    assert client.close_count == 0
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-injected"]


async def test_injected_client_uses_the_named_database_and_collection() -> None:
    client = InMemoryMongoClient()
    storage = MongoDBCheckpointStorage(
        mongo_client=client, options=make_options(), database_name="db_x", collection_name="coll_y"
    )
    await storage.save(make_checkpoint("cp-named"))

    assert await client["db_x"]["coll_y"].count_documents({"_kind": "workflow_checkpoint"}) == 1
    await storage.close()
    assert client.close_count == 0


async def test_injected_collection_client_is_never_closed() -> None:
    client = InMemoryMongoClient()
    storage = MongoDBCheckpointStorage(client["d"]["c"], options=make_options())

    async with storage:
        await storage.save(make_checkpoint("cp-coll"))
    await storage.close()

    assert client.close_count == 0


async def test_connection_string_storage_uses_the_default_namespace(
    built_clients: list[InMemoryMongoClient],
) -> None:
    async with MongoDBCheckpointStorage(connection_string=URI, options=make_options()) as storage:
        await storage.save(make_checkpoint("cp-default-ns"))
        (client,) = built_clients
        count = await client["agent_framework"]["workflow_checkpoints"].count_documents({})
    assert count == 2  # the checkpoint and its counter
