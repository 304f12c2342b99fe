"""Read preference and write concern: reads from the primary, acknowledged writes only.

These use pymongo's real ``AsyncMongoClient``, which connects lazily: building a storage over it
does no I/O, so what pymongo derives from a URI is checked without a server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.read_preferences import Primary, SecondaryPreferred
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBConfigurationError
from agent_framework_mongodb.checkpoints.bounded import BoundedCollection
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

from ._support import ProxyCollection, make_checkpoint, make_options, make_storage

UNREACHABLE = "mongodb://concerns.invalid:27017/"


@pytest.fixture
async def secondary_client() -> AsyncIterator[AsyncMongoClient[dict[str, Any]]]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        UNREACHABLE + "?readPreference=secondaryPreferred", connect=False
    )
    yield client
    await client.close()


def _bound_collection(storage: MongoDBCheckpointStorage) -> Any:
    # The collection the storage sends its operations to (private, inspected on purpose), as the
    # driver sees it: inside the view that bounds each request (bounded.py).
    bound = storage._collection  # pyright: ignore[reportPrivateUsage]
    assert isinstance(bound, BoundedCollection)
    return bound.unbounded


async def test_reads_go_to_the_primary_whatever_the_clients_preference(
    secondary_client: AsyncMongoClient[dict[str, Any]],
) -> None:
    collection = secondary_client["db"]["checkpoints"]
    assert collection.read_preference == SecondaryPreferred()

    storage = MongoDBCheckpointStorage(collection, options=make_options())

    assert _bound_collection(storage).read_preference == Primary()
    assert _bound_collection(storage).write_concern == collection.write_concern
    assert collection.read_preference == SecondaryPreferred(), "the caller's collection is untouched"
    sibling = storage.for_session("session-other")
    assert _bound_collection(sibling).read_preference == Primary()


async def test_a_client_or_connection_string_source_is_bound_to_the_primary_too(
    secondary_client: AsyncMongoClient[dict[str, Any]],
) -> None:
    from_client = MongoDBCheckpointStorage(mongo_client=secondary_client, options=make_options())
    assert _bound_collection(from_client).read_preference == Primary()
    async with MongoDBCheckpointStorage(
        connection_string=UNREACHABLE + "?readPreference=nearest", options=make_options()
    ) as from_uri:
        assert _bound_collection(from_uri).read_preference == Primary()


async def test_an_unacknowledged_write_concern_is_refused_at_construction() -> None:
    with pytest.raises(MongoDBConfigurationError, match=r"unacknowledged \(w=0\)"):
        MongoDBCheckpointStorage(connection_string=UNREACHABLE + "?w=0", options=make_options())
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(UNREACHABLE, connect=False)
    try:
        collection = client["db"]["checkpoints"].with_options(write_concern=WriteConcern(w=0))
        with pytest.raises(MongoDBConfigurationError, match=r"unacknowledged \(w=0\)"):
            MongoDBCheckpointStorage(collection, options=make_options())
    finally:
        await client.close()


@pytest.mark.parametrize("concern", [WriteConcern(), WriteConcern(w=1), WriteConcern(w="majority", j=True)])
async def test_acknowledged_write_concerns_are_kept(concern: WriteConcern) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(UNREACHABLE, connect=False)
    try:
        collection = client["db"]["checkpoints"].with_options(write_concern=concern)
        storage = MongoDBCheckpointStorage(collection, options=make_options())
        assert _bound_collection(storage).write_concern == concern
    finally:
        await client.close()


async def test_every_operation_goes_through_the_derived_collection(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    derived: list[dict[str, Any]] = []
    original = proxy.with_options

    def recording(**options: Any) -> ProxyCollection:
        derived.append(options)
        return original(**options)

    proxy.with_options = recording  # type: ignore[method-assign]
    make_storage(proxy)
    assert derived == [{"read_preference": Primary()}]


async def test_the_engine_models_the_same_binding() -> None:
    # The in-process engine carries the settings too, so users' own tests see what pymongo does.
    secondary = InMemoryMongoClient(readPreference="secondaryPreferred")
    storage = MongoDBCheckpointStorage(mongo_client=secondary, options=make_options())
    assert _bound_collection(storage).read_preference == Primary()
    await storage.save(make_checkpoint("cp-primary"))
    assert (await storage.load("cp-primary")).checkpoint_id == "cp-primary"

    with pytest.raises(MongoDBConfigurationError, match="unacknowledged"):
        MongoDBCheckpointStorage(mongo_client=InMemoryMongoClient(w=0), options=make_options())
