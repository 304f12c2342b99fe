"""Listing: the whole run in sequence order, ids without payloads, latest by sequence."""

from __future__ import annotations

import pytest

from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    WORKFLOW,
    ProxyCollection,
    excludes_field,
    make_checkpoint,
    make_storage,
    projection_of,
    save_chain,
)


@pytest.mark.parametrize(("count", "page_size"), [(10, 3), (9, 3), (3, 3), (1, 1), (7, 1), (0, 3)])
async def test_list_methods_return_the_whole_run_in_order_across_pages(
    collection: InMemoryCollection, count: int, page_size: int
) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy, page_size=page_size, max_page_size=page_size)
    ids = await save_chain(storage, count)
    proxy.reset()

    listed = await storage.list_checkpoints(workflow_name=WORKFLOW)
    listed_ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW)

    assert [c.checkpoint_id for c in listed] == ids
    assert [c.state for c in listed] == [{"i": i} for i in range(count)]
    assert listed_ids == ids
    fetches = proxy.trip_names.count("find_fetch")
    pages_each = count // page_size + 1  # a full last page needs one more (empty) page to end
    assert fetches == 2 * pages_each
    for call in proxy.named("find"):
        assert call.kwargs.get("limit") == page_size


async def test_list_uses_the_configured_page_size(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy, page_size=4, max_page_size=50)
    ids = await save_chain(storage, 10)
    proxy.reset()

    assert [c.checkpoint_id for c in await storage.list_checkpoints(workflow_name=WORKFLOW)] == ids
    assert all(call.kwargs.get("limit") == 4 for call in proxy.named("find"))
    assert len(proxy.named("find")) == 3


async def test_list_ids_never_fetches_payloads(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy, page_size=2, max_page_size=2)
    ids = await save_chain(storage, 5)
    proxy.reset()

    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ids

    finds = proxy.named("find") + proxy.named("find_one")
    assert len(finds) >= 3
    for call in finds:
        assert excludes_field(projection_of(call), "checkpoint"), projection_of(call)


async def test_get_latest_is_the_highest_sequence_not_the_newest_timestamp(
    collection: InMemoryCollection,
) -> None:
    storage = make_storage(collection)
    await storage.save(make_checkpoint("cp-newest-stamp", timestamp="2030-12-31T23:59:59+00:00"))
    await storage.save(make_checkpoint("cp-middle", timestamp="2020-06-01T00:00:00+00:00"))
    await storage.save(make_checkpoint("cp-last-saved", timestamp="2001-01-01T00:00:00+00:00"))

    latest = await storage.get_latest(workflow_name=WORKFLOW)

    assert latest is not None
    assert latest.checkpoint_id == "cp-last-saved"
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == [
        "cp-newest-stamp",
        "cp-middle",
        "cp-last-saved",
    ]


async def test_order_is_by_sequence_not_by_id_or_iteration(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    for checkpoint_id, iteration in (("zz", 1), ("aa", 9), ("mm", 0)):
        checkpoint = make_checkpoint(checkpoint_id)
        checkpoint.iteration_count = iteration
        await storage.save(checkpoint)

    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["zz", "aa", "mm"]
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == "mm"


async def test_get_latest_of_an_empty_run_is_none(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    assert await storage.get_latest(workflow_name=WORKFLOW) is None
    await storage.save(make_checkpoint("cp-only"))
    await storage.delete("cp-only")
    assert await storage.get_latest(workflow_name=WORKFLOW) is None


async def test_list_of_an_empty_run_is_empty(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    assert await storage.list_checkpoints(workflow_name=WORKFLOW) == []
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == []
