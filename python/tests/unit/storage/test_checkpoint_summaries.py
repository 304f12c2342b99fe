"""Checkpoint summaries: a run's envelopes page by page, with no payload fetched or decoded."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBConfigurationError,
    MongoDBMappingError,
)
from agent_framework_mongodb.checkpoints.codec import CheckpointCodec
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

from ._support import (
    CHECKPOINT_KIND,
    WORKFLOW,
    ProxyCollection,
    make_checkpoint,
    make_storage,
    raw_checkpoints,
    save_chain,
)


async def all_summaries(storage: MongoDBCheckpointStorage, limit: int) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await storage.list_checkpoint_summaries(workflow_name=WORKFLOW, cursor=cursor, limit=limit)
        seen.extend(summary.checkpoint_id for summary in page.checkpoints)
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


async def test_a_summary_reports_the_envelope_of_each_stored_checkpoint(
    collection: InMemoryCollection,
) -> None:
    storage = make_storage(collection, ttl=timedelta(hours=2))
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    ids = await save_chain(storage, 3)

    page = await storage.list_checkpoint_summaries(workflow_name=WORKFLOW)

    stored = await raw_checkpoints(collection)
    assert [summary.checkpoint_id for summary in page.checkpoints] == ids
    assert page.next_cursor is None
    for summary, document, parent in zip(page.checkpoints, stored, [None, *ids[:-1]], strict=True):
        assert summary.sequence == document["sequence"]
        assert type(summary.sequence) is int, "a plain int, not bson's Int64"
        assert summary.parent_checkpoint_id == parent
        assert summary.payload_bytes == len(document["checkpoint"])
        assert summary.created_at.tzinfo is timezone.utc
        assert before <= summary.created_at <= datetime.now(timezone.utc)
        assert summary.expires_at == summary.created_at + timedelta(hours=2)
    assert [summary.sequence for summary in page.checkpoints] == sorted(s.sequence for s in page.checkpoints)


async def test_the_recorded_size_is_the_encoded_payload_length(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    checkpoint = make_checkpoint("cp-big", state={"text": "x" * 50_000})
    await storage.save(checkpoint)

    (summary,) = (await storage.list_checkpoint_summaries(workflow_name=WORKFLOW)).checkpoints

    assert summary.payload_bytes == len(CheckpointCodec().encode(checkpoint).payload)
    assert summary.payload_bytes is not None
    assert summary.payload_bytes > 50_000
    assert summary.expires_at is None


async def test_no_payload_is_fetched(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(proxied_storage, 2)
    proxy.reset()

    await proxied_storage.list_checkpoint_summaries(workflow_name=WORKFLOW)

    (call,) = proxy.named("find")
    projection = call.args[1]
    assert projection.get("checkpoint", 0) == 0
    assert all(
        value == 0 for field, value in projection.items() if field in {"checkpoint", "payload_signature"}
    )
    assert proxy.round_trips == 1


@pytest.mark.parametrize(("count", "limit"), [(7, 3), (6, 3), (1, 1), (0, 2)])
async def test_cursors_walk_every_checkpoint_once(
    collection: InMemoryCollection, count: int, limit: int
) -> None:
    storage = make_storage(collection)
    ids = await save_chain(storage, count)

    assert await all_summaries(storage, limit) == ids


async def test_cursors_are_shared_with_checkpoint_pages(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    ids = await save_chain(storage, 5)

    checkpoints = await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=2)
    summaries = await storage.list_checkpoint_summaries(
        workflow_name=WORKFLOW, cursor=checkpoints.next_cursor, limit=2
    )
    rest = await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=summaries.next_cursor)

    assert [summary.checkpoint_id for summary in summaries.checkpoints] == ids[2:4]
    assert [checkpoint.checkpoint_id for checkpoint in rest.checkpoints] == ids[4:]


async def test_another_runs_checkpoints_and_cursors_are_not_listed(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    other = storage.for_session("session-other")
    await save_chain(storage, 3)
    await save_chain(other, 2, prefix="other")

    mine = await storage.list_checkpoint_summaries(workflow_name=WORKFLOW, limit=1)

    assert [summary.checkpoint_id for summary in mine.checkpoints] == ["cp-000"]
    assert [
        s.checkpoint_id for s in (await other.list_checkpoint_summaries(workflow_name=WORKFLOW)).checkpoints
    ] == [
        "other-000",
        "other-001",
    ]
    with pytest.raises(MongoDBConfigurationError, match="another run"):
        await other.list_checkpoint_summaries(workflow_name=WORKFLOW, cursor=mine.next_cursor)


@pytest.mark.parametrize("limit", [0, -1, 1001, True, 2.0])
async def test_an_invalid_limit_or_workflow_is_refused_before_any_round_trip(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage, limit: object
) -> None:
    with pytest.raises(MongoDBConfigurationError, match="limit"):
        await proxied_storage.list_checkpoint_summaries(workflow_name=WORKFLOW, limit=limit)  # type: ignore[arg-type]
    with pytest.raises(MongoDBConfigurationError):
        await proxied_storage.list_checkpoint_summaries(workflow_name="another-workflow")
    assert proxy.round_trips == 0


async def test_a_checkpoint_stored_without_a_size_reports_none(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await save_chain(storage, 1)
    await collection.update_one({"_kind": CHECKPOINT_KIND}, {"$unset": {"payload_bytes": ""}})

    (summary,) = (await storage.list_checkpoint_summaries(workflow_name=WORKFLOW)).checkpoints

    assert summary.payload_bytes is None
    assert summary.checkpoint_id == "cp-000"


@pytest.mark.parametrize(
    "damage",
    [{"$unset": {"created_at": ""}}, {"$set": {"expires_at": "tomorrow"}}, {"$unset": {"sequence": ""}}],
)
async def test_a_damaged_envelope_is_a_mapping_error(
    collection: InMemoryCollection, damage: dict[str, object]
) -> None:
    storage = make_storage(collection)
    await save_chain(storage, 1)
    await collection.update_one({"_kind": CHECKPOINT_KIND}, damage)

    with pytest.raises(MongoDBMappingError):
        await storage.list_checkpoint_summaries(workflow_name=WORKFLOW)


async def test_times_are_utc_on_a_tz_aware_client() -> None:
    client = InMemoryMongoClient(tz_aware=True)
    storage = make_storage(client["db"]["checkpoints"], ttl=timedelta(minutes=5))
    await save_chain(storage, 1)

    (summary,) = (await storage.list_checkpoint_summaries(workflow_name=WORKFLOW)).checkpoints

    assert summary.created_at.utcoffset() == timedelta(0)
    assert summary.expires_at is not None
    assert summary.expires_at.utcoffset() == timedelta(0)
