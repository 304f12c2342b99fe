"""Save and load: protocol conformance, lossless round trips, the stored envelope and its gates."""

from __future__ import annotations

import pickle
from datetime import datetime, timedelta, timezone

import pytest
from agent_framework import CheckpointStorage, Message, WorkflowCheckpoint

from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorage,
    MongoDBMappingError,
)
from agent_framework_mongodb.checkpoints.codec import payload_checksum
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    APPLICATION,
    CHECKPOINT_KIND,
    SESSION,
    TENANT,
    WORKFLOW,
    checkpoint_dict,
    make_checkpoint,
    make_storage,
    message_state,
    raw_checkpoints,
    scope_of,
)


def test_storage_is_an_agent_framework_checkpoint_storage(storage: MongoDBCheckpointStorage) -> None:
    # CheckpointStorage is a Protocol without @runtime_checkable, so isinstance() is refused;
    # the storage derives from it explicitly, and mypy checks the assignment structurally.
    as_protocol: CheckpointStorage = storage
    assert CheckpointStorage in type(as_protocol).__mro__
    for method in ("save", "load", "list_checkpoints", "delete", "get_latest", "list_checkpoint_ids"):
        assert callable(getattr(as_protocol, method))


async def test_save_returns_the_checkpoint_id_and_load_round_trips_losslessly(
    storage: MongoDBCheckpointStorage,
) -> None:
    checkpoint = make_checkpoint("cp-round-trip", state=message_state())
    checkpoint.iteration_count = 7
    checkpoint.metadata = {"superstep": 3, "labels": ["a", "b"]}

    returned = await storage.save(checkpoint)
    loaded = await storage.load("cp-round-trip")

    assert returned == "cp-round-trip"
    assert isinstance(loaded, WorkflowCheckpoint)
    assert checkpoint_dict(loaded) == checkpoint_dict(checkpoint)


async def test_message_objects_in_state_survive_as_messages(storage: MongoDBCheckpointStorage) -> None:
    checkpoint = make_checkpoint("cp-messages", state=message_state())
    await storage.save(checkpoint)

    loaded = await storage.load("cp-messages")

    greeting = loaded.state["greeting"]
    assert isinstance(greeting, Message)
    assert greeting.role == "user"
    assert greeting.text == "hi"
    assert loaded.state["reply"].text == "hello there"


async def test_every_read_path_returns_the_same_lossless_checkpoint(
    storage: MongoDBCheckpointStorage,
) -> None:
    checkpoint = make_checkpoint("cp-every-path", state=message_state())
    await storage.save(checkpoint)
    expected = checkpoint_dict(checkpoint)

    latest = await storage.get_latest(workflow_name=WORKFLOW)
    listed = await storage.list_checkpoints(workflow_name=WORKFLOW)
    page = await storage.list_checkpoint_page(workflow_name=WORKFLOW)

    assert latest is not None
    assert checkpoint_dict(latest) == expected
    assert [checkpoint_dict(c) for c in listed] == [expected]
    assert [checkpoint_dict(c) for c in page.checkpoints] == [expected]


async def test_load_of_an_unknown_id_is_not_found(storage: MongoDBCheckpointStorage) -> None:
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("cp-never-saved")


async def test_document_envelope_has_every_field(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    scope = scope_of(storage)
    before = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(milliseconds=1)
    await storage.save(make_checkpoint("cp-parent"))
    await storage.save(make_checkpoint("cp-child", previous="cp-parent"))
    after = datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(milliseconds=1)

    documents = await raw_checkpoints(collection)
    assert [d["checkpoint_id"] for d in documents] == ["cp-parent", "cp-child"]
    child = documents[1]
    assert child["_id"] == scope.checkpoint_document_id("cp-child")
    assert child["_kind"] == CHECKPOINT_KIND
    assert child["schema_version"] == 1
    assert isinstance(child["framework_version"], str)
    assert child["framework_version"]
    assert child["payload_version"] == "1.0"
    assert isinstance(child["payload_format"], str)
    assert child["payload_format"]
    assert isinstance(child["idempotency_hash_version"], int)
    assert child["scope_discriminator"] == scope.discriminator
    assert child["tenant_id"] == TENANT
    assert child["application_id"] == APPLICATION
    assert child["workflow_name"] == WORKFLOW
    assert child["session_id"] == SESSION
    assert child["parent_checkpoint_id"] == "cp-parent"
    assert documents[0]["parent_checkpoint_id"] is None
    assert isinstance(child["sequence"], int)
    assert child["sequence"] > documents[0]["sequence"] > 0
    created = child["created_at"]
    assert isinstance(created, datetime)
    assert before <= created <= after
    assert created.microsecond % 1000 == 0
    assert "expires_at" not in child
    assert isinstance(child["checkpoint"], bytes)
    assert len(child["checkpoint"]) > 0
    assert isinstance(child["payload_hash"], str)
    assert len(child["payload_hash"]) == 64
    assert isinstance(child["payload_checksum"], str)
    assert child["payload_hash"] != documents[0]["payload_hash"]


async def test_expiring_document_has_expires_at_equal_to_created_at_plus_ttl(
    collection: InMemoryCollection,
) -> None:
    ttl = timedelta(hours=6, milliseconds=250)
    storage = make_storage(collection, ttl=ttl)
    await storage.save(make_checkpoint("cp-ttl"))

    (document,) = await raw_checkpoints(collection)
    assert document["expires_at"] == document["created_at"] + ttl
    assert document["expires_at"].microsecond % 1000 == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("schema_version", 99),
        ("schema_version", True),
        ("framework_version", "agent-framework-core/9:other"),
        ("payload_version", "9.9"),
        ("payload_format", "json/v7"),
        ("idempotency_hash_version", 1),
    ],
)
async def test_unknown_stored_version_fails_load_naming_the_field(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage, field: str, value: object
) -> None:
    await storage.save(make_checkpoint("cp-versioned"))
    await collection.update_one({"checkpoint_id": "cp-versioned"}, {"$set": {field: value}})

    with pytest.raises(MongoDBMappingError, match=field):
        await storage.load("cp-versioned")


