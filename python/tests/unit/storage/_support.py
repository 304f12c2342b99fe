"""Helpers shared by the storage tests: builders and an instrumented collection proxy."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from agent_framework import Message, WorkflowCheckpoint
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.scope import RunScope
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryDatabase, InMemoryMongoClient

TENANT = "tenant-alpha"
WORKFLOW = "approval-flow"
SESSION = "session-001"
APPLICATION = "app-main"

CHECKPOINT_KIND = "workflow_checkpoint"
COUNTER_KIND = "workflow_checkpoint_counter"
SCOPE_FIELDS = ("scope_discriminator", "tenant_id", "application_id", "workflow_name", "session_id")
FIXED_TIMESTAMP = "2025-01-02T03:04:05.678000+00:00"
INDEX_NAMES = (
    "checkpoint_scope_identity",
    "checkpoint_scope_sequence",
    "checkpoint_scope_lineage",
    "checkpoint_expiration",
    "checkpoint_counter_expiration",
    "checkpoint_run_activity",
    "checkpoint_chunk_scope",
    "checkpoint_chunk_expiration",
)


def make_options(**overrides: Any) -> MongoDBCheckpointStorageOptions:
    fields: dict[str, Any] = {
        "tenant_id": TENANT,
        "workflow_name": WORKFLOW,
        "session_id": SESSION,
        "application_id": APPLICATION,
    }
    fields.update(overrides)
    return MongoDBCheckpointStorageOptions(**fields)


def make_storage(collection: Any, **overrides: Any) -> MongoDBCheckpointStorage:
    return MongoDBCheckpointStorage(collection, options=make_options(**overrides))


def engine_client(collection: Any) -> InMemoryMongoClient:
    """The engine client behind a collection or a proxy of one."""
    inner = getattr(collection, "inner", collection)
    client: InMemoryMongoClient = inner.database.client
    return client


def advance_server_clock(collection: Any, delta: timedelta) -> None:
    """Move the engine's server clock (``$$NOW``) forward by ``delta`` from where it is."""
    client = engine_client(collection)
    offset = client.server_now() - datetime.now(timezone.utc).replace(tzinfo=None) + delta
    client.clock = lambda: datetime.now(timezone.utc) + offset


def pin_server_clock(collection: Any, moment: datetime) -> None:
    """Set the engine's server clock (``$$NOW``) to ``moment``, running on from there."""
    client = engine_client(collection)
    offset = moment - datetime.now(timezone.utc)
    client.clock = lambda: datetime.now(timezone.utc) + offset


def end_counter_grace(collection: Any) -> None:
    """Let the server's time pass every new counter's re-check grace (ADR 0006)."""
    advance_server_clock(collection, make_options().counter_recheck_grace + timedelta(seconds=1))


def scope_of(storage: MongoDBCheckpointStorage) -> RunScope:
    return RunScope.from_options(storage.options)


def make_checkpoint(
    checkpoint_id: str | None = None,
    *,
    workflow_name: str = WORKFLOW,
    previous: str | None = None,
    state: dict[str, Any] | None = None,
    timestamp: str | None = None,
) -> WorkflowCheckpoint:
    """A checkpoint of the bound workflow; equal arguments give checkpoints of equal content."""
    return WorkflowCheckpoint(
        workflow_name=workflow_name,
        graph_signature_hash="graph-hash-1",
        checkpoint_id=checkpoint_id if checkpoint_id is not None else f"cp-{uuid.uuid4()}",
        previous_checkpoint_id=previous,
        state=state if state is not None else {"step": 1, "note": "hello"},
        messages={"executor-a": []},
        timestamp=timestamp if timestamp is not None else FIXED_TIMESTAMP,
    )


def message_state() -> dict[str, Any]:
    return {
        "greeting": Message(role="user", contents=["hi"]),
        "reply": Message(role="assistant", contents=["hello there"]),
        "numbers": [1, 2, 3],
        "nested": {"flag": True, "ratio": 0.5, "none": None},
    }


async def save_chain(storage: MongoDBCheckpointStorage, count: int, prefix: str = "cp") -> list[str]:
    """Save ``count`` checkpoints sequentially, each the parent of the next; return their ids."""
    ids: list[str] = []
    previous: str | None = None
    for index in range(count):
        checkpoint = make_checkpoint(f"{prefix}-{index:03d}", previous=previous, state={"i": index})
        ids.append(await storage.save(checkpoint))
        previous = checkpoint.checkpoint_id
    return ids


