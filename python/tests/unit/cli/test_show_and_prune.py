"""``show`` and ``prune`` end to end over the in-process engine."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from rich.console import Console

from agent_framework_mongodb.cli._durations import parse_duration

from ..storage._support import APPLICATION, SESSION, TENANT, WORKFLOW, advance_server_clock, make_checkpoint
from .test_cli import Engine, save_run

SCOPE = ("--tenant", TENANT, "--application", APPLICATION)


def save_detailed(engine: Engine) -> str:
    checkpoint = make_checkpoint(
        "cp-detailed",
        state={"_executor_state": {"planner": {"plan": ["a", "b"]}, "writer": {}}, "user": 1},
    )
    checkpoint.messages = {"planner": [], "writer": []}
    checkpoint.iteration_count = 3
    checkpoint.pending_request_info_events = {"request-1": {"question": "approve?"}}  # type: ignore[dict-item]
    return asyncio.run(engine.storage().save(checkpoint))


def test_show_json_summarises_without_contents() -> None:
    engine = Engine()
    checkpoint_id = save_detailed(engine)
    result = engine.invoke("show", *SCOPE, "--workflow", WORKFLOW, "--json", SESSION, checkpoint_id)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["iteration_count"] == 3
    assert set(summary["executor_state_bytes"]) == {"planner", "writer"}
    assert all(size > 0 for size in summary["executor_state_bytes"].values())
    assert summary["pending_requests"] == {  # an event of another class: named by its class alone
        "request-1": {
            "event_type": "dict",
            "request_type": None,
            "response_type": None,
            "source_executor_id": None,
            "data": None,
        }
    }
    assert summary["message_counts"] == {"planner": 0, "writer": 0}
    assert summary["state_keys"] == ["user"]
    assert "approve?" not in result.stdout


def test_show_table_and_raw() -> None:
    engine = Engine()
    checkpoint_id = save_detailed(engine)
    table = engine.invoke("show", *SCOPE, "--workflow", WORKFLOW, SESSION, checkpoint_id)
    assert table.exit_code == 0, table.output
    assert "planner" in table.stdout
    assert "approve?" not in table.stdout
    raw = engine.invoke("show", *SCOPE, "--workflow", WORKFLOW, "--raw", SESSION, checkpoint_id)
    assert raw.exit_code == 0, raw.output
    assert "approve?" in raw.stdout


def test_show_of_an_unknown_checkpoint_fails_with_its_category() -> None:
    engine = Engine()
    save_run(engine, 1)
    result = engine.invoke("show", *SCOPE, "--workflow", WORKFLOW, SESSION, "cp-missing")
    assert result.exit_code == 1
    assert "[not_found]" in result.stderr


def age_runs(engine: Engine) -> None:
    """An old run (saved ten days ago by the server's clock) and a fresh one."""
    advance_server_clock(engine.collection, -timedelta(days=10))
    save_run(engine, 2, session_id="old-session")
    advance_server_clock(engine.collection, timedelta(days=10))
    save_run(engine, 1, session_id="new-session")


def sessions(engine: Engine) -> list[str]:
    return [run["session_id"] for run in json.loads(engine.invoke("runs", *SCOPE, "--json").stdout)]


def test_prune_is_a_dry_run_by_default() -> None:
    engine = Engine()
    age_runs(engine)
    result = engine.invoke("prune", *SCOPE, "--older-than", "7d")
    assert result.exit_code == 0, result.output
    assert f"would clear {WORKFLOW}/old-session" in result.stdout
    assert "new-session" not in result.stdout
    assert sorted(sessions(engine)) == ["new-session", "old-session"]


def test_prune_yes_clears_the_old_runs_only() -> None:
    engine = Engine()
    age_runs(engine)
    result = engine.invoke("prune", *SCOPE, "--older-than", "1w", "--yes")
    assert result.exit_code == 0, result.output
    assert f"cleared {WORKFLOW}/old-session: 2 checkpoint(s)" in result.stdout
    assert sessions(engine) == ["new-session"]


def test_prune_honours_the_workflow() -> None:
    engine = Engine()
    age_runs(engine)
    result = engine.invoke("prune", *SCOPE, "--older-than", "7d", "--workflow", "other-flow", "--yes")
    assert result.exit_code == 0, result.output
    assert "0 run(s) cleared, 0 skipped." in result.stdout
    assert len(sessions(engine)) == 2


def age_waiting_run(engine: Engine) -> None:
    """Beside ``age_runs``' two: an old run whose latest checkpoint waits for a human's answer."""
    advance_server_clock(engine.collection, -timedelta(days=10))
    save_run(engine, 3, session_id="waiting-session", pending=True)
    advance_server_clock(engine.collection, timedelta(days=10))


def test_prune_skips_an_idle_run_waiting_for_input_and_its_dry_run_says_why() -> None:
    engine = Engine()
    age_runs(engine)
    age_waiting_run(engine)
    result = engine.invoke("prune", *SCOPE, "--older-than", "7d")
    assert result.exit_code == 0, result.output
    assert f"would clear {WORKFLOW}/old-session" in result.stdout
    assert "would clear" not in result.stdout.split("waiting-session")[0].splitlines()[-1]
    (skipped,) = [line for line in result.stdout.splitlines() if "waiting-session" in line]
    assert skipped.startswith(f"skip {WORKFLOW}/waiting-session: waiting for input (last activity ")
    assert skipped.endswith("pass --include-waiting to clear it")
    assert "1 run(s) would be cleared, 1 skipped; pass --yes to clear them." in result.stdout

    cleared = engine.invoke("prune", *SCOPE, "--older-than", "7d", "--yes")
    assert cleared.exit_code == 0, cleared.output
    assert f"skip {WORKFLOW}/waiting-session: waiting for input" in cleared.stdout
    assert "1 run(s) cleared, 1 skipped." in cleared.stdout
    assert sorted(sessions(engine)) == ["new-session", "waiting-session"]


def test_prune_include_waiting_clears_an_idle_run_waiting_for_input() -> None:
    engine = Engine()
    age_runs(engine)
    age_waiting_run(engine)
    dry = engine.invoke("prune", *SCOPE, "--older-than", "7d", "--include-waiting")
    assert dry.exit_code == 0, dry.output
    assert f"would clear {WORKFLOW}/waiting-session" in dry.stdout
    assert "skip " not in dry.stdout
    result = engine.invoke("prune", *SCOPE, "--older-than", "7d", "--include-waiting", "--yes")
    assert result.exit_code == 0, result.output
    assert f"cleared {WORKFLOW}/waiting-session: 3 checkpoint(s)" in result.stdout
    assert "2 run(s) cleared, 0 skipped." in result.stdout
    assert sessions(engine) == ["new-session"]


def test_prune_leaves_a_recent_run_waiting_for_input_unnamed() -> None:
    # Only idle runs are candidates: a fresh waiting run is neither cleared nor reported as skipped.
    engine = Engine()
    age_runs(engine)
    save_run(engine, 1, session_id="fresh-waiting", pending=True)
    result = engine.invoke("prune", *SCOPE, "--older-than", "7d", "--include-waiting", "--yes")
    assert result.exit_code == 0, result.output
    assert "fresh-waiting" not in result.stdout
    assert sorted(sessions(engine)) == ["fresh-waiting", "new-session"]


def test_prune_refuses_a_malformed_duration() -> None:
    result = Engine().invoke("prune", *SCOPE, "--older-than", "soon")
    assert result.exit_code == 2
    assert "not a duration" in result.stderr


def test_durations() -> None:
    assert parse_duration(None, None, "1d12h") == timedelta(days=1, hours=12)  # type: ignore[arg-type]
    assert parse_duration(None, None, "90m") == timedelta(minutes=90)  # type: ignore[arg-type]


def test_prune_on_a_terminal_shows_a_progress_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Console, "is_terminal", property(lambda _self: True))
    engine = Engine()
    age_runs(engine)
    result = engine.invoke("prune", *SCOPE, "--older-than", "7d", "--yes")
    assert result.exit_code == 0, result.output
    assert "Clearing runs" in result.stdout
    assert "1 run(s) cleared, 0 skipped." in result.stdout
    assert sessions(engine) == ["new-session"]


def test_show_with_signing_keys_in_the_environment_refuses_what_a_worker_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import base64
    import secrets

    key = secrets.token_bytes(32)
    engine = Engine()
    (checkpoint_id,) = save_run(engine, 1, signing_keys=[key])
    monkeypatch.setenv("AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS", base64.b64encode(key).decode())
    shown = engine.invoke("show", *SCOPE, "--workflow", WORKFLOW, "--json", SESSION, checkpoint_id)
    assert shown.exit_code == 0, shown.output
    # A checkpoint edited outside the storage: without keys show would display it; with them it is
    # refused, as the workers' signed storage refuses it.
    asyncio.run(
        engine.collection.update_one(
            {"checkpoint_id": checkpoint_id}, {"$set": {"parent_checkpoint_id": "x"}}
        )
    )
    refused = engine.invoke("show", *SCOPE, "--workflow", WORKFLOW, "--json", SESSION, checkpoint_id)
    assert refused.exit_code == 1
    assert "[integrity]" in refused.output
