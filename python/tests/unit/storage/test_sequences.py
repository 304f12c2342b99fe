"""Sequence numbers: unique, positive, increasing, recovered when the counter goes missing."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta

import pytest
from bson.int64 import Int64
from pymongo.errors import DuplicateKeyError

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    COUNTER_KIND,
    WORKFLOW,
    end_counter_grace,
    make_checkpoint,
    make_storage,
    raw_checkpoints,
    raw_counter,
    save_chain,
    scope_of,
)

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)


async def sequences(collection: InMemoryCollection) -> dict[str, int]:
    return {d["checkpoint_id"]: d["sequence"] for d in await raw_checkpoints(collection)}


async def test_gathered_saves_of_a_new_run_get_sequences_one_to_twenty(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    checkpoints = [make_checkpoint(f"cp-{i:02d}") for i in range(20)]

    ids = await asyncio.gather(*(storage.save(c) for c in checkpoints))

    assert sorted(ids) == sorted(c.checkpoint_id for c in checkpoints)
    # Unique and positive, not contiguous: in a new counter's grace every allocation reads the
    # retained maximum, and one that sees a concurrent save's higher number already inserted
    # allocates again, leaving a gap. The first-in, first-out engine ran all twenty allocations
    # before any read, so it used to give exactly 1..20; a server does not (ADR 0015).
    values = sorted((await sequences(collection)).values())
    assert len(values) == len(set(values)) == 20
    assert values[0] >= 1


async def test_gathered_saves_in_steady_state_continue_without_gaps(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(storage, 3, prefix="warm")
    # Steady state is a checked counter: past its grace, and marked by the first save after it.
    end_counter_grace(collection)
    await storage.save(make_checkpoint("cp-marks"))

    await asyncio.gather(*(storage.save(make_checkpoint(f"cp-{i:02d}")) for i in range(20)))

    # A checked counter spends exactly one number per save and nothing re-allocates, so in any
    # interleaving the numbers are contiguous.
    assert sorted((await sequences(collection)).values()) == list(range(1, 25))


async def test_sequential_saves_are_positive_and_increase_in_save_order(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    ids = await save_chain(storage, 6)

    by_id = await sequences(collection)
    ordered = [by_id[i] for i in ids]
    assert ordered[0] > 0
    assert all(later > earlier for earlier, later in itertools.pairwise(ordered))


async def test_counter_document_shape(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    scope = scope_of(storage)
    await save_chain(storage, 3)

    counter = await raw_counter(collection, scope)

    assert counter is not None
    assert counter["_id"] == scope.counter_document_id
    assert counter["_kind"] == COUNTER_KIND
    assert counter["sequence"] == 3
    # In its grace a new counter is never marked checked; the grace is the server's creation
    # time plus twice the operation timeout, and each allocation records the server's time.
    assert counter["sequence_checked"] is False
    created = counter["recheck_until"] - storage.options.counter_recheck_grace
    assert created <= counter["allocated_at"] < counter["recheck_until"]
    end_counter_grace(collection)
    await storage.save(make_checkpoint("cp-after-grace"))
    counter = await raw_counter(collection, scope)
    assert counter is not None
    assert counter["sequence_checked"] is True
    assert counter["allocated_at"] >= counter["recheck_until"]
    assert counter["retention_mode"] == "permanent"
    assert "expires_at" not in counter
    for field, value in scope.fields().items():
        assert counter[field] == value


async def test_counter_of_an_expiring_run_is_expiring(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, ttl=timedelta(minutes=30))
    await storage.save(make_checkpoint("cp-expiring"))

    counter = await raw_counter(collection, scope_of(storage))
    (document,) = await raw_checkpoints(collection)

    assert counter is not None
    assert counter["retention_mode"] == "expiring"
    assert counter["expires_at"] == document["expires_at"]


async def test_missing_counter_recovers_above_retained_checkpoints(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    scope = scope_of(storage)
    await save_chain(storage, 5)
    deleted = await collection.delete_one({"_id": scope.counter_document_id})
    assert deleted.deleted_count == 1

    await storage.save(make_checkpoint("cp-after-loss"))

    by_id = await sequences(collection)
    assert by_id["cp-after-loss"] > 5
    assert len(set(by_id.values())) == 6
    ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
    assert ids[-1] == "cp-after-loss"
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == "cp-after-loss"


@pytest.mark.parametrize("width", [int, Int64], ids=["int32", "int64"])
async def test_the_counters_integer_width_changes_nothing(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage, width: type[int]
) -> None:
    # A server keeps the counter int32 until an operand is int64 or a sum passes 2**31 - 1, and
    # pymongo returns int64 as bson's Int64 (testing/DIVERGENCES.md entry 23).
    scope = scope_of(storage)
    await save_chain(storage, 2)
    await collection.update_one(
        {"_id": scope.counter_document_id}, {"$set": {"sequence": width(2), "allocations": width(7)}}
    )

    await storage.save(make_checkpoint("cp-third"))

    counter = await raw_counter(collection, scope)
    assert counter is not None
    assert type(counter["sequence"]) is width  # the server's $add keeps the wider operand's width
    assert (await sequences(collection))["cp-third"] == 3
    (run,) = (await storage.list_runs()).runs
    assert (run.latest_sequence, run.saves, run.checkpoint_count) == (3, 8, 3)
    assert type(run.latest_sequence) is int
    assert type(run.saves) is int
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == "cp-third"


async def test_a_recovered_counter_holds_a_plain_int_as_a_server_would(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    # The floor is the retained maximum as a Python int (checkpoints store Int64, sequence_of
    # returns int), so the server's $max/$add leave the new counter int32 below 2**31.
    scope = scope_of(storage)
    await save_chain(storage, 3)
    await collection.delete_one({"_id": scope.counter_document_id})

    await storage.save(make_checkpoint("cp-after-loss"))

    counter = await raw_counter(collection, scope)
    assert counter is not None
    assert type(counter["sequence"]) is int
    assert counter["sequence"] == 4
    assert all(type(d["sequence"]) is Int64 for d in await raw_checkpoints(collection))


async def test_two_storages_recovering_a_missing_counter_at_once_stay_unique(
    collection: InMemoryCollection,
) -> None:
    first, second = make_storage(collection), make_storage(collection)
    await first.ensure_indexes()
    await save_chain(first, 5)
    await collection.delete_one({"_id": scope_of(first).counter_document_id})

    await asyncio.gather(
        first.save(make_checkpoint("cp-first-writer")),
        second.save(make_checkpoint("cp-second-writer")),
        first.save(make_checkpoint("cp-first-writer-2")),
        second.save(make_checkpoint("cp-second-writer-2")),
    )

    by_id = await sequences(collection)
    assert len(by_id) == 9
    assert len(set(by_id.values())) == 9
    for name in ("cp-first-writer", "cp-second-writer", "cp-first-writer-2", "cp-second-writer-2"):
        assert by_id[name] > 5


async def test_concurrent_first_saves_of_a_new_run_all_succeed(collection: InMemoryCollection) -> None:
    await make_storage(collection).ensure_indexes()
    storages = [make_storage(collection) for _ in range(5)]

    ids = await asyncio.gather(*(s.save(make_checkpoint(f"cp-first-{i}")) for i, s in enumerate(storages)))

    assert len(ids) == 5
    values = list((await sequences(collection)).values())
    assert len(values) == 5
    assert len(set(values)) == 5
    assert min(values) >= 1


async def test_counter_reset_below_retained_with_checked_flag_recovers_on_collision(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    scope = scope_of(storage)
    await storage.ensure_indexes()
    await save_chain(storage, 5)
    await collection.update_one(
        {"_id": scope.counter_document_id}, {"$set": {"sequence": 1, "sequence_checked": True}}
    )

    assert await storage.save(make_checkpoint("cp-after-reset")) == "cp-after-reset"

    by_id = await sequences(collection)
    assert len(by_id) == 6
    assert len(set(by_id.values())) == 6
    assert by_id["cp-after-reset"] > 5
    counter = await raw_counter(collection, scope)
    assert counter is not None
    assert counter["sequence"] >= by_id["cp-after-reset"]
    # The next save continues above it without another collision.
    await storage.save(make_checkpoint("cp-next"))
    assert (await sequences(collection))["cp-next"] > by_id["cp-after-reset"]


async def test_ordering_never_assumes_contiguous_sequences(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    ids = await save_chain(storage, 8)
    for victim in (ids[1], ids[4], ids[5]):
        assert await storage.delete(victim) is True
    # A sequence gap also arises from a counter that moved on without an insert.
    await collection.update_one({"_id": scope_of(storage).counter_document_id}, {"$inc": {"sequence": 10}})
    await storage.save(make_checkpoint("cp-after-gap"))

    expected = [i for i in ids if i not in (ids[1], ids[4], ids[5])] + ["cp-after-gap"]
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == expected
    listed = await storage.list_checkpoints(workflow_name=WORKFLOW)
    assert [c.checkpoint_id for c in listed] == expected
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == "cp-after-gap"


async def test_counter_upsert_losing_the_creation_race_is_retried(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    # On a server, two upserts of a missing counter can both try to insert it; the loser gets
    # E11000 on _id. The filter carries more than the _id, so the server does not retry it
    # itself (DIVERGENCES.md #2). The engine races only under seeded scheduling, and then not on
    # every seed, so the error is injected.
    await make_storage(collection).save(make_checkpoint("cp-winner"))
    scope = scope_of(storage)
    collection.fail_next(
        "find_one_and_update",
        DuplicateKeyError(
            "E11000 duplicate key error index: _id_",
            11000,
            {"code": 11000, "keyPattern": {"_id": 1}, "keyValue": {"_id": scope.counter_document_id}},
        ),
    )

    assert await storage.save(make_checkpoint("cp-loser")) == "cp-loser"

    by_id = await sequences(collection)
    assert set(by_id) == {"cp-winner", "cp-loser"}
    assert len(set(by_id.values())) == 2
