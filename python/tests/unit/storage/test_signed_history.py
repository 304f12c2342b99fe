"""Signed means signed (issue 19): a load accepts only what was signed, for the checkpoint asked for,
in the order it was written, within the run's current lifetime.

Each test plays a writer with access to the collection (it edits documents straight in the engine)
and pins one finding: on the code before signatures bound the envelope, every one of these loaded
the forged state. Beside each, the control that the same read of the untouched run succeeds.
"""

from __future__ import annotations

import pickle
import secrets
import zlib
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pymongo.errors import AutoReconnect

from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBConfigurationError,
    MongoDBIntegrationError,
    MongoDBIntegrityError,
    MongoDBMappingError,
    MongoDBPersistenceError,
)
from agent_framework_mongodb.checkpoints import documents as documents_module
from agent_framework_mongodb.checkpoints.codec import chunks as chunks_module
from agent_framework_mongodb.checkpoints.codec import payload_checksum
from agent_framework_mongodb.checkpoints.codec import rebuild as rebuild_module
from agent_framework_mongodb.checkpoints.codec.chunks import REFERENCE_TAG
from agent_framework_mongodb.checkpoints.codec.signing import PayloadSigner
from agent_framework_mongodb.checkpoints.ledger import DELETED_FIELD, LIVE_FROM_FIELD, MAX_DELETED_RECORDED
from agent_framework_mongodb.checkpoints.scope import CHUNK_KIND, RunScope
from agent_framework_mongodb.checkpoints.signatures import SIGNED_FIELDS, sign_envelope, signed_message
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    COUNTER_KIND,
    WORKFLOW,
    ProxyCollection,
    make_checkpoint,
    make_options,
    make_storage,
    raw_checkpoints,
    raw_counter,
    scope_of,
)

KEY = secrets.token_bytes(32)


def _signed(collection: Any, **overrides: Any) -> Any:
    return make_storage(collection, signing_keys=[KEY], **overrides)


def _large_state(seed: int = 0) -> dict[str, Any]:
    """State big enough to be stored as chunks (issue 13)."""
    return {"history": [f"message {seed}-{n} " * 8 for n in range(400)]}


async def _document(collection: InMemoryCollection, checkpoint_id: str) -> dict[str, Any]:
    (document,) = await raw_checkpoints(collection, checkpoint_id=checkpoint_id)
    return document


# -- bound to the request -----------------------------------------------------------------------


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
async def test_load_refuses_a_document_holding_another_checkpoint(
    signed: bool, collection: InMemoryCollection
) -> None:
    storage = _signed(collection) if signed else make_storage(collection)
    await storage.save(make_checkpoint("cp-A", state={"approved": False}))
    await storage.save(make_checkpoint("cp-B", state={"approved": True}))
    assert (await storage.load("cp-A")).state == {"approved": False}  # the control
    other = await _document(collection, "cp-B")
    place = (await _document(collection, "cp-A"))["_id"]
    # cp-B's whole document, fields and signature, put in cp-A's place.
    await collection.delete_one({"_id": place})
    await collection.insert_one({**other, "_id": place})

    expected = MongoDBIntegrityError if signed else MongoDBMappingError
    with pytest.raises(expected) as raised:
        await storage.load("cp-A")
    assert type(raised.value) is expected
    # Listed once, as what it is: the copy under cp-A's id is not a second cp-B.
    with pytest.raises(expected):
        await storage.list_checkpoints(workflow_name=WORKFLOW)


# -- order and freshness ---------------------------------------------------------------------------


