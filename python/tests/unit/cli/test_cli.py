"""The command line end to end over the in-process engine: output, ``--json`` and exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agent_framework_mongodb import MongoDBCheckpointStorage, ensure_checkpoint_indexes
from agent_framework_mongodb.checkpoints.connection import DEFAULT_COLLECTION_NAME, DEFAULT_DATABASE_NAME
from agent_framework_mongodb.cli import INSTALL_HINT
from agent_framework_mongodb.cli._app import cli
from agent_framework_mongodb.cli._connection import CliSettings
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

from ..storage._support import APPLICATION, SESSION, TENANT, WORKFLOW, make_checkpoint, make_options


class Engine:
    """One in-process engine, injected into every command as its client."""

    def __init__(self) -> None:
        self.client = InMemoryMongoClient()
        self.uris: list[str | None] = []

    @property
    def collection(self) -> InMemoryCollection:
        return self.client[DEFAULT_DATABASE_NAME][DEFAULT_COLLECTION_NAME]

    def factory(self, uri: str | None) -> Any:
        self.uris.append(uri)
        return self.client

    def invoke(self, *args: str) -> Result:
        return CliRunner().invoke(cli, list(args), obj=CliSettings(client_factory=self.factory))

    def storage(self, **overrides: Any) -> MongoDBCheckpointStorage:
        return MongoDBCheckpointStorage(self.collection, options=make_options(**overrides))


def save_run(engine: Engine, count: int, *, pending: bool = False, **overrides: Any) -> list[str]:
    storage = engine.storage(**overrides)

    async def save_all() -> list[str]:
        ids: list[str] = []
        previous: str | None = None
        for index in range(count):
            checkpoint = make_checkpoint(
                workflow_name=storage.options.workflow_name, previous=previous, state={"i": index}
            )
            if pending and index == count - 1:
                checkpoint.pending_request_info_events = {"request-1": {"question": "approve?"}}  # type: ignore[dict-item]
            ids.append(await storage.save(checkpoint))
            previous = checkpoint.checkpoint_id
        return ids

    return asyncio.run(save_all())


@pytest.fixture
def engine() -> Engine:
    return Engine()


def test_indexes_ensure_then_validate(engine: Engine) -> None:
    ensured = engine.invoke("--uri", "mongodb://example.invalid", "indexes", "ensure")
    assert ensured.exit_code == 0, ensured.output
    assert "ensured checkpoint_run_activity" in ensured.stdout
    assert engine.uris == ["mongodb://example.invalid"]

    validated = engine.invoke("indexes", "validate")
    assert validated.exit_code == 0, validated.output
    assert "match" in validated.stdout


def test_indexes_validate_names_a_missing_index(engine: Engine) -> None:
    result = engine.invoke("indexes", "validate")
    assert result.exit_code == 1
    assert "[index_missing]" in result.stderr or "index" in result.stderr
    assert "checkpoint_" in result.stderr


def test_indexes_validate_names_a_mismatched_index(engine: Engine) -> None:
    async def provision() -> None:
        await ensure_checkpoint_indexes(engine.collection)
        await engine.collection.drop_index("checkpoint_run_activity")
        await engine.collection.create_index([("unrelated", 1)], name="checkpoint_run_activity")

    asyncio.run(provision())
    result = engine.invoke("indexes", "validate")
    assert result.exit_code == 1
    assert "checkpoint_run_activity" in result.stderr


def test_indexes_honour_database_and_collection(engine: Engine) -> None:
    result = engine.invoke("--database", "other_db", "--collection", "other", "indexes", "ensure")
    assert result.exit_code == 0, result.output
    indexes = asyncio.run(engine.client["other_db"]["other"].index_information())
    assert "checkpoint_run_activity" in indexes


def test_runs_json_lists_the_tenants_runs_newest_first(engine: Engine) -> None:
    save_run(engine, 2)
    save_run(engine, 1, session_id="session-002", pending=True)
    save_run(engine, 1, tenant_id="tenant-other")

    result = engine.invoke("runs", "--tenant", TENANT, "--application", APPLICATION, "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [run["session_id"] for run in listed] == ["session-002", SESSION]
    assert listed[0]["waiting_for_input"] is True
    assert listed[1]["latest_sequence"] == 2
    assert listed[1]["workflow_name"] == WORKFLOW


def test_runs_filters_waiting_and_workflow(engine: Engine) -> None:
    save_run(engine, 1)
    save_run(engine, 1, session_id="session-002", pending=True)
    save_run(engine, 1, workflow_name="other-flow", session_id="session-003")
    scope = ("--tenant", TENANT, "--application", APPLICATION)

    waiting = json.loads(engine.invoke("runs", *scope, "--waiting", "--json").stdout)
    assert [run["session_id"] for run in waiting] == ["session-002"]
    other = json.loads(engine.invoke("runs", *scope, "--workflow", "other-flow", "--json").stdout)
    assert [run["session_id"] for run in other] == ["session-003"]
    # Without the application, only runs stored without one are listed.
    assert json.loads(engine.invoke("runs", "--tenant", TENANT, "--json").stdout) == []


def test_runs_table(engine: Engine) -> None:
    save_run(engine, 1, session_id="s1", pending=True)
    result = engine.invoke("runs", "--tenant", TENANT, "--application", APPLICATION)
    assert result.exit_code == 0, result.output
    assert "workflow" in result.stdout
    assert "s1" in result.stdout
    assert "yes" in result.stdout


def test_runs_reports_retained_checkpoints_and_saves_separately(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 21: with keep_last=3 after 22 saves the "checkpoints" column said 22.
    save_run(engine, 22, keep_last=3)
    scope = ("--tenant", TENANT, "--application", APPLICATION)

    (listed,) = json.loads(engine.invoke("runs", *scope, "--json").stdout)
    assert (listed["checkpoint_count"], listed["saves"], listed["checkpoint_count_capped"]) == (3, 22, False)
    table = engine.invoke("runs", *scope)  # not a terminal: tab-separated
    assert table.exit_code == 0, table.output
    header, row = table.stdout.splitlines()
    cells = row.split("\t")
    names = header.split("\t")
    assert dict(zip(names, cells, strict=True))["checkpoints"] == "3"
    assert dict(zip(names, cells, strict=True))["saves"] == "22"


def test_an_empty_runs_listing_says_why_and_what_to_try(engine: Engine) -> None:
    # issue 31: runs without --application showed an empty table and no hint.
    save_run(engine, 1)  # saved with an application_id
    where = f"in {DEFAULT_DATABASE_NAME}.{DEFAULT_COLLECTION_NAME}"

    table = engine.invoke("runs", "--tenant", TENANT)
    as_json = engine.invoke("runs", "--tenant", TENANT, "--json")

    assert table.exit_code == 0, table.output
    assert "┏" not in table.stdout  # no empty table
    assert f"No runs for tenant {TENANT} and application (none) {where}" in table.stdout
    assert "runs saved with an application_id are listed with --application" in table.stdout
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == []  # still machine-readable
    assert "listed with --application" in as_json.stderr

    scope = ("--tenant", TENANT, "--application", APPLICATION)
    filtered = engine.invoke("runs", *scope, "--waiting", "--workflow", WORKFLOW)
    assert f"No runs of workflow {WORKFLOW} waiting for input for tenant {TENANT} and application" in (
        filtered.stdout
    )
    assert "1 run(s) are not waiting for input (drop --waiting)" in filtered.stdout
    assert "drop --workflow" in filtered.stdout
    assert "listed without --application" in filtered.stdout


def test_an_empty_checkpoints_listing_says_why_and_what_to_try(engine: Engine) -> None:
    save_run(engine, 1)

    table = engine.invoke("checkpoints", "--tenant", TENANT, "--workflow", WORKFLOW, SESSION)
    as_json = engine.invoke("checkpoints", "--tenant", TENANT, "--workflow", WORKFLOW, "--json", SESSION)

    assert table.exit_code == 0, table.output
    looked_in = f"for {WORKFLOW}/{SESSION} for tenant {TENANT} and application (none)"
    assert f"No checkpoints are stored {looked_in}" in table.stdout
    assert f"`agent-framework-mongodb runs --tenant {TENANT}`" in table.stdout
    assert "runs saved with an application_id are listed with --application" in table.stdout
    assert json.loads(as_json.stdout) == []
    assert "listed with --application" in as_json.stderr


LONG_WORKFLOW = "quarterly-expense-approval-with-escalation"
LONG_SESSION = "session-2026-12-07-eu-west-customer-4711-retry-3"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_listings_in_a_pipe_are_tab_separated_and_whole(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 31: at 80 columns, and in a pipe, names and dates were cut short with "…".
    monkeypatch.setenv("COLUMNS", "80")
    (checkpoint_id,) = save_run(engine, 1, workflow_name=LONG_WORKFLOW, session_id=LONG_SESSION)
    scope = ("--tenant", TENANT, "--application", APPLICATION)

    runs = engine.invoke("runs", *scope)
    checkpoints = engine.invoke("checkpoints", *scope, "--workflow", LONG_WORKFLOW, LONG_SESSION)

    assert runs.exit_code == checkpoints.exit_code == 0, runs.output + checkpoints.output
    for result in (runs, checkpoints):
        assert "…" not in result.stdout
        assert "┃" not in result.stdout
    header, row = runs.stdout.splitlines()
    assert header.split("\t") == [
        "workflow",
        "session",
        "latest sequence",
        "checkpoints",
        "saves",
        "updated",
        "waiting",
    ]
    assert row.split("\t")[:2] == [LONG_WORKFLOW, LONG_SESSION]
    assert datetime.fromisoformat(row.split("\t")[5])  # the whole date
    header, row = checkpoints.stdout.splitlines()
    assert header.split("\t")[:2] == ["sequence", "checkpoint"]
    assert row.split("\t")[:3] == ["1", checkpoint_id, "-"]


def test_listings_on_an_80_column_terminal_are_whole(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # Rich: standard output is a terminal
    monkeypatch.setenv("COLUMNS", "80")
    (checkpoint_id,) = save_run(engine, 1, workflow_name=LONG_WORKFLOW, session_id=LONG_SESSION)
    scope = ("--tenant", TENANT, "--application", APPLICATION)

    narrow = engine.invoke("runs", *scope)
    narrow_checkpoints = engine.invoke("checkpoints", *scope, "--workflow", LONG_WORKFLOW, LONG_SESSION)

    assert narrow.exit_code == 0, narrow.output
    lines = _ANSI.sub("", narrow.stdout).splitlines()
    assert "…" not in narrow.stdout
    assert all(len(line) <= 80 for line in lines), lines  # one block per run, a value to a line
    assert f"workflow:        {LONG_WORKFLOW}" in lines
    assert f"session:         {LONG_SESSION}" in lines
    assert f"checkpoint:    {checkpoint_id}" in _ANSI.sub("", narrow_checkpoints.stdout).splitlines()

    monkeypatch.setenv("COLUMNS", "250")  # wide enough: the table, every value whole
    wide = _ANSI.sub("", engine.invoke("runs", *scope).stdout)
    assert "┃" in wide
    assert "…" not in wide
    assert LONG_SESSION in wide


def test_a_piped_listing_is_tab_separated(tmp_path: Path) -> None:
    journal = tmp_path / "piped.journal"

    async def save_one() -> None:
        async with InMemoryMongoClient(path=journal) as client:
            collection = client[DEFAULT_DATABASE_NAME][DEFAULT_COLLECTION_NAME]
            await ensure_checkpoint_indexes(collection)
            storage = MongoDBCheckpointStorage(
                collection, options=make_options(workflow_name=LONG_WORKFLOW, session_id=LONG_SESSION)
            )
            await storage.save(make_checkpoint(workflow_name=LONG_WORKFLOW, previous=None, state={}))

    asyncio.run(save_one())
    command = ["--engine-file", str(journal), "runs", "--tenant", TENANT, "--application", APPLICATION]
    piped = subprocess.run(  # noqa: S603 - the test's own interpreter and code
        [sys.executable, "-m", "agent_framework_mongodb", *command],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.splitlines()[1].split("\t")[:2] == [LONG_WORKFLOW, LONG_SESSION]


def test_runs_requires_a_tenant(engine: Engine) -> None:
    result = engine.invoke("runs")
    assert result.exit_code == 2
    assert "--tenant" in result.stderr


def test_a_configuration_error_is_reported_by_category(engine: Engine) -> None:
    result = engine.invoke("runs", "--tenant", " padded ")
    assert result.exit_code == 1
    assert "[configuration]" in result.stderr


def test_checkpoints_json_lists_the_runs_envelopes_in_order(engine: Engine) -> None:
    ids = save_run(engine, 3, ttl=timedelta(days=1))
    save_run(engine, 2, session_id="session-002")
    scope = ("--tenant", TENANT, "--application", APPLICATION, "--workflow", WORKFLOW)

    result = engine.invoke("checkpoints", *scope, "--json", SESSION)

    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [entry["checkpoint_id"] for entry in listed] == ids
    assert [entry["parent_checkpoint_id"] for entry in listed] == [None, *ids[:-1]]
    assert [entry["sequence"] for entry in listed] == [1, 2, 3]
    for entry in listed:
        created = datetime.fromisoformat(entry["created_at"])
        assert datetime.fromisoformat(entry["expires_at"]) == created + timedelta(days=1)
        assert isinstance(entry["payload_bytes"], int)
        assert entry["payload_bytes"] > 0


def test_checkpoints_pages_through_a_long_run(engine: Engine) -> None:
    ids = save_run(engine, 7, max_page_size=3, page_size=2)
    scope = ("--tenant", TENANT, "--application", APPLICATION, "--workflow", WORKFLOW)

    # The command's storage has default page sizes; what it must not do is stop after one page.
    listed = json.loads(engine.invoke("checkpoints", *scope, "--json", SESSION).stdout)

    assert [entry["checkpoint_id"] for entry in listed] == ids


def test_checkpoints_table_and_an_empty_run(engine: Engine) -> None:
    (checkpoint_id,) = save_run(engine, 1)
    scope = ("--tenant", TENANT, "--application", APPLICATION, "--workflow", WORKFLOW)

    table = engine.invoke("checkpoints", *scope, SESSION)
    empty = engine.invoke("checkpoints", *scope, "session-none")

    assert table.exit_code == 0, table.output
    assert "payload bytes" in table.stdout
    # Not a terminal: tab-separated, the id whole.
    header, row = table.stdout.splitlines()
    assert row.split("\t")[header.split("\t").index("checkpoint")] == checkpoint_id
    assert empty.exit_code == 0, empty.output
    assert "No checkpoints are stored" in empty.stdout
    assert json.loads(engine.invoke("checkpoints", *scope, "--json", "session-none").stdout) == []


def test_checkpoints_requires_the_workflow_and_reports_errors_by_category(engine: Engine) -> None:
    missing = engine.invoke("checkpoints", "--tenant", TENANT, SESSION)
    invalid = engine.invoke("checkpoints", "--tenant", TENANT, "--workflow", WORKFLOW, " padded ")

    assert missing.exit_code == 2
    assert "--workflow" in missing.stderr
    assert invalid.exit_code == 1
    assert "[configuration]" in invalid.stderr


def test_clear_deletes_only_that_run(engine: Engine) -> None:
    save_run(engine, 3)
    save_run(engine, 1, session_id="session-002")
    scope = ("--tenant", TENANT, "--application", APPLICATION)

    result = engine.invoke("clear", *scope, "--workflow", WORKFLOW, SESSION)
    assert result.exit_code == 0, result.output
    assert "3 checkpoint(s), 0 chunk(s), 1 counter(s)" in result.stdout
    remaining = json.loads(engine.invoke("runs", *scope, "--json").stdout)
    assert [run["session_id"] for run in remaining] == ["session-002"]


def test_clear_of_an_unknown_run_says_so_and_fails(engine: Engine) -> None:
    # issue 31: a mistyped session printed "Cleared ...: 0 checkpoint(s), ..." and exited 0.
    save_run(engine, 2)
    scope = ("--tenant", TENANT, "--application", APPLICATION)

    result = engine.invoke("clear", *scope, "--workflow", WORKFLOW, "session-typo")

    assert result.exit_code == 1, result.output
    assert "Cleared" not in result.output
    assert "[not_found]" in result.stderr
    assert f"No run {WORKFLOW}/session-typo" in result.stderr
    assert "nothing was cleared" in result.stderr
    assert "runs --tenant" in result.stderr  # what to try
    # The run that exists is untouched, and clearing it still works.
    assert json.loads(engine.invoke("runs", *scope, "--json").stdout)[0]["session_id"] == SESSION
    assert engine.invoke("clear", *scope, "--workflow", WORKFLOW, SESSION).exit_code == 0


def test_clear_requires_the_workflow(engine: Engine) -> None:
    result = engine.invoke("clear", "--tenant", TENANT, SESSION)
    assert result.exit_code == 2
    assert "--workflow" in result.stderr


def test_without_a_uri_the_default_client_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MONGODB_URI", raising=False)
    result = CliRunner().invoke(cli, ["indexes", "validate"])
    assert result.exit_code == 2
    assert "MONGODB_URI" in result.stderr


def test_an_invalid_uri_is_not_echoed() -> None:
    result = CliRunner().invoke(cli, ["--uri", "mongodb://user:secret@host:99999", "indexes", "validate"])
    assert result.exit_code == 1
    assert "secret" not in result.output
    assert "[configuration]" in result.stderr


def test_module_entry_point_prints_help() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "agent_framework_mongodb", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0
    assert "indexes" in completed.stdout


def test_without_the_extra_the_command_says_how_to_install_it() -> None:
    # Block Click's import as if the extra were not installed.
    code = (
        "import sys; sys.modules['click'] = None\n"
        "from agent_framework_mongodb.cli import main\n"
        "main(['--help'])\n"
    )
    completed = subprocess.run(  # noqa: S603 - the test's own interpreter and code
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 2
    assert INSTALL_HINT in completed.stderr


# -- sign-run: moving a run onto signing ----------------------------------------------------------


def _now() -> str:
    """A --written-before that vouches for everything written so far."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f%z")


