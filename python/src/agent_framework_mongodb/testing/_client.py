"""``InMemoryMongoClient`` and ``InMemoryDatabase``: the parts of ``AsyncMongoClient`` a storage uses."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, Callable, Mapping
from contextvars import ContextVar
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import mongomock_ng
from bson.codec_options import CodecOptions
from pymongo.collation import Collation
from pymongo.errors import CollectionInvalid, ConfigurationError, InvalidOperation
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from ._codec import client_options
from ._collation import expand_collation
from ._collection import InMemoryCollection
from ._collection_base import unsupported
from ._dates import server_date_expressions
from ._errors import command_error
from ._extremes import server_extremes
from ._faults import FaultPlan, HeldOperation
from ._index_builds import DEFAULT_INDEX_BUILD_RATE, check_build_rate
from ._journal import Journal
from ._network import attempts
from ._options import ReadPreferenceMode, SettingsCarrier, client_settings
from ._retries import WriteAttempts
from ._scheduling import Scheduler, Scheduling, pass_turns
from ._state import CollectionState
from ._stored import DocumentStore
from ._timeouts import current_deadline

SERVER_VERSION = "7.0.0"
# create options whose behaviour the engine does not simulate: refused rather than ignored.
_UNSIMULATED_CREATE = (
    "capped",
    "size",
    "max",
    "validator",
    "timeseries",
    "expireAfterSeconds",
    "clusteredIndex",
    "viewOn",
    "pipeline",
    "encryptedFields",
    "changeStreamPreAndPostImages",
)
_SCRATCH_DB = "__in_memory_scratch__"
_REQUEST_NOW: ContextVar[list[datetime]] = ContextVar("_REQUEST_NOW")
"""The clock reading of the request the current task is running server-side, once taken."""


def _system_clock() -> datetime:
    return datetime.now(timezone.utc)


class InMemoryDatabase(SettingsCarrier):
    """A database of an :class:`InMemoryMongoClient`; duck-types ``AsyncDatabase``.

    Like pymongo's, a database object carries codec options, read preference, write concern and
    read concern, taken from the client unless given; objects for the same name share the data.
    """

    def __init__(
        self,
        client: InMemoryMongoClient,
        name: str,
        *,
        codec_options: CodecOptions[Any] | None = None,
        read_preference: ReadPreferenceMode | None = None,
        write_concern: WriteConcern | None = None,
        read_concern: ReadConcern | None = None,
    ) -> None:
        self._client = client
        self._name = name
        self._settings = client.settings.derive(codec_options, read_preference, write_concern, read_concern)
        self._collections: dict[str, InMemoryCollection] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def client(self) -> InMemoryMongoClient:
        return self._client

    @property
    def backend(self) -> Any:
        """The mongomock_ng database holding this database's documents."""
        return self._client.backend[self._name]

    def __repr__(self) -> str:
        return f"InMemoryDatabase({self._client!r}, {self._name!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, InMemoryDatabase):
            return self._client is other.client and self._name == other.name
        return NotImplemented

    def __hash__(self) -> int:
        return hash((id(self._client), self._name))

    def __getitem__(self, name: str) -> InMemoryCollection:
        return self.get_collection(name)

    def __getattr__(self, name: str) -> InMemoryCollection:
        if name.startswith("_"):
            raise AttributeError(f"InMemoryDatabase has no attribute {name!r}")
        return self.get_collection(name)

    def get_collection(
        self,
        name: str,
        codec_options: CodecOptions[Any] | None = None,
        read_preference: ReadPreferenceMode | None = None,
        write_concern: WriteConcern | None = None,
        read_concern: ReadConcern | None = None,
    ) -> InMemoryCollection:
        """A view of the collection ``name`` with these settings (this database's when None).

        Without settings the same view is returned each time; with any, a new view of the same
        documents and indexes.
        """
        if not name or "$" in name or name.startswith(".") or name.endswith("."):
            raise mongomock_ng.InvalidName(f"collection names must not be empty or contain '$': {name!r}")
        if any(
            option is not None for option in (codec_options, read_preference, write_concern, read_concern)
        ):
            return InMemoryCollection(
                self,
                name,
                codec_options=codec_options,
                read_preference=read_preference,
                write_concern=write_concern,
                read_concern=read_concern,
            )
        if name not in self._collections:
            self._collections[name] = InMemoryCollection(self, name)
        return self._collections[name]

    def with_options(
        self,
        codec_options: CodecOptions[Any] | None = None,
        read_preference: ReadPreferenceMode | None = None,
        write_concern: WriteConcern | None = None,
        read_concern: ReadConcern | None = None,
    ) -> InMemoryDatabase:
        """A new view of this database, taking this one's settings for any not given."""
        return InMemoryDatabase(
            self._client,
            self._name,
            codec_options=codec_options or self.codec_options,
            read_preference=read_preference or self.read_preference,
            write_concern=write_concern or self.write_concern,
            read_concern=read_concern or self.read_concern,
        )

    async def command(
        self, command: str | Mapping[str, Any], *_args: Any, session: object = None, **_kwargs: Any
    ) -> dict[str, Any]:
        """``ping``, ``hello``/``isMaster`` and ``buildInfo``; anything else fails like an unknown command."""
        await asyncio.sleep(0)
        unsupported(session=session)
        self._client.check_open()
        name = command if isinstance(command, str) else next(iter(command))
        async with self._client.round_trip("command", None):
            return _run_command(name)

    async def list_collection_names(self, *, session: object = None, **_ignored: Any) -> list[str]:
        await asyncio.sleep(0)
        unsupported(session=session)
        self._client.check_open()
        async with self._client.round_trip("list_collection_names", None):
            return self.existing_collection_names()

    def existing_collection_names(self) -> list[str]:
        """Collections that exist (hold documents or indexes), sorted."""
        return self._client.existing_collection_names(self._name)

    async def create_collection(
        self,
        name: str,
        *,
        codec_options: CodecOptions[Any] | None = None,
        read_preference: ReadPreferenceMode | None = None,
        write_concern: WriteConcern | None = None,
        read_concern: ReadConcern | None = None,
        session: object = None,
        check_exists: bool = True,
        collation: Collation | Mapping[str, Any] | None = None,
        **options: Any,
    ) -> InMemoryCollection:
        """Create the collection ``name`` and return a view of it with these settings.

        As ``AsyncDatabase.create_collection``: with ``check_exists`` (the default) an existing
        collection raises ``CollectionInvalid``; without it the ``create`` command runs, which
        succeeds when the existing collection has the same options and fails with
        NamespaceExists (48) otherwise. ``collation`` becomes the collection's default collation
        (a simple one is not stored). Options that change what the collection does (capped,
        validator, time series ...) raise ``NotImplementedError``; others are ignored.
        """
        unsupported(session=session, **{option: options.get(option) for option in _UNSIMULATED_CREATE})
        default = None if collation is None else expand_collation(collation)
        view = self.get_collection(
            name,
            codec_options=codec_options,
            read_preference=read_preference,
            write_concern=write_concern,
            read_concern=read_concern,
        )
        await asyncio.sleep(0)
        self._client.check_open()
        state = self._client.collection_state(self._name, name)
        if check_exists and state.created:
            raise CollectionInvalid(f"collection {name} already exists")
        async with self._client.round_trip("create_collection", view.full_name):
            if not state.created:
                state.create(default)
                self._client.journal.namespace(self._name, name).create(default)
            elif state.catalog.default_collation != default:
                raise command_error(48, f"Collection {view.full_name} already exists with different options")
        return view

    async def drop_collection(
        self, name: str | InMemoryCollection, *, session: object = None, **_ignored: Any
    ) -> None:
        await asyncio.sleep(0)
        unsupported(session=session)
        self._client.check_open()
        view = self.get_collection(name if isinstance(name, str) else name.name)
        async with self._client.round_trip("drop_collection", view.full_name):
            view.reset()


