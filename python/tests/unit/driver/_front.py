"""Helpers of the racing-writer and unreachable-server tests that run through a real ``AsyncMongoClient``.

- :class:`Drivers` makes clients of a wire front (each closed at the end, with a bound) and storages
  on them: a storage on a client of its own is what a separate worker process has.
- :class:`Trace` is pymongo's command monitoring shared by several clients, each under a tag: the
  order in which the writers' commands really went out and came back over the wire, so a test can
  show that its writers were in flight together (and fail if they were not).
- :func:`engine_collection` reads the engine behind a front directly, as the storage tests read
  theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import pymongo
from agent_framework import WorkflowCheckpoint
from pymongo import AsyncMongoClient, monitoring

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.checkpoints.codec import canonical_hash
from agent_framework_mongodb.checkpoints.deadlines import requests_left_running
from agent_framework_mongodb.testing import InMemoryCollection, WireProtocolServer

from ..storage._support import CHECKPOINT_KIND, COUNTER_KIND, make_checkpoint, make_options, make_storage

DATABASE, COLLECTION = "checkpoint_db", "checkpoint_coll"
Driver = AsyncMongoClient[dict[str, Any]]

SERVER_SELECTION_MS = 5_000
"""Far below pymongo's 30 s default: a client that cannot reach its front fails its test quickly."""
CLOSE_WATCHDOG = 15.0
"""Seconds a client's close may take at teardown before the test fails instead of hanging."""


def engine_collection(front: WireProtocolServer) -> InMemoryCollection:
    """The checkpoint collection in the engine behind ``front``, read directly (no wire, no driver)."""
    return front.engine[DATABASE][COLLECTION]


def identity(checkpoint: WorkflowCheckpoint) -> str:
    """Equal for checkpoints of equal content (Agent Framework's ``Message`` has no ``__eq__``)."""
    return canonical_hash(checkpoint.to_dict())