def test_sign_run_signs_an_unsigned_run_after_a_dry_run(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64
    import secrets

    from agent_framework_mongodb import MongoDBIntegrityError

    ids = save_run(engine, 3)
    key = secrets.token_bytes(32)
    monkeypatch.setenv("AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS", base64.b64encode(key).decode())
    signed = engine.storage(signing_keys=[key])
    with pytest.raises(MongoDBIntegrityError):
        asyncio.run(signed.load(ids[0]))

    scope = ("--tenant", TENANT, "--application", APPLICATION, "--workflow", WORKFLOW)
    dry = engine.invoke("sign-run", *scope, SESSION)
    assert dry.exit_code == 0, dry.output
    assert (
        "3 checkpoint(s) would sign, 0 already signed, 0 refused, 0 of another lifetime; pass --yes"
        in dry.stdout
    )
    with pytest.raises(MongoDBIntegrityError):  # a dry run writes nothing
        asyncio.run(signed.load(ids[0]))

    done = engine.invoke("sign-run", *scope, "--yes", "--written-before", _now(), SESSION)
    assert done.exit_code == 0, done.output
    assert "3 checkpoint(s) signed" in done.stdout
    assert [c.checkpoint_id for c in asyncio.run(signed.list_checkpoints(workflow_name=WORKFLOW))] == ids
    again = engine.invoke("sign-run", *scope, "--yes", "--written-before", _now(), SESSION)
    assert "0 checkpoint(s) signed, 3 already signed" in again.stdout
    # A signed checkpoint edited afterwards is refused, never re-signed (exit status 1).
    asyncio.run(engine.collection.update_one({"checkpoint_id": ids[0]}, {"$set": {"sequence": 10**9}}))
    tampered = engine.invoke("sign-run", *scope, "--yes", "--written-before", _now(), SESSION)
    assert tampered.exit_code == 1, tampered.output
    assert f"refused {ids[0]}" in tampered.stdout
    with pytest.raises(MongoDBIntegrityError):
        asyncio.run(signed.load(ids[0]))


def test_sign_run_takes_back_a_run_whose_counter_was_deleted(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64
    import secrets

    from agent_framework_mongodb import MongoDBIntegrityError
    from agent_framework_mongodb.checkpoints.scope import RunScope

    key = secrets.token_bytes(32)
    monkeypatch.setenv("AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS", base64.b64encode(key).decode())
    ids = save_run(engine, 2, signing_keys=[key])
    counter_id = RunScope.from_options(make_options()).counter_document_id
    asyncio.run(engine.collection.delete_one({"_id": counter_id}))
    signed = engine.storage(signing_keys=[key])
    with pytest.raises(MongoDBIntegrityError, match="no counter"):
        asyncio.run(signed.load(ids[0]))

    scope = ("--tenant", TENANT, "--application", APPLICATION, "--workflow", WORKFLOW)
    listed = engine.invoke(
        "sign-run", *scope, "--yes", "--written-before", _now(), SESSION
    )  # without --adopt: only listed
    assert listed.exit_code == 0, listed.output
    assert f"other lifetime {ids[0]}" in listed.stdout
    assert "0 checkpoint(s) signed" in listed.stdout
    done = engine.invoke("sign-run", *scope, "--adopt", "--yes", "--written-before", _now(), SESSION)
    assert done.exit_code == 0, done.output
    assert (asyncio.run(signed.load(ids[1]))).checkpoint_id == ids[1]
    saved = asyncio.run(signed.save(make_checkpoint("after")))  # the new counter numbers on
    assert saved == "after"


def test_sign_run_yes_needs_a_cut_off_and_lists_each_checkpoint_for_review(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64
    import secrets

    ids = save_run(engine, 2)
    monkeypatch.setenv(
        "AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS", base64.b64encode(secrets.token_bytes(32)).decode()
    )
    scope = ("--tenant", TENANT, "--application", APPLICATION, "--workflow", WORKFLOW)
    refused = engine.invoke("sign-run", *scope, "--yes", SESSION)
    assert refused.exit_code == 1, refused.output
    assert "--written-before" in refused.stderr
    future = engine.invoke("sign-run", *scope, "--yes", "--written-before", "2999-01-01", SESSION)
    assert future.exit_code == 1, future.output
    assert "later than now" in future.stderr
    dry = engine.invoke("sign-run", *scope, SESSION)
    assert dry.exit_code == 0, dry.output
    for sequence, checkpoint_id in enumerate(ids, start=1):
        assert f"would sign {checkpoint_id}: sequence {sequence}, created " in dry.stdout
    assert "lifetime none, sha256 " in dry.stdout
    early = engine.invoke("sign-run", *scope, "--yes", "--written-before", "2000-01-01", SESSION)
    assert early.exit_code == 1, early.output
    assert "0 checkpoint(s) signed, 0 already signed, 2 refused" in early.stdout


def test_sign_run_needs_keys(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS", raising=False)
    result = engine.invoke("sign-run", "--tenant", TENANT, "--workflow", WORKFLOW, SESSION)
    assert result.exit_code == 2
    assert "AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS" in result.output
    monkeypatch.setenv("AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS", "c2hvcnQ=")  # b"short"
    result = engine.invoke("sign-run", "--tenant", TENANT, "--workflow", WORKFLOW, SESSION)
    assert result.exit_code == 1
    assert "at least 32" in result.output
