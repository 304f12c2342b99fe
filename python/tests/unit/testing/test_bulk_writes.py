"""``update_many`` and ``bulk_write``: pymongo's results, errors and refusals, through every engine layer."""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymongo import AsyncMongoClient, DeleteMany, DeleteOne, InsertOne, ReplaceOne, UpdateMany, UpdateOne
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    ConfigurationError,
    DocumentTooLarge,
    DuplicateKeyError,
    InvalidOperation,
)
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb.testing import (
    InMemoryCollection,
    InMemoryMongoClient,
    Scheduling,
    expire_documents,
)

_T0 = datetime(2026, 1, 1)


def _chunk_upsert(chunk_id: str, expires_at: datetime) -> UpdateOne:
    """A chunk write as the storage issues it: data only on insert, the expiry only raised."""
    return UpdateOne(
        {"_id": chunk_id},
        {"$setOnInsert": {"data": b"payload-" + chunk_id.encode()}, "$max": {"expires_at": expires_at}},
        upsert=True,
    )


@pytest.mark.seeded_engine  # also under each engine scheduling seed (tests/conftest.py)
async def test_every_request_kind_counts_as_pymongo_merges_them(coll: InMemoryCollection) -> None:
    await coll.insert_many([{"_id": i, "v": i} for i in range(1, 6)])
    result = await coll.bulk_write(
        [
            InsertOne({"_id": 10, "v": 10}),
            UpdateOne({"_id": 1}, {"$set": {"v": 100}}),  # matched and modified
            UpdateOne({"_id": 2}, {"$set": {"v": 2}}),  # matched, not modified
            UpdateOne({"_id": 11}, {"$set": {"v": 11}}, upsert=True),
            UpdateMany({"v": {"$gte": 3, "$lt": 6}}, {"$inc": {"v": 1}}),  # 3, 4, 5
            UpdateOne({"_id": 99}, {"$set": {"v": 0}}),  # matches nothing
            DeleteOne({"v": {"$gte": 4, "$lt": 100}}),
            DeleteMany({"_id": {"$in": [10, 11]}}),
        ]
    )
    assert result.acknowledged
    assert result.bulk_api_result == {
        "writeErrors": [],
        "writeConcernErrors": [],
        "nInserted": 1,
        "nUpserted": 1,
        "nMatched": 5,
        "nModified": 4,
        "nRemoved": 3,
        "upserted": [{"index": 3, "_id": 11}],
    }
    assert (result.inserted_count, result.matched_count, result.modified_count) == (1, 5, 4)
    assert (result.upserted_count, result.upserted_ids, result.deleted_count) == (1, {3: 11}, 3)
    # DeleteOne took the first match in natural order: _id 3, whose v had become 4.
    assert await coll.find({}, sort=[("_id", 1)]).to_list() == [
        {"_id": 1, "v": 100},
        {"_id": 2, "v": 2},
        {"_id": 4, "v": 5},
        {"_id": 5, "v": 6},
    ]


@pytest.mark.seeded_engine  # also under each engine scheduling seed (tests/conftest.py)
async def test_chunk_upserts_set_on_insert_and_raise_the_expiry_only(coll: InMemoryCollection) -> None:
    first = await coll.bulk_write([_chunk_upsert("c1", _T0), _chunk_upsert("c2", _T0)], ordered=False)
    # Creating: $max on a missing field sets it.
    assert (first.upserted_count, first.matched_count, first.modified_count) == (2, 0, 0)
    assert first.upserted_ids == {0: "c1", 1: "c2"}
    assert await coll.find_one({"_id": "c1"}) == {"_id": "c1", "data": b"payload-c1", "expires_at": _T0}

    earlier, later = _T0 - timedelta(days=1), _T0 + timedelta(days=1)
    again = await coll.bulk_write(
        [
            UpdateOne(
                {"_id": "c1"},
                {"$setOnInsert": {"data": b"other"}, "$max": {"expires_at": earlier}},
                upsert=True,
            ),
            UpdateOne(
                {"_id": "c2"},
                {"$setOnInsert": {"data": b"other"}, "$max": {"expires_at": later}},
                upsert=True,
            ),
        ],
        ordered=False,
    )
    # Both match; only the raised expiry modifies; $setOnInsert changes nothing once stored.
    assert (again.upserted_count, again.matched_count, again.modified_count) == (0, 2, 1)
    assert again.upserted_ids == {}
    assert await coll.find({}, sort=[("_id", 1)]).to_list() == [
        {"_id": "c1", "data": b"payload-c1", "expires_at": _T0},
        {"_id": "c2", "data": b"payload-c2", "expires_at": later},
    ]


