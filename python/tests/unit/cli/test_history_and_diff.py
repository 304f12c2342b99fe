"""``history`` and ``diff`` end to end over the in-process engine: text at 80 columns, ``--json``, errors."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import secrets
import uuid
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from click.testing import Result

from ..storage._support import APPLICATION, SESSION, TENANT, WORKFLOW
from ..storage.test_history import SECRET, run_of_supersteps, superstep
from .test_anywhere import ORDER, Order, invoke, seed
from .test_cli import Engine, save_run

SCOPE = ("--tenant", TENANT, "--application", APPLICATION)
RUN = (*SCOPE, "--workflow", WORKFLOW)
KEYS_VARIABLE = "AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS"


@pytest.fixture(autouse=True)
def eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv(KEYS_VARIABLE, raising=False)


def save(engine: Engine, checkpoints: list[WorkflowCheckpoint], **overrides: Any) -> list[str]:
    storage = engine.storage(**overrides)

    async def save_all() -> list[str]:
        return [await storage.save(checkpoint) for checkpoint in checkpoints]

    return asyncio.run(save_all())


def long_run() -> list[WorkflowCheckpoint]:
    """Two checkpoints with uuid ids and names longer than a table cell at 80 columns."""
    first, second = f"cp-{uuid.uuid4()}", f"cp-{uuid.uuid4()}"
    long_key = "customer_profile_enrichment_result_for_the_downstream_summariser_executor"
    return [
        superstep(first, state={long_key: [1]}, executors={"summariser-executor-with-a-long-name": {}}),
        superstep(
            second,
            previous=first,
            iteration=1,
            state={long_key: [1, 2]},
            executors={"summariser-executor-with-a-long-name": {"draft": SECRET}},
            requests=(f"request-{uuid.uuid4()}",),
        ),
    ]


def assert_fits(result: Result) -> None:
    assert result.exit_code == 0, result.output
    too_wide = [line for line in result.stdout.splitlines() if len(line) > 80]
    assert too_wide == []
    assert SECRET not in result.stdout


# -- history ------------------------------------------------------------------------------------


def test_history_prints_each_checkpoint_and_what_it_changed() -> None:
    engine = Engine()
    save(engine, run_of_supersteps())

    result = engine.invoke("history", *RUN, SESSION)

    assert_fits(result)
    lines = result.stdout.splitlines()
    headers = [line for line in lines if line.startswith("  sequence ")]
    created = re.compile(r"created \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00,")
    assert [created.sub("created T,", header) for header in headers] == [
        "  sequence 1, created T, iteration 0",
        "  sequence 2, created T, iteration 0 -> 1",
        "  sequence 3, created T, iteration 1 -> 2",
        "  sequence 4, created T, iteration 2 -> 3",
    ]
    assert [line for line in lines if line not in headers] == [
        "cp-0",
        "  + executor planner: dict, 5 bytes",
        "  + messages planner: 0 -> 1",
        "cp-1",
        "  + state plan: list, 19 bytes",
        "  ~ executor planner: dict, 5 bytes -> 23 bytes",
        "  - messages planner: 1 -> 0",
        "  + messages writer: 0 -> 1",
        "cp-2",
        "  + executor writer: dict, 55 bytes",
        "  - messages writer: 1 -> 0",
        "  + request approve-1: dict from approver, expects str; payload 51 bytes, fields",
        "      q",
        "cp-3",
        "  + state approved: bool, 4 bytes",
        "  - request approve-1 resolved: dict from approver, expects str; payload 51",
        "      bytes, fields q",
    ]
    assert lines.index(headers[0]) == 1  # each header follows its checkpoint's id


def test_history_json_lists_every_checkpoint_with_its_diff() -> None:
    engine = Engine()
    save(engine, run_of_supersteps())

    result = engine.invoke("history", *RUN, "--json", SESSION)

    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)
    assert [entry["checkpoint_id"] for entry in entries] == ["cp-0", "cp-1", "cp-2", "cp-3"]
    assert [entry["sequence"] for entry in entries] == [1, 2, 3, 4]
    assert all(entry["created_at"].endswith("+00:00") for entry in entries)
    last = entries[-1]["diff"]
    assert last["before_checkpoint_id"] == "cp-2"
    assert (last["iteration_before"], last["iteration_after"]) == (2, 3)
    assert [(change["name"], change["change"]) for change in last["state"]] == [("approved", "added")]
    assert last["state"][0]["after"] == {"type": "bool", "bytes": 4}
    assert last["pending_requests"] == [
        {
            "request_id": "approve-1",
            "change": "resolved",
            "event_type": "WorkflowEvent",
            "request_type": "dict",
            "response_type": "str",
            "source_executor_id": "approver",
            "data": {"type": "dict", "bytes": 51, "fields": ["q"]},
        }
    ]
    assert SECRET not in result.stdout
    assert result.stdout == json.dumps(entries, indent=2) + "\n"  # printed entry by entry, one document


def test_history_reads_past_the_first_page() -> None:
    engine = Engine()
    ids = save_run(engine, 103)  # the command's storage reads pages of 100

    result = engine.invoke("history", *RUN, "--json", SESSION)

    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)
    assert [entry["checkpoint_id"] for entry in entries] == ids
    assert [entry["sequence"] for entry in entries] == list(range(1, 104))
    assert [change["change"] for entry in entries[1:] for change in entry["diff"]["state"]] == [
        "changed"
    ] * 102


def test_history_folds_long_names_at_80_columns() -> None:
    engine = Engine()
    checkpoints = long_run()
    save(engine, checkpoints)

    result = engine.invoke("history", *RUN, SESSION)

    assert_fits(result)
    assert checkpoints[1].checkpoint_id in result.stdout
    assert "customer_profile_enrichment" in result.stdout


def test_history_says_when_a_checkpoint_has_no_changes_and_when_its_parent_is_another() -> None:
    engine = Engine()
    save(engine, [superstep("cp-a"), superstep("cp-b", previous="cp-elsewhere")])

    result = engine.invoke("history", *RUN, SESSION)

    assert_fits(result)
    lines = result.stdout.splitlines()
    assert lines[lines.index("cp-b") + 2 :] == [
        "  parent cp-elsewhere; compared with the checkpoint before it, cp-a",
        "  no changes",
    ]


def test_history_of_a_signed_run_verifies_it(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine()
    key = secrets.token_bytes(32)
    save(engine, run_of_supersteps(), signing_keys=[key])

    monkeypatch.setenv(KEYS_VARIABLE, base64.b64encode(key).decode())
    signed = engine.invoke("history", *RUN, "--json", SESSION)
    monkeypatch.setenv(KEYS_VARIABLE, base64.b64encode(secrets.token_bytes(32)).decode())
    forged = engine.invoke("history", *RUN, SESSION)

    assert signed.exit_code == 0, signed.output
    assert [entry["checkpoint_id"] for entry in json.loads(signed.stdout)] == ["cp-0", "cp-1", "cp-2", "cp-3"]
    assert forged.exit_code == 1
    assert "[integrity]" in forged.stderr
    assert forged.stdout == ""


def test_history_of_an_empty_run() -> None:
    engine = Engine()
    text = engine.invoke("history", *RUN, SESSION)
    as_json = engine.invoke("history", *RUN, "--json", SESSION)
    assert text.exit_code == 0, text.output
    assert text.stdout == f"No checkpoints are stored for {WORKFLOW}/{SESSION}.\n"
    assert json.loads(as_json.stdout) == []


# -- diff ---------------------------------------------------------------------------------------


def test_diff_shows_both_checkpoints_side_by_side() -> None:
    engine = Engine()
    save(engine, run_of_supersteps())

    result = engine.invoke("diff", *RUN, SESSION, "cp-1", "cp-3")

    assert_fits(result)
    lines = result.stdout.splitlines()
    assert lines[:4] == [
        "A: cp-1",
        "  iteration 1, timestamp 2025-01-02T03:04:05.678000+00:00",
        "B: cp-3",
        "  iteration 3, timestamp 2025-01-02T03:04:05.678000+00:00",
    ]
    rows = [[cell.strip() for cell in line.strip("│").split("│")] for line in lines if line.startswith("│")]
    assert rows == [
        ["approved", "-", "bool, 4 bytes", "added"],
        ["plan", "list, 19 bytes", "list, 19 bytes", "unchanged"],
        ["planner", "dict, 23 bytes", "dict, 23 bytes", "unchanged"],
        ["writer", "-", "dict, 55 bytes", "added"],
        ["writer", "1", "0", "-1"],
        ["-", "-", "-", "-"],  # no pending request in either
    ]


def test_diff_folds_long_names_at_80_columns() -> None:
    engine = Engine()
    checkpoints = long_run()
    save(engine, checkpoints)

    result = engine.invoke("diff", *RUN, SESSION, checkpoints[0].checkpoint_id, checkpoints[1].checkpoint_id)

    assert_fits(result)
    assert checkpoints[1].checkpoint_id in result.stdout
    assert "changed" in result.stdout
    assert "approver" in result.stdout  # the pending request, by the executor that asked


def test_diff_json() -> None:
    engine = Engine()
    save(engine, run_of_supersteps())

    result = engine.invoke("diff", *RUN, "--json", SESSION, "cp-0", "cp-2")

    assert result.exit_code == 0, result.output
    compared = json.loads(result.stdout)
    assert (compared["before_checkpoint_id"], compared["after_checkpoint_id"]) == ("cp-0", "cp-2")
    assert [(change["name"], change["change"]) for change in compared["executors"]] == [
        ("planner", "changed"),
        ("writer", "added"),
    ]
    assert compared["messages"] == [{"source": "planner", "before": 1, "after": 0, "delta": -1}]
    assert [request["change"] for request in compared["pending_requests"]] == ["added"]
    assert SECRET not in result.stdout


@pytest.mark.parametrize(("first", "second", "label"), [("cp-nope", "cp-1", "A"), ("cp-1", "cp-nope", "B")])
def test_diff_of_an_unknown_checkpoint_is_not_found(first: str, second: str, label: str) -> None:
    engine = Engine()
    save(engine, run_of_supersteps())

    result = engine.invoke("diff", *RUN, SESSION, first, second)

    assert result.exit_code == 1
    assert result.stdout == ""
    assert f"[not_found] CHECKPOINT_{label} 'cp-nope':" in result.stderr


def test_diff_never_reaches_another_runs_checkpoint() -> None:
    engine = Engine()
    save(engine, run_of_supersteps())
    save(engine, [superstep("cp-other")], session_id="another-session")

    result = engine.invoke("diff", *RUN, SESSION, "cp-0", "cp-other")

    assert result.exit_code == 1
    assert "[not_found] CHECKPOINT_B 'cp-other':" in result.stderr


# -- --allow-type -------------------------------------------------------------------------------


def test_history_and_diff_need_allow_type_for_an_application_class(tmp_path: Path) -> None:
    engine = tmp_path / "engine.journal"
    ids = seed(engine, allowed=(Order,))
    file = ("--engine-file", str(engine))

    for command in (("history", *RUN, SESSION), ("diff", *RUN, SESSION, *ids)):
        refused = invoke(*file, *command)
        allowed = invoke(*file, *command[:1], "--allow-type", ORDER, "--json", *command[1:])
        assert refused.exit_code == 1, command
        assert "[mapping]" in refused.stderr
        assert ORDER in refused.stderr
        assert "Here: --allow-type MODULE:QUALNAME" in refused.stderr
        assert allowed.exit_code == 0, allowed.output
        assert "Order" in allowed.stdout  # the type's name, never its fields

    malformed = invoke(*file, "history", "--allow-type", "not a class", *RUN, SESSION)
    assert malformed.exit_code == 2
    assert "book" not in invoke(*file, "history", "--allow-type", ORDER, *RUN, SESSION).stdout


def test_names_are_printed_verbatim_and_cannot_drive_the_terminal() -> None:
    engine = Engine()
    hostile = {"[red]k[/red]": 1, "k\x1b[2J": 2, "two\nlines": 3}
    save(engine, [superstep("cp-a"), superstep("cp-b", previous="cp-a", state=hostile)])

    history = engine.invoke("history", *RUN, SESSION)
    compared = engine.invoke("diff", *RUN, SESSION, "cp-a", "cp-b")

    for result in (history, compared):
        assert_fits(result)
        assert "\x1b" not in result.stdout
        assert "[red]k[/red]" in result.stdout  # not taken for markup
        assert "k\\x1b[2J" in result.stdout
        assert "two\\nlines" in result.stdout
    assert "  + state two\\nlines: int, 5 bytes" in history.stdout.splitlines()


def test_the_oldest_retained_checkpoint_is_compared_with_nothing() -> None:
    engine = Engine()
    save(engine, run_of_supersteps(), keep_last=2)

    result = engine.invoke("history", *RUN, SESSION)

    assert_fits(result)
    lines = result.stdout.splitlines()
    assert lines[0] == "cp-2"
    assert lines[2:6] == [
        "  parent cp-1; compared with the checkpoint before it, -",
        "  + state plan: list, 19 bytes",
        "  + executor planner: dict, 23 bytes",
        "  + executor writer: dict, 55 bytes",
    ]
    assert "cp-3" in lines
