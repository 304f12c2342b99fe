"""Deterministic fault injection."""

from __future__ import annotations

import pytest
from pymongo.errors import AutoReconnect, DuplicateKeyError, NetworkTimeout

from agent_framework_mongodb.testing import FaultPlan, InMemoryCollection, InMemoryMongoClient


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
