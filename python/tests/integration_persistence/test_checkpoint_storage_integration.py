"""MongoDBCheckpointStorage against a real MongoDB server (``MONGODB_URI``); see conftest.py.

Without ``MONGODB_URI`` (or with ``AFM_INTEGRATION_ENGINE=1``) the same tests run on the in-process
engine, except the ``explain`` tests, which need a server's planner and skip.

Sequences are checked as ADR 0006 promises them (unique, positive, increasing in the order saves
returned), never as contiguous numbers: retries and collisions spend numbers, and a server
interleaves concurrent saves differently from the engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from agent_framework import WorkflowRunState
from pymongo import ASCENDING, IndexModel

from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorage,
    MongoDBConcurrencyError,
    MongoDBConfigurationError,
    MongoDBIndexMismatchError,
    MongoDBIndexMissingError,
)
from agent_framework_mongodb.checkpoints.indexes import (
    CHECKPOINT_INDEXES,
    IDENTITY_INDEX,
    LINEAGE_INDEX,
    RUN_ACTIVITY_INDEX,
    SEQUENCE_INDEX,
    SIMPLE_COLLATION,
)
from agent_framework_mongodb.checkpoints.paging import decode_run_cursor
from agent_framework_mongodb.checkpoints.queries import (
    ASCENDING_SEQUENCE,
    DESCENDING_SEQUENCE,
    ID_PROJECTION,
    IDEMPOTENCY_PROJECTION,
    PAYLOAD_PROJECTION,
    RUN_ACTIVITY_SORT,
    RUN_SUMMARY_PROJECTION,
    SEQUENCE_PROJECTION,
    checkpoint_filter,
    counter_filter,
    page_filter,
    run_filter,
    run_listing_filter,
    run_page_pipeline,
)
from agent_framework_mongodb.checkpoints.results import RUN_COUNT_LIMIT
from agent_framework_mongodb.checkpoints.scope import RunListing, RunScope

from ._support import (
    WORKFLOW,
    MongoTarget,
    assert_in_save_order,
    assert_valid_sequences,
    checkpoint,
    counter_allocation_command,
    delete_command,
    find_command,
    index_scans,
    insert_if_absent_command,
    save_chain,
    stage_names,
    uses_id_index,
    winning_plan_stages,
)
from ._workflow import APPROVAL_REQUEST_TYPE, APPROVAL_WORKFLOW, ApprovalRequest, approval_workflow

pytestmark = pytest.mark.integration_persistence

INDEX_NAMES = {spec.name for spec in CHECKPOINT_INDEXES}
SCOPED_INDEX_NAMES = {IDENTITY_INDEX.name, SEQUENCE_INDEX.name, LINEAGE_INDEX.name}
RECOVERY_RETAINED = 50


def scope_of(storage: MongoDBCheckpointStorage) -> RunScope:
    return RunScope.from_options(storage.options)


async def stored_sequences(target: MongoTarget, storage: MongoDBCheckpointStorage) -> dict[str, int]:
    """checkpoint_id → sequence of every stored checkpoint of the storage's run."""
    cursor = target.collection.find(run_filter(scope_of(storage)), ID_PROJECTION, collation=SIMPLE_COLLATION)
    documents = await cursor.to_list(None)
    sequences_by_id = {str(doc["checkpoint_id"]): int(doc["sequence"]) for doc in documents}
    assert len(sequences_by_id) == len(documents), "one checkpoint id is stored twice"
    return sequences_by_id


async def raw_checkpoint(
    target: MongoTarget, storage: MongoDBCheckpointStorage, checkpoint_id: str
) -> dict[str, Any]:
    document = await target.collection.find_one(checkpoint_filter(scope_of(storage), checkpoint_id))
    assert document is not None, f"checkpoint {checkpoint_id} is not stored"
    return document


async def raw_counter(target: MongoTarget, storage: MongoDBCheckpointStorage) -> dict[str, Any]:
    document = await target.collection.find_one(counter_filter(scope_of(storage)))
    assert document is not None, "the run has no counter"
    return document


# -- indexes ------------------------------------------------------------------------------


