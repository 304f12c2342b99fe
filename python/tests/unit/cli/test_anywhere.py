"""The command line without a server (``--engine-file``), its deadlines, ``--allow-type`` and exit codes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from pymongo import AsyncMongoClient

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.checkpoints.connection import DEFAULT_COLLECTION_NAME, DEFAULT_DATABASE_NAME
from agent_framework_mongodb.checkpoints.driver import CheckpointClient
from agent_framework_mongodb.cli._app import cli
from agent_framework_mongodb.cli._connection import CliSettings, resolve_deadlines
from agent_framework_mongodb.testing import InMemoryMongoClient

from ..storage._support import APPLICATION, SESSION, TENANT, WORKFLOW, make_checkpoint, make_options

SCOPE = ("--tenant", TENANT, "--application", APPLICATION)
RUN = (*SCOPE, "--workflow", WORKFLOW)
UNREACHABLE = "mongodb://127.0.0.1:1/"
"""Nothing listens on port 1: every connection is refused at once, so only the deadlines decide."""


@dataclasses.dataclass
class Order:
    """An application class a checkpoint holds: named by --allow-type, never imported by a payload."""

    number: int
    item: str


ORDER = f"{Order.__module__}:{Order.__qualname__}"


def invoke(*args: str, settings: CliSettings | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), obj=settings)


def seed(path: Path, *, count: int = 2, allowed: tuple[type, ...] = (), **overrides: Any) -> list[str]:
    """Save a run of ``count`` checkpoints into the engine file (indexes first), then close it."""

    async def save_all() -> list[str]:
        async with InMemoryMongoClient(path=path) as client:
            collection = client[DEFAULT_DATABASE_NAME][DEFAULT_COLLECTION_NAME]
            options = make_options(allowed_checkpoint_types=allowed, **overrides)
            storage = MongoDBCheckpointStorage(collection, options=options)
            await storage.ensure_indexes()
            ids: list[str] = []
            previous: str | None = None
            for index in range(count):
                state: dict[str, Any] = {"i": index}
                if allowed:
                    state["order"] = Order(index, "book")
                checkpoint = make_checkpoint(previous=previous, state=state)
                ids.append(await storage.save(checkpoint))
                previous = checkpoint.checkpoint_id
            return ids

    return asyncio.run(save_all())


# -- --engine-file ------------------------------------------------------------------------------


def test_every_command_runs_against_the_engine_file(tmp_path: Path) -> None:
    engine = tmp_path / "engine.journal"
    ids = seed(engine, count=3)
    file = ("--engine-file", str(engine))

    ensured = invoke(*file, "indexes", "ensure", "--json")
    validated = invoke(*file, "indexes", "validate")
    runs = invoke(*file, "runs", *SCOPE, "--json")
    listed = invoke(*file, "checkpoints", *RUN, "--json", SESSION)
    shown = invoke(*file, "show", *RUN, "--json", SESSION, ids[-1])
    cleared = invoke(*file, "clear", *RUN, SESSION)
    after = invoke(*file, "runs", *SCOPE, "--json")

    for result in (ensured, validated, runs, listed, shown, cleared, after):
        assert result.exit_code == 0, result.output
    assert "checkpoint_scope_identity" in json.loads(ensured.stdout)
    assert [run["session_id"] for run in json.loads(runs.stdout)] == [SESSION]
    assert [entry["checkpoint_id"] for entry in json.loads(listed.stdout)] == ids
    assert json.loads(shown.stdout)["checkpoint_id"] == ids[-1]
    assert "3 checkpoint(s)" in cleared.stdout
    assert json.loads(after.stdout) == []  # the clear was written to the file


def test_the_engine_file_is_used_instead_of_mongodb_uri_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = tmp_path / "engine.journal"
    seed(engine)
    monkeypatch.setenv("MONGODB_URI", UNREACHABLE)
    result = invoke("--engine-file", str(engine), "runs", *SCOPE, "--json")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 1


@pytest.mark.parametrize("from_environment", [False, True], ids=["--uri", "MONGODB_URI"])
def test_an_engine_uri_is_the_engine_file_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, from_environment: bool
) -> None:
    # The connection string a storage takes (engine:PATH, docs/adr/0037) works in the CLI as well.
    engine = tmp_path / "engine.journal"
    seed(engine)
    uri = f"engine:{engine}"
    if from_environment:
        monkeypatch.setenv("MONGODB_URI", uri)
    result = invoke(*(() if from_environment else ("--uri", uri)), "runs", *SCOPE, "--json")
    assert result.exit_code == 0, result.output
    assert [run["session_id"] for run in json.loads(result.stdout)] == [SESSION]


def test_an_engine_uri_without_a_path_is_a_usage_error() -> None:
    result = invoke("--uri", "engine:", "runs", *SCOPE)
    assert result.exit_code == 2
    assert "engine:PATH" in result.stderr


def test_a_missing_engine_file_is_created_empty(tmp_path: Path) -> None:
    engine = tmp_path / "new.journal"
    result = invoke("--engine-file", str(engine), "runs", *SCOPE, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []
    assert engine.exists()


def test_an_engine_file_in_use_is_reported_by_category(tmp_path: Path) -> None:
    engine = tmp_path / "engine.journal"
    holder = InMemoryMongoClient(path=engine)
    try:
        result = invoke("--engine-file", str(engine), "runs", *SCOPE)
    finally:
        asyncio.run(holder.close())
    assert result.exit_code == 1
    assert "[engine_file]" in result.stderr


def test_an_unreadable_engine_file_is_reported_by_category(tmp_path: Path) -> None:
    result = invoke("--engine-file", str(tmp_path / "no-such-dir" / "engine.journal"), "runs", *SCOPE)
    assert result.exit_code == 1
    assert "[engine_file]" in result.stderr


def test_uri_and_engine_file_together_are_a_usage_error(tmp_path: Path) -> None:
    result = invoke("--uri", UNREACHABLE, "--engine-file", str(tmp_path / "e"), "runs", *SCOPE)
    assert result.exit_code == 2
    assert "either --uri or --engine-file" in result.stderr


def run_module(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - the test's own interpreter
        [sys.executable, "-m", "agent_framework_mongodb", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )


def test_a_real_process_reads_what_another_wrote_to_the_engine_file(tmp_path: Path) -> None:
    engine = tmp_path / "engine.journal"
    ids = seed(engine, count=2)
    runs = run_module("--engine-file", str(engine), "runs", *SCOPE, "--json")
    listed = run_module("--engine-file", str(engine), "checkpoints", *RUN, "--json", SESSION)
    assert runs.returncode == 0, runs.stderr
    assert [run["latest_sequence"] for run in json.loads(runs.stdout)] == [2]
    assert listed.returncode == 0, listed.stderr
    assert [entry["checkpoint_id"] for entry in json.loads(listed.stdout)] == ids


def test_without_the_testing_extra_engine_file_says_how_to_install_it(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['mongomock_ng'] = None\n"
        "from agent_framework_mongodb.cli import main\n"
        f"main(['--engine-file', {str(tmp_path / 'e')!r}, 'runs', '--tenant', 't'])\n"
    )
    completed = subprocess.run(  # noqa: S603 - the test's own interpreter and code
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert completed.returncode == 2, completed.stderr
    assert "agent-framework-mongodb-checkpoints[cli,testing]" in completed.stderr


# -- deadlines: the URI's options win, --timeout fills in ---------------------------------------


def test_deadlines_follow_the_uri_first() -> None:
    assert resolve_deadlines(None, None).operation == 30
    assert resolve_deadlines(None, None).server_selection == 30
    given = resolve_deadlines(UNREACHABLE, 4.5)
    assert (given.operation, given.server_selection) == (4.5, 4.5)
    assert given.client_options == {"serverSelectionTimeoutMS": 4500}
    uri = resolve_deadlines(f"{UNREACHABLE}?serverSelectionTimeoutMS=2000&timeoutMS=7000", 4.5)
    assert (uri.operation, uri.server_selection) == (7.0, 2.0)
    assert uri.client_options == {}  # the URI's own stand
    assert uri.overridden == ("serverSelectionTimeoutMS", "timeoutMS")
    unlimited = resolve_deadlines(f"{UNREACHABLE}?timeoutMS=0", None)
    assert unlimited.operation == 3600  # "no limit" is the storage's largest deadline
    assert unlimited.overridden == ()  # nothing to note without --timeout


def built_clients() -> tuple[CliSettings, list[CheckpointClient]]:
    clients: list[CheckpointClient] = []
    return CliSettings(on_client=clients.append), clients


def test_the_uris_server_selection_timeout_reaches_the_client_and_bounds_the_command() -> None:
    settings, clients = built_clients()
    started = time.monotonic()
    result = invoke("--uri", f"{UNREACHABLE}?serverSelectionTimeoutMS=400", "runs", *SCOPE, settings=settings)
    elapsed = time.monotonic() - started

    assert result.exit_code == 1
    assert "[timeout]" in result.stderr
    assert "0.4 seconds" in result.stderr
    assert elapsed < 10  # not the storage's 30-second operation deadline
    (client,) = clients
    assert isinstance(client, AsyncMongoClient)
    assert client.options.server_selection_timeout == pytest.approx(0.4)


def test_timeout_bounds_the_wait_for_a_server_and_becomes_the_clients_default() -> None:
    settings, clients = built_clients()
    started = time.monotonic()
    result = invoke("--uri", UNREACHABLE, "--timeout", "0.5", "runs", *SCOPE, settings=settings)
    elapsed = time.monotonic() - started

    assert result.exit_code == 1
    assert "within 0.5 seconds" in result.stderr
    assert elapsed < 10
    (client,) = clients
    assert isinstance(client, AsyncMongoClient)
    assert client.options.server_selection_timeout == pytest.approx(0.5)


def test_a_uri_option_beats_timeout_and_says_so() -> None:
    settings, clients = built_clients()
    result = invoke(
        "--uri",
        f"{UNREACHABLE}?serverSelectionTimeoutMS=300",
        "--timeout",
        "20",
        "runs",
        *SCOPE,
        settings=settings,
    )
    assert result.exit_code == 1
    assert "within 0.3 seconds" in result.stderr
    assert "serverSelectionTimeoutMS applies instead of --timeout" in result.stderr
    (client,) = clients
    assert isinstance(client, AsyncMongoClient)
    assert client.options.server_selection_timeout == pytest.approx(0.3)


def test_timeout_is_each_storage_calls_deadline(tmp_path: Path) -> None:
    engine = tmp_path / "engine.journal"
    seed(engine)
    captured: list[InMemoryMongoClient] = []

    def slow_engine(_uri: str | None) -> Any:
        client = InMemoryMongoClient(path=engine)
        captured.append(client)
        client.hold("find")  # the checkpoints' listing never answers: only the deadline ends it
        return client

    started = time.monotonic()
    settings = CliSettings(client_factory=slow_engine)
    result = invoke("--timeout", "0.5", "checkpoints", *RUN, SESSION, settings=settings)
    elapsed = time.monotonic() - started
    asyncio.run(captured[0].close())

    assert result.exit_code == 1
    assert "[timeout]" in result.stderr
    assert elapsed < 10


def test_timeout_must_be_positive() -> None:
    for value in ("0", "-1", "soon", "4000"):
        result = invoke("--timeout", value, "runs", *SCOPE)
        assert result.exit_code == 2, value
        assert "--timeout" in result.stderr


# -- --allow-type on show and checkpoints --------------------------------------------------------


def test_show_needs_allow_type_for_an_application_class(tmp_path: Path) -> None:
    engine = tmp_path / "engine.journal"
    ids = seed(engine, allowed=(Order,))
    file = ("--engine-file", str(engine))

    refused = invoke(*file, "show", *RUN, "--json", SESSION, ids[-1])
    allowed = invoke(*file, "show", *RUN, "--allow-type", ORDER, "--json", SESSION, ids[-1])

    assert refused.exit_code == 1
    assert ORDER in refused.stderr
    assert "[mapping]" in refused.stderr
    assert "Here: --allow-type MODULE:QUALNAME" in refused.stderr
    assert allowed.exit_code == 0, allowed.output
    assert "order" in json.loads(allowed.stdout)["state_keys"]


def test_allow_type_is_checked_on_show_checkpoints_and_sign_run(tmp_path: Path) -> None:
    engine = tmp_path / "engine.journal"
    ids = seed(engine)
    file = ("--engine-file", str(engine))
    commands: list[tuple[str, ...]] = [
        ("show", *RUN, SESSION, ids[0]),
        ("checkpoints", *RUN, SESSION),
        ("sign-run", *RUN, SESSION),
    ]
    for command in commands:
        name, rest = command[0], command[1:]
        malformed = invoke(*file, name, "--allow-type", "not a class", *rest)
        assert malformed.exit_code == 2, (name, malformed.output)
        assert "module:qualname" in malformed.stderr
    listed = invoke(
        *file, "checkpoints", *RUN, "--allow-type", ORDER, "--allow-type", "json.decoder:JSONDecoder", SESSION
    )
    assert listed.exit_code == 0, listed.output
    absent = invoke(*file, "checkpoints", *RUN, "--allow-type", "no_such_module_here:Thing", SESSION)
    assert absent.exit_code == 1
    assert "[configuration]" in absent.stderr
    assert "no_such_module_here" in absent.stderr


# -- exit statuses and --json on the other listing commands ---------------------------------------


def test_help_states_the_exit_statuses() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    assert "Exit status: 0" in result.stdout
    assert "--engine-file" in result.stdout
    assert "--timeout" in result.stdout


def test_sign_run_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import base64
    import secrets

    engine = tmp_path / "engine.journal"
    ids = seed(engine)
    monkeypatch.setenv(
        "AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS", base64.b64encode(secrets.token_bytes(32)).decode()
    )
    result = invoke("--engine-file", str(engine), "sign-run", *RUN, "--json", SESSION)
    assert result.exit_code == 0, result.output
    reported = json.loads(result.stdout)
    candidates = reported.pop("candidates")
    assert reported == {
        "signed": ids,
        "already_signed": [],
        "refused": [],
        "other_lifetime": [],
        "written": False,
        "adopted_latest": None,
    }
    # Each candidate as the operator reviews it, read without decoding its payload.
    assert [candidate["checkpoint_id"] for candidate in candidates] == ids
    assert [candidate["sequence"] for candidate in candidates] == list(range(1, len(ids) + 1))
    assert all(candidate["lifetime"] is None and candidate["verdict"] == "signed" for candidate in candidates)
    assert all(len(candidate["payload_sha256"]) == 64 and candidate["created_at"] for candidate in candidates)


def test_module_and_console_script_run_the_same_command_line(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("agent-framework-mongodb")
    if not script.exists():
        pytest.skip("the console script is not installed beside this interpreter")
    engine = tmp_path / "engine.journal"
    seed(engine)
    env = {**os.environ}
    by_script = subprocess.run(  # noqa: S603 - the project's own console script
        [str(script), "--engine-file", str(engine), "runs", *SCOPE, "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )
    by_module = run_module("--engine-file", str(engine), "runs", *SCOPE, "--json", env=env)
    assert by_script.returncode == by_module.returncode == 0, by_script.stderr + by_module.stderr
    assert json.loads(by_script.stdout) == json.loads(by_module.stdout)
