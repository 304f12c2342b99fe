"""``fork`` end to end over the in-process engine: text at 80 columns on a terminal and in a pipe,
``--json``, a repeated fork, signing and refusals."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import secrets
import uuid

import pytest

from ..storage._support import APPLICATION, SESSION, TENANT, WORKFLOW
from .test_cli import Engine, save_run

RUN = ("--tenant", TENANT, "--application", APPLICATION, "--workflow", WORKFLOW)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
KEYS_VARIABLE = "AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS"
TARGET = f"fork-of-{SESSION}-{uuid.uuid4()}"
"""Longer than a table cell at 80 columns leaves room for."""


@pytest.fixture(autouse=True)
def eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv(KEYS_VARIABLE, raising=False)


def stored_ids(engine: Engine, session_id: str) -> list[str]:
    storage = engine.storage(session_id=session_id)
    return asyncio.run(storage.list_checkpoint_ids(workflow_name=WORKFLOW))


def test_fork_copies_the_latest_by_default_and_says_how_to_resume() -> None:
    engine = Engine()
    ids = save_run(engine, 3)

    result = engine.invoke("fork", *RUN, "--to", TARGET, SESSION)

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert f"forked:     {WORKFLOW}/{SESSION}" in lines
    assert f"into:       {TARGET}" in lines
    assert f"resume at:  {ids[-1]}" in lines
    assert "copied:     1, already there: 0" in lines
    assert f"1\t{ids[-1]}" in result.stdout  # the piped listing: tab-separated, whole
    assert stored_ids(engine, TARGET) == [ids[-1]]
    assert stored_ids(engine, SESSION) == ids


def test_fork_at_80_columns_on_a_terminal_prints_every_id_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # Rich: standard output is a terminal
    engine = Engine()
    ids = save_run(engine, 4)

    result = engine.invoke("fork", *RUN, "--to", TARGET, "--keep", "chain", SESSION)

    assert result.exit_code == 0, result.output
    for checkpoint_id in ids:
        assert checkpoint_id in result.stdout
    lines = _ANSI.sub("", result.stdout).splitlines()
    assert [line for line in lines if len(line) > 80] == []
    assert f"resume at:  {ids[-1]}" in lines


def test_fork_json_and_a_repeated_fork() -> None:
    engine = Engine()
    ids = save_run(engine, 4)

    first = engine.invoke(
        "fork", *RUN, "--to", TARGET, "--keep", "2", "--checkpoint", ids[2], "--json", SESSION
    )
    again = engine.invoke(
        "fork", *RUN, "--to", TARGET, "--keep", "2", "--checkpoint", ids[2], "--json", SESSION
    )

    assert first.exit_code == 0, first.output
    copied = json.loads(first.stdout)
    assert copied == {
        "workflow_name": WORKFLOW,
        "source_session_id": SESSION,
        "session_id": TARGET,
        "checkpoint_id": ids[2],
        "checkpoint_ids": ids[1:3],
        "copied": 2,
        "already_copied": 0,
        "payload_bytes": copied["payload_bytes"],
        "signed": False,
        "transplanted": 0,  # small checkpoints, stored whole
        "reencoded": 2,
    }
    assert json.loads(again.stdout) | {"copied": 2, "already_copied": 0, "reencoded": 2} == copied
    assert json.loads(again.stdout)["already_copied"] == 2


def test_fork_with_signing_keys_signs_the_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    key = secrets.token_bytes(32)
    monkeypatch.setenv(KEYS_VARIABLE, base64.b64encode(key).decode("ascii"))
    engine = Engine()
    save_run(engine, 2, signing_keys=[key])

    result = engine.invoke("fork", *RUN, "--to", TARGET, "--keep", "chain", "--json", SESSION)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["signed"] is True
    unsigned = Engine()
    save_run(unsigned, 2)
    refused = unsigned.invoke("fork", *RUN, "--to", TARGET, SESSION)
    assert refused.exit_code == 1
    assert "verify" in refused.output
    assert stored_ids(unsigned, TARGET) == []


@pytest.mark.parametrize(
    ("arguments", "status", "message"),
    [
        (("--keep", "0"), 2, "count of at least 1"),
        (("--keep", "all"), 2, "count of at least 1"),
        (("--checkpoint", "cp-missing"), 1, "no checkpoint with that id"),
    ],
)
def test_fork_refusals(arguments: tuple[str, ...], status: int, message: str) -> None:
    engine = Engine()
    save_run(engine, 2)

    result = engine.invoke("fork", *RUN, "--to", TARGET, *arguments, SESSION)

    assert result.exit_code == status
    assert message in result.output
    assert stored_ids(engine, TARGET) == []


def test_fork_into_a_session_holding_other_checkpoints_is_refused() -> None:
    engine = Engine()
    save_run(engine, 2)
    mine = save_run(engine, 1, session_id=TARGET)

    result = engine.invoke("fork", *RUN, "--to", TARGET, SESSION)

    assert result.exit_code == 1
    assert "already holds" in result.output
    assert stored_ids(engine, TARGET) == mine
