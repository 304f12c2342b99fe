"""Chunked checkpoints (issue 13): a large checkpoint is stored as a root and the run's chunks.

What is pinned here: which checkpoints are chunked, that each loads equal through every read,
what a save sends and what it costs, and the lifecycle (a chunk removed meanwhile, another writer,
expiry, ``delete``, ``keep_last`` collection, ``clear_run``), scoping and the refusals.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.checkpoints.chunk_store import (
    CHUNK_EXPIRY_MARGIN,
    COLLECTION_GRACE,
    PERMANENT_EXPIRY,
    TOUCH_WINDOW,
    window_end,
)
from agent_framework_mongodb.checkpoints.codec import CHUNKED_PAYLOAD_FORMAT, PAYLOAD_FORMAT, canonical_hash
from agent_framework_mongodb.checkpoints.codec.chunks import references
from agent_framework_mongodb.checkpoints.codec.rebuild import load_tree
from agent_framework_mongodb.checkpoints.scope import CHUNK_KIND
from agent_framework_mongodb.errors import (
    MongoDBCheckpointNotFoundError,
    MongoDBConfigurationError,
    MongoDBIntegrityError,
    MongoDBMappingError,
    MongoDBSerializationError,
)
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    INSERT,
    SCOPE_FIELDS,
    WORKFLOW,
    ProxyCollection,
    advance_server_clock,
    end_counter_grace,
    engine_client,
    make_checkpoint,
    make_options,
    make_storage,
    pin_server_clock,
    raw_checkpoints,
    scope_of,
)

ALLOCATE = "find_one_and_update"
CHUNK_WRITE = "bulk_write"
KEY = b"k" * 32


def _history(count: int, *, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    return [
        {
            "role": "user" if index % 2 == 0 else "assistant",
            "text": " ".join(rng.choices(words, k=40)),
            "n": index,
        }
        for index in range(count)
    ]


def conversation(step: int, *, run: str = "cp", per_step: int = 2) -> WorkflowCheckpoint:
    """The checkpoint of superstep ``step`` of a conversation growing ``per_step`` messages a step."""
    return make_checkpoint(
        f"{run}-{step:04d}",
        previous=None if step == 0 else f"{run}-{step - 1:04d}",
        state={"history": _history(per_step * (step + 1)), "step": step},
    )


def identity(checkpoint: WorkflowCheckpoint) -> str:
    return canonical_hash(checkpoint.to_dict())


async def chunk_documents(collection: InMemoryCollection, **match: Any) -> list[dict[str, Any]]:
    return await collection.find({"_kind": CHUNK_KIND, **match}).to_list(None)


async def test_a_small_checkpoint_stays_one_document(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await storage.save(make_checkpoint("cp-small"))

    (document,) = await raw_checkpoints(collection)
    assert document["payload_format"] == PAYLOAD_FORMAT
    assert await chunk_documents(collection) == []


async def test_a_large_checkpoint_is_a_root_and_chunks_that_load_equal(
    collection: InMemoryCollection,
) -> None:
    storage = make_storage(collection)
    checkpoint = conversation(200)
    await storage.save(checkpoint)

    (root,) = await raw_checkpoints(collection)
    chunks = await chunk_documents(collection)
    assert root["payload_format"] == CHUNKED_PAYLOAD_FORMAT
    assert len(root["checkpoint"]) < root["payload_bytes"] // 10
    assert len(chunks) > 3
    scope = scope_of(storage).fields()
    for chunk in chunks:
        assert {field: chunk[field] for field in SCOPE_FIELDS} == scope
        assert isinstance(chunk["_id"], bytes)
        assert len(chunk["_id"]) == 32
        assert chunk["expires_at"] == PERMANENT_EXPIRY.replace(tzinfo=None)

    fresh = make_storage(collection)  # another process: nothing remembered
    loaded = [
        await fresh.load(checkpoint.checkpoint_id),
        await fresh.get_latest(workflow_name=WORKFLOW),
        *(await fresh.list_checkpoints(workflow_name=WORKFLOW)),
        *(await fresh.list_checkpoint_page(workflow_name=WORKFLOW)).checkpoints,
    ]
    assert [identity(item) for item in loaded if item is not None] == [identity(checkpoint)] * 4


async def test_an_appending_save_sends_only_its_new_chunks(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await storage.save(conversation(300))
    before = {chunk["_id"] for chunk in await chunk_documents(collection)}

    await storage.save(conversation(301))

    after = {chunk["_id"] for chunk in await chunk_documents(collection)}
    new = after - before
    assert 0 < len(new) <= 3
    sizes = sorted(len(chunk["data"]) for chunk in await chunk_documents(collection) if chunk["_id"] in new)
    assert sum(sizes) < 8 * 1024, sizes


async def test_a_chunked_save_waits_for_two_round_trips_and_a_load_two(proxy: ProxyCollection) -> None:
    storage = make_storage(proxy)
    await storage.ensure_indexes()  # as deployed: no first-save look at the indexes
    proxy.reset()
    # A run's first save: its chunks, its allocation and the retained-maximum read go out together.
    await storage.save(conversation(100))
    assert proxy.waves == [[CHUNK_WRITE, ALLOCATE, "find_one"], [INSERT]]
    for step in range(101, 103):
        await storage.save(conversation(step))
    end_counter_grace(proxy)
    await storage.save(conversation(103))
    proxy.reset()

    await storage.save(conversation(104))
    assert proxy.waves == [[CHUNK_WRITE, ALLOCATE], [INSERT]]
    proxy.reset()
    await make_storage(proxy).load(conversation(104).checkpoint_id)
    assert proxy.trip_names == ["find_one", "find_fetch"]


async def test_a_remembered_chunk_removed_meanwhile_is_written_again(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await storage.save(conversation(150))
    await collection.delete_many({"_kind": CHUNK_KIND})
    # The next window's first save touches what it remembers (test_chunk_touches.py: within the
    # window a save leaves the touch out).
    advance_server_clock(collection, TOUCH_WINDOW)

    await storage.save(conversation(151))

    loaded = await make_storage(collection).load(conversation(151).checkpoint_id)
    assert identity(loaded) == identity(conversation(151))


async def test_two_writers_of_a_run_share_its_chunks(collection: InMemoryCollection) -> None:
    first, second = make_storage(collection), make_storage(collection)
    await first.save(conversation(120))
    count = len(await chunk_documents(collection))

    await second.save(conversation(120, run="other-id"))  # same content, another id

    assert len(await chunk_documents(collection)) == count
    for storage, checkpoint in ((first, conversation(120, run="other-id")), (second, conversation(120))):
        assert identity(await storage.load(checkpoint.checkpoint_id)) == identity(checkpoint)


async def test_a_missing_chunk_fails_the_load_clearly(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await storage.save(conversation(100))
    victim = (await chunk_documents(collection))[0]
    await collection.delete_one({"_id": victim["_id"]})

    with pytest.raises(MongoDBMappingError, match="missing"):
        await make_storage(collection).load(conversation(100).checkpoint_id)


@pytest.mark.parametrize("signing_keys", [[], [KEY]], ids=["unsigned", "signed"])
async def test_an_expired_checkpoint_whose_chunks_went_first_is_not_found(
    collection: InMemoryCollection, signing_keys: list[bytes]
) -> None:
    """The TTL monitor removes expired roots and chunks in no set order (issue 29): an expired root
    still stored after its chunks went is gone, not corrupt, through every read."""
    await make_storage(collection, signing_keys=signing_keys).save(make_checkpoint("cp-kept"))
    await make_storage(collection, ttl=timedelta(hours=1), signing_keys=signing_keys).save(conversation(100))
    advance_server_clock(collection, timedelta(hours=2))
    await collection.delete_many({"_kind": CHUNK_KIND})

    reader = make_storage(collection, signing_keys=signing_keys)
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await reader.load(conversation(100).checkpoint_id)
    latest = await reader.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == "cp-kept"
    assert await reader.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-kept"]
    assert [c.checkpoint_id for c in await reader.list_checkpoints(workflow_name=WORKFLOW)] == ["cp-kept"]


async def test_an_expired_checkpoint_the_monitor_has_not_removed_yet_is_not_found(
    collection: InMemoryCollection,
) -> None:
    storage = make_storage(collection, ttl=timedelta(hours=1))
    await storage.save(make_checkpoint("cp-short"))
    assert (await storage.load("cp-short")).checkpoint_id == "cp-short"
    advance_server_clock(collection, timedelta(hours=2))

    assert len(await raw_checkpoints(collection)) == 1  # no TTL monitor has run
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("cp-short")
    assert await storage.get_latest(workflow_name=WORKFLOW) is None


async def test_collection_spares_the_chunks_of_a_root_that_only_looked_expired(
    collection: InMemoryCollection,
) -> None:
    """Reads leave expired checkpoints out; collection must not: a server clock that jumps ahead past
    a checkpoint's expiry and the collection grace, then back, would cost it its chunks."""
    short = make_storage(collection, ttl=timedelta(hours=1))
    await short.save(conversation(100))
    pruner = make_storage(collection, keep_last=1)
    before = engine_client(collection).server_now()
    advance_server_clock(collection, COLLECTION_GRACE + timedelta(hours=3))
    await pruner._collect_chunks()  # what a prune that deleted checkpoints runs next

    pin_server_clock(collection, before.replace(tzinfo=timezone.utc))
    loaded = await make_storage(collection).load(conversation(100).checkpoint_id)
    assert identity(loaded) == identity(conversation(100))


