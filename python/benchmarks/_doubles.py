"""Collection doubles for the storage benchmark: an instant collection and a round-trip counter.

``InstantCollection`` answers the storage's queries at once, so timing a storage over it measures
the storage's client-side cost: validation, codec, envelope, cursor paging, BSON. It models the
split between client and server the way pymongo draws it:

* client-side, and so inside a timed call: ``bson.encode`` of every request (filter, update,
  inserted document), as pymongo encodes commands before sending them, and ``bson.decode`` of every
  returned document, as pymongo decodes replies;
* server-side, and so outside a timed call: decoding an inserted document and encoding the
  projected reply for each projection the storage uses. ``settle()`` does that work; the benchmark
  calls it between timed calls (reads settle lazily if it was not called).

Each request yields to the event loop once (``asyncio.sleep(0)``), as awaiting a real reply does.
It interprets only the query shapes ``agent_framework_mongodb.checkpoints.queries`` builds:
filters by ``_kind`` and scope with optional ``_id`` equality or ``sequence`` ``$gt``, sorts by
``sequence``, the counter's ``$set`` pipeline (``$add`` of ``$max`` and an increment), the
checkpoint insert (an upsert with ``$setOnInsert`` that returns the stored identity), and a
chunked checkpoint's chunk writes (one ``bulk_write`` of upserts and a touch) and reads (a ``find``
by ``_id`` ``$in``), keeping each chunk's encoded reply server-side as it does a checkpoint's. Its counters
are always checked and never in a re-check grace, and return the allocation's time by the system clock, as a
server's ``$$NOW``: it measures the steady state. It is not a
database; the in-process engine is the faithful double.

``CountingCollection`` wraps any collection (the in-process engine in the benchmark) and counts
round trips: each awaited collection call, and each batch fetch of a cursor.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import datetime
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import bson
from pymongo.results import BulkWriteResult, DeleteResult
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb.checkpoints.documents import ENVELOPE_PROJECTION
from agent_framework_mongodb.checkpoints.queries import (
    ID_PROJECTION,
    IDEMPOTENCY_PROJECTION,
    PAYLOAD_PROJECTION,
    SEQUENCE_PROJECTION,
    UNEXPIRED,
)
from agent_framework_mongodb.checkpoints.scope import CHECKPOINT_KIND, CHUNK_KIND, COUNTER_KIND

__all__ = ["CountingCollection", "InstantCollection", "waves_text"]

_KNOWN_PROJECTIONS: tuple[Mapping[str, int], ...] = (
    PAYLOAD_PROJECTION,
    ENVELOPE_PROJECTION,
    ID_PROJECTION,
    IDEMPOTENCY_PROJECTION,
    SEQUENCE_PROJECTION,
)


def _projection_key(projection: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return () if projection is None else tuple(sorted(projection.items()))


def _project(document: Mapping[str, Any], projection: Mapping[str, Any] | None) -> dict[str, Any]:
    """Top-level inclusion or exclusion projection, as the server applies it."""
    if not projection:
        return dict(document)
    include_id = bool(projection.get("_id", 1))
    chosen = {key: value for key, value in projection.items() if key != "_id"}
    if any(chosen.values()):
        projected = {key: document[key] for key in chosen if key in document}
    else:
        projected = {key: value for key, value in document.items() if key not in chosen}
        projected.pop("_id", None)
    if include_id and "_id" in document:
        projected = {"_id": document["_id"], **projected}
    return projected


def _unexpired(document: Mapping[str, Any], expression: Any) -> bool:
    """The one ``$expr`` the storage sends: a signed read's "not expired by the server's clock"."""
    if expression != UNEXPIRED["$expr"]:
        raise NotImplementedError(f"InstantCollection does not interpret {expression!r}")
    expiry = document.get("expires_at")
    return expiry is None or expiry.replace(tzinfo=datetime.timezone.utc) > datetime.datetime.now(
        datetime.timezone.utc
    )


