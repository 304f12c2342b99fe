"""``strict_saves``: the option, and how ``save`` escalates a failure (or does not)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pymongo.errors import AutoReconnect

from agent_framework_mongodb import (
    MongoDBConcurrencyError,
    MongoDBConfigurationError,
    MongoDBStrictSaveFailure,
    MongoDBTransientPersistenceError,
)
from agent_framework_mongodb.checkpoints.strict import UNEXPECTED_CATEGORY, escalated_save_failures
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import ProxyCollection, make_checkpoint, make_options, make_storage, raw_checkpoints

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)


def test_off_by_default_and_kept_by_with_session() -> None:
    assert make_options().strict_saves is False
    assert make_options(strict_saves=True).with_session("other").strict_saves is True


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_only_a_bool_is_accepted(value: Any) -> None:
    with pytest.raises(MongoDBConfigurationError, match="strict_saves"):
        make_options(strict_saves=value)


def test_the_failure_is_not_an_exception_and_carries_the_error() -> None:
    error = MongoDBConcurrencyError("conflict", retryable=True)
    failure = MongoDBStrictSaveFailure(error)
    assert isinstance(failure, BaseException)
    assert not isinstance(failure, Exception)
    assert (failure.error, failure.category, failure.retryable) == (error, "concurrency", True)
    assert "concurrency" in str(failure)


def test_a_foreign_error_is_escalated_as_unexpected() -> None:
    with pytest.raises(MongoDBStrictSaveFailure) as caught, escalated_save_failures(True):
        raise KeyError("bug")
    assert caught.value.category == UNEXPECTED_CATEGORY
    assert caught.value.retryable is False
    assert isinstance(caught.value.__cause__, KeyError)


def test_disabled_the_error_passes_unchanged() -> None:
    with pytest.raises(KeyError), escalated_save_failures(False):
        raise KeyError("bug")


def test_cancellation_is_never_escalated() -> None:
    with pytest.raises(asyncio.CancelledError), escalated_save_failures(True):
        raise asyncio.CancelledError


async def test_a_direct_save_raises_the_failure_and_stores_nothing(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, strict_saves=True)
    await storage.ensure_indexes()  # a strict save refuses an unprovisioned collection
    collection.fail_next("find_one_and_update", AutoReconnect("connection reset"))

    with pytest.raises(MongoDBStrictSaveFailure) as caught:
        await storage.save(make_checkpoint("cp-1"))

    assert isinstance(caught.value.error, MongoDBTransientPersistenceError)
    assert caught.value.retryable is True
    assert await collection.count_documents({}) == 0
    # Saving the same checkpoint again is safe, as ``retryable`` says.
    assert await storage.save(make_checkpoint("cp-1")) == "cp-1"


async def test_a_failed_insert_leaves_only_an_unused_sequence_number(
    proxy: ProxyCollection, collection: InMemoryCollection
) -> None:
    storage = make_storage(proxy, strict_saves=True)
    await storage.ensure_indexes()  # a strict save refuses an unprovisioned collection
    await storage.save(make_checkpoint("cp-1"))
    proxy.fail("insert_checkpoint", AutoReconnect("connection reset"))

    with pytest.raises(MongoDBStrictSaveFailure) as caught:
        await storage.save(make_checkpoint("cp-2", previous="cp-1"))

    assert caught.value.category == "transient_persistence"
    assert [document["checkpoint_id"] for document in await raw_checkpoints(collection)] == ["cp-1"]
    # The retry stores the checkpoint after the number the failed insert left unused (a gap, ADR 0006).
    assert await storage.save(make_checkpoint("cp-2", previous="cp-1")) == "cp-2"
    sequences = [document["sequence"] for document in await raw_checkpoints(collection)]
    assert sequences == [1, 3]


async def test_without_strict_saves_the_error_is_raised_as_is(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    with pytest.raises(MongoDBConfigurationError):
        await storage.save(make_checkpoint("cp-1", workflow_name="another-workflow"))
