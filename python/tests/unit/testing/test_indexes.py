"""Index definitions, listing shapes, conflicts and unique-index enforcement."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import ASCENDING, DESCENDING, IndexModel, ReturnDocument
from pymongo.collation import Collation
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from agent_framework_mongodb.testing import InMemoryCollection


async def _listing(coll: InMemoryCollection) -> list[dict[str, Any]]:
    return await (await coll.list_indexes()).to_list()


async def test_list_indexes_shapes_match_the_server(coll: InMemoryCollection) -> None:
    assert await _listing(coll) == []
    names = await coll.create_indexes(
        [
            IndexModel([("thread", ASCENDING), ("ts", DESCENDING)], name="by_thread", unique=True),
            IndexModel("expires_at", expireAfterSeconds=0, partialFilterExpression={"kind": "lease"}),
            IndexModel("label", collation=Collation("simple")),
        ]
    )
    assert names == ["by_thread", "expires_at_1", "label_1"]
    assert await _listing(coll) == [
        {"v": 2, "key": {"_id": 1}, "name": "_id_"},
        {"v": 2, "key": {"thread": 1, "ts": -1}, "name": "by_thread", "unique": True},
        {
            "v": 2,
            "key": {"expires_at": 1},
            "name": "expires_at_1",
            "expireAfterSeconds": 0,
            "partialFilterExpression": {"kind": "lease"},
        },
        {"v": 2, "key": {"label": 1}, "name": "label_1"},
    ]
    info = await coll.index_information()
    assert info["by_thread"]["key"] == [("thread", 1), ("ts", -1)]


async def test_non_simple_index_collation_is_listed_expanded(coll: InMemoryCollection) -> None:
    # The server lists every collation field, filled in from ICU's defaults (jstests/core/collation.js).
    await coll.create_index("name", collation={"locale": "en", "strength": 2})
    listing = await _listing(coll)
    assert listing[1]["collation"] == {
        "locale": "en",
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
    # The same collation spelled out in full is the same index.
    assert await coll.create_index("name", collation=listing[1]["collation"]) == "name_1"
    assert len(await _listing(coll)) == 2


async def test_identical_recreation_is_a_no_op(coll: InMemoryCollection) -> None:
    assert await coll.create_index("a", unique=True) == "a_1"
    assert await coll.create_index("a", unique=True) == "a_1"
    assert len(await _listing(coll)) == 2


# Index signatures since FCV 4.9/5.0: key pattern (in order), unique, sparse, collation and partial
# filter (IndexDescriptor::compareIndexOptions, src/mongo/db/index/index_descriptor.cpp;
# jstests/core/index_signature.js). Under the same name another signature is 86, the same
# signature with other options 85; under another name the same signature is 85 and another one a
# new index.


@pytest.mark.parametrize(
    "options",
    [
        {"unique": True},
        {"sparse": True},
        {"collation": {"locale": "en"}},
        {"partialFilterExpression": {"k": 1}},
    ],
)
async def test_same_name_other_signature_is_index_key_specs_conflict(
    coll: InMemoryCollection, options: dict[str, Any]
) -> None:
    await coll.create_index("a")
    with pytest.raises(OperationFailure) as info:
        await coll.create_index("a", **options)
    assert info.value.code == 86
    assert info.value.details is not None
    assert info.value.details["codeName"] == "IndexKeySpecsConflict"


async def test_same_name_and_signature_with_other_options_is_index_options_conflict(
    coll: InMemoryCollection,
) -> None:
    await coll.create_index("a", expireAfterSeconds=10)
    with pytest.raises(OperationFailure) as info:
        await coll.create_index("a", expireAfterSeconds=20)
    assert info.value.code == 85
    assert info.value.details is not None
    assert info.value.details["codeName"] == "IndexOptionsConflict"
    # unique: false, sparse: false and background are no part of either (identical: a no-op).
    assert await coll.create_index("a", expireAfterSeconds=10, unique=False, background=True) == "a_1"
    # hidden is an option outside the signature, compared as the newest server source compares it.
    await coll.create_index("b")
    with pytest.raises(OperationFailure) as info:
        await coll.create_index("b", hidden=True)
    assert info.value.code == 85


async def test_same_name_different_keys_is_index_key_specs_conflict(coll: InMemoryCollection) -> None:
    await coll.create_index("a", name="idx")
    with pytest.raises(OperationFailure) as info:
        await coll.create_index("b", name="idx")
    assert info.value.code == 86
    # Key order is part of the key pattern.
    await coll.create_index([("a", 1), ("b", 1)], name="ab")
    with pytest.raises(OperationFailure) as info:
        await coll.create_index([("b", 1), ("a", 1)], name="ab")
    assert info.value.code == 86


async def test_same_signature_under_another_name_is_index_options_conflict(coll: InMemoryCollection) -> None:
    await coll.create_index("a")
    with pytest.raises(OperationFailure, match="Index already exists with a different name: a_1") as info:
        await coll.create_index("a", name="other")
    assert info.value.code == 85
    with pytest.raises(OperationFailure, match="equivalent index already exists") as info:
        await coll.create_index("a", name="other", expireAfterSeconds=5)
    assert info.value.code == 85
    assert [i["name"] for i in await _listing(coll)] == ["_id_", "a_1"]


async def test_other_signature_under_another_name_is_a_new_index(coll: InMemoryCollection) -> None:
    await coll.create_index("a")
    await coll.create_index("a", name="sparse", sparse=True)
    await coll.create_index("a", name="unique", unique=True)
    await coll.create_index("a", name="unique_sparse", unique=True, sparse=True)
    await coll.create_index("a", name="partial", partialFilterExpression={"k": 1})
    await coll.create_index("a", name="collated", collation={"locale": "en"})
    await coll.create_index([("b", 1), ("a", 1)], name="ba")
    await coll.create_index([("a", 1), ("b", 1)], name="ab")
    assert [i["name"] for i in await _listing(coll)] == [
        "_id_",
        "a_1",
        "sparse",
        "unique",
        "unique_sparse",
        "partial",
        "collated",
        "ba",
        "ab",
    ]
    # The unique one is enforced; the others are not.
    await coll.insert_one({"a": 1})
    with pytest.raises(DuplicateKeyError, match="index: unique "):
        await coll.insert_one({"a": 1})


async def test_compound_ttl_index_is_rejected(coll: InMemoryCollection) -> None:
    # https://www.mongodb.com/docs/manual/core/index-ttl/#restrictions
    with pytest.raises(OperationFailure) as info:
        await coll.create_index([("a", 1), ("b", 1)], expireAfterSeconds=10)
    assert info.value.code == 67
    with pytest.raises(OperationFailure):
        await coll.create_index("_id", expireAfterSeconds=10)
    with pytest.raises(OperationFailure):
        await coll.create_index("a", expireAfterSeconds=-1)


async def test_invalid_index_options_are_rejected(coll: InMemoryCollection) -> None:
    with pytest.raises(OperationFailure) as info:
        await coll.create_index("a", frobnicate=True)
    assert info.value.code == 197
    with pytest.raises(OperationFailure) as info:
        await coll.create_index("a", partialFilterExpression={"a": {"$ne": 1}})
    assert info.value.code == 67
    with pytest.raises(OperationFailure):
        await coll.create_index("a", sparse=True, partialFilterExpression={"a": 1})


async def test_drop_index_errors_and_success(coll: InMemoryCollection) -> None:
    with pytest.raises(OperationFailure) as info:
        await coll.drop_index("a_1")
    assert info.value.code == 26
    await coll.create_index("a")
    with pytest.raises(OperationFailure) as info:
        await coll.drop_index("b_1")
    assert info.value.code == 27
    with pytest.raises(OperationFailure) as info:
        await coll.drop_index("_id_")
    assert info.value.code == 72
    await coll.drop_index([("a", 1)])
    assert [i["name"] for i in await _listing(coll)] == ["_id_"]


async def test_drop_removes_documents_and_indexes(coll: InMemoryCollection) -> None:
    await coll.create_index("a", unique=True)
    await coll.insert_one({"a": 1})
    await coll.drop()
    assert await _listing(coll) == []
    await coll.insert_one({"a": 1})
    await coll.insert_one({"a": 1})


async def test_partial_unique_index_ignores_documents_outside_its_filter(coll: InMemoryCollection) -> None:
    # https://www.mongodb.com/docs/manual/core/index-partial/#partial-index-with-unique-constraint
    await coll.create_index("u", unique=True, partialFilterExpression={"kind": "p"})
    await coll.insert_one({"u": 1, "kind": "p"})
    await coll.insert_one({"u": 1, "kind": "q"})
    await coll.insert_one({"u": 1})
    with pytest.raises(DuplicateKeyError) as info:
        await coll.insert_one({"u": 1, "kind": "p"})
    assert info.value.details is not None
    assert info.value.details["keyPattern"] == {"u": 1}
    assert info.value.details["keyValue"] == {"u": 1}


async def test_unique_compound_index_treats_missing_fields_as_null(coll: InMemoryCollection) -> None:
    # https://www.mongodb.com/docs/manual/core/index-unique/#missing-document-field-in-a-unique-single-field-index
    await coll.create_index([("p", 1), ("q", 1)], unique=True)
    await coll.insert_one({"_id": 1})
    with pytest.raises(DuplicateKeyError):
        await coll.insert_one({"_id": 2})
    with pytest.raises(DuplicateKeyError):
        await coll.insert_one({"_id": 3, "p": None})
    await coll.insert_one({"_id": 4, "p": 1})


async def test_partial_filter_can_exempt_documents_missing_the_field(coll: InMemoryCollection) -> None:
    await coll.create_index([("p", 1)], unique=True, partialFilterExpression={"p": {"$exists": True}})
    await coll.insert_many([{"_id": 1}, {"_id": 2}])
    with pytest.raises(BulkWriteError) as info:
        await coll.insert_many([{"_id": 3, "p": 1}, {"_id": 4, "p": 1}])
    assert info.value.details["writeErrors"][0]["code"] == 11000


async def test_unique_numbers_compare_by_value_but_not_against_booleans(coll: InMemoryCollection) -> None:
    await coll.create_index("n", unique=True)
    await coll.insert_one({"n": 1})
    await coll.insert_one({"n": True})
    with pytest.raises(DuplicateKeyError):
        await coll.insert_one({"n": 1.0})


async def test_uniqueness_enforced_on_update_and_upsert(coll: InMemoryCollection) -> None:
    await coll.create_index("u", unique=True)
    await coll.insert_many([{"_id": 1, "u": "a"}, {"_id": 2, "u": "b"}])
    with pytest.raises(DuplicateKeyError) as write_info:
        await coll.update_one({"_id": 2}, {"$set": {"u": "a"}})
    assert write_info.value.details is not None
    assert write_info.value.details["index"] == 0
    with pytest.raises(DuplicateKeyError) as command_info:
        await coll.find_one_and_update({"_id": 2}, [{"$set": {"u": "a"}}])
    assert command_info.value.details is not None
    assert command_info.value.details["codeName"] == "DuplicateKey"
    with pytest.raises(DuplicateKeyError):
        await coll.update_one({"_id": 3}, {"$set": {"u": "b"}}, upsert=True)
    assert await coll.find({}, sort=[("_id", 1)]).to_list() == [{"_id": 1, "u": "a"}, {"_id": 2, "u": "b"}]


async def test_upsert_colliding_on_id_outside_the_filter_is_duplicate(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": "c", "kind": "x"})
    with pytest.raises(DuplicateKeyError):
        await coll.find_one_and_update(
            {"_id": "c", "kind": "y"}, {"$set": {"n": 1}}, upsert=True, return_document=ReturnDocument.AFTER
        )


async def test_multikey_unique_index_checks_each_element(coll: InMemoryCollection) -> None:
    await coll.create_index("tags", unique=True)
    await coll.insert_one({"tags": ["a", "b"]})
    with pytest.raises(DuplicateKeyError):
        await coll.insert_one({"tags": ["c", "b"]})


async def test_building_a_unique_index_over_duplicates_fails(coll: InMemoryCollection) -> None:
    await coll.insert_many([{"a": 1}, {"a": 1}])
    with pytest.raises(DuplicateKeyError):
        await coll.create_index("a", unique=True)
    assert [i["name"] for i in await _listing(coll)] == ["_id_"]


async def test_unique_keys_follow_every_write(coll: InMemoryCollection) -> None:
    # The engine keeps each unique index's entries write by write; they must stay exact.
    await coll.create_index("k", unique=True, name="k_unique")
    await coll.insert_one({"_id": 1, "k": "a"})
    await coll.delete_one({"_id": 1})
    await coll.insert_one({"_id": 2, "k": "a"})  # freed by the delete
    await coll.update_one({"_id": 2}, {"$set": {"k": "b"}})
    await coll.insert_one({"_id": 3, "k": "a"})  # freed by the update
    with pytest.raises(DuplicateKeyError):
        await coll.insert_one({"_id": 4, "k": "b"})  # taken by the update
    await coll.find_one_and_update({"_id": 5}, {"$set": {"k": "c"}}, upsert=True)
    with pytest.raises(DuplicateKeyError):
        await coll.insert_one({"_id": 6, "k": "c"})  # taken by the upsert
    await coll.delete_many({"k": {"$in": ["a", "b", "c"]}})
    await coll.insert_many([{"_id": 7, "k": "a"}, {"_id": 8, "k": "b"}, {"_id": 9, "k": "c"}])


async def test_unique_keys_follow_index_changes(coll: InMemoryCollection) -> None:
    await coll.insert_many([{"_id": 1, "k": "a"}, {"_id": 2, "k": "b"}])
    await coll.insert_one({"_id": 3, "k": "a"})  # no unique index yet
    await coll.delete_one({"_id": 3})
    await coll.create_index("k", unique=True, name="k_unique")
    with pytest.raises(DuplicateKeyError):
        await coll.insert_one({"_id": 4, "k": "a"})
    await coll.drop_index("k_unique")
    await coll.insert_one({"_id": 4, "k": "a"})
    with pytest.raises(DuplicateKeyError):
        await coll.insert_one({"_id": 4, "k": "z"})  # _id_ is unique too
