"""Chunked checkpoints (ADR 0018) against the integration target: the in-process engine by default,
a real server with ``MONGODB_URI`` (where the ``explain`` tests also run).

What only a server can say: that an unordered bulk of chunk upserts and a touch is accepted as the
storage sends it, that chunk documents are stored with a BSON binary ``_id`` and BSON dates, that a
checkpoint above 16 MiB really is split under the server's document limit, and that every chunk
query is served by the index ADR 0018 names.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.checkpoints.chunk_store import SERVER_CUTOFF, TOUCH_WINDOW, window_end
from agent_framework_mongodb.checkpoints.codec import CHUNKED_PAYLOAD_FORMAT, canonical_hash
from agent_framework_mongodb.checkpoints.codec.chunks import references
from agent_framework_mongodb.checkpoints.codec.rebuild import load_tree
from agent_framework_mongodb.checkpoints.indexes import CHUNK_SCOPE_INDEX, SIMPLE_COLLATION
from agent_framework_mongodb.checkpoints.queries import (
    CHUNK_PROJECTION,
    chunk_filter,
    chunks_filter,
    run_filter,
    stale_chunks_filter,
)
from agent_framework_mongodb.checkpoints.scope import CHUNK_KIND, RunScope

from ._support import (
    MongoTarget,
    checkpoint,
    delete_command,
    find_command,
    index_scans,
    stage_names,
    uses_id_index,
    winning_plan_stages,
)

pytestmark = pytest.mark.integration_persistence


def _history(count: int, seed: int = 5) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"role": "user", "text": " ".join(rng.choices(["alpha", "beta", "gamma"], k=50)), "n": n}
        for n in range(count)
    ]


def scope_of(storage: MongoDBCheckpointStorage) -> RunScope:
    return RunScope.from_options(storage.options)


async def chunk_documents(target: MongoTarget, storage: MongoDBCheckpointStorage) -> list[dict[str, Any]]:
    query = {"_kind": CHUNK_KIND, **scope_of(storage).fields()}
    return await target.collection.find(query).to_list(None)


async def root_references(
    target: MongoTarget, storage: MongoDBCheckpointStorage, checkpoint_id: str
) -> list[bytes]:
    root = await target.collection.find_one({**run_filter(scope_of(storage)), "checkpoint_id": checkpoint_id})
    assert root is not None
    assert root["payload_format"] == CHUNKED_PAYLOAD_FORMAT
    return sorted(set(references(load_tree(bytes(root["checkpoint"])))))


async def test_a_chunked_conversation_round_trips_and_its_chunks_are_typed(target: MongoTarget) -> None:
    storage = target.storage(ttl=timedelta(hours=2))
    await storage.ensure_indexes()
    saved = []
    for step in range(3):
        item = checkpoint(f"cp-{step}", state={"history": _history(150 + 2 * step)})
        await storage.save(item)
        saved.append(item)

    reader = target.storage(ttl=timedelta(hours=2))
    for item in saved:
        assert canonical_hash((await reader.load(item.checkpoint_id)).to_dict()) == canonical_hash(
            item.to_dict()
        )
    chunks = await chunk_documents(target, storage)
    assert chunks
    for chunk in chunks:
        assert isinstance(chunk["_id"], bytes)
        assert len(chunk["_id"]) == 32
        assert isinstance(chunk["data"], bytes)
        assert isinstance(chunk["touched_at"], datetime)
        assert isinstance(chunk["expires_at"], datetime)
    result = await storage.clear_run()
    assert result.chunks_deleted == len(chunks)
    assert await chunk_documents(target, storage) == []


async def test_a_checkpoint_above_16_mib_saves_and_loads_equal(target: MongoTarget) -> None:
    storage = target.storage()
    await storage.ensure_indexes()
    blob = random.Random(3).randbytes(20 * 1024 * 1024)
    item = checkpoint("cp-big", state={"blob": blob})

    await storage.save(item)

    assert (await target.storage().load("cp-big")).state["blob"] == blob


async def test_repeated_touches_within_a_window_leave_chunks_unmodified(target: MongoTarget) -> None:
    storage = target.storage()
    await storage.ensure_indexes()
    state = {"history": _history(200)}
    await storage.save(checkpoint("cp-a", state=state))
    before = await chunk_documents(target, storage)
    await storage.save(checkpoint("cp-b", state=state))

    assert await chunk_documents(target, storage) == before
    now = datetime.now(timezone.utc)
    assert all(chunk["touched_at"] <= window_end(now + TOUCH_WINDOW).replace(tzinfo=None) for chunk in before)


# -- plans (a real server only) -------------------------------------------------------------------


async def _seeded(server: MongoTarget) -> tuple[MongoDBCheckpointStorage, list[bytes]]:
    storage = server.storage()
    await storage.ensure_indexes()
    await storage.save(checkpoint("cp-plan", state={"history": _history(300)}))
    await server.storage(session_id="run-neighbour").save(
        checkpoint("cp-plan", state={"history": _history(300, 9)})
    )
    return storage, await root_references(server, storage, "cp-plan")


def _assert_no_scan(explain: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    stages = winning_plan_stages(explain)
    names = stage_names(stages)
    assert "COLLSCAN" not in names, names
    assert "SORT" not in names, names
    return stages


async def test_plan_chunk_fetch_is_an_id_lookup(server: MongoTarget) -> None:
    storage, addresses = await _seeded(server)
    command = find_command(
        server.collection_name,
        chunks_filter(scope_of(storage), addresses),
        CHUNK_PROJECTION,
        sort=[("_id", 1)],
        limit=0,
        single=False,
    )
    explain = await server.explain(command)
    stages = _assert_no_scan(explain)
    assert uses_id_index(stages), stage_names(stages)
    stats = explain["executionStats"]
    assert stats["nReturned"] == len(addresses)
    assert stats["totalDocsExamined"] == len(addresses)


async def test_plan_chunk_touch_is_an_id_lookup(server: MongoTarget) -> None:
    storage, addresses = await _seeded(server)
    moment = window_end(datetime.now(timezone.utc))
    command = {
        "update": server.collection_name,
        "updates": [
            {
                "q": chunk_filter(scope_of(storage), addresses[0]),
                "u": {"$max": {"touched_at": moment, "expires_at": moment}},
                "multi": False,
                "collation": dict(SIMPLE_COLLATION),
            }
        ],
    }
    explain = await server.explain(command)
    stages = _assert_no_scan(explain)
    assert uses_id_index(stages), stage_names(stages)


async def test_plan_chunk_collection_and_clear_use_the_chunk_scope_index(server: MongoTarget) -> None:
    storage, addresses = await _seeded(server)
    scope = scope_of(storage)
    cutoff = SERVER_CUTOFF
    # The stale chunks are read through the chunk scope index (scope, then touched_at) ...
    stale = find_command(
        server.collection_name,
        stale_chunks_filter(scope, cutoff),
        {"_id": 1},
        sort=[("touched_at", 1)],
        limit=0,
        single=False,
    )
    stages = _assert_no_scan(await server.explain(stale))
    assert [scan.get("indexName") for scan in index_scans(stages)] == [CHUNK_SCOPE_INDEX.name]
    # ... and deleted in batches by address; clear_run deletes the run's chunks by scope.
    batch = await server.explain(
        delete_command(server.collection_name, stale_chunks_filter(scope, cutoff, addresses[:1]), many=True)
    )
    _assert_no_scan(batch)
    clear = await server.explain(
        delete_command(server.collection_name, {"_kind": CHUNK_KIND, **scope.fields()}, many=True)
    )
    assert [scan.get("indexName") for scan in index_scans(_assert_no_scan(clear))] == [CHUNK_SCOPE_INDEX.name]
    # explain writes nothing: the run still loads.
    assert (await server.storage().load("cp-plan")).checkpoint_id == "cp-plan"