async def test_touching_stored_chunks_by_id_counts_matched_and_modified_apart(
    coll: InMemoryCollection,
) -> None:
    await coll.insert_many(
        [{"_id": "a", "touched_at": _T0}, {"_id": "b", "touched_at": _T0 + timedelta(hours=2)}]
    )
    touch = UpdateMany(
        {"_id": {"$in": ["a", "b", "gone"]}}, {"$max": {"touched_at": _T0 + timedelta(hours=1)}}
    )
    result = await coll.bulk_write([_chunk_upsert("new", _T0), touch], ordered=False)
    # "gone" matches nothing; "b" already holds a later time: matched, not modified.
    assert (result.matched_count, result.modified_count, result.upserted_ids) == (2, 1, {0: "new"})
    assert (await coll.find_one({"_id": "a"}) or {})["touched_at"] == _T0 + timedelta(hours=1)
    assert (await coll.find_one({"_id": "b"}) or {})["touched_at"] == _T0 + timedelta(hours=2)


@pytest.mark.seeded_engine  # also under each engine scheduling seed (tests/conftest.py)
async def test_update_many_returns_pymongos_update_result(coll: InMemoryCollection) -> None:
    await coll.insert_many([{"_id": 1, "n": 1}, {"_id": 2, "n": 5}, {"_id": 3, "n": 9}])
    result = await coll.update_many({"n": {"$lt": 9}}, {"$max": {"n": 5}})
    assert result.raw_result == {"n": 2, "nModified": 1, "ok": 1.0, "updatedExisting": True}
    assert (result.matched_count, result.modified_count, result.upserted_id) == (2, 1, None)

    none = await coll.update_many({"n": 100}, {"$set": {"x": 1}})
    assert none.raw_result == {"n": 0, "nModified": 0, "ok": 1.0, "updatedExisting": False}

    upserted = await coll.update_many({"n": 100}, {"$set": {"x": 1}}, upsert=True)
    assert upserted.matched_count == 0
    assert upserted.modified_count == 0
    assert upserted.upserted_id is not None
    assert (upserted.raw_result or {})["upserted"] == upserted.upserted_id
    assert await coll.count_documents({"n": 100, "x": 1}) == 1  # one document, as the server inserts

    matched = await coll.update_many({"n": 5}, {"$set": {"x": 2}}, upsert=True)
    assert (matched.matched_count, matched.modified_count, matched.upserted_id) == (2, 2, None)
    assert await coll.count_documents({}) == 4


async def test_update_many_checks_each_post_image_against_unique_indexes(coll: InMemoryCollection) -> None:
    await coll.create_index("k", unique=True)
    await coll.insert_many([{"_id": 1, "k": 1}, {"_id": 2, "k": 2}, {"_id": 3, "k": 3}])
    with pytest.raises(DuplicateKeyError) as caught:
        await coll.update_many({"_id": {"$in": [2, 3]}}, {"$set": {"k": 1}})
    assert (caught.value.details or {})["keyValue"] == {"k": 1}
    # The server updates match by match and does not roll back: none got past the first collision.
    assert await coll.find({}, sort=[("_id", 1)]).to_list() == [
        {"_id": 1, "k": 1},
        {"_id": 2, "k": 2},
        {"_id": 3, "k": 3},
    ]
    await coll.update_many({"_id": {"$in": [2, 3]}}, [{"$set": {"k": {"$add": ["$k", 10]}}}])
    assert await coll.find_one({"k": 13}) == {"_id": 3, "k": 13}  # the index map saw the update


