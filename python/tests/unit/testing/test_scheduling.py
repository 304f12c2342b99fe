"""Seeded scheduling: heavy-tailed latency before and after the server runs each operation."""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
from collections.abc import Awaitable, Callable
from typing import Any

import pymongo
import pytest
from pymongo import IndexModel, ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError
from pymongo.results import BulkWriteResult, UpdateResult

from agent_framework_mongodb.testing import InMemoryMongoClient, Scheduling
from agent_framework_mongodb.testing._scheduling import Scheduler
from agent_framework_mongodb.testing._upsert_race import server_retries

SENDS = 12


async def _gathered_increments(client: InMemoryMongoClient) -> tuple[list[int], list[int]]:
    """Send ``SENDS`` counter increments at once: the number each got (the order the server ran
    them, by send position) and the order their callers resumed in (by send position)."""
    coll = client["db"]["coll"]
    await coll.insert_one({"_id": "counter", "n": 0})
    resumed: list[int] = []

    async def increment(position: int) -> int:
        after = await coll.find_one_and_update(
            {"_id": "counter"}, {"$inc": {"n": 1}}, return_document=ReturnDocument.AFTER
        )
        resumed.append(position)
        assert after is not None
        number: int = after["n"]
        return number

    numbers = await asyncio.gather(*(increment(position) for position in range(SENDS)))
    return list(numbers), resumed


async def test_off_by_default_operations_run_and_return_first_in_first_out() -> None:
    numbers, resumed = await _gathered_increments(InMemoryMongoClient())
    assert numbers == list(range(1, SENDS + 1))
    assert resumed == list(range(SENDS))
    assert InMemoryMongoClient().scheduler.scheduling is None


async def test_seeds_reorder_operations_in_flight_and_their_replies() -> None:
    outcomes = [
        await _gathered_increments(InMemoryMongoClient(scheduling=Scheduling(seed=s))) for s in range(8)
    ]
    ran_out_of_order = [numbers != sorted(numbers) for numbers, _ in outcomes]
    # A reply overtaken: a caller resumed before one whose operation the server ran earlier.
    replies_overtaken = [
        resumed != sorted(resumed, key=lambda position: numbers[position]) for numbers, resumed in outcomes
    ]
    assert sum(ran_out_of_order) >= 6, ran_out_of_order
    assert sum(replies_overtaken) >= 6, replies_overtaken
    for numbers, _ in outcomes:
        assert sorted(numbers) == list(range(1, SENDS + 1)), "each operation still runs atomically"


async def test_the_same_seed_gives_the_same_interleaving_and_outcome() -> None:
    first = await _gathered_increments(InMemoryMongoClient(scheduling=Scheduling(seed=11)))
    again = await _gathered_increments(InMemoryMongoClient(scheduling=Scheduling(seed=11)))
    other = await _gathered_increments(InMemoryMongoClient(scheduling=Scheduling(seed=12)))
    assert first == again
    assert other != first


async def _turns_taken(operation: Awaitable[Any]) -> int:
    """How many times a task that yields in a loop ran while ``operation`` was awaited."""
    turns = 0
    running = True

    async def tick() -> None:
        nonlocal turns
        while running:
            turns += 1
            await asyncio.sleep(0)

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0)
    turns = 0
    await operation
    running = False
    await ticker
    return turns


async def test_latency_is_event_loop_turns_and_takes_no_time_on_any_clock() -> None:
    # Every wait saturates at max_turns: an operation takes its one yield plus both waits, in
    # turns. No clock moves for it, so a deadline far shorter than 201 network waits still holds.
    longest = Scheduling(seed=0, scale=1e12, max_turns=100)
    coll = InMemoryMongoClient(scheduling=longest)["db"]["coll"]
    with pymongo.timeout(5):
        turns = await _turns_taken(coll.insert_one({"_id": 1}))
    assert 200 <= turns <= 202, turns
    plain = InMemoryMongoClient()["db"]["coll"]
    assert await _turns_taken(plain.insert_one({"_id": 1})) <= 2


async def test_a_caller_cancelled_while_the_reply_travels_leaves_the_write_applied() -> None:
    # As on a server: the request ran; only the caller stopped waiting for its reply.
    coll = InMemoryMongoClient(scheduling=Scheduling(seed=0, scale=1e12, max_turns=50))["db"]["coll"]
    inserting = asyncio.ensure_future(coll.insert_one({"_id": 1}))
    for _ in range(60):  # the request's 50 turns, then the server runs it
        if coll.stored_documents():
            break
        await asyncio.sleep(0)
    assert coll.stored_documents()
    assert not inserting.done(), "the reply is still on its way"
    inserting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await inserting
    assert [document["_id"] for document in coll.stored_documents()] == [1]


async def test_a_caller_cancelled_while_the_request_travels_changes_nothing() -> None:
    coll = InMemoryMongoClient(scheduling=Scheduling(seed=0, scale=1e12, max_turns=50))["db"]["coll"]
    inserting = asyncio.ensure_future(coll.insert_one({"_id": 1}))
    for _ in range(10):
        await asyncio.sleep(0)
    assert coll.stored_documents() == []
    inserting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await inserting
    for _ in range(120):
        await asyncio.sleep(0)
    assert coll.stored_documents() == []


