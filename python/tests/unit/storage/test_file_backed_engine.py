"""A storage on the file-backed engine saves in one process, and another process loads what it saved."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from agent_framework_mongodb.testing import InMemoryMongoClient

from ._support import checkpoint_dict, make_checkpoint, make_storage, message_state

PYTHON_DIR = Path(__file__).resolve().parents[3]

# Run from python/, so the tests package (and its builders) imports as it does here.
_SAVER = textwrap.dedent(
    """
    import asyncio, json, sys
    from agent_framework_mongodb.testing import InMemoryMongoClient
    from tests.unit.storage._support import make_checkpoint, make_storage, message_state

    async def main() -> None:
        async with InMemoryMongoClient(path=sys.argv[1]) as client:
            storage = make_storage(client["checkpoint_db"]["checkpoint_coll"])
            await storage.ensure_indexes()
            previous = None
            for number in range(3):
                checkpoint = make_checkpoint(f"cp-{number}", previous=previous, state=message_state())
                previous = await storage.save(checkpoint)
            print(json.dumps(await storage.list_checkpoint_ids(workflow_name=checkpoint.workflow_name)))

    asyncio.run(main())
    """
)


def _save_in_another_process(path: Path) -> list[str]:
    completed = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", _SAVER, str(path)],
        cwd=PYTHON_DIR,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    ids: list[str] = json.loads(completed.stdout)
    return ids


def test_checkpoints_saved_in_one_process_load_in_another(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.journal"
    assert _save_in_another_process(path) == ["cp-0", "cp-1", "cp-2"]

    async def load_here() -> None:
        async with InMemoryMongoClient(path=path) as client:
            collection = client["checkpoint_db"]["checkpoint_coll"]
            storage = make_storage(collection)
            await storage.validate_indexes()  # the indexes came along
            previous = None
            for number in range(3):
                expected = make_checkpoint(f"cp-{number}", previous=previous, state=message_state())
                assert checkpoint_dict(await storage.load(f"cp-{number}")) == checkpoint_dict(expected)
                previous = expected.checkpoint_id
            latest = await storage.get_latest(workflow_name=expected.workflow_name)
            assert latest is not None
            assert latest.checkpoint_id == "cp-2"
            # The run goes on here: the next save sorts after the other process's saves.
            await storage.save(make_checkpoint("cp-3", previous="cp-2"))
            assert await storage.list_checkpoint_ids(workflow_name=expected.workflow_name) == [
                "cp-0",
                "cp-1",
                "cp-2",
                "cp-3",
            ]

    asyncio.run(load_here())