async def test_ordered_bulk_stops_at_the_first_write_error(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1})
    requests: list[Any] = [
        InsertOne({"_id": 2}),
        InsertOne({"_id": 1}),
        UpdateOne({"_id": 2}, {"$set": {"a": 1}}),
    ]
    with pytest.raises(BulkWriteError) as caught:
        await coll.bulk_write(requests)
    details = caught.value.details
    assert [(e["index"], e["code"], e["op"]) for e in details["writeErrors"]] == [(1, 11000, {"_id": 1})]
    assert details["writeErrors"][0]["errmsg"].startswith("E11000 duplicate key error collection: db.coll")
    assert (details["nInserted"], details["nMatched"], details["nModified"]) == (1, 0, 0)
    assert await coll.find_one({"_id": 2}) == {"_id": 2}  # the update after the error never ran


@pytest.mark.seeded_engine  # also under each engine scheduling seed (tests/conftest.py)
async def test_unordered_bulk_goes_on_past_write_errors(coll: InMemoryCollection) -> None:
    await coll.create_index("k", unique=True)
    await coll.insert_many([{"_id": 1, "k": 1}, {"_id": 2, "k": 2}])
    requests: list[Any] = [
        UpdateOne({"_id": 2}, {"$set": {"k": 1}}),  # collides with _id 1
        UpdateOne({"_id": 3}, {"$set": {"k": 3}}, upsert=True),
        UpdateOne({"_id": 4}, {"$set": {"k": 2}}, upsert=True),  # collides with _id 2
        UpdateMany({"_id": {"$in": [1, 2]}}, {"$set": {"t": 1}}),
    ]
    with pytest.raises(BulkWriteError) as caught:
        await coll.bulk_write(requests, ordered=False)
    details = caught.value.details
    assert [(e["index"], e["code"], e["keyValue"]) for e in details["writeErrors"]] == [
        (0, 11000, {"k": 1}),
        (2, 11000, {"k": 2}),
    ]
    assert details["writeErrors"][1]["op"] == {
        "q": {"_id": 4},
        "u": {"$set": {"k": 2}},
        "multi": False,
        "upsert": True,
    }
    assert details["upserted"] == [{"index": 1, "_id": 3}]
    assert (details["nUpserted"], details["nMatched"], details["nModified"]) == (1, 2, 2)
    assert await coll.count_documents({"t": 1}) == 2


async def test_unordered_bulk_runs_inserts_then_updates_then_deletes(coll: InMemoryCollection) -> None:
    # pymongo groups an unordered bulk by kind (bulk_shared.py gen_unordered): the insert runs
    # before the delete listed ahead of it, and collides.
    await coll.insert_one({"_id": 1, "v": "old"})
    requests: list[Any] = [
        DeleteOne({"_id": 1}),
        UpdateOne({"_id": 1}, {"$set": {"u": 1}}),
        InsertOne({"_id": 1}),
    ]
    with pytest.raises(BulkWriteError) as caught:
        await coll.bulk_write(requests, ordered=False)
    assert [e["index"] for e in caught.value.details["writeErrors"]] == [2]
    assert (caught.value.details["nMatched"], caught.value.details["nRemoved"]) == (1, 1)
    assert await coll.count_documents({}) == 0
    # Ordered, the same requests run as listed.
    await coll.insert_one({"_id": 1, "v": "old"})
    ordered = await coll.bulk_write(requests)
    assert (ordered.deleted_count, ordered.matched_count, ordered.inserted_count) == (1, 0, 1)
    assert await coll.find({}).to_list() == [{"_id": 1}]


