"""Traces and metrics: one database client span per operation, its attributes, and metrics that name no data.

The spans follow OpenTelemetry's database client conventions (ADR 0035):
https://opentelemetry.io/docs/specs/semconv/database/database-spans/ and
https://opentelemetry.io/docs/specs/semconv/database/mongodb/.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from pymongo.errors import AutoReconnect

from agent_framework_mongodb import (
    MongoDBCheckpointCatalog,
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorage,
    MongoDBConfigurationError,
    MongoDBTransientPersistenceError,
    ensure_checkpoint_indexes,
    validate_checkpoint_indexes,
)
from agent_framework_mongodb.testing import InMemoryCollection
from tests.telemetry_support import Point, Telemetry, attribute, collected

from ._support import (
    APPLICATION,
    INSERT,
    SESSION,
    TENANT,
    WORKFLOW,
    ProxyCollection,
    end_counter_grace,
    make_checkpoint,
    make_storage,
    raw_checkpoints,
    save_chain,
)

CHECKPOINT_ID = "cp-otel-0xfeedface"
PAYLOAD_TEXT = "payload-content-visible-88"
DATABASE = "oteldb_private"
COLLECTION = "otelcoll_private"
DRIVER_HOST = "otel-host-private.example:27017"
RUN_DATA = (CHECKPOINT_ID, TENANT, SESSION, WORKFLOW, APPLICATION, PAYLOAD_TEXT, DRIVER_HOST)
"""Never in a span, a metric or a log record."""
NAMES = (DATABASE, COLLECTION)
"""Configuration: in the span (db.namespace, db.collection.name), never in metrics."""
SPAN_ATTRIBUTES = {
    "db.system.name",
    "db.system",
    "db.operation.name",
    "db.collection.name",
    "db.namespace",
    "agent_framework_mongodb.outcome",
    "agent_framework_mongodb.round_trips",
    "agent_framework_mongodb.payload_bytes",
    "agent_framework_mongodb.result_count",
}

Operation = Callable[[MongoDBCheckpointStorage], Awaitable[Any]]

OPERATIONS: dict[str, Operation] = {
    "save": lambda s: s.save(make_checkpoint(CHECKPOINT_ID, state={"t": PAYLOAD_TEXT})),
    "load": lambda s: s.load(CHECKPOINT_ID + "-000"),
    "list_checkpoints": lambda s: s.list_checkpoints(workflow_name=WORKFLOW),
    "list_checkpoint_ids": lambda s: s.list_checkpoint_ids(workflow_name=WORKFLOW),
    "list_checkpoint_page": lambda s: s.list_checkpoint_page(workflow_name=WORKFLOW, limit=1),
    "get_latest": lambda s: s.get_latest(workflow_name=WORKFLOW),
    "delete": lambda s: s.delete(CHECKPOINT_ID + "-001"),
    "clear_run": lambda s: s.clear_run(),
    "ensure_indexes": lambda s: s.ensure_indexes(),
    "validate_indexes": lambda s: s.validate_indexes(),
}


@pytest.fixture
def telemetry() -> Telemetry:
    return collected()


@pytest.fixture
def private_proxy(collection: InMemoryCollection) -> ProxyCollection:
    return ProxyCollection(collection.database.client[DATABASE][COLLECTION])


async def _storage(proxy: ProxyCollection) -> MongoDBCheckpointStorage:
    storage = make_storage(proxy)
    await storage.ensure_indexes()
    await save_chain(storage, 3, prefix=CHECKPOINT_ID)
    return storage


def _only_span(telemetry: Telemetry) -> ReadableSpan:
    (span,) = telemetry.storage_spans()
    return span


def _assert_clean(telemetry: Telemetry, spans: list[ReadableSpan], points: list[Point]) -> None:
    texts: list[str] = []
    for span in spans:
        texts.append(span.name)
        texts.extend(f"{key}={value!r}" for key, value in (span.attributes or {}).items())
        texts.append(repr(span.status.description))
        texts.extend(event.name + repr(dict(event.attributes or {})) for event in span.events)
    span_text = " ".join(texts)
    for forbidden in RUN_DATA:
        assert forbidden not in span_text, forbidden
    labels: list[str] = []
    for point in points:
        labels.append(point.name)
        labels.extend(f"{key}={value!r}" for key, value in point.labels.items())
    metric_text = " ".join(labels)
    for forbidden in (*RUN_DATA, *NAMES):
        assert forbidden not in metric_text, forbidden


@pytest.mark.parametrize("name", list(OPERATIONS))
async def test_each_operation_emits_one_span_with_exactly_its_attributes(
    private_proxy: ProxyCollection, telemetry: Telemetry, name: str
) -> None:
    storage = await _storage(private_proxy)
    telemetry.reset()
    private_proxy.reset()

    await OPERATIONS[name](storage)

    span = _only_span(telemetry)
    attributes = dict(span.attributes or {})
    assert span.name == f"{name} {COLLECTION}"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert set(attributes) == SPAN_ATTRIBUTES
    assert attributes["db.system.name"] == attributes["db.system"] == "mongodb"
    assert attributes["db.operation.name"] == name
    assert attributes["db.collection.name"] == COLLECTION
    assert attributes["db.namespace"] == DATABASE
    assert attributes["agent_framework_mongodb.outcome"] == "success"
    assert attributes["agent_framework_mongodb.round_trips"] == private_proxy.round_trips
    assert span.events == ()
    points = telemetry.points()
    (duration,) = [p for p in points if p.name == "db.client.operation.duration"]
    assert duration.unit == "s"
    assert duration.count == 1
    assert duration.labels == {
        "db.system.name": "mongodb",
        "db.operation.name": name,
        "agent_framework_mongodb.outcome": "success",
    }
    _assert_clean(telemetry, [span], points)


async def test_round_trips_match_the_proxys_counts(proxy: ProxyCollection, telemetry: Telemetry) -> None:
    storage = make_storage(proxy)

    def trips() -> list[int]:
        found = [attribute(s, "agent_framework_mongodb.round_trips") for s in telemetry.storage_spans()]
        telemetry.reset()
        return [int(str(t)) for t in found]

    await storage.ensure_indexes()
    assert trips() == [2]
    await storage.validate_indexes()
    assert trips() == [1]
    await save_chain(storage, 2)
    assert trips() == [3, 3], "saves in a new counter's grace"
    end_counter_grace(proxy)
    checkpoint = make_checkpoint("cp-checks")
    await storage.save(checkpoint)
    await storage.save(make_checkpoint("cp-steady"))
    await storage.save(checkpoint)
    assert trips() == [4, 2, 2], "first save after the grace, steady state, idempotent retry"
    await storage.load("cp-steady")
    await storage.get_latest(workflow_name=WORKFLOW)
    await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=2)
    await storage.delete("cp-000")
    await storage.delete("cp-000")
    assert trips() == [1, 1, 1, 1, 1]
    await storage.clear_run()
    assert trips() == [5]  # requests: checkpoints + mark, chunks, counter + mark


async def test_keep_last_prunes_and_run_pages_count_their_round_trips(
    proxy: ProxyCollection, telemetry: Telemetry
) -> None:
    # Every driver call counts, including those added after the spans: the prune of a keep_last
    # save (cut-off read, delete) and a page of runs.
    storage = make_storage(proxy, keep_last=2)
    await save_chain(storage, 2)
    end_counter_grace(proxy)
    await save_chain(storage, 4, prefix="pruned")
    telemetry.reset()
    proxy.reset()

    await storage.save(make_checkpoint("cp-due"))
    (save_span,) = telemetry.storage_spans()
    assert attribute(save_span, "agent_framework_mongodb.round_trips") == proxy.round_trips
    telemetry.reset()
    proxy.reset()

    await storage.list_runs()
    (runs_span,) = telemetry.storage_spans()
    assert attribute(runs_span, "agent_framework_mongodb.round_trips") == proxy.round_trips == 1


async def test_payload_bytes_are_the_stored_payload_on_save_and_on_reads(
    storage: MongoDBCheckpointStorage, telemetry: Telemetry
) -> None:
    await storage.save(make_checkpoint("cp-a", state={"t": "x" * 500}))
    await storage.save(make_checkpoint("cp-b"))
    await storage.load("cp-a")
    await storage.list_checkpoints(workflow_name=WORKFLOW)
    await storage.list_checkpoint_ids(workflow_name=WORKFLOW)

    saved_a, saved_b, loaded, listed, ids = (
        int(str((span.attributes or {})["agent_framework_mongodb.payload_bytes"]))
        for span in telemetry.storage_spans()
    )
    assert saved_a > saved_b > 0
    assert loaded == saved_a
    assert listed == saved_a + saved_b
    assert ids == 0, "listing ids fetches no payload"
    sizes = [p for p in telemetry.points() if p.name == "agent_framework_mongodb.payload.size"]
    assert {p.labels["db.operation.name"]: p.total for p in sizes} == {
        "save": saved_a + saved_b,
        "load": saved_a,
        "list_checkpoints": saved_a + saved_b,
    }
    assert all(p.unit == "By" for p in sizes)


async def test_a_failed_save_is_an_error_span_and_counted_by_category(
    private_proxy: ProxyCollection, telemetry: Telemetry
) -> None:
    storage = await _storage(private_proxy)
    telemetry.reset()
    private_proxy.fail(INSERT, AutoReconnect(f"connection to {DRIVER_HOST} reset"))

    with pytest.raises(MongoDBTransientPersistenceError) as raised:
        await OPERATIONS["save"](storage)

    category = raised.value.category
    span = _only_span(telemetry)
    attributes = dict(span.attributes or {})
    assert set(attributes) == {*SPAN_ATTRIBUTES, "error.type"}
    assert attributes["agent_framework_mongodb.outcome"] == "error"
    assert attributes["error.type"] == category
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == category
    assert span.events == (), "no exception event: its message is not data-free"
    points = telemetry.points()
    (failures,) = [p for p in points if p.name == "agent_framework_mongodb.save.failures"]
    assert (failures.total, failures.unit) == (1, "{failure}")
    assert failures.labels == {"db.system.name": "mongodb", "error.type": category}
    (duration,) = [p for p in points if p.name == "db.client.operation.duration"]
    assert duration.labels["error.type"] == category
    _assert_clean(telemetry, [span], points)


async def test_a_refused_save_and_a_failed_load_count_no_save_failure_unless_a_save(
    storage: MongoDBCheckpointStorage, telemetry: Telemetry
) -> None:
    with pytest.raises(MongoDBConfigurationError):
        await storage.save(make_checkpoint(CHECKPOINT_ID, workflow_name="other-workflow"))
    with pytest.raises(Exception):  # noqa: B017, PT011 - not found; the category is what is checked
        await storage.load(CHECKPOINT_ID)

    refused, missing = telemetry.storage_spans()
    assert (refused.attributes or {})["error.type"] == "configuration"
    assert (refused.attributes or {})["agent_framework_mongodb.round_trips"] == 0
    assert (missing.attributes or {})["error.type"] == "not_found"
    points = telemetry.points()
    failures = [p for p in points if p.name == "agent_framework_mongodb.save.failures"]
    assert [(p.labels["error.type"], p.total) for p in failures] == [("configuration", 1)]
    _assert_clean(telemetry, [refused, missing], points)


async def test_a_cancelled_operation_ends_its_span_as_cancelled(
    proxy: ProxyCollection, telemetry: Telemetry
) -> None:
    storage = make_storage(proxy)
    await save_chain(storage, 1)
    telemetry.reset()
    proxy.block("find_one")
    task = asyncio.ensure_future(storage.load("cp-000"))
    await asyncio.wait_for(proxy.entered["find_one"].wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    span = _only_span(telemetry)
    assert (span.attributes or {})["agent_framework_mongodb.outcome"] == "cancelled"
    assert "error.type" not in (span.attributes or {})
    assert span.status.status_code is StatusCode.UNSET


async def test_provisioning_functions_emit_their_spans(proxy: ProxyCollection, telemetry: Telemetry) -> None:
    await ensure_checkpoint_indexes(proxy)
    await validate_checkpoint_indexes(proxy)

    spans = telemetry.storage_spans()
    assert [attribute(s, "db.operation.name") for s in spans] == ["ensure_indexes", "validate_indexes"]
    assert [attribute(s, "agent_framework_mongodb.round_trips") for s in spans] == [2, 1]


# -- Database client conventions: kind, name and every attribute pinned -------------------
# https://opentelemetry.io/docs/specs/semconv/database/database-spans/ (kind CLIENT, name
# "{db.operation.name} {db.collection.name}") and https://opentelemetry.io/docs/specs/semconv/database/mongodb/
# (db.system.name "mongodb", db.namespace the database); ADR 0035 for the operation name.


def _client_attributes(operation: str, **measured: object) -> dict[str, object]:
    """The span's attributes: the convention's identifying ones, then the package's measures."""
    return {
        "db.system.name": "mongodb",
        "db.system": "mongodb",
        "db.operation.name": operation,
        "db.collection.name": COLLECTION,
        "db.namespace": DATABASE,
        **{f"agent_framework_mongodb.{key}": value for key, value in measured.items()},
    }


