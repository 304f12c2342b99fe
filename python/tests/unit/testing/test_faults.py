"""Deterministic fault injection: queued errors and held calls."""

from __future__ import annotations

import asyncio

import pytest
from pymongo.errors import AutoReconnect, DuplicateKeyError, NetworkTimeout

from agent_framework_mongodb.testing import FaultPlan, HeldOperation, InMemoryCollection, InMemoryMongoClient

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)


async def test_fail_next_raises_once_and_changes_nothing(coll: InMemoryCollection) -> None:
    coll.fail_next("insert_one", AutoReconnect("connection reset"))
    with pytest.raises(AutoReconnect):
        await coll.insert_one({"_id": 1})
    assert await coll.count_documents({}) == 0
    await coll.insert_one({"_id": 1})
    assert await coll.count_documents({}) == 1


async def test_fail_next_times_and_other_operations_unaffected(coll: InMemoryCollection) -> None:
    coll.fail_next("find_one_and_update", NetworkTimeout("slow"), times=2)
    await coll.insert_one({"_id": 1})
    for _ in range(2):
        with pytest.raises(NetworkTimeout):
            await coll.find_one_and_update({"_id": 1}, {"$set": {"x": 1}})
    assert await coll.find_one_and_update({"_id": 1}, {"$set": {"x": 1}}) == {"_id": 1}


async def test_fault_scoped_to_one_collection(client: InMemoryMongoClient) -> None:
    first, second = client["db"]["first"], client["db"]["second"]
    first.fail_next("insert_one", DuplicateKeyError("E11000", 11000))
    await second.insert_one({"_id": 1})
    with pytest.raises(DuplicateKeyError):
        await first.insert_one({"_id": 1})


async def test_client_wide_faults_cover_cursors_and_commands(client: InMemoryMongoClient) -> None:
    client.fail_next("find", AutoReconnect("down"))
    client.faults.fail_next("command", AutoReconnect("down"))
    assert client.faults.pending == 2
    with pytest.raises(AutoReconnect):
        await client["db"]["c"].find({}).to_list()
    with pytest.raises(AutoReconnect):
        await client.admin.command("ping")
    assert client.faults.pending == 0


def test_fault_plan_validates_and_clears() -> None:
    plan = FaultPlan()
    with pytest.raises(ValueError, match="times"):
        plan.fail_next("insert_one", RuntimeError(), times=0)
    plan.fail_next("insert_one", RuntimeError())
    plan.clear()
    assert plan.pending == 0
    plan.check("insert_one", "db.c")


async def test_held_call_waits_before_touching_data_while_others_run(coll: InMemoryCollection) -> None:
    held = coll.hold("insert_one")
    assert not held.is_reached
    assert not held.is_held
    slow = asyncio.create_task(coll.insert_one({"_id": "a"}))
    await held.reached()
    assert held.is_held
    # Writer A is paused before its insert; writer B's insert and a read go through meanwhile.
    await coll.insert_one({"_id": "b"})
    assert [d["_id"] for d in await coll.find({}).to_list()] == ["b"]
    assert not slow.done()
    held.release()
    assert (await slow).inserted_id == "a"
    assert held.is_released
    assert not held.is_held
    assert sorted(d["_id"] for d in await coll.find({}).to_list()) == ["a", "b"]


async def test_hold_catches_one_matching_call_only(client: InMemoryMongoClient) -> None:
    first, second = client["db"]["first"], client["db"]["second"]
    held = first.hold("update_one")
    await second.update_one({"_id": 1}, {"$set": {"x": 1}}, upsert=True)  # other collection
    await first.insert_one({"_id": 1})  # other operation
    assert not held.is_reached
    paused = asyncio.create_task(first.update_one({"_id": 1}, {"$set": {"x": 1}}))
    await held.reached()
    await first.update_one({"_id": 1}, {"$set": {"y": 2}})  # the hold caught only the first call
    held.release()
    await paused
    assert await first.find_one({"_id": 1}) == {"_id": 1, "x": 1, "y": 2}


async def test_released_before_reached_the_call_passes_straight_through(coll: InMemoryCollection) -> None:
    held = coll.hold("insert_one")
    assert isinstance(held, HeldOperation)
    held.release()
    await coll.insert_one({"_id": 1})
    assert held.is_reached
    assert not held.is_held
    assert "released" in repr(held)


async def test_held_and_failed_call_fails_on_release_and_changes_nothing(coll: InMemoryCollection) -> None:
    held = coll.hold("find_one_and_update")
    coll.fail_next("find_one_and_update", AutoReconnect("reset"))
    await coll.insert_one({"_id": 1})
    call = asyncio.create_task(coll.find_one_and_update({"_id": 1}, {"$set": {"x": 1}}))
    await held.reached()
    assert not call.done()
    held.release()
    with pytest.raises(AutoReconnect):
        await call
    assert await coll.find_one({"_id": 1}) == {"_id": 1}


async def test_client_wide_holds_cover_cursors_and_commands(client: InMemoryMongoClient) -> None:
    reading = client.hold("find")
    pinging = client.faults.hold("command")
    cursor_task = asyncio.create_task(client["db"]["c"].find({}).to_list())
    ping_task = asyncio.create_task(client.admin.command("ping"))
    await reading.reached()
    await pinging.reached()
    await client["db"]["c"].insert_one({"_id": 1})
    reading.release()
    pinging.release()
    assert await cursor_task == [{"_id": 1}]
    assert await ping_task == {"ok": 1.0}


async def test_cancelled_held_call_changes_nothing(coll: InMemoryCollection) -> None:
    held = coll.hold("delete_many")
    await coll.insert_one({"_id": 1})
    call = asyncio.create_task(coll.delete_many({}))
    await held.reached()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not held.is_held
    assert await coll.count_documents({}) == 1


async def test_clear_forgets_holds_no_call_has_reached(coll: InMemoryCollection) -> None:
    held = coll.hold("insert_one")
    coll.database.client.faults.clear()
    await coll.insert_one({"_id": 1})
    assert not held.is_reached
