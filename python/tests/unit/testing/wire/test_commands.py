"""Each command's reply, as pymongo's ``AsyncMongoClient`` parses it from the front."""

from __future__ import annotations

from datetime import datetime, timezone

import pymongo
import pytest
from pymongo import InsertOne, ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, ExecutionTimeout, OperationFailure
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb.testing import Scheduling, WireProtocolServer

from ....conftest import WireServerFactory
from .conftest import Driver, connect


async def test_ordered_insert_stops_at_a_duplicate_with_the_servers_write_error(driver: Driver) -> None:
    collection = driver["d"]["c"]
    with pytest.raises(BulkWriteError) as raised:
        await collection.insert_many([{"_id": 1}, {"_id": 1}, {"_id": 2}])
    details = raised.value.details
    assert details["nInserted"] == 1
    [error] = details["writeErrors"]
    assert (error["index"], error["code"], error["keyPattern"], error["keyValue"]) == (
        1,
        11000,
        {"_id": 1},
        {"_id": 1},
    )
    assert error["errmsg"].startswith("E11000 duplicate key error collection: d.c index: _id_")
    assert await collection.count_documents({}) == 1


async def test_unordered_insert_goes_on_past_a_duplicate(driver: Driver) -> None:
    collection = driver["d"]["c"]
    with pytest.raises(BulkWriteError) as raised:
        await collection.insert_many([{"_id": 1}, {"_id": 1}, {"_id": 2}], ordered=False)
    assert raised.value.details["nInserted"] == 2
    assert [error["index"] for error in raised.value.details["writeErrors"]] == [1]


async def test_update_counts_and_upserted_ids(driver: Driver) -> None:
    collection = driver["d"]["c"]
    await collection.insert_one({"_id": 1, "n": 0})
    result = await collection.bulk_write(
        [
            UpdateOne({"_id": 1}, {"$inc": {"n": 1}}),
            UpdateOne({"_id": 2}, {"$set": {"n": 5}}, upsert=True),
            UpdateOne({"_id": 1}, {"$set": {"n": 1}}),
        ]
    )
    assert (result.matched_count, result.modified_count, result.upserted_count) == (2, 1, 1)
    assert result.upserted_ids == {1: 2}


async def test_update_and_delete_replies_through_the_raw_commands(driver: Driver) -> None:
    database = driver["d"]
    await database["c"].insert_many([{"_id": 1}, {"_id": 2}])
    updated = await database.command(
        "update", "c", updates=[{"q": {"_id": 3}, "u": {"$set": {"x": 1}}, "upsert": True}]
    )
    assert updated == {"n": 1, "nModified": 0, "upserted": [{"index": 0, "_id": 3}], "ok": 1.0}
    deleted = await database.command("delete", "c", deletes=[{"q": {}, "limit": 0}])
    assert deleted == {"n": 3, "ok": 1.0}


async def test_find_and_modify_reports_its_last_error_object(driver: Driver) -> None:
    database = driver["d"]
    inserted = await database.command(
        "findAndModify", "c", query={"_id": "k"}, update={"$inc": {"n": 1}}, upsert=True, new=True
    )
    assert inserted["lastErrorObject"] == {"n": 1, "updatedExisting": False, "upserted": "k"}
    assert inserted["value"] == {"_id": "k", "n": 1}
    updated = await database.command("findAndModify", "c", query={"_id": "k"}, update={"$inc": {"n": 1}})
    assert updated["lastErrorObject"] == {"n": 1, "updatedExisting": True}
    assert updated["value"] == {"_id": "k", "n": 1}  # the pre-image without new
    missed = await database.command("findAndModify", "c", query={"_id": "x"}, update={"$inc": {"n": 1}})
    assert missed["lastErrorObject"] == {"n": 0, "updatedExisting": False}
    assert missed["value"] is None
    projected = await database["c"].find_one_and_update(
        {"_id": "k"}, {"$inc": {"n": 1}}, projection={"_id": 0}, return_document=ReturnDocument.AFTER
    )
    assert projected == {"n": 3}


async def test_find_batches_through_get_more_and_close_kills_the_cursor(
    driver: Driver, wire_server: WireProtocolServer
) -> None:
    collection = driver["d"]["c"]
    await collection.insert_many([{"_id": index} for index in range(5)])
    assert [document["_id"] async for document in collection.find({}, batch_size=2)] == list(range(5))
    assert wire_server.command_names().count("getMore") == 2
    assert wire_server.open_cursors() == 0
    cursor = collection.find({}, batch_size=2)
    assert (await cursor.next())["_id"] == 0
    assert wire_server.open_cursors() == 1
    await cursor.close()
    assert wire_server.command_names()[-1] == "killCursors"
    assert wire_server.open_cursors() == 0


