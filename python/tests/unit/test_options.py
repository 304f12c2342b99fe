"""MongoDBCheckpointStorageOptions: every field validated at construction, named in the error."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from agent_framework_mongodb import MongoDBCheckpointStorageOptions, MongoDBConfigurationError
from agent_framework_mongodb.checkpoints.options import (
    ABSOLUTE_MAX_PAGE_SIZE,
    DEFAULT_OPERATION_TIMEOUT,
    MAX_IDENTIFIER_BYTES,
    MAX_KEEP_LAST,
    MAX_OPERATION_TIMEOUT,
    MAX_TTL,
)

REQUIRED: dict[str, Any] = {"tenant_id": "tenant-1", "workflow_name": "approval", "session_id": "run-1"}


def make(**overrides: Any) -> MongoDBCheckpointStorageOptions:
    return MongoDBCheckpointStorageOptions(**{**REQUIRED, **overrides})


def test_defaults() -> None:
    options = make()
    assert options.application_id is None
    assert options.ttl is None
    assert options.keep_last is None
    assert (options.page_size, options.max_page_size) == (100, 1000)
    assert options.allowed_checkpoint_types == ()


def test_is_frozen_slotted_and_hashable() -> None:
    options = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.session_id = "other"  # type: ignore[misc]
    assert not hasattr(options, "__dict__")
    assert hash(options) == hash(make())


def test_configuration_error_is_also_value_error() -> None:
    with pytest.raises(ValueError, match="tenant_id"):
        make(tenant_id="")


@pytest.mark.parametrize("field", ["tenant_id", "workflow_name", "session_id", "application_id"])
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "empty"),
        (" run", "white space"),
        ("run\n", "white space"),
        ("ru\x00n", "control"),
        ("ru\x1bn", "control"),
        ("ru\ud800n", "surrogate"),
        ("x" * (MAX_IDENTIFIER_BYTES + 1), "longer than"),
        (42, "must be a str"),
        (b"run", "must be a str"),
    ],
)
def test_identifiers_rejected_not_normalised(field: str, value: object, reason: str) -> None:
    with pytest.raises(MongoDBConfigurationError, match=f"{field}.*{reason}|{field} must be a str"):
        make(**{field: value})


def test_identifiers_taken_exactly_as_given() -> None:
    options = make(tenant_id="Tenant One", session_id="run/ä/1", application_id="app-1")
    assert options.tenant_id == "Tenant One"
    assert options.session_id == "run/ä/1"
    assert options.application_id == "app-1"


def test_identifier_at_byte_limit_is_accepted() -> None:
    assert make(session_id="x" * MAX_IDENTIFIER_BYTES).session_id == "x" * MAX_IDENTIFIER_BYTES


@pytest.mark.parametrize(
    "ttl",
    [
        timedelta(0),
        timedelta(microseconds=999),
        timedelta(seconds=-1),
        timedelta(seconds=59, microseconds=999_999),
        MAX_TTL * 2,
    ],
)
def test_ttl_out_of_range(ttl: timedelta) -> None:
    with pytest.raises(MongoDBConfigurationError, match="ttl"):
        make(ttl=ttl)


@pytest.mark.parametrize("ttl", [3600, 3600.0, "1h"])
def test_ttl_must_be_timedelta(ttl: object) -> None:
    with pytest.raises(MongoDBConfigurationError, match=r"ttl must be a datetime\.timedelta"):
        make(ttl=ttl)


@pytest.mark.parametrize("ttl", [timedelta(seconds=60), timedelta(days=30), MAX_TTL])
def test_ttl_in_range(ttl: timedelta) -> None:
    assert make(ttl=ttl).ttl == ttl


def test_ttl_below_the_ttl_monitor_period_is_refused_with_the_reason() -> None:
    with pytest.raises(
        MongoDBConfigurationError, match="at least 60 seconds, the period of MongoDB's TTL monitor"
    ):
        make(ttl=timedelta(seconds=30))


def test_ttl_must_outlast_the_counter_recheck_grace() -> None:
    # A save lasts at most operation_timeout; a shorter ttl could let TTL take the counter mid-save.
    assert make(ttl=timedelta(seconds=120), operation_timeout=60).ttl == timedelta(seconds=120)
    with pytest.raises(MongoDBConfigurationError, match="twice operation_timeout"):
        make(ttl=timedelta(seconds=119), operation_timeout=60)


def test_operation_timeout_defaults_to_thirty_seconds_and_bounds_the_recheck_grace() -> None:
    options = make()
    assert options.operation_timeout == DEFAULT_OPERATION_TIMEOUT == 30.0
    assert options.counter_recheck_grace == timedelta(seconds=60)
    assert make(operation_timeout=2.5).counter_recheck_grace == timedelta(seconds=5)


@pytest.mark.parametrize(
    "timeout", [0, -1, 0.0, float("nan"), float("inf"), MAX_OPERATION_TIMEOUT + 1, True, "30", None]
)
def test_operation_timeout_must_be_a_positive_bounded_number(timeout: object) -> None:
    with pytest.raises(MongoDBConfigurationError, match="operation_timeout must be a number of seconds"):
        make(operation_timeout=timeout)


@pytest.mark.parametrize("timeout", [0.001, 1, 30.0, MAX_OPERATION_TIMEOUT])
def test_operation_timeout_in_range(timeout: float) -> None:
    assert make(operation_timeout=timeout).operation_timeout == timeout


@pytest.mark.parametrize(
    ("page_size", "max_page_size", "field"),
    [
        (0, 1000, "page_size"),
        (1001, 1000, "page_size"),
        (True, 1000, "page_size"),
        (10.0, 1000, "page_size"),
        (10, 0, "max_page_size"),
        (10, ABSOLUTE_MAX_PAGE_SIZE + 1, "max_page_size"),
        (10, False, "max_page_size"),
    ],
)
def test_page_bounds(page_size: object, max_page_size: object, field: str) -> None:
    with pytest.raises(MongoDBConfigurationError, match=f"^{field}"):
        make(page_size=page_size, max_page_size=max_page_size)


def test_page_size_may_equal_max() -> None:
    assert make(page_size=5, max_page_size=5).page_size == 5


@pytest.mark.parametrize("keep_last", [0, -1, MAX_KEEP_LAST + 1, True, 3.0, "3", [3]])
def test_keep_last_must_be_none_or_a_bounded_int(keep_last: object) -> None:
    with pytest.raises(MongoDBConfigurationError, match="keep_last"):
        make(keep_last=keep_last)


@pytest.mark.parametrize(
    ("keep_last", "period"), [(None, 1), (1, 1), (19, 1), (20, 2), (100, 10), (MAX_KEEP_LAST, 1000)]
)
def test_keep_last_in_range_and_its_prune_period(keep_last: int | None, period: int) -> None:
    options = make(keep_last=keep_last)
    assert options.keep_last == keep_last
    assert options.prune_period == period


def test_allowed_types_accepts_any_iterable_and_stores_tuple() -> None:
    options = make(allowed_checkpoint_types=["my_app.models:OrderState", "pkg:Outer.Inner"])
    assert options.allowed_checkpoint_types == ("my_app.models:OrderState", "pkg:Outer.Inner")


@pytest.mark.parametrize(
    "keys",
    [
        "my_app.models:OrderState",
        [b"my_app:State"],
        ["my_app.models.OrderState"],
        ["my_app:"],
        [":State"],
        ["my app:State"],
        ["my_app:State<locals>"],
        ["my_app:Outer..Inner"],
        [42],
        42,
    ],
)
def test_allowed_types_rejected(keys: object) -> None:
    with pytest.raises(MongoDBConfigurationError, match="allowed_checkpoint_types"):
        make(allowed_checkpoint_types=keys)


def test_a_class_of_the_launched_script_is_refused_when_the_options_are_built() -> None:
    # Issue 31: a '__main__' class saved fine and failed only when another process resumed.
    script_class = type("ScriptState", (), {"__module__": "__main__"})
    for entry in ("__main__:ScriptState", script_class):
        with pytest.raises(MongoDBConfigurationError, match="Move the class into a module both import"):
            make(allowed_checkpoint_types=[entry])


def test_with_session_revalidates_and_keeps_everything_else() -> None:
    options = make(ttl=timedelta(hours=1), allowed_checkpoint_types=("a:B",), page_size=7)
    other = options.with_session("run-2")
    assert other == dataclasses.replace(options, session_id="run-2")
    with pytest.raises(MongoDBConfigurationError, match="session_id"):
        options.with_session(" run-2")


def test_fields_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        MongoDBCheckpointStorageOptions("t", "w", "s")  # type: ignore[call-arg]
