"""``fork_run`` attacked by a writer of the collection (ADR 0036, specs/codec.md "Threat model").

The source run's envelopes are tampered with (unsigned, where the storage believes them), the
target is pre-seeded, the hostile payload corpus is planted into a run that is then forked, and
other writers act while a fork copies. Every refusal is a categorised storage error, raised before
the target is written (or, for what only a payload shows, before that checkpoint is written), and
the target never holds a half-checkpoint.
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Any

import pytest

from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorage,
    MongoDBConcurrencyError,
    MongoDBConfigurationError,
    MongoDBIntegrationError,
    MongoDBIntegrityError,
    MongoDBMappingError,
    MongoDBSerializationError,
)
from agent_framework_mongodb.checkpoints.scope import RunScope
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient
from tests.unit.codec.hostile_corpus import (
    BASE_ID,
    CORPUS,
    GOOD_ID,
    Guard,
    UnpickleRecorder,
    plant,
    storage_options,
)

from ._support import (
    CHECKPOINT_KIND,
    INSERT,
    SESSION,
    ProxyCollection,
    make_checkpoint,
    make_storage,
    scope_of,
)
from .test_fork import checkpoints_of, documents_of, identity, save_run

KEY = secrets.token_bytes(32)
TARGET = "session-fork"
LIGHT = [entry for entry in CORPUS if not entry.isolate and entry.bug is None]


async def tamper(collection: InMemoryCollection, checkpoint_id: str, update: dict[str, Any]) -> None:
    result = await collection.update_one(
        {"_kind": CHECKPOINT_KIND, "session_id": SESSION, "checkpoint_id": checkpoint_id}, update
    )
    assert result.matched_count == 1


async def assert_refused_unwritten(
    source: MongoDBCheckpointStorage,
    collection: InMemoryCollection,
    error: type[MongoDBIntegrationError],
    **arguments: Any,
) -> None:
    with pytest.raises(error) as raised:
        await source.fork_run(to_session_id=TARGET, **arguments)
    # The storage's own categories, never a KeyError/TypeError/AttributeError of a bad field.
    assert isinstance(raised.value, MongoDBIntegrationError)
    assert await documents_of(collection, TARGET) == [], "written before the refusal"


# -- tampered source envelopes, unsigned ----------------------------------------------------------

ENVELOPE_EDITS: dict[str, tuple[dict[str, Any], type[MongoDBIntegrationError]]] = {
    "checkpoint-id-missing": ({"$unset": {"checkpoint_id": ""}}, MongoDBMappingError),
    "checkpoint-id-int": ({"$set": {"checkpoint_id": 5}}, MongoDBMappingError),
    "checkpoint-id-other": ({"$set": {"checkpoint_id": "cp-000"}}, MongoDBMappingError),
    "parent-int": ({"$set": {"parent_checkpoint_id": 0}}, MongoDBMappingError),
    "parent-list": ({"$set": {"parent_checkpoint_id": ["cp-000"]}}, MongoDBMappingError),
    "parent-document": ({"$set": {"parent_checkpoint_id": {"$ne": None}}}, MongoDBMappingError),
    "parent-bytes": ({"$set": {"parent_checkpoint_id": b"cp-000"}}, MongoDBMappingError),
    "parent-bool": ({"$set": {"parent_checkpoint_id": True}}, MongoDBMappingError),
    "sequence-missing": ({"$unset": {"sequence": ""}}, MongoDBMappingError),
    "sequence-str": ({"$set": {"sequence": "2"}}, MongoDBMappingError),
    "sequence-float": ({"$set": {"sequence": 2.5}}, MongoDBMappingError),
    "sequence-bool": ({"$set": {"sequence": True}}, MongoDBMappingError),
    "sequence-negative": ({"$set": {"sequence": -1}}, MongoDBMappingError),
    "payload-hash-missing": ({"$unset": {"payload_hash": ""}}, MongoDBMappingError),
    "payload-hash-int": ({"$set": {"payload_hash": 7}}, MongoDBMappingError),
}


@pytest.mark.parametrize("edit", sorted(ENVELOPE_EDITS))
async def test_a_tampered_source_envelope_is_refused_before_any_write(
    collection: InMemoryCollection, edit: str
) -> None:
    source = make_storage(collection)
    await save_run(source, [0, 0, 0])
    update, error = ENVELOPE_EDITS[edit]
    await tamper(collection, "cp-001", update)

    await assert_refused_unwritten(source, collection, error, keep="chain")


@pytest.mark.parametrize("size", [None, "12", 1.5, True, -5, {"$numberLong": "1"}, b"\x01"], ids=repr)
async def test_an_odd_payload_bytes_counts_as_unknown(collection: InMemoryCollection, size: object) -> None:
    source = make_storage(collection)
    await save_run(source, [0])
    recorded = (await checkpoints_of(collection, SESSION))[0]["payload_bytes"]
    await tamper(
        collection,
        "cp-000",
        {"$unset": {"payload_bytes": ""}} if size is None else {"$set": {"payload_bytes": size}},
    )

    result = await source.fork_run(to_session_id=TARGET)

    assert result.payload_bytes == 0
    assert (await checkpoints_of(collection, TARGET))[0]["payload_bytes"] == recorded  # the save's own


async def test_a_huge_payload_bytes_is_reported_not_trusted_elsewhere(collection: InMemoryCollection) -> None:
    source = make_storage(collection)
    await save_run(source, [0])
    await tamper(collection, "cp-000", {"$set": {"payload_bytes": 2**63 - 1}})

    result = await source.fork_run(to_session_id=TARGET)

    assert result.payload_bytes == 2**63 - 1  # the listing reports it as well: a writer's word
    assert result.copied == 1


async def test_a_parent_cycle_ends_at_the_sequence_order(collection: InMemoryCollection) -> None:
    source = make_storage(collection)
    await save_run(source, [0, 0, 0])
    # cp-000 claims cp-002 as its parent: a cycle cp-002 -> cp-001 -> cp-000 -> cp-002.
    await tamper(collection, "cp-000", {"$set": {"parent_checkpoint_id": "cp-002"}})

    # The walk stops at cp-000 (its "parent" is not older); cp-000's payload names no parent, so
    # the copy refuses it before writing it, and nothing was written.
    await assert_refused_unwritten(source, collection, MongoDBMappingError, keep="chain")


@pytest.mark.parametrize("sequence", [5, 6], ids=["equal", "decreasing"])
async def test_an_equal_or_decreasing_parent_sequence_ends_the_chain(
    collection: InMemoryCollection, sequence: int
) -> None:
    source = make_storage(collection)
    await save_run(source, [0, 0, 0])
    # cp-002 (sequence 3) gets 5, and its parent cp-001 5 or 6: the child is not younger.
    await tamper(collection, "cp-002", {"$set": {"sequence": 5}})
    await tamper(collection, "cp-001", {"$set": {"sequence": sequence}})

    result = await source.fork_run(to_session_id=TARGET, checkpoint_id="cp-002", keep="chain")

    assert result.checkpoint_ids == ("cp-002",), "the walk followed a parent that is not older"


async def test_a_lying_parent_is_refused_before_the_checkpoint_is_written(
    collection: InMemoryCollection,
) -> None:
    source = make_storage(collection)
    await save_run(source, [0, 0, 0])
    await source.save(make_checkpoint("cp-side", previous="cp-000", state={"side": 1}))
    # cp-002's envelope claims the side branch as its parent; its payload names cp-001.
    await tamper(collection, "cp-side", {"$set": {"sequence": 2}})
    await tamper(collection, "cp-001", {"$set": {"sequence": 6}})
    await tamper(collection, "cp-002", {"$set": {"parent_checkpoint_id": "cp-side", "sequence": 7}})

    with pytest.raises(MongoDBMappingError, match="previous checkpoint"):
        await source.fork_run(to_session_id=TARGET, keep="chain")

    # Only checkpoints that matched their envelopes were copied, each whole: a prefix.
    assert [d["checkpoint_id"] for d in await checkpoints_of(collection, TARGET)] == ["cp-000", "cp-side"]


async def test_a_lying_payload_hash_is_refused_before_the_checkpoint_is_written(
    collection: InMemoryCollection,
) -> None:
    source = make_storage(collection)
    await save_run(source, [0])
    await tamper(collection, "cp-000", {"$set": {"payload_hash": "0" * 64}})

    await assert_refused_unwritten(source, collection, MongoDBConcurrencyError)


async def test_a_document_of_another_kind_is_not_forked(collection: InMemoryCollection) -> None:
    source = make_storage(collection)
    await save_run(source, [0, 0])
    await tamper(collection, "cp-001", {"$set": {"_kind": "workflow_checkpoint_chunk"}})

    result = await source.fork_run(to_session_id=TARGET, keep="chain")

    assert result.checkpoint_ids == ("cp-000",)  # as the listing: not a checkpoint of the run


async def test_a_duplicate_checkpoint_id_is_refused(collection: InMemoryCollection) -> None:
    source = make_storage(collection)
    await save_run(source, [0, 0])
    document = (await checkpoints_of(collection, SESSION))[-1]
    # The same id again, under another _id and a later sequence (the unique indexes do not see it
    # in the in-process engine unless created; a writer may have dropped them).
    await collection.insert_one({**document, "_id": "forged", "sequence": 9})

    await assert_refused_unwritten(source, collection, MongoDBMappingError, keep="chain")


# -- a pre-seeded target ---------------------------------------------------------------------------


async def test_unsigned_a_seeded_target_claiming_the_hash_counts_as_copied(
    collection: InMemoryCollection,
) -> None:
    """The documented limit (ADR 0036): without keys ``payload_hash`` is the writer's word, in the
    fork's prefix check as in a save's idempotent retry. A writer that could plant this could as
    well overwrite the copy after the fork; signing keys are the protection (next test)."""
    source = make_storage(collection)
    await save_run(source, [0])
    planted = make_checkpoint("cp-000", state={"writer": "content"})
    await source.for_session(TARGET).save(planted)
    claimed = (await checkpoints_of(collection, SESSION))[0]["payload_hash"]
    await collection.update_one(
        {"_kind": CHECKPOINT_KIND, "session_id": TARGET}, {"$set": {"payload_hash": claimed}}
    )

    result = await source.fork_run(to_session_id=TARGET)

    assert (result.copied, result.already_copied) == (0, 1)
    assert identity(await source.for_session(TARGET).load("cp-000")) == identity(planted)


@pytest.mark.parametrize("signature", ["dropped", "kept"])
async def test_signed_a_seeded_target_claiming_the_hash_is_refused(
    collection: InMemoryCollection, signature: str
) -> None:
    source = make_storage(collection, signing_keys=[KEY])
    await save_run(source, [0, 0])
    await source.for_session(TARGET).save(make_checkpoint("cp-000", state={"writer": "content"}))
    claimed = (await checkpoints_of(collection, SESSION))[0]["payload_hash"]
    update: dict[str, Any] = {"$set": {"payload_hash": claimed}}
    if signature == "dropped":
        update["$unset"] = {"payload_signature": ""}
    await collection.update_one({"_kind": CHECKPOINT_KIND, "session_id": TARGET}, update)
    before = await documents_of(collection, TARGET)

    with pytest.raises(MongoDBIntegrityError):
        await source.fork_run(to_session_id=TARGET, keep="chain")

    assert await documents_of(collection, TARGET) == before


async def test_a_seeded_target_with_a_malformed_envelope_is_refused(collection: InMemoryCollection) -> None:
    source = make_storage(collection)
    await save_run(source, [0])
    await source.for_session(TARGET).save(make_checkpoint("cp-000", state={"other": 1}))
    await collection.update_one(
        {"_kind": CHECKPOINT_KIND, "session_id": TARGET}, {"$unset": {"payload_hash": ""}}
    )
    before = await documents_of(collection, TARGET)

    with pytest.raises(MongoDBMappingError):
        await source.fork_run(to_session_id=TARGET)

    assert await documents_of(collection, TARGET) == before


# -- the hostile payload corpus in a forked run ---------------------------------------------------


@pytest.fixture
def hostile(client: InMemoryMongoClient) -> InMemoryCollection:
    return client["hostile"]["fork"]


@pytest.mark.parametrize("drop_signature", [False, True], ids=["edited", "unsigned"])
async def test_signed_no_planted_payload_reaches_a_parser(
    hostile: InMemoryCollection, drop_signature: bool
) -> None:
    parsed: dict[str, list[str]] = {}
    wrong: dict[str, str] = {}
    for entry in CORPUS:  # isolated ones too: nothing of them may be decoded
        await hostile.delete_many({})
        options = storage_options(allowed=entry.allowed, signing_keys=[KEY])
        source = await plant(hostile, options, entry.payload, drop_signature=drop_signature)
        recorder = UnpickleRecorder()
        with recorder.installed():
            try:
                await source.fork_run(to_session_id=TARGET, keep="chain")
                wrong[entry.name] = "forked"
            except MongoDBIntegrityError:
                pass
            except BaseException as error:
                wrong[entry.name] = type(error).__name__
        if await hostile.count_documents({"session_id": TARGET}):
            wrong[entry.name] = "wrote to the target"
        if recorder.calls:
            parsed[entry.name] = recorder.calls
    assert parsed == {}, f"fork_run parsed planted payloads: {parsed}"
    assert wrong == {}


async def test_unsigned_the_restricted_loader_refuses_as_load_does(
    hostile: InMemoryCollection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``load`` refuses, the fork refuses with the same category before writing; what it
    accepts is either the same checkpoint (copied) or another than the one its envelope's
    ``payload_hash`` records (the corpus edits the payload only), which the fork refuses before
    writing it, or (a documented residual) the save's own ``MongoDBSerializationError``. Nothing
    changes in the process either way."""
    monkeypatch.chdir(tmp_path)
    wrong: dict[str, str] = {}
    for entry in LIGHT:
        await hostile.delete_many({})
        source = await plant(hostile, storage_options(allowed=entry.allowed), entry.payload)
        loaded: object
        forked: object
        with Guard(tmp_path, entry.markers) as guard:
            try:
                loaded = await source.load(BASE_ID)
            except MongoDBMappingError as error:
                loaded = error
            try:
                forked = await source.fork_run(to_session_id=TARGET, keep="latest")
            except BaseException as error:
                forked = error
        if guard.problems:
            wrong[entry.name] = "; ".join(guard.problems)
        elif isinstance(loaded, MongoDBMappingError):
            if type(forked) is not type(loaded):
                wrong[entry.name] = f"load raised {type(loaded).__name__}, fork {type(forked).__name__}"
        elif isinstance(forked, BaseException) and not isinstance(
            forked, MongoDBConcurrencyError | MongoDBSerializationError
        ):
            wrong[entry.name] = f"load accepted it, fork raised {type(forked).__name__}"
        # A fork that succeeded copied the same checkpoint (another pickle protocol of it, say).
        if isinstance(forked, BaseException) and await hostile.count_documents({"session_id": TARGET}):
            wrong[entry.name] = "wrote to the target before refusing"
        del loaded, forked
    assert LIGHT
    assert wrong == {}