async def test_a_modified_chunk_fails_the_load(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await storage.save(conversation(100))
    victim = (await chunk_documents(collection))[0]
    data = bytearray(victim["data"])
    data[len(data) // 2] ^= 0x01
    await collection.update_one({"_id": victim["_id"]}, {"$set": {"data": bytes(data)}})

    with pytest.raises(MongoDBMappingError, match="does not match its address"):
        await make_storage(collection).load(conversation(100).checkpoint_id)


async def test_chunks_are_never_found_from_another_run(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await storage.save(conversation(100))
    other = make_storage(collection, session_id="session-other")
    # The other run's root copied over with its own scope: its chunks are addressed in another
    # run's context, and the copy's chunk queries state this run's scope.
    (root,) = await raw_checkpoints(collection)
    other_scope = scope_of(other)
    copy = {
        **root,
        **other_scope.fields(),
        "_id": other_scope.checkpoint_document_id(root["checkpoint_id"]),
    }
    await collection.insert_one(copy)

    with pytest.raises(MongoDBMappingError):
        await other.load(root["checkpoint_id"])


async def test_signing_covers_the_chunks(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, signing_keys=[KEY])
    await storage.save(conversation(100))
    assert identity(await storage.load(conversation(100).checkpoint_id)) == identity(conversation(100))

    (root,) = await raw_checkpoints(collection)
    await collection.update_one({"_id": root["_id"]}, {"$set": {"payload_format": PAYLOAD_FORMAT}})
    with pytest.raises(MongoDBIntegrityError):
        await make_storage(collection, signing_keys=[KEY]).load(conversation(100).checkpoint_id)


def _naive(moment: datetime) -> datetime:
    return moment.replace(tzinfo=None)


async def test_chunks_expire_no_earlier_than_their_latest_checkpoint(collection: InMemoryCollection) -> None:
    short = make_storage(collection, ttl=timedelta(hours=1))
    await short.save(conversation(100))
    (first,) = await raw_checkpoints(collection)
    expected = _naive(window_end(first["expires_at"].replace(tzinfo=timezone.utc) + CHUNK_EXPIRY_MARGIN))
    assert {chunk["expires_at"] for chunk in await chunk_documents(collection)} == {expected}

    longer = make_storage(collection, ttl=timedelta(days=2))
    await longer.save(conversation(101))
    second = (await raw_checkpoints(collection))[-1]
    floor = second["expires_at"] + CHUNK_EXPIRY_MARGIN
    referenced = await _referenced(collection, second)
    assert referenced
    assert all(
        chunk["expires_at"] >= floor
        for chunk in await chunk_documents(collection)
        if chunk["_id"] in referenced
    )

    await make_storage(collection).save(conversation(102))  # permanent
    permanent = await _referenced(collection, (await raw_checkpoints(collection))[-1])
    await short.save(conversation(103))  # expiring again, later: permanence still dominates
    for chunk in await chunk_documents(collection):
        if chunk["_id"] in permanent:
            assert chunk["expires_at"] == _naive(PERMANENT_EXPIRY)
    latest = (await raw_checkpoints(collection))[-1]
    assert identity(await make_storage(collection).load(latest["checkpoint_id"])) == identity(
        conversation(103)
    )


async def _referenced(collection: InMemoryCollection, root: dict[str, Any]) -> set[bytes]:
    """The chunk addresses a stored root names (read through the codec's own loader)."""
    tree = load_tree(root["checkpoint"])
    return set(references(tree)) | {
        root["nested_chunks"][start : start + 32]
        for start in range(0, len(root.get("nested_chunks", b"")), 32)
    }


@pytest.mark.parametrize("skew", [timedelta(hours=-3), timedelta(hours=3)], ids=["behind", "ahead"])
async def test_no_writers_clock_makes_a_chunk_expire_before_a_checkpoint_that_uses_it(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch, skew: timedelta
) -> None:
    """``expires_at`` is the writer's clock plus ``ttl`` (issue 29: the skew bound): a writer whose
    clock is off shifts its own checkpoints' expiry by as much, and never a chunk's below the
    expiry (plus the margin) of any checkpoint that references it, since every save moves each of
    its chunks to its own expiry with ``$max``."""
    from agent_framework_mongodb.checkpoints import storage as storage_module
    from agent_framework_mongodb.checkpoints.documents import utc_now as real_now

    on_time = make_storage(collection, ttl=timedelta(hours=1))
    skewed = make_storage(collection, ttl=timedelta(hours=1))

    async def save_skewed(step: int) -> None:
        with monkeypatch.context() as patched:
            patched.setattr(storage_module, "utc_now", lambda: real_now() + skew)
            await skewed.save(conversation(step))

    await on_time.save(conversation(100))
    await save_skewed(101)
    await on_time.save(conversation(102))
    await save_skewed(103)

    chunks = {chunk["_id"]: chunk["expires_at"] for chunk in await chunk_documents(collection)}
    roots = await raw_checkpoints(collection)
    assert len(roots) == 4
    for root in roots:
        for address in await _referenced(collection, root):
            assert chunks[address] >= root["expires_at"] + CHUNK_EXPIRY_MARGIN


async def test_touches_within_a_window_modify_nothing(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = make_storage(collection)
    await storage.save(conversation(100))
    before = await chunk_documents(collection)

    await storage.save(conversation(100, run="same-content"))  # every chunk known and touched
    assert await chunk_documents(collection) == before

    # The server's clock decides the window (issue 20): the next one is a new value, once.
    advance_server_clock(collection, TOUCH_WINDOW)
    await storage.save(conversation(100, run="next-window"))
    touched = {chunk["touched_at"] for chunk in await chunk_documents(collection)}
    server_now = engine_client(collection).server_now()
    assert touched == {_naive(_server_window_end(server_now))}


async def test_delete_leaves_chunks_that_clear_run_removes(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    other = make_storage(collection, session_id="session-other")
    await storage.save(conversation(100))
    await other.save(conversation(100))
    theirs = len(await chunk_documents(collection, session_id="session-other"))

    assert await storage.delete(conversation(100).checkpoint_id)
    assert await chunk_documents(collection, session_id=storage.options.session_id) != []

    result = await storage.clear_run()
    assert result.chunks_deleted > 0
    assert await chunk_documents(collection, session_id=storage.options.session_id) == []
    assert len(await chunk_documents(collection, session_id="session-other")) == theirs
    assert (await storage.clear_run()).chunks_deleted == 0  # retry-safe

    await storage.save(conversation(101))  # the cleared run starts again: nothing remembered wrongly
    assert identity(await make_storage(collection).load(conversation(101).checkpoint_id)) == identity(
        conversation(101)
    )


def _distinct(step: int) -> WorkflowCheckpoint:
    """A checkpoint whose history shares no chunk with another step's."""
    return make_checkpoint(f"cp-{step}", state={"history": _history(200, seed=step)})


async def test_keep_last_collects_unreferenced_chunks_after_the_grace(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = make_storage(collection, keep_last=2)  # prunes on every save
    for step in range(3):  # the third save prunes cp-0, but its chunks are within the grace
        await storage.save(_distinct(step))
    chunks_of = {
        document["checkpoint_id"]: await _referenced(collection, document)
        for document in await raw_checkpoints(collection)
    }
    assert {chunk["_id"] for chunk in await chunk_documents(collection)} > chunks_of["cp-1"] | chunks_of[
        "cp-2"
    ]

    advance_server_clock(collection, COLLECTION_GRACE + TOUCH_WINDOW)  # the server's clock decides
    await storage.save(_distinct(3))  # prunes cp-1; collects cp-0's and cp-1's chunks

    remaining = {chunk["_id"] for chunk in await chunk_documents(collection)}
    newest = await _referenced(collection, (await raw_checkpoints(collection))[-1])
    # cp-2's chunks are older than the grace but referenced by a retained checkpoint: kept.
    assert remaining == chunks_of["cp-2"] | newest
    for step in (2, 3):
        assert identity(await make_storage(collection).load(f"cp-{step}")) == identity(_distinct(step))


async def test_a_checkpoint_above_max_checkpoint_bytes_is_refused_before_any_io(
    proxy: ProxyCollection,
) -> None:
    storage = make_storage(proxy, max_checkpoint_bytes=1024 * 1024)
    big = make_checkpoint("cp-big", state={"blob": "x" * (1024 * 1024 + 1)})

    with pytest.raises(MongoDBSerializationError, match="max_checkpoint_bytes"):
        await storage.save(big)
    assert proxy.trip_names == []


async def test_a_checkpoint_above_16_mib_saves_and_loads_equal(collection: InMemoryCollection) -> None:
    rng = random.Random(11)
    blob = rng.randbytes(17 * 1024 * 1024)
    checkpoint = make_checkpoint("cp-huge", state={"blob": blob, "notes": [str(n) for n in range(50_000)]})
    storage = make_storage(collection)

    await storage.save(checkpoint)

    loaded = await make_storage(collection).load("cp-huge")
    assert loaded.state["blob"] == blob
    assert identity(loaded) == identity(checkpoint)


@pytest.mark.parametrize("value", [0, 1024, True, 2.5, "256", 17 * 1024**3])
def test_max_checkpoint_bytes_is_validated(value: object) -> None:
    with pytest.raises(MongoDBConfigurationError, match="max_checkpoint_bytes"):
        make_options(max_checkpoint_bytes=value)


async def test_a_sibling_storage_does_not_share_the_memory(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await storage.save(conversation(100))
    sibling: MongoDBCheckpointStorage = storage.for_session("session-sibling")

    await sibling.save(conversation(101))

    theirs = await chunk_documents(collection, session_id="session-sibling")
    assert theirs
    assert identity(await sibling.load(conversation(101).checkpoint_id)) == identity(conversation(101))


def _server_window_end(moment: datetime) -> datetime:
    """What the server's ``$dateTrunc`` to 15 minutes plus 15 minutes gives for ``moment``."""
    naive = moment.replace(tzinfo=None)
    start = naive.replace(minute=naive.minute - naive.minute % 15, second=0, microsecond=0)
    return start + TOUCH_WINDOW
