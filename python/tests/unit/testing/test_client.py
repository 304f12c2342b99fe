"""Client and database surface: names, commands, close semantics, fault injection."""

from __future__ import annotations

import pytest
from pymongo.errors import ConfigurationError, InvalidOperation, OperationFailure

from agent_framework_mongodb.testing import (
    InMemoryCollection,
    InMemoryDatabase,
    InMemoryMongoClient,
)


async def test_databases_and_collections_are_addressable_like_pymongo(client: InMemoryMongoClient) -> None:
    db = client["app"]
    assert isinstance(db, InMemoryDatabase)
    assert client.get_database("app") is db
    assert db.name == "app"
    coll = db["checkpoints"]
    assert isinstance(coll, InMemoryCollection)
    assert db.get_collection("checkpoints") is coll
    assert coll.name == "checkpoints"
    assert coll.full_name == "app.checkpoints"
    assert coll.database is db
    assert db.client is client
    with pytest.raises(ConfigurationError):
        client.get_database()


async def test_admin_ping_is_awaitable_and_returns_ok(client: InMemoryMongoClient) -> None:
    assert await client.admin.command("ping") == {"ok": 1.0}
    assert await client.admin.command({"ping": 1}) == {"ok": 1.0}


async def test_unknown_command_fails_like_the_server(client: InMemoryMongoClient) -> None:
    with pytest.raises(OperationFailure) as info:
        await client.admin.command("frobnicate")
    assert info.value.code == 59


async def test_close_is_async_and_counted() -> None:
    client = InMemoryMongoClient()
    assert client.close_count == 0
    await client.close()
    assert client.close_count == 1
    assert client.closed


async def test_use_after_close_raises_invalid_operation_like_pymongo() -> None:
    client = InMemoryMongoClient()
    coll = client["db"]["c"]
    await client.close()
    with pytest.raises(InvalidOperation, match="after close"):
        await coll.insert_one({"a": 1})
    with pytest.raises(InvalidOperation):
        await coll.find().to_list()
    with pytest.raises(InvalidOperation):
        await client.admin.command("ping")


async def test_async_context_manager_closes_once() -> None:
    async with InMemoryMongoClient() as client:
        await client["db"]["c"].insert_one({"a": 1})
    assert client.close_count == 1


async def test_list_names_show_only_existing_collections(client: InMemoryMongoClient) -> None:
    db = client["db"]
    _ = db["untouched"]
    await db["used"].insert_one({"a": 1})
    await db["indexed"].create_index("a")
    assert await db.list_collection_names() == ["indexed", "used"]
    assert await client.list_database_names() == ["db"]
    await db.drop_collection("used")
    assert await db.list_collection_names() == ["indexed"]


async def test_build_info_reports_a_server_version(client: InMemoryMongoClient) -> None:
    info = await client.server_info()
    assert info["ok"] == 1.0
    assert info["versionArray"][0] >= 7