async def test_every_operation_goes_through_the_scheduler() -> None:
    client = InMemoryMongoClient(scheduling=Scheduling(seed=3))
    database = client["db"]
    coll = database["coll"]
    await coll.insert_one({"_id": 0, "x": 1})
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "find (first fetch)": lambda: coll.find({}).to_list(),
        "find_one": lambda: coll.find_one({}),
        "count_documents": lambda: coll.count_documents({}),
        "aggregate": lambda: coll.aggregate([{"$match": {}}]),
        "estimated_document_count": coll.estimated_document_count,
        "insert_one": lambda: coll.insert_one({"_id": 1}),
        "insert_many": lambda: coll.insert_many([{"_id": 2}, {"_id": 3}]),
        "update_one": lambda: coll.update_one({"_id": 1}, {"$set": {"x": 2}}),
        "find_one_and_update": lambda: coll.find_one_and_update({"_id": 1}, {"$set": {"x": 3}}),
        "delete_one": lambda: coll.delete_one({"_id": 1}),
        "delete_many": lambda: coll.delete_many({"_id": {"$in": [2, 3]}}),
        "create_index": lambda: coll.create_index("x"),
        "create_indexes": lambda: coll.create_indexes([IndexModel("y")]),
        "list_indexes": coll.list_indexes,
        "index_information": coll.index_information,
        "drop_index": lambda: coll.drop_index("y_1"),
        "drop_indexes": coll.drop_indexes,
        "command": lambda: database.command("ping"),
        "server_info": client.server_info,
        "list_collection_names": database.list_collection_names,
        "create_collection": lambda: database.create_collection("other"),
        "drop_collection": lambda: database.drop_collection("other"),
        "list_database_names": client.list_database_names,
        "drop": coll.drop,
    }
    for name, call in calls.items():
        before = client.scheduler.drawn
        await call()
        assert client.scheduler.drawn == before + 1, name


