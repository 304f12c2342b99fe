"""A write's connection lost before or after the server applied it, and pymongo's retry
(DIVERGENCES.md entry 28)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pymongo
import pytest
from pymongo import AsyncMongoClient, DeleteMany, DeleteOne, InsertOne, UpdateMany, UpdateOne
from pymongo.errors import AutoReconnect, DuplicateKeyError, NetworkTimeout
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb.testing import FaultPlan, InMemoryCollection, InMemoryMongoClient
from agent_framework_mongodb.testing._retries import write_attempts

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)

Call = Callable[[Any], Awaitable[Any]]

# Each write once, as a counter bump on document 1 where it can be, so "applied once" is n == 1.
_RETRYABLE: dict[str, Call] = {
    "insert_one": lambda c: c.insert_one({"_id": 2}),
    "insert_many": lambda c: c.insert_many([{"_id": 2}, {"_id": 3}]),
    "update_one": lambda c: c.update_one({"_id": 1}, {"$inc": {"n": 1}}),
    "find_one_and_update": lambda c: c.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}}),
    "delete_one": lambda c: c.delete_one({"_id": 1}),
    "bulk_write": lambda c: c.bulk_write([UpdateOne({"_id": 1}, {"$inc": {"n": 1}}), DeleteOne({"_id": 9})]),
}
_NOT_RETRYABLE: dict[str, Call] = {
    "update_many": lambda c: c.update_many({"_id": 1}, {"$inc": {"n": 1}}),
    "delete_many": lambda c: c.delete_many({"_id": 1}),
    "bulk_write": lambda c: c.bulk_write([UpdateMany({"_id": 1}, {"$inc": {"n": 1}})]),
}


async def _state(coll: InMemoryCollection) -> list[dict[str, Any]]:
    return await coll.find({}, sort=[("_id", 1)]).to_list()


async def _applied_once(coll: InMemoryCollection, operation: str, call: Call) -> list[dict[str, Any]]:
    """What ``call`` leaves when it runs once, on a fresh copy of the same start."""
    reference = InMemoryMongoClient()["db"]["coll"]
    await reference.insert_one({"_id": 1, "n": 0})
    await call(reference)
    return await _state(reference)


async def test_which_writes_are_retryable_is_pymongos_own_rule() -> None:
    # pymongo decides per call, in the `retryable` it hands _retryable_write; capture it there.
    real: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        "mongodb://localhost:1", connect=False, serverSelectionTimeoutMS=50
    )
    decided: list[bool] = []

    class Captured(Exception):
        pass

    async def capture(retryable: bool, *_args: Any, **_kwargs: Any) -> Any:
        decided.append(retryable)
        raise Captured

    real._retryable_write = capture  # type: ignore[method-assign]
    coll = real["db"]["coll"]
    cases: list[tuple[str, bool, Call]] = [
        *((name, False, call) for name, call in _RETRYABLE.items()),
        *((name, name == "bulk_write", call) for name, call in _NOT_RETRYABLE.items()),
        ("bulk_write", True, lambda c: c.bulk_write([DeleteMany({})])),
        ("bulk_write", False, lambda c: c.bulk_write([InsertOne({}), UpdateOne({}, {"$set": {"a": 1}})])),
    ]
    try:
        for name, multi, call in cases:
            with pytest.raises(Captured):
                await call(coll)
            ours = write_attempts(name, acknowledged=True, retry_writes=True, multi=multi)
            assert ours.retryable is decided[-1], name
        unacknowledged = coll.with_options(write_concern=WriteConcern(w=0))
        with pytest.raises(Captured):
            await unacknowledged.insert_one({})
        assert decided[-1] is write_attempts("insert_one", acknowledged=False, retry_writes=True).retryable
        assert decided[-1] is False
    finally:
        await real.close()


@pytest.mark.parametrize("applied", [False, True])
@pytest.mark.parametrize("operation", list(_RETRYABLE))
async def test_a_retryable_write_is_retried_and_applied_exactly_once(
    client: InMemoryMongoClient, operation: str, applied: bool
) -> None:
    coll = client["db"]["coll"]
    await coll.insert_one({"_id": 1, "n": 0})
    expected = await _applied_once(coll, operation, _RETRYABLE[operation])
    coll.network_error_next(operation, applied=applied)
    await _RETRYABLE[operation](coll)  # no error: pymongo's retry got the (recorded) reply
    assert await _state(coll) == expected
    assert client.faults.pending == 0


@pytest.mark.parametrize("applied", [False, True])
@pytest.mark.parametrize(("operation", "call"), list(_NOT_RETRYABLE.items()))
async def test_a_multi_document_write_is_not_retried_and_may_have_applied(
    client: InMemoryMongoClient, operation: str, call: Call, applied: bool
) -> None:
    coll = client["db"]["coll"]
    await coll.insert_one({"_id": 1, "n": 0})
    expected = await _applied_once(coll, operation, call) if applied else await _state(coll)
    coll.network_error_next(operation, applied=applied)
    with pytest.raises(AutoReconnect) as caught:
        await call(coll)
    assert (
        str(caught.value)
        == "localhost:27017: connection closed (configured timeouts: connectTimeoutMS: 20000.0ms)"
    )
    assert not caught.value.has_error_label("RetryableWriteError")
    assert not caught.value.timeout
    assert await _state(coll) == expected


@pytest.mark.parametrize("applied", [False, True])
async def test_one_retry_only_without_an_operation_timeout(
    client: InMemoryMongoClient, applied: bool
) -> None:
    coll = client["db"]["coll"]
    await coll.insert_one({"_id": 1, "n": 0})
    coll.network_error_next("update_one", applied=applied, times=2)
    with pytest.raises(AutoReconnect) as caught:
        await coll.update_one({"_id": 1}, {"$inc": {"n": 1}})
    assert caught.value.has_error_label("RetryableWriteError")
    assert await coll.find_one({"_id": 1}) == {"_id": 1, "n": int(applied)}  # never twice
    coll.network_error_next("update_one", times=3)
    with pytest.raises(AutoReconnect):
        await coll.update_one({"_id": 1}, {"$inc": {"n": 1}})
    assert client.faults.pending == 1, "the third attempt's fault waits for the next call"


async def test_under_an_operation_timeout_pymongo_retries_until_it_gets_through(
    client: InMemoryMongoClient,
) -> None:
    coll = client["db"]["coll"]
    await coll.insert_one({"_id": 1, "n": 0})
    coll.network_error_next("find_one_and_update", applied=True, times=5)
    with pymongo.timeout(5):
        before = await coll.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}})
    assert before == {"_id": 1, "n": 0}, "the first attempt's result, answered from the server's record"
    assert await coll.find_one({"_id": 1}) == {"_id": 1, "n": 1}


@pytest.mark.parametrize("applied", [False, True])
async def test_a_timed_out_socket_under_an_operation_timeout_ends_at_the_deadline(
    client: InMemoryMongoClient, applied: bool
) -> None:
    coll = client["db"]["coll"]
    coll.network_error_next("insert_one", applied=applied, timeout=True)
    with pymongo.timeout(0.05), pytest.raises(NetworkTimeout) as caught:
        await coll.insert_one({"_id": 1})
    assert caught.value.timeout
    assert caught.value.has_error_label("RetryableWriteError")
    assert str(caught.value).startswith("localhost:27017: timed out (configured timeouts: timeoutMS: 50.0ms")
    assert await coll.count_documents({}) == int(applied)
    # Without an operation timeout a socket timeout is one more network error: retried.
    coll.network_error_next("insert_one", applied=True, timeout=True)
    await coll.insert_one({"_id": 2})
    assert await coll.count_documents({"_id": 2}) == 1


async def test_a_write_error_behind_a_lost_reply_comes_back_with_the_retry(
    client: InMemoryMongoClient,
) -> None:
    coll = client["db"]["coll"]
    await coll.insert_one({"_id": 1})
    coll.network_error_next("insert_one", applied=True)
    with pytest.raises(DuplicateKeyError):
        await coll.insert_one({"_id": 1})


async def test_unacknowledged_and_retry_writes_false_are_not_retried() -> None:
    client = InMemoryMongoClient(retryWrites=False)
    coll = client["db"]["coll"]
    coll.network_error_next("insert_one", applied=True)
    with pytest.raises(AutoReconnect) as caught:
        await coll.insert_one({"_id": 1})
    assert not caught.value.has_error_label("RetryableWriteError")
    assert await coll.count_documents({}) == 1
    # w=0: pymongo reads no reply, so a connection lost after sending goes unnoticed...
    fire_and_forget = InMemoryMongoClient()["db"].get_collection("coll", write_concern=WriteConcern(w=0))
    fire_and_forget.network_error_next("insert_one", applied=True)
    assert not (await fire_and_forget.insert_one({"_id": 1})).acknowledged
    # ...and one lost while sending fails the call, with nothing written.
    fire_and_forget.network_error_next("insert_one")
    with pytest.raises(AutoReconnect):
        await fire_and_forget.insert_one({"_id": 2})
    assert [d["_id"] for d in await fire_and_forget.find({}).to_list()] == [1]
    await client.close()


def test_network_faults_are_for_writes_and_counted() -> None:
    plan = FaultPlan()
    with pytest.raises(ValueError, match="fail_next"):
        plan.network_error_next("find")
    with pytest.raises(ValueError, match="times"):
        plan.network_error_next("insert_one", times=0)
    plan.network_error_next("insert_one", times=2)
    plan.network_error_next("bulk_write", collection="db.other")
    assert plan.pending == 3
    assert plan.take_network_fault("bulk_write", "db.coll") is None
    fault = plan.take_network_fault("insert_one", "db.coll")
    assert fault is not None
    assert not fault.applied
    plan.clear()
    assert plan.pending == 0
