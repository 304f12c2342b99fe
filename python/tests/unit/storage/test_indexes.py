"""Indexes: only ensure_indexes creates them; validate_indexes checks names and definitions."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import DuplicateKeyError

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBIndexError,
    MongoDBIndexMismatchError,
    MongoDBIndexMissingError,
)
from agent_framework_mongodb.checkpoints.indexes import CHECKPOINT_INDEXES, collation_conflict
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

from ._support import (
    CHECKPOINT_KIND,
    COUNTER_KIND,
    INDEX_NAMES,
    WORKFLOW,
    make_checkpoint,
    make_storage,
    save_chain,
)

SCOPED_PREFIX = ["scope_discriminator", "workflow_name", "session_id"]


async def listed_indexes(collection: InMemoryCollection) -> dict[str, dict[str, Any]]:
    cursor = await collection.list_indexes()
    return {index["name"]: index for index in await cursor.to_list(None)}


async def test_construction_and_every_operation_create_no_index(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    storage.for_session("session-other")
    await save_chain(storage, 3)
    await storage.load("cp-000")
    await storage.list_checkpoints(workflow_name=WORKFLOW)
    await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
    await storage.get_latest(workflow_name=WORKFLOW)
    await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=1)
    await storage.delete("cp-001")
    with pytest.raises(MongoDBIndexMissingError):
        await storage.validate_indexes()
    await storage.clear_run()

    assert list(await listed_indexes(collection)) in ([], ["_id_"])


async def test_ensure_indexes_returns_the_six_names_and_is_idempotent(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    first = await storage.ensure_indexes()
    second = await storage.ensure_indexes()

    assert sorted(first) == sorted(INDEX_NAMES)
    assert sorted(second) == sorted(INDEX_NAMES)
    assert isinstance(first, tuple)
    assert set(await listed_indexes(collection)) == {"_id_", *INDEX_NAMES}
    await storage.validate_indexes()


async def test_index_definitions(collection: InMemoryCollection, storage: MongoDBCheckpointStorage) -> None:
    await storage.ensure_indexes()
    indexes = await listed_indexes(collection)

    identity = indexes["checkpoint_scope_identity"]
    assert list(identity["key"].items()) == [(k, 1) for k in [*SCOPED_PREFIX, "checkpoint_id"]]
    assert identity.get("unique") is True
    sequence = indexes["checkpoint_scope_sequence"]
    assert list(sequence["key"].items()) == [(k, 1) for k in [*SCOPED_PREFIX, "sequence"]]
    assert sequence.get("unique") is True
    lineage = indexes["checkpoint_scope_lineage"]
    assert list(lineage["key"].items()) == [(k, 1) for k in [*SCOPED_PREFIX, "parent_checkpoint_id"]]
    assert not lineage.get("unique", False)
    for name in ("checkpoint_scope_identity", "checkpoint_scope_sequence", "checkpoint_scope_lineage"):
        assert dict(indexes[name]["partialFilterExpression"]) == {"_kind": CHECKPOINT_KIND}
        assert "expireAfterSeconds" not in indexes[name]
        assert indexes[name].get("collation", {"locale": "simple"})["locale"] == "simple"
    for name, kind in (
        ("checkpoint_expiration", CHECKPOINT_KIND),
        ("checkpoint_counter_expiration", COUNTER_KIND),
    ):
        ttl = indexes[name]
        assert list(ttl["key"].items()) == [("expires_at", 1)]
        assert ttl["expireAfterSeconds"] == 0
        assert dict(ttl["partialFilterExpression"]) == {"_kind": kind}


async def test_sequence_index_ignores_the_counter_document(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    # The counter carries a "sequence" too; a checkpoint-only partial filter keeps it out.
    await storage.ensure_indexes()
    ids = await save_chain(storage, 4)
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ids


async def test_validate_indexes_names_a_missing_index(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.ensure_indexes()
    await collection.drop_index("checkpoint_scope_lineage")

    with pytest.raises(MongoDBIndexMissingError, match="checkpoint_scope_lineage"):
        await storage.validate_indexes()


async def test_validate_indexes_on_an_empty_collection_names_a_missing_index(
    storage: MongoDBCheckpointStorage,
) -> None:
    with pytest.raises(MongoDBIndexMissingError, match="checkpoint_"):
        await storage.validate_indexes()


@pytest.mark.parametrize(
    ("name", "keys", "options"),
    [
        (
            "checkpoint_scope_sequence",
            [*SCOPED_PREFIX, "sequence"],
            {"partialFilterExpression": {"_kind": CHECKPOINT_KIND}},
        ),
        ("checkpoint_scope_identity", [*SCOPED_PREFIX, "checkpoint_id"], {"unique": True}),
        (
            "checkpoint_scope_lineage",
            ["parent_checkpoint_id"],
            {"partialFilterExpression": {"_kind": CHECKPOINT_KIND}},
        ),
        (
            "checkpoint_expiration",
            ["expires_at"],
            {"expireAfterSeconds": 60, "partialFilterExpression": {"_kind": CHECKPOINT_KIND}},
        ),
        ("checkpoint_counter_expiration", ["expires_at"], {"expireAfterSeconds": 0}),
    ],
)
async def test_validate_indexes_names_a_differing_index(
    collection: InMemoryCollection,
    storage: MongoDBCheckpointStorage,
    name: str,
    keys: list[str],
    options: dict[str, Any],
) -> None:
    await collection.create_index([(key, 1) for key in keys], name=name, **options)
    # Every other required index exists as required, so only the differing one can be named.
    others = [spec.model() for spec in CHECKPOINT_INDEXES if spec.name != name]
    await collection.create_indexes(others)

    with pytest.raises(MongoDBIndexMismatchError, match=name):
        await storage.validate_indexes()


async def test_ensure_indexes_over_a_conflicting_index_is_a_mismatch(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await collection.create_index([("expires_at", 1)], name="checkpoint_expiration", expireAfterSeconds=3600)

    with pytest.raises(MongoDBIndexMismatchError):
        await storage.ensure_indexes()


async def test_unique_identity_index_holds_with_indexes_ensured(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.ensure_indexes()
    checkpoint = make_checkpoint("cp-unique")
    await storage.save(checkpoint)
    await storage.save(checkpoint)

    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-unique"]


async def test_a_unique_index_over_existing_duplicates_is_an_index_error(
    collection: InMemoryCollection,
) -> None:
    # Two stored checkpoints of one run with the same sequence (written before the unique index
    # existed): building it fails with a duplicate key, which is a provisioning failure, not a
    # write race, and nothing is retried as if it were one.
    storage = make_storage(collection)
    await save_chain(storage, 2)
    for checkpoint_id in ("cp-000", "cp-001"):
        await collection.update_one({"checkpoint_id": checkpoint_id}, {"$set": {"sequence": 7}})

    with pytest.raises(MongoDBIndexError) as raised:
        await storage.ensure_indexes()

    assert type(raised.value) is MongoDBIndexError
    assert raised.value.retryable is False
    assert isinstance(raised.value.__cause__, DuplicateKeyError)


SERVER_LISTED_ID_INDEX_WITH_COLLATION = {
    "v": 2,
    "key": {"_id": 1},
    "name": "_id_",
    "collation": {
        "locale": "fr",
        "caseLevel": False,
        "caseFirst": "off",
        "strength": 3,
        "numericOrdering": False,
        "alternate": "non-ignorable",
        "maxVariable": "punct",
        "normalization": False,
        "backwards": False,
        "version": "57.1",
    },
}


@pytest.mark.parametrize(
    ("listed", "refused"),
    [
        ({"_id_": SERVER_LISTED_ID_INDEX_WITH_COLLATION}, True),
        ({"_id_": {"v": 2, "key": {"_id": 1}, "name": "_id_"}}, False),
        ({"_id_": {"v": 2, "key": {"_id": 1}, "name": "_id_", "collation": {"locale": "simple"}}}, False),
        ({}, False),  # the collection does not exist yet
    ],
    ids=["fr-default", "no-collation", "simple", "no-collection"],
)
def test_a_default_collation_is_read_from_the_listed_id_index(
    listed: dict[str, dict[str, Any]], refused: bool
) -> None:
    conflict = collation_conflict(listed)
    assert (conflict is not None) is refused
    if conflict is not None:
        assert "'fr'" in conflict
        assert "default collation" in conflict


async def test_a_collection_with_a_default_collation_is_refused_before_anything_is_created(
    client: InMemoryMongoClient,
) -> None:
    collection = await client["checkpoint_db"].create_collection("french", collation={"locale": "fr"})
    storage = make_storage(collection)

    with pytest.raises(MongoDBIndexMismatchError, match="default collation") as raised:
        await storage.ensure_indexes()
    assert raised.value.retryable is False
    assert list(await listed_indexes(collection)) == ["_id_"], "ensure_indexes created an index anyway"

    with pytest.raises(MongoDBIndexMismatchError, match="default collation"):
        await storage.validate_indexes()


async def test_a_collection_without_a_default_collation_is_provisioned(client: InMemoryMongoClient) -> None:
    collection = await client["checkpoint_db"].create_collection("plain")
    storage = make_storage(collection)

    assert set(await storage.ensure_indexes()) == set(INDEX_NAMES)
    await storage.validate_indexes()
