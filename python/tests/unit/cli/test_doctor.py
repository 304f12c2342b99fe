"""``doctor`` end to end on the file-backed engine: each check able to fail, its fix, and the exit status."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from pymongo.collation import Collation

from agent_framework_mongodb.checkpoints import ensure_checkpoint_indexes
from agent_framework_mongodb.checkpoints.connection import DEFAULT_COLLECTION_NAME, DEFAULT_DATABASE_NAME
from agent_framework_mongodb.cli._app import cli
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

KEYS = "AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS"
BLOCK = "import sys\nsys.modules['agent_framework._workflows._runner_context'] = None\n"
"""A reader in which WorkflowMessage's module cannot be imported at all."""


def reader_environment(monkeypatch: pytest.MonkeyPatch, directory: Path, startup: str) -> None:
    """Child processes (the framework check's reader) run ``startup`` first: a sitecustomize in
    ``directory``, put first on PYTHONPATH."""
    directory.mkdir()
    (directory / "sitecustomize.py").write_text(startup)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))
    )


@pytest.fixture
def healthy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An engine file with every index and a signing key in the environment."""
    engine = tmp_path / "engine.journal"
    asyncio.run(provision(engine))
    monkeypatch.setenv(KEYS, base64.b64encode(secrets.token_bytes(32)).decode())
    return engine


async def provision(engine: Path, *, collation: Collation | None = None) -> None:
    async with InMemoryMongoClient(path=engine) as client:
        database = client[DEFAULT_DATABASE_NAME]
        if collation is not None:
            await database.create_collection(DEFAULT_COLLECTION_NAME, collation=collation)
        await ensure_checkpoint_indexes(database[DEFAULT_COLLECTION_NAME])


def edit(engine: Path, change: Callable[[InMemoryCollection], Awaitable[object]]) -> None:
    async def run() -> None:
        async with InMemoryMongoClient(path=engine) as client:
            collection: InMemoryCollection = client[DEFAULT_DATABASE_NAME][DEFAULT_COLLECTION_NAME]
            await change(collection)

    asyncio.run(run())


def doctor(engine: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--engine-file", str(engine), "doctor", *args])


def statuses(result: Result) -> dict[str, str]:
    report = json.loads(result.stdout)
    return {check["name"]: check["status"] for check in report["checks"]}


def check_of(result: Result, name: str) -> dict[str, Any]:
    (found,) = (check for check in json.loads(result.stdout)["checks"] if check["name"] == name)
    return found  # type: ignore[no-any-return]


def test_a_healthy_engine_file_passes_every_check_it_can(healthy: Path) -> None:
    result = doctor(healthy, "--json", "--strict")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True
    assert statuses(result) == {
        "installation": "ok",
        "framework types": "ok",
        "application types": "skip",
        "signing": "ok",
        "connection": "ok",
        "server version": "ok",
        "feature compatibility": "skip",  # what only a server has
        "topology": "skip",
        "indexes": "ok",
        "collation": "ok",
        "write concern": "ok",
        "retryable writes": "ok",
        "read preference": "ok",
    }


def test_the_text_report_has_one_line_per_check_and_a_summary(healthy: Path) -> None:
    result = doctor(healthy)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ok    installation: ")
    assert lines[-1] == "0 failed, 0 warned, 13 checked."


def test_a_missing_index_fails_by_name(healthy: Path) -> None:
    edit(healthy, lambda collection: collection.drop_index("checkpoint_scope_sequence"))
    result = doctor(healthy, "--json")
    assert result.exit_code == 1
    indexes = check_of(result, "indexes")
    assert indexes["status"] == "fail"
    assert indexes["details"]["missing"] == ["checkpoint_scope_sequence"]
    assert "indexes ensure" in indexes["fix"]
    text = doctor(healthy)
    assert "fail  indexes: Indexes missing checkpoint_scope_sequence" in text.stdout
    assert "fix: Run `agent-framework-mongodb indexes ensure`" in text.stdout


def test_a_different_index_fails_by_name(healthy: Path) -> None:
    async def replace(collection: InMemoryCollection) -> None:
        await collection.drop_index("checkpoint_run_activity")
        await collection.create_index([("unrelated", 1)], name="checkpoint_run_activity")

    edit(healthy, replace)
    indexes = check_of(doctor(healthy, "--json"), "indexes")
    assert indexes["status"] == "fail"
    assert "checkpoint_run_activity" in indexes["details"]["different"]
    assert "`agent-framework-mongodb indexes drop checkpoint_run_activity --yes`" in indexes["fix"]


def follow_fixes(engine: Path, result: Result) -> list[Result]:
    """Run, in the order doctor printed them, the command-line commands of every fix (each in
    backquotes) against ``engine``; each must succeed."""
    followed: list[Result] = []
    for check in json.loads(result.stdout)["checks"]:
        if check["status"] == "ok" or not check["fix"]:
            continue
        for command in re.findall(r"`agent-framework-mongodb ([^`]*)`", check["fix"]):
            outcome = CliRunner().invoke(cli, ["--engine-file", str(engine), *shlex.split(command)])
            assert outcome.exit_code == 0, f"{check['name']}: {command}: {outcome.output}"
            followed.append(outcome)
    return followed


def test_the_fix_for_a_different_index_works_in_order(healthy: Path) -> None:
    # issue 31: the fix said "Drop checkpoint_run_activity" and no command did it.
    async def replace(collection: InMemoryCollection) -> None:
        await collection.drop_index("checkpoint_run_activity")
        await collection.create_index([("unrelated", 1)], name="checkpoint_run_activity")

    edit(healthy, replace)
    followed = follow_fixes(healthy, doctor(healthy, "--json"))

    assert len(followed) == 2  # the drop, then ensure
    assert "dropped checkpoint_run_activity" in followed[0].stdout
    after = doctor(healthy, "--json")
    assert after.exit_code == 0, after.output
    assert check_of(after, "indexes")["status"] == "ok"


def test_a_default_collation_fails(tmp_path: Path) -> None:
    engine = tmp_path / "collated.journal"
    # ensure_checkpoint_indexes refuses such a collection, so only the collection is made.
    with pytest.raises(Exception, match="default collation"):
        asyncio.run(provision(engine, collation=Collation("fr")))
    result = doctor(engine, "--json")
    assert result.exit_code == 1
    collation = check_of(result, "collation")
    assert collation["status"] == "fail"
    assert "'fr'" in collation["summary"]
    assert "new collection" in collation["fix"]


def test_the_fixes_for_a_default_collation_work_in_order(tmp_path: Path) -> None:
    # issue 31: the indexes check said to run indexes ensure, which refuses such a collection.
    engine = tmp_path / "collated.journal"
    with pytest.raises(Exception, match="default collation"):
        asyncio.run(provision(engine, collation=Collation("fr")))
    result = doctor(engine, "--json")
    indexes = check_of(result, "indexes")
    collation = check_of(result, "collation")
    assert indexes["status"] == collation["status"] == "fail"
    assert "`" not in indexes["fix"]  # no command of its own: the collation comes first
    assert "recreate the collection" in indexes["fix"]
    assert "must be recreated" in collation["fix"]
    drop_old = f'db.getSiblingDB("{DEFAULT_DATABASE_NAME}").getCollection("{DEFAULT_COLLECTION_NAME}").drop()'
    assert f"`{drop_old}`" in collation["fix"]

    (ensured,) = follow_fixes(engine, result)

    assert f"--collection {DEFAULT_COLLECTION_NAME}_v2" in collation["fix"]
    assert "ensured checkpoint_run_activity" in ensured.stdout
    recreated = CliRunner().invoke(
        cli,
        ["--engine-file", str(engine), "--collection", f"{DEFAULT_COLLECTION_NAME}_v2", "doctor", "--json"],
    )
    assert (check_of(recreated, "indexes")["status"], check_of(recreated, "collation")["status"]) == (
        "ok",
        "ok",
    )


def test_indexes_drop_takes_only_the_packages_indexes_that_differ_and_needs_yes(healthy: Path) -> None:
    def indexes(*args: str) -> Result:
        return CliRunner().invoke(cli, ["--engine-file", str(healthy), "indexes", *args])

    for foreign in ("_id_", "my_own_index"):
        refused = indexes("drop", foreign, "--yes")
        assert refused.exit_code == 2, refused.output
        assert "checkpoint_run_activity" in refused.stderr  # the names it takes
    as_defined = indexes("drop", "checkpoint_run_activity", "--yes")
    assert as_defined.exit_code == 1
    assert "as defined: not dropped" in as_defined.stderr

    async def replace(collection: InMemoryCollection) -> None:
        await collection.drop_index("checkpoint_scope_sequence")
        await collection.create_index([("unrelated", 1)], name="checkpoint_scope_sequence", unique=True)

    edit(healthy, replace)
    dry = indexes("drop", "checkpoint_scope_sequence")
    assert dry.exit_code == 0, dry.output
    assert "would drop checkpoint_scope_sequence" in dry.stdout
    assert "pass --yes" in dry.stdout
    assert "neither idempotent nor ordered" in dry.stdout  # a unique index
    assert check_of(doctor(healthy, "--json"), "indexes")["details"]["different"]  # still there
    dropped = indexes("drop", "checkpoint_scope_sequence", "--yes")
    assert dropped.exit_code == 0, dropped.output
    assert check_of(doctor(healthy, "--json"), "indexes")["details"]["missing"] == [
        "checkpoint_scope_sequence"
    ]
    gone = indexes("drop", "checkpoint_scope_sequence", "--yes")
    assert gone.exit_code == 1
    assert "[not_found]" in gone.stderr


def test_unsigned_is_a_warning_and_strict_makes_it_fail(
    healthy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEYS)
    relaxed = doctor(healthy, "--json")
    strict = doctor(healthy, "--json", "--strict")
    assert relaxed.exit_code == 0, relaxed.output
    assert check_of(relaxed, "signing")["status"] == "warn"
    assert KEYS in check_of(relaxed, "signing")["fix"]
    assert strict.exit_code == 1
    assert json.loads(strict.stdout)["ok"] is False


@pytest.mark.parametrize(
    ("keys", "reason"), [("c2hvcnQ=", "at least 32"), ("not base64!", "not base64"), (",", "no key")]
)
def test_unusable_signing_keys_fail(
    healthy: Path, monkeypatch: pytest.MonkeyPatch, keys: str, reason: str
) -> None:
    monkeypatch.setenv(KEYS, keys)
    result = doctor(healthy, "--json")
    assert result.exit_code == 1
    signing = check_of(result, "signing")
    assert signing["status"] == "fail"
    assert reason in signing["summary"]


def test_framework_types_that_do_not_load_fail(
    healthy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader_environment(monkeypatch, tmp_path / "blocked", BLOCK)
    result = doctor(healthy, "--json")
    assert result.exit_code == 1
    framework = check_of(result, "framework types")
    assert framework["status"] == "fail"
    assert "agent_framework._workflows._runner_context" in framework["summary"]
    assert "supports" in framework["fix"]


def test_application_types_that_do_not_import_fail(healthy: Path) -> None:
    result = doctor(healthy, "--json", "--allow-type", "no_such_module_here:Thing")
    assert result.exit_code == 1
    assert check_of(result, "application types")["status"] == "fail"
    assert doctor(healthy, "--allow-type", "json.decoder:JSONDecoder").exit_code == 0


def test_without_a_uri_the_connection_fails_and_the_server_is_not_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MONGODB_URI", raising=False)
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    assert result.exit_code == 1
    found = statuses(result)
    assert found["connection"] == "fail"
    assert "MONGODB_URI" in check_of(result, "connection")["fix"]
    assert found["installation"] == "ok"  # the local checks still run


def test_an_unreachable_server_fails_within_the_uris_bound() -> None:
    uri = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300"
    result = CliRunner().invoke(cli, ["--uri", uri, "doctor", "--json"])
    assert result.exit_code == 1
    connection = check_of(result, "connection")
    assert connection["status"] == "fail"
    assert "0.3 seconds" in connection["summary"]
    assert "connection refused" in connection["summary"]
    assert statuses(result)["indexes"] == "skip"


def test_doctor_runs_as_a_module_in_a_real_process(healthy: Path) -> None:
    completed = subprocess.run(  # noqa: S603 - the test's own interpreter
        [sys.executable, "-m", "agent_framework_mongodb", "--engine-file", str(healthy), "doctor", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    report = json.loads(completed.stdout)
    assert report["ok"] is True
    assert {check["name"] for check in report["checks"]} >= {"installation", "indexes", "framework types"}