def history(count: int, *, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    return [{"text": " ".join(rng.choices(words, k=40)), "n": index} for index in range(count)]


def large(checkpoint_id: str, *, messages: int = 150, seed: int = 1) -> WorkflowCheckpoint:
    """A checkpoint well above the 16 KiB chunking threshold; histories of one seed are prefixes of
    each other, so checkpoints with more messages share the chunks of those with fewer."""
    return make_checkpoint(checkpoint_id, state={"history": history(messages, seed=seed), "size": messages})


# -- command monitoring shared by several clients -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Event:
    tag: str
    phase: str
    """``started``, ``succeeded`` or ``failed``."""
    command: str
    kind: str
    """What the command does for the storage (:func:`_kind_of`); ``other`` for the rest."""
    request_id: int


def _kind_of(name: str, command: Mapping[str, Any]) -> str:
    """``allocate`` (a findAndModify of the run's counter: a save's sequence, or clear_run's mark),
    ``insert`` (a findAndModify of a checkpoint: a save's upsert), ``chunks`` (a chunk write),
    ``delete``, ``find``, or ``other``."""
    if name == "findAndModify":
        query: object = command.get("query")
        kind = cast("Mapping[str, Any]", query).get("_kind") if isinstance(query, Mapping) else None
        return {COUNTER_KIND: "allocate", CHECKPOINT_KIND: "insert"}.get(str(kind), "other")
    return {"update": "chunks", "delete": "delete", "find": "find"}.get(name, "other")


class _Listener(monitoring.CommandListener):
    def __init__(self, trace: Trace, tag: str) -> None:
        self._trace = trace
        self._tag = tag
        self._kinds: dict[int, tuple[str, str]] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        kind = _kind_of(event.command_name, event.command)
        self._kinds[event.request_id] = (event.command_name, kind)
        self._trace.events.append(Event(self._tag, "started", event.command_name, kind, event.request_id))

    def _ended(self, phase: str, request_id: int) -> None:
        name, kind = self._kinds.pop(request_id, ("?", "other"))
        self._trace.events.append(Event(self._tag, phase, name, kind, request_id))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._ended("succeeded", event.request_id)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._ended("failed", event.request_id)


class Trace:
    """The commands several clients sent and saw answered, in the order it happened."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def listener(self, tag: str) -> monitoring.CommandListener:
        return _Listener(self, tag)

    def kinds(self, tag: str, phase: str = "started") -> list[str]:
        return [event.kind for event in self.events if event.tag == tag and event.phase == phase]

    def spans(self, tag: str, first: str, last: str) -> list[tuple[int, int]]:
        """Each span from a ``first``-kind command of ``tag`` starting to its next ``last``-kind
        command succeeding, as positions in the trace (a save: ``allocate`` to ``insert``)."""
        found: list[tuple[int, int]] = []
        opened: int | None = None
        for position, event in enumerate(self.events):
            if event.tag != tag:
                continue
            if opened is None and event.phase == "started" and event.kind == first:
                opened = position
            elif opened is not None and event.phase == "succeeded" and event.kind == last:
                found.append((opened, position))
                opened = None
        return found

    def overlapping_tags(self, spans: Mapping[str, list[tuple[int, int]]]) -> set[frozenset[str]]:
        """The pairs of tags with spans in flight at the same time."""
        pairs: set[frozenset[str]] = set()
        for (one, theirs), (other, others) in itertools.combinations(spans.items(), 2):
            for start, end in theirs:
                if any(start < other_end and other_start < end for other_start, other_end in others):
                    pairs.add(frozenset((one, other)))
                    break
        return pairs


# -- clients and storages --------------------------------------------------------------------------


class Drivers:
    """Clients of wire fronts, each closed by :meth:`close_all` (bounded), and storages on them."""

    def __init__(self) -> None:
        self._clients: list[Driver] = []
        self._owned: list[MongoDBCheckpointStorage] = []
        self._fronts: list[WireProtocolServer] = []

    def connect(
        self, front: WireProtocolServer, *, trace: Trace | None = None, tag: str = "", **options: Any
    ) -> Driver:
        options.setdefault("serverSelectionTimeoutMS", SERVER_SELECTION_MS)
        if trace is not None:
            options["event_listeners"] = [trace.listener(tag)]
        client: Driver = AsyncMongoClient(front.uri, **options)
        self._clients.append(client)
        if front not in self._fronts:
            self._fronts.append(front)
        return client

    def storage(
        self, front: WireProtocolServer, *, trace: Trace | None = None, tag: str = "", **overrides: Any
    ) -> MongoDBCheckpointStorage:
        """A storage on a client of its own (as a separate worker has)."""
        client = self.connect(front, trace=trace, tag=tag)
        return make_storage(client[DATABASE][COLLECTION], **overrides)

    def owned_storage(
        self, front: WireProtocolServer, *, uri_options: str = "", **overrides: Any
    ) -> MongoDBCheckpointStorage:
        """A storage that builds and owns its client from the front's connection string (with
        ``uri_options``, such as ``"&appname=x"``), as a worker configured by URI does: its
        ``close()`` closes that client."""
        storage = MongoDBCheckpointStorage(
            connection_string=front.uri + uri_options,
            options=make_options(**overrides),
            database_name=DATABASE,
            collection_name=COLLECTION,
        )
        self._owned.append(storage)
        if front not in self._fronts:
            self._fronts.append(front)
        return storage

    async def close_all(self) -> None:
        """Close every owned storage and every client, the fronts answering again (a close that hangs
        fails the test), and wait for the requests left running to end."""
        for front in self._fronts:
            front.answer_again()
            with contextlib.suppress(OSError):
                await front.listen_again()
        owned, self._owned = self._owned, []
        for storage in owned:
            await storage.close()  # bounded by the storage itself; a second close does nothing
        clients, self._clients = self._clients, []
        for client in clients:
            # Bounded by pymongo itself (its endSessions), and watched: never cancelled (ADR 0030).
            closing = asyncio.ensure_future(_close_within(client, SERVER_SELECTION_MS / 1000))
            done, _ = await asyncio.wait({closing}, timeout=CLOSE_WATCHDOG)
            assert done, "a client's close hung"
            closing.result()
        await left_requests_end()


async def _close_within(client: Driver, seconds: float) -> None:
    with pymongo.timeout(seconds):
        await client.close()


async def left_requests_end(watchdog: float = 10.0) -> None:
    """Wait (bounded) until the requests whose callers stopped waiting have ended (ADR 0030)."""
    waited = time.monotonic()
    while requests_left_running():
        assert time.monotonic() - waited < watchdog, f"{requests_left_running()} requests never ended"
        await asyncio.sleep(0.02)


@dataclasses.dataclass(frozen=True)
class Outcome:
    seconds: float
    error: BaseException | None
    value: object = None


async def timed(call: Callable[[], Awaitable[object]]) -> Outcome:
    """How long ``call`` took, and what it returned or raised (an ``Exception``; a ``BaseException``
    such as a cancellation propagates)."""
    started = time.monotonic()
    try:
        value = await call()
    except Exception as error:
        return Outcome(time.monotonic() - started, error)
    return Outcome(time.monotonic() - started, None, value)
