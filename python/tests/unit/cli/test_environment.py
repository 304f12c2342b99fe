"""``AGENT_FRAMEWORK_MONGODB_ALLOW_TYPES`` and ``--module-path``: allowed classes and the
application's modules from the environment, added to the command line's; bad values are usage
errors; a module path makes only the listed classes' modules importable."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.checkpoints.connection import DEFAULT_COLLECTION_NAME, DEFAULT_DATABASE_NAME
from agent_framework_mongodb.testing import InMemoryMongoClient

from ..storage._support import APPLICATION, SESSION, TENANT, WORKFLOW, make_checkpoint, make_options
from .test_anywhere import ORDER, Order
from .test_cli import Engine

RUN = ("--tenant", TENANT, "--application", APPLICATION, "--workflow", WORKFLOW)
ALLOW_TYPES = "AGENT_FRAMEWORK_MONGODB_ALLOW_TYPES"
MODULE_PATH = "AGENT_FRAMEWORK_MONGODB_MODULE_PATH"


@dataclasses.dataclass
class Note:
    """A second application class, so that one entry from each source is needed."""

    text: str


NOTE = f"{Note.__module__}:{Note.__qualname__}"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (ALLOW_TYPES, MODULE_PATH, "PYTHONPATH"):
        monkeypatch.delenv(variable, raising=False)
    # --module-path appends to sys.path for the process: each test gets its own copy back.
    monkeypatch.setattr(sys, "path", [*sys.path])


def save(engine: Engine, state: dict[str, Any], allowed: tuple[type | str, ...]) -> str:
    storage = engine.storage(allowed_checkpoint_types=allowed)
    return asyncio.run(storage.save(make_checkpoint(state=state)))


@pytest.fixture
def two_classes() -> tuple[Engine, str]:
    engine = Engine()
    return engine, save(engine, {"order": Order(1, "book"), "note": Note("n")}, (Order, Note))


def show(engine: Engine, checkpoint_id: str, *options: str) -> Result:
    return engine.invoke("show", *RUN, *options, "--json", SESSION, checkpoint_id)


# -- AGENT_FRAMEWORK_MONGODB_ALLOW_TYPES ---------------------------------------------------------


@pytest.mark.parametrize(
    "separated", [f"{ORDER},{NOTE}", f"{ORDER}, {NOTE}", f" {ORDER}\n{NOTE} ", f"{ORDER},,{NOTE},"]
)
def test_the_variable_lists_classes_separated_by_commas_or_whitespace(
    two_classes: tuple[Engine, str], monkeypatch: pytest.MonkeyPatch, separated: str
) -> None:
    engine, checkpoint_id = two_classes
    monkeypatch.setenv(ALLOW_TYPES, separated)
    result = show(engine, checkpoint_id)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["state_keys"] == ["note", "order"]


def test_the_variable_and_allow_type_are_merged(
    two_classes: tuple[Engine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, checkpoint_id = two_classes
    monkeypatch.setenv(ALLOW_TYPES, ORDER)

    variable_only = show(engine, checkpoint_id)
    merged = show(engine, checkpoint_id, "--allow-type", NOTE)
    repeated = show(engine, checkpoint_id, "--allow-type", NOTE, "--allow-type", ORDER)

    assert variable_only.exit_code == 1
    assert "[mapping]" in variable_only.stderr
    assert NOTE in variable_only.stderr  # the class the variable left out, not the one it lists
    assert f"or {ALLOW_TYPES}" in variable_only.stderr
    assert merged.exit_code == 0, merged.output
    assert repeated.exit_code == 0, repeated.output


def test_an_empty_variable_lists_nothing(
    two_classes: tuple[Engine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, checkpoint_id = two_classes
    monkeypatch.setenv(ALLOW_TYPES, "")
    result = show(engine, checkpoint_id, "--allow-type", ORDER, "--allow-type", NOTE)
    assert result.exit_code == 0, result.output


def test_a_malformed_entry_in_the_variable_is_a_usage_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ALLOW_TYPES, f"{ORDER},OrderState")
    result = Engine().invoke("show", *RUN, "--allow-type", NOTE, SESSION, "cp-1")
    assert result.exit_code == 2
    assert f"Invalid value for {ALLOW_TYPES}: " in result.stderr
    assert "'OrderState'" in result.stderr


def test_a_malformed_allow_type_is_a_usage_error_naming_the_option_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ALLOW_TYPES, ORDER)
    result = Engine().invoke("show", *RUN, "--allow-type", "my_app.models.OrderState", SESSION, "cp-1")
    assert result.exit_code == 2
    assert "Invalid value for '--allow-type': " in result.stderr
    assert ALLOW_TYPES not in result.stderr  # the bad entry came from the command line


@pytest.mark.parametrize(
    "command",
    [
        ("checkpoints", *RUN, SESSION),
        ("history", *RUN, SESSION),
        ("diff", *RUN, SESSION, "a", "b"),
        ("sign-run", *RUN, SESSION),
        ("doctor",),
    ],
)
def test_every_command_with_allow_type_reads_the_variable(
    monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    monkeypatch.setenv(ALLOW_TYPES, "not-a-type-key")
    result = Engine().invoke(*command)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {ALLOW_TYPES}" in result.stderr


def test_doctor_checks_the_variables_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_TYPES, f"{ORDER} {NOTE}")
    result = Engine().invoke("doctor", "--json")
    (check,) = [
        check for check in json.loads(result.stdout)["checks"] if check["name"] == "application types"
    ]
    assert check["status"] == "ok"
    assert check["details"]["allowed_types"] == [ORDER, NOTE]


# -- --module-path and AGENT_FRAMEWORK_MONGODB_MODULE_PATH ---------------------------------------

TICKET_MODULE = """
import dataclasses


