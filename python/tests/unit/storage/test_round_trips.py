"""Round trips: what each operation costs against the collection, counted by a proxy."""

from __future__ import annotations

from agent_framework_mongodb import MongoDBCheckpointStorage

from ._support import INSERT, WORKFLOW, ProxyCollection, end_counter_grace, make_checkpoint, save_chain

ALLOCATE = "find_one_and_update"
RETAINED_MAXIMUM = "find_one"


async def test_saves_in_a_new_counters_grace_cost_three(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    # A new counter may be a recreated one while a save that allocated from the old one is still
    # to insert: every allocation in its grace reads the retained maximum, and none marks it.
    await proxied_storage.ensure_indexes()  # as deployed: no first-save look at the indexes
    for index in range(3):
        proxy.reset()
        await proxied_storage.save(make_checkpoint(f"cp-grace-{index}"))
        assert proxy.trip_names == [ALLOCATE, RETAINED_MAXIMUM, INSERT]


async def test_first_save_after_the_grace_costs_four_then_two(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(proxied_storage, 2)
    end_counter_grace(proxy)
    proxy.reset()

    await proxied_storage.save(make_checkpoint("cp-checks"))
    # Allocation, the retained-maximum read, marking the counter checked, then the insert.
    assert proxy.trip_names == [ALLOCATE, RETAINED_MAXIMUM, ALLOCATE, INSERT]
    for index in range(3):
        proxy.reset()
        await proxied_storage.save(make_checkpoint(f"cp-steady-{index}"))
        assert proxy.trip_names == [ALLOCATE, INSERT]


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


async def test_clear_run_costs_three(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(proxied_storage, 3)
    proxy.reset()

    await proxied_storage.clear_run()

    assert proxy.round_trips == 3  # checkpoints, chunks, counter


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
