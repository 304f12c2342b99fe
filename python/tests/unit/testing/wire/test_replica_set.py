"""The front as a replica set: hello, step-down and elections, misbehaving members, a lossy failover."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pymongo
import pytest
from bson.objectid import ObjectId
from pymongo import AsyncMongoClient
from pymongo.errors import (
    AutoReconnect,
    NotPrimaryError,
    PyMongoError,
    ServerSelectionTimeoutError,
    WriteConcernError,
)
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb.testing import WireProtocolServer

from ....conftest import WireServerFactory
from .conftest import Driver, connect
from .test_framing import Connection, op_msg


def direct(server: WireProtocolServer, member: int = 0, **options: Any) -> Driver:
    """A client of one member only, whatever its state."""
    return AsyncMongoClient(
        f"mongodb://{server.addresses[member]}/?directConnection=true",
        serverSelectionTimeoutMS=5000,
        **options,
    )


async def test_hello_describes_a_replica_set_primary(driver: Driver, wire_server: WireProtocolServer) -> None:
    hello = await driver["admin"].command("hello")
    address = wire_server.addresses[0]
    assert wire_server.uri == f"mongodb://{address}/?replicaSet=rs0"
    assert (hello["setName"], hello["hosts"], hello["primary"], hello["me"]) == (
        "rs0",
        [address],
        address,
        address,
    )
    assert (hello["isWritablePrimary"], hello["secondary"], hello["readOnly"]) == (True, False, False)
    assert (hello["minWireVersion"], hello["maxWireVersion"]) == (0, 21)
    assert (hello["maxBsonObjectSize"], hello["maxMessageSizeBytes"], hello["maxWriteBatchSize"]) == (
        16 * 1024 * 1024,
        48_000_000,
        100_000,
    )
    assert hello["logicalSessionTimeoutMinutes"] == 30
    assert isinstance(hello["electionId"], ObjectId)
    assert isinstance(hello["connectionId"], int)
    assert "topologyVersion" not in hello  # pymongo polls: no streaming monitor


async def test_a_step_down_makes_writes_fail_not_writable_primary_until_an_election(
    wire_server: WireProtocolServer,
) -> None:
    client = direct(wire_server)  # a retryable write: the server labels its error
    try:
        before = (await client["admin"].command("hello"))["electionId"]
        wire_server.step_down()
        hello = await client["admin"].command("hello")
        assert (hello["isWritablePrimary"], hello["secondary"]) == (False, True)
        assert "electionId" not in hello
        assert "primary" not in hello
        with pytest.raises(NotPrimaryError) as raised:
            await client["d"]["c"].insert_one({"_id": 1})
        assert raised.value.details is not None
        assert dict(raised.value.details)["code"] == 10107
        assert raised.value.has_error_label("RetryableWriteError")
        await wire_server.elect(0)
        after = (await client["admin"].command("hello"))["electionId"]
        assert after > before
        await client["d"]["c"].insert_one({"_id": 1})
    finally:
        await client.close()


async def test_a_secondary_refuses_reads_without_secondary_ok(wire_server: WireProtocolServer) -> None:
    wire_server.step_down()
    reader, writer = await asyncio.open_connection("127.0.0.1", wire_server.port)
    try:
        connection = Connection(reader, writer)
        await connection.send(op_msg(1, {"find": "c", "$db": "d"}))
        refused = (await connection.reply())[2]
        await connection.send(op_msg(2, {"find": "c", "$db": "d", "$readPreference": {"mode": "secondary"}}))
        allowed = (await connection.reply())[2]
    finally:
        writer.close()
    assert (refused["code"], refused["codeName"]) == (13435, "NotPrimaryNoSecondaryOk")
    assert allowed["ok"] == 1.0


async def test_a_write_in_flight_during_a_failover_lands_on_the_new_primary(
    make_wire_server: WireServerFactory,
) -> None:
    server = await make_wire_server(members=2)
    client = connect(server, heartbeatFrequencyMS=500)
    try:
        collection = client["d"]["c"]
        await collection.insert_one({"_id": 0})
        await server.fail_over(to=1)
        await collection.insert_one({"_id": 1})  # member 0 says NotWritablePrimary; pymongo retries on 1
        assert server.primary == 1
        assert "insert" in server.command_names(member=1)
        assert await collection.count_documents({}) == 2
    finally:
        await client.close()


async def test_a_silent_listener_never_completes_the_handshake(wire_server: WireProtocolServer) -> None:
    wire_server.stop_answering()
    client = connect(wire_server, serverSelectionTimeoutMS=300, connectTimeoutMS=200)
    try:
        with pytest.raises(ServerSelectionTimeoutError):
            await client["admin"].command("ping")
        assert wire_server.connections_accepted() >= 1
    finally:
        wire_server.answer_again()
        await client.close()


async def test_a_member_that_stops_answering_mid_operation(
    driver: Driver, wire_server: WireProtocolServer
) -> None:
    await driver["d"]["c"].insert_one({"_id": 1})
    wire_server.stop_answering(handshake=False)
    with pytest.raises(PyMongoError) as raised, pymongo.timeout(0.3):
        await driver["d"]["c"].find_one({})
    assert raised.value.timeout
    assert (await driver["admin"].command("hello"))["ok"] == 1.0  # the monitor's view: healthy
    wire_server.answer_again()
    assert await driver["d"]["c"].find_one({}) == {"_id": 1}


async def test_dropped_connections_are_network_errors(wire_server: WireProtocolServer) -> None:
    client = connect(wire_server, serverSelectionTimeoutMS=300)
    try:
        await client["admin"].command("ping")
        wire_server.drop_connections()
        with pytest.raises(AutoReconnect):
            await client["d"]["c"].insert_one({"_id": 1})  # the retry finds no server either
        wire_server.answer_again()
        await client["d"]["c"].insert_one({"_id": 2})
        assert [document["_id"] async for document in client["d"]["c"].find({})] == [2]
    finally:
        await client.close()


async def test_an_unreachable_member_then_back(wire_server: WireProtocolServer) -> None:
    client = connect(wire_server, heartbeatFrequencyMS=500)
    try:
        await client["admin"].command("ping")
        await wire_server.stop_listening()
        with pytest.raises((ServerSelectionTimeoutError, AutoReconnect)), pymongo.timeout(0.5):
            await client["d"]["c"].insert_one({"_id": 1})
        await wire_server.listen_again()
        await client["d"]["c"].insert_one({"_id": 2})
        assert await client["d"]["c"].count_documents({}) == 1
    finally:
        await client.close()


async def test_a_w_1_write_is_lost_in_a_failover_while_replication_is_paused(
    make_wire_server: WireServerFactory, tmp_path: Path
) -> None:
    server = await make_wire_server(path=tmp_path / "engine.journal", members=2)
    client = connect(server, heartbeatFrequencyMS=500)
    try:
        database = client["d"]
        await database["c"].insert_one({"_id": "replicated"})
        server.pause_replication()
        await database.get_collection("c", write_concern=WriteConcern(w=1)).insert_one({"_id": "w1"})
        majority = database.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=100))
        with pytest.raises(WriteConcernError) as raised:
            await majority.insert_one({"_id": "majority"})
        assert raised.value.code == 64
        assert (raised.value.details or {})["errInfo"]["wtimeout"] is True
        assert await database["c"].count_documents({}) == 3  # applied on the primary all the same
        await server.fail_over(to=1)
        assert [document["_id"] async for document in database["c"].find({})] == ["replicated"]
        assert server.engine.path is not None
        assert server.engine.path != (tmp_path / "engine.journal").resolve()
    finally:
        await client.close()


async def test_a_majority_write_waits_for_replication_to_resume(
    make_wire_server: WireServerFactory, tmp_path: Path
) -> None:
    server = await make_wire_server(path=tmp_path / "engine.journal", members=2)
    client = connect(server)
    try:
        server.pause_replication()
        write = asyncio.ensure_future(client["d"]["c"].insert_one({"_id": 1}))  # w: majority, no wtimeout
        await server.received("insert")
        assert not write.done()
        server.resume_replication()
        assert (await write).acknowledged
    finally:
        await client.close()


async def test_pausing_replication_needs_a_file_and_a_second_member(
    wire_server: WireProtocolServer, make_wire_server: WireServerFactory, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="file-backed"):
        wire_server.pause_replication()
    single = await make_wire_server(path=tmp_path / "engine.journal")
    with pytest.raises(ValueError, match="two members"):
        single.pause_replication()
