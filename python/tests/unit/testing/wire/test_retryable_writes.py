"""Retryable writes: a write whose reply was lost is retried by pymongo and applied once."""

from __future__ import annotations

import pytest
from pymongo import ReturnDocument
from pymongo.errors import AutoReconnect, OperationFailure

from agent_framework_mongodb.testing import WireProtocolServer
from agent_framework_mongodb.testing._wire._replies import CommandError
from agent_framework_mongodb.testing._wire._retryable import TransactionTable, TxnKey

from .conftest import Driver, connect


async def test_an_insert_whose_reply_was_lost_is_applied_once(
    driver: Driver, wire_server: WireProtocolServer
) -> None:
    wire_server.drop_reply_after_apply("insert")
    await driver["d"]["c"].insert_one({"n": 1})  # applied again, it would fail with E11000 on its _id
    assert wire_server.command_names().count("insert") == 2
    assert await driver["d"]["c"].count_documents({}) == 1


async def test_an_increment_whose_reply_was_lost_counts_once(
    driver: Driver, wire_server: WireProtocolServer
) -> None:
    collection = driver["d"]["c"]
    await collection.insert_one({"_id": "k", "n": 0})
    wire_server.drop_reply_after_apply("findAndModify")
    after = await collection.find_one_and_update(
        {"_id": "k"}, {"$inc": {"n": 1}}, return_document=ReturnDocument.AFTER
    )
    assert after == {"_id": "k", "n": 1}  # the recorded reply of the first attempt
    assert wire_server.command_names().count("findAndModify") == 2
    assert await collection.find_one({"_id": "k"}) == {"_id": "k", "n": 1}


async def test_an_update_many_is_not_retried(driver: Driver, wire_server: WireProtocolServer) -> None:
    collection = driver["d"]["c"]
    await collection.insert_many([{"n": 0}, {"n": 0}])
    wire_server.drop_reply_after_apply("update")
    with pytest.raises(AutoReconnect):
        await collection.update_many({}, {"$inc": {"n": 1}})  # multi: not a retryable write
    assert [document["n"] async for document in collection.find({})] == [1, 1]


async def test_without_retry_writes_the_lost_reply_is_an_error_and_the_write_stays(
    wire_server: WireProtocolServer,
) -> None:
    client = connect(wire_server, retryWrites=False)
    try:
        wire_server.drop_reply_after_apply("insert")
        with pytest.raises(AutoReconnect):
            await client["d"]["c"].insert_one({"_id": 1})
        assert await client["d"]["c"].count_documents({}) == 1
    finally:
        await client.close()


async def test_a_retry_on_an_older_txn_number_is_transaction_too_old() -> None:
    table = TransactionTable()
    table.record(TxnKey(b"session", 2), {"n": 1, "ok": 1.0})
    assert table.recorded(TxnKey(b"session", 2)) == {"n": 1, "ok": 1.0}
    assert table.recorded(TxnKey(b"session", 3)) is None
    with pytest.raises(CommandError) as raised:
        table.recorded(TxnKey(b"session", 1))
    assert raised.value.code == 225


async def test_sessions_are_accepted_and_ended(driver: Driver, wire_server: WireProtocolServer) -> None:
    async with driver.start_session() as session:
        await driver["d"]["c"].insert_one({"_id": 1}, session=session)
    await driver.close()
    assert "endSessions" in wire_server.command_names()


async def test_transactions_are_refused(driver: Driver) -> None:
    await driver["d"]["c"].insert_one({"_id": 0})
    async with driver.start_session() as session:
        with pytest.raises(OperationFailure) as raised:
            async with await session.start_transaction():
                await driver["d"]["c"].insert_one({"_id": 1}, session=session)
    assert raised.value.code == 238
