"""One completion log record per public storage operation, and nothing that identifies data.

A record carries exactly: feature, operation, outcome, a bounded result count, the duration and
the stable error category. It never carries ids, scopes, payloads, database or collection names,
filters, driver messages, hosts or credentials: the message is built from those fields alone.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Generator
from contextlib import contextmanager
from typing import Final

from .errors import MongoDBIntegrationError

__all__ = ["LOGGER_NAME", "MAX_LOGGED_COUNT", "OperationRecord", "completion_log", "log_prune_failure"]

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

_logger = logging.getLogger(LOGGER_NAME)
# A library must not print through logging's last-resort handler when the application has not
# configured logging; applications that do configure it see every record.
_logger.addHandler(logging.NullHandler())


@dataclasses.dataclass(slots=True)
class OperationRecord:
    """Filled in by the operation while it runs."""

    result_count: int = 0


@contextmanager
def completion_log(operation: str) -> Generator[OperationRecord, None, None]:
    """Log one completion record when the block ends: success, error or cancellation.

    Errors propagate unchanged. Cancellation is never caught: it reaches ``finally`` with the
    outcome still unset, and is logged as ``cancelled``.
    """
    record = OperationRecord()
    started = time.perf_counter()
    outcome = "cancelled"
    category: str | None = None
    try:
        yield record
        outcome = "success"
    except MongoDBIntegrationError as error:
        outcome, category = "error", error.category
        raise
    except Exception:
        outcome, category = "error", "unexpected"
        raise
    finally:
        level = _level(operation, outcome, category)
        if _logger.isEnabledFor(level):
            _emit(
                level,
                operation,
                outcome=outcome,
                count=record.result_count,
                seconds=time.perf_counter() - started,
                category=category,
            )


def _level(operation: str, outcome: str, category: str | None) -> int:
    if outcome != "error":
        return logging.DEBUG
    if operation in _ERROR_LEVEL_OPERATIONS:
        return logging.ERROR
    return logging.INFO if category in _EXPECTED_CATEGORIES else logging.WARNING


def _emit(
    level: int, operation: str, *, outcome: str, count: int, seconds: float, category: str | None
) -> None:
    duration_ms = round(seconds * 1000, 3)
    count = min(max(count, 0), MAX_LOGGED_COUNT)
    _logger.log(
        level,
        "%s %s %s count=%d duration_ms=%.3f category=%s",
        _FEATURE,
        operation,
        outcome,
        count,
        duration_ms,
        category or "none",
        extra={
            "feature": _FEATURE,
            "operation": operation,
            "outcome": outcome,
            "result_count": count,
            "duration_ms": duration_ms,
            "error_category": category,
        },
    )


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