async def _stored_payload_bytes(proxy: ProxyCollection, checkpoint_id: str) -> int:
    (document,) = await raw_checkpoints(proxy.inner, checkpoint_id=checkpoint_id)
    return int(document["payload_bytes"])


# operation -> (round trips, result count, the checkpoint whose stored payload it moved, if any)
PINNED: dict[str, tuple[int, int, str | None]] = {
    "save": (3, 1, CHECKPOINT_ID),  # in the new counter's grace: sequence, checks, insert
    "load": (1, 1, CHECKPOINT_ID + "-000"),
    "get_latest": (1, 1, CHECKPOINT_ID + "-002"),
    "list_checkpoint_ids": (1, 3, None),
    "delete": (1, 1, None),
    "clear_run": (5, 3, None),
}


@pytest.mark.parametrize("name", list(PINNED))
async def test_each_operation_is_a_database_client_span_with_exactly_these_attributes(
    private_proxy: ProxyCollection, telemetry: Telemetry, name: str
) -> None:
    storage = await _storage(private_proxy)
    telemetry.reset()
    private_proxy.reset()

    await OPERATIONS[name](storage)

    round_trips, result_count, moved = PINNED[name]
    payload_bytes = 0 if moved is None else await _stored_payload_bytes(private_proxy, moved)
    span = _only_span(telemetry)
    assert span.kind is SpanKind.CLIENT
    assert span.name == f"{name} {COLLECTION}"
    assert dict(span.attributes or {}) == _client_attributes(
        name,
        outcome="success",
        round_trips=round_trips,
        payload_bytes=payload_bytes,
        result_count=result_count,
    )
    assert private_proxy.round_trips == round_trips
    assert span.status.status_code is StatusCode.UNSET
    assert span.status.description is None
    assert span.events == ()
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "agent_framework_mongodb"


