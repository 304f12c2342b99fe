"""Provisioning without a run: ensure_checkpoint_indexes and validate_checkpoint_indexes."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pymongo.errors import AutoReconnect

import agent_framework_mongodb
from agent_framework_mongodb import (
    MongoDBConfigurationError,
    MongoDBIndexError,
    MongoDBIndexMismatchError,
    MongoDBIndexMissingError,
    MongoDBTimeoutError,
    ensure_checkpoint_indexes,
    validate_checkpoint_indexes,
)
from agent_framework_mongodb.checkpoints.scope import CHECKPOINT_KIND
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

from ._support import INDEX_NAMES, ProxyCollection, make_checkpoint, make_storage

LINEAGE_KEYS = [
    ("scope_discriminator", 1),
    ("workflow_name", 1),
    ("session_id", 1),
    ("parent_checkpoint_id", 1),
]


async def listed_names(collection: InMemoryCollection) -> set[str]:
    cursor = await collection.list_indexes()
    return {index["name"] for index in await cursor.to_list(None)}


def test_exported_from_the_top_level() -> None:
    assert "ensure_checkpoint_indexes" in agent_framework_mongodb.__all__
    assert "validate_checkpoint_indexes" in agent_framework_mongodb.__all__


async def test_ensure_returns_the_names_in_two_round_trips_and_validate_passes(
    proxy: ProxyCollection,
) -> None:
    assert await ensure_checkpoint_indexes(proxy) == INDEX_NAMES
    assert proxy.trip_names == ["list_indexes", "create_indexes"]

    proxy.reset()
    assert await ensure_checkpoint_indexes(proxy) == INDEX_NAMES  # idempotent
    await validate_checkpoint_indexes(proxy)
    assert proxy.trip_names == ["list_indexes", "create_indexes", "list_indexes"]


async def test_the_storage_methods_give_the_same_answers(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    with pytest.raises(MongoDBIndexMissingError):
        await validate_checkpoint_indexes(collection)
    assert await storage.ensure_indexes() == await ensure_checkpoint_indexes(collection)
    await storage.validate_indexes()


async def test_validate_names_a_missing_index(collection: InMemoryCollection) -> None:
    with pytest.raises(MongoDBIndexMissingError, match="'checkpoint_scope_identity' is missing"):
        await validate_checkpoint_indexes(collection)


async def test_a_differing_index_of_a_required_name_is_named_and_nothing_is_created(
    proxy: ProxyCollection, collection: InMemoryCollection
) -> None:
    await collection.create_index([("parent_checkpoint_id", 1)], name="checkpoint_scope_lineage")

    with pytest.raises(MongoDBIndexMismatchError, match="'checkpoint_scope_lineage' differs in keys"):
        await ensure_checkpoint_indexes(proxy)
    assert proxy.trip_names == ["list_indexes"]
    assert await listed_names(collection) == {"_id_", "checkpoint_scope_lineage"}


async def test_an_equivalent_index_under_another_name_is_named(collection: InMemoryCollection) -> None:
    await collection.create_index(
        LINEAGE_KEYS,
        name="stray_lineage",
        partialFilterExpression={"_kind": CHECKPOINT_KIND},
        collation={"locale": "simple"},
    )

    with pytest.raises(MongoDBIndexMismatchError, match="'checkpoint_scope_lineage' conflicts") as raised:
        await ensure_checkpoint_indexes(collection)
    assert raised.value.__cause__ is not None
    # The one-at-a-time pass created the indexes before the conflicting one; never the stray's twin.
    assert await listed_names(collection) == {
        "_id_",
        "stray_lineage",
        "checkpoint_scope_identity",
        "checkpoint_scope_sequence",
    }


async def test_an_index_differing_only_in_uniqueness_under_another_name_is_no_conflict(
    proxy: ProxyCollection, collection: InMemoryCollection
) -> None:
    # Since FCV 4.9/5.0 uniqueness is part of an index's signature (IndexDescriptor::
    # compareIndexOptions), so a non-unique twin of the unique sequence index is another index.
    sequence_keys = [*LINEAGE_KEYS[:3], ("sequence", 1)]
    await collection.create_index(
        sequence_keys,
        name="stray_sequence",
        partialFilterExpression={"_kind": CHECKPOINT_KIND},
        collation={"locale": "simple"},
    )

    assert await ensure_checkpoint_indexes(proxy) == INDEX_NAMES
    assert proxy.trip_names == ["list_indexes", "create_indexes"]
    assert await listed_names(collection) == {"_id_", "stray_sequence", *INDEX_NAMES}
    await validate_checkpoint_indexes(collection)


async def test_a_collection_with_a_default_collation_is_refused(client: InMemoryMongoClient) -> None:
    collection = await client["checkpoint_db"].create_collection("french", collation={"locale": "fr"})

    with pytest.raises(MongoDBIndexMismatchError, match="default collation"):
        await ensure_checkpoint_indexes(collection)
    with pytest.raises(MongoDBIndexMismatchError, match="default collation"):
        await validate_checkpoint_indexes(collection)
    assert await listed_names(collection) == {"_id_"}


@pytest.mark.parametrize("operation", ["list_indexes", "create_indexes"])
async def test_driver_failures_are_provisioning_errors(
    collection: InMemoryCollection, operation: str
) -> None:
    collection.fail_next(operation, AutoReconnect("connection reset"))

    with pytest.raises(MongoDBIndexError) as raised:
        await ensure_checkpoint_indexes(collection)
    assert raised.value.retryable is True
    assert isinstance(raised.value.__cause__, AutoReconnect)


async def test_the_deadline_bounds_the_call(collection: InMemoryCollection) -> None:
    collection.hold("create_indexes")

    with pytest.raises(MongoDBTimeoutError):
        await ensure_checkpoint_indexes(collection, timeout=0.2)


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), True, "5"])
async def test_an_invalid_timeout_is_refused_by_name(collection: InMemoryCollection, timeout: Any) -> None:
    with pytest.raises(MongoDBConfigurationError, match=r"^timeout must be"):
        await ensure_checkpoint_indexes(collection, timeout=timeout)
    with pytest.raises(MongoDBConfigurationError, match=r"^timeout must be"):
        await validate_checkpoint_indexes(collection, timeout=timeout)


async def test_each_call_logs_one_completion_record(
    collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agent_framework_mongodb")
    await ensure_checkpoint_indexes(collection)
    await validate_checkpoint_indexes(collection)

    records = [r for r in caplog.records if r.name == "agent_framework_mongodb"]
    assert [(r.__dict__["operation"], r.__dict__["outcome"]) for r in records] == [
        ("ensure_indexes", "success"),
        ("validate_indexes", "success"),
    ]


@pytest.mark.seeded_engine
async def test_ensure_indexes_on_a_populated_collection_outlasts_the_save_deadline() -> None:
    """A build on a large collection may take longer than any save's deadline; MongoDB aborts a
    build its deadline cuts short (SERVER-46595), so the default build waits for as long as it takes,
    and a build timeout given explicitly aborts it cleanly."""
    client = InMemoryMongoClient()
    collection = client["db"]["checkpoints"]
    await collection.insert_many([{"_id": f"doc-{index}", "note": index} for index in range(400)])
    client.index_build_rate = 1000  # 0.4 s per index over the 400 documents, past the 0.1 s deadline
    storage = make_storage(collection, operation_timeout=0.1)

    with pytest.raises(MongoDBTimeoutError):
        await storage.ensure_indexes(timeout=0.1)
    assert await listed_names(collection) == {"_id_"}, "an aborted build leaves no index behind"

    await storage.ensure_indexes()
    assert set(INDEX_NAMES) <= await listed_names(collection)
    await storage.validate_indexes()


async def test_a_first_save_into_an_unindexed_collection_says_so_once(
    collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    caplog.set_level(logging.DEBUG, logger="agent_framework_mongodb")

    await storage.save(make_checkpoint("cp-1"))
    await storage.save(make_checkpoint("cp-2"))
    await storage.for_session("another-run").save(make_checkpoint("cp-3"))

    reports = [record for record in caplog.records if "lacks the unique indexes" in record.getMessage()]
    assert len(reports) == 1, "once per collection and process, whatever the run"
    assert reports[0].levelno == logging.ERROR
    assert "ensure_indexes()" in reports[0].getMessage()
    for name in ("checkpoint_scope_sequence",):
        assert name in reports[0].getMessage()
    assert len(proxy.named("list_indexes")) == 1
    assert await storage.load("cp-2") is not None, "the saves themselves went on"


async def test_a_strict_save_into_an_unindexed_collection_fails_until_the_indexes_are_there(
    collection: InMemoryCollection,
) -> None:
    # Issue 31: strict_saves asks for a run that stops rather than goes on unprotected; before, a
    # strict save into a collection without its unique indexes only logged an error and succeeded.
    from agent_framework_mongodb import MongoDBStrictSaveFailure

    proxy = ProxyCollection(collection)
    strict = make_storage(proxy, strict_saves=True)
    for attempt in ("cp-1", "cp-2"):  # each strict save looks again while they are missing
        with pytest.raises(MongoDBStrictSaveFailure) as raised:
            await strict.save(make_checkpoint(attempt))
        cause = raised.value.__cause__
        assert isinstance(cause, MongoDBIndexMissingError), cause
        assert "ensure_indexes()" in str(cause)
        assert "checkpoint_scope_sequence (missing)" in str(cause)
    assert len(proxy.named("list_indexes")) == 2
    assert await strict.list_checkpoint_ids(workflow_name=make_checkpoint().workflow_name) == []

    await strict.ensure_indexes()
    assert await strict.save(make_checkpoint("cp-3")) == "cp-3"


async def test_a_provisioned_collection_costs_a_save_nothing(
    collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = ProxyCollection(collection)
    await make_storage(proxy).ensure_indexes()
    proxy.reset()
    caplog.set_level(logging.DEBUG, logger="agent_framework_mongodb")

    await make_storage(proxy).save(make_checkpoint("cp-1"))

    assert proxy.named("list_indexes") == []
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


async def test_an_index_that_lost_its_uniqueness_is_reported(
    collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    await collection.create_index(
        [("scope_discriminator", 1), ("workflow_name", 1), ("session_id", 1), ("sequence", 1)],
        name="checkpoint_scope_sequence",
        partialFilterExpression={"_kind": CHECKPOINT_KIND},
    )
    caplog.set_level(logging.ERROR, logger="agent_framework_mongodb")

    await make_storage(ProxyCollection(collection)).save(make_checkpoint("cp-1"))

    (report,) = [record for record in caplog.records if "lacks the unique indexes" in record.getMessage()]
    assert "checkpoint_scope_sequence (differs: unique" in report.getMessage()