async def test_ensure_indexes_creates_every_index_and_validate_accepts_them(target: MongoTarget) -> None:
    storage = target.storage()

    names = await storage.ensure_indexes()
    again = await storage.ensure_indexes()

    assert set(names) == INDEX_NAMES
    assert set(again) == INDEX_NAMES
    await storage.validate_indexes()
    cursor = await target.collection.list_indexes()
    listed = {str(index["name"]): index for index in await cursor.to_list(None)}
    for spec in CHECKPOINT_INDEXES:
        assert list(listed[spec.name]["key"].items()) == [(key, ASCENDING) for key in spec.keys]
        assert bool(listed[spec.name].get("unique", False)) == spec.unique
        assert dict(listed[spec.name]["partialFilterExpression"]) == dict(spec.partial_filter)
        assert listed[spec.name].get("expireAfterSeconds") == spec.expire_after_seconds


async def test_validate_indexes_names_a_dropped_index_until_ensure_restores_it(target: MongoTarget) -> None:
    storage = target.storage()
    await storage.ensure_indexes()

    await target.collection.drop_index(SEQUENCE_INDEX.name)

    with pytest.raises(MongoDBIndexMissingError, match=SEQUENCE_INDEX.name):
        await storage.validate_indexes()
    await storage.ensure_indexes()
    await storage.validate_indexes()


async def test_a_differing_index_fails_validation_and_provisioning(target: MongoTarget) -> None:
    storage = target.storage()
    await storage.ensure_indexes()
    await target.collection.drop_index(LINEAGE_INDEX.name)
    lookalike = IndexModel(
        [(key, ASCENDING) for key in LINEAGE_INDEX.keys],
        name=LINEAGE_INDEX.name,
        unique=True,
        partialFilterExpression=dict(LINEAGE_INDEX.partial_filter),
        collation=dict(SIMPLE_COLLATION),
    )
    await target.collection.create_indexes([lookalike])

    with pytest.raises(MongoDBIndexMismatchError, match="unique"):
        await storage.validate_indexes()
    with pytest.raises(MongoDBIndexMismatchError):
        await storage.ensure_indexes()


async def test_validate_indexes_on_an_empty_collection_reports_missing(target: MongoTarget) -> None:
    with pytest.raises(MongoDBIndexMissingError):
        await target.storage().validate_indexes()


# -- a real workflow ----------------------------------------------------------------------


