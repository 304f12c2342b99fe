"""``serve``: the engine file behind the wire-protocol front, for a real driver, until interrupted."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from pymongo import AsyncMongoClient

from agent_framework_mongodb.cli._app import cli
from agent_framework_mongodb.testing import InMemoryMongoClient

URI = re.compile(r"mongodb://127\.0\.0\.1:\d+/\?replicaSet=(\S+)")


def start_serving(*args: str) -> tuple[subprocess.Popen[str], str, str]:
    """The serving process, the URI it printed and the line it printed it on."""
    process = subprocess.Popen(  # noqa: S603 - the test's own interpreter
        [sys.executable, "-m", "agent_framework_mongodb", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()  # the URI line, printed once the server listens
    found = URI.search(first)
    if found is None:
        process.kill()
        _, stderr = process.communicate(timeout=30)
        raise AssertionError(f"no URI in {first!r}; stderr: {stderr}")
    return process, found.group(0), first


async def insert_through(uri: str) -> None:
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(uri, serverSelectionTimeoutMS=10_000)
    try:
        await client["app"]["items"].insert_one({"_id": "served", "n": 1})
    finally:
        await client.close()


def test_serve_prints_the_uri_and_a_driver_writes_to_the_engine_file(tmp_path: Path) -> None:
    engine_file = tmp_path / "dev.journal"
    process, uri, _ = start_serving(
        "serve", "--engine-file", str(engine_file), "--port", "0", "--replica-set", "dev"
    )
    try:
        assert uri.endswith("?replicaSet=dev")
        asyncio.run(insert_through(uri))
    finally:
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert "Stopped." in stdout

    async def stored() -> list[dict[str, object]]:
        async with InMemoryMongoClient(path=engine_file) as engine:
            return await engine["app"]["items"].find({}).to_list()

    assert asyncio.run(stored()) == [{"_id": "served", "n": 1}]


def test_serve_takes_the_groups_engine_file_too(tmp_path: Path) -> None:
    process, uri, first = start_serving(
        "--engine-file", str(tmp_path / "dev.journal"), "serve", "--port", "0"
    )
    try:
        assert uri.endswith("?replicaSet=rs0")
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert f"the engine file {str(tmp_path / 'dev.journal')!r}" in first


def test_two_different_engine_files_are_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--engine-file", str(tmp_path / "a"), "serve", "--engine-file", str(tmp_path / "b")]
    )
    assert result.exit_code == 2
    assert "two different engine files" in result.output


def test_a_port_in_use_is_reported_by_category(tmp_path: Path) -> None:
    process, uri, _ = start_serving("serve", "--port", "0")
    port = uri.split(":")[2].split("/")[0]
    try:
        result = CliRunner().invoke(cli, ["serve", "--engine-file", str(tmp_path / "e"), "--port", port])
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert result.exit_code == 1
    assert "[serve] Cannot listen on 127.0.0.1:" in result.output
