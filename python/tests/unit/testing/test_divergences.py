"""Behaviour that deliberately differs from a real server, pinned so a change is noticed."""

from __future__ import annotations

import asyncio

import pytest
from pymongo import ReadPreference
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb.testing import InMemoryCollection

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)


async def test_concurrent_upserts_on_a_unique_key_never_race(coll: InMemoryCollection) -> None:
    # A server may answer one of these with E11000 (see DIVERGENCES.md); the engine never does.
    await coll.create_index("key", unique=True)
    results = await asyncio.gather(
        *(coll.update_one({"key": "k"}, {"$inc": {"n": 1}}, upsert=True) for _ in range(10))
    )
    assert sum(1 for r in results if r.upserted_id is not None) == 1
    stored = await coll.find({}, {"_id": 0}).to_list()
    assert stored == [{"key": "k", "n": 10}]


async def test_read_settings_are_kept_but_every_read_sees_the_latest_write(coll: InMemoryCollection) -> None:
    # A secondary could lag and a "local" read could see a write later rolled back; the engine has
    # one node, so every read preference and read concern reads the same, latest data.
    writer = coll.with_options(write_concern=WriteConcern(w="majority", wtimeout=1, j=True))
    reader = coll.with_options(
        read_preference=ReadPreference.SECONDARY, read_concern=ReadConcern("available")
    )
    assert (await writer.insert_one({"_id": 1})).acknowledged
    assert await reader.find_one({"_id": 1}) == {"_id": 1}
    assert reader.read_preference == ReadPreference.SECONDARY
    assert reader.read_concern.level == "available"


async def test_unacknowledged_writes_apply_before_returning(coll: InMemoryCollection) -> None:
    # With w=0 the server applies a write some time after pymongo returns; the engine applies it
    # before returning, so a following read on any connection already sees it.
    result = await coll.with_options(write_concern=WriteConcern(w=0)).insert_one({"_id": 1})
    assert not result.acknowledged
    assert await coll.count_documents({}) == 1


async def test_cursor_results_are_fixed_at_first_fetch(coll: InMemoryCollection) -> None:
    await coll.insert_many([{"_id": 1}, {"_id": 2}])
    cursor = coll.find({}).sort("_id", 1)
    first = await cursor.next()
    await coll.insert_one({"_id": 3})
    rest = await cursor.to_list()
    assert [first["_id"], *(d["_id"] for d in rest)] == [1, 2]


async def test_no_query_planner_or_explain(coll: InMemoryCollection) -> None:
    assert not hasattr(coll.find({}), "explain")
    assert not hasattr(await coll.aggregate([{"$match": {}}]), "explain")


async def test_partial_filters_compare_structurally(coll: InMemoryCollection) -> None:
    # A server parses and normalises partial filters before comparing them (compareIndexOptions),
    # so these two are one signature there (85 under another name); the engine compares them as
    # documents, field order aside, and builds a second index.
    await coll.create_index("a", name="eq_implicit", partialFilterExpression={"k": 1, "j": 2})
    await coll.create_index("a", name="eq_explicit", partialFilterExpression={"k": {"$eq": 1}, "j": 2})
    names = [index["name"] for index in await (await coll.list_indexes()).to_list()]
    assert names == ["_id_", "eq_implicit", "eq_explicit"]
    # Field order alone does not make another filter, here as on the server.
    with pytest.raises(OperationFailure) as info:
        await coll.create_index("a", name="reordered", partialFilterExpression={"j": 2, "k": 1})
    assert info.value.code == 85


async def test_command_fields_pymongo_passes_on_are_not_checked(coll: InMemoryCollection) -> None:
    # pymongo sends find_one_and_update's and count_documents' extra keywords as command fields,
    # which a server refuses when unknown (40415); the engine ignores them.
    await coll.insert_one({"_id": 1})
    assert await coll.find_one_and_update({"_id": 1}, {"$set": {"a": 1}}, frobnicate=True) == {"_id": 1}
    assert await coll.count_documents({}, frobnicate=True) == 1