async def test_a_rewritten_sequence_does_not_make_an_old_checkpoint_the_latest(
    collection: InMemoryCollection,
) -> None:
    storage = _signed(collection)
    await storage.save(make_checkpoint("approval-pending", state={"approved": True}))
    await storage.save(make_checkpoint("approval-revoked", state={"approved": False}))
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == "approval-revoked"

    await collection.update_one({"checkpoint_id": "approval-pending"}, {"$set": {"sequence": 10**12}})

    with pytest.raises(MongoDBIntegrityError):
        await storage.get_latest(workflow_name=WORKFLOW)
    with pytest.raises(MongoDBIntegrityError):
        await storage.list_checkpoints(workflow_name=WORKFLOW)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("parent_checkpoint_id", "forged-parent"),
        ("created_at", datetime(2001, 1, 1, tzinfo=timezone.utc)),
        ("expires_at", datetime(2999, 1, 1, tzinfo=timezone.utc)),
        ("payload_bytes", 1),
        ("payload_hash", "0" * 64),
        ("run_epoch", b"\x00" * 16),
    ],
)
async def test_every_signed_envelope_field_is_bound(
    field: str, value: object, collection: InMemoryCollection
) -> None:
    assert field in SIGNED_FIELDS
    storage = _signed(collection)
    await storage.save(make_checkpoint("cp-1"))
    assert (await storage.list_checkpoint_summaries(workflow_name=WORKFLOW)).checkpoints  # the control

    await collection.update_one({"checkpoint_id": "cp-1"}, {"$set": {field: value}})

    with pytest.raises(MongoDBIntegrityError):
        await storage.list_checkpoint_summaries(workflow_name=WORKFLOW)
    with pytest.raises(MongoDBIntegrityError):
        await storage.load("cp-1")
    with pytest.raises(MongoDBIntegrityError):
        await storage.list_checkpoint_ids(workflow_name=WORKFLOW)


async def test_a_checkpoint_deleted_then_put_back_stays_deleted(collection: InMemoryCollection) -> None:
    storage = _signed(collection)
    await storage.save(make_checkpoint("cp-1", state={"approved": True}))
    await storage.save(make_checkpoint("cp-2", state={"approved": False}))
    backup = await _document(collection, "cp-2")

    assert await storage.delete("cp-2")
    await collection.insert_one(backup)  # put back, byte for byte

    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("cp-2")
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == "cp-1"
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-1"]
    assert [c.checkpoint_id for c in await storage.list_checkpoints(workflow_name=WORKFLOW)] == ["cp-1"]
    # The same id saved again is a new checkpoint (a new sequence): it is live.
    await collection.delete_one({"_id": backup["_id"]})
    await storage.save(make_checkpoint("cp-2", state={"approved": False}))
    assert (await storage.load("cp-2")).state == {"approved": False}


async def test_a_delete_recorded_but_not_finished_is_already_deleted(
    proxy: ProxyCollection, collection: InMemoryCollection
) -> None:
    storage = _signed(proxy)
    await storage.save(make_checkpoint("cp-1"))
    proxy.fail("delete_one", AutoReconnect("connection reset"))
    with pytest.raises(MongoDBIntegrationError):
        await storage.delete("cp-1")

    assert len(await raw_checkpoints(collection)) == 1  # the document is still there
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("cp-1")
    assert await storage.delete("cp-1")  # the retry finishes it
    assert await raw_checkpoints(collection) == []


async def test_the_deletion_record_keeps_the_newest(collection: InMemoryCollection) -> None:
    storage = _signed(collection)
    await storage.save(make_checkpoint("cp-0"))
    scope = scope_of(storage)
    sequences = list(range(100, 100 + MAX_DELETED_RECORDED + 5))
    await collection.update_one({"_id": scope.counter_document_id}, {"$set": {DELETED_FIELD: sequences[:-1]}})
    await storage.save(make_checkpoint("cp-1"))
    assert await storage.delete("cp-1")
    counter = await raw_counter(collection, scope)
    assert counter is not None
    recorded = counter[DELETED_FIELD]
    assert len(recorded) == MAX_DELETED_RECORDED
    assert recorded[-1] < 100  # cp-1's own, small sequence is the newest record


async def test_a_pruned_checkpoint_put_back_stays_pruned(collection: InMemoryCollection) -> None:
    storage = _signed(collection, keep_last=2)
    await storage.save(make_checkpoint("cp-0"))
    backup = await _document(collection, "cp-0")
    for index in range(1, 4):
        await storage.save(make_checkpoint(f"cp-{index}"))
    ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
    assert "cp-0" not in ids
    counter = await raw_counter(collection, scope_of(storage))
    assert counter is not None
    assert counter[LIVE_FROM_FIELD] > backup["sequence"]

    await collection.insert_one(backup)

    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("cp-0")
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ids


