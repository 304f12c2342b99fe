"""The README's first example reaches a MongoDB server by changing only its URI: here, ``serve``'s.

The README's first example runs as written on the in-process engine (``engine:PATH``,
``tests/unit/test_engine_uri.py``) and says that against a server only the URI changes. This test
changes exactly that, in two processes: it starts ``python -m agent_framework_mongodb serve --port 0``
(the engine behind the wire protocol, reached by pymongo's own client), runs the README's first
``python`` block as a script with its one connection string replaced by the printed URI, and checks
that the script exits 0 and prints
what its ``print(...)  # text`` comments promise. Then, through pymongo on the same URI, it checks that
the served engine, which was empty before, now holds the storage's collection with every index
``ensure_indexes()`` builds, and no document (``clear_run()`` deleted the run): so the example used the
URI it was given, and nothing else. Finally ``serve`` must stop cleanly on SIGINT.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from pymongo import AsyncMongoClient

from agent_framework_mongodb.checkpoints.connection import DEFAULT_COLLECTION_NAME, DEFAULT_DATABASE_NAME
from agent_framework_mongodb.checkpoints.indexes import CHECKPOINT_INDEXES, ID_INDEX_NAME

from ..test_readme_blocks import DOCUMENTS
from .test_serve import start_serving

# As test_readme_blocks reads them: ``print(...)  # text`` promises that ``text`` is printed.
_PROMISED_OUTPUT = re.compile(r"^\s*print\(.*\)\s+# (.+)$", re.MULTILINE)
_ENGINE_URI = re.compile(r'"engine:[^"]*"')


async def _served_state(uri: str) -> tuple[list[str], list[str], set[str], int]:
    """The served engine's databases, the database's collections, the collection's index names and size."""
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(uri, serverSelectionTimeoutMS=10_000)
    try:
        database = client[DEFAULT_DATABASE_NAME]
        collection = database[DEFAULT_COLLECTION_NAME]
        return (
            await client.list_database_names(),
            await database.list_collection_names(),
            set(await collection.index_information()),
            await collection.count_documents({}),
        )
    finally:
        await client.close()


def test_the_readmes_first_example_runs_against_serve(tmp_path: Path) -> None:
    block = DOCUMENTS["README.md"][0]
    assert block.runs, f"{block} is no longer a script that runs"
    engine_uris = _ENGINE_URI.findall(block.source)
    assert len(engine_uris) == 1, f"{block} should name exactly one engine: URI to change, not {engine_uris}"
    promised = _PROMISED_OUTPUT.findall(block.source)
    assert promised, f"{block} promises no output, so there is nothing to check it printed"
    script = tmp_path / "readme_first_example.py"

    process, uri, _ = start_serving("serve", "--port", "0")
    try:
        script.write_text(_ENGINE_URI.sub(f'"{uri}"', block.source), encoding="utf-8")
        databases_before, _, _, _ = asyncio.run(_served_state(uri))
        assert DEFAULT_DATABASE_NAME not in databases_before, databases_before
        completed = subprocess.run(  # noqa: S603 - this interpreter, the README's own script
            [sys.executable, str(script)],
            cwd=tmp_path,
            env={name: value for name, value in os.environ.items() if name != "MONGODB_URI"},
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        databases, collections, indexes, documents = asyncio.run(_served_state(uri))
    finally:
        process.send_signal(signal.SIGINT)
        serve_stdout, serve_stderr = process.communicate(timeout=30)

    assert completed.returncode == 0, f"{block} failed on {uri}:\n{completed.stdout}\n{completed.stderr}"
    for text in promised:
        assert text in completed.stdout, (
            f"{block} promises to print {text!r}; it printed:\n{completed.stdout}"
        )
    # The example's storage wrote to the served engine: its collection and indexes are there...
    unused = f"the example did not use the URI it was given, {uri}"
    assert DEFAULT_DATABASE_NAME in databases, f"{unused}: the served engine has only {databases}"
    assert DEFAULT_COLLECTION_NAME in collections, f"{unused}: {DEFAULT_DATABASE_NAME} has {collections}"
    assert indexes == {ID_INDEX_NAME} | {spec.name for spec in CHECKPOINT_INDEXES}, indexes
    # ... and clear_run() left none of the run's documents behind.
    assert documents == 0, f"{documents} documents are left after clear_run()"
    assert process.returncode == 0, serve_stderr
    assert "Stopped." in serve_stdout
