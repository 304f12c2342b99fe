"""Round trips: what each operation costs against the collection, counted by a proxy."""

from __future__ import annotations

from agent_framework_mongodb import MongoDBCheckpointStorage

from ._support import WORKFLOW, ProxyCollection, make_checkpoint, save_chain


async def test_first_save_of_a_run_costs_four(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    # A new counter is not yet known to be above retained checkpoints: allocation, the
    # retained-maximum read, marking the counter checked, then the insert.
    await proxied_storage.save(make_checkpoint("cp-first"))

    assert proxy.trip_names == ["find_one_and_update", "find_one", "find_one_and_update", "insert_one"]


async def test_steady_state_save_costs_two(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(proxied_storage, 2)
    for index in range(3):
        proxy.reset()
        await proxied_storage.save(make_checkpoint(f"cp-steady-{index}"))
        assert proxy.trip_names == ["find_one_and_update", "insert_one"]


async def test_idempotent_retry_costs_three(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    checkpoint = make_checkpoint("cp-retry")
    await proxied_storage.save(checkpoint)
    proxy.reset()

    await proxied_storage.save(checkpoint)

    assert proxy.trip_names == ["find_one_and_update", "insert_one", "find_one"]


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


async def test_clear_run_costs_two(proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage) -> None:
    await save_chain(proxied_storage, 3)
    proxy.reset()

    await proxied_storage.clear_run()

    assert proxy.round_trips == 2


async def test_index_operations_cost_one(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    await proxied_storage.ensure_indexes()
    assert proxy.round_trips == 1
    proxy.reset()
    await proxied_storage.validate_indexes()
    assert proxy.round_trips == 1
