"""Chunk writes as a real server answers them (issue 20): racing upserts, retryability, error codes.

A real server answers one of two concurrent upserts of the same new chunk with E11000 inside a
``BulkWriteError`` (it retries such an upsert itself only when the filter names exactly the unique
index's fields, and the chunk filter also names the scope: ``write_ops_exec.cpp``,
``shouldRetryDuplicateKeyException``). ``RacingCollection`` reproduces that answer: another writer
inserts the raced chunks first, the rest of the bulk runs, and the bulk fails as the server's would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest
from pymongo import AsyncMongoClient, UpdateMany, UpdateOne
from pymongo.asynchronous.bulk import _AsyncBulk
from pymongo.errors import BulkWriteError

from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBConcurrencyError,
    MongoDBMappingError,
    MongoDBSerializationError,
    MongoDBTransientPersistenceError,
)
from agent_framework_mongodb.checkpoints.chunk_store import TOUCH_WINDOW
from agent_framework_mongodb.checkpoints.scope import CHUNK_KIND
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    WORKFLOW,
    ProxyCollection,
    advance_server_clock,
    make_checkpoint,
    make_storage,
    raw_checkpoints,
)


def _large(checkpoint_id: str, messages: int = 200) -> Any:
    return make_checkpoint(checkpoint_id, state={"history": [f"message {n} " * 8 for n in range(messages)]})


class RacingCollection(ProxyCollection):
    """Runs the next chunk bulk as if another writer inserted some of its new chunks first."""

    def __init__(self, inner: InMemoryCollection) -> None:
        super().__init__(inner)
        self.races = 0
        self.fail_with: dict[str, Any] | None = None
        self.requests: list[list[Any]] = []

    async def bulk_write(
        self, requests: Sequence[Any], *args: Any, ordered: bool = True, **kwargs: Any
    ) -> Any:
        self.requests.append(list(requests))
        if self.fail_with is not None:
            details, self.fail_with = self.fail_with, None
            raise BulkWriteError(details)
        if not self.races:
            return await super().bulk_write(requests, ordered=ordered)
        self.races -= 1
        upserts = [index for index, request in enumerate(requests) if request._upsert]
        raced = upserts[: max(1, len(upserts) // 2)]
        for index in raced:  # the other writer's inserts win
            request = requests[index]
            await self.inner.update_one(request._filter, request._doc, upsert=True)
        rest = [request for index, request in enumerate(requests) if index not in raced]
        result = await self.inner.bulk_write(rest, ordered=False) if rest else None
        errors = [{"index": index, "code": 11000, "errmsg": "E11000 duplicate key error"} for index in raced]
        raise BulkWriteError(
            {
                "writeErrors": errors,
                "writeConcernErrors": [],
                "nInserted": 0,
                "nUpserted": 0 if result is None else result.upserted_count,
                "nMatched": 0 if result is None else result.matched_count,
                "nModified": 0 if result is None else result.modified_count,
                "nRemoved": 0,
                "upserted": [],
            }
        )


async def test_a_save_that_loses_an_insert_race_on_new_chunks_succeeds(
    collection: InMemoryCollection,
) -> None:
    racing = RacingCollection(collection)
    storage = make_storage(racing)
    racing.races = 1
    saved = await storage.save(_large("cp-1"))
    assert saved == "cp-1"
    assert len(racing.requests) == 2, "the raced chunks are written again, in a second bulk"
    assert (await make_storage(collection).load("cp-1")).state == _large("cp-1").state
    # Every chunk is one document, and the next save touches them all (none is missing).
    chunks = await collection.find({"_kind": CHUNK_KIND}).to_list(None)
    assert len({bytes(chunk["_id"]) for chunk in chunks}) == len(chunks)
    await storage.save(_large("cp-2", messages=201))
    assert len(racing.requests) == 3


async def test_a_save_whose_chunks_keep_racing_gives_up_retryably(collection: InMemoryCollection) -> None:
    racing = RacingCollection(collection)
    storage = make_storage(racing)
    racing.races = 10
    with pytest.raises(MongoDBConcurrencyError) as raised:
        await storage.save(_large("cp-1"))
    assert raised.value.retryable
    assert await raw_checkpoints(collection) == []
    racing.races = 0
    assert await storage.save(_large("cp-1")) == "cp-1"


async def test_every_chunk_statement_is_single_document_so_the_bulk_is_retryable(
    collection: InMemoryCollection,
) -> None:
    racing = RacingCollection(collection)
    storage = make_storage(racing)
    await storage.save(_large("cp-1"))
    advance_server_clock(collection, TOUCH_WINDOW)  # the next window: remembered chunks are touched
    await storage.save(_large("cp-2", messages=230))
    assert len(racing.requests) >= 2
    touches = [request for requests in racing.requests[1:] for request in requests if not request._upsert]
    assert touches, "the second save touches the chunks it remembers"
    client: AsyncMongoClient[Any] = AsyncMongoClient("mongodb://localhost:1", connect=False)
    try:
        for requests in racing.requests:
            assert all(type(request) is UpdateOne for request in requests)
            # pymongo's own bulk decides retryability: a multi-document statement turns it off.
            bulk = _AsyncBulk(client["db"]["c"], ordered=False, bypass_document_validation=None, comment=None)
            for request in requests:
                request._add_to_bulk(bulk)
            assert bulk.is_retryable
        control = _AsyncBulk(client["db"]["c"], ordered=False, bypass_document_validation=None, comment=None)
        UpdateMany({"_id": {"$in": [1]}}, {"$set": {"x": 1}})._add_to_bulk(control)
        assert not control.is_retryable
    finally:
        await client.close()


def _write_error(code: int) -> dict[str, Any]:
    return {"writeErrors": [{"index": 0, "code": code, "errmsg": "server text"}]}


def _concern_error(code: int, *, also: int | None = None) -> dict[str, Any]:
    written = [] if also is None else [{"index": 0, "code": also, "errmsg": "server text"}]
    return {"writeErrors": written, "writeConcernErrors": [{"code": code, "errmsg": "server text"}]}


@pytest.mark.parametrize(
    ("details", "expected", "retryable"),
    [
        (_write_error(17420), MongoDBSerializationError, False),  # upsert too large
        (_write_error(17419), MongoDBSerializationError, False),  # update result too large
        (_write_error(10334), MongoDBSerializationError, False),  # BSONObjectTooLarge
        (_concern_error(189), MongoDBTransientPersistenceError, True),  # PrimarySteppedDown
        (_concern_error(11602), MongoDBTransientPersistenceError, True),  # InterruptedDueToReplStateChange
        (_concern_error(91, also=11000), MongoDBTransientPersistenceError, True),  # ShutdownInProgress
    ],
)
async def test_bulk_errors_are_categorised_by_the_codes_inside_them(
    details: dict[str, Any], expected: type[Exception], retryable: bool, collection: InMemoryCollection
) -> None:
    racing = RacingCollection(collection)
    storage = make_storage(racing)
    racing.fail_with = {"nMatched": 0, "nUpserted": 0, "writeConcernErrors": [], **details}
    with pytest.raises(expected) as raised:
        await storage.save(_large("cp-1"))
    assert type(raised.value) is expected
    assert raised.value.retryable is retryable  # type: ignore[attr-defined]
    assert await raw_checkpoints(collection) == []
    assert [c.checkpoint_id for c in await storage.list_checkpoints(workflow_name=WORKFLOW)] == []


# -- a load racing the removal of what it reads ------------------------------------------------------


class RemovingCollection(ProxyCollection):
    """Before the next chunk fetch, removes what ``remove`` names, as a prune, ``delete`` or the TTL
    monitor would between a load's two round trips."""

    def __init__(self, inner: InMemoryCollection) -> None:
        super().__init__(inner)
        self.remove: list[Mapping[str, Any]] = []

    def find(self, filter: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        if filter.get("_kind") == CHUNK_KIND and self.remove:
            doomed, self.remove = self.remove, []
            return _AfterRemoval(self.inner, doomed, super().find(filter, *args, **kwargs))
        return super().find(filter, *args, **kwargs)


class _AfterRemoval:
    def __init__(self, inner: InMemoryCollection, doomed: list[Mapping[str, Any]], cursor: Any) -> None:
        self._inner, self._doomed, self._cursor = inner, doomed, cursor

    async def to_list(self, length: int | None = None) -> list[dict[str, Any]]:
        for query in self._doomed:
            await self._inner.delete_many(query)
        result: list[dict[str, Any]] = await self._cursor.to_list(length)
        return result

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        for document in await self.to_list():
            yield document


async def _two_large_checkpoints(collection: InMemoryCollection) -> tuple[RemovingCollection, Any]:
    removing = RemovingCollection(collection)
    storage = make_storage(removing)
    await storage.save(_large("cp-1"))
    await storage.save(_large("cp-2", messages=3000))  # its own chunks beyond cp-1's
    return removing, storage


def _cp2_removed() -> list[Mapping[str, Any]]:
    return [{"checkpoint_id": "cp-2"}, {"_kind": CHUNK_KIND}]


async def test_a_load_whose_checkpoint_is_removed_meanwhile_is_not_found(
    collection: InMemoryCollection,
) -> None:
    removing, storage = await _two_large_checkpoints(collection)
    removing.remove = _cp2_removed()
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("cp-2")


async def test_get_latest_whose_latest_is_removed_meanwhile_reads_again(
    collection: InMemoryCollection,
) -> None:
    removing, storage = await _two_large_checkpoints(collection)
    removing.remove = [
        {"checkpoint_id": "cp-2"},
        {"_kind": CHUNK_KIND, "_id": {"$nin": await _chunks_of(collection, "cp-1")}},
    ]
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == "cp-1"


async def test_a_page_leaves_out_a_checkpoint_removed_while_it_was_read(
    collection: InMemoryCollection,
) -> None:
    removing, storage = await _two_large_checkpoints(collection)
    removing.remove = [
        {"checkpoint_id": "cp-2"},
        {"_kind": CHUNK_KIND, "_id": {"$nin": await _chunks_of(collection, "cp-1")}},
    ]
    page = await storage.list_checkpoint_page(workflow_name=WORKFLOW)
    assert [checkpoint.checkpoint_id for checkpoint in page.checkpoints] == ["cp-1"]


async def test_a_chunk_missing_under_a_stored_checkpoint_stays_corrupt(
    collection: InMemoryCollection,
) -> None:
    removing, storage = await _two_large_checkpoints(collection)
    removing.remove = [{"_kind": CHUNK_KIND}]  # the chunks go, the checkpoint stays
    with pytest.raises(MongoDBMappingError, match="missing") as raised:
        await storage.load("cp-2")
    assert type(raised.value) is MongoDBMappingError


async def _chunks_only_of(collection: InMemoryCollection, checkpoint_id: str) -> dict[str, Any]:
    """A filter of the chunks only ``checkpoint_id`` uses (the others stay)."""
    others = await _chunks_of(collection, "cp-1" if checkpoint_id == "cp-2" else "cp-2")
    return {"_kind": CHUNK_KIND, "_id": {"$nin": others}}


async def _chunks_of(collection: InMemoryCollection, checkpoint_id: str) -> list[bytes]:
    """Every chunk address a fresh load of ``checkpoint_id`` fetches."""
    proxy = ProxyCollection(collection)
    await make_storage(proxy).load(checkpoint_id)
    (fetch,) = [call for call in proxy.named("find") if call.args[0].get("_kind") == CHUNK_KIND]
    addresses: list[bytes] = fetch.args[0]["_id"]["$in"]
    return addresses


# -- every command within MongoDB's limits, whatever the run's size ----------------------------------


def _largest_list(value: Any) -> int:
    """The longest list anywhere in a command's filter or update."""
    if isinstance(value, Mapping):
        return max((_largest_list(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return max(len(value), *(_largest_list(item) for item in value))
    return 0


async def test_chunk_commands_are_batched_so_none_grows_with_the_run(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_framework_mongodb.checkpoints import chunk_store

    monkeypatch.setattr(chunk_store, "FETCH_ADDRESSES", 4)
    monkeypatch.setattr(chunk_store, "BULK_STATEMENTS", 5)
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy, keep_last=1)
    for index in range(3):  # the third save, past the grace, prunes and collects chunks
        if index == 2:
            advance_server_clock(collection, chunk_store.COLLECTION_GRACE + chunk_store.TOUCH_WINDOW)
        await storage.save(_large(f"cp-{index}", messages=1500 + 600 * index))
    bulks = [call.args[0] for call in proxy.named("bulk_write")]
    assert max(len(requests) for requests in bulks) <= 5
    assert len(bulks) > 3, "a save of many chunks is several bulks"
    fetches = [call for call in proxy.named("find") if call.args[0].get("_kind") == CHUNK_KIND]
    deletes = [call for call in proxy.named("delete_many") if call.args[0].get("_kind") == CHUNK_KIND]
    assert deletes, "the prune collected chunks"
    for call in [*fetches, *deletes]:
        assert _largest_list(call.args[0]) <= 4, call.args[0]
    assert not any("$nin" in str(call.args[0]) for call in deletes)
    reader = make_storage(proxy)
    proxy.reset()
    loaded = await reader.load("cp-2")
    assert loaded.state == _large("cp-2", messages=2700).state
    chunk_finds = [call for call in proxy.named("find") if call.args[0].get("_kind") == CHUNK_KIND]
    assert len(chunk_finds) > 1, "a load of many chunks fetches them in batches"
    assert all(_largest_list(call.args[0]) <= 4 for call in chunk_finds)