async def test_missing_version_field_fails_closed(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.save(make_checkpoint("cp-unversioned"))
    await collection.update_one({"checkpoint_id": "cp-unversioned"}, {"$unset": {"schema_version": ""}})

    with pytest.raises(MongoDBMappingError, match="schema_version"):
        await storage.load("cp-unversioned")


async def test_unknown_version_fails_listing_and_latest_too(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.save(make_checkpoint("cp-gated"))
    await collection.update_one({"checkpoint_id": "cp-gated"}, {"$set": {"payload_format": "other/v2"}})

    with pytest.raises(MongoDBMappingError, match="payload_format"):
        await storage.list_checkpoints(workflow_name=WORKFLOW)
    with pytest.raises(MongoDBMappingError, match="payload_format"):
        await storage.get_latest(workflow_name=WORKFLOW)
    with pytest.raises(MongoDBMappingError, match="payload_format"):
        await storage.list_checkpoint_page(workflow_name=WORKFLOW)


async def test_documents_of_the_first_payload_format_are_refused_with_guidance(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    # What the first release wrote: a pickle of the public dict itself, naming framework classes,
    # under payload_format "pickle-5/v1" and idempotency hash version 2.
    await storage.save(make_checkpoint("cp-first", state=message_state()))
    first_format = pickle.dumps(make_checkpoint("cp-first", state=message_state()).to_dict(), protocol=5)
    await collection.update_one(
        {"checkpoint_id": "cp-first"},
        {
            "$set": {
                "payload_format": "pickle-5/v1",
                "idempotency_hash_version": 2,
                "checkpoint": first_format,
                "payload_checksum": payload_checksum(first_format),
            }
        },
    )
    for read in (
        storage.load("cp-first"),
        storage.get_latest(workflow_name=WORKFLOW),
        storage.list_checkpoint_page(workflow_name=WORKFLOW),
    ):
        with pytest.raises(MongoDBMappingError, match="first payload format") as raised:
            await read
        assert "release that wrote them" in str(raised.value)


async def test_corrupted_payload_byte_fails_the_checksum(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.save(make_checkpoint("cp-corrupt", state={"text": "x" * 200}))
    (document,) = await raw_checkpoints(collection)
    payload = bytearray(document["checkpoint"])
    payload[len(payload) // 2] ^= 0x01
    await collection.update_one({"_id": document["_id"]}, {"$set": {"checkpoint": bytes(payload)}})

    with pytest.raises(MongoDBMappingError, match=r"(?i)checksum"):
        await storage.load("cp-corrupt")


async def test_payload_swapped_from_another_checkpoint_fails(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.save(make_checkpoint("cp-first", state={"who": "first"}))
    await storage.save(make_checkpoint("cp-second", state={"who": "second"}))
    first, second = await raw_checkpoints(collection)
    # Swap payload and its checksum together, so only the payload/document binding can catch it.
    await collection.update_one(
        {"_id": first["_id"]},
        {"$set": {"checkpoint": second["checkpoint"], "payload_checksum": second["payload_checksum"]}},
    )

    with pytest.raises(MongoDBMappingError):
        await storage.load("cp-first")
    assert (await storage.load("cp-second")).state == {"who": "second"}


async def test_payload_swapped_without_its_checksum_fails(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.save(make_checkpoint("cp-a", state={"who": "a"}))
    await storage.save(make_checkpoint("cp-b", state={"who": "b"}))
    first, second = await raw_checkpoints(collection)
    await collection.update_one({"_id": first["_id"]}, {"$set": {"checkpoint": second["checkpoint"]}})

    with pytest.raises(MongoDBMappingError):
        await storage.load("cp-a")


async def test_missing_payload_fails_with_mapping_error(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.save(make_checkpoint("cp-empty"))
    await collection.update_one({"checkpoint_id": "cp-empty"}, {"$unset": {"checkpoint": ""}})

    with pytest.raises(MongoDBMappingError):
        await storage.load("cp-empty")


async def test_delete_removes_only_that_checkpoint(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.save(make_checkpoint("cp-keep"))
    await storage.save(make_checkpoint("cp-drop"))

    assert await storage.delete("cp-drop") is True
    assert await storage.delete("cp-drop") is False
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("cp-drop")
    assert [d["checkpoint_id"] for d in await raw_checkpoints(collection)] == ["cp-keep"]
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-keep"]
