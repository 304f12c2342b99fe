"""Retention: checkpoint and counter expiry, permanent dominance, parents, the TTL monitor."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from agent_framework_mongodb import MongoDBCheckpointNotFoundError, MongoDBCheckpointStorage
from agent_framework_mongodb.testing import InMemoryCollection, expire_documents

from ._support import (
    COUNTER_KIND,
    WORKFLOW,
    make_checkpoint,
    make_storage,
    raw_all,
    raw_checkpoints,
    raw_counter,
    save_chain,
    scope_of,
)

FAR_FUTURE = datetime(2200, 1, 1, tzinfo=timezone.utc)


async def test_counter_expiry_only_moves_forward(collection: InMemoryCollection) -> None:
    long_lived = make_storage(collection, ttl=timedelta(days=30))
    short_lived = make_storage(collection, ttl=timedelta(minutes=1))
    scope = scope_of(long_lived)

    await long_lived.save(make_checkpoint("cp-long"))
    after_long = await raw_counter(collection, scope)
    await short_lived.save(make_checkpoint("cp-short"))
    after_short = await raw_counter(collection, scope)

    assert after_long is not None
    assert after_short is not None
    long_doc, short_doc = await raw_checkpoints(collection)
    assert after_long["expires_at"] == long_doc["expires_at"]
    assert after_short["expires_at"] == long_doc["expires_at"]
    assert short_doc["expires_at"] < long_doc["expires_at"]
    assert after_short["retention_mode"] == "expiring"


async def test_counter_expiry_extends_with_a_later_save(collection: InMemoryCollection) -> None:
    short_lived = make_storage(collection, ttl=timedelta(minutes=1))
    long_lived = make_storage(collection, ttl=timedelta(days=30))

    await short_lived.save(make_checkpoint("cp-short"))
    await long_lived.save(make_checkpoint("cp-long"))

    counter = await raw_counter(collection, scope_of(short_lived))
    long_doc = (await raw_checkpoints(collection))[-1]
    assert counter is not None
    assert counter["expires_at"] == long_doc["expires_at"]


async def test_non_expiring_save_makes_the_counter_permanent_and_it_stays_so(
    collection: InMemoryCollection,
) -> None:
    expiring = make_storage(collection, ttl=timedelta(hours=1))
    permanent = make_storage(collection, ttl=None)
    scope = scope_of(expiring)

    await expiring.save(make_checkpoint("cp-1"))
    await permanent.save(make_checkpoint("cp-2"))
    after_permanent = await raw_counter(collection, scope)
    await expiring.save(make_checkpoint("cp-3"))
    after_later_ttl = await raw_counter(collection, scope)

    for counter in (after_permanent, after_later_ttl):
        assert counter is not None
        assert counter["retention_mode"] == "permanent"
        assert "expires_at" not in counter
    assert after_later_ttl is not None
    assert after_later_ttl["sequence"] == 3


async def test_legacy_counter_without_retention_mode_stays_permanent(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, ttl=timedelta(hours=1))
    scope = scope_of(storage)
    await collection.insert_one(
        {"_id": scope.counter_document_id, "_kind": COUNTER_KIND, **scope.fields(), "sequence": 4}
    )

    await storage.save(make_checkpoint("cp-over-legacy"))

    counter = await raw_counter(collection, scope)
    assert counter is not None
    assert counter["retention_mode"] == "permanent"
    assert "expires_at" not in counter
    assert counter["sequence"] == 5
    (document,) = await raw_checkpoints(collection)
    assert document["sequence"] == 5
    assert "expires_at" in document


async def test_parents_need_not_exist(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.save(make_checkpoint("cp-parent"))
    await storage.save(make_checkpoint("cp-child", previous="cp-parent"))
    await collection.delete_one({"checkpoint_id": "cp-parent"})

    child = await storage.load("cp-child")

    assert child.previous_checkpoint_id == "cp-parent"
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-child"]
    listed = await storage.list_checkpoints(workflow_name=WORKFLOW)
    assert [c.previous_checkpoint_id for c in listed] == ["cp-parent"]
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("cp-parent")


async def test_child_of_a_never_saved_parent_saves_and_loads(storage: MongoDBCheckpointStorage) -> None:
    await storage.save(make_checkpoint("cp-orphan", previous="cp-elsewhere"))

    assert (await storage.load("cp-orphan")).previous_checkpoint_id == "cp-elsewhere"


async def test_ttl_monitor_removes_checkpoints_and_counter_and_saving_recovers(
    collection: InMemoryCollection,
) -> None:
    storage = make_storage(collection, ttl=timedelta(hours=1))
    await storage.ensure_indexes()
    await save_chain(storage, 4)

    removed = expire_documents(collection, now=FAR_FUTURE)

    assert removed == 5
    assert await raw_all(collection) == []
    assert await storage.list_checkpoints(workflow_name=WORKFLOW) == []
    await storage.save(make_checkpoint("cp-reborn"))
    await storage.save(make_checkpoint("cp-reborn-2"))
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-reborn", "cp-reborn-2"]


async def test_ttl_monitor_never_removes_permanent_documents(collection: InMemoryCollection) -> None:
    expiring = make_storage(collection, ttl=timedelta(hours=1))
    permanent = make_storage(collection)
    await expiring.ensure_indexes()
    await expiring.save(make_checkpoint("cp-expiring"))
    await permanent.save(make_checkpoint("cp-permanent"))

    expire_documents(collection, now=FAR_FUTURE)

    assert await permanent.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-permanent"]
    counter = await raw_counter(collection, scope_of(permanent))
    assert counter is not None
    await permanent.save(make_checkpoint("cp-next"))
    sequences = [d["sequence"] for d in await raw_checkpoints(collection)]
    assert sequences == sorted(set(sequences))
    assert sequences[-1] == 3


async def test_ttl_gap_counter_expired_before_checkpoints_recovers(collection: InMemoryCollection) -> None:
    # TTL may remove the counter while later-expiring checkpoints remain.
    storage = make_storage(collection, ttl=timedelta(hours=1))
    await storage.ensure_indexes()
    await save_chain(storage, 3)
    await collection.update_one(
        {"_kind": "workflow_checkpoint"}, {"$set": {"expires_at": FAR_FUTURE + timedelta(days=1)}}
    )
    for document in await raw_checkpoints(collection):
        await collection.update_one(
            {"_id": document["_id"]}, {"$set": {"expires_at": FAR_FUTURE + timedelta(days=1)}}
        )

    expire_documents(collection, now=FAR_FUTURE)
    assert await raw_counter(collection, scope_of(storage)) is None

    await storage.save(make_checkpoint("cp-after-gap"))
    sequences = {d["checkpoint_id"]: d["sequence"] for d in await raw_checkpoints(collection)}
    assert len(set(sequences.values())) == 4
    assert sequences["cp-after-gap"] == max(sequences.values())
