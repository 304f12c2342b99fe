"""``fork_run`` through a real ``AsyncMongoClient`` on the wire front (ADR 0036), signed and unsigned: the
copy loads equal, the source is unchanged, a fork stopped by a failed command is finished by its retry,
and a repeated fork writes nothing."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import MongoDBPersistenceError
from agent_framework_mongodb.testing import WireProtocolServer

from ..storage._support import make_checkpoint, make_storage
from ._front import COLLECTION, DATABASE, engine_collection, identity, large
from .conftest import Connect

KEY = secrets.token_bytes(32)
TARGET = "session-fork"


async def run_documents(front: WireProtocolServer, session_id: str) -> list[dict[str, Any]]:
    """Every document of a run, read from the engine behind the front (no driver)."""
    return await engine_collection(front).find({"session_id": session_id}, sort=[("_id", 1)]).to_list(None)


def chain() -> list[WorkflowCheckpoint]:
    """Three small checkpoints, then two chunked ones whose histories share chunks."""
    small = [
        make_checkpoint(f"cp-{index}", previous=None if index == 0 else f"cp-{index - 1}", state={"i": index})
        for index in range(3)
    ]
    big = [large("cp-3", messages=150), large("cp-4", messages=200)]
    big[0].previous_checkpoint_id, big[1].previous_checkpoint_id = "cp-2", "cp-3"
    return [*small, *big]


@pytest.mark.parametrize("keys", [(), (KEY,)], ids=["unsigned", "signed"])
async def test_a_fork_stopped_by_a_failed_command_is_finished_by_its_retry(
    front: WireProtocolServer, connect: Connect, keys: tuple[bytes, ...]
) -> None:
    client = connect(front)
    source = make_storage(client[DATABASE][COLLECTION], signing_keys=list(keys))
    await source.ensure_indexes()
    saved = chain()
    for checkpoint in saved:
        await source.save(checkpoint)
    source_before = await run_documents(front, source.options.session_id)
    # The copy's first chunk write (an `update` command: only a chunked save sends one) is refused
    # by the server with a non-retryable error, so pymongo does not retry it.
    await client["admin"].command(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {"failCommands": ["update"], "errorCode": 2},
        }
    )

    with pytest.raises(MongoDBPersistenceError):
        await source.fork_run(to_session_id=TARGET, keep="chain")

    stopped = await run_documents(front, TARGET)
    assert sorted(doc["checkpoint_id"] for doc in stopped if "checkpoint_id" in doc) == [
        "cp-0",
        "cp-1",
        "cp-2",
    ]

    finished = await source.fork_run(to_session_id=TARGET, keep="chain")
    again = await source.fork_run(to_session_id=TARGET, keep="chain")

    assert (finished.copied, finished.already_copied) == (2, 3)
    assert (again.copied, again.already_copied) == (0, 5)
    assert finished.signed is bool(keys)
    target = source.for_session(TARGET)
    for checkpoint in saved:
        assert identity(await target.load(checkpoint.checkpoint_id)) == identity(checkpoint)
    assert await run_documents(front, source.options.session_id) == source_before, "the source changed"
    copies = [doc for doc in await run_documents(front, TARGET) if doc["_kind"] == "workflow_checkpoint"]
    assert len(copies) == 5
    assert all(("payload_signature" in doc) is bool(keys) for doc in copies)
