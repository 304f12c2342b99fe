"""The long-run benchmark's meters: bytes a storage sends, and bytes a run stores.

Nothing here is timed; these pin the counting the benchmark's figures rest on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import bson
from benchmarks._metered import MeteredCollection, sent_bytes
from benchmarks.checkpoints import build_checkpoint
from benchmarks.long_runs import _stored, _windows
from pymongo import InsertOne, UpdateOne

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.codec import CheckpointCodec
from agent_framework_mongodb.testing import InMemoryMongoClient


def _size(document: Mapping[str, Any]) -> int:
    return len(bson.encode(document))


def test_sent_bytes_counts_every_document_among_the_arguments() -> None:
    query = {"_id": "a", "tenant_id": "t"}
    pipeline: list[dict[str, Any]] = [{"$set": {"n": 1}}, {"$unset": "x"}]
    projection = {"_id": 0, "n": 1}
    expected = _size(query) + sum(_size(stage) for stage in pipeline) + _size(projection)

    assert sent_bytes((query, pipeline), {"projection": projection, "upsert": True}) == expected
    # A sort (pairs of name and direction), flags and numbers send no document of their own.
    assert sent_bytes((query,), {"sort": [("sequence", -1)], "limit": 5}) == _size(query)


def test_sent_bytes_counts_bulk_write_models() -> None:
    inserted = {"_id": "chunk", "data": b"x" * 100}
    filter_, update = {"_id": "counter"}, {"$max": {"n": 3}}
    expected = _size(inserted) + _size(filter_) + _size(update)

    assert sent_bytes(([InsertOne(inserted), UpdateOne(filter_, update)],), {}) == expected


async def test_a_metered_save_sends_its_payload_and_counts_round_trips(client: InMemoryMongoClient) -> None:
    metered = MeteredCollection(client["bench"]["checkpoints"])
    options = MongoDBCheckpointStorageOptions(tenant_id="t", workflow_name="support-workflow", session_id="s")
    storage = MongoDBCheckpointStorage(metered, options=options)
    checkpoint = build_checkpoint(10)
    payload = len(CheckpointCodec().encode(checkpoint).payload)

    metered.reset()
    await storage.save(checkpoint)

    assert payload < metered.sent_bytes < payload + 8 * 1024  # the payload plus envelopes and filters
    assert metered.take()[-1] == "find_one_and_update"  # the insert
    metered.reset()
    await storage.list_checkpoint_ids(workflow_name="support-workflow")
    assert metered.sent_bytes > 0  # a find's filter is metered too
    assert metered.take() == ["find"]


async def test_stored_counts_the_runs_documents_in_every_collection(client: InMemoryMongoClient) -> None:
    scope = {"tenant_id": "t", "workflow_name": "w", "session_id": "s"}
    mine = {"_id": 1, **scope, "data": b"x" * 50}
    chunk = {"_id": 2, **scope, "data": b"y" * 70}
    foreign = {"_id": 3, "tenant_id": "t", "workflow_name": "w", "session_id": "other"}
    await client["bench"]["checkpoints"].insert_one(dict(mine))
    await client["bench"]["checkpoints"].insert_one(dict(foreign))
    await client["bench"]["chunks"].insert_one(dict(chunk))

    assert await _stored(client, scope) == (_size(mine) + _size(chunk), 2, _size(foreign))


def test_windows_centre_the_early_superstep_and_end_at_the_last() -> None:
    assert _windows(300, 30, 7) == ([27, 28, 29, 30, 31, 32, 33], [294, 295, 296, 297, 298, 299, 300])
    assert _windows(5, 2, 5) == ([1, 2, 3, 4], [1, 2, 3, 4, 5])
