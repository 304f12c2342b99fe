"""One completion record per public storage operation: a log record, a span and metrics.

A log record carries exactly: feature, operation, outcome, a bounded result count, the duration
and the stable error category. The span and the metrics carry the same fields plus the
operation's round trips and payload bytes, under the database semantic-convention names that
identify the system and the operation. The span is the operation's database client span
(kind ``CLIENT``, ADR 0035) and also names the collection and database it works on, as the
application configured them. None of them carries ids, scopes, payloads, filters, driver
messages, hosts or credentials; the log record and the metrics carry no database or collection
name either.

Spans and metrics go through ``opentelemetry-api`` (a dependency of ``agent-framework-core``);
without an SDK configured they are the API's no-ops. The span is started as the current span, so
it nests under Agent Framework's workflow spans, and driver spans (if the application instruments
pymongo) nest under it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Final

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .errors import MongoDBIntegrationError, MongoDBMappingError

__all__ = [
    "INSTRUMENTATION_SCOPE",
    "LOGGER_NAME",
    "MAX_LOGGED_COUNT",
    "NO_TARGET",
    "OperationRecord",
    "Target",
    "completion_log",
    "count_payload_bytes",
    "count_round_trip",
    "log_prune_failure",
    "span_name",
    "target_of",
]

LOGGER_NAME: Final = "agent_framework_mongodb"
MAX_LOGGED_COUNT: Final = 10_000
"""Counts above this are logged as this value; a log field must stay a small number."""

_FEATURE: Final = "checkpoint_storage"
_EXPECTED_CATEGORIES: Final = frozenset({"not_found"})
"""Error outcomes callers meet in normal use (a framework probing for a checkpoint): INFO, not WARNING."""
_ERROR_LEVEL_OPERATIONS: Final = frozenset({"save"})
"""Operations whose failure is logged at ERROR, whatever the category. Agent Framework catches a
failed save, logs its own warning and carries on (``create_checkpoint_if_enabled`` in
``agent_framework/_workflows/_runner.py``), so the run continues without the checkpoint a
resume would need; this record is the storage's own signal of it."""

# -- Trace and metric names --------------------------------------------------------------
# Database client conventions: https://opentelemetry.io/docs/specs/semconv/database/database-spans/
# (span kind CLIENT; name "{db.operation.name} {target}", the target being db.collection.name;
# db.system.name, db.operation.name, db.collection.name, db.namespace; error.type and status ERROR
# per https://opentelemetry.io/docs/specs/semconv/general/recording-errors/, no exception event)
# and https://opentelemetry.io/docs/specs/semconv/database/database-metrics/
# (db.client.operation.duration in seconds with its advised buckets); MongoDB:
# https://opentelemetry.io/docs/specs/semconv/database/mongodb/ (the system is "mongodb",
# db.namespace is the database name; the sampling-relevant names are given at span creation).
# db.system is the same value under its name before v1.26, for backends still on it.
# db.operation.name is the storage operation (save, load, ...), not a MongoDB command: the span
# covers all of the operation's commands, and the database-spans page recommends instrumenting a
# client's higher-level API, whose operation name it is (ADR 0035). server.address/server.port are
# not set: the conventions want the address of the client configuration, which pymongo keeps private
# (its public address/nodes are the servers selected or discovered), and hosts stay out of telemetry.
# db.query.text is not set: filters name data. Names without a convention are namespaced by the package.
INSTRUMENTATION_SCOPE: Final = "agent_framework_mongodb"
DB_SYSTEM_NAME: Final = "db.system.name"
DB_SYSTEM: Final = "db.system"
DB_OPERATION_NAME: Final = "db.operation.name"
DB_COLLECTION_NAME: Final = "db.collection.name"
DB_NAMESPACE: Final = "db.namespace"
ERROR_TYPE: Final = "error.type"
OUTCOME: Final = "agent_framework_mongodb.outcome"
ROUND_TRIPS: Final = "agent_framework_mongodb.round_trips"
PAYLOAD_BYTES: Final = "agent_framework_mongodb.payload_bytes"
RESULT_COUNT: Final = "agent_framework_mongodb.result_count"
OPERATION_DURATION: Final = "db.client.operation.duration"
PAYLOAD_SIZE: Final = "agent_framework_mongodb.payload.size"
SAVE_FAILURES: Final = "agent_framework_mongodb.save.failures"
_MONGODB: Final = "mongodb"
_DURATION_BUCKETS: Final = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)