async def test_a_checkpoint_from_before_clear_run_is_refused(collection: InMemoryCollection) -> None:
    storage = _signed(collection)
    await storage.save(make_checkpoint("cp-old", state={"approved": True}))
    backup = await _document(collection, "cp-old")
    await storage.clear_run()

    # Put back into a cleared run (no counter): not part of any lifetime of the run.
    await collection.insert_one(backup)
    with pytest.raises(MongoDBIntegrityError, match="no counter"):
        await storage.load("cp-old")
    with pytest.raises(MongoDBIntegrityError):
        await storage.get_latest(workflow_name=WORKFLOW)

    # The run starts again (a new counter, a new epoch): the old checkpoint is of another lifetime.
    await collection.delete_one({"_id": backup["_id"]})
    await storage.save(make_checkpoint("cp-new", state={"approved": False}))
    await collection.insert_one(backup)
    with pytest.raises(MongoDBIntegrityError, match="earlier lifetime"):
        await storage.load("cp-old")
    assert (await storage.load("cp-new")).state == {"approved": False}


async def test_the_epoch_comes_from_the_counter_and_changes_with_clear_run(
    collection: InMemoryCollection,
) -> None:
    storage = make_storage(collection)  # kept without keys too, so turning signing on finds it
    await storage.save(make_checkpoint("cp-1"))
    await storage.save(make_checkpoint("cp-2"))
    first = [document["run_epoch"] for document in await raw_checkpoints(collection)]
    counter = await raw_counter(collection, scope_of(storage))
    assert counter is not None
    assert first == [counter["run_epoch"]] * 2
    await storage.clear_run()
    await storage.save(make_checkpoint("cp-3"))
    (again,) = await raw_checkpoints(collection)
    assert again["run_epoch"] != first[0]
    assert len(again["run_epoch"]) == 16


async def test_a_malformed_ledger_is_refused(collection: InMemoryCollection) -> None:
    storage = _signed(collection)
    await storage.save(make_checkpoint("cp-1"))
    await collection.update_one({"_kind": COUNTER_KIND}, {"$set": {DELETED_FIELD: ["x"]}})
    with pytest.raises(MongoDBPersistenceError, match="ledger"):
        await storage.load("cp-1")


# -- the signed message --------------------------------------------------------------------------


def test_the_signed_message_is_typed_and_total() -> None:
    envelope: dict[str, object] = dict.fromkeys(SIGNED_FIELDS)
    base = signed_message("run", {**envelope, "sequence": 1})
    assert base is not None
    # A value of another type is another message (1 and True, "1" and 1, bytes and str).
    assert signed_message("run", {**envelope, "sequence": True}) is None
    assert signed_message("run", {**envelope, "sequence": "1"}) != base
    assert signed_message("run", {**envelope, "sequence": 1, "checkpoint_id": "a"}) != signed_message(
        "run", {**envelope, "sequence": 1, "checkpoint_id": b"a"}
    )
    # Lengths are prefixed: moving a boundary between two fields changes the message.
    assert signed_message(
        "run", {**envelope, "checkpoint_id": "ab", "parent_checkpoint_id": "c"}
    ) != signed_message("run", {**envelope, "checkpoint_id": "a", "parent_checkpoint_id": "bc"})
    # Another run is another message; naive and aware UTC dates are one instant.
    assert signed_message("other", {**envelope, "sequence": 1}) != base
    aware = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    assert signed_message("run", {**envelope, "created_at": aware}) == signed_message(
        "run", {**envelope, "created_at": aware.replace(tzinfo=None)}
    )
    assert signed_message("run", {**envelope, "created_at": aware + timedelta(microseconds=1)}) is None


def test_a_signature_of_the_first_format_never_verifies() -> None:
    signer = PayloadSigner((KEY,))
    envelope: dict[str, object] = dict.fromkeys(SIGNED_FIELDS)
    message = signed_message("run", envelope)
    assert message is not None
    assert message.startswith(b"AFM-SIGNATURE/2\n")
    assert not signer.verify(b"AFM-SIGNATURE/1\n" + message[16:], signer.sign(message))


# -- verify, then parse: the nested hint and forged leaves ----------------------------------------