async def test_unsigned_a_hostile_checkpoint_in_a_chain_is_refused_with_its_page(
    hostile: InMemoryCollection,
) -> None:
    """The page holding it is decoded before any of its checkpoints is saved: the good one before
    it is not copied either (a hostile one on a later page leaves the earlier pages copied)."""
    refused = next(entry for entry in LIGHT if entry.expect == "refused" and not entry.allowed)
    source = await plant(hostile, storage_options(), refused.payload)

    with pytest.raises(MongoDBMappingError):
        await source.fork_run(to_session_id=TARGET, keep="chain")

    assert await hostile.count_documents({"session_id": TARGET}) == 0
    assert (await source.fork_run(to_session_id=TARGET, checkpoint_id=GOOD_ID)).copied == 1


# -- interleavings ---------------------------------------------------------------------------------


async def test_a_concurrent_save_into_the_target_is_reported(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    source = make_storage(proxy)
    await save_run(make_storage(collection), [0, 0, 0])
    gate = proxy.block(INSERT)
    fork = asyncio.create_task(source.fork_run(to_session_id=TARGET, keep="chain"))
    await proxy.entered[INSERT].wait()  # the first copy allocated and waits to insert
    await make_storage(collection, session_id=TARGET).save(make_checkpoint("cp-own", state={"own": 1}))
    gate.set()

    with pytest.raises(MongoDBConcurrencyError, match="Another writer"):
        await fork

    with pytest.raises(MongoDBConfigurationError, match="already holds"):
        await source.fork_run(to_session_id=TARGET, keep="chain")


async def test_a_save_into_the_copy_after_the_fork_is_its_continuation(
    collection: InMemoryCollection,
) -> None:
    source = make_storage(collection)
    await save_run(source, [0, 0])
    await source.fork_run(to_session_id=TARGET, keep="chain")
    await source.for_session(TARGET).save(make_checkpoint("cp-next", previous="cp-001", state={"i": 2}))

    with pytest.raises(MongoDBConfigurationError):  # a retry now: the session went on
        await source.fork_run(to_session_id=TARGET, keep="chain")


async def test_a_keep_last_target_is_not_taken_for_a_concurrent_writer(
    collection: InMemoryCollection,
) -> None:
    source = make_storage(collection, keep_last=2)
    await save_run(source, [0, 0, 0])
    await make_storage(collection).save(make_checkpoint("cp-003", previous="cp-002", state={"i": 3}))
    await make_storage(collection).save(make_checkpoint("cp-004", previous="cp-003", state={"i": 4}))

    result = await source.fork_run(to_session_id=TARGET, keep=3)

    assert result.copied == 3


async def test_a_concurrent_clear_run_of_the_source_leaves_a_prefix(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    source = make_storage(proxy)
    saved = await save_run(make_storage(collection), [0] * 25)  # two pages of 20
    gate = proxy.block(INSERT)
    fork = asyncio.create_task(source.fork_run(to_session_id=TARGET, keep="chain"))
    await proxy.entered[INSERT].wait()
    await make_storage(collection).clear_run()
    gate.set()

    with pytest.raises(MongoDBCheckpointNotFoundError, match="removed while it was copied"):
        await fork

    copies = await checkpoints_of(collection, TARGET)
    assert [d["checkpoint_id"] for d in copies] == [cp.checkpoint_id for cp in saved[: len(copies)]]
    target = make_storage(collection, session_id=TARGET)
    for checkpoint in saved[: len(copies)]:
        assert identity(await target.load(checkpoint.checkpoint_id)) == identity(checkpoint)


async def test_a_source_cleared_and_saved_again_while_copied_is_refused(
    collection: InMemoryCollection,
) -> None:
    proxy = ProxyCollection(collection)
    source = make_storage(proxy)
    await save_run(make_storage(collection), [0] * 25)
    gate = proxy.block(INSERT)
    fork = asyncio.create_task(source.fork_run(to_session_id=TARGET, keep="chain"))
    await proxy.entered[INSERT].wait()
    writer = make_storage(collection)
    await writer.clear_run()
    previous: str | None = None
    for index in range(25):  # the same ids, other content: a new lifetime of the run
        await writer.save(make_checkpoint(f"cp-{index:03d}", previous=previous, state={"again": index}))
        previous = f"cp-{index:03d}"
    gate.set()

    with pytest.raises(MongoDBConcurrencyError, match="not the one the fork planned"):
        await fork

    copies = await checkpoints_of(collection, TARGET)
    assert [d["checkpoint_id"] for d in copies] == [f"cp-{index:03d}" for index in range(20)]


async def test_a_retry_after_the_source_gained_checkpoints(collection: InMemoryCollection) -> None:
    source = make_storage(collection)
    await save_run(source, [0, 0])
    await source.fork_run(to_session_id=TARGET, keep="chain")
    await source.fork_run(to_session_id="session-latest")
    await source.save(make_checkpoint("cp-002", previous="cp-001", state={"i": 2}))

    grown = await source.fork_run(to_session_id=TARGET, keep="chain")
    assert (grown.copied, grown.already_copied) == (1, 2)  # the chain grew: its new tail is copied
    with pytest.raises(MongoDBConfigurationError, match="already holds"):
        await source.fork_run(to_session_id="session-latest")  # the latest moved on: another fork
    with pytest.raises(MongoDBConfigurationError, match="already holds"):
        await source.fork_run(to_session_id=TARGET, keep=2)


async def test_the_scope_of_a_copy_is_the_target_only(collection: InMemoryCollection) -> None:
    source = make_storage(collection)
    await save_run(source, [0, 150])
    await source.fork_run(to_session_id=TARGET, keep="chain")
    for document in await documents_of(collection, TARGET):
        assert (
            document["scope_discriminator"]
            == RunScope.from_options(source.for_session(TARGET).options).discriminator
        )
    assert (
        scope_of(source).discriminator
        != RunScope.from_options(source.for_session(TARGET).options).discriminator
    )