_tracer = trace.get_tracer(INSTRUMENTATION_SCOPE)
_meter = metrics.get_meter(INSTRUMENTATION_SCOPE)
_duration = _meter.create_histogram(
    OPERATION_DURATION,
    unit="s",
    description="Duration of checkpoint storage operations, all round trips included.",
    explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
)
_payload_size = _meter.create_histogram(
    PAYLOAD_SIZE,
    unit="By",
    description="Encoded checkpoint payload bytes a storage operation stored or loaded.",
)
_save_failures = _meter.create_counter(
    SAVE_FAILURES,
    unit="{failure}",
    description="Failed or refused checkpoint saves, by error category.",
)

_logger = logging.getLogger(LOGGER_NAME)
# A library must not print through logging's last-resort handler when the application has not
# configured logging; applications that do configure it see every record.
_logger.addHandler(logging.NullHandler())


@dataclasses.dataclass(slots=True)
class OperationRecord:
    """Filled in by the operation while it runs."""

    result_count: int = 0
    round_trips: int = 0
    payload_bytes: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """The collection an operation works on and its database, as the application named them.

    Deployment configuration, not run data: the span carries them (``db.collection.name``,
    ``db.namespace``); log records and metrics do not. ``None`` when not known.
    """

    collection: str | None = None
    namespace: str | None = None


NO_TARGET: Final = Target()


def target_of(collection: object) -> Target:
    """The names of ``collection`` (a pymongo ``AsyncCollection`` or an object duck-typing one).

    Read without I/O from its ``name`` and ``database.name``; a name that is missing or not a
    non-empty string is left out rather than guessed.
    """
    name = getattr(collection, "name", None)
    namespace = getattr(getattr(collection, "database", None), "name", None)
    return Target(
        name if isinstance(name, str) and name else None,
        namespace if isinstance(namespace, str) and namespace else None,
    )


_current: ContextVar[OperationRecord | None] = ContextVar("agent_framework_mongodb_operation", default=None)
"""The record of the operation running in this context, for the steps below it to add to."""


def count_round_trip() -> None:
    """Count one request to the server against the running operation (if any)."""
    record = _current.get()
    if record is not None:
        record.round_trips += 1


def count_payload_bytes(size: int) -> None:
    """Add ``size`` encoded payload bytes stored or loaded to the running operation (if any)."""
    record = _current.get()
    if record is not None:
        record.payload_bytes += size