async def test_workflow_pauses_for_a_request_and_resumes_in_a_new_process(target: MongoTarget) -> None:
    await target.storage().ensure_indexes()
    allowed = (APPROVAL_REQUEST_TYPE,)
    first_storage = target.storage(workflow_name=APPROVAL_WORKFLOW, allowed_checkpoint_types=allowed)

    paused = await approval_workflow(first_storage).run(42)

    assert paused.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    (request,) = paused.get_request_info_events()
    assert request.data == ApprovalRequest(expense_id="expense-42", amount=42)
    paused_checkpoint = await first_storage.get_latest(workflow_name=APPROVAL_WORKFLOW)
    assert paused_checkpoint is not None
    assert request.request_id in paused_checkpoint.pending_request_info_events, (
        "the checkpoint holding the pending request was not stored"
    )

    # A new storage and a new workflow instance, as after a process restart.
    second_storage = target.storage(workflow_name=APPROVAL_WORKFLOW, allowed_checkpoint_types=allowed)
    restored = await second_storage.load(paused_checkpoint.checkpoint_id)
    assert restored.to_dict().keys() == paused_checkpoint.to_dict().keys()
    resumed = await approval_workflow(second_storage).run(
        checkpoint_id=paused_checkpoint.checkpoint_id, responses={request.request_id: "approved"}
    )

    assert resumed.get_outputs() == ["expense-42 42 approved"]
    latest = await second_storage.get_latest(workflow_name=APPROVAL_WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id != paused_checkpoint.checkpoint_id
    assert latest.pending_request_info_events == {}
    ids = await second_storage.list_checkpoint_ids(workflow_name=APPROVAL_WORKFLOW)
    assert ids.index(paused_checkpoint.checkpoint_id) < ids.index(latest.checkpoint_id)


# -- scope ----------------------------------------------------------------------------------


async def test_tenants_and_runs_never_see_each_other(target: MongoTarget) -> None:
    await target.storage().ensure_indexes()
    mine = target.storage(tenant_id="tenant-a")
    theirs = target.storage(tenant_id="tenant-b")
    other_run = target.storage(tenant_id="tenant-a", session_id="run-2")
    with_application = target.storage(tenant_id="tenant-a", application_id="app-1")
    for storage in (mine, theirs, other_run, with_application):
        await storage.save(checkpoint("shared-id", state={"owner": storage.options.tenant_id}))
    await mine.save(checkpoint("only-mine"))

    assert await mine.list_checkpoint_ids(workflow_name=WORKFLOW) == ["shared-id", "only-mine"]
    for storage in (theirs, other_run, with_application):
        assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["shared-id"]
        with pytest.raises(MongoDBCheckpointNotFoundError):
            await storage.load("only-mine")
        assert await storage.delete("only-mine") is False
    assert (await theirs.load("shared-id")).state == {"owner": "tenant-b"}
    assert (await mine.load("shared-id")).state == {"owner": "tenant-a"}

    result = await theirs.clear_run()

    assert (result.checkpoints_deleted, result.counter_deleted) == (1, 1)
    assert await mine.list_checkpoint_ids(workflow_name=WORKFLOW) == ["shared-id", "only-mine"]
    assert await other_run.list_checkpoint_ids(workflow_name=WORKFLOW) == ["shared-id"]


# -- order and pages ------------------------------------------------------------------------


async def test_order_is_save_order_whatever_the_timestamps(target: MongoTarget) -> None:
    await target.storage().ensure_indexes()
    storage = target.storage()
    saved = ["c", "a", "d", "b"]
    timestamps = ["2025-03-01T00:00:00+00:00", "2025-01-01T00:00:00+00:00", "2024-01-01T00:00:00+00:00"]
    for checkpoint_id, timestamp in zip(saved, [*timestamps, "2026-01-01T00:00:00+00:00"], strict=True):
        await storage.save(checkpoint(checkpoint_id, timestamp=timestamp))

    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == saved
    assert [c.checkpoint_id for c in await storage.list_checkpoints(workflow_name=WORKFLOW)] == saved
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == "b"
    sequences_by_id = await stored_sequences(target, storage)
    assert_valid_sequences(sequences_by_id, count=4)
    assert_in_save_order(sequences_by_id, saved)


async def test_pages_follow_cursors_to_the_last_page(target: MongoTarget) -> None:
    await target.storage().ensure_indexes()
    storage = target.storage(page_size=3, max_page_size=5)
    ids = await save_chain(storage, 7)

    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=cursor)
        pages.append([c.checkpoint_id for c in page.checkpoints])
        cursor = page.next_cursor
        if cursor is None:
            break

    assert pages == [ids[0:3], ids[3:6], ids[6:7]]
    wide = await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=5)
    assert [c.checkpoint_id for c in wide.checkpoints] == ids[:5]
    assert wide.next_cursor is not None
    rest = await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=wide.next_cursor, limit=5)
    assert [c.checkpoint_id for c in rest.checkpoints] == ids[5:]
    assert rest.next_cursor is None
    # The inherited listings walk every page.
    assert [c.checkpoint_id for c in await storage.list_checkpoints(workflow_name=WORKFLOW)] == ids
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ids


async def test_a_full_last_page_has_a_cursor_to_an_empty_page(target: MongoTarget) -> None:
    storage = target.storage(page_size=3)
    ids = await save_chain(storage, 6)

    first = await storage.list_checkpoint_page(workflow_name=WORKFLOW)
    second = await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=first.next_cursor)
    assert [c.checkpoint_id for c in second.checkpoints] == ids[3:]
    assert second.next_cursor is not None
    third = await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=second.next_cursor)

    assert third.checkpoints == ()
    assert third.next_cursor is None


async def test_page_limits_and_foreign_cursors_are_refused(target: MongoTarget) -> None:
    storage = target.storage(page_size=2, max_page_size=4)
    other_run = target.storage(session_id="run-2", page_size=2, max_page_size=4)
    await save_chain(storage, 3)
    await save_chain(other_run, 3)
    foreign = (await other_run.list_checkpoint_page(workflow_name=WORKFLOW)).next_cursor
    assert foreign is not None

    for limit in (0, -1, 5):
        with pytest.raises(MongoDBConfigurationError):
            await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=limit)
    with pytest.raises(MongoDBConfigurationError):
        await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=foreign)
    with pytest.raises(MongoDBConfigurationError):
        await storage.list_checkpoint_page(workflow_name="another-workflow")


# -- retention ------------------------------------------------------------------------------


