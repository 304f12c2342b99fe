"""Index builds take time, and one that outlives its operation's deadline is aborted
(DIVERGENCES.md entry 29)."""

from __future__ import annotations

import asyncio
import math
import time

import pymongo
import pytest
from pymongo import IndexModel
from pymongo.errors import ExecutionTimeout

from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)


async def _populated(client: InMemoryMongoClient, documents: int = 1000) -> InMemoryCollection:
    coll = client["db"]["coll"]
    await coll.insert_many([{"_id": index, "k": index} for index in range(documents)])
    return coll


async def _names(coll: InMemoryCollection) -> list[str]:
    return [index["name"] for index in await (await coll.list_indexes()).to_list()]


async def test_a_build_longer_than_the_deadline_is_aborted_and_leaves_no_index(
    client: InMemoryMongoClient,
) -> None:
    coll = await _populated(client)
    client.index_build_rate = 1000  # a second for the thousand documents
    other = client["db"]["other"]

    async def meanwhile() -> None:
        await asyncio.sleep(0.01)
        await other.insert_one({"_id": 1})  # the server serves others while the build runs

    started = time.monotonic()
    with pymongo.timeout(0.05), pytest.raises(ExecutionTimeout) as caught:
        await asyncio.gather(coll.create_index("k"), meanwhile())
    assert time.monotonic() - started >= 0.04, "it fails when the deadline passes, not before"
    error = caught.value
    assert error.code == 50
    assert error.timeout
    assert (error.details or {})["codeName"] == "MaxTimeMSExpired"
    assert str(error).startswith(
        "operation exceeded time limit (configured timeouts: timeoutMS: 50.0ms, connectTimeoutMS: 20000.0ms)"
    )
    assert await _names(coll) == ["_id_"]
    assert await other.count_documents({}) == 1
    # Without a deadline the same build completes.
    assert await coll.create_index("k") == "k_1"
    assert await _names(coll) == ["_id_", "k_1"]


async def test_max_time_ms_and_timeout_ms_bound_a_build_too(client: InMemoryMongoClient) -> None:
    coll = await _populated(client)
    client.index_build_rate = 1000
    with pytest.raises(ExecutionTimeout, match=r"^operation exceeded time limit \(configured timeouts: conn"):
        await coll.create_index("k", maxTimeMS=20)
    with pytest.raises(ExecutionTimeout):
        await coll.create_indexes([IndexModel("k"), IndexModel("j")], maxTimeMS=20)
    assert await _names(coll) == ["_id_"]
    bounded = InMemoryMongoClient(timeoutMS=30, index_build_rate=1000)
    await bounded["db"]["coll"].insert_many([{"k": index} for index in range(100)])  # 0.1 s
    with pytest.raises(ExecutionTimeout, match=r"timeoutMS: 30\.0ms"):
        await bounded["db"]["coll"].create_index("k")
    await bounded.close()


async def test_a_build_that_fits_and_an_existing_index_complete(client: InMemoryMongoClient) -> None:
    coll = await _populated(client)
    assert client.index_build_rate == 100_000  # the default: these thousand take 10 ms
    with pymongo.timeout(0.5):
        assert await coll.create_index("k") == "k_1"
    client.index_build_rate = 1
    with pymongo.timeout(0.01):
        assert await coll.create_index("k") == "k_1"  # already built: no scan, no time
    empty = client["db"]["empty"]
    with pymongo.timeout(0.01):
        assert await empty.create_index("k") == "k_1"  # nothing to scan


def test_the_build_rate_is_a_positive_number_of_documents_per_second() -> None:
    assert InMemoryMongoClient(index_build_rate=math.inf).index_build_rate == math.inf
    for rate in (0, -1, math.nan, "fast", True):
        with pytest.raises(ValueError, match="index_build_rate"):
            InMemoryMongoClient(index_build_rate=rate)  # type: ignore[arg-type]
    client = InMemoryMongoClient()
    with pytest.raises(ValueError, match="index_build_rate"):
        client.index_build_rate = 0
