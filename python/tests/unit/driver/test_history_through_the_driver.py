"""``checkpoint_history`` and ``diff_checkpoints`` through a real ``AsyncMongoClient`` on the wire front,
signed and unsigned: what pymongo reads is what the engine holds, page by page, and a run another key
signed is refused before anything is decoded."""

from __future__ import annotations

import secrets

import pytest

from agent_framework_mongodb import MongoDBIntegrityError, checkpoint_history
from agent_framework_mongodb.checkpoints import diff_checkpoints
from agent_framework_mongodb.checkpoints.storage import MongoDBCheckpointStorage
from agent_framework_mongodb.testing import WireProtocolServer

from ..storage._support import make_checkpoint, make_storage
from ._front import COLLECTION, DATABASE, engine_collection, large
from .conftest import Connect

KEY = secrets.token_bytes(32)


async def entries_of(storage: MongoDBCheckpointStorage, page_size: int) -> list[dict[str, object]]:
    return [entry.to_dict() async for entry in checkpoint_history(storage, page_size=page_size)]


@pytest.mark.parametrize("keys", [(), (KEY,)], ids=["unsigned", "signed"])
async def test_history_and_diff_through_the_driver_match_the_engines_own(
    front: WireProtocolServer, connect: Connect, keys: tuple[bytes, ...]
) -> None:
    client = connect(front)
    storage = make_storage(client[DATABASE][COLLECTION], signing_keys=list(keys), page_size=2)
    await storage.ensure_indexes()
    small = make_checkpoint("cp-0", state={"size": 0})
    first, second = large("cp-1", messages=150), large("cp-2", messages=200)  # chunked, sharing chunks
    first.previous_checkpoint_id, second.previous_checkpoint_id = "cp-0", "cp-1"
    for checkpoint in (small, first, second):
        await storage.save(checkpoint)

    through_driver = await entries_of(storage, page_size=2)
    direct = make_storage(engine_collection(front), signing_keys=list(keys), page_size=2)
    assert through_driver == await entries_of(direct, page_size=2)
    assert [entry["checkpoint_id"] for entry in through_driver] == ["cp-0", "cp-1", "cp-2"]

    last = through_driver[-1]["diff"]
    assert isinstance(last, dict)
    changed = {change["name"]: change["change"] for change in last["state"]}
    assert changed == {"history": "changed", "size": "changed"}
    diff = diff_checkpoints(await storage.load("cp-1"), await storage.load("cp-2"))
    assert diff.changes_only().to_dict() == last  # history lists changes only
    assert [m.source for m in diff.messages] == ["executor-a"]  # the whole diff lists every name


async def test_a_signed_runs_history_under_another_key_is_refused_through_the_driver(
    front: WireProtocolServer, connect: Connect
) -> None:
    client = connect(front)
    storage = make_storage(client[DATABASE][COLLECTION], signing_keys=[KEY])
    await storage.ensure_indexes()
    await storage.save(large("cp-1"))
    other = make_storage(client[DATABASE][COLLECTION], signing_keys=[secrets.token_bytes(32)])
    with pytest.raises(MongoDBIntegrityError):
        await entries_of(other, page_size=2)