def test_the_default_distribution_is_heavy_tailed_and_bounded() -> None:
    scheduler = Scheduler(Scheduling(seed=5))
    waits = [wait for _ in range(20_000) for wait in dataclasses.astuple(scheduler.draw())]
    assert 0.33 < waits.count(0) / len(waits) < 0.43  # about two in five
    assert statistics.median(waits) == 1
    assert 0.09 < sum(wait >= 10 for wait in waits) / len(waits) < 0.14  # about one in nine
    assert 0.005 < sum(wait >= 100 for wait in waits) / len(waits) < 0.014  # about one in a hundred
    assert max(waits) == 1000, "the cap is reached, and never passed"
    assert Scheduler(None).draw() == Scheduler(None).draw()
    assert Scheduler(None).drawn == 0


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"seed": True}, TypeError),
        ({"seed": "1"}, TypeError),
        ({"seed": 1, "max_turns": 1.5}, TypeError),
        ({"seed": 1, "max_turns": -1}, ValueError),
        ({"seed": 1, "tail_index": 0}, ValueError),
        ({"seed": 1, "tail_index": float("nan")}, ValueError),
        ({"seed": 1, "scale": -1}, ValueError),
        ({"seed": 1, "scale": float("inf")}, ValueError),
    ],
)
def test_invalid_scheduling_is_refused(fields: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Scheduling(**fields)


def test_scheduling_is_a_frozen_value_and_the_client_checks_its_type() -> None:
    value = Scheduling(seed=1)
    assert value == Scheduling(seed=1)
    assert hash(value) == hash(Scheduling(seed=1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.seed = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match="scheduling must be a Scheduling"):
        InMemoryMongoClient(scheduling=1)  # type: ignore[arg-type]
    assert InMemoryMongoClient(scheduling=value).scheduler.scheduling is value


async def _racing_upserts(
    seed: int, filter_: dict[str, Any], *, unique: bool
) -> tuple[int, list[dict[str, Any]]]:
    """Ten concurrent counting upserts: how many failed with E11000, and what was stored."""
    coll = InMemoryMongoClient(scheduling=Scheduling(seed=seed))["db"]["coll"]
    if unique:
        await coll.create_index("key", unique=True)
    results = await asyncio.gather(
        *(coll.update_one(filter_, {"$inc": {"n": 1}}, upsert=True) for _ in range(10)),
        return_exceptions=True,
    )
    failures = [result for result in results if isinstance(result, DuplicateKeyError)]
    assert len(failures) + sum(isinstance(result, UpdateResult) for result in results) == 10
    return len(failures), await coll.find({}, {"_id": 0}).to_list()


async def test_upserts_that_both_miss_race_to_insert_as_on_a_server() -> None:
    # The filter has a field beyond the unique index's, so the server does not retry: the losers
    # get E11000, and every upsert that succeeded counted once on the one document.
    outcomes = [await _racing_upserts(seed, {"key": "k", "tag": 1}, unique=True) for seed in range(6)]
    assert any(failures for failures, _ in outcomes)
    for failures, stored in outcomes:
        assert stored == [{"key": "k", "tag": 1, "n": 10 - failures}]


async def test_the_server_retries_an_upsert_whose_filter_is_exactly_the_unique_key() -> None:
    for seed in range(6):
        assert await _racing_upserts(seed, {"key": "k"}, unique=True) == (0, [{"key": "k", "n": 10}])


async def test_without_a_unique_index_racing_upserts_insert_twice() -> None:
    # The manual's warning: without a unique index each upsert that missed inserts a document.
    stored = [(await _racing_upserts(seed, {"key": "k"}, unique=False))[1] for seed in range(6)]
    assert any(len(documents) > 1 for documents in stored)
    for documents in stored:
        assert sum(document["n"] for document in documents) == 10


@pytest.mark.parametrize(
    ("filter_", "retried"),
    [
        ({"key": "k"}, True),
        ({"key": {"$eq": "k"}}, True),
        ({"$and": [{"key": "k"}]}, True),
        ({"key": "k", "tag": 1}, False),
        ({"key": {"$gte": "k"}}, False),
        ({"$or": [{"key": "k"}]}, False),
        ({"other": "k"}, False),
    ],
)
def test_which_filters_the_server_retries(filter_: dict[str, Any], retried: bool) -> None:
    assert server_retries(filter_, {"key": 1}) is retried


async def _racing_bulks(
    seed: int, scope: dict[str, Any], *, ordered: bool
) -> tuple[list[BulkWriteResult | BulkWriteError], list[dict[str, Any]]]:
    """Four concurrent bulks, each upserting the same two new ``_id``s (as four savers writing
    the same new chunks): each bulk's outcome, and what was stored."""
    coll = InMemoryMongoClient(scheduling=Scheduling(seed=seed))["db"]["coll"]

    def requests() -> list[UpdateOne]:
        return [
            UpdateOne({"_id": key, **scope}, {"$setOnInsert": {"data": key}, "$max": {"n": 1}}, upsert=True)
            for key in ("a", "b")
        ]

    outcomes = await asyncio.gather(
        *(coll.bulk_write(requests(), ordered=ordered) for _ in range(4)), return_exceptions=True
    )
    for outcome in outcomes:
        assert isinstance(outcome, (BulkWriteResult, BulkWriteError)), outcome
    return list(outcomes), await coll.find({}, sort=[("_id", 1)]).to_list()  # type: ignore[arg-type]


@pytest.mark.parametrize("ordered", [False, True])
async def test_bulks_racing_to_upsert_one_id_lose_with_the_servers_write_error(ordered: bool) -> None:
    # The filter names more than the _id_ index's field, so the server does not retry the loser:
    # its statement is an E11000 write error inside BulkWriteError, reported as the server does.
    scope = {"run": "r"}
    raced = 0
    for seed in range(8):
        outcomes, stored = await _racing_bulks(seed, scope, ordered=ordered)
        assert stored == [{"_id": key, "run": "r", "data": key, "n": 1} for key in ("a", "b")]
        upserted = 0
        for outcome in outcomes:
            raw = outcome.details if isinstance(outcome, BulkWriteError) else outcome.bulk_api_result
            errors = raw["writeErrors"]
            raced += len(errors)
            for error in errors:
                key = ("a", "b")[error["index"]]
                assert error["code"] == 11000
                assert error["keyPattern"] == {"_id": 1}
                assert error["keyValue"] == {"_id": key}
                assert error["errmsg"].startswith(
                    f'E11000 duplicate key error collection: db.coll index: _id_ dup key: {{ _id: "{key}" }}'
                )
                assert error["op"] == {
                    "q": {"_id": key, "run": "r"},
                    "u": {"$setOnInsert": {"data": key}, "$max": {"n": 1}},
                    "multi": False,
                    "upsert": True,
                }
            ran = raw["nUpserted"] + raw["nMatched"] + len(errors)
            # Ordered, the bulk stops at its first error: the second statement may never run.
            assert ran == 2 or (ordered and errors and errors[0]["index"] == 0 and ran == 1)
            assert raw["nModified"] == 0  # $max of 1 over 1 changes nothing
            assert [entry["index"] for entry in raw["upserted"]] == sorted(
                entry["index"] for entry in raw["upserted"]
            )
            upserted += raw["nUpserted"]
        assert upserted == 2, "each _id is inserted once, by one bulk"
    assert raced, "some seed makes two bulks miss the same _id and race to insert it"


async def test_the_server_retries_a_bulk_upsert_whose_filter_is_exactly_the_unique_key() -> None:
    # As for update_one (entry 2): the lost insert becomes an update, counted as matched.
    for seed in range(8):
        outcomes, stored = await _racing_bulks(seed, {}, ordered=False)
        assert stored == [{"_id": key, "data": key, "n": 1} for key in ("a", "b")]
        results = [outcome for outcome in outcomes if isinstance(outcome, BulkWriteResult)]
        assert len(results) == 4
        assert sum(result.upserted_count for result in results) == 2
        assert sum(result.matched_count for result in results) == 6