async def test_a_statements_bad_hint_is_its_write_error(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1})
    with pytest.raises(BulkWriteError) as caught:
        await coll.bulk_write(
            [UpdateOne({"_id": 1}, {"$set": {"a": 1}}, hint="nope_1"), DeleteOne({"_id": 1})], ordered=False
        )
    assert [(e["index"], e["code"]) for e in caught.value.details["writeErrors"]] == [(0, 2)]
    assert caught.value.details["nRemoved"] == 1


async def test_unacknowledged_bulks_return_no_counts_and_lose_their_errors(
    client: InMemoryMongoClient,
) -> None:
    coll = client["db"].get_collection("coll", write_concern=WriteConcern(w=0))
    await coll.insert_one({"_id": 1})
    result = await coll.bulk_write([InsertOne({"_id": 1}), InsertOne({"_id": 2})], ordered=False)
    assert not result.acknowledged
    assert result.bulk_api_result == {}
    with pytest.raises(InvalidOperation):
        _ = result.matched_count
    assert sorted(d["_id"] for d in await coll.find({}).to_list()) == [1, 2]
    many = await coll.update_many({}, {"$set": {"x": 1}})
    assert not many.acknowledged
    assert many.raw_result is None
    assert await coll.count_documents({"x": 1}) == 2
    with pytest.raises(ConfigurationError, match="Collation is unsupported"):
        await coll.bulk_write([DeleteOne({"_id": 1}, collation={"locale": "simple"})])
    with pytest.raises(ConfigurationError, match="Collation is unsupported"):
        await coll.update_many({}, {"$set": {"x": 2}}, collation={"locale": "simple"})


async def test_refusals_before_any_io_are_pymongos(coll: InMemoryCollection) -> None:
    # No server: a call that got past its arguments would fail server selection, quickly.
    real: Any = AsyncMongoClient("mongodb://localhost:1", connect=False, serverSelectionTimeoutMS=50)["db"][
        "coll"
    ]
    cases: list[tuple[Any, type[Exception], str]] = [
        ([], InvalidOperation, "No operations to execute"),
        ((InsertOne({"_id": 1}),), TypeError, "requests must be a list"),
        ([{"_id": 1}], TypeError, "is not a valid request"),
        ([UpdateOne({}, {"a": 1})], ValueError, "update only works with"),
        ([InsertOne(3)], TypeError, "document must be an instance of"),
    ]
    try:
        for requests, error, message in cases:
            with pytest.raises(error, match=message):
                await real.bulk_write(requests)
            with pytest.raises(error, match=message):
                await coll.bulk_write(requests)
    finally:
        await real.database.client.close()
    assert await coll.count_documents({}) == 0


async def test_unsimulated_requests_and_options_are_refused_naming_divergences(
    coll: InMemoryCollection,
) -> None:
    for call in (
        lambda: coll.bulk_write([UpdateOne({}, {"$set": {"a": 1}}, array_filters=[{"x": 1}])]),
        lambda: coll.bulk_write([UpdateOne({}, {"$set": {"a": 1}}, sort={"_id": 1})]),
        lambda: coll.bulk_write([ReplaceOne({}, {"a": 1})]),
        lambda: coll.bulk_write([InsertOne({"_id": 1})], let={"x": 1}),
        lambda: coll.update_many({}, {"$set": {"a": 1}}, array_filters=[{"x": 1}]),
        lambda: coll.update_many({}, {"$set": {"a": 1}}, let={"x": 1}),
    ):
        with pytest.raises(NotImplementedError, match=r"DIVERGENCES\.md"):
            await call()
    assert await coll.count_documents({}) == 0


async def test_an_update_statement_past_the_message_size_is_refused_by_pymongo(
    coll: InMemoryCollection,
) -> None:
    huge = "x" * 48_000_000
    with pytest.raises(DocumentTooLarge, match="update command document too large"):
        await coll.bulk_write([UpdateOne({"_id": 1}, {"$set": {"a": huge}})])