@dataclasses.dataclass
class Ticket:
    number: int
"""

EXPLOIT_MODULE = """
from pathlib import Path

Path(__file__).with_name("imported.marker").touch()  # proof that something imported this module


class Exploit:
    pass
"""


@dataclasses.dataclass(frozen=True)
class Application:
    """A package in a directory that is not on sys.path, and a checkpoint of each of its classes."""

    directory: Path
    package: str
    ticket_checkpoint: str
    exploit_checkpoint: str

    @property
    def ticket(self) -> str:
        return f"{self.package}.models:Ticket"

    @property
    def marker(self) -> Path:
        return self.directory / self.package / "imported.marker"


def unload(package: str) -> None:
    for name in [name for name in sys.modules if name == package or name.startswith(package + ".")]:
        del sys.modules[name]


@pytest.fixture
def application(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Engine, Application]]:
    """Saved while the package imported; then unloaded and off sys.path, as in a fresh CLI process."""
    package = f"cli_env_app_{uuid.uuid4().hex}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "models.py").write_text(textwrap.dedent(TICKET_MODULE))
    (tmp_path / package / "exploit.py").write_text(textwrap.dedent(EXPLOIT_MODULE))
    engine = Engine()
    with monkeypatch.context() as saving:
        saving.syspath_prepend(str(tmp_path))
        models = __import__(f"{package}.models", fromlist=["Ticket"])
        exploit = __import__(f"{package}.exploit", fromlist=["Exploit"])
        ticket = save(engine, {"ticket": models.Ticket(7)}, (models.Ticket,))
        held = save(engine, {"exploit": exploit.Exploit()}, (exploit.Exploit,))
    unload(package)
    app = Application(tmp_path, package, ticket, held)
    app.marker.unlink()
    yield engine, app
    unload(package)


def test_module_path_makes_a_listed_class_importable(application: tuple[Engine, Application]) -> None:
    engine, app = application

    missing = show(engine, app.ticket_checkpoint, "--allow-type", app.ticket)
    found = show(
        engine, app.ticket_checkpoint, "--allow-type", app.ticket, "--module-path", str(app.directory)
    )

    assert missing.exit_code == 1
    assert "[configuration]" in missing.stderr
    assert f"module '{app.package}.models' not found" in missing.stderr
    assert "--module-path DIR" in missing.stderr  # the fix, in the message
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["state_keys"] == ["ticket"]
    assert sys.path[-1] == str(app.directory.resolve())  # after every installed module: shadows none


def test_the_module_path_variable_holds_directories_separated_by_pathsep(
    application: tuple[Engine, Application],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, app = application
    other = tmp_path_factory.mktemp("other")
    monkeypatch.setenv(MODULE_PATH, os.pathsep.join((str(other), str(app.directory), "")))
    monkeypatch.setenv(ALLOW_TYPES, app.ticket)

    result = show(engine, app.ticket_checkpoint)

    assert result.exit_code == 0, result.output
    assert sys.path[-2:] == [str(other.resolve()), str(app.directory.resolve())]


def test_a_module_path_never_lets_a_payload_import_an_unlisted_module(
    application: tuple[Engine, Application],
) -> None:
    engine, app = application

    refused = show(
        engine, app.exploit_checkpoint, "--allow-type", app.ticket, "--module-path", str(app.directory)
    )

    assert refused.exit_code == 1
    assert "[mapping]" in refused.stderr
    assert f"{app.package}.exploit:Exploit" in refused.stderr
    assert not app.marker.exists()  # the module the payload names never ran
    assert f"{app.package}.exploit" not in sys.modules


@pytest.mark.parametrize("where", ["option", "variable"])
def test_a_module_path_that_is_not_a_directory_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    file = tmp_path / "models.py"
    file.write_text("")
    for entry in (str(tmp_path / "missing"), str(file)):
        if where == "variable":
            monkeypatch.setenv(MODULE_PATH, entry)
            result = Engine().invoke("show", *RUN, SESSION, "cp-1")
            hint = MODULE_PATH
        else:
            result = Engine().invoke("show", *RUN, "--module-path", entry, SESSION, "cp-1")
            hint = "'--module-path'"
        assert result.exit_code == 2, result.output
        assert f"Invalid value for {hint}: {entry!r} is not a directory" in result.stderr


def test_the_variables_serve_a_cli_process_started_without_pythonpath(
    application: tuple[Engine, Application], tmp_path_factory: pytest.TempPathFactory
) -> None:
    engine, app = application
    elsewhere = tmp_path_factory.mktemp(
        "elsewhere"
    )  # not the application's directory: python -m puts cwd on sys.path
    journal = elsewhere / "engine.journal"

    async def copy_run() -> None:
        async with InMemoryMongoClient(path=journal) as client:
            collection = client[DEFAULT_DATABASE_NAME][DEFAULT_COLLECTION_NAME]
            await MongoDBCheckpointStorage(collection, options=make_options()).ensure_indexes()
            async for document in engine.collection.find({}):  # the stored documents, as they are
                await collection.insert_one(document)

    asyncio.run(copy_run())
    environment = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", MODULE_PATH}}
    environment[ALLOW_TYPES] = app.ticket
    command = [sys.executable, "-m", "agent_framework_mongodb", "--engine-file", str(journal), "show", *RUN]
    command += ["--json", SESSION, app.ticket_checkpoint]

    def run(environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603 - the test's own interpreter and code
            command, capture_output=True, text=True, check=False, env=environment, cwd=elsewhere
        )

    without = run(environment)
    shown = run({**environment, MODULE_PATH: str(app.directory)})

    assert without.returncode == 1, without.stderr
    assert "not found" in without.stderr
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state_keys"] == ["ticket"]