def _matches(document: Mapping[str, Any], query: Mapping[str, Any]) -> bool:
    for field, condition in query.items():
        if field == "$expr":
            if not _unexpired(document, condition):
                return False
        elif isinstance(condition, Mapping):
            if not _satisfies(document.get(field), condition):
                return False
        elif document.get(field) != condition:
            return False
    return True


def _satisfies(value: Any, condition: Mapping[str, Any]) -> bool:
    if not set(condition) <= {"$gt", "$gte", "$nin"}:
        raise NotImplementedError(f"InstantCollection does not interpret {condition!r}")
    if value is None:
        return False
    if "$gt" in condition and not value > condition["$gt"]:
        return False
    if "$gte" in condition and not value >= condition["$gte"]:
        return False
    return value not in condition.get("$nin", ())


@dataclasses.dataclass
class _Stored:
    """A stored checkpoint as the server keeps it, with its encoded reply per projection."""

    document: dict[str, Any]
    replies: dict[tuple[tuple[str, Any], ...], bytes] = dataclasses.field(default_factory=dict)

    def reply(self, projection: Mapping[str, Any] | None) -> bytes:
        key = _projection_key(projection)
        encoded = self.replies.get(key)
        if encoded is None:
            encoded = self.replies[key] = bson.encode(_project(self.document, projection))
        return encoded


class _InstantDatabase:
    async def command(self, command: Any, *_args: Any, **_kwargs: Any) -> Mapping[str, Any]:
        await asyncio.sleep(0)
        return {"ok": 1.0}


class _InstantCursor:
    def __init__(
        self, owner: InstantCollection, query: Mapping[str, Any], projection: Any, limit: int
    ) -> None:
        self._owner = owner
        self._query = query
        self._projection = projection
        self._limit = limit

    async def to_list(self, length: int | None = None) -> list[dict[str, Any]]:
        limit = self._limit if length is None else min(self._limit or length, length)
        return await self._owner.fetch(self._query, self._projection, limit)

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[dict[str, Any]]:
        for document in await self.to_list(None):
            yield document


class _NoIndexes:
    """The (empty) index listing of the instant double: it answers, it does not index."""

    async def to_list(self, length: int | None = None) -> list[dict[str, Any]]:
        return []


def _upserted_data(update: Any) -> bytes:
    """The chunk bytes of an upsert: a one-stage pipeline keeping stored data (``$ifNull``)."""
    stage = update[0] if isinstance(update, list) else update
    if "$setOnInsert" in stage:
        return bytes(stage["$setOnInsert"]["data"])
    kept = stage["$set"]["data"]["$ifNull"]
    return bytes(kept[1]["$literal"])


