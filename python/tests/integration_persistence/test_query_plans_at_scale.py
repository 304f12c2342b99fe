"""Every query shape stays on its index, and its cost is bounded by the page, in a crowded collection.

10,000 checkpoints across 100 runs share the collection with the run under test. For each shape the
storage issues, ``explain("executionStats")`` must show an index scan on the intended index, no
in-memory SORT, and keys and documents examined bounded by what the operation returns, not by the
size of the collection. Needs a real server (``MONGODB_URI``); skipped on the in-process engine.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import pytest
from bson.int64 import Int64

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.checkpoints.indexes import RUN_ACTIVITY_INDEX, SEQUENCE_INDEX, SIMPLE_COLLATION
from agent_framework_mongodb.checkpoints.paging import RunPosition
from agent_framework_mongodb.checkpoints.queries import (
    ASCENDING_SEQUENCE,
    CHECKPOINT_SUMMARY_PROJECTION,
    COUNTED_FIELD,
    DESCENDING_SEQUENCE,
    ID_PROJECTION,
    PAYLOAD_PROJECTION,
    RETAINED_FIELD,
    RUN_ACTIVITY_SORT,
    RUN_SUMMARY_PROJECTION,
    SEQUENCE_PROJECTION,
    checkpoint_filter,
    page_filter,
    run_filter,
    run_listing_filter,
    run_page_pipeline,
)
from agent_framework_mongodb.checkpoints.results import RUN_COUNT_LIMIT
from agent_framework_mongodb.checkpoints.scope import CHECKPOINT_KIND, COUNTER_KIND, RunListing, RunScope

from ._support import (
    WORKFLOW,
    MongoTarget,
    checkpoint,
    counter_allocation_command,
    delete_command,
    find_command,
    index_scans,
    stage_names,
    winning_plan_stages,
)

pytestmark = pytest.mark.integration_persistence

RUNS = 100
PER_RUN = 100
PAGE = 25
RUN_UNDER_TEST = "crowd-42"
LISTED_RUNS = 30


def _scope(storage: MongoDBCheckpointStorage) -> RunScope:
    return RunScope.from_options(storage.options)


async def _crowd(target: MongoTarget) -> MongoDBCheckpointStorage:
    """Fill the collection with RUNS x PER_RUN checkpoints cloned from one real saved document."""
    probe = target.storage(session_id="probe")
    await probe.ensure_indexes()
    await probe.save(checkpoint("template", state={"note": "x" * 2048}))
    template = await target.collection.find_one({"_kind": CHECKPOINT_KIND, "checkpoint_id": "template"})
    assert template is not None
    for run in range(RUNS):
        storage = probe.for_session(f"crowd-{run}")
        scope = _scope(storage)
        documents: list[dict[str, Any]] = []
        for sequence in range(1, PER_RUN + 1):
            checkpoint_id = f"crowd-{run}-{sequence:04d}"
            document = copy.copy(template)
            document.update(scope.fields())
            document["_id"] = scope.checkpoint_document_id(checkpoint_id)
            document["checkpoint_id"] = checkpoint_id
            document["sequence"] = Int64(sequence)
            documents.append(document)
        # Raw inserts outside the storage: the test measures plans, not saves.
        await target.collection.insert_many(documents, ordered=False)
    return probe.for_session(RUN_UNDER_TEST)


def _stats(explain: Mapping[str, Any]) -> tuple[int, int, int]:
    stats = explain["executionStats"]
    return int(stats["totalKeysExamined"]), int(stats["totalDocsExamined"]), int(stats["nReturned"])


def _assert_on_sequence_index(explain: Mapping[str, Any]) -> None:
    stages = winning_plan_stages(explain)
    names = stage_names(stages)
    assert "SORT" not in names, f"in-memory SORT in {names}"
    assert "COLLSCAN" not in names, f"collection scan in {names}"
    assert [scan.get("indexName") for scan in index_scans(stages)] == [SEQUENCE_INDEX.name], names


async def test_every_query_shape_is_bounded_by_its_page_not_the_collection(server: MongoTarget) -> None:
    storage = await _crowd(server)
    scope = _scope(storage)
    name = server.collection_name
    assert await server.collection.count_documents({}) >= RUNS * PER_RUN

    # A point lookup by deterministic _id examines one key and one document.
    load = await server.explain(
        find_command(
            name, checkpoint_filter(scope, "crowd-42-0050"), PAYLOAD_PROJECTION, limit=1, single=True
        )
    )
    keys, docs, returned = _stats(load)
    assert (keys, docs, returned) == (1, 1, 1)

    # Latest and the retained maximum: one step down the sequence index.
    for projection in (PAYLOAD_PROJECTION, SEQUENCE_PROJECTION):
        latest = await server.explain(
            find_command(name, run_filter(scope), projection, sort=DESCENDING_SEQUENCE, limit=1, single=True)
        )
        _assert_on_sequence_index(latest)
        keys, docs, returned = _stats(latest)
        assert (docs, returned) == (1, 1)
        assert keys <= 2

    # Pages, first and after a cursor position, with payloads and id-only.
    for after in (None, 40, PER_RUN - 5):
        for projection in (PAYLOAD_PROJECTION, ID_PROJECTION, CHECKPOINT_SUMMARY_PROJECTION):
            page = await server.explain(
                find_command(
                    name,
                    page_filter(scope, after),
                    projection,
                    sort=ASCENDING_SEQUENCE,
                    limit=PAGE,
                    single=False,
                )
            )
            _assert_on_sequence_index(page)
            keys, docs, returned = _stats(page)
            assert returned == min(PAGE, PER_RUN - (after or 0))
            assert docs == returned
            assert keys <= returned + 1, f"{keys} keys examined for a page of {returned}"

    # Writes, explained (explain applies nothing): the counter allocation and the deletes.
    await storage.save(checkpoint("crowd-42-extra"))  # creates the run's counter
    allocation = await server.explain(counter_allocation_command(name, scope, expires_at=None))
    keys, docs, _ = _stats(allocation)
    assert (keys, docs) == (1, 1)
    one = await server.explain(delete_command(name, checkpoint_filter(scope, "crowd-42-0007"), many=False))
    keys, docs, _ = _stats(one)
    assert (keys, docs) == (1, 1)
    run = await server.explain(delete_command(name, run_filter(scope), many=True))
    keys, docs, _ = _stats(run)
    assert "COLLSCAN" not in stage_names(winning_plan_stages(run))
    assert docs <= PER_RUN + 1, f"clearing one run examined {docs} documents"
    assert keys <= PER_RUN + 2

    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == [
        *(f"crowd-42-{sequence:04d}" for sequence in range(1, PER_RUN + 1)),
        "crowd-42-extra",
    ]


async def test_run_pages_walk_the_activity_index_and_read_only_what_they_return(server: MongoTarget) -> None:
    """``list_runs``: counters only, on ``checkpoint_run_activity``, bounded by the page."""
    storage = await _crowd(server)
    for run in range(LISTED_RUNS):  # real saves: each writes its run's counter and summary
        await storage.for_session(f"listed-{run}").save(checkpoint(f"listed-{run}-cp"))
    name = server.collection_name
    listing = RunListing.of(_scope(storage), None)
    newest = await server.collection.find_one(
        {"_kind": COUNTER_KIND, "tenant_id": listing.tenant_id}, sort=RUN_ACTIVITY_SORT
    )
    assert newest is not None
    after = RunPosition(newest["allocated_at"], newest["_id"])

    for position in (None, after):
        for workflow in (None, WORKFLOW):
            query = run_listing_filter(RunListing.of(_scope(storage), workflow), position)
            page = await server.explain(
                find_command(
                    name, query, RUN_SUMMARY_PROJECTION, sort=RUN_ACTIVITY_SORT, limit=PAGE, single=False
                )
            )
            stages = winning_plan_stages(page)
            names = stage_names(stages)
            assert "SORT" not in names, f"in-memory SORT in {names}"
            assert "COLLSCAN" not in names, f"collection scan in {names}"
            assert [scan.get("indexName") for scan in index_scans(stages)] == [RUN_ACTIVITY_INDEX.name], names
            keys, docs, returned = _stats(page)
            assert returned == PAGE
            assert docs == returned, "the partial index holds counters only: no checkpoint is examined"
            assert keys <= returned + 2, f"{keys} keys examined for a page of {returned}"


COUNTED_RUNS = 10


async def test_run_page_counts_read_index_keys_and_from_7_0_no_document(server: MongoTarget) -> None:
    """``list_runs``' counts (issue 29): each ``$lookup`` walks ``checkpoint_scope_sequence`` over its
    run's keys only, and from MongoDB 7.0 reads no document (the kind is the index's partial filter)."""
    storage = await _crowd(server)
    for run in range(COUNTED_RUNS):  # a counter for ten crowded runs: each now retains PER_RUN + 1
        await storage.for_session(f"crowd-{run}").save(checkpoint(f"crowd-{run}-saved"))
    name = server.collection_name
    pipeline = run_page_pipeline(
        RunListing.of(_scope(storage), None),
        None,
        limit=COUNTED_RUNS,
        collection_name=name,
        count_limit=RUN_COUNT_LIMIT,
    )
    command = {"aggregate": name, "pipeline": pipeline, "cursor": {}, "collation": dict(SIMPLE_COLLATION)}
    explain = await server.explain(command)
    lookup = _lookup_stage(explain)
    assert lookup is not None, f"no $lookup stage in the explain: {sorted(explain)}"
    assert int(lookup.get("collectionScans", 0)) == 0, lookup
    assert list(lookup.get("indexesUsed", [])) == [SEQUENCE_INDEX.name], lookup
    keys, docs = int(lookup["totalKeysExamined"]), int(lookup["totalDocsExamined"])
    retained = COUNTED_RUNS * (PER_RUN + 1)
    assert retained <= keys <= retained + COUNTED_RUNS, f"{keys} keys for {retained} counted checkpoints"
    if _server_version(explain) >= (7, 0):
        assert docs == 0, f"{docs} documents read by counts the index alone answers"
    else:
        assert docs <= keys

    cursor = await server.collection.aggregate(pipeline, collation=dict(SIMPLE_COLLATION))
    counts = {document["session_id"]: document[RETAINED_FIELD] for document in await cursor.to_list(None)}
    assert counts == {f"crowd-{run}": [{COUNTED_FIELD: PER_RUN + 1}] for run in range(COUNTED_RUNS)}


def _lookup_stage(explain: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``$lookup`` entry of an aggregate's explain, with its execution statistics beside it
    (MongoDB 5.0+: https://www.mongodb.com/docs/manual/reference/explain-results/, ``$lookup``)."""
    stages = explain.get("stages")
    if not isinstance(stages, list):
        return None
    for stage in stages:
        if isinstance(stage, Mapping) and "$lookup" in stage:
            return stage
    return None


def _server_version(explain: Mapping[str, Any]) -> tuple[int, int]:
    """The server's version, as its explain reports it (``serverInfo``); (0, 0) when it does not."""
    found = re.match(r"(\d+)\.(\d+)", str(explain.get("serverInfo", {}).get("version", "")))
    return (int(found[1]), int(found[2])) if found else (0, 0)