@contextmanager
def completion_log(operation: str, target: Target = NO_TARGET) -> Generator[OperationRecord, None, None]:
    """Record one completion when the block ends: success, error or cancellation.

    The block runs inside the operation's span, a database client span on ``target``. Errors
    propagate unchanged. Cancellation is never caught: it reaches ``finally`` with the outcome
    still unset, and is recorded as ``cancelled``.
    """
    record = OperationRecord()
    token = _current.set(record)
    started = time.perf_counter()
    outcome = "cancelled"
    category: str | None = None
    classes: tuple[str, ...] = ()
    # Exceptions are not recorded on the span: their messages are not data-free by contract, and
    # the conventions advise against exception events (recording-errors.md).
    name, identifying = _span_start(operation, target)
    with _tracer.start_as_current_span(
        name,
        kind=SpanKind.CLIENT,
        attributes=identifying,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield record
            outcome = "success"
        except MongoDBIntegrationError as error:
            outcome, category = "error", error.category
            if isinstance(error, MongoDBMappingError):
                classes = error.class_names
            raise
        except Exception:
            outcome, category = "error", "unexpected"
            raise
        finally:
            _current.reset(token)
            seconds = time.perf_counter() - started
            _trace_and_measure(
                span, operation, outcome=outcome, category=category, record=record, seconds=seconds
            )
            level = _level(operation, outcome, category)
            if _logger.isEnabledFor(level):
                _emit(
                    level,
                    operation,
                    outcome=outcome,
                    count=record.result_count,
                    seconds=seconds,
                    category=category,
                    classes=classes,
                )


def span_name(operation: str, target: Target = NO_TARGET) -> str:
    """``{db.operation.name} {target}``, the target being the collection (else the database); the
    operation alone when neither is known (database-spans.md, "Name")."""
    where = target.collection or target.namespace
    return f"{operation} {where}" if where else operation


@functools.lru_cache(maxsize=256)
def _span_start(operation: str, target: Target) -> tuple[str, Mapping[str, str]]:
    """The span's name and the attributes known when it starts, given then so samplers see them.

    Built once per operation and collection: the same few pairs recur on every call.
    """
    attributes = {DB_SYSTEM_NAME: _MONGODB, DB_SYSTEM: _MONGODB, DB_OPERATION_NAME: operation}
    if target.collection is not None:
        attributes[DB_COLLECTION_NAME] = target.collection
    if target.namespace is not None:
        attributes[DB_NAMESPACE] = target.namespace
    return span_name(operation, target), MappingProxyType(attributes)


def _trace_and_measure(
    span: Span, operation: str, *, outcome: str, category: str | None, record: OperationRecord, seconds: float
) -> None:
    labels: dict[str, str] = {DB_SYSTEM_NAME: _MONGODB, DB_OPERATION_NAME: operation, OUTCOME: outcome}
    if category is not None:
        labels[ERROR_TYPE] = category
    if span.is_recording():
        span.set_attributes(
            {
                **labels,
                ROUND_TRIPS: record.round_trips,
                PAYLOAD_BYTES: record.payload_bytes,
                RESULT_COUNT: min(max(record.result_count, 0), MAX_LOGGED_COUNT),
            }
        )
        if category is not None:
            span.set_status(Status(StatusCode.ERROR, category))
    _duration.record(seconds, labels)
    if record.payload_bytes:
        _payload_size.record(record.payload_bytes, {DB_SYSTEM_NAME: _MONGODB, DB_OPERATION_NAME: operation})
    if category is not None and operation == "save":
        _save_failures.add(1, {DB_SYSTEM_NAME: _MONGODB, ERROR_TYPE: category})


def _level(operation: str, outcome: str, category: str | None) -> int:
    if outcome != "error":
        return logging.DEBUG
    if operation in _ERROR_LEVEL_OPERATIONS:
        return logging.ERROR
    return logging.INFO if category in _EXPECTED_CATEGORIES else logging.WARNING


def _emit(
    level: int,
    operation: str,
    *,
    outcome: str,
    count: int,
    seconds: float,
    category: str | None,
    classes: tuple[str, ...] = (),
) -> None:
    duration_ms = round(seconds * 1000, 3)
    count = min(max(count, 0), MAX_LOGGED_COUNT)
    # Class names are code, not run data (the one thing a record names beyond its numbers): a
    # refused save's record says which class to list.
    named = tuple(name[:_LONGEST_CLASS_NAME] for name in classes[:_MOST_CLASSES])
    _logger.log(
        level,
        "%s %s %s count=%d duration_ms=%.3f category=%s%s",
        _FEATURE,
        operation,
        outcome,
        count,
        duration_ms,
        category or "none",
        f" classes={','.join(named)}" if named else "",
        extra={
            "feature": _FEATURE,
            "operation": operation,
            "outcome": outcome,
            "result_count": count,
            "duration_ms": duration_ms,
            "error_category": category,
            "class_names": named,
        },
    )


_MOST_CLASSES: Final = 20
_LONGEST_CLASS_NAME: Final = 300


def log_prune_failure(category: str) -> None:
    """A ``keep_last`` prune failed after its save stored the checkpoint: WARNING, never raised.

    Like the completion record, it names only the stable error category.
    """
    _logger.warning(
        "%s save keep_last prune failed category=%s; the checkpoint is stored, the next prune catches up",
        _FEATURE,
        category,
        extra={
            "feature": _FEATURE,
            "operation": "save",
            "outcome": "prune_failed",
            "error_category": category,
        },
    )