class InstantCollection:
    """A duck-typed async collection that answers the storage's queries instantly (see module)."""

    def __init__(self) -> None:
        self.database = _InstantDatabase()
        self._documents: dict[str, _Stored] = {}
        self._runs: dict[str, list[tuple[int, _Stored]]] = {}
        self._counters: dict[str, dict[str, Any]] = {}
        self._ids: set[Any] = set()
        self._pending: list[dict[str, Any]] = []
        self._chunks: dict[bytes, bytes] = {}  # address -> the encoded reply {_id, data}

    # -- the server's side, kept out of timed calls ----------------------------------------------
    def settle(self) -> None:
        """Store upserted documents as the server would (the filter's equalities, then
        ``$setOnInsert``), and encode their replies."""
        pending, self._pending = self._pending, []
        for seed in pending:
            stored = _Stored(bson.decode(bson.encode(seed)))
            for projection in _KNOWN_PROJECTIONS:
                stored.reply(projection)
            document = stored.document
            self._documents[document["_id"]] = stored
            run = self._runs.setdefault(document["scope_discriminator"], [])
            bisect.insort(run, (document["sequence"], stored), key=lambda item: item[0])

    @property
    def document_count(self) -> int:
        return len(self._ids)

    @property
    def name(self) -> str:
        return "workflow_checkpoints"

    @property
    def write_concern(self) -> WriteConcern:
        # Stated majority, as docs/deployment.md asks: the write concern under which a chunked save
        # leaves out the touches of chunks it already wrote in the window (ADR 0031).
        return WriteConcern(w="majority")

    def with_options(self, **_options: Any) -> InstantCollection:
        return self

    async def aggregate(self, pipeline: Any, **_options: Any) -> Any:
        """Run pages (``list_runs``) are not part of the benchmark's workload."""
        raise NotImplementedError("InstantCollection answers the benchmark's operations only")

    # -- the client's side: what the storage calls -------------------------------------------------
    async def _request(self, *parts: Any) -> None:
        bson.encode({"request": list(parts)})  # the command pymongo would encode and send
        await asyncio.sleep(0)  # awaiting the reply

    async def find_one_and_update(
        self,
        filter: Mapping[str, Any],
        update: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        projection: Any = None,
        *,
        upsert: bool = False,
        **_options: Any,
    ) -> dict[str, Any] | None:
        if isinstance(update, Mapping) and "$setOnInsert" in update:
            return await self._insert_if_absent(filter, update["$setOnInsert"], projection)
        await self._request(filter, update if isinstance(update, Mapping) else list(update), projection)
        if filter.get("_kind") != COUNTER_KIND:
            raise NotImplementedError("InstantCollection updates only sequence counters")
        key = filter["_id"]
        if key not in self._counters and not upsert:
            return None
        counter = self._counters.setdefault(key, {"sequence": 0})
        if isinstance(update, Mapping):  # a signed storage's ledger records (ledger.py)
            self._ledger_update(counter, update)
            return {"_id": key}
        stage = update[0]["$set"]
        addition = stage["sequence"]["$add"]
        floor = addition[0]["$max"][1]
        counter["sequence"] = max(counter["sequence"], floor) + addition[1]
        counter.setdefault("run_epoch", stage["run_epoch"]["$ifNull"][1]["$literal"])
        # Checked: a counter this double keeps never restarts below a retained sequence. A server
        # returns the allocation's $$NOW too, which decides which chunk touches a save leaves out.
        reply = {
            "sequence": counter["sequence"],
            "sequence_checked": True,
            "run_epoch": counter["run_epoch"],
            "allocated_at": datetime.datetime.now(datetime.timezone.utc),
        }
        return bson.decode(bson.encode(reply))

    @staticmethod
    def _ledger_update(counter: dict[str, Any], update: Mapping[str, Any]) -> None:
        for field, value in update.get("$max", {}).items():
            counter[field] = max(counter.get(field, value), value)
        for field, value in update.get("$push", {}).items():
            counter[field] = [*counter.get(field, []), *value["$each"]][value["$slice"] :]

    async def _insert_if_absent(
        self, filter: Mapping[str, Any], fields: Mapping[str, Any], projection: Any
    ) -> dict[str, Any] | None:
        # pymongo's client-side encoding of the findAndModify command, the document inside it.
        bson.encode({"query": filter, "update": {"$setOnInsert": fields}, "fields": projection})
        await asyncio.sleep(0)
        if filter["_id"] in self._ids:
            if self._pending:
                self.settle()
            return bson.decode(self._documents[filter["_id"]].reply(projection))
        self._ids.add(filter["_id"])
        self._pending.append({**filter, **fields})  # built into a document by settle(), server-side
        return None

    def _run_of(self, query: Mapping[str, Any]) -> list[tuple[int, _Stored]]:
        if self._pending:
            self.settle()
        if query.get("_kind") != CHECKPOINT_KIND:
            raise NotImplementedError("InstantCollection reads only checkpoints")
        return self._runs.get(query["scope_discriminator"], [])

    async def find_one(
        self,
        filter: Mapping[str, Any],
        projection: Any = None,
        *,
        sort: Sequence[tuple[str, int]] | None = None,
        **_options: Any,
    ) -> dict[str, Any] | None:
        await self._request(filter, projection, sort)
        if filter.get("_kind") == COUNTER_KIND:  # a signed storage reads the run's ledger
            counter = self._counters.get(filter["_id"])
            return None if counter is None else bson.decode(bson.encode(_project(counter, projection)))
        run = self._run_of(filter)
        if "_id" in filter:
            found = self._documents.get(filter["_id"])
            candidates = [] if found is None else [found]
        else:
            descending = bool(sort) and sort[0] == ("sequence", -1)  # type: ignore[index]
            candidates = [stored for _, stored in (reversed(run) if descending else run)]
        for stored in candidates:
            if _matches(stored.document, filter):
                return bson.decode(stored.reply(projection))
        return None

    def find(
        self, filter: Mapping[str, Any], projection: Any = None, *, limit: int = 0, **_options: Any
    ) -> _InstantCursor:
        return _InstantCursor(self, filter, projection, limit)

    async def bulk_write(self, requests: Sequence[Any], *, ordered: bool = True) -> BulkWriteResult:
        """A chunked save's chunk writes: upserts of new chunks and touches of known ones."""
        await self._request([[request._filter, request._doc] for request in requests])
        matched = upserted = 0
        for request in requests:
            if request._filter.get("_kind") != CHUNK_KIND:
                raise NotImplementedError("InstantCollection bulk-writes only chunks")
            address = request._filter["_id"]
            if isinstance(address, Mapping):
                matched += sum(1 for item in address["$in"] if item in self._chunks)
                continue
            if address in self._chunks:
                matched += 1
            elif request._upsert:
                upserted += 1
                data = _upserted_data(request._doc)
                self._chunks[address] = bson.encode({"_id": address, "data": data})
        raw = {"nMatched": matched, "nModified": 0, "nUpserted": upserted, "upserted": [], "nInserted": 0}
        return BulkWriteResult(raw, acknowledged=True)

    async def fetch(self, query: Mapping[str, Any], projection: Any, limit: int) -> list[dict[str, Any]]:
        """One batch of a ``find`` in ascending sequence order (the storage's only find sort)."""
        if "$or" in query:  # a signed load: the checkpoint and the run's counter
            await self._request(query, projection)
            found = [await self._point(branch, projection) for branch in query["$or"]]
            return [document for document in found if document is not None]
        if query.get("_kind") == CHUNK_KIND:
            await self._request(query, projection)
            return [bson.decode(self._chunks[item]) for item in query["_id"]["$in"] if item in self._chunks]
        await self._request(query, projection, limit)
        run = self._run_of(query)
        after = query.get("sequence", {}).get("$gt")
        start = 0 if after is None else bisect.bisect_right(run, after, key=lambda item: item[0])
        replies: list[dict[str, Any]] = []
        for _, stored in run[start:]:
            if limit and len(replies) >= limit:
                break
            if _matches(stored.document, query):
                replies.append(bson.decode(stored.reply(projection)))
        return replies

    async def _point(self, branch: Mapping[str, Any], projection: Any) -> dict[str, Any] | None:
        """One ``_id`` branch of an ``$or``, as the server's reply encodes it."""
        if branch.get("_kind") == COUNTER_KIND:
            counter = self._counters.get(branch["_id"])
            if counter is None:
                return None
            return bson.decode(bson.encode(_project({**counter, "_kind": COUNTER_KIND}, projection)))
        self._run_of(branch)
        stored = self._documents.get(branch["_id"])
        if stored is None or not _matches(stored.document, branch):
            return None
        return bson.decode(stored.reply(projection))

    async def delete_one(self, filter: Mapping[str, Any], *_args: Any, **_kwargs: Any) -> DeleteResult:
        await self._request(filter)
        if filter.get("_kind") == COUNTER_KIND:
            deleted = int(self._counters.pop(filter["_id"], None) is not None)
            return DeleteResult({"n": deleted}, acknowledged=True)
        found = await self.find_one(filter, {"_id": 1})
        if found is None:
            return DeleteResult({"n": 0}, acknowledged=True)
        stored = self._documents.pop(found["_id"])
        self._ids.discard(found["_id"])
        run = self._runs[stored.document["scope_discriminator"]]
        run[:] = [item for item in run if item[1] is not stored]
        return DeleteResult({"n": 1}, acknowledged=True)

    async def delete_many(self, filter: Mapping[str, Any], *_args: Any, **_kwargs: Any) -> DeleteResult:
        await self._request(filter)
        run = self._run_of(filter)
        doomed = [stored for _, stored in run if _matches(stored.document, filter)]
        for stored in doomed:
            self._documents.pop(stored.document["_id"], None)
            self._ids.discard(stored.document["_id"])
        run[:] = [item for item in run if item[1] not in doomed]
        return DeleteResult({"n": len(doomed)}, acknowledged=True)

    async def list_indexes(self) -> _NoIndexes:
        return _NoIndexes()

    async def create_indexes(self, indexes: Sequence[Any], *_args: Any, **_kwargs: Any) -> list[str]:
        await asyncio.sleep(0)
        return [index.document["name"] for index in indexes]