@pytest.mark.seeded_engine  # also under each engine scheduling seed (tests/conftest.py)
async def test_faults_fail_and_hold_bulk_write_and_update_many_by_name(coll: InMemoryCollection) -> None:
    coll.fail_next("bulk_write", AutoReconnect("lost"))
    with pytest.raises(AutoReconnect):
        await coll.bulk_write([InsertOne({"_id": 1})])
    coll.fail_next("update_many", AutoReconnect("lost"))
    with pytest.raises(AutoReconnect):
        await coll.update_many({}, {"$set": {"a": 1}}, upsert=True)
    assert await coll.count_documents({}) == 0

    held = coll.hold("bulk_write")
    writing = asyncio.ensure_future(coll.bulk_write([InsertOne({"_id": 1}), InsertOne({"_id": 2})]))
    await held.reached()
    assert await coll.count_documents({}) == 0  # other operations run while the bulk waits
    held.release()
    assert (await writing).inserted_count == 2

    held_update = coll.hold("update_many")
    updating = asyncio.ensure_future(coll.update_many({}, {"$set": {"a": 1}}))
    await held_update.reached()
    assert await coll.count_documents({"a": 1}) == 0
    held_update.release()
    assert (await updating).modified_count == 2


async def test_a_bulk_is_one_round_trip_whose_upserts_wait_like_single_ones() -> None:
    # DIVERGENCES.md entry 26: a server gets one command per kind (and per 100,000 statements);
    # the engine runs the whole bulk in one round trip, atomically but for the wait of each upsert
    # whose query finds nothing, which update_one's and update_many's take too (entry 2).
    client = InMemoryMongoClient(scheduling=Scheduling(seed=1))
    coll = client["db"]["coll"]
    drawn = client.scheduler.drawn
    await coll.bulk_write(
        [InsertOne({"_id": 1}), _chunk_upsert("c", _T0), DeleteMany({"_id": 1})], ordered=False
    )
    assert client.scheduler.drawn == drawn + 2  # the round trip, and the missing upsert's wait
    await coll.bulk_write([_chunk_upsert("c", _T0), _chunk_upsert("c2", _T0), _chunk_upsert("c3", _T0)])
    assert client.scheduler.drawn == drawn + 5  # "c" is found: only the two new ones wait
    await coll.update_one({"_id": "d"}, {"$set": {"a": 1}}, upsert=True)
    assert client.scheduler.drawn == drawn + 7
    await coll.update_many({"_id": "e"}, {"$set": {"a": 1}}, upsert=True)
    assert client.scheduler.drawn == drawn + 9
    # Without scheduling nothing waits: the bulk draws nothing and is one atomic run.
    plain = InMemoryMongoClient()
    await plain["db"]["coll"].bulk_write([_chunk_upsert("c", _T0)])
    assert plain.scheduler.drawn == 0

    # Gathered with the bulk, a reader sees all of it or none of it.
    seen: list[int] = []

    async def read() -> None:
        seen.append(await coll.count_documents({"batch": 1}))

    await asyncio.gather(
        coll.bulk_write([InsertOne({"_id": f"b{i}", "batch": 1}) for i in range(20)]),
        *(read() for _ in range(10)),
    )
    assert set(seen) <= {0, 20}
    assert await coll.count_documents({}) == 25