class _ParseRecorder:
    """Every byte string handed to zlib and to the restricted unpickler during a load."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inflated: list[bytes] = []
        self.unpickled: list[bytes] = []
        real_decompress = chunks_module._decompress
        real_load_tree = rebuild_module.load_tree

        def decompress(data: bytes, budget: int) -> bytes:
            self.inflated.append(bytes(data))
            return real_decompress(data, budget)

        def load_tree(payload: bytes) -> object:
            self.unpickled.append(bytes(payload))
            return real_load_tree(payload)

        monkeypatch.setattr(chunks_module, "_decompress", decompress)
        for module in (chunks_module, rebuild_module):
            monkeypatch.setattr(module, "load_tree", load_tree)
        from agent_framework_mongodb.checkpoints import codec as codec_module

        monkeypatch.setattr(codec_module, "load_tree", load_tree)


async def _plant_chunk(collection: InMemoryCollection, scope: RunScope, address: bytes, data: bytes) -> None:
    """A chunk document as a save writes one, at an address anyone can compute."""
    await collection.insert_one(
        {
            "_id": address,
            "_kind": CHUNK_KIND,
            **scope.fields(),
            "data": data,
            "touched_at": datetime.now(timezone.utc),
            "expires_at": datetime(9999, 12, 31, tzinfo=timezone.utc),
        }
    )


def _forged_leaf(scope_context: bytes) -> tuple[bytes, bytes, bytes]:
    """A well-addressed leaf holding a payload that would be refused if parsed: (address, data, body)."""
    body = b"l" + b"\x80\x05]\x94(\x8c\x05forged\x94e."  # a protocol-5 list ["forged"]
    data = zlib.compress(body)
    address = chunks_module.leaf_address(scope_context, data)
    return address, data, body[1:]


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
async def test_a_hinted_leaf_the_root_does_not_reach_is_never_parsed(
    signed: bool, collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = _signed(collection) if signed else make_storage(collection)
    checkpoint = make_checkpoint("cp-big", state=_large_state())
    await storage.save(checkpoint)
    root = await _document(collection, "cp-big")
    assert root["payload_format"] == "tree-chunks/v1"
    scope = scope_of(storage)
    address, data, body = _forged_leaf(scope.chunk_context("tree-chunks/v1"))
    await _plant_chunk(collection, scope, address, data)
    hint = bytes(root.get("nested_chunks") or b"") + address
    await collection.update_one({"_id": root["_id"]}, {"$set": {"nested_chunks": hint}})
    recorder = _ParseRecorder(monkeypatch)

    if signed:  # the hint is signed: the document is refused before anything is fetched or parsed
        with pytest.raises(MongoDBIntegrityError):
            await storage.load("cp-big")
        assert recorder.inflated == []
        assert recorder.unpickled == []
    else:  # fetched with the rest, but the root never reaches it: never decompressed nor unpickled
        assert (await storage.load("cp-big")).state == checkpoint.state
        assert data not in recorder.inflated
        assert body not in recorder.unpickled


async def test_forged_chunks_of_a_signed_checkpoint_reach_no_parser(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every leaf of a signed checkpoint replaced by a well-addressed forgery: refused, and not one
    forged byte reaches zlib or the unpickler (they are checked against the signed addresses)."""
    storage = _signed(collection)
    await storage.save(make_checkpoint("cp-big", state=_large_state()))
    scope = scope_of(storage)
    chunks = await collection.find({"_kind": CHUNK_KIND}).to_list(None)
    assert chunks
    address, data, body = _forged_leaf(scope.chunk_context("tree-chunks/v1"))
    for chunk in chunks:
        await collection.update_one({"_id": chunk["_id"]}, {"$set": {"data": data}})
    recorder = _ParseRecorder(monkeypatch)

    with pytest.raises(MongoDBMappingError, match="does not match its address"):
        await storage.load("cp-big")
    assert data not in recorder.inflated
    assert body not in recorder.unpickled
    assert address not in {chunk["_id"] for chunk in chunks}


# -- one budget per load --------------------------------------------------------------------------


