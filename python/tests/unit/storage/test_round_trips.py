"""Round trips: what each operation costs against the collection, counted by a proxy."""

from __future__ import annotations

import asyncio

from pymongo.errors import AutoReconnect

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    INSERT,
    WORKFLOW,
    ProxyCollection,
    end_counter_grace,
    make_checkpoint,
    make_storage,
    save_chain,
)

ALLOCATE = "find_one_and_update"
RETAINED_MAXIMUM = "find_one"


async def test_saves_in_a_new_counters_grace_wait_for_two(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    # A new counter may be a recreated one while a save that allocated from the old one is still
    # to insert: every allocation in its grace reads the retained maximum, and none marks it. The
    # read goes out beside the allocation, so a run's first saves wait for two round trips.
    await proxied_storage.ensure_indexes()  # as deployed: no first-save look at the indexes
    for index in range(3):
        proxy.reset()
        await proxied_storage.save(make_checkpoint(f"cp-grace-{index}"))
        assert proxy.waves == [[ALLOCATE, RETAINED_MAXIMUM], [INSERT]]


async def test_first_save_after_the_grace_records_its_check_beside_the_insert(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(proxied_storage, 2)
    end_counter_grace(proxy)
    proxy.reset()

    await proxied_storage.save(make_checkpoint("cp-checks"))
    # Allocation and the retained-maximum read, then the insert and the update marking the
    # counter checked.
    assert proxy.waves == [[ALLOCATE, RETAINED_MAXIMUM], [INSERT, ALLOCATE]]
    for index in range(3):
        proxy.reset()
        await proxied_storage.save(make_checkpoint(f"cp-steady-{index}"))
        assert proxy.waves == [[ALLOCATE], [INSERT]]


async def test_a_storage_that_saw_the_counter_checked_sends_the_allocation_alone(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage, collection: InMemoryCollection
) -> None:
    # A second storage of a checked run reads the retained maximum once, beside its first
    # allocation, and then trusts what the counter says.
    await proxied_storage.ensure_indexes()  # as deployed: no first-save look at the indexes
    await save_chain(make_storage(collection), 2)
    end_counter_grace(collection)
    await make_storage(collection).save(make_checkpoint("cp-marks"))
    for expected in ([[ALLOCATE, RETAINED_MAXIMUM], [INSERT]], [[ALLOCATE], [INSERT]]):
        proxy.reset()
        await proxied_storage.save(make_checkpoint(f"cp-{len(expected[0])}"))
        assert proxy.waves == expected


async def test_a_counter_lost_since_the_storage_saw_it_checked_is_checked_again(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(proxied_storage, 2)
    end_counter_grace(proxy)
    await proxied_storage.save(make_checkpoint("cp-marks"))
    await proxy.inner.delete_one({"_kind": "workflow_checkpoint_counter"})
    proxy.reset()

    await proxied_storage.save(make_checkpoint("cp-after-loss"))

    # The allocation alone, as the storage expects a checked counter; the new counter is not,
    # so the read follows; it finds 3 retained, so the save allocates again above them.
    assert proxy.waves == [[ALLOCATE], [RETAINED_MAXIMUM], [ALLOCATE], [INSERT]]
    sequences = {
        d["checkpoint_id"]: d["sequence"] async for d in proxy.inner.find({"_kind": "workflow_checkpoint"})
    }
    assert sequences["cp-after-loss"] > sequences["cp-marks"]


async def test_idempotent_retry_costs_two_and_spends_one_number(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    checkpoint = make_checkpoint("cp-retry")
    await save_chain(proxied_storage, 1)
    end_counter_grace(proxy)
    await proxied_storage.save(checkpoint)
    proxy.reset()

    assert await proxied_storage.save(checkpoint) == "cp-retry"

    # The insert reports the stored identity in its reply: no comparison read.
    assert proxy.trip_names == [ALLOCATE, INSERT]
    await proxied_storage.save(make_checkpoint("cp-after"))
    sequences = {
        d["checkpoint_id"]: d["sequence"] async for d in proxy.inner.find({"_kind": "workflow_checkpoint"})
    }
    assert sequences["cp-after"] - sequences["cp-retry"] == 2, "the retry spent exactly one number"


async def test_reads_and_delete_cost_one(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(proxied_storage, 5)
    measured = {
        "load": proxied_storage.load("cp-002"),
        "get_latest": proxied_storage.get_latest(workflow_name=WORKFLOW),
        "page": proxied_storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=2),
        "delete": proxied_storage.delete("cp-001"),
        "delete_missing": proxied_storage.delete("cp-001"),
    }
    for name, operation in measured.items():
        proxy.reset()
        await operation
        assert proxy.round_trips == 1, name


async def test_page_after_a_cursor_costs_one(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(proxied_storage, 5)
    first = await proxied_storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=2)
    proxy.reset()

    await proxied_storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=first.next_cursor, limit=2)

    assert proxy.trip_names == ["find_fetch"]


async def test_clear_run_waits_for_three(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(proxied_storage, 3)
    proxy.reset()

    await proxied_storage.clear_run()

    # checkpoints beside the counter's chunk generation, then chunks, then the counter beside a
    # second generation (for a writer that read the first before the chunks went)
    assert proxy.round_trips == 5
    assert len(proxy.waves) == 3


async def test_index_operations_cost_two_and_one(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    # ensure_indexes lists the indexes first, to refuse a collection with a default collation
    # before creating anything.
    await proxied_storage.ensure_indexes()
    assert proxy.trip_names == ["list_indexes", "create_indexes"]
    proxy.reset()
    await proxied_storage.validate_indexes()
    assert proxy.trip_names == ["list_indexes"]


async def test_a_failed_check_record_leaves_the_save_stored_and_the_next_save_checks(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(proxied_storage, 2)
    end_counter_grace(proxy)
    proxy.reset()
    # Hold the read until the allocation has gone, then fail the next counter update: the one
    # that records the check beside the insert.
    gate = proxy.block(RETAINED_MAXIMUM)
    saving = asyncio.ensure_future(proxied_storage.save(make_checkpoint("cp-stored")))
    await asyncio.wait_for(proxy.entered[RETAINED_MAXIMUM].wait(), timeout=5)
    proxy.fail(ALLOCATE, AutoReconnect("reset while recording the check"))
    gate.set()

    assert await saving == "cp-stored"
    assert proxy.waves == [[ALLOCATE, RETAINED_MAXIMUM], [INSERT, ALLOCATE]]
    counter = await proxy.inner.find_one({"_kind": "workflow_checkpoint_counter"})
    assert counter is not None
    assert counter["sequence_checked"] is False

    proxy.reset()
    await proxied_storage.save(make_checkpoint("cp-checks-again"))
    assert proxy.waves == [[ALLOCATE, RETAINED_MAXIMUM], [INSERT, ALLOCATE]]
    counter = await proxy.inner.find_one({"_kind": "workflow_checkpoint_counter"})
    assert counter is not None
    assert counter["sequence_checked"] is True
    assert await proxied_storage.list_checkpoint_ids(workflow_name=WORKFLOW) == [
        "cp-000",
        "cp-001",
        "cp-stored",
        "cp-checks-again",
    ]


async def test_a_processs_first_save_looks_at_the_indexes_beside_its_allocation(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    # No ensure_indexes in this process: the look at the unique indexes (once per collection and
    # process) costs no wait of its own.
    await proxied_storage.save(make_checkpoint("cp-first"))
    assert proxy.waves == [["list_indexes", ALLOCATE, RETAINED_MAXIMUM], [INSERT]]
    proxy.reset()
    await proxied_storage.save(make_checkpoint("cp-second"))
    assert proxy.waves == [[ALLOCATE, RETAINED_MAXIMUM], [INSERT]]
