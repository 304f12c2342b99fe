"""``create_collection`` and a collection's default collation: listing, inheritance, queries."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pymongo.collation import Collation
from pymongo.errors import AutoReconnect, CollectionInvalid, OperationFailure
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb.testing import InMemoryCollection, InMemoryDatabase, InMemoryMongoClient

SIMPLE = {"locale": "simple"}
# As the jstest index_creation_on_different_collations.js (mongodb/mongo) expects the server to list it.
EN_US_STRENGTH_2 = {
    "locale": "en_US",
    "caseLevel": False,
    "caseFirst": "off",
    "strength": 2,
    "numericOrdering": False,
    "alternate": "non-ignorable",
    "maxVariable": "punct",
    "normalization": False,
    "backwards": False,
    "version": "57.1",
}


@pytest.fixture
def db(client: InMemoryMongoClient) -> InMemoryDatabase:
    return client["db"]


async def _listing(coll: InMemoryCollection) -> list[dict[str, Any]]:
    return await (await coll.list_indexes()).to_list()


async def test_id_index_takes_the_collection_default_collation(db: InMemoryDatabase) -> None:
    coll = await db.create_collection("c", collation={"locale": "en_US", "strength": 2, "caseLevel": False})
    assert isinstance(coll, InMemoryCollection)
    assert coll == db["c"]
    assert await db.list_collection_names() == ["c"]
    assert await _listing(coll) == [
        {"v": 2, "key": {"_id": 1}, "name": "_id_", "collation": EN_US_STRENGTH_2}
    ]
    info = await coll.index_information()
    assert info["_id_"]["collation"] == EN_US_STRENGTH_2


async def test_locale_defaults_and_collation_objects(db: InMemoryDatabase) -> None:
    coll = await db.create_collection("c", collation=Collation("fr_CA"))
    (id_index,) = await _listing(coll)
    assert id_index["collation"]["backwards"] is True  # fr_CA's ICU default (jstests/core/collation.js)
    assert id_index["collation"]["strength"] == 3


async def test_indexes_inherit_the_default_unless_they_give_their_own(db: InMemoryDatabase) -> None:
    coll = await db.create_collection("c", collation={"locale": "en_US", "strength": 2})
    assert await coll.create_index("x") == "x_1"
    # index_creation_on_different_collations.js: an explicit simple collation is a distinct index,
    # listed without a collation (the server stores none; index_catalog_helpers.js).
    await coll.create_index("x", name="x_1_1", collation=SIMPLE)
    await coll.create_index("y", collation={"locale": "fr"})
    await coll.create_index("z", v=1)
    listing = {spec["name"]: spec for spec in await _listing(coll)}
    assert listing["x_1"]["collation"] == EN_US_STRENGTH_2
    assert "collation" not in listing["x_1_1"]
    assert listing["y_1"]["collation"]["locale"] == "fr"
    assert listing["y_1"]["collation"]["strength"] == 3
    assert "collation" not in listing["z_1"]  # a v:1 index does not inherit (collation.js)
    # Re-creating the inheriting index with the default given explicitly is the same index.
    assert await coll.create_index("x", collation={"locale": "en_US", "strength": 2}) == "x_1"
    await coll.drop_indexes()
    assert await _listing(coll) == [
        {"v": 2, "key": {"_id": 1}, "name": "_id_", "collation": EN_US_STRENGTH_2}
    ]


async def test_existing_collection_is_refused_like_pymongo(db: InMemoryDatabase) -> None:
    await db["c"].insert_one({"_id": 1})
    with pytest.raises(CollectionInvalid, match="collection c already exists"):
        await db.create_collection("c")
    # Without check_exists the create command runs: same options succeed, others fail with 48.
    assert await db.create_collection("c", check_exists=False) == db["c"]
    with pytest.raises(OperationFailure) as info:
        await db.create_collection("c", check_exists=False, collation={"locale": "en"})
    assert info.value.code == 48
    assert await db["c"].count_documents({}) == 1


async def test_simple_default_collation_is_not_stored(db: InMemoryDatabase) -> None:
    coll = await db.create_collection("c", collation=SIMPLE)
    assert await _listing(coll) == [{"v": 2, "key": {"_id": 1}, "name": "_id_"}]
    await coll.insert_one({"_id": "a"})
    assert await coll.find_one({"_id": "a"}) == {"_id": "a"}


async def test_queries_must_ask_for_the_simple_collation(db: InMemoryDatabase) -> None:
    coll = await db.create_collection("c", collation={"locale": "en_US", "strength": 2})
    await coll.insert_one({"_id": "a", "name": "Ann"})
    assert await coll.estimated_document_count() == 1
    refused: list[Callable[[], Awaitable[object]]] = [
        lambda: coll.find({"name": "ann"}).to_list(),
        lambda: coll.find_one({"name": "ann"}),
        lambda: coll.count_documents({"name": "ann"}),
        lambda: coll.update_one({"name": "ann"}, {"$set": {"x": 1}}),
        lambda: coll.find_one_and_update({"name": "ann"}, {"$set": {"x": 1}}),
        lambda: coll.delete_one({"name": "ann"}),
        lambda: coll.delete_many({"name": "ann"}),
    ]
    for call in refused:
        with pytest.raises(NotImplementedError, match="default collation"):
            await call()
    # Binary comparison, as the server does under the simple collation.
    assert await coll.find({"name": "ann"}, collation=SIMPLE).to_list() == []
    assert await coll.find({"name": "Ann"}).collation(Collation("simple")).to_list() == [
        {"_id": "a", "name": "Ann"}
    ]
    assert await coll.find_one({"name": "Ann"}, collation=SIMPLE) == {"_id": "a", "name": "Ann"}
    assert await coll.count_documents({}, collation=SIMPLE) == 1
    await coll.update_one({"_id": "a"}, {"$set": {"x": 1}}, collation=SIMPLE)
    assert await coll.find_one_and_update({"_id": "a"}, {"$inc": {"x": 1}}, collation=SIMPLE) == {
        "_id": "a",
        "name": "Ann",
        "x": 1,
    }
    assert (await coll.delete_one({"_id": "b"}, collation=SIMPLE)).deleted_count == 0
    assert (await coll.delete_many({}, collation=SIMPLE)).deleted_count == 1


async def test_dropping_forgets_the_default_collation(db: InMemoryDatabase) -> None:
    coll = await db.create_collection("c", collation={"locale": "en"})
    await coll.drop()
    await coll.insert_one({"_id": 1})  # implicitly created again, without a default collation
    assert await coll.find_one({}) == {"_id": 1}
    assert await _listing(coll) == [{"v": 2, "key": {"_id": 1}, "name": "_id_"}]


async def test_create_collection_settings_faults_and_refused_options(db: InMemoryDatabase) -> None:
    view = await db.create_collection("c", write_concern=WriteConcern(w=0))
    assert not view.write_concern.acknowledged
    db.client.fail_next("create_collection", AutoReconnect("reset"))
    with pytest.raises(AutoReconnect):
        await db.create_collection("d", collation={"locale": "en"})
    assert await db.list_collection_names() == ["c"]
    with pytest.raises(NotImplementedError, match="capped"):
        await db.create_collection("e", capped=True, size=4096)
    with pytest.raises(NotImplementedError, match="session"):
        await db.create_collection("e", session=object())
    with pytest.raises(TypeError, match="collation must be"):
        await db.create_collection("e", collation="en")  # type: ignore[arg-type]
