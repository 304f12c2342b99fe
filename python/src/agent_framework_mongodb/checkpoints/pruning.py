"""Pruning across runs: which idle runs a prune clears, which it skips and why, and what it cleared.

A prune is planned, then carried out (``MongoDBCheckpointCatalog.plan_prune`` and ``prune``). The
plan pages through the tenant's runs idle for longer than ``older_than`` by the server's clock (the
clock that wrote each run's ``allocated_at``; ``runs.idle_for``) and sets aside the runs waiting for
input unless asked to include them. Carrying it out re-reads each planned run's counter just before
clearing it (:func:`still_as_planned`), so a run saved since the plan, whose new checkpoint may wait
for input, is skipped instead of cleared. A save that starts between that read and the clear is
still lost: a prune is for runs idle far longer than any pause, and ``clear_run``'s rule holds
(quiesce a run's writers before clearing it).
"""

from __future__ import annotations

import dataclasses
import enum
from datetime import timedelta
from typing import Any

from .._telemetry import count_round_trip
from ..errors import MongoDBConfigurationError, translated_driver_errors
from .driver import CheckpointCollection
from .indexes import SIMPLE_COLLATION
from .queries import counter_filter
from .results import MongoDBCheckpointClearResult, MongoDBRunSummary
from .scope import RunScope

__all__ = [
    "MongoDBClearedRun",
    "MongoDBPrunePlan",
    "MongoDBPruneResult",
    "MongoDBSkipReason",
    "MongoDBSkippedRun",
    "split_waiting",
    "still_as_planned",
    "validate_older_than",
]

_ID_ONLY = {"_id": 1}


class MongoDBSkipReason(enum.Enum):
    """Why a prune left an idle run alone."""

    WAITING_FOR_INPUT = "waiting for input"
    """Its latest checkpoint holds pending requests (``waiting_for_input``): a human's answer may
    still resume it. A prune clears it only with ``include_waiting``."""

    SAVED_SINCE_PLANNED = "saved since the prune was planned"
    """Its counter changed between the plan and the clear: the run is active again."""


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBSkippedRun:
    """An idle run a prune did not clear.

    Attributes:
        run: The run as the plan listed it.
        reason: Why it was skipped.
    """

    run: MongoDBRunSummary
    reason: MongoDBSkipReason


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBPrunePlan:
    """What a prune would do: the idle runs it would clear, and those it would skip.

    Attributes:
        tenant_id: The catalog's tenant; only that catalog carries the plan out.
        application_id: The catalog's application (``None``: runs stored without one).
        older_than: A run is idle when its latest save is longer ago than this, by the server's clock.
        include_waiting: Whether runs waiting for input are cleared too.
        runs: The idle runs to clear, newest activity first.
        skipped: The idle runs left alone (without ``include_waiting``, those waiting for input).
    """

    tenant_id: str
    application_id: str | None
    older_than: timedelta
    include_waiting: bool
    runs: tuple[MongoDBRunSummary, ...]
    skipped: tuple[MongoDBSkippedRun, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBClearedRun:
    """A run a prune cleared, and what ``clear_run`` removed of it.

    Attributes:
        run: The run as the plan listed it.
        result: The clear's counts.
    """

    run: MongoDBRunSummary
    result: MongoDBCheckpointClearResult


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBPruneResult:
    """What a prune did.

    Attributes:
        cleared: The runs cleared, in the plan's order.
        skipped: The plan's skipped runs, then those found saved since the plan.
    """

    cleared: tuple[MongoDBClearedRun, ...]
    skipped: tuple[MongoDBSkippedRun, ...]


def validate_older_than(older_than: object) -> timedelta:
    """``older_than`` if it is a positive ``timedelta`` of whole milliseconds or more, else raise."""
    if not isinstance(older_than, timedelta) or older_than < timedelta(milliseconds=1):
        raise MongoDBConfigurationError(
            f"older_than must be a datetime.timedelta of at least a millisecond, not {older_than!r}."
        )
    return older_than


def split_waiting(
    idle: list[MongoDBRunSummary], *, include_waiting: bool
) -> tuple[tuple[MongoDBRunSummary, ...], tuple[MongoDBSkippedRun, ...]]:
    """The idle runs to clear, and those skipped for waiting for input (none with ``include_waiting``)."""
    if include_waiting:
        return tuple(idle), ()
    clear = tuple(run for run in idle if not run.waiting_for_input)
    skipped = tuple(
        MongoDBSkippedRun(run, MongoDBSkipReason.WAITING_FOR_INPUT) for run in idle if run.waiting_for_input
    )
    return clear, skipped


async def still_as_planned(
    collection: CheckpointCollection, scope: RunScope, run: MongoDBRunSummary, *, include_waiting: bool
) -> bool:
    """Whether the run's counter is the one the plan listed (one round trip by its ``_id``).

    Every counter update sets ``allocated_at`` to the server's ``$$NOW``, and only an update sets
    ``waiting_for_input``, so an unchanged ``allocated_at`` means an unchanged summary; the
    condition on ``waiting_for_input`` is stated as well, so the read alone decides.
    """
    query: dict[str, Any] = {**counter_filter(scope), "allocated_at": run.updated_at}
    if not include_waiting:
        query["waiting_for_input"] = {"$ne": True}
    with translated_driver_errors(operation="read", action="check a run before clearing it"):
        count_round_trip()
        found = await collection.find_one(query, _ID_ONLY, sort=None, collation=SIMPLE_COLLATION)
    return found is not None
