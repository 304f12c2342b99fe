"""Chunked checkpoints against a real server (issue 20): racing writers, large runs, index builds.

Each test runs against the server ``MONGODB_URI`` names, or else the in-process engine. On a server,
concurrent upserts of one new chunk really race (E11000 inside a ``BulkWriteError``), a collection
over a large run really meets MongoDB's command limits, and an index build over a populated
collection really takes time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from bson.int64 import Int64

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.checkpoints import chunk_store
from agent_framework_mongodb.checkpoints.codec import canonical_hash
from agent_framework_mongodb.checkpoints.indexes import CHECKPOINT_INDEXES
from agent_framework_mongodb.checkpoints.scope import CHECKPOINT_KIND, CHUNK_KIND, RunScope

from ._support import MongoTarget, checkpoint

pytestmark = pytest.mark.integration_persistence


def _history(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"text": " ".join(rng.choices(["alpha", "beta", "gamma", "delta"], k=60)), "n": n}
        for n in range(count)
    ]


async def test_writers_racing_on_the_same_new_chunks_all_succeed(target: MongoTarget) -> None:
    """Eight storages (each with its own chunk memory) save checkpoints sharing every leaf at
    once: on a server their upserts of the same new chunk race, and each save still succeeds."""
    await target.storage().ensure_indexes()
    history = _history(600, seed=1)
    for round_number in range(3):
        writers = [target.storage() for _ in range(8)]
        items = [
            checkpoint(f"cp-{round_number}-{index}", state={"history": history[: 400 + 50 * round_number]})
            for index in range(8)
        ]
        results = await asyncio.gather(
            *(writer.save(item) for writer, item in zip(writers, items, strict=True)), return_exceptions=True
        )
        assert not [result for result in results if isinstance(result, BaseException)], results
        reader = target.storage()
        for item in items:
            assert canonical_hash((await reader.load(item.checkpoint_id)).to_dict()) == canonical_hash(
                item.to_dict()
            )
    chunks = await target.collection.find({"_kind": CHUNK_KIND}).to_list(None)
    assert len({bytes(chunk["_id"]) for chunk in chunks}) == len(chunks)


async def test_collection_over_a_large_run_completes_in_bounded_commands(
    target: MongoTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose retained checkpoints reference many chunks: collection reads the stale chunks and
    deletes in batches, loads fetch in batches, saves write in several bulks (small batch sizes here,
    so that the batching is what is exercised; the defaults keep each command far below 16 MiB)."""
    monkeypatch.setattr(chunk_store, "FETCH_ADDRESSES", 7)
    monkeypatch.setattr(chunk_store, "BULK_STATEMENTS", 5)
    storage = _storage(target, keep_last=2)
    await storage.ensure_indexes()
    for index in range(3):
        await storage.save(checkpoint(f"cp-{index}", state={"history": _history(2500, seed=index)}))
    referenced_before = await target.collection.count_documents({"_kind": CHUNK_KIND})
    assert referenced_before > 40
    # Age every chunk past the grace (a real server's clock cannot be moved): only references keep them.
    old = datetime.now(timezone.utc) - chunk_store.COLLECTION_GRACE - timedelta(hours=1)
    await target.collection.update_many({"_kind": CHUNK_KIND}, {"$set": {"touched_at": old}})
    await storage.save(checkpoint("cp-3", state={"history": _history(2500, seed=3)}))  # prunes and collects
    remaining = await target.collection.count_documents({"_kind": CHUNK_KIND})
    assert remaining < referenced_before
    for checkpoint_id in await storage.list_checkpoint_ids(workflow_name=storage.options.workflow_name):
        await storage.load(checkpoint_id)


async def test_ensure_indexes_on_a_populated_collection_completes(target: MongoTarget) -> None:
    """Adding the indexes to a collection holding many documents is not cut short by any save-sized
    deadline: ensure_indexes has none by default."""
    scope = RunScope.from_options(_storage(target).options)
    now = datetime.now(timezone.utc)
    for start in range(0, 20_000, 5_000):
        await target.collection.insert_many(
            [
                {
                    "_kind": CHECKPOINT_KIND,
                    **scope.fields(),
                    "session_id": f"run-{number}",
                    "checkpoint_id": f"cp-{number}",
                    "sequence": Int64(1),
                    "created_at": now,
                    "payload": b"x" * 256,
                }
                for number in range(start, start + 5_000)
            ]
        )
    storage = _storage(target, operation_timeout=0.5)
    names = await storage.ensure_indexes()
    assert set(names) == {spec.name for spec in CHECKPOINT_INDEXES}
    await storage.validate_indexes()


def _storage(target: MongoTarget, **options: Any) -> MongoDBCheckpointStorage:
    return MongoDBCheckpointStorage(
        target.collection, options=dataclasses.replace(target.storage().options, **options)
    )


async def test_a_writer_that_remembers_chunks_saves_loadably_after_a_clear_run_elsewhere(
    target: MongoTarget,
) -> None:
    """Within a touch window a save leaves out the touches of chunks it wrote (ADR 0029); a
    ``clear_run`` by another storage gives the counter a new lineage, and the writer's next save
    writes what it references again."""
    await target.storage().ensure_indexes()
    writer = target.storage()
    history = _history(400, seed=5)
    await writer.save(checkpoint("cp-0", state={"history": history[:300]}))
    await writer.save(checkpoint("cp-1", state={"history": history[:310]}))  # touches left out
    await target.storage().clear_run()
    assert await target.collection.count_documents({"_kind": CHUNK_KIND}) == 0

    await writer.save(checkpoint("cp-2", state={"history": history[:320]}))

    loaded = await target.storage().load("cp-2")
    assert loaded.state["history"] == history[:320]