class _CountingCursor:
    def __init__(self, owner: CountingCollection, inner: Any) -> None:
        self._owner = owner
        self._inner = inner

    async def to_list(self, length: int | None = None) -> list[dict[str, Any]]:
        self._owner.begin("find")
        try:
            result: list[dict[str, Any]] = await self._inner.to_list(length)
        finally:
            self._owner.end()
        return result

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[dict[str, Any]]:
        iterator = self._inner.__aiter__()
        self._owner.begin("find")
        while True:
            try:
                document = await iterator.__anext__()
            except StopAsyncIteration:
                return
            finally:
                self._owner.end()
            yield document
            self._owner.resume()


def waves_text(waves: Sequence[Sequence[str]]) -> str:
    """``2 (bulk_write + find_one_and_update, find_one_and_update)``: the round trips a caller
    waited for, each with the requests sent together in it."""
    return f"{len(waves)} ({', '.join(' + '.join(wave) for wave in waves)})"


class CountingCollection:
    """Forwards to ``inner`` and records every round trip: its name, in order, and its *wave*.

    A wave is the requests in flight together: one begins when a request is sent while none is in
    flight. A save that sends two requests at once waits for one wave, not two. ``busy_seconds``
    is the time at least one request was in flight (overlapping requests counted once).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.trips: list[str] = []
        self.waves: list[list[str]] = []
        self.busy_seconds = 0.0
        self._in_flight = 0
        self._busy_since = 0.0

    def begin(self, name: str) -> None:
        """A request is sent."""
        self.trips.append(name)
        if self._in_flight == 0:
            self.waves.append([])
        self.waves[-1].append(name)
        self.resume()

    def resume(self) -> None:
        """A request (or a cursor's next batch) is in flight, without counting a new round trip."""
        if self._in_flight == 0:
            self._busy_since = time.perf_counter()
        self._in_flight += 1

    def end(self) -> None:
        """A request's reply arrived."""
        self._in_flight -= 1
        if self._in_flight == 0:
            self.busy_seconds += time.perf_counter() - self._busy_since

    def take(self) -> list[str]:
        """The round trips since the last call, and start counting afresh."""
        trips, self.trips = self.trips, []
        self.waves = []
        return trips

    def take_waves(self) -> list[list[str]]:
        """The waves since the last call (see the class), and start counting afresh."""
        waves = self.waves
        self.take()
        return waves

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def database(self) -> Any:
        return self.inner.database

    @property
    def write_concern(self) -> Any:
        return self.inner.write_concern

    def with_options(self, **options: Any) -> CountingCollection:
        self.inner = self.inner.with_options(**options)
        return self

    def find(self, *args: Any, **kwargs: Any) -> _CountingCursor:
        return _CountingCursor(self, self.inner.find(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.begin(name)
            try:
                # A request takes the network at least one turn of the loop, so requests sent
                # together are in flight together even where the engine answers at once.
                await asyncio.sleep(0)
                return await method(*args, **kwargs)
            finally:
                self.end()

        return counted