async def test_checkpoint_expiry_is_created_at_plus_ttl_as_dates(target: MongoTarget) -> None:
    ttl = timedelta(hours=1)
    storage = target.storage(ttl=ttl)
    await storage.save(checkpoint("expiring"))
    await target.storage().save(checkpoint("permanent"))

    expiring = await raw_checkpoint(target, storage, "expiring")
    permanent = await raw_checkpoint(target, storage, "permanent")

    assert isinstance(expiring["created_at"], datetime)
    assert isinstance(expiring["expires_at"], datetime)
    assert expiring["expires_at"] - expiring["created_at"] == ttl
    assert expiring["created_at"].microsecond % 1000 == 0
    assert isinstance(permanent["created_at"], datetime)
    assert "expires_at" not in permanent


async def test_counter_expiry_moves_only_forward_and_permanent_dominates(target: MongoTarget) -> None:
    def run(ttl: timedelta | None) -> MongoDBCheckpointStorage:
        return target.storage(ttl=ttl)

    await run(timedelta(hours=1)).save(checkpoint("one-hour"))
    first = await raw_checkpoint(target, run(None), "one-hour")
    counter = await raw_counter(target, run(None))
    assert counter["retention_mode"] == "expiring"
    assert counter["expires_at"] == first["expires_at"]

    await run(timedelta(minutes=10)).save(checkpoint("ten-minutes"))
    shorter = await raw_checkpoint(target, run(None), "ten-minutes")
    assert shorter["expires_at"] - shorter["created_at"] == timedelta(minutes=10)
    counter = await raw_counter(target, run(None))
    assert counter["expires_at"] == first["expires_at"], "a shorter ttl moved the counter's expiry back"

    await run(timedelta(hours=2)).save(checkpoint("two-hours"))
    longer = await raw_checkpoint(target, run(None), "two-hours")
    counter = await raw_counter(target, run(None))
    assert counter["expires_at"] == longer["expires_at"]
    assert counter["retention_mode"] == "expiring"

    await run(None).save(checkpoint("forever"))
    counter = await raw_counter(target, run(None))
    assert counter["retention_mode"] == "permanent"
    assert "expires_at" not in counter

    await run(timedelta(hours=3)).save(checkpoint("three-hours"))
    counter = await raw_counter(target, run(None))
    assert counter["retention_mode"] == "permanent"
    assert "expires_at" not in counter
    assert "expires_at" in await raw_checkpoint(target, run(None), "three-hours")
    assert await run(None).list_checkpoint_ids(workflow_name=WORKFLOW) == [
        "one-hour",
        "ten-minutes",
        "two-hours",
        "forever",
        "three-hours",
    ]


# -- concurrency ----------------------------------------------------------------------------


async def test_concurrent_first_saves_receive_unique_sequences(target: MongoTarget) -> None:
    await target.storage().ensure_indexes()
    storages = [target.storage() for _ in range(20)]

    saved = await asyncio.gather(
        *(storage.save(checkpoint(f"parallel-{index:02d}")) for index, storage in enumerate(storages))
    )

    assert sorted(saved) == [f"parallel-{index:02d}" for index in range(20)]
    sequences_by_id = await stored_sequences(target, storages[0])
    assert_valid_sequences(sequences_by_id, count=20)
    listed = await storages[0].list_checkpoint_ids(workflow_name=WORKFLOW)
    assert listed == sorted(sequences_by_id, key=sequences_by_id.__getitem__)
    counter = await raw_counter(target, storages[0])
    assert counter["sequence"] >= max(sequences_by_id.values()), "the counter is behind a stored sequence"
    # A save that starts after the gathered ones returned comes after all of them.
    await storages[0].save(checkpoint("afterwards"))
    assert await storages[0].list_checkpoint_ids(workflow_name=WORKFLOW) == [*listed, "afterwards"]