async def raw_checkpoints(collection: InMemoryCollection, **match: Any) -> list[dict[str, Any]]:
    cursor = collection.find({"_kind": CHECKPOINT_KIND, **match}, sort=[("sequence", 1)])
    return await cursor.to_list(None)


async def raw_all(collection: InMemoryCollection) -> list[dict[str, Any]]:
    return await collection.find({}).to_list(None)


async def raw_counter(collection: InMemoryCollection, scope: RunScope) -> dict[str, Any] | None:
    return await collection.find_one({"_id": scope.counter_document_id})


_Result = TypeVar("_Result")

INSERT = "insert_checkpoint"
"""The proxy's name for a save's insert (see ``ProxyCollection``)."""


@dataclasses.dataclass
class Call:
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class ProxyCursor:
    """Wraps an engine cursor; each fetch counts as one round trip."""

    def __init__(self, owner: ProxyCollection, inner: Any) -> None:
        self._owner = owner
        self._inner = inner
        self._fetched = False

    async def _fetch_once(self) -> None:
        if not self._fetched:
            self._fetched = True
            self._owner.begin_wave_of("find_fetch")
            await self._owner.before("find_fetch")

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[dict[str, Any]]:
        await self._fetch_once()
        async for document in self._inner:
            yield document

    async def to_list(self, length: int | None = None) -> list[dict[str, Any]]:
        await self._fetch_once()
        result: list[dict[str, Any]] = await self._inner.to_list(length)
        return result


