"""``InMemoryMongoClient`` and ``InMemoryDatabase``: the parts of ``AsyncMongoClient`` a storage uses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from types import TracebackType
from typing import Any

import mongomock_ng
from pymongo.errors import ConfigurationError, InvalidOperation

from ._codec import client_options
from ._collection import InMemoryCollection
from ._errors import command_error
from ._faults import FaultPlan

SERVER_VERSION = "7.0.0"
_SCRATCH_DB = "__in_memory_scratch__"


def _system_clock() -> datetime:
    return datetime.now(timezone.utc)


class InMemoryDatabase:
    """A database of an :class:`InMemoryMongoClient`; duck-types ``AsyncDatabase``."""

    def __init__(self, client: InMemoryMongoClient, name: str) -> None:
        self._client = client
        self._name = name
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

    def __getitem__(self, name: str) -> InMemoryCollection:
        return self.get_collection(name)

    def __getattr__(self, name: str) -> InMemoryCollection:
        if name.startswith("_"):
            raise AttributeError(f"InMemoryDatabase has no attribute {name!r}")
        return self.get_collection(name)

    def get_collection(self, name: str, **_options: Any) -> InMemoryCollection:
        """The collection ``name``; codec, read and write options are accepted and ignored."""
        if not name or "$" in name or name.startswith(".") or name.endswith("."):
            raise mongomock_ng.InvalidName(f"collection names must not be empty or contain '$': {name!r}")
        if name not in self._collections:
            self._collections[name] = InMemoryCollection(self, name)
        return self._collections[name]

    def with_options(self, **_options: Any) -> InMemoryDatabase:
        return self

    async def command(self, command: str | Mapping[str, Any], *_args: Any, **_kwargs: Any) -> dict[str, Any]:
        """``ping``, ``hello``/``isMaster`` and ``buildInfo``; anything else fails like an unknown command."""
        await asyncio.sleep(0)
        self._client.check_open()
        name = command if isinstance(command, str) else next(iter(command))
        self._client.faults.check("command", None)
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

    async def list_collection_names(self, **_ignored: Any) -> list[str]:
        await asyncio.sleep(0)
        self._client.check_open()
        return self.existing_collection_names()

    def existing_collection_names(self) -> list[str]:
        """Collections that exist (hold documents or indexes), sorted."""
        return sorted(name for name, coll in self._collections.items() if coll.index_specs())

    async def drop_collection(self, name: str | InMemoryCollection, **_ignored: Any) -> None:
        await asyncio.sleep(0)
        self._client.check_open()
        self.get_collection(name if isinstance(name, str) else name.name).reset()


class InMemoryMongoClient:
    """An in-process stand-in for ``pymongo.AsyncMongoClient`` (see DIVERGENCES.md).

    ``host``, ``port`` and other keyword arguments are accepted and ignored, except ``tz_aware``
    which controls whether returned datetimes are aware (UTC) or naive UTC, as in pymongo.

    ``clock`` is the server's clock, read for ``$$NOW`` in updates: a callable returning an
    aware or naive-UTC ``datetime`` (the system clock by default). Tests that need time to pass
    on the server assign ``client.clock`` a controllable one.
    """

    def __init__(
        self, host: Any = None, port: Any = None, *, tz_aware: bool = False, **_options: Any
    ) -> None:
        self.tz_aware = tz_aware
        self.clock: Callable[[], datetime] = _system_clock
        self.codec_options = client_options(tz_aware=tz_aware)
        self.backend: Any = mongomock_ng.MongoClient(tz_aware=False)
        self.scratch: Any = self.backend[_SCRATCH_DB]["post_image"]
        self.faults = FaultPlan()
        self.close_count = 0
        self._closed = False
        self._databases: dict[str, InMemoryDatabase] = {}

    def __repr__(self) -> str:
        return f"InMemoryMongoClient(tz_aware={self.tz_aware})"

    @property
    def closed(self) -> bool:
        return self._closed

    def server_now(self) -> datetime:
        """The clock's reading as the server stores dates: naive UTC, whole milliseconds."""
        moment = self.clock()
        if moment.tzinfo is not None:
            moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
        return moment.replace(microsecond=moment.microsecond // 1000 * 1000)

    def check_open(self) -> None:
        if self._closed:
            raise InvalidOperation("Cannot use AsyncMongoClient after close")

    def fail_next(self, operation: str, error: BaseException, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``operation`` on any collection raise ``error``."""
        self.faults.fail_next(operation, error, times=times)

    def __getitem__(self, name: str) -> InMemoryDatabase:
        return self.get_database(name)

    def __getattr__(self, name: str) -> InMemoryDatabase:
        if name.startswith("_"):
            raise AttributeError(f"InMemoryMongoClient has no attribute {name!r}")
        return self.get_database(name)

    def get_database(self, name: str | None = None, **_options: Any) -> InMemoryDatabase:
        if name is None:
            raise ConfigurationError("No default database name defined or provided.")
        if not name or any(char in name for char in ' ."$/\\\x00'):
            raise mongomock_ng.InvalidName(f"database name {name!r} is not valid")
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
        return sorted(name for name, db in self._databases.items() if db.existing_collection_names())

    async def close(self) -> None:
        """Close the client; every later operation raises ``InvalidOperation`` as pymongo does."""
        await asyncio.sleep(0)
        self.close_count += 1
        self._closed = True

    async def __aenter__(self) -> InMemoryMongoClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
