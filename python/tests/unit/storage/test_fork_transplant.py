"""``fork_run`` moves chunked checkpoints as stored (``codec/transplant.py``, ADR 0040): the copy is
what a save into the target would have written, a later save into it sends only what is new, and
what a transplant refuses is refused before that checkpoint is written."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBMappingError
from agent_framework_mongodb.checkpoints.codec import payload_checksum
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

from ._support import CHECKPOINT_KIND, make_checkpoint, make_storage
from .test_fork import CHUNK_KIND, TARGET, checkpoints_of, history, save_run

KEY = secrets.token_bytes(32)


async def _chunks(collection: InMemoryCollection, session_id: str) -> dict[bytes, bytes]:
    found = await collection.find({"_kind": CHUNK_KIND, "session_id": session_id}).to_list(None)
    return {document["_id"]: document["data"] for document in found}


def _payloads(documents: list[dict[str, Any]]) -> dict[str, tuple[bytes, str, str]]:
    return {d["checkpoint_id"]: (d["checkpoint"], d["payload_hash"], d["payload_format"]) for d in documents}


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
async def test_the_copy_is_what_a_save_into_the_target_writes(signed: bool) -> None:
    keys = [KEY] if signed else []
    forked = InMemoryMongoClient()["db"]["forked"]
    direct = InMemoryMongoClient()["db"]["direct"]
    source = make_storage(forked, signing_keys=keys)
    saved = await save_run(source, [0, 150, 200, 260])

    result = await source.fork_run(to_session_id=TARGET, keep="chain")
    for checkpoint in saved:  # the same checkpoints saved straight into a run of that name
        await make_storage(direct, signing_keys=keys).for_session(TARGET).save(checkpoint)

    assert (result.transplanted, result.reencoded) == (3, 1)
    assert _payloads(await checkpoints_of(forked, TARGET)) == _payloads(await checkpoints_of(direct, TARGET))
    assert await _chunks(forked, TARGET) == await _chunks(direct, TARGET)
    target = source.for_session(TARGET)
    for checkpoint in saved:
        loaded = await target.load(checkpoint.checkpoint_id)
        assert loaded.to_dict() == checkpoint.to_dict()


async def test_a_copy_resumes_and_its_next_save_sends_only_what_is_new(
    collection: InMemoryCollection,
) -> None:
    source = make_storage(collection)
    await save_run(source, [150, 200])
    await source.fork_run(to_session_id=TARGET, keep="chain")
    target = source.for_session(TARGET)
    before = set(await _chunks(collection, TARGET))

    resumed = await target.load("cp-001")
    following = make_checkpoint(
        "cp-002", previous=resumed.checkpoint_id, state={"i": 2, "history": history(205)}
    )
    await target.save(following)

    written = set(await _chunks(collection, TARGET)) - before
    # The same save into the source, whose chunks the save wrote itself: the same number is new.
    source_before = set(await _chunks(collection, source.options.session_id))
    await source.save(following)
    source_written = set(await _chunks(collection, source.options.session_id)) - source_before
    assert 0 < len(written) == len(source_written) < len(before)


async def _planted_leaf(collection: InMemoryCollection, session_id: str) -> dict[str, Any]:
    document = await collection.find_one({"_kind": CHUNK_KIND, "session_id": session_id})
    assert document is not None
    return document


@pytest.mark.parametrize("edit", ["data-edited", "data-removed"])
async def test_unsigned_a_damaged_leaf_is_refused_before_its_checkpoint_is_written(
    collection: InMemoryCollection, edit: str
) -> None:
    source = make_storage(collection)
    await save_run(source, [150])
    leaf = await _planted_leaf(collection, source.options.session_id)
    if edit == "data-edited":
        await collection.update_one({"_id": leaf["_id"]}, {"$set": {"data": leaf["data"][:-1] + b"\0"}})
    else:
        await collection.delete_one({"_id": leaf["_id"]})

    with pytest.raises(MongoDBMappingError):
        await source.fork_run(to_session_id=TARGET)

    assert await collection.count_documents({"_kind": CHECKPOINT_KIND, "session_id": TARGET}) == 0


async def test_unsigned_an_edited_root_is_refused_before_it_is_written(
    collection: InMemoryCollection,
) -> None:
    source = make_storage(collection)
    await save_run(source, [150])
    stored = await collection.find_one({"_kind": CHECKPOINT_KIND, "session_id": source.options.session_id})
    assert stored is not None
    payload = stored["checkpoint"]
    edited = payload[:-3] + b"\x00" + payload[-2:]
    # Edited with its checksum, as a writer of the collection can: the pickle no longer parses.
    await collection.update_one(
        {"_id": stored["_id"]}, {"$set": {"checkpoint": edited, "payload_checksum": payload_checksum(edited)}}
    )

    with pytest.raises(MongoDBMappingError):
        await source.fork_run(to_session_id=TARGET)

    assert await collection.count_documents({"session_id": TARGET, "_kind": CHECKPOINT_KIND}) == 0


async def test_signed_an_edited_leaf_is_refused_unparsed(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Signed, the leaf's address is checked before zlib sees it: a leaf whose bytes were replaced
    by a decompression bomb is refused without being decompressed."""
    import zlib as zlib_module

    from agent_framework_mongodb.checkpoints.codec import chunks as chunks_module

    source: MongoDBCheckpointStorage = make_storage(collection, signing_keys=[KEY])
    await save_run(source, [150])
    leaf = await _planted_leaf(collection, source.options.session_id)
    bomb = zlib_module.compress(b"l" + b"\0" * 50_000_000, 9)
    await collection.update_one({"_id": leaf["_id"]}, {"$set": {"data": bomb}})
    inflated: list[int] = []
    real = chunks_module._decompress  # pyright: ignore[reportPrivateUsage]

    def recording(data: bytes, budget: int) -> bytes:
        inflated.append(len(data))
        return real(data, budget)

    monkeypatch.setattr(chunks_module, "_decompress", recording)

    with pytest.raises(MongoDBMappingError):
        await source.fork_run(to_session_id=TARGET)

    assert len(bomb) not in inflated, "the edited leaf reached zlib"
    assert await collection.count_documents({"session_id": TARGET, "_kind": CHECKPOINT_KIND}) == 0