class ProxyCollection:
    """Forwards every collection method the storage uses, recording and counting round trips.

    ``block(name)`` makes the next call of ``name`` wait on an event after announcing itself on
    ``entered[name]``, so a test can cancel a task parked inside that call; ``fail(name, error)``
    makes it raise ``error`` before reaching the engine. A save's insert is a
    ``find_one_and_update`` like its counter allocation; the proxy names it ``insert_checkpoint``
    (the upsert that only sets fields on insert) so tests can tell the two apart.
    """

    def __init__(self, inner: InMemoryCollection) -> None:
        self.inner = inner
        self.calls: list[Call] = []
        self.round_trips = 0
        self.trip_names: list[str] = []
        self.waves: list[list[str]] = []
        self._in_flight = 0
        self._gates: dict[str, asyncio.Event] = {}
        self._failures: dict[str, BaseException] = {}
        self.entered: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []
        """Requests that a cancellation reached inside the driver (none may: deadlines.py)."""
        self.ended: list[str] = []
        """Requests that ended, however (answered, failed, or cancelled)."""

    def block(self, name: str) -> asyncio.Event:
        gate = asyncio.Event()
        self._gates[name] = gate
        self.entered[name] = asyncio.Event()
        return gate

    def fail(self, name: str, error: BaseException) -> None:
        self._failures[name] = error

    def reset(self) -> None:
        self.calls.clear()
        self.round_trips = 0
        self.trip_names.clear()
        self.waves.clear()

    def named(self, name: str) -> list[Call]:
        return [call for call in self.calls if call.name == name]

    async def before(self, name: str) -> None:
        self.round_trips += 1
        self.trip_names.append(name)
        gate = self._gates.pop(name, None)
        if gate is not None:
            self.entered[name].set()
            await gate.wait()
        failure = self._failures.pop(name, None)
        if failure is not None:
            raise failure

    def begin_wave_of(self, name: str) -> None:
        """A request is sent: a wave begins when nothing else is in flight."""
        if self._in_flight == 0:
            self.waves.append([])
        self.waves[-1].append(name)

    async def _send(self, name: str, call: Callable[[], Awaitable[_Result]]) -> _Result:
        """One request: counted, gated and failed by ``before``, and in flight until it returns,
        so requests a save sends together share a wave."""
        self.begin_wave_of(name)
        self._in_flight += 1
        try:
            # A request takes the network at least one turn of the loop, as a real one does, so
            # requests sent together are in flight together even where the engine answers (or
            # the proxy fails it) at once.
            await asyncio.sleep(0)
            await self.before(name)
            return await call()
        except asyncio.CancelledError:
            self.cancelled.append(name)
            raise
        finally:
            self._in_flight -= 1
            self.ended.append(name)

    def _record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls.append(Call(name, args, dict(kwargs)))

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def database(self) -> InMemoryDatabase:
        return self.inner.database

    @property
    def write_concern(self) -> WriteConcern:
        return self.inner.write_concern

    def with_options(self, **options: Any) -> ProxyCollection:
        """The storage binds its collection once; the proxy keeps wrapping the derived one."""
        self.inner = self.inner.with_options(**options)
        return self

    async def find_one(self, filter: Any | None = None, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        self._record("find_one", (filter, *args), kwargs)
        return await self._send("find_one", lambda: self.inner.find_one(filter, *args, **kwargs))

    def find(self, *args: Any, **kwargs: Any) -> ProxyCursor:
        self._record("find", args, kwargs)
        return ProxyCursor(self, self.inner.find(*args, **kwargs))

    async def aggregate(self, pipeline: Sequence[Mapping[str, Any]], *args: Any, **kwargs: Any) -> Any:
        self._record("aggregate", (pipeline, *args), kwargs)
        return await self._send("aggregate", lambda: self.inner.aggregate(pipeline, *args, **kwargs))

    async def insert_one(self, document: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("insert_one", (document, *args), kwargs)
        return await self._send("insert_one", lambda: self.inner.insert_one(document, *args, **kwargs))

    async def find_one_and_update(
        self,
        filter: Mapping[str, Any],
        update: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *args: Any,
        **kwargs: Any,
    ) -> dict[str, Any] | None:
        name = INSERT if isinstance(update, Mapping) and "$setOnInsert" in update else "find_one_and_update"
        self._record(name, (filter, update, *args), kwargs)
        return await self._send(name, lambda: self.inner.find_one_and_update(filter, update, *args, **kwargs))

    async def bulk_write(self, requests: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        self._record("bulk_write", (requests, *args), kwargs)
        return await self._send("bulk_write", lambda: self.inner.bulk_write(requests, *args, **kwargs))

    async def delete_one(self, filter: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        self._record("delete_one", (filter, *args), kwargs)
        return await self._send("delete_one", lambda: self.inner.delete_one(filter, *args, **kwargs))

    async def delete_many(self, filter: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        self._record("delete_many", (filter, *args), kwargs)
        return await self._send("delete_many", lambda: self.inner.delete_many(filter, *args, **kwargs))

    async def create_indexes(self, indexes: Sequence[Any], *args: Any, **kwargs: Any) -> list[str]:
        self._record("create_indexes", (indexes, *args), kwargs)
        return await self._send("create_indexes", lambda: self.inner.create_indexes(indexes, *args, **kwargs))

    async def list_indexes(self, *args: Any, **kwargs: Any) -> Any:
        self._record("list_indexes", args, kwargs)
        return await self._send("list_indexes", lambda: self.inner.list_indexes(*args, **kwargs))


def projection_of(call: Call) -> Mapping[str, Any] | None:
    """The projection a find/find_one call passed, positionally or by keyword."""
    if "projection" in call.kwargs:
        projection: Mapping[str, Any] | None = call.kwargs["projection"]
        return projection
    if len(call.args) >= 2:
        positional: Mapping[str, Any] | None = call.args[1]
        return positional
    return None


def excludes_field(projection: Mapping[str, Any] | None, field: str) -> bool:
    """Whether a MongoDB projection leaves ``field`` out of returned documents."""
    if projection is None:
        return False
    values = {key: value for key, value in projection.items() if key != "_id"}
    inclusive = any(bool(value) for value in values.values())
    if inclusive:
        return not bool(projection.get(field, 0))
    return field in projection and not bool(projection[field])


def comparable(value: Any) -> Any:
    """A structure equal for equal checkpoints: objects without ``__eq__`` (such as ``Message``)
    are replaced by their type name and ``to_dict()``, recursively."""
    if isinstance(value, dict):
        return {key: comparable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(comparable(item) for item in value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return (type(value).__qualname__, comparable(to_dict()))
    return value


def checkpoint_dict(checkpoint: WorkflowCheckpoint) -> Any:
    return comparable(checkpoint.to_dict())
