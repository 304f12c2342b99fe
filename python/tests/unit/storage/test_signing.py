"""Signed payloads: keys sign saves, verify loads, rotate, and never show; tampering is refused."""

from __future__ import annotations

import logging
import secrets
from typing import Any

import pytest

from agent_framework_mongodb import (
    MongoDBCheckpointStorageOptions,
    MongoDBConfigurationError,
    MongoDBIntegrityError,
)
from agent_framework_mongodb.checkpoints.codec import payload_checksum
from agent_framework_mongodb.checkpoints.codec import rebuild as rebuild_module
from agent_framework_mongodb.checkpoints.codec.rebuild import load_tree
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import make_checkpoint, make_options, make_storage, raw_checkpoints

KEY = secrets.token_bytes(32)
OLD_KEY = secrets.token_bytes(48)


@pytest.fixture
def unpickled(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every payload that reaches the unpickler; a refused one must never get there."""
    seen: list[bytes] = []
    real = load_tree

    def recording(payload: bytes) -> object:
        seen.append(payload)
        return real(payload)

    monkeypatch.setattr(rebuild_module, "load_tree", recording)
    from agent_framework_mongodb.checkpoints import codec as codec_module

    monkeypatch.setattr(codec_module, "load_tree", recording)
    return seen


# -- options ------------------------------------------------------------------------------------


def test_keys_are_validated_and_never_shown() -> None:
    options = make_options(signing_keys=[bytearray(KEY), OLD_KEY])
    assert options.signing_keys == (KEY, OLD_KEY)
    assert KEY.hex() not in repr(options)
    assert repr(KEY) not in repr(options)
    assert "signing_keys" not in repr(options)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ([b"short"], "at least 32"),
        (["a text secret of more than thirty-two characters"], "not bytes"),
        (KEY, "sequence of bytes"),
        ("text", "sequence of bytes"),
    ],
)
def test_bad_keys_are_configuration_errors(keys: Any, message: str) -> None:
    with pytest.raises(MongoDBConfigurationError, match=message) as raised:
        make_options(signing_keys=keys)
    text = str(raised.value)
    assert "thirty-two" not in text  # a key given as text is not echoed
    assert "short" not in text


# -- saving and loading -------------------------------------------------------------------------


async def test_a_signed_storage_round_trips_and_stores_a_signature(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, signing_keys=[KEY])
    checkpoint = make_checkpoint("cp-1")
    await storage.save(checkpoint)
    (document,) = await raw_checkpoints(collection)
    assert isinstance(document["payload_signature"], bytes)
    assert len(document["payload_signature"]) == 32
    loaded = await storage.load("cp-1")
    assert loaded.state == checkpoint.state


async def test_keys_rotate_the_first_signs_any_verifies(collection: InMemoryCollection) -> None:
    await make_storage(collection, signing_keys=[OLD_KEY]).save(make_checkpoint("old"))
    rotated = make_storage(collection, signing_keys=[KEY, OLD_KEY])
    await rotated.save(make_checkpoint("new"))
    assert [
        checkpoint.checkpoint_id
        for checkpoint in await rotated.list_checkpoints(workflow_name=rotated.options.workflow_name)
    ] == [
        "old",
        "new",
    ]
    only_new = make_storage(collection, signing_keys=[KEY])
    assert (await only_new.load("new")).checkpoint_id == "new"
    with pytest.raises(MongoDBIntegrityError):
        await only_new.load("old")


async def test_unsigned_documents_are_refused_before_unpickling(
    collection: InMemoryCollection, unpickled: list[bytes]
) -> None:
    await make_storage(collection).save(make_checkpoint("cp-1"))
    signed = make_storage(collection, signing_keys=[KEY])
    unpickled.clear()
    with pytest.raises(MongoDBIntegrityError, match="not signed"):
        await signed.load("cp-1")
    with pytest.raises(MongoDBIntegrityError):
        await signed.get_latest(workflow_name=signed.options.workflow_name)
    with pytest.raises(MongoDBIntegrityError):
        await signed.list_checkpoint_page(workflow_name=signed.options.workflow_name)
    assert unpickled == []


async def test_an_edited_payload_is_refused_before_unpickling(
    collection: InMemoryCollection, unpickled: list[bytes]
) -> None:
    storage = make_storage(collection, signing_keys=[KEY])
    await storage.save(make_checkpoint("cp-1", state={"amount": 10}))
    (document,) = await raw_checkpoints(collection)
    edited = document["checkpoint"].replace(b"amount", b"amounT")
    assert edited != document["checkpoint"]
    await collection.update_one(
        {"_id": document["_id"]},
        {"$set": {"checkpoint": edited, "payload_checksum": payload_checksum(edited)}},
    )
    assert unpickled, "the save's proof goes through the recorded loader, so the recorder is live"
    unpickled.clear()
    with pytest.raises(MongoDBIntegrityError, match="signature does not match"):
        await storage.load("cp-1")
    assert unpickled == []


async def test_a_signed_payload_moved_to_another_run_or_tenant_is_refused(
    collection: InMemoryCollection, unpickled: list[bytes]
) -> None:
    source = make_storage(collection, signing_keys=[KEY])
    await source.save(make_checkpoint("cp-1"))
    (document,) = await raw_checkpoints(collection)
    for overrides in ({"session_id": "another-run"}, {"tenant_id": "another-tenant"}):
        target = make_storage(collection, signing_keys=[KEY], **overrides)
        # Copy the payload, checksum and signature into a document of the target's own run.
        await target.save(make_checkpoint("cp-1", state={"placeholder": True}))
        (copy,) = [
            stored
            for stored in await raw_checkpoints(collection, checkpoint_id="cp-1")
            if stored["_id"] != document["_id"]
            and stored["scope_discriminator"] == target._scope.discriminator
        ]
        fields = {name: document[name] for name in ("checkpoint", "payload_checksum", "payload_signature")}
        await collection.update_one({"_id": copy["_id"]}, {"$set": fields})
        unpickled.clear()
        with pytest.raises(MongoDBIntegrityError):
            await target.load("cp-1")
        assert unpickled == []


async def test_an_unsigned_storage_still_reads_signed_documents(collection: InMemoryCollection) -> None:
    await make_storage(collection, signing_keys=[KEY]).save(make_checkpoint("cp-1"))
    assert (await make_storage(collection).load("cp-1")).checkpoint_id == "cp-1"


async def test_keys_never_reach_errors_or_logs(
    collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    await make_storage(collection).save(make_checkpoint("cp-1"))
    storage = make_storage(collection, signing_keys=[KEY])
    caplog.set_level(logging.DEBUG)
    with pytest.raises(MongoDBIntegrityError) as raised:
        await storage.load("cp-1")
    rendered = [str(raised.value), repr(raised.value), repr(storage), caplog.text]
    for text in rendered:
        assert KEY.hex() not in text
        assert repr(KEY)[2:-1] not in text
    assert "integrity" in caplog.text


def test_options_with_keys_stay_hashable_and_comparable() -> None:
    first = MongoDBCheckpointStorageOptions(
        tenant_id="t", workflow_name="w", session_id="s", signing_keys=[KEY]
    )
    second = MongoDBCheckpointStorageOptions(
        tenant_id="t", workflow_name="w", session_id="s", signing_keys=(KEY,)
    )
    assert first == second
    assert hash(first) == hash(second)