async def test_a_failed_save_is_a_client_span_with_error_type_and_error_status(
    private_proxy: ProxyCollection, telemetry: Telemetry
) -> None:
    storage = await _storage(private_proxy)
    telemetry.reset()
    private_proxy.reset()
    private_proxy.fail(INSERT, AutoReconnect(f"connection to {DRIVER_HOST} reset"))

    with pytest.raises(MongoDBTransientPersistenceError) as raised:
        await OPERATIONS["save"](storage)
    span = _only_span(telemetry)
    points = telemetry.points()
    await OPERATIONS["save"](storage)  # the retry stores what the failed save had encoded
    encoded = await _stored_payload_bytes(private_proxy, CHECKPOINT_ID)

    assert raised.value.category == "transient_persistence"
    assert span.kind is SpanKind.CLIENT
    assert span.name == f"save {COLLECTION}"
    assert dict(span.attributes or {}) == {
        **_client_attributes("save", outcome="error", round_trips=3, payload_bytes=encoded, result_count=0),
        "error.type": "transient_persistence",
    }
    assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, "transient_persistence")
    assert span.events == (), "errors are not span events (recording-errors.md)"
    _assert_clean(telemetry, [span], points)


async def test_a_non_package_error_is_typed_unexpected_and_a_missing_checkpoint_not_found(
    private_proxy: ProxyCollection, telemetry: Telemetry
) -> None:
    storage = await _storage(private_proxy)
    telemetry.reset()
    private_proxy.fail("find_one", RuntimeError(f"bug near {DRIVER_HOST}"))

    with pytest.raises(RuntimeError):
        await storage.load(CHECKPOINT_ID + "-000")
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load(CHECKPOINT_ID + "-404")

    failed, missing = telemetry.storage_spans()
    for span, category in ((failed, "unexpected"), (missing, "not_found")):
        assert span.kind is SpanKind.CLIENT
        assert span.name == f"load {COLLECTION}"
        assert dict(span.attributes or {}) == {
            **_client_attributes("load", outcome="error", round_trips=1, payload_bytes=0, result_count=0),
            "error.type": category,
        }
        assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, category)
        assert span.events == ()
    _assert_clean(telemetry, [failed, missing], telemetry.points())


