"""``show``, ``history`` and ``diff`` name each pending request: its class, the answer it expects,
the executor that asked and its payload's class, size and field names, never a value."""

from __future__ import annotations

import asyncio
import json
import pickle
import re
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowEvent

from ..storage._support import APPLICATION, SESSION, TENANT, WORKFLOW, make_checkpoint
from .test_anywhere import ORDER, Order
from .test_cli import Engine

RUN = ("--tenant", TENANT, "--application", APPLICATION, "--workflow", WORKFLOW)
SECRET = "a-customer-note-never-printed"  # noqa: S105 - a marker that must not be printed
REQUEST_ID = "approve-order-2026-12-07-eu-west-customer-4711-retry-3"
GATE = "order-approval-gate-with-a-rather-long-executor-name"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def waiting(checkpoint_id: str, previous: str | None = None) -> WorkflowCheckpoint:
    """A checkpoint waiting for two answers: an application class's request and a plain dict's."""
    checkpoint = make_checkpoint(checkpoint_id, previous=previous, state={})
    checkpoint.pending_request_info_events = {
        REQUEST_ID: WorkflowEvent.request_info(
            request_id=REQUEST_ID, source_executor_id=GATE, request_data=Order(7, SECRET), response_type=bool
        ),
        "ask-2": WorkflowEvent.request_info(
            request_id="ask-2",
            source_executor_id="clarifier",
            request_data={"question": SECRET},
            response_type=str,
        ),
    }
    return checkpoint


def save(engine: Engine, *checkpoints: WorkflowCheckpoint) -> None:
    storage = engine.storage(allowed_checkpoint_types=(Order,))

    async def save_all() -> None:
        for checkpoint in checkpoints:
            await storage.save(checkpoint)

    asyncio.run(save_all())


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Engine:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("AGENT_FRAMEWORK_MONGODB_ALLOW_TYPES", raising=False)
    engine = Engine()
    save(engine, waiting("cp-waiting"))
    return engine


def order_bytes() -> int:
    return len(pickle.dumps(Order(7, SECRET), protocol=5))


def test_show_json_names_each_request_and_its_payload(engine: Engine) -> None:
    result = engine.invoke("show", *RUN, "--allow-type", ORDER, "--json", SESSION, "cp-waiting")

    assert result.exit_code == 0, result.output
    requests: dict[str, Any] = json.loads(result.stdout)["pending_requests"]
    assert requests[REQUEST_ID] == {
        "event_type": "WorkflowEvent",
        "request_type": "Order",
        "response_type": "bool",
        "source_executor_id": GATE,
        "data": {"type": "Order", "bytes": order_bytes(), "fields": ["item", "number"]},
    }
    assert requests["ask-2"]["data"]["fields"] == ["question"]
    assert requests["ask-2"]["response_type"] == "str"
    assert SECRET not in result.stdout


def request_blocks(stdout: str) -> list[str]:
    lines = _ANSI.sub("", stdout).splitlines()
    start = lines.index("Pending requests: 2")
    return lines[start + 1 : start + 15]


EXPECTED_BLOCKS = [
    "approve-order-2026-12-07-eu-west-customer-4711-retry-3",
    "  request: Order",
    "  event:   WorkflowEvent",
    "  expects: bool",
    f"  from:    {GATE}",
    f"  payload: Order, {order_bytes()} bytes",
    "  fields:  item, number",
    "ask-2",
    "  request: dict",
    "  event:   WorkflowEvent",
    "  expects: str",
    "  from:    clarifier",
]


def test_show_names_each_request_on_an_80_column_terminal(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # Rich: standard output is a terminal
    result = engine.invoke("show", *RUN, "--allow-type", ORDER, SESSION, "cp-waiting")

    assert result.exit_code == 0, result.output
    assert request_blocks(result.stdout)[:12] == EXPECTED_BLOCKS
    assert all(len(line) <= 80 for line in _ANSI.sub("", result.stdout).splitlines())
    assert "…" not in result.stdout
    assert SECRET not in result.stdout


def test_show_names_each_request_in_a_pipe(engine: Engine) -> None:
    result = engine.invoke("show", *RUN, "--allow-type", ORDER, SESSION, "cp-waiting")

    assert result.exit_code == 0, result.output
    assert "\x1b[" not in result.stdout
    assert request_blocks(result.stdout)[:12] == EXPECTED_BLOCKS
    assert SECRET not in result.stdout


def test_show_of_a_checkpoint_without_requests_says_none(engine: Engine) -> None:
    save(engine, make_checkpoint("cp-idle", state={}))
    result = engine.invoke("show", *RUN, SESSION, "cp-idle")
    assert result.exit_code == 0, result.output
    assert "Pending requests: none" in result.stdout.splitlines()


def test_history_and_diff_name_the_requests_as_show_does(engine: Engine) -> None:
    answered = make_checkpoint("cp-answered", previous="cp-waiting", state={})
    save(engine, answered)

    history = engine.invoke("history", *RUN, "--allow-type", ORDER, SESSION)
    diff = engine.invoke("diff", *RUN, "--allow-type", ORDER, "--json", SESSION, "cp-waiting", "cp-answered")

    assert history.exit_code == diff.exit_code == 0, history.output + diff.output
    text = " ".join(line.strip() for line in history.stdout.splitlines())  # unfolded
    assert (
        f"+ request {REQUEST_ID}: Order from {GATE}, expects bool; payload {order_bytes()} bytes, "
        "fields item, number"
    ) in text
    assert f"- request {REQUEST_ID} resolved: Order from {GATE}, expects bool" in text
    assert all(len(line) <= 80 for line in history.stdout.splitlines())
    resolved = {request["request_id"]: request for request in json.loads(diff.stdout)["pending_requests"]}
    assert resolved[REQUEST_ID]["change"] == "resolved"
    assert resolved[REQUEST_ID]["data"] == {
        "type": "Order",
        "bytes": order_bytes(),
        "fields": ["item", "number"],
    }
    assert SECRET not in history.stdout + diff.stdout