async def test_bulk_writes_reach_index_maps_and_ttl(coll: InMemoryCollection) -> None:
    await coll.create_index("run")
    await coll.create_index("expires_at", expireAfterSeconds=0)
    await coll.insert_many([{"_id": i, "run": "a"} for i in range(4)])
    await coll.bulk_write(
        [UpdateMany({"_id": {"$in": [0, 1]}}, {"$set": {"run": "b"}}), _chunk_upsert("c", _T0)], ordered=False
    )
    assert [d["_id"] for d in await coll.find({"run": "b"}, sort=[("_id", 1)]).to_list()] == [0, 1]
    assert [d["_id"] for d in await coll.find({"run": "a"}, sort=[("_id", 1)]).to_list()] == [2, 3]
    await coll.update_many({"run": "a"}, {"$set": {"expires_at": _T0 + timedelta(days=1)}})
    assert expire_documents(coll, now=_T0) == 1  # the chunk
    assert expire_documents(coll, now=_T0 + timedelta(days=1)) == 2
    assert await coll.count_documents({}) == 2


async def test_bulk_writes_and_update_many_are_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "engine.journal"
    client = InMemoryMongoClient(path=path)
    coll = client["db"]["coll"]
    await coll.insert_many([{"_id": 1, "n": 1}, {"_id": 2, "n": 2}])
    await coll.bulk_write(
        [
            _chunk_upsert("c", _T0),
            UpdateMany({"_id": {"$in": [1, 2]}}, {"$inc": {"n": 10}}),
            DeleteOne({"_id": 2}),
        ],
        ordered=False,
    )
    await coll.update_many({}, {"$set": {"seen": True}})
    expected = await coll.find({}, sort=[("_id", 1)]).to_list()
    await client.close()

    reopened = InMemoryMongoClient(path=path)
    assert await reopened["db"]["coll"].find({}, sort=[("_id", 1)]).to_list() == expected
    assert [d["_id"] for d in expected] == [1, "c"]
    await reopened.close()


_VALUES = st.one_of(
    st.integers(-3, 3), st.sampled_from(["x", "y"]), st.none(), st.lists(st.integers(0, 2), max_size=2)
)
_DOCS = st.lists(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), _VALUES, max_size=3), min_size=0, max_size=12
)
_UPDATES = st.sampled_from(
    [
        {"$set": {"a": 1}},
        {"$inc": {"c": 1}},
        {"$max": {"a": 0}},
        {"$min": {"b": 1}},
        {"$unset": {"b": ""}},
        {"$setOnInsert": {"z": 1}, "$max": {"c": 2}},
        {"$push": {"l": 1}},
    ]
)
_FILTERS = st.sampled_from(
    [{}, {"a": 1}, {"a": {"$gte": 0}}, {"b": None}, {"b": {"$in": ["x", 2]}}, {"c": {"$exists": False}}]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=_DOCS, filter_=_FILTERS, update=_UPDATES, upsert=st.booleans())
async def test_update_many_matches_mongomock_ngs_own(
    documents: list[dict[str, Any]], filter_: dict[str, Any], update: dict[str, Any], upsert: bool
) -> None:
    client = InMemoryMongoClient()
    coll = client["db"]["coll"]
    reference = client.backend["ref"]["coll"]
    seeded = [{"_id": i, **document} for i, document in enumerate(documents)]
    if seeded:
        await coll.insert_many(copy.deepcopy(seeded))
        reference.insert_many(copy.deepcopy(seeded))
    try:
        expected = reference.update_many(copy.deepcopy(filter_), copy.deepcopy(update), upsert=upsert)
    except Exception as error:  # whatever mongomock_ng refuses, the engine must refuse too
        with pytest.raises(type(error)):
            await coll.update_many(filter_, update, upsert=upsert)
        return
    result = await coll.update_many(filter_, update, upsert=upsert)
    assert (result.matched_count, result.modified_count) == (expected.matched_count, expected.modified_count)
    assert (result.upserted_id is None) == (expected.upserted_id is None)
    ours = [
        {k: v for k, v in d.items() if k != "_id"} for d in await coll.find({}, sort=[("_id", 1)]).to_list()
    ]
    theirs = [{k: v for k, v in d.items() if k != "_id"} for d in reference.find({}, sort=[("_id", 1)])]
    assert ours == theirs