def _run_command(name: str) -> dict[str, Any]:
    if name == "ping":
        return {"ok": 1.0}
    if name in ("hello", "isMaster", "ismaster"):
        return {
            "isWritablePrimary": True,
            "ismaster": True,
            "maxBsonObjectSize": 16 * 1024 * 1024,
            "ok": 1.0,
        }
    if name in ("buildInfo", "buildinfo"):
        return {"version": SERVER_VERSION, "versionArray": [7, 0, 0, 0], "ok": 1.0}
    raise command_error(59, f"no such command: '{name}'")


class InMemoryMongoClient(SettingsCarrier):
    """An in-process stand-in for ``pymongo.AsyncMongoClient`` (see DIVERGENCES.md).

    ``host``, ``port`` and most keyword options are accepted and ignored. Modelled: ``tz_aware``
    (whether returned datetimes are aware UTC or naive UTC, as in pymongo); the write concern
    options ``w``, ``wTimeoutMS`` and ``journal``; ``readPreference`` (a mode name),
    ``readPreferenceTags``, ``maxStalenessSeconds`` or ``read_preference`` (an object);
    ``readConcernLevel``; and ``timeoutMS``. Keys match case-insensitively and values are checked
    by pymongo's own validators.

    ``clock`` is the server's clock, read for ``$$NOW`` in updates: a callable returning an
    aware or naive-UTC ``datetime`` (the system clock by default). Tests that need time to pass
    on the server assign ``client.clock`` a controllable one.

    ``path`` keeps the engine's data in that file (created when missing, replayed when it
    exists): each write is synced to it before the call returns, and one client at a time, in any
    process, may have it open (``EngineFileLockedError`` otherwise) until ``close()`` or the end
    of its process. A development format, not a database: specs/engine-file-format.md.

    ``scheduling`` (a :class:`Scheduling`, None by default) gives every operation a seeded,
    heavy-tailed latency before and after the server runs it, so operations in flight together
    finish in server-like orders; see ``_scheduling.py`` and DIVERGENCES.md.

    ``index_build_rate`` is how many documents per second an index build scans (100,000 by
    default, ``math.inf`` for instant builds): a build that would outlast its operation's deadline
    (``pymongo.timeout``, ``timeoutMS`` or ``maxTimeMS``) is aborted as the server aborts it; see
    ``_index_builds.py``.
    """

    def __init__(
        self,
        host: Any = None,
        port: Any = None,
        *,
        tz_aware: bool = False,
        path: str | os.PathLike[str] | None = None,
        scheduling: Scheduling | None = None,
        index_build_rate: float = DEFAULT_INDEX_BUILD_RATE,
        **options: Any,
    ) -> None:
        given = cast("object", scheduling)
        if given is not None and not isinstance(given, Scheduling):
            raise TypeError(f"scheduling must be a Scheduling or None, not {type(given).__name__}")
        self.tz_aware = tz_aware
        self.scheduler = Scheduler(scheduling)
        """Draws each operation's latency (none unless ``scheduling`` was given)."""
        self.clock: Callable[[], datetime] = _system_clock
        self._index_build_rate = check_build_rate(index_build_rate)
        parsed = client_settings(client_options(tz_aware=tz_aware), options)
        self._settings = parsed.settings
        self.timeout: float | None = parsed.timeout
        """``timeoutMS`` in seconds (pymongo's ``client.options.timeout``), or None."""
        self.retry_writes = parsed.retry_writes
        """``retryWrites`` (true unless given false): whether pymongo retries retryable writes."""
        self.backend: Any = mongomock_ng.MongoClient(tz_aware=False)
        self.scratch: Any = self.backend[_SCRATCH_DB]["post_image"]
        self.faults = FaultPlan()
        self.close_count = 0
        self._closed = False
        self._databases: dict[str, InMemoryDatabase] = {}
        self._states: dict[tuple[str, str], CollectionState] = {}
        self.journal = Journal(path)
        if path is not None:
            self.journal.load(self)  # replays into this client, so everything above must exist

    def collection_state(self, database: str, name: str) -> CollectionState:
        """The state every view of ``database.name`` shares, made on first use."""
        key = (database, name)
        if key not in self._states:
            store = DocumentStore(self.backend[database][name])
            self._states[key] = CollectionState(f"{database}.{name}", store)
        return self._states[key]

    def existing_collection_names(self, database: str) -> list[str]:
        """The collections of ``database`` that exist (hold documents or indexes), sorted."""
        return sorted(name for (db, name), state in self._states.items() if db == database and state.created)

    def __repr__(self) -> str:
        if self.journal.path is not None:
            return f"InMemoryMongoClient(tz_aware={self.tz_aware}, path={str(self.journal.path)!r})"
        return f"InMemoryMongoClient(tz_aware={self.tz_aware})"

    @property
    def path(self) -> Path | None:
        """The file the engine keeps its data in (resolved), or None for a memory-only engine."""
        return self.journal.path

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def index_build_rate(self) -> float:
        """Documents per second an index build scans (``_index_builds.py``); tests may assign it."""
        return self._index_build_rate

    @index_build_rate.setter
    def index_build_rate(self, rate: float) -> None:
        self._index_build_rate = check_build_rate(rate)

    def server_now(self) -> datetime:
        """The clock's reading as the server stores dates: naive UTC, whole milliseconds.

        Inside a request the clock is read once, on first use, and every later use in the same
        request (its filter, each document it updates) sees that reading: ``$$NOW`` is one value
        for the whole operation.
        """
        reading = _REQUEST_NOW.get(None)
        if reading:
            return reading[0]
        moment = self.clock()
        if moment.tzinfo is not None:
            moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
        moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
        if reading is not None:
            reading.append(moment)
        return moment

    def check_open(self) -> None:
        if self._closed:
            raise InvalidOperation("Cannot use AsyncMongoClient after close")

    def fail_next(self, operation: str, error: BaseException, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``operation`` on any collection raise ``error``."""
        self.faults.fail_next(operation, error, times=times)

    def hold(self, operation: str) -> HeldOperation:
        """Pause the next call of ``operation`` on any collection until the hold is released."""
        return self.faults.hold(operation)

    def network_error_next(
        self, operation: str, *, applied: bool = False, timeout: bool = False, times: int = 1
    ) -> None:
        """Make the next ``times`` attempts of the write ``operation`` on any collection lose their
        connection (``FaultPlan.network_error_next``)."""
        self.faults.network_error_next(operation, applied=applied, timeout=timeout, times=times)

    @contextlib.asynccontextmanager
    async def round_trip(
        self, operation: str, collection: str | None, write: WriteAttempts | None = None
    ) -> AsyncGenerator[None, None]:
        """One request and its reply; the body is what the server runs, atomically unless it awaits.

        First the client-side operation timeout: past its deadline pymongo does not send at all.
        Then, with ``scheduling``, the request's latency. Then a hold, which the deadline cuts
        short with the socket-read timeout pymongo raises (the held call never runs), and a queued
        fault. The body runs next, at most once, where a queued network fault lets the server run
        it (``write``: how pymongo retries it; ``_network.py``); only an upsert's insert race (with
        ``scheduling``, a bulk's upserts too) and an index build aborted at its deadline await in
        it. With ``scheduling`` its result or error reaches the caller only after the reply's
        latency, during which other operations run.
        """
        deadline = current_deadline(self.timeout)
        if deadline.expired:
            raise deadline.expired_error()
        trip = self.scheduler.draw()
        await pass_turns(trip.request)
        held = self.faults.take_hold(operation, collection)
        if held is not None and not await held.pause(deadline.remaining):
            raise deadline.read_timeout_error()
        self.faults.check(operation, collection)
        request_now = _REQUEST_NOW.set([])
        try:
            async with attempts(
                self.faults,
                operation,
                collection,
                write,
                deadline=lambda: current_deadline(self.timeout),
                retry_wait=self._retry_wait,
            ):
                with server_date_expressions(), server_extremes():
                    yield
        finally:
            _REQUEST_NOW.reset(request_now)
            await pass_turns(trip.reply)

    async def _retry_wait(self) -> None:
        """A retried write's new request, on a new connection, with its own latency."""
        await pass_turns(self.scheduler.draw().request)

    def __getitem__(self, name: str) -> InMemoryDatabase:
        return self.get_database(name)

    def __getattr__(self, name: str) -> InMemoryDatabase:
        if name.startswith("_"):
            raise AttributeError(f"InMemoryMongoClient has no attribute {name!r}")
        return self.get_database(name)

    def get_database(
        self,
        name: str | None = None,
        codec_options: CodecOptions[Any] | None = None,
        read_preference: ReadPreferenceMode | None = None,
        write_concern: WriteConcern | None = None,
        read_concern: ReadConcern | None = None,
    ) -> InMemoryDatabase:
        """The database ``name`` with these settings (the client's when None).

        Without settings the same object is returned each time; with any, a new one over the
        same collections.
        """
        if name is None:
            raise ConfigurationError("No default database name defined or provided.")
        if not name or any(char in name for char in ' ."$/\\\x00'):
            raise mongomock_ng.InvalidName(f"database name {name!r} is not valid")
        if any(
            option is not None for option in (codec_options, read_preference, write_concern, read_concern)
        ):
            return InMemoryDatabase(
                self,
                name,
                codec_options=codec_options,
                read_preference=read_preference,
                write_concern=write_concern,
                read_concern=read_concern,
            )
        if name not in self._databases:
            self._databases[name] = InMemoryDatabase(self, name)
        return self._databases[name]

    @property
    def admin(self) -> InMemoryDatabase:
        return self.get_database("admin")

    async def server_info(self) -> dict[str, Any]:
        return await self.admin.command("buildinfo")

    async def list_database_names(self) -> list[str]:
        await asyncio.sleep(0)
        self.check_open()
        async with self.round_trip("list_database_names", None):
            return sorted({db for (db, _), state in self._states.items() if state.created})

    async def close(self) -> None:
        """Close the client; every later operation raises ``InvalidOperation`` as pymongo does."""
        await asyncio.sleep(0)
        self.close_count += 1
        self._closed = True
        self.journal.close()

    async def __aenter__(self) -> InMemoryMongoClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
