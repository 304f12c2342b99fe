"""The client-side operation timeout: ``pymongo.timeout`` blocks and the client's ``timeoutMS``."""

from __future__ import annotations

import asyncio

import pymongo
import pytest
from pymongo.errors import ExecutionTimeout, NetworkTimeout

from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)


async def _expire(seconds: float) -> None:
    await asyncio.sleep(seconds + 0.01)


async def test_operation_entered_past_the_deadline_is_not_sent(coll: InMemoryCollection) -> None:
    with pymongo.timeout(0.02):
        await _expire(0.02)
        with pytest.raises(ExecutionTimeout) as info:
            await coll.insert_one({"_id": 1})
    error = info.value
    assert error.timeout
    assert error.code == 50
    assert error.details is not None
    assert error.details["code"] == 50
    message = str(error)
    assert message.startswith("operation would exceed time limit, remaining timeout:-")
    assert "<= network round trip time:0.00000" in message
    assert "(configured timeouts: timeoutMS: 20.0ms, connectTimeoutMS: 20000.0ms)" in message
    assert await coll.count_documents({}) == 0


async def test_every_kind_of_operation_honours_an_expired_deadline(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1})
    with pymongo.timeout(0.02):
        await _expire(0.02)
        for call in (
            lambda: coll.find({}).to_list(),
            lambda: coll.find_one({}),
            lambda: coll.update_one({"_id": 1}, {"$set": {"x": 1}}),
            lambda: coll.find_one_and_update({"_id": 1}, {"$set": {"x": 1}}),
            lambda: coll.delete_many({}),
            lambda: coll.create_index("x"),
            lambda: coll.database.client.admin.command("ping"),
        ):
            with pytest.raises(ExecutionTimeout):
                await call()
    assert await coll.find({}).to_list() == [{"_id": 1}]
    assert len(await (await coll.list_indexes()).to_list()) == 1


async def test_operations_within_the_deadline_run(coll: InMemoryCollection) -> None:
    with pymongo.timeout(5):
        await coll.insert_one({"_id": 1})
        assert await coll.find_one({"_id": 1}) == {"_id": 1}
    with pymongo.timeout(None):
        assert await coll.count_documents({}) == 1


async def test_held_call_times_out_like_a_socket_read_and_never_applies(coll: InMemoryCollection) -> None:
    held = coll.hold("insert_one")
    with pymongo.timeout(0.05), pytest.raises(NetworkTimeout) as info:
        await coll.insert_one({"_id": 1})
    error = info.value
    assert error.timeout
    assert str(error) == (
        "localhost:27017: timed out (configured timeouts: timeoutMS: 50.0ms, connectTimeoutMS: 20000.0ms)"
    )
    assert held.is_reached
    assert not held.is_held
    held.release()
    await asyncio.sleep(0)
    assert await coll.count_documents({}) == 0
    await coll.insert_one({"_id": 1})  # the hold is spent; the next call runs
    assert await coll.count_documents({}) == 1


async def test_held_call_released_before_the_deadline_runs(coll: InMemoryCollection) -> None:
    held = coll.hold("update_one")

    async def slow_update() -> int:
        with pymongo.timeout(5):
            return (await coll.update_one({"_id": 1}, {"$set": {"x": 1}}, upsert=True)).matched_count

    call = asyncio.create_task(slow_update())
    await held.reached()
    held.release()
    assert await call == 0
    assert await coll.find_one({}) == {"_id": 1, "x": 1}


async def test_client_timeout_ms_applies_outside_any_timeout_block() -> None:
    client = InMemoryMongoClient(timeoutMS=50)
    coll = client["db"]["c"]
    held = coll.hold("find")
    with pytest.raises(NetworkTimeout, match=r"timeoutMS: 50\.0ms"):
        await coll.find({}).to_list()
    assert not held.is_held
    # A pymongo.timeout block replaces timeoutMS, as pymongo's _csot.apply does.
    held = coll.hold("find")
    call = asyncio.create_task(_read_within(coll, 5))
    await held.reached()
    await asyncio.sleep(0.08)
    held.release()
    assert await call == []
    await client.close()


async def _read_within(coll: InMemoryCollection, seconds: float) -> list[dict[str, object]]:
    with pymongo.timeout(seconds):
        return await coll.find({}).to_list()


async def test_zero_means_no_limit() -> None:
    client = InMemoryMongoClient(timeoutMS=0)
    coll = client["db"]["c"]
    held = coll.hold("insert_one")
    call = asyncio.create_task(coll.insert_one({"_id": 1}))
    await held.reached()
    await asyncio.sleep(0.03)
    held.release()
    assert (await call).inserted_id == 1
    await client.close()
