"""A save that returned before another started sorts before it, even across a lost counter.

The race (ADR 0006): writer A allocates from the run's counter and is slow to insert; the counter
is deleted; writer C recreates it and checks it against the retained maximum, which cannot see A's
number yet; A inserts and returns; writer B, which starts after A returned, must still get a
higher sequence. A's insert is held at the engine boundary, so every interleaving here is exact.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    INSERT,
    WORKFLOW,
    ProxyCollection,
    advance_server_clock,
    end_counter_grace,
    make_checkpoint,
    make_storage,
    raw_checkpoints,
    scope_of,
)

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)


async def _sequences(collection: InMemoryCollection) -> dict[str, int]:
    return {document["checkpoint_id"]: document["sequence"] for document in await raw_checkpoints(collection)}


async def _checked_run_with_spent_numbers(
    storage: MongoDBCheckpointStorage, collection: InMemoryCollection, *, retained: int, spent: int
) -> None:
    """A run whose counter is checked, holding ``retained`` checkpoints, with ``spent`` more
    numbers consumed by identical retries (which store nothing)."""
    ids = [f"cp-{index}" for index in range(1, retained + 1)]
    checkpoints = [make_checkpoint(checkpoint_id) for checkpoint_id in ids]
    for checkpoint in checkpoints[:-1]:
        await storage.save(checkpoint)
    end_counter_grace(collection)
    await storage.save(checkpoints[-1])  # the first check after the grace marks the counter
    for _ in range(spent):
        await storage.save(checkpoints[-1])
    assert sorted((await _sequences(collection)).values()) == list(range(1, retained + 1))


async def _held_save(
    proxy: ProxyCollection, storage: MongoDBCheckpointStorage, checkpoint: WorkflowCheckpoint
) -> tuple[asyncio.Event, asyncio.Task[str]]:
    """Start ``storage.save(checkpoint)`` and park it just before its insert reaches the engine."""
    gate = proxy.block(INSERT)
    task = asyncio.ensure_future(storage.save(checkpoint))
    await asyncio.wait_for(proxy.entered[INSERT].wait(), timeout=5)
    assert not task.done()
    return gate, task


async def _delete_counter(collection: InMemoryCollection, storage: MongoDBCheckpointStorage) -> None:
    deleted = await collection.delete_one({"_id": scope_of(storage).counter_document_id})
    assert deleted.deleted_count == 1


@pytest.mark.parametrize("b_waits_out_the_grace", [False, True], ids=["b-in-grace", "b-after-grace"])
async def test_a_save_after_a_returned_one_sorts_after_it_across_a_lost_counter(
    collection: InMemoryCollection, b_waits_out_the_grace: bool
) -> None:
    proxy = ProxyCollection(collection)
    writer_a = make_storage(proxy)
    writer_c = make_storage(collection)
    writer_b = make_storage(collection)
    await _checked_run_with_spent_numbers(writer_c, collection, retained=3, spent=2)

    gate, saving_a = await _held_save(proxy, writer_a, make_checkpoint("cp-a"))  # allocated 6
    await _delete_counter(collection, writer_c)
    await writer_c.save(make_checkpoint("cp-c"))  # recreates the counter; sees only 1-3
    gate.set()
    assert await saving_a == "cp-a"
    if b_waits_out_the_grace:
        # No save ran between A's insert and the end of the grace: the first allocation after
        # it must still check, because no check made during the grace may mark the counter.
        end_counter_grace(collection)
    await writer_b.save(make_checkpoint("cp-b"))

    sequences = await _sequences(collection)
    assert sequences["cp-a"] == 6
    assert sequences["cp-c"] == 4
    assert sequences["cp-b"] > sequences["cp-a"], sequences
    latest = await writer_b.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == "cp-b"


async def test_ordering_holds_when_no_checkpoint_was_retained_at_all(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    writer_a = make_storage(proxy)
    writer_c = make_storage(collection)
    await _checked_run_with_spent_numbers(writer_c, collection, retained=1, spent=2)

    gate, saving_a = await _held_save(proxy, writer_a, make_checkpoint("cp-a"))  # allocated 4
    # Everything of the run goes: its only checkpoint and its counter.
    await collection.delete_many({"session_id": writer_c.options.session_id})
    await writer_c.save(make_checkpoint("cp-c"))  # a new counter; nothing retained: stored at 1
    gate.set()
    await saving_a
    await writer_c.save(make_checkpoint("cp-b"))

    sequences = await _sequences(collection)
    assert sequences == {"cp-c": 1, "cp-a": 4, "cp-b": sequences["cp-b"]}
    assert sequences["cp-b"] > 4, sequences


async def test_the_grace_is_the_servers_time_not_the_clients(collection: InMemoryCollection) -> None:
    # With the server's clock barely moved, the grace holds even though the storage's own
    # options would say a client-measured grace had passed: nothing but $$NOW decides it.
    # A 2 s deadline (a 4 s grace): CI's loaded runs once took 0.61 s for one save on the engine.
    storage = make_storage(collection, operation_timeout=2.0)
    assert storage.options.counter_recheck_grace == timedelta(seconds=4)
    await storage.save(make_checkpoint("cp-1"))
    await asyncio.sleep(4.2)  # more than the grace by the client's clock
    advance_server_clock(collection, timedelta(seconds=-5))  # the server's: 0.8 s before cp-1's allocation
    proxy = ProxyCollection(collection)
    await make_storage(proxy, operation_timeout=2.0).save(make_checkpoint("cp-2"))
    assert "find_one" in proxy.trip_names, "an allocation inside the server's grace skipped the check"