async def test_provisioning_and_catalog_spans_name_the_collection(
    private_proxy: ProxyCollection, telemetry: Telemetry
) -> None:
    await ensure_checkpoint_indexes(private_proxy)
    await validate_checkpoint_indexes(private_proxy)
    catalog = MongoDBCheckpointCatalog(private_proxy, tenant_id=TENANT, application_id=APPLICATION)
    await catalog.list_runs()

    spans = telemetry.storage_spans()
    assert [(span.kind, span.name) for span in spans] == [
        (SpanKind.CLIENT, f"ensure_indexes {COLLECTION}"),
        (SpanKind.CLIENT, f"validate_indexes {COLLECTION}"),
        (SpanKind.CLIENT, f"list_runs {COLLECTION}"),
    ]
    for span in spans:
        assert attribute(span, "db.collection.name") == COLLECTION
        assert attribute(span, "db.namespace") == DATABASE
        assert attribute(span, "db.system.name") == "mongodb"


def test_the_span_name_falls_back_to_the_database_then_to_the_operation() -> None:
    # database-spans.md, "Name": {db.operation.name} {target}; the target is the collection, else
    # the namespace; without either, the operation name alone.
    from agent_framework_mongodb._telemetry import NO_TARGET, Target, span_name, target_of

    assert span_name("save", Target("checkpoints", "agents")) == "save checkpoints"
    assert span_name("save", Target(None, "agents")) == "save agents"
    assert span_name("save") == "save"

    class Nameless:
        name = 42
        database = None

    assert target_of(Nameless()) == NO_TARGET
    assert target_of(object()) == NO_TARGET
