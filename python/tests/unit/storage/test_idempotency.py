"""Idempotent saves: an identical retry is a no-op, the same id with other content a conflict."""

from __future__ import annotations

import asyncio
import datetime as dt
from decimal import Decimal

import pytest

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBConcurrencyError,
    MongoDBMappingError,
)
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import WORKFLOW, checkpoint_dict, make_checkpoint, make_storage, message_state, raw_checkpoints

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)


async def test_identical_resave_returns_the_id_and_stores_one_document(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    checkpoint = make_checkpoint("cp-idem", state=message_state())

    first = await storage.save(checkpoint)
    (original,) = await raw_checkpoints(collection)
    second = await storage.save(checkpoint)

    assert first == second == "cp-idem"
    documents = await raw_checkpoints(collection)
    assert documents == [original]


async def test_equal_content_built_separately_is_idempotent(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    # Equal logical content in a fresh object (and dict keys in another order) is the same checkpoint.
    await storage.save(make_checkpoint("cp-equal", state={"a": 1, "b": [1, 2], "c": {"x": 1, "y": 2}}))
    again = make_checkpoint("cp-equal", state={"c": {"y": 2, "x": 1}, "b": [1, 2], "a": 1})

    assert await storage.save(again) == "cp-equal"
    assert len(await raw_checkpoints(collection)) == 1


async def test_same_id_with_different_state_conflicts_and_keeps_the_original(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    original = make_checkpoint("cp-conflict", state={"value": 1})
    await storage.save(original)
    (stored,) = await raw_checkpoints(collection)

    with pytest.raises(MongoDBConcurrencyError):
        await storage.save(make_checkpoint("cp-conflict", state={"value": 2}))

    assert await raw_checkpoints(collection) == [stored]
    assert checkpoint_dict(await storage.load("cp-conflict")) == checkpoint_dict(original)


_NOON_UTC = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (1, True),
        (0.0, -0.0),
        (Decimal("1.0"), Decimal("1.00")),
        (1, 1.0),
        (_NOON_UTC, _NOON_UTC.astimezone(dt.timezone(dt.timedelta(hours=1)))),
        (_NOON_UTC, _NOON_UTC.replace(tzinfo=dt.timezone(dt.timedelta(0), "UTC"))),
    ],
    ids=["int-bool", "float-sign", "decimal-exponent", "int-float", "datetime-offset", "timezone-name"],
)
async def test_same_id_with_an_equal_but_other_dict_key_conflicts(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage, first: object, second: object
) -> None:
    # The keys are == and hash alike, yet a load restores each as saved: other content. The earlier
    # dict with the same key is where a save's cache took one key for the other (issue 19), so the
    # second save passed for an identical retry and kept the first content without a conflict.
    original = make_checkpoint("cp-exact", state={"a": {first: "v"}, "b": {first: "v"}})
    await storage.save(original)
    (stored,) = await raw_checkpoints(collection)

    with pytest.raises(MongoDBConcurrencyError):
        await storage.save(make_checkpoint("cp-exact", state={"a": {first: "v"}, "b": {second: "v"}}))

    assert await raw_checkpoints(collection) == [stored]
    loaded = await storage.load("cp-exact")
    assert [repr(key) for key in loaded.state["b"]] == [repr(first)]


async def test_same_id_with_a_different_parent_conflicts(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.save(make_checkpoint("cp-lineage", previous="cp-a"))

    with pytest.raises(MongoDBConcurrencyError):
        await storage.save(make_checkpoint("cp-lineage", previous="cp-b"))

    (document,) = await raw_checkpoints(collection)
    assert document["parent_checkpoint_id"] == "cp-a"


async def test_gathered_identical_saves_store_one_document(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    checkpoint = make_checkpoint("cp-racing", state=message_state())

    results = await asyncio.gather(storage.save(checkpoint), storage.save(checkpoint))

    assert list(results) == ["cp-racing", "cp-racing"]
    assert [d["checkpoint_id"] for d in await raw_checkpoints(collection)] == ["cp-racing"]
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-racing"]


async def test_gathered_identical_saves_from_two_storages_store_one_document(
    collection: InMemoryCollection,
) -> None:
    first, second = make_storage(collection), make_storage(collection)
    await first.save(make_checkpoint("cp-warm"))
    checkpoint = make_checkpoint("cp-two-writers")

    results = await asyncio.gather(first.save(checkpoint), second.save(checkpoint))

    assert list(results) == ["cp-two-writers", "cp-two-writers"]
    ids = [d["checkpoint_id"] for d in await raw_checkpoints(collection)]
    assert ids == ["cp-warm", "cp-two-writers"]


async def test_gathered_conflicting_saves_keep_exactly_one(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    results = await asyncio.gather(
        storage.save(make_checkpoint("cp-contested", state={"v": 1})),
        storage.save(make_checkpoint("cp-contested", state={"v": 2})),
        return_exceptions=True,
    )

    successes = [r for r in results if r == "cp-contested"]
    failures = [r for r in results if isinstance(r, MongoDBConcurrencyError)]
    assert len(successes) == 1
    assert len(failures) == 1
    assert len(await raw_checkpoints(collection)) == 1


async def test_stored_document_with_another_hash_version_is_a_mapping_error(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    checkpoint = make_checkpoint("cp-old-hash")
    await storage.save(checkpoint)
    await collection.update_one({"checkpoint_id": "cp-old-hash"}, {"$set": {"idempotency_hash_version": 1}})
    (stored,) = await raw_checkpoints(collection)

    with pytest.raises(MongoDBMappingError, match="idempotency hash"):
        await storage.save(checkpoint)

    assert await raw_checkpoints(collection) == [stored]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"x": 1}, {"x": 1.0}),
        ({"x": 1}, {"x": True}),
        ({"x": 0}, {"x": False}),
        ({"x": [1, 2]}, {"x": (1, 2)}),
        ({"x": "1"}, {"x": b"1"}),
        ({"x": [1, 2]}, {"x": [2, 1]}),
        ({"x": {"a": 1}}, {"x": {"a": 1, "b": None}}),
        ({"x": None}, {}),
        ({"x": 0.0}, {"x": -0.0}),
    ],
    ids=[
        "int-float",
        "int-bool",
        "zero-false",
        "list-tuple",
        "str-bytes",
        "list-order",
        "extra-key",
        "none-missing",
        "signed-zero",
    ],
)
async def test_values_equal_in_python_but_of_other_type_conflict(
    collection: InMemoryCollection, first: dict[str, object], second: dict[str, object]
) -> None:
    storage = make_storage(collection)
    await storage.save(make_checkpoint("cp-typed", state=first))

    with pytest.raises(MongoDBConcurrencyError):
        await storage.save(make_checkpoint("cp-typed", state=second))

    loaded = await storage.load("cp-typed")
    assert repr(loaded.state) == repr(first)


async def test_set_order_does_not_change_identity(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await storage.save(make_checkpoint("cp-set", state={"s": {3, 1, 2}, "f": frozenset({"b", "a"})}))

    assert (
        await storage.save(make_checkpoint("cp-set", state={"s": {1, 2, 3}, "f": frozenset({"a", "b"})}))
        == "cp-set"
    )
    assert len(await raw_checkpoints(collection)) == 1
