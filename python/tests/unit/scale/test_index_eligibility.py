"""Every query the storage issues is served by an index that ``ensure_indexes()`` creates.

The shapes are captured, not listed by hand: each public operation runs (through its common,
retry and recovery paths) over a recording proxy around the in-process engine. Each captured
find/find_one/find_one_and_update/delete_one/delete_many/count_documents (and each request of a
bulk_write) is then checked against
the indexes the engine lists after ``ensure_indexes()``. A shape is served when an index exists
such that:

1. every field of its partialFilterExpression is in the query filter, by equality, with the same
   value (otherwise the planner may not use the partial index at all);
2. its keys start with an equality prefix (at least one key) of fields the filter states by
   equality, followed by the query's sort keys in index order, all in the index's direction or
   all reversed; a range is allowed only on the key right after the equality prefix;
3. the query's collation equals the index's (simple; an index listed without one is simple),
   and a query without a collation never qualifies: on a collection created with a default
   collation it would run under that collation and miss every simple-collation index.

Top-level operators (``$nor``) and a field's ``$nin`` are residual predicates: they neither extend
nor break the prefix (the server filters fetched documents by them). A query by ``_id`` equality or
``$in`` (point intervals of the ``_id_`` index) is served by the ``_id_`` index (same collation
rule; a sort on ``_id`` alone walks it). A new query
shape that no index serves makes ``test_every_captured_query_is_served_by_an_index`` fail.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.indexes import CHECKPOINT_INDEXES, SIMPLE_COLLATION
from agent_framework_mongodb.checkpoints.scope import RunScope
from agent_framework_mongodb.errors import MongoDBConcurrencyError
from agent_framework_mongodb.testing import InMemoryMongoClient

from ._recording import QUERY_METHODS, RecordingCollection, Shape

WORKFLOW = "index-eligibility"

QUERYING_OPERATIONS = frozenset(
    {
        "save",
        "load",
        "list_checkpoints",
        "delete",
        "get_latest",
        "list_checkpoint_ids",
        "list_checkpoint_page",
        "list_checkpoint_summaries",
        "clear_run",
        "list_runs",
        "fork_run",
    }
)
"""Public operations that send queries; each must contribute at least one captured shape."""

NON_QUERYING_MEMBERS = frozenset(
    {
        "connect",  # constructor plus a ping
        "for_session",  # no I/O
        "for_workflow",  # no I/O
        "options",  # property
        "close",  # closes an owned client
        "ensure_indexes",  # create_indexes: no filter
        "validate_indexes",  # list_indexes: no filter
    }
)


@dataclasses.dataclass(frozen=True)
class Index:
    name: str
    keys: tuple[tuple[str, int], ...]
    partial_filter: Mapping[str, Any]
    collation: Mapping[str, Any]


def _is_operator(value: object) -> bool:
    return isinstance(value, Mapping) and any(str(key).startswith("$") for key in value)


def _is_residual(value: object) -> bool:
    return isinstance(value, Mapping) and set(value) == {"$nin"}


def _is_points(value: object) -> bool:
    return isinstance(value, Mapping) and set(value) == {"$in"}


def _locale_only(collation: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if collation is None:
        return None
    return {key: value for key, value in collation.items() if key != "version"}


def index_of(listed: Mapping[str, Any]) -> Index:
    collation = listed.get("collation") or dict(SIMPLE_COLLATION)  # listed without one: simple
    return Index(
        name=str(listed["name"]),
        keys=tuple((str(key), int(direction)) for key, direction in listed["key"].items()),
        partial_filter=dict(listed.get("partialFilterExpression") or {}),
        collation=_locale_only(collation) or {},
    )


def serving_index(shape: Shape, indexes: list[Index]) -> str | None:
    """The name of an index that serves ``shape`` (rules in the module docstring), or ``None``."""
    if _locale_only(shape.collation) is None:
        return None
    if set(shape.filter) == {"$or"}:
        # Each branch is planned on its own (an OR of index scans): every one must be served.
        branches = [
            serving_index(dataclasses.replace(shape, filter=branch), indexes)
            for branch in shape.filter["$or"]
        ]
        return None if None in branches else "+".join(sorted({str(name) for name in branches}))
    fields = {
        key: value
        for key, value in shape.filter.items()
        if not str(key).startswith("$") and not _is_residual(value)
    }
    equal = {key: value for key, value in fields.items() if not _is_operator(value)}
    ranges = {key for key, value in fields.items() if _is_operator(value)}
    for index in indexes:
        if _locale_only(shape.collation) != index.collation:
            continue
        if any(key not in equal or equal[key] != value for key, value in index.partial_filter.items()):
            continue
        by_id = "_id" in equal or _is_points(fields.get("_id"))
        if index.name == "_id_" and by_id and all(field == "_id" for field, _ in shape.sort):
            return index.name
        if _keys_serve(index.keys, equal, ranges, shape.sort):
            return index.name
    return None


def _keys_serve(
    keys: tuple[tuple[str, int], ...],
    equal: Mapping[str, Any],
    ranges: set[str],
    sort: tuple[tuple[str, int], ...],
) -> bool:
    prefix = 0
    while prefix < len(keys) and keys[prefix][0] in equal:
        prefix += 1
    if prefix == 0:
        return False
    if any(key != keys[prefix][0] if prefix < len(keys) else True for key in ranges):
        return False
    wanted = [(field, direction) for field, direction in sort if field not in equal]
    following = keys[prefix : prefix + len(wanted)]
    if [field for field, _ in following] != [field for field, _ in wanted]:
        return False
    signs = {
        index_direction * direction
        for (_, index_direction), (_, direction) in zip(following, wanted, strict=True)
    }
    return len(signs) <= 1


def _checkpoint(checkpoint_id: str, *, note: str = "same") -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=WORKFLOW,
        graph_signature_hash="graph",
        checkpoint_id=checkpoint_id,
        state={"note": note},
        timestamp="2025-01-02T03:04:05.000000+00:00",
    )


async def capture() -> tuple[list[Shape], list[Index], RecordingCollection]:  # noqa: PLR0915 - one script
    """Run every public operation over the recording proxy; return shapes and listed indexes."""
    client = InMemoryMongoClient()
    engine = client["scale"]["checkpoints"]
    proxy = RecordingCollection(engine)
    options = MongoDBCheckpointStorageOptions(
        tenant_id="tenant", workflow_name=WORKFLOW, session_id="run-1", page_size=2, max_page_size=3
    )
    storage = MongoDBCheckpointStorage(proxy, options=options)
    scope = RunScope.from_options(options)
    await storage.ensure_indexes()

    proxy.operation = "save"
    for index in range(5):  # first save (counter check), then steady state
        await storage.save(_checkpoint(f"cp-{index}"))
    await storage.save(_checkpoint("cp-1"))  # idempotent retry: compares the stored hash
    with pytest.raises(MongoDBConcurrencyError):
        await storage.save(_checkpoint("cp-1", note="other"))  # same id, other content
    # A counter that restarted below retained checkpoints while marked checked: the insert
    # collides on the sequence index and the save recovers from the retained maximum.
    await engine.update_one({"_id": scope.counter_document_id}, {"$set": {"sequence": 0}})
    await storage.save(_checkpoint("cp-recovered"))
    # A vanished counter: the next save reads the retained maximum before inserting.
    await engine.delete_one({"_id": scope.counter_document_id})
    await storage.save(_checkpoint("cp-after-counter-loss"))

    # A chunked checkpoint: its chunk writes (upserts, then a touch of the remembered ones).
    await storage.save(_checkpoint("cp-chunked", note="x" * 40_000))
    await storage.save(_checkpoint("cp-chunked-2", note="x" * 40_000 + "y"))

    proxy.operation = "load"
    await storage.load("cp-2")
    await storage.load("cp-chunked")  # the root, then its chunks by address
    proxy.operation = "get_latest"
    await storage.get_latest(workflow_name=WORKFLOW)
    proxy.operation = "list_checkpoints"
    await storage.list_checkpoints(workflow_name=WORKFLOW)  # several pages: a range after the first
    proxy.operation = "list_checkpoint_ids"
    await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
    proxy.operation = "list_checkpoint_page"
    first = await storage.list_checkpoint_page(workflow_name=WORKFLOW)
    await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=first.next_cursor, limit=3)
    proxy.operation = "list_checkpoint_summaries"
    summaries = await storage.list_checkpoint_summaries(workflow_name=WORKFLOW, limit=2)
    await storage.list_checkpoint_summaries(workflow_name=WORKFLOW, cursor=summaries.next_cursor)
    proxy.operation = "save"
    for session in ("run-2", "run-3"):
        await storage.for_session(session).save(_checkpoint(f"{session}-cp"))
    proxy.operation = "list_runs"
    runs = await storage.list_runs(limit=1)  # first page, then a page after a position
    await storage.list_runs(cursor=runs.next_cursor, limit=1)
    await storage.list_runs(workflow_name=WORKFLOW)
    proxy.operation = "delete"
    assert await storage.delete("cp-0")
    assert not await storage.delete("cp-0")
    proxy.operation = "save"
    # keep_last: the cut-off read (skipped, limited, projected) and the prune below it, for a run
    # with fewer than keep_last checkpoints and for one with more.
    pruning = MongoDBCheckpointStorage(proxy, options=dataclasses.replace(options, keep_last=2))
    for index in range(3):
        await pruning.for_session("run-kept").save(_checkpoint(f"cp-kept-{index}"))
    await pruning.save(_checkpoint("cp-pruning"))
    # A prune by a storage that stored chunks: it reads the retained roots and collects chunks.
    chunking = pruning.for_session("run-chunked")
    for index in range(3):
        await chunking.save(_checkpoint(f"cp-chunked-{index}", note=str(index) * 40_000))

    # A signed storage reads the run's ledger (with the checkpoint, for a load), records deletions
    # and prune cut-offs on the counter, and filters pages by the ledger's live sequences.
    signed = MongoDBCheckpointStorage(
        proxy,
        options=dataclasses.replace(options, session_id="run-signed", signing_keys=[b"k" * 32], keep_last=2),
    )
    proxy.operation = "save"
    for index in range(4):
        await signed.save(_checkpoint(f"cp-signed-{index}"))
    proxy.operation = "delete"
    assert await signed.delete("cp-signed-2")
    proxy.operation = "load"
    await signed.load("cp-signed-3")
    proxy.operation = "get_latest"
    await signed.get_latest(workflow_name=WORKFLOW)
    proxy.operation = "list_checkpoints"
    await signed.list_checkpoints(workflow_name=WORKFLOW)
    proxy.operation = "list_checkpoint_ids"
    await signed.list_checkpoint_ids(workflow_name=WORKFLOW)
    proxy.operation = "list_checkpoint_page"
    await signed.list_checkpoint_page(workflow_name=WORKFLOW)
    proxy.operation = "list_checkpoint_summaries"
    await signed.list_checkpoint_summaries(workflow_name=WORKFLOW)

    # A fork reads both runs' envelopes (and, signed, the ledger), pages the source, saves the copy,
    # then reads the target again; a repeated fork plans and finds everything copied.
    proxy.operation = "fork_run"
    await storage.fork_run(to_session_id="run-forked", keep="chain")
    await storage.fork_run(to_session_id="run-forked", keep="chain")
    await signed.fork_run(to_session_id="run-signed-forked", keep=2)

    proxy.operation = "clear_run"
    await storage.clear_run()

    listed = await (await engine.list_indexes()).to_list(None)
    await client.close()
    return proxy.shapes, [index_of(document) for document in listed], proxy


@pytest.fixture
async def captured() -> tuple[list[Shape], list[Index], RecordingCollection]:
    return await capture()


async def test_every_captured_query_is_served_by_an_index(
    captured: tuple[list[Shape], list[Index], RecordingCollection],
) -> None:
    shapes, indexes, _ = captured
    unserved = [shape.describe() for shape in shapes if serving_index(shape, indexes) is None]
    assert unserved == [], "queries no index serves:\n" + "\n".join(unserved)


async def test_a_run_page_counts_from_its_index_alone(
    captured: tuple[list[Shape], list[Index], RecordingCollection],
) -> None:
    # Issue 29: a count that names a field outside its index's keys and partial filter reads every
    # counted document (the tenant and application once did: a million fetches for a page of 100
    # runs of 10,000). Every field a run page's $lookup names is a key of the index that serves it,
    # or a condition of that index's partial filter (which MongoDB 7.0+ drops from the plan).
    shapes, indexes, _ = captured
    counts = [shape for shape in shapes if shape.method == "aggregate_lookup"]
    assert counts, "no run page's count captured"
    by_name = {index.name: index for index in indexes}
    for shape in counts:
        served = serving_index(shape, indexes)
        assert served is not None, shape.describe()
        index = by_name[served]
        known = {key for key, _ in index.keys} | set(index.partial_filter)
        outside = sorted(set(shape.filter) - known)
        assert outside == [], f"{shape.describe()} names {outside}, not in {served}: each is a fetch"


async def test_checked_against_the_indexes_ensure_indexes_creates(
    captured: tuple[list[Shape], list[Index], RecordingCollection],
) -> None:
    _, indexes, _ = captured
    assert {index.name for index in indexes} == {"_id_", *(spec.name for spec in CHECKPOINT_INDEXES)}
    sequence = next(index for index in indexes if index.name == "checkpoint_scope_sequence")
    assert sequence.partial_filter == {"_kind": "workflow_checkpoint"}
    assert sequence.collation == SIMPLE_COLLATION


async def test_capture_is_not_vacuous(captured: tuple[list[Shape], list[Index], RecordingCollection]) -> None:
    shapes, indexes, _recording = captured
    public = {
        name
        for name, member in inspect.getmembers(MongoDBCheckpointStorage)
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    }
    # A new public member must be classified here, and a querying one exercised by capture().
    assert public == QUERYING_OPERATIONS | NON_QUERYING_MEMBERS
    assert {shape.operation for shape in shapes} == QUERYING_OPERATIONS
    assert {shape.method for shape in shapes} <= QUERY_METHODS
    assert {shape.method for shape in shapes} >= {
        "find",
        "find_one",
        "find_one_and_update",
        "delete_one",
        "delete_many",
    }
    # The paths exercised: recovery reads, ranges of later pages, and each index that serves.
    assert any("sequence" in shape.filter for shape in shapes), "no page after a position"
    assert any(
        shape.operation == "save"
        and shape.method == "find_one_and_update"
        and shape.filter.get("_kind") == "workflow_checkpoint"
        for shape in shapes
    ), "no checkpoint insert captured"
    assert any(
        shape.operation == "save" and shape.method == "delete_many" and "sequence" in shape.filter
        for shape in shapes
    ), "no keep_last prune captured"
    served_by = {serving_index(shape, indexes) for shape in shapes}
    assert {"_id_", "checkpoint_scope_sequence", "checkpoint_run_activity"} <= served_by
    assert any("$or" in shape.filter for shape in shapes), "no signed load (checkpoint and ledger)"
    assert any(
        isinstance(shape.filter.get("sequence"), dict) and "$nin" in shape.filter["sequence"]
        for shape in shapes
    ), "no signed page filtered by the ledger"
    assert any(shape.operation == "list_runs" and "$nor" in shape.filter for shape in shapes), "no run page"
    distinct = {
        (shape.method, tuple(shape.filter), shape.sort, tuple(shape.projection or ())) for shape in shapes
    }
    assert len(distinct) >= 10


# -- the checker itself rejects what no index serves ---------------------------------------------


def _page_shape(shapes: list[Shape]) -> Shape:
    return next(shape for shape in shapes if shape.method == "find" and "sequence" in shape.filter)


async def test_checker_rejects_a_sort_no_index_orders(
    captured: tuple[list[Shape], list[Index], RecordingCollection],
) -> None:
    shapes, indexes, _ = captured
    page = _page_shape(shapes)
    assert serving_index(page, indexes) == "checkpoint_scope_sequence"
    assert serving_index(dataclasses.replace(page, sort=(("created_at", 1),)), indexes) is None
    assert (
        serving_index(dataclasses.replace(page, sort=(("sequence", 1), ("created_at", -1))), indexes) is None
    )
    # Reversed is fine: the index is walked backwards.
    assert serving_index(dataclasses.replace(page, sort=(("sequence", -1),)), indexes) is not None


async def test_checker_rejects_a_filter_outside_the_partial_filter(
    captured: tuple[list[Shape], list[Index], RecordingCollection],
) -> None:
    shapes, indexes, _ = captured
    page = _page_shape(shapes)
    without_kind = {key: value for key, value in page.filter.items() if key != "_kind"}
    assert serving_index(dataclasses.replace(page, filter=without_kind), indexes) is None
    other_kind = {**page.filter, "_kind": "workflow_checkpoint_counter"}
    assert serving_index(dataclasses.replace(page, filter=other_kind), indexes) is None


async def test_checker_rejects_a_missing_or_other_collation(
    captured: tuple[list[Shape], list[Index], RecordingCollection],
) -> None:
    shapes, indexes, _ = captured
    page = _page_shape(shapes)
    by_id = next(shape for shape in shapes if "_id" in shape.filter)
    for shape in (page, by_id):
        assert serving_index(dataclasses.replace(shape, collation=None), indexes) is None
        assert serving_index(dataclasses.replace(shape, collation={"locale": "en"}), indexes) is None


async def test_checker_rejects_an_or_with_a_branch_no_index_serves(
    captured: tuple[list[Shape], list[Index], RecordingCollection],
) -> None:
    shapes, indexes, _ = captured
    combined = next(shape for shape in shapes if "$or" in shape.filter)
    assert serving_index(combined, indexes) == "_id_"
    first, second = combined.filter["$or"]
    unserved = {key: value for key, value in second.items() if key != "_id"}
    assert serving_index(dataclasses.replace(combined, filter={"$or": [first, unserved]}), indexes) is None


async def test_checker_rejects_a_range_or_prefix_the_index_cannot_use(
    captured: tuple[list[Shape], list[Index], RecordingCollection],
) -> None:
    shapes, indexes, _ = captured
    page = _page_shape(shapes)
    ranged = {**page.filter, "created_at": {"$gt": 0}}
    assert serving_index(dataclasses.replace(page, filter=ranged), indexes) is None
    no_prefix = {key: value for key, value in page.filter.items() if key != "scope_discriminator"}
    assert serving_index(dataclasses.replace(page, filter=no_prefix), indexes) is None
