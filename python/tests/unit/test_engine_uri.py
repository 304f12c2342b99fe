"""``engine:PATH`` connection strings: the README's first screen without a MongoDB server.

A storage built from ``engine:PATH`` (given, or in ``MONGODB_URI``) keeps its run in the
file-backed in-process engine; the same code with a ``mongodb://`` URI talks to a server. The
last test runs the README's first block unchanged, in a new process and an empty folder, as a
reader would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from agent_framework import WorkflowCheckpoint
from pymongo import AsyncMongoClient

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageOptions,
    MongoDBConfigurationError,
)
from agent_framework_mongodb.checkpoints.connection import create_owned_client
from agent_framework_mongodb.testing import InMemoryMongoClient

OPTIONS = MongoDBCheckpointStorageOptions(tenant_id="t", workflow_name="w", session_id="s")
REPOSITORY = Path(__file__).resolve().parents[3]


def checkpoint(number: int) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g", checkpoint_id=f"c{number}")


async def test_a_run_saved_through_an_engine_uri_is_in_its_file_for_the_next_storage(tmp_path: Path) -> None:
    uri = f"engine:{tmp_path / 'runs.engine'}"
    async with await MongoDBCheckpointStorage.connect(connection_string=uri, options=OPTIONS) as storage:
        await storage.ensure_indexes()
        await storage.save(checkpoint(1))
    assert (tmp_path / "runs.engine").is_file()
    # The first storage's close released the file: a later one, as in another process, opens it.
    async with await MongoDBCheckpointStorage.connect(connection_string=uri, options=OPTIONS) as storage:
        latest = await storage.get_latest(workflow_name="w")
    assert latest is not None
    assert latest.checkpoint_id == "c1"


async def test_mongodb_uri_may_name_an_engine_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGODB_URI", f"engine:{tmp_path / 'env.engine'}")
    async with await MongoDBCheckpointStorage.connect(options=OPTIONS) as storage:
        await storage.save(checkpoint(1))
        assert [c.checkpoint_id for c in await storage.list_checkpoints(workflow_name="w")] == ["c1"]


def test_a_relative_path_is_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    client = create_owned_client("engine:here.engine")
    assert isinstance(client, InMemoryMongoClient)
    assert client.path is not None
    assert client.path.resolve() == (tmp_path / "here.engine").resolve()


def test_a_mongodb_uri_still_builds_pymongos_client() -> None:
    client = create_owned_client("mongodb://localhost:27017/?serverSelectionTimeoutMS=50")
    assert isinstance(client, AsyncMongoClient)


@pytest.mark.parametrize("uri", ["engine:", "engine:  "])
def test_an_engine_uri_without_a_path_is_refused(uri: str) -> None:
    with pytest.raises(MongoDBConfigurationError, match=r"engine:PATH, as in engine:checkpoints\.engine"):
        create_owned_client(uri)


async def test_an_engine_file_another_storage_holds_is_refused_with_why(tmp_path: Path) -> None:
    uri = f"engine:{tmp_path / 'held.engine'}"
    async with await MongoDBCheckpointStorage.connect(connection_string=uri, options=OPTIONS):
        with pytest.raises(MongoDBConfigurationError, match=r"cannot be used: .* is open in another"):
            await MongoDBCheckpointStorage.connect(connection_string=uri, options=OPTIONS)


def test_a_file_that_is_not_an_engines_is_refused_and_left_alone(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"my notes\n")
    with pytest.raises(MongoDBConfigurationError, match=r"cannot be used: .*not an InMemoryMongoClient file"):
        create_owned_client(f"engine:{notes}")
    assert notes.read_bytes() == b"my notes\n"


def test_a_directory_is_refused_as_an_engine_file(tmp_path: Path) -> None:
    with pytest.raises(MongoDBConfigurationError, match="engine file"):
        create_owned_client(f"engine:{tmp_path}")


def test_without_the_testing_extra_the_message_says_what_to_install() -> None:
    # A new interpreter in which mongomock_ng cannot be imported, as without the testing extra.
    script = (
        "import sys; sys.modules['mongomock_ng'] = None\n"
        "from agent_framework_mongodb.checkpoints.connection import create_owned_client\n"
        "from agent_framework_mongodb.errors import MongoDBConfigurationError\n"
        "try:\n"
        "    create_owned_client('engine:x.engine')\n"
        "except MongoDBConfigurationError as error:\n"
        "    print(error)\n"
    )
    command = [sys.executable, "-c", script]
    result = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)  # noqa: S603
    assert 'pip install "agent-framework-mongodb-checkpoints[testing]"' in result.stdout, result.stderr


def readme_first_block() -> str:
    readme = (REPOSITORY / "README.md").read_text()
    block = re.search(r"^```python\n(.*?)^```$", readme, re.DOTALL | re.MULTILINE)
    assert block is not None, "README.md has no python block"
    return block.group(1)


def test_the_readmes_first_screen_runs_as_written_without_a_server(tmp_path: Path) -> None:
    source = readme_first_block()
    assert '"engine:' in source, "the README's first block no longer runs on the engine as written"
    (tmp_path / "first_screen.py").write_text(source)
    environment = {name: value for name, value in os.environ.items() if name != "MONGODB_URI"}
    for attempt in range(2):  # twice: the file the first run left must not stop the second
        result = subprocess.run(
            [sys.executable, "first_screen.py"],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, f"run {attempt + 1}: {result.stderr}"
        assert result.stdout.splitlines() == ["['Hello, Ada']", "2 checkpoints deleted"], result.stdout
