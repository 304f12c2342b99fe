"""Codec options, read preference, write concern and read concern: views, inheritance, ``w=0``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from bson.codec_options import CodecOptions
from pymongo import AsyncMongoClient, ReadPreference
from pymongo.collation import Collation
from pymongo.errors import ConfigurationError, DuplicateKeyError, InvalidOperation
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import Nearest, Primary, SecondaryPreferred
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

UNACKNOWLEDGED = WriteConcern(w=0)
COLLATION_REFUSED = "Collation is unsupported for unacknowledged writes."


def test_defaults_are_pymongos(client: InMemoryMongoClient) -> None:
    coll = client["db"]["c"]
    for holder in (client, client["db"], coll):
        assert isinstance(holder.read_preference, Primary)
        assert holder.read_preference == Primary()
        assert holder.write_concern == WriteConcern()
        assert holder.write_concern.acknowledged
        assert holder.read_concern == ReadConcern()
        assert holder.codec_options == CodecOptions()
    assert client.timeout is None


def test_client_options_are_parsed_like_pymongo_and_inherited() -> None:
    client = InMemoryMongoClient(w=0, readPreference="secondaryPreferred", readConcernLevel="majority")
    coll = client["db"]["c"]
    for holder in (client, client["db"], coll):
        assert holder.read_preference == SecondaryPreferred()
        assert holder.write_concern == WriteConcern(w=0)
        assert not holder.write_concern.acknowledged
        assert holder.read_concern == ReadConcern("majority")
    assert InMemoryMongoClient(W="majority", wTimeoutMS=50).write_concern == WriteConcern("majority", 50)
    assert InMemoryMongoClient(read_preference=ReadPreference.NEAREST).read_preference == Nearest()
    assert InMemoryMongoClient(timeoutMS=250).timeout == 0.25


@pytest.mark.parametrize(
    "options",
    [
        {"readPreference": "bogus"},
        {"readPreference": "primary", "readPreferenceTags": "dc:ny"},
        {"w": -1},
        {"w": 0, "journal": True},
        {"readConcernLevel": 1},
        {"timeoutMS": -5},
        {"read_preference": "secondary"},
    ],
)
def test_invalid_client_options_raise_what_pymongo_raises(options: dict[str, Any]) -> None:
    with pytest.raises(Exception) as expected:  # noqa: PT011 - whatever pymongo raises
        AsyncMongoClient(connect=False, **options)
    with pytest.raises(type(expected.value)) as actual:
        InMemoryMongoClient(**options)
    assert str(actual.value) == str(expected.value)


async def test_with_options_is_a_new_view_of_the_same_collection(coll: InMemoryCollection) -> None:
    view = coll.with_options(write_concern=WriteConcern(w="majority"), read_preference=ReadPreference.NEAREST)
    assert view is not coll
    assert view == coll
    assert hash(view) == hash(coll)
    assert view.full_name == coll.full_name
    assert view.write_concern == WriteConcern(w="majority")
    assert view.read_preference == Nearest()
    assert coll.write_concern == WriteConcern()
    assert coll.read_preference == Primary()
    # Settings not given are the view's own.
    again = view.with_options(read_concern=ReadConcern("local"))
    assert again.write_concern == WriteConcern(w="majority")
    assert again.read_preference == Nearest()
    assert again.read_concern == ReadConcern("local")
    # Documents, indexes, unique keys and existence are shared.
    await view.create_index("k", unique=True)
    assert await coll.index_information() == await view.index_information()
    assert await coll.database.list_collection_names() == ["coll"]
    await coll.insert_one({"_id": 1, "k": "a"})
    assert await view.find_one({"_id": 1}) == {"_id": 1, "k": "a"}
    with pytest.raises(DuplicateKeyError):
        await view.insert_one({"_id": 2, "k": "a"})
    await view.drop()
    assert await coll.index_information() == {}
    assert await coll.database.list_collection_names() == []


async def test_database_and_client_hand_out_views_with_settings(client: InMemoryMongoClient) -> None:
    db = client["db"]
    primary = db.get_collection("c", read_preference=ReadPreference.PRIMARY)
    assert primary is not db["c"]
    assert primary == db["c"]
    assert primary.read_preference == Primary()
    majority = db.get_collection("c", write_concern=WriteConcern(w="majority"))
    assert majority.write_concern == WriteConcern(w="majority")
    unacked_db = db.with_options(write_concern=UNACKNOWLEDGED)
    assert unacked_db == db
    assert unacked_db is not db
    assert unacked_db["c"].write_concern == UNACKNOWLEDGED
    assert unacked_db.with_options(read_concern=ReadConcern("majority")).write_concern == UNACKNOWLEDGED
    secondary_db = client.get_database("db", read_preference=ReadPreference.SECONDARY)
    assert secondary_db["c"].read_preference == ReadPreference.SECONDARY
    assert client.get_database("db") is db
    await secondary_db["c"].insert_one({"_id": 1})
    # A read preference is kept, not acted on: there is one node, and it answers every read.
    assert await secondary_db["c"].find_one({}) == {"_id": 1}
    assert await db["c"].count_documents({}) == 1


def test_settings_of_the_wrong_type_raise_type_error_as_pymongo(coll: InMemoryCollection) -> None:
    with pytest.raises(TypeError, match="is not valid for read_preference"):
        coll.with_options(read_preference="primary")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="write_concern must be an instance"):
        coll.with_options(write_concern={"w": 0})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="read_concern must be an instance"):
        coll.database.get_collection("c", read_concern="majority")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="codec_options must be an instance"):
        coll.database.client.get_database("db", codec_options={"tz_aware": True})  # type: ignore[arg-type]


async def test_codec_options_of_a_view_decode_its_results(coll: InMemoryCollection) -> None:
    moment = datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    await coll.insert_one({"_id": 1, "at": moment})
    aware = coll.with_options(codec_options=CodecOptions(tz_aware=True))
    found = await aware.find_one({"_id": 1})
    assert found is not None
    assert found["at"] == moment
    naive = await coll.find_one({"_id": 1})
    assert naive is not None
    assert naive["at"].tzinfo is None


async def test_unacknowledged_writes_apply_and_return_unacknowledged_results(
    coll: InMemoryCollection,
) -> None:
    fire_and_forget = coll.with_options(write_concern=UNACKNOWLEDGED)
    inserted = await fire_and_forget.insert_one({"_id": 1, "n": 0})
    assert not inserted.acknowledged
    assert inserted.inserted_id == 1
    many = await fire_and_forget.insert_many([{"_id": 2}, {"_id": 3}])
    assert not many.acknowledged
    assert many.inserted_ids == [2, 3]
    updated = await fire_and_forget.update_one({"_id": 1}, {"$set": {"n": 1}})
    assert not updated.acknowledged
    assert updated.raw_result is None
    with pytest.raises(InvalidOperation, match="unacknowledged"):
        _ = updated.matched_count
    assert await fire_and_forget.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}}) is None
    deleted = await fire_and_forget.delete_one({"_id": 2})
    assert not deleted.acknowledged
    assert deleted.raw_result == {"ok": 1}
    with pytest.raises(InvalidOperation, match="unacknowledged"):
        _ = deleted.deleted_count
    emptied = await fire_and_forget.delete_many({"_id": 3})
    assert not emptied.acknowledged
    assert await coll.find({}).to_list() == [{"_id": 1, "n": 2}]


async def test_unacknowledged_writes_lose_the_servers_errors(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1, "n": 0})
    fire_and_forget = coll.with_options(write_concern=UNACKNOWLEDGED)
    assert not (await fire_and_forget.insert_one({"_id": 1, "n": 9})).acknowledged
    await fire_and_forget.insert_many([{"_id": 2}, {"_id": 1}, {"_id": 3}])  # ordered: stops at _id 1
    assert not (await fire_and_forget.update_one({"_id": 1}, {"$set": {"_id": 5}})).acknowledged
    assert await fire_and_forget.find_one_and_update({"_id": 1}, {"$set": {"_id": 5}}) is None
    assert not (await fire_and_forget.delete_one({"_id": 1}, hint="missing")).acknowledged
    assert await coll.find({}).to_list() == [{"_id": 1, "n": 0}, {"_id": 2}]
    # Client-side errors still reach the caller.
    with pytest.raises(TypeError):
        await fire_and_forget.insert_one([("_id", 1)])  # type: ignore[arg-type]


@pytest.mark.parametrize("collation", [{"locale": "simple"}, Collation("simple"), {"locale": "en"}])
async def test_collation_on_unacknowledged_writes_is_refused_like_pymongo(
    coll: InMemoryCollection, collation: Any
) -> None:
    await coll.insert_one({"_id": 1})
    fire_and_forget = coll.with_options(write_concern=UNACKNOWLEDGED)
    with pytest.raises(ConfigurationError, match=COLLATION_REFUSED):
        await fire_and_forget.update_one({"_id": 1}, {"$set": {"x": 1}}, collation=collation)
    with pytest.raises(ConfigurationError, match=COLLATION_REFUSED):
        await fire_and_forget.find_one_and_update({"_id": 1}, {"$set": {"x": 1}}, collation=collation)
    with pytest.raises(ConfigurationError, match=COLLATION_REFUSED):
        await fire_and_forget.delete_one({"_id": 1}, collation=collation)
    with pytest.raises(ConfigurationError, match=COLLATION_REFUSED):
        await fire_and_forget.delete_many({}, collation=collation)
    with pytest.raises(TypeError, match="collation must be"):
        await fire_and_forget.delete_many({}, collation="simple")  # type: ignore[arg-type]
    assert await coll.find({}).to_list() == [{"_id": 1}]


async def test_sort_on_an_unacknowledged_update_needs_a_newer_server(coll: InMemoryCollection) -> None:
    with pytest.raises(ConfigurationError, match=r"MongoDB 8\.0\+ to use sort on unacknowledged"):
        await coll.with_options(write_concern=UNACKNOWLEDGED).update_one(
            {}, {"$set": {"x": 1}}, sort={"_id": 1}
        )