async def test_concurrent_saves_recover_after_the_counter_is_deleted(target: MongoTarget) -> None:
    await target.storage().ensure_indexes()
    storage = target.storage()
    # More retained checkpoints than the savers below could step past by retrying collisions
    # alone (10 savers x 4 attempts): only reading the retained maximum gets them above it.
    before_ids = await save_chain(storage, RECOVERY_RETAINED, prefix="before")
    # As TTL or an operator may remove it while the run's checkpoints remain.
    deleted = await target.collection.delete_one(counter_filter(scope_of(storage)))
    assert deleted.deleted_count == 1

    await asyncio.gather(*(target.storage().save(checkpoint(f"after-{index:02d}")) for index in range(10)))

    sequences_by_id = await stored_sequences(target, storage)
    assert_valid_sequences(sequences_by_id, count=RECOVERY_RETAINED + 10)
    assert_in_save_order(sequences_by_id, before_ids)
    before = [sequences_by_id[checkpoint_id] for checkpoint_id in before_ids]
    after = [value for key, value in sequences_by_id.items() if key.startswith("after")]
    assert len(after) == 10
    assert min(after) > max(before), "a recovered counter restarted below retained sequences"
    counter = await raw_counter(target, storage)
    assert counter["sequence"] >= max(sequences_by_id.values()), "the counter is behind a stored sequence"
    listed = await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
    assert listed[:RECOVERY_RETAINED] == before_ids
    # The recovered counter keeps serving: the next save comes after every checkpoint.
    await storage.save(checkpoint("final"))
    assert (await storage.list_checkpoint_ids(workflow_name=WORKFLOW)) == [*listed, "final"]


# -- lifecycle and idempotency --------------------------------------------------------------


async def test_clear_run_deletes_the_run_and_its_counter_only(target: MongoTarget) -> None:
    await target.storage().ensure_indexes()
    storage = target.storage()
    neighbour = target.storage(session_id="run-2")
    await save_chain(storage, 5)
    await save_chain(neighbour, 2)

    result = await storage.clear_run()

    assert (result.checkpoints_deleted, result.counter_deleted, result.acknowledged) == (5, 1, True)
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == []
    assert await storage.get_latest(workflow_name=WORKFLOW) is None
    assert await target.collection.find_one(counter_filter(scope_of(storage))) is None
    assert await neighbour.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-000", "cp-001"]
    again = await storage.clear_run()
    assert (again.checkpoints_deleted, again.counter_deleted) == (0, 0)
    await storage.save(checkpoint("fresh"))
    await storage.save(checkpoint("fresher", previous="fresh"))
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["fresh", "fresher"]
    sequences_by_id = await stored_sequences(target, storage)
    assert_valid_sequences(sequences_by_id, count=2)
    assert_in_save_order(sequences_by_id, ["fresh", "fresher"])


async def test_identical_retries_are_idempotent_and_different_content_conflicts(target: MongoTarget) -> None:
    await target.storage().ensure_indexes()
    storage = target.storage()
    original = checkpoint("retry-me", state={"answer": 42})

    first = await storage.save(original)
    first_sequences = await stored_sequences(target, storage)
    retries = await asyncio.gather(*(target.storage().save(original) for _ in range(5)))

    assert first == "retry-me"
    assert retries == ["retry-me"] * 5
    assert_valid_sequences(first_sequences, count=1)
    # Retries may spend sequence numbers (ADR 0006) but never store or move the checkpoint.
    assert await stored_sequences(target, storage) == first_sequences
    await storage.save(checkpoint("next", previous="retry-me"))
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["retry-me", "next"]
    stored = await raw_checkpoint(target, storage, "retry-me")
    with pytest.raises(MongoDBConcurrencyError):
        await storage.save(checkpoint("retry-me", state={"answer": 43}))
    assert (await raw_checkpoint(target, storage, "retry-me"))["payload_hash"] == stored["payload_hash"]
    assert (await storage.load("retry-me")).state == {"answer": 42}
    assert await storage.delete("retry-me") is True
    assert await storage.delete("retry-me") is False


# -- query plans ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Seeded:
    target: MongoTarget
    storage: MongoDBCheckpointStorage
    scope: RunScope
    ids: list[str]


@pytest.fixture
async def seeded(server: MongoTarget) -> Seeded:
    """A run of 40 checkpoints among neighbours (another run, another tenant), indexes built."""
    storage = server.storage()
    await storage.ensure_indexes()
    ids = await save_chain(storage, 40)
    await save_chain(server.storage(session_id="run-2"), 40)
    await save_chain(server.storage(tenant_id="tenant-other"), 10)
    return Seeded(server, storage, scope_of(storage), ids)


def assert_no_sort_or_scan(stages: list[Mapping[str, Any]]) -> None:
    names = stage_names(stages)
    assert "SORT" not in names, f"in-memory SORT in {names}"
    assert "COLLSCAN" not in names, f"collection scan in {names}"