async def test_a_batch_stops_before_16_mib(driver: Driver, wire_server: WireProtocolServer) -> None:
    collection = driver["d"]["c"]
    big = "x" * (6 * 1024 * 1024)
    await collection.insert_many([{"_id": index, "s": big} for index in range(3)])
    assert len(await collection.find({}).to_list()) == 3
    assert wire_server.command_names().count("getMore") == 1  # 2 documents fit in 16 MiB, the third does not


async def test_find_options_reach_the_engine(driver: Driver) -> None:
    collection = driver["d"]["c"]
    await collection.insert_many([{"_id": index, "n": index % 3} for index in range(9)])
    found = await collection.find(
        {"n": {"$gt": 0}}, {"_id": 1}, sort=[("_id", -1)], skip=1, limit=3
    ).to_list()
    assert found == [{"_id": 7}, {"_id": 5}, {"_id": 4}]
    assert await collection.find_one({"n": 2}, sort=[("_id", 1)]) == {"_id": 2, "n": 2}


async def test_aggregate_and_counts(driver: Driver, wire_server: WireProtocolServer) -> None:
    collection = driver["d"]["c"]
    await collection.insert_many([{"_id": index} for index in range(5)])
    cursor = await collection.aggregate(
        [{"$match": {"_id": {"$gte": 1}}}, {"$sort": {"_id": -1}}], batchSize=2
    )
    assert [document["_id"] async for document in cursor] == [4, 3, 2, 1]
    assert await collection.count_documents({"_id": {"$gt": 1}}, skip=1, limit=2) == 2
    assert await collection.count_documents({"_id": 99}) == 0
    assert await collection.estimated_document_count() == 5
    assert "count" in wire_server.command_names()


async def test_indexes_and_collections(driver: Driver) -> None:
    database = driver["d"]
    await database.create_collection("folded", collation={"locale": "en", "strength": 2})
    listed = {entry["name"]: entry async for entry in await database.list_collections()}
    assert listed["folded"]["options"]["collation"]["locale"] == "en"
    assert listed["folded"]["info"]["readOnly"] is False
    created = await database.command(
        "createIndexes", "c", indexes=[{"key": {"a": 1}, "name": "a_1", "unique": True}]
    )
    assert (
        created["numIndexesBefore"],
        created["numIndexesAfter"],
        created["createdCollectionAutomatically"],
    ) == (
        1,
        2,
        True,
    )
    again = await database.command(
        "createIndexes", "c", indexes=[{"key": {"a": 1}, "name": "a_1", "unique": True}]
    )
    assert again["note"] == "all indexes already exist"
    names = [index["name"] async for index in await database["c"].list_indexes()]
    assert names == ["_id_", "a_1"]
    await database["c"].drop_index("a_1")
    assert [index["name"] async for index in await database["c"].list_indexes()] == ["_id_"]
    assert sorted(await database.list_collection_names()) == ["c", "folded"]
    assert "d" in await driver.list_database_names()
    await database.drop_collection("c")
    assert await database.list_collection_names() == ["folded"]


async def test_list_indexes_on_a_missing_collection_is_namespace_not_found(driver: Driver) -> None:
    with pytest.raises(OperationFailure) as raised:
        await driver["d"].command("listIndexes", "missing")
    assert raised.value.code == 26
    assert [index async for index in await driver["d"]["missing"].list_indexes()] == []  # pymongo hides 26


async def test_explain_is_refused_as_the_engine_refuses_it(driver: Driver) -> None:
    with pytest.raises(OperationFailure) as raised:
        await driver["d"].command("aggregate", "c", pipeline=[], explain=True)
    assert (raised.value.code, (raised.value.details or {})["codeName"]) == (238, "NotImplemented")
    with pytest.raises(OperationFailure) as explained:
        await driver["d"]["c"].find({}).explain()
    assert explained.value.code == 238


async def test_an_unknown_command_is_command_not_found(driver: Driver) -> None:
    with pytest.raises(OperationFailure) as raised:
        await driver["d"].command("frobnicate")
    assert (raised.value.code, (raised.value.details or {})["errmsg"]) == (
        59,
        "no such command: 'frobnicate'",
    )


async def test_server_commands_the_package_sends(driver: Driver) -> None:
    admin = driver["admin"]
    assert (await admin.command("ping"))["ok"] == 1.0
    assert (await admin.command("buildInfo"))["versionArray"][:2] == [7, 0]
    fcv = await admin.command({"getParameter": 1, "featureCompatibilityVersion": 1})
    assert fcv["featureCompatibilityVersion"] == {"version": "7.0"}
    defaults = await admin.command({"getDefaultRWConcern": 1})
    assert defaults["defaultWriteConcern"]["w"] == "majority"


async def test_max_time_ms_is_the_engines_deadline(driver: Driver, wire_server: WireProtocolServer) -> None:
    await driver["d"]["c"].insert_one({"_id": 1})
    hold = wire_server.engine.hold("find")
    with pytest.raises(ExecutionTimeout) as raised:
        await driver["d"]["c"].find({}).max_time_ms(50).to_list()
    hold.release()
    assert raised.value.code == 50
    assert await driver["d"]["c"].find({}).to_list() == [{"_id": 1}]


async def test_dates_round_trip_exactly(wire_server: WireProtocolServer) -> None:
    moment = datetime(2026, 12, 5, 13, 14, 15, 123000, tzinfo=timezone.utc)
    client = connect(wire_server, tz_aware=True)
    try:
        await client["d"]["c"].insert_one({"_id": 1, "at": moment})
        assert await client["d"]["c"].find_one({"at": moment}) == {"_id": 1, "at": moment}
    finally:
        await client.close()
    stored = wire_server.engine["d"]["c"].stored_documents()
    assert stored == [{"_id": 1, "at": moment.replace(tzinfo=None)}]


async def test_unacknowledged_writes_get_no_reply_and_apply(wire_server: WireProtocolServer) -> None:
    client = connect(wire_server, maxPoolSize=1)  # one connection: the find runs after the insert
    try:
        collection = client["d"]["c"]
        result = await collection.with_options(write_concern=WriteConcern(w=0)).insert_one({"_id": 1})
        assert not result.acknowledged
        assert await collection.find({}).to_list() == [{"_id": 1}]
    finally:
        await client.close()


async def test_w_1_and_w_majority_are_acknowledged(driver: Driver) -> None:
    for concern in (WriteConcern(w=1), WriteConcern(w="majority", wtimeout=100)):
        collection = driver["d"].get_collection("c", write_concern=concern)
        assert (await collection.bulk_write([InsertOne({})])).inserted_count == 1


async def test_seeded_scheduling_under_the_front(make_wire_server: WireServerFactory) -> None:
    server = await make_wire_server(scheduling=Scheduling(seed=3))
    client = connect(server)
    try:
        collection = client["d"]["c"]
        await collection.insert_many([{"_id": index} for index in range(20)])
        assert await collection.count_documents({}) == 20
    finally:
        await client.close()


async def test_unsimulated_operations_are_refused_not_ignored(driver: Driver) -> None:
    database = driver["d"]
    await database["c"].insert_one({"_id": 1, "a": [1, 2]})
    refusals = [
        database.command("findAndModify", "c", query={}, remove=True),
        database.command("findAndModify", "c", query={}, update={"replaced": True}),
        database.command("update", "c", updates=[{"q": {}, "u": {"replaced": True}}]),
        database.command(
            "update", "c", updates=[{"q": {}, "u": {"$set": {"a.$[x]": 0}}, "arrayFilters": [{"x": 1}]}]
        ),
        database.command("find", "c", let={"x": 1}),
        database.command("aggregate", 1, pipeline=[], cursor={}),
    ]
    for refusal in refusals:
        with pytest.raises(OperationFailure) as raised:
            await refusal
        assert raised.value.code == 238, raised.value
    assert await database["c"].find_one({}) == {"_id": 1, "a": [1, 2]}


async def test_what_the_front_leaves_out_of_replies(driver: Driver) -> None:
    reply = await driver["d"].command("ping")
    assert reply == {"ok": 1.0}  # no $clusterTime, no operationTime: no causal consistency
    await driver["d"]["c"].insert_one({})
    assert await driver.list_database_names() == ["d"]  # no admin, config or local


async def test_a_server_started_inside_a_timeout_block_does_not_hand_its_deadline_to_commands() -> None:
    with pymongo.timeout(1e-9):  # long past once any command arrives
        server = WireProtocolServer()
        await server.start()
    client = connect(server)
    try:
        await client["d"]["c"].insert_one({"_id": 1})
        assert await client["d"]["c"].find_one({}) == {"_id": 1}
    finally:
        await client.close()
        await server.stop()
