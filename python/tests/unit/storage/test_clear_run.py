"""clear_run: deletes the run's checkpoints, then its chunks, then its counter, scoped, retry-safe."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agent_framework_mongodb import MongoDBCheckpointClearResult
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    WORKFLOW,
    ProxyCollection,
    make_checkpoint,
    make_storage,
    raw_all,
    raw_checkpoints,
    raw_counter,
    save_chain,
    scope_of,
)

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)


async def test_clear_run_deletes_checkpoints_then_chunks_then_counter_and_reports_counts(
    collection: InMemoryCollection,
) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    await save_chain(storage, 4)
    proxy.reset()

    result = await storage.clear_run()

    assert result == MongoDBCheckpointClearResult(checkpoints_deleted=4, counter_deleted=1, acknowledged=True)
    # The checkpoints' delete goes beside the counter's new chunk generation, before any chunk goes.
    assert proxy.waves == [
        ["delete_many", "find_one_and_update"],
        ["delete_many"],
        ["delete_one", "find_one_and_update"],
    ]
    assert await raw_all(collection) == []


async def test_clear_run_leaves_other_runs_untouched(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    neighbours = [
        storage.for_session("session-other"),
        make_storage(collection, tenant_id="tenant-other"),
        make_storage(collection, application_id=None),
        make_storage(collection, workflow_name="other-flow"),
    ]
    for neighbour in neighbours:
        await neighbour.save(make_checkpoint("cp-000", workflow_name=neighbour.options.workflow_name))
    await save_chain(storage, 3)
    before = [
        d for d in await raw_all(collection) if d["scope_discriminator"] != scope_of(storage).discriminator
    ]

    await storage.clear_run()

    after = await raw_all(collection)
    assert sorted(after, key=lambda d: d["_id"]) == sorted(before, key=lambda d: d["_id"])
    assert len(after) == 8
    for neighbour in neighbours:
        assert (await neighbour.load("cp-000")).checkpoint_id == "cp-000"


async def test_clear_run_is_retry_safe(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await save_chain(storage, 2)

    await storage.clear_run()
    again = await storage.clear_run()

    assert again == MongoDBCheckpointClearResult(checkpoints_deleted=0, counter_deleted=0, acknowledged=True)


async def test_clear_of_a_never_used_run(collection: InMemoryCollection) -> None:
    result = await make_storage(collection).clear_run()
    assert result == MongoDBCheckpointClearResult(checkpoints_deleted=0, counter_deleted=0, acknowledged=True)


async def test_saving_after_clear_works_without_collision(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, ttl=timedelta(hours=1))
    await storage.ensure_indexes()
    await save_chain(storage, 3)
    await storage.clear_run()

    ids = await save_chain(storage, 3, prefix="again")

    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ids
    sequences = [d["sequence"] for d in await raw_checkpoints(collection)]
    assert len(set(sequences)) == 3
    assert min(sequences) >= 1
    counter = await raw_counter(collection, scope_of(storage))
    assert counter is not None
    assert counter["sequence"] == max(sequences)


async def test_clear_run_filters_are_never_empty_or_id_only(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    scope = scope_of(storage)
    await save_chain(storage, 2)
    proxy.reset()

    await storage.clear_run()

    deletes = proxy.named("delete_many") + proxy.named("delete_one")
    assert len(deletes) == 3
    for call in deletes:
        query = call.args[0]
        assert isinstance(query, dict)
        assert set(query) - {"_id"}, "an id-only or empty delete filter"
        assert query["scope_discriminator"] == scope.discriminator
        for field, value in scope.fields().items():
            assert query[field] == value
        assert "_kind" in query
    checkpoints, chunks = proxy.named("delete_many")
    assert checkpoints.args[0]["_kind"] == "workflow_checkpoint"
    assert chunks.args[0]["_kind"] == "workflow_checkpoint_chunk"
    (one,) = proxy.named("delete_one")
    assert one.args[0]["_id"] == scope.counter_document_id
    assert one.args[0]["_kind"] == "workflow_checkpoint_counter"


async def test_delete_filter_is_not_id_only(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    scope = scope_of(storage)
    await storage.save(make_checkpoint("cp-target"))
    proxy.reset()

    await storage.delete("cp-target")

    (call,) = proxy.named("delete_one")
    query = call.args[0]
    assert query["_id"] == scope.checkpoint_document_id("cp-target")
    for field, value in scope.fields().items():
        assert query[field] == value