def assert_sequence_index(explain: Mapping[str, Any]) -> None:
    stages = winning_plan_stages(explain)
    assert_no_sort_or_scan(stages)
    scans = index_scans(stages)
    assert [scan.get("indexName") for scan in scans] == [SEQUENCE_INDEX.name], stage_names(stages)


def assert_id_index(explain: Mapping[str, Any]) -> None:
    # Intended: the deterministic _id (scope + checkpoint id, or the run's counter id) is a point
    # lookup. The identity index cannot serve it: the filter states _id, not checkpoint_id.
    stages = winning_plan_stages(explain)
    assert_no_sort_or_scan(stages)
    assert uses_id_index(stages), f"not an _id lookup: {stage_names(stages)}"


def docs_examined(explain: Mapping[str, Any]) -> int:
    return int(explain["executionStats"]["totalDocsExamined"])


async def test_plan_load_is_an_id_lookup(seeded: Seeded) -> None:
    query = checkpoint_filter(seeded.scope, seeded.ids[17])
    for projection in (PAYLOAD_PROJECTION, IDEMPOTENCY_PROJECTION):
        explain = await seeded.target.explain(
            find_command(seeded.target.collection_name, query, projection, limit=1, single=True)
        )
        assert_id_index(explain)
        assert docs_examined(explain) == 1


async def test_plan_latest_and_retained_maximum_walk_the_sequence_index_backwards(seeded: Seeded) -> None:
    for projection in (PAYLOAD_PROJECTION, SEQUENCE_PROJECTION):
        command = find_command(
            seeded.target.collection_name,
            run_filter(seeded.scope),
            projection,
            sort=DESCENDING_SEQUENCE,
            limit=1,
            single=True,
        )
        explain = await seeded.target.explain(command)
        assert_sequence_index(explain)
        (scan,) = index_scans(winning_plan_stages(explain))
        assert scan.get("direction") == "backward"
        assert docs_examined(explain) == 1


async def test_plan_pages_walk_the_sequence_index_with_and_without_a_cursor(seeded: Seeded) -> None:
    limit = 10
    # Sequences may have gaps: position the cursor on the 20th checkpoint's own sequence.
    twentieth = (await stored_sequences(seeded.target, seeded.storage))[seeded.ids[19]]
    for after, remaining in ((None, 40), (twentieth, 20)):
        for projection, size in ((PAYLOAD_PROJECTION, limit), (ID_PROJECTION, 1000)):
            command = find_command(
                seeded.target.collection_name,
                page_filter(seeded.scope, after),
                projection,
                sort=ASCENDING_SEQUENCE,
                limit=size,
                single=False,
            )
            explain = await seeded.target.explain(command)
            assert_sequence_index(explain)
            expected = min(size, remaining)
            assert explain["executionStats"]["nReturned"] == expected
            assert docs_examined(explain) == expected


async def test_plan_run_pages_walk_the_run_activity_index_backwards_without_a_sort(seeded: Seeded) -> None:
    # The seeded tenant has two runs (another tenant one more): page 1 of 1, then after it.
    listing = RunListing.of(seeded.scope, None)
    first = await seeded.storage.list_runs(limit=1)
    assert first.next_cursor is not None
    after = decode_run_cursor(listing, first.next_cursor)
    for position, workflow_name in ((None, None), (after, None), (None, WORKFLOW)):
        command = find_command(
            seeded.target.collection_name,
            run_listing_filter(RunListing.of(seeded.scope, workflow_name), position),
            RUN_SUMMARY_PROJECTION,
            sort=RUN_ACTIVITY_SORT,
            limit=1,
            single=False,
        )
        explain = await seeded.target.explain(command)
        stages = winning_plan_stages(explain)
        assert_no_sort_or_scan(stages)
        (scan,) = index_scans(stages)
        assert scan.get("indexName") == RUN_ACTIVITY_INDEX.name, stage_names(stages)
        assert scan.get("direction") == "backward"
        assert explain["executionStats"]["nReturned"] == 1
        if position is None and workflow_name is None:
            assert docs_examined(explain) == 1