async def test_the_leaves_of_one_load_share_one_decompression_budget(collection: InMemoryCollection) -> None:
    """Twelve leaves, each under the budget alone, over it together: the load stops at the budget
    (it used to decompress and unpickle each leaf under the whole budget)."""
    cap = 1024 * 1024
    storage = make_storage(collection, max_checkpoint_bytes=cap)
    await storage.save(make_checkpoint("cp-big", state=_large_state()))
    root = await _document(collection, "cp-big")
    scope = scope_of(storage)
    context = scope.chunk_context("tree-chunks/v1")
    addresses: list[bytes] = []
    for number in range(12):
        data = zlib.compress(b"b" + bytes([number]) * (cap // 4), 9)
        address = chunks_module.leaf_address(context, data)
        addresses.append(address)
        await _plant_chunk(collection, scope, address, data)
    tree = pickle.loads(bytes(root["checkpoint"]))
    tree["state"] = {"blobs": [(REFERENCE_TAG, "b", [address]) for address in addresses]}
    payload = pickle.dumps(tree, protocol=5)
    await collection.update_one(
        {"_id": root["_id"]},
        {
            "$set": {"checkpoint": payload, "payload_checksum": payload_checksum(payload)},
            "$unset": {"nested_chunks": ""},
        },
    )
    inflated: list[int] = []
    real = chunks_module._decompress

    def counting(data: bytes, budget: int) -> bytes:
        raw = real(data, budget)
        inflated.append(len(raw))
        return raw

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chunks_module, "_decompress", counting)
        with pytest.raises(MongoDBMappingError, match="size limit"):
            await storage.load("cp-big")
    assert sum(inflated) <= cap
    assert len(inflated) <= 4, "the fifth leaf would pass the budget: it is not decompressed whole"


# -- a way onto signing ---------------------------------------------------------------------------


async def test_unsigned_runs_move_onto_signing(collection: InMemoryCollection) -> None:
    unsigned = make_storage(collection)
    await unsigned.save(make_checkpoint("cp-before", state={"n": 1}))
    signing_started = datetime.now(timezone.utc) + timedelta(seconds=1)

    strict = _signed(collection)
    with pytest.raises(MongoDBIntegrityError, match="accept_unsigned_before"):
        await strict.load("cp-before")

    transition = _signed(collection, accept_unsigned_before=signing_started)
    assert (await transition.load("cp-before")).state == {"n": 1}
    await transition.save(make_checkpoint("cp-after", state={"n": 2}))
    (_, after) = await raw_checkpoints(collection)
    assert isinstance(after["payload_signature"], bytes)
    assert [c.checkpoint_id for c in await transition.list_checkpoints(workflow_name=WORKFLOW)] == [
        "cp-before",
        "cp-after",
    ]
    # An unsigned document claiming a later creation is refused, as is one whose date is not a date.
    await collection.update_one(
        {"checkpoint_id": "cp-before"}, {"$set": {"created_at": signing_started + timedelta(days=1)}}
    )
    with pytest.raises(MongoDBIntegrityError):
        await transition.load("cp-before")


def test_accept_unsigned_before_needs_keys_and_an_aware_date() -> None:
    with pytest.raises(MongoDBConfigurationError, match="needs signing_keys"):
        make_options(accept_unsigned_before=datetime.now(timezone.utc))
    with pytest.raises(MongoDBConfigurationError, match="timezone-aware"):
        make_options(signing_keys=[KEY], accept_unsigned_before=datetime(2026, 1, 1))
    with pytest.raises(MongoDBConfigurationError, match="datetime"):
        make_options(signing_keys=[KEY], accept_unsigned_before="2026-01-01")


async def test_signing_happens_after_allocation(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signature covers the sequence the counter gave, so it is computed once per attempt."""
    signed: list[int] = []
    real = sign_envelope

    def recording(signer: PayloadSigner, discriminator: str, envelope: Any) -> bytes:
        signed.append(int(envelope["sequence"]))
        return real(signer, discriminator, envelope)

    monkeypatch.setattr(documents_module, "sign_envelope", recording)
    storage = _signed(collection)
    await storage.save(make_checkpoint("cp-1"))
    await storage.save(make_checkpoint("cp-2"))
    assert signed == [1, 2]
