"""Chunked checkpoints keep every earlier guarantee: idempotency and conflict detection, faults and
cancellation at each round trip, concurrent writers (under each engine scheduling seed)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from pymongo.errors import AutoReconnect

from agent_framework_mongodb.checkpoints.codec import CHUNKED_PAYLOAD_FORMAT, canonical_hash
from agent_framework_mongodb.errors import MongoDBConcurrencyError, MongoDBIntegrationError
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import INSERT, WORKFLOW, ProxyCollection, make_checkpoint, make_storage, raw_checkpoints

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)

CHUNK_WRITE = "bulk_write"
ALLOCATE = "find_one_and_update"
RETAINED_MAXIMUM = "find_one"
# In a counter's grace a chunked save sends its chunk write, its allocation and the retained-maximum
# read together, then its insert: a fault or cancellation in any of them, while the others are in
# flight, must leave nothing half-done.
_REQUESTS = [CHUNK_WRITE, ALLOCATE, RETAINED_MAXIMUM, INSERT]


def _history(count: int, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"text": " ".join(rng.choices(["red", "green", "blue", "amber"], k=40)), "n": n} for n in range(count)
    ]


def large(checkpoint_id: str, *, messages: int = 200, seed: int = 1) -> WorkflowCheckpoint:
    return make_checkpoint(checkpoint_id, state={"history": _history(messages, seed)})


async def _load_outcome(collection: InMemoryCollection, checkpoint_id: str) -> str:
    try:
        loaded = await make_storage(collection).load(checkpoint_id)
    except MongoDBIntegrationError as error:
        return error.category
    return "loaded" if loaded.checkpoint_id == checkpoint_id else "other"


def identity(checkpoint: WorkflowCheckpoint) -> str:
    return canonical_hash(checkpoint.to_dict())


async def test_an_identical_retry_stores_one_root_and_other_content_conflicts(
    collection: InMemoryCollection,
) -> None:
    storage = make_storage(collection)
    assert await storage.save(large("cp-a")) == "cp-a"
    assert await make_storage(collection).save(large("cp-a")) == "cp-a"  # another process retries

    with pytest.raises(MongoDBConcurrencyError):
        await storage.save(large("cp-a", seed=2))
    (root,) = await raw_checkpoints(collection)
    assert root["payload_format"] == CHUNKED_PAYLOAD_FORMAT
    assert identity(await make_storage(collection).load("cp-a")) == identity(large("cp-a"))


@pytest.mark.parametrize("failing", _REQUESTS)
async def test_a_failed_round_trip_stores_no_checkpoint_and_a_retry_succeeds(
    collection: InMemoryCollection, failing: str
) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    await storage.save(large("cp-0"))
    proxy.fail(failing, AutoReconnect("connection reset"))

    with pytest.raises(MongoDBIntegrationError):
        await storage.save(large("cp-1", messages=220))
    assert [d["checkpoint_id"] for d in await raw_checkpoints(collection)] == ["cp-0"]

    await storage.save(large("cp-1", messages=220))
    assert identity(await make_storage(collection).load("cp-1")) == identity(large("cp-1", messages=220))


@pytest.mark.parametrize("inside", _REQUESTS)
async def test_a_save_cancelled_in_any_round_trip_is_retried_cleanly(
    collection: InMemoryCollection, inside: str
) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    await storage.save(large("cp-0"))
    gate = proxy.block(inside)
    task = asyncio.ensure_future(storage.save(large("cp-1", messages=230)))
    await asyncio.wait_for(proxy.entered[inside].wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.set()

    await storage.save(large("cp-1", messages=230))
    assert identity(await make_storage(collection).load("cp-1")) == identity(large("cp-1", messages=230))


async def test_concurrent_writers_of_a_run_share_chunks_and_every_checkpoint_loads(
    collection: InMemoryCollection,
) -> None:
    writers = [make_storage(collection) for _ in range(3)]
    # The histories overlap (each a prefix of the next), so the writers race on the same chunks.
    checkpoints = [large(f"cp-{index}", messages=150 + 10 * index) for index in range(6)]

    await asyncio.gather(*(writers[index % 3].save(item) for index, item in enumerate(checkpoints)))

    reader = make_storage(collection)
    for item in checkpoints:
        assert identity(await reader.load(item.checkpoint_id)) == identity(item)
    listed = await reader.list_checkpoints(workflow_name=WORKFLOW)
    assert sorted(identity(item) for item in listed) == sorted(identity(item) for item in checkpoints)


async def test_clear_run_racing_a_save_leaves_no_half_checkpoint(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await storage.save(large("cp-0"))

    results = await asyncio.gather(
        storage.save(large("cp-1", messages=240)),
        make_storage(collection).clear_run(),
        return_exceptions=True,
    )

    assert not any(isinstance(result, BaseException) for result in results), results
    # Whatever the interleaving, a stored checkpoint loads whole, or is not there.
    for document in await raw_checkpoints(collection):
        outcome = await _load_outcome(collection, document["checkpoint_id"])
        assert outcome in {"loaded", "mapping"}  # "mapping": its chunks cleared after its chunk write
    await storage.save(large("cp-2", messages=250))  # the writer goes on: removed chunks are rewritten
    assert identity(await make_storage(collection).load("cp-2")) == identity(large("cp-2", messages=250))