def _explained(node: object) -> tuple[list[str], set[str]]:
    """Every stage name and every index name anywhere in an explain (classic or slot-based, a
    ``$cursor`` stage's plan and a ``$lookup``'s ``indexesUsed`` alike)."""
    stages: list[str] = []
    indexes: set[str] = set()
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "stage" and isinstance(value, str):
                stages.append(value)
            elif key == "indexName" and isinstance(value, str):
                indexes.add(value)
            elif key == "indexesUsed" and isinstance(value, list):
                indexes.update(str(name) for name in value)
            else:
                found_stages, found_indexes = _explained(value)
                stages += found_stages
                indexes |= found_indexes
    elif isinstance(node, list):
        for item in node:
            found_stages, found_indexes = _explained(item)
            stages += found_stages
            indexes |= found_indexes
    return stages, indexes


async def test_plan_a_run_page_counts_each_run_through_the_scoped_sequence_index(seeded: Seeded) -> None:
    # ADR 0025: one aggregate; its leading find walks checkpoint_run_activity, and each $lookup's count
    # is a prefix of checkpoint_scope_sequence, never a collection scan or an in-memory sort.
    pipeline = run_page_pipeline(
        RunListing.of(seeded.scope, None),
        None,
        limit=10,
        collection_name=seeded.target.collection_name,
        count_limit=RUN_COUNT_LIMIT,
    )
    command = {"aggregate": seeded.target.collection_name, "pipeline": pipeline, "cursor": {}}
    explain = await seeded.target.explain({**command, "collation": dict(SIMPLE_COLLATION)})
    stages, indexes = _explained(explain)
    assert "COLLSCAN" not in stages, stages
    assert "SORT" not in stages, stages
    assert {RUN_ACTIVITY_INDEX.name, SEQUENCE_INDEX.name} <= indexes, (stages, indexes)


async def test_run_summaries_count_what_each_run_retains(target: MongoTarget) -> None:
    # On the engine by default, on a server with MONGODB_URI: the count is the server's $lookup.
    storage = target.storage()
    await storage.ensure_indexes()
    ids = await save_chain(storage, 5)
    await save_chain(target.storage(session_id="run-2"), 2)
    assert await storage.delete(ids[0])
    runs = {run.session_id: run for run in (await storage.list_runs()).runs}
    assert {session: (run.checkpoint_count, run.saves) for session, run in runs.items()} == {
        storage.options.session_id: (4, 5),
        "run-2": (2, 2),
    }


@pytest.mark.parametrize("ttl", [None, timedelta(hours=1)], ids=["permanent", "expiring"])
async def test_plan_counter_find_and_modify_is_an_id_lookup(seeded: Seeded, ttl: timedelta | None) -> None:
    expires_at = None if ttl is None else datetime.now(timezone.utc).replace(microsecond=0) + ttl
    command = counter_allocation_command(seeded.target.collection_name, seeded.scope, expires_at=expires_at)
    before = await raw_counter(seeded.target, seeded.storage)

    explain = await seeded.target.explain(command)

    assert_id_index(explain)
    assert await raw_counter(seeded.target, seeded.storage) == before, "explain must not write"


async def test_plan_insert_if_absent_is_an_id_lookup_and_writes_nothing_for_a_stored_id(
    seeded: Seeded,
) -> None:
    # An identical retry's insert: the upsert finds the stored checkpoint through _id_ and only
    # reports its identity; $setOnInsert changes nothing.
    before = await seeded.storage.load(seeded.ids[5])
    command = insert_if_absent_command(
        seeded.target.collection_name, seeded.scope, seeded.ids[5], {"sequence": 10**9, "payload_hash": "x"}
    )

    explain = await seeded.target.explain(command)

    assert_id_index(explain)
    assert (await seeded.storage.load(seeded.ids[5])).to_dict() == before.to_dict()


async def test_plan_deletes_are_index_lookups(seeded: Seeded) -> None:
    name = seeded.target.collection_name
    for query in (checkpoint_filter(seeded.scope, seeded.ids[5]), counter_filter(seeded.scope)):
        assert_id_index(await seeded.target.explain(delete_command(name, query, many=False)))

    explain = await seeded.target.explain(delete_command(name, run_filter(seeded.scope), many=True))

    stages = winning_plan_stages(explain)
    assert_no_sort_or_scan(stages)
    scans = index_scans(stages)
    assert len(scans) == 1, stage_names(stages)
    assert scans[0].get("indexName") in SCOPED_INDEX_NAMES
    assert docs_examined(explain) == 40
    assert await seeded.storage.list_checkpoint_ids(workflow_name=WORKFLOW) == seeded.ids
