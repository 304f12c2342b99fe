"""Reads and writes: pymongo result and error types, BSON round trips, cursors, interleaving."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import bson
import pytest
from bson.errors import InvalidDocument
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo import DeleteOne, IndexModel, InsertOne, ReturnDocument
from pymongo.collation import Collation
from pymongo.errors import (
    BulkWriteError,
    DocumentTooLarge,
    DuplicateKeyError,
    InvalidOperation,
    OperationFailure,
    WriteError,
)
from pymongo.results import DeleteResult, InsertManyResult, InsertOneResult, UpdateResult
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb.testing import InMemoryCollection, InMemoryCursor, InMemoryMongoClient


async def test_results_are_pymongo_types(coll: InMemoryCollection) -> None:
    inserted = await coll.insert_one({"_id": "a", "n": 1})
    assert isinstance(inserted, InsertOneResult)
    assert inserted.inserted_id == "a"
    assert inserted.acknowledged
    many = await coll.insert_many([{"_id": "b"}, {"_id": "c"}])
    assert isinstance(many, InsertManyResult)
    assert many.inserted_ids == ["b", "c"]
    updated = await coll.update_one({"_id": "a"}, {"$set": {"n": 2}})
    assert isinstance(updated, UpdateResult)
    assert (updated.matched_count, updated.modified_count, updated.upserted_id) == (1, 1, None)
    deleted = await coll.delete_one({"_id": "a"})
    assert isinstance(deleted, DeleteResult)
    assert deleted.deleted_count == 1
    assert (await coll.delete_many({})).deleted_count == 2


async def test_update_that_changes_nothing_is_matched_but_not_modified(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1, "n": 1})
    result = await coll.update_one({"_id": 1}, {"$set": {"n": 1}})
    assert (result.matched_count, result.modified_count) == (1, 0)
    missing = await coll.update_one({"_id": 2}, {"$set": {"n": 1}})
    assert (missing.matched_count, missing.modified_count) == (0, 0)


async def test_upsert_result_reports_the_new_id(coll: InMemoryCollection) -> None:
    result = await coll.update_one({"_id": "x"}, {"$set": {"n": 1}}, upsert=True)
    assert (result.matched_count, result.modified_count, result.upserted_id) == (0, 0, "x")
    assert await coll.find_one({"_id": "x"}) == {"_id": "x", "n": 1}


async def test_insert_one_sets_generated_id_on_the_callers_document(coll: InMemoryCollection) -> None:
    document: dict[str, Any] = {"n": 1}
    result = await coll.insert_one(document)
    assert isinstance(document["_id"], ObjectId)
    assert result.inserted_id == document["_id"]


async def test_duplicate_id_raises_duplicate_key_error_with_server_details(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": "a"})
    with pytest.raises(DuplicateKeyError) as info:
        await coll.insert_one({"_id": "a"})
    error = info.value
    assert error.code == 11000
    assert error.details is not None
    assert error.details["keyPattern"] == {"_id": 1}
    assert error.details["keyValue"] == {"_id": "a"}
    assert error.details["errmsg"].startswith("E11000 duplicate key error collection: db.coll index: _id_")


async def test_insert_many_ordered_stops_at_first_duplicate(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 2})
    with pytest.raises(BulkWriteError) as info:
        await coll.insert_many([{"_id": 1}, {"_id": 2}, {"_id": 3}])
    assert info.value.details["nInserted"] == 1
    assert info.value.details["writeErrors"][0]["index"] == 1
    assert info.value.details["writeErrors"][0]["code"] == 11000
    assert await coll.count_documents({}) == 2


async def test_insert_many_unordered_continues_after_duplicate(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 2})
    with pytest.raises(BulkWriteError) as info:
        await coll.insert_many([{"_id": 1}, {"_id": 2}, {"_id": 3}], ordered=False)
    assert info.value.details["nInserted"] == 2
    assert await coll.count_documents({}) == 3


async def test_datetimes_truncate_to_milliseconds_and_come_back_naive_utc(coll: InMemoryCollection) -> None:
    aware = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    await coll.insert_one({"_id": 1, "at": aware})
    found = await coll.find_one({"_id": 1})
    assert found is not None
    assert found["at"] == datetime(2024, 5, 1, 10, 0, 0, 123000)
    assert found["at"].tzinfo is None


async def test_tz_aware_client_returns_aware_utc_datetimes() -> None:
    client = InMemoryMongoClient(tz_aware=True)
    coll = client["db"]["c"]
    await coll.insert_one({"_id": 1, "at": datetime(2024, 5, 1, 10, 0, 0, 999999)})
    found = await coll.find_one({"at": {"$gte": datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)}})
    assert found is not None
    assert found["at"] == datetime(2024, 5, 1, 10, 0, 0, 999000, tzinfo=timezone.utc)
    assert found["at"].tzinfo is not None


async def test_tuples_become_lists_and_bytes_stay_bytes(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1, "t": (1, 2), "b": b"\x00\x01", "nested": {"t": ("x",)}})
    found = await coll.find_one({"_id": 1})
    assert found == {"_id": 1, "t": [1, 2], "b": b"\x00\x01", "nested": {"t": ["x"]}}
    assert type(found["b"]) is bytes


@pytest.mark.parametrize("document", [{1: "non-string key"}, {"bad\x00key": 1}, {"v": object()}])
async def test_invalid_documents_raise_invalid_document(coll: InMemoryCollection, document: Any) -> None:
    with pytest.raises(InvalidDocument):
        await coll.insert_one(document)


MIB16 = 16 * 1024 * 1024
# {"_id": 1, "blob": b"..."} encodes to the blob's length plus 25 bytes.
_BLOB_OVERHEAD = 25


def _sized(size: int, _id: Any = 1) -> dict[str, Any]:
    document = {"_id": _id, "blob": b"x" * (size - _BLOB_OVERHEAD)}
    assert len(bson.encode(document)) == size
    return document


async def test_insert_over_16_mib_is_the_servers_write_error_code_2(coll: InMemoryCollection) -> None:
    # pymongo sends it (run_command only refuses a command past maxBsonObjectSize + 16,382 bytes);
    # the server refuses it (fixDocumentForInsert, jstests/core/max_doc_size.js).
    with pytest.raises(WriteError) as info:
        await coll.insert_one(_sized(MIB16 + 1))
    assert type(info.value) is WriteError
    assert info.value.code == 2
    assert info.value.details is not None
    assert info.value.details["errmsg"].startswith("object to insert too large. size in bytes: 16777217")
    assert await coll.count_documents({}) == 0
    await coll.insert_one(_sized(MIB16, _id=2))
    assert await coll.count_documents({}) == 1


async def test_insert_past_the_command_allowance_is_refused_by_pymongo(coll: InMemoryCollection) -> None:
    with pytest.raises(DocumentTooLarge, match=r"up to 16793598 bytes"):
        await coll.insert_one(_sized(MIB16 + 16382))
    assert await coll.count_documents({}) == 0


async def test_unacknowledged_insert_over_16_mib_is_refused_by_pymongo(coll: InMemoryCollection) -> None:
    unacknowledged = coll.with_options(write_concern=WriteConcern(w=0))
    with pytest.raises(
        DocumentTooLarge, match=r"BSON document too large \(\d+ bytes\).* up to 16777216 bytes"
    ):
        await unacknowledged.insert_one(_sized(MIB16 + 1))
    with pytest.raises(DocumentTooLarge):
        await unacknowledged.insert_many([{"_id": 0}, _sized(MIB16 + 1)])
    assert await coll.count_documents({}) == 0


async def test_insert_many_over_16_mib_is_a_write_error_and_past_the_internal_limit_a_command_error(
    coll: InMemoryCollection,
) -> None:
    with pytest.raises(BulkWriteError) as bulk:
        await coll.insert_many([{"_id": 0}, _sized(MIB16 + 1), {"_id": 2}])
    assert bulk.value.details["nInserted"] == 1
    (error,) = bulk.value.details["writeErrors"]
    assert (error["index"], error["code"]) == (1, 2)
    # Past BSONObjMaxInternalSize (16 MiB + 16 KiB) the server cannot parse the message at all.
    with pytest.raises(OperationFailure) as info:
        await coll.insert_many([{"_id": 10}, _sized(MIB16 + 16 * 1024 + 1, _id=11)])
    assert info.value.code == 10334
    # Ordered: the first error stopped the first call; the second inserted nothing.
    assert [d["_id"] for d in await coll.find({}, {"_id": 1}).to_list()] == [0]


async def test_update_growing_past_16_mib_fails_on_the_server_side(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1, "a": b"x" * (9 * 1024 * 1024)})
    with pytest.raises(WriteError) as info:
        await coll.update_one({"_id": 1}, {"$set": {"b": b"y" * (9 * 1024 * 1024)}})
    assert info.value.code == 17419
    with pytest.raises(OperationFailure) as failed:
        await coll.find_one_and_update({"_id": 1}, {"$set": {"b": b"y" * (9 * 1024 * 1024)}})
    assert failed.value.code == 17419


async def test_upsert_past_16_mib_fails_with_its_own_code(coll: InMemoryCollection) -> None:
    # UpsertStage: "Document to upsert is larger than 16777216" (jstests/core/max_doc_size.js).
    # Both halves travel in one update statement, which must stay within pymongo's allowance.
    half = b"x" * (8 * 1024 * 1024 + 1024)
    pipeline = [{"$set": {"a": half, "b": half}}]
    with pytest.raises(WriteError, match="Document to upsert is larger than 16777216") as info:
        await coll.update_one({"_id": 1}, pipeline, upsert=True)
    assert info.value.code == 17420
    with pytest.raises(OperationFailure, match="Document to upsert is larger") as failed:
        await coll.find_one_and_update({"_id": 1}, {"$setOnInsert": {"a": half, "b": half}}, upsert=True)
    assert failed.value.code == 17420
    assert await coll.count_documents({}) == 0


@pytest.mark.parametrize(
    ("operation", "name"),
    [("update_one", "update"), ("find_one_and_update", "findAndModify"), ("delete_one", "delete")],
)
async def test_a_command_past_the_allowance_is_refused_by_pymongo(
    coll: InMemoryCollection, operation: str, name: str
) -> None:
    await coll.insert_one({"_id": 1})
    big = {"_id": 1, "x": {"$ne": "y" * (MIB16 + 16382)}}
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "update_one": lambda: coll.update_one(big, {"$set": {"a": 1}}),
        "find_one_and_update": lambda: coll.find_one_and_update(big, {"$set": {"a": 1}}),
        "delete_one": lambda: coll.delete_one(big),
    }
    call = calls[operation]
    with pytest.raises(DocumentTooLarge, match=f"^{name} command document too large$"):
        await call()
    assert await coll.find_one({"_id": 1}) == {"_id": 1}


async def test_returned_documents_are_fresh_copies(coll: InMemoryCollection) -> None:
    original: dict[str, Any] = {"_id": 1, "nested": {"list": [1]}}
    await coll.insert_one(original)
    original["nested"]["list"].append(2)
    found = await coll.find_one({"_id": 1})
    assert found is not None
    found["nested"]["list"].append(3)
    listed = await coll.find({}).to_list()
    assert listed == [{"_id": 1, "nested": {"list": [1]}}]
    after = await coll.find_one_and_update(
        {"_id": 1}, {"$set": {"x": 1}}, return_document=ReturnDocument.AFTER
    )
    assert after is not None
    after["x"] = 99
    assert await coll.find_one({"_id": 1}) == {"_id": 1, "nested": {"list": [1]}, "x": 1}


async def _seed(coll: InMemoryCollection) -> None:
    await coll.insert_many([{"_id": i, "group": i % 2, "n": i, "extra": "e"} for i in range(6)])


async def test_find_returns_a_chainable_cursor_not_a_coroutine(coll: InMemoryCollection) -> None:
    await _seed(coll)
    cursor = coll.find({"n": {"$gte": 1}})
    assert isinstance(cursor, InMemoryCursor)
    docs = await cursor.sort([("group", 1), ("n", -1)]).skip(1).limit(3).to_list()
    assert [d["_id"] for d in docs] == [2, 5, 3]
    with pytest.raises(InvalidOperation):
        cursor.limit(1)


async def test_find_keyword_sort_limit_skip_and_async_iteration(coll: InMemoryCollection) -> None:
    await _seed(coll)
    seen = [doc["_id"] async for doc in coll.find({}, sort=[("group", -1), ("n", 1)], limit=4, skip=1)]
    assert seen == [3, 5, 0, 2]


async def test_to_list_length_pages_through_a_cursor(coll: InMemoryCollection) -> None:
    await _seed(coll)
    cursor = coll.find({}).sort("n", 1)
    assert [d["_id"] for d in await cursor.to_list(2)] == [0, 1]
    assert [d["_id"] for d in await cursor.to_list(None)] == [2, 3, 4, 5]
    assert await cursor.to_list() == []


async def test_projection_inclusion_exclusion_and_id_suppression(coll: InMemoryCollection) -> None:
    await _seed(coll)
    assert await coll.find_one({"_id": 1}, {"n": 1}) == {"_id": 1, "n": 1}
    assert await coll.find_one({"_id": 1}, {"n": 1, "_id": 0}) == {"n": 1}
    assert await coll.find_one({"_id": 1}, {"extra": 0, "group": 0}) == {"_id": 1, "n": 1}
    assert await coll.find_one({"_id": 1}, ["n"]) == {"_id": 1, "n": 1}
    docs = await coll.find({"group": 0}, {"_id": 0, "n": 1}, sort=[("n", -1)]).to_list()
    assert docs == [{"n": 4}, {"n": 2}, {"n": 0}]


async def test_find_one_sort_and_bare_id(coll: InMemoryCollection) -> None:
    await _seed(coll)
    top = await coll.find_one({"group": 1}, sort=[("n", -1)])
    assert top is not None
    assert top["_id"] == 5
    assert await coll.find_one(3, {"_id": 1}) == {"_id": 3}


async def test_count_documents_with_skip_and_limit(coll: InMemoryCollection) -> None:
    await _seed(coll)
    assert await coll.count_documents({"group": 0}) == 3
    assert await coll.count_documents({}, skip=4) == 2
    assert await coll.count_documents({}, limit=2) == 2
    with pytest.raises(OperationFailure):
        await coll.count_documents({}, limit=0)


async def test_simple_collation_is_accepted_everywhere(coll: InMemoryCollection) -> None:
    simple = {"locale": "simple"}
    await coll.insert_one({"_id": "a", "name": "B"})
    assert await coll.find_one({"name": "b"}, collation=Collation("simple")) is None
    assert await coll.find({"name": "B"}, collation=simple).to_list() == [{"_id": "a", "name": "B"}]
    assert await coll.find({}).collation(simple).to_list() != []
    assert await coll.count_documents({}, collation=simple) == 1
    await coll.update_one({"_id": "a"}, {"$set": {"x": 1}}, collation=simple)
    await coll.find_one_and_update({"_id": "a"}, {"$set": {"x": 2}}, collation=simple)
    assert (await coll.delete_one({"_id": "a"}, collation=simple)).deleted_count == 1
    await coll.delete_many({}, collation=simple)


async def test_non_simple_collation_is_refused_not_silently_ignored(coll: InMemoryCollection) -> None:
    with pytest.raises(NotImplementedError, match="simple"):
        await coll.find_one({}, collation={"locale": "en", "strength": 2})


async def test_hint_must_name_an_existing_index(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1, "a": 1})
    await coll.create_index([("a", 1)])
    assert await coll.find({"a": 1}, hint="a_1").to_list() == [{"_id": 1, "a": 1}]
    assert await coll.find({"a": 1}).hint([("a", 1)]).to_list() != []
    with pytest.raises(OperationFailure) as info:
        await coll.find({"a": 1}, hint="missing_1").to_list()
    assert info.value.code == 2


_SESSION_CALLS: dict[str, Callable[[InMemoryCollection, object], Any]] = {
    "find": lambda c, s: c.find({}, session=s).to_list(),
    "find_one": lambda c, s: c.find_one({}, session=s),
    "count_documents": lambda c, s: c.count_documents({}, session=s),
    "estimated_document_count": lambda c, s: c.estimated_document_count(session=s),
    "insert_one": lambda c, s: c.insert_one({"a": 1}, session=s),
    "insert_many": lambda c, s: c.insert_many([{"a": 1}], session=s),
    "update_one": lambda c, s: c.update_one({}, {"$set": {"a": 1}}, session=s),
    "find_one_and_update": lambda c, s: c.find_one_and_update({}, {"$set": {"a": 1}}, session=s),
    "delete_one": lambda c, s: c.delete_one({}, session=s),
    "delete_many": lambda c, s: c.delete_many({}, session=s),
    "create_index": lambda c, s: c.create_index("a", session=s),
    "create_indexes": lambda c, s: c.create_indexes([IndexModel("a")], session=s),
    "list_indexes": lambda c, s: c.list_indexes(session=s),
    "index_information": lambda c, s: c.index_information(session=s),
    "drop_index": lambda c, s: c.drop_index("a_1", session=s),
    "drop_indexes": lambda c, s: c.drop_indexes(session=s),
    "drop": lambda c, s: c.drop(session=s),
    "database.command": lambda c, s: c.database.command("ping", session=s),
    "database.create_collection": lambda c, s: c.database.create_collection("other", session=s),
    "database.list_collection_names": lambda c, s: c.database.list_collection_names(session=s),
    "database.drop_collection": lambda c, s: c.database.drop_collection("coll", session=s),
}


@pytest.mark.parametrize("operation", list(_SESSION_CALLS))
async def test_sessions_are_refused_explicitly(coll: InMemoryCollection, operation: str) -> None:
    await coll.insert_one({"_id": 1})
    await coll.create_index("a")
    with pytest.raises(NotImplementedError):
        await _SESSION_CALLS[operation](coll, object())
    # Nothing ran: the document and the index are still there.
    assert await coll.find({}).to_list() == [{"_id": 1}]
    assert len(await coll.index_information()) == 2


async def test_gathered_operations_interleave_between_awaits(coll: InMemoryCollection) -> None:
    seen_by_a: list[int] = []

    async def writer(tag: str, observe: list[int] | None) -> None:
        for i in range(3):
            await coll.insert_one({"tag": tag, "i": i})
            if observe is not None:
                observe.append(await coll.count_documents({"tag": "b"}))

    await asyncio.gather(writer("a", seen_by_a), writer("b", None))
    # A saw B's progress while it was still running: neither zero-then-three nor all-at-the-end.
    assert seen_by_a[0] >= 1
    assert seen_by_a[0] < 3
    assert seen_by_a == sorted(seen_by_a)


async def test_each_awaited_operation_yields_to_the_loop(coll: InMemoryCollection) -> None:
    ticks: list[str] = []

    async def ticker() -> None:
        ticks.append("tick")

    task = asyncio.ensure_future(ticker())
    await coll.insert_one({"_id": 1})
    assert ticks == ["tick"]
    await task


async def test_concurrent_counter_upserts_stay_atomic(coll: InMemoryCollection) -> None:
    pipeline = [{"$set": {"n": {"$add": [{"$ifNull": ["$n", 0]}, 1]}}}]
    await asyncio.gather(*(coll.update_one({"_id": "seq"}, pipeline, upsert=True) for _ in range(20)))
    assert await coll.find_one({"_id": "seq"}) == {"_id": "seq", "n": 20}


_MISSPELLED: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("insert_one", ({"_id": 1},), {"collation": {"locale": "simple"}}),  # no insert takes one
    ("insert_many", ([{"_id": 1}],), {"upsert": True}),
    ("update_one", ({}, {"$set": {"a": 1}}), {"upsertt": True}),
    ("delete_one", ({},), {"sort": {"_id": 1}}),
    ("delete_many", ({},), {"projection": {"_id": 1}}),
    ("find", ({},), {"sortt": [("_id", 1)]}),
    ("find_one", ({},), {"hintt": "_id_"}),
    ("list_indexes", (), {"name": "x"}),
    ("update_many", ({}, {"$set": {"a": 1}}), {"sort": {"_id": 1}}),  # update_one takes one; it does not
    ("bulk_write", ([InsertOne({"_id": 1})],), {"upsert": True}),
]


async def _called(method: Callable[..., Any], args: tuple[Any, ...], keywords: dict[str, Any]) -> object:
    """Call ``method``, awaiting what it returns if it is a coroutine (``find`` returns a cursor)."""
    outcome = method(*args, **keywords)
    return await outcome if asyncio.iscoroutine(outcome) else outcome


@pytest.mark.parametrize(("method", "args", "keywords"), _MISSPELLED, ids=[m for m, _, _ in _MISSPELLED])
async def test_keywords_pymongo_does_not_take_are_a_type_error(
    coll: InMemoryCollection, method: str, args: tuple[Any, ...], keywords: dict[str, Any]
) -> None:
    # pymongo's method (or AsyncCursor, for find) refuses it as Python does, before any I/O.
    from pymongo import AsyncMongoClient

    # No server: a call that got past its arguments would fail server selection, quickly.
    real: Any = AsyncMongoClient("mongodb://localhost:1", connect=False, serverSelectionTimeoutMS=50)["db"][
        "coll"
    ]
    try:
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            await _called(getattr(real, method), args, keywords)
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            await _called(getattr(coll, method), args, keywords)
    finally:
        await real.database.client.close()
    assert await coll.find({}).to_list() == []


async def test_keywords_that_change_nothing_here_pass_and_unsimulated_ones_are_refused(
    coll: InMemoryCollection,
) -> None:
    await coll.insert_one({"_id": 1}, comment="c", bypass_document_validation=True)
    found = await coll.find(
        {}, comment="c", max_time_ms=5, allow_disk_use=True, no_cursor_timeout=True
    ).to_list()
    assert found == [{"_id": 1}]
    await coll.delete_one({"_id": 2}, comment="c")
    await coll.update_many({"_id": 2}, {"$set": {"a": 1}}, comment="c", bypass_document_validation=True)
    await coll.bulk_write([DeleteOne({"_id": 2})], comment="c", bypass_document_validation=True)
    for call in (
        lambda: coll.find({}, return_key=True).to_list(),
        lambda: coll.find({}, max={"_id": 5}).to_list(),
        lambda: coll.find({}, let={"x": 1}).to_list(),
        lambda: coll.delete_many({}, let={"x": 1}),
    ):
        with pytest.raises(NotImplementedError, match="does not simulate"):
            await call()
    assert await coll.count_documents({}) == 1


async def test_filters_and_sorts_a_checkpoint_storage_uses_follow_bson_order(
    coll: InMemoryCollection,
) -> None:
    # Comparisons match within a BSON type bracket only, int32/int64/double compare by value, and
    # sorts order types as the server does: missing and null first, then numbers, strings, ...,
    # booleans, dates (https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/).
    t = datetime(2024, 1, 1)
    await coll.insert_many(
        [
            {"_id": 1, "s": "7", "at": None},
            {"_id": 2, "s": 7, "at": t},
            {"_id": 3, "s": Int64(8), "at": "x"},
            {"_id": 4, "s": 7.5},
            {"_id": "a", "s": True, "at": 5},
        ]
    )

    async def ids(filter_: dict[str, Any], **kwargs: Any) -> list[Any]:
        return [d["_id"] for d in await coll.find(filter_, {"_id": 1}, **kwargs).to_list()]

    assert await ids({"s": {"$gt": 5}}) == [2, 3, 4]
    assert await ids({"s": 8}) == [3]
    assert await ids({"at": {"$lte": t}}) == [2]
    assert await ids({"_id": {"$lt": 3}}) == [1, 2]
    assert await ids({"_id": {"$gte": "a"}}) == ["a"]
    assert await ids({"at": {"$type": "date"}}) == [2]
    assert await ids({"at": {"$ne": None}}) == [2, 3, "a"]
    assert await ids({"$nor": [{"at": t, "_id": {"$gte": 2}}]}) == [1, 3, 4, "a"]
    assert await ids({}, sort=[("s", 1)]) == [2, 4, 3, 1, "a"]
    assert await ids({}, sort=[("at", -1), ("_id", -1)]) == [2, 3, "a", 4, 1]


async def test_find_one_and_update_returns_before_or_after_with_projection(coll: InMemoryCollection) -> None:
    # https://www.mongodb.com/docs/manual/reference/command/findAndModify/#output: the pre-image,
    # which an upsert that inserted does not have, or the post-image; projected either way.
    projection = {"_id": 0, "n": 1}
    inserted = await coll.find_one_and_update(
        {"_id": 1}, {"$setOnInsert": {"n": 1, "other": 2}}, projection, upsert=True
    )
    assert inserted is None
    again = await coll.find_one_and_update(
        {"_id": 1}, {"$setOnInsert": {"n": 5}}, projection, upsert=True, return_document=ReturnDocument.BEFORE
    )
    assert again == {"n": 1}
    after = await coll.find_one_and_update(
        {"_id": 2},
        [{"$set": {"n": 7, "other": 8}}],
        projection,
        upsert=True,
        return_document=ReturnDocument.AFTER,
    )
    assert after == {"n": 7}
    assert await coll.find_one_and_update({"_id": 3}, {"$set": {"n": 1}}) is None
    assert await coll.count_documents({}) == 2


async def test_the_command_allowance_is_pymongos_to_the_byte(coll: InMemoryCollection) -> None:
    # pymongo's own OP_MSG builder measures the insert command a standalone server gets (the
    # implicit session's lsid and $db added); its run_command refuses more than 16 MiB + 16,382.
    from bson.binary import Binary
    from bson.codec_options import CodecOptions
    from pymongo import message

    probe = _sized(1000)
    command = {"insert": "coll", "ordered": True, "lsid": {"id": Binary(bytes(16), 4)}, "documents": [probe]}
    _, _, total, _ = message._op_msg(0, command, "db", None, CodecOptions())  # pymongo's own measure
    largest = MIB16 + 16382 - (total - 1000)

    with pytest.raises(WriteError) as info:  # sent: the server refuses it
        await coll.insert_one(_sized(largest))
    assert info.value.code == 2
    with pytest.raises(DocumentTooLarge):  # one byte more: pymongo refuses it
        await coll.insert_one(_sized(largest + 1, _id=2))
