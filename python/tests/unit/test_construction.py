"""Construction, client ownership, for_session and connect: sources, no I/O, close exactly once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import AutoReconnect, OperationFailure

from agent_framework_mongodb import (
    MongoDBAuthorizationError,
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageOptions,
    MongoDBConfigurationError,
    MongoDBTimeoutError,
)
from agent_framework_mongodb.checkpoints import connection
from agent_framework_mongodb.testing import InMemoryMongoClient

OPTIONS = MongoDBCheckpointStorageOptions(tenant_id="t", workflow_name="w", session_id="s")
UNREACHABLE_URI = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=50"


class RecordingClient:
    """A client whose every use is recorded; proves construction performs none."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.close_count = 0
        self._engine = InMemoryMongoClient()

    def __getitem__(self, name: str) -> Any:
        self.calls.append(f"getitem:{name}")
        return self._engine[name]

    async def close(self) -> None:
        self.close_count += 1
        raise AutoReconnect("close failed")


@pytest.fixture
def owned_clients(monkeypatch: pytest.MonkeyPatch) -> list[InMemoryMongoClient]:
    """Make connection strings build engine clients, and collect them."""
    built: list[InMemoryMongoClient] = []

    def build(uri: str, **_kwargs: Any) -> InMemoryMongoClient:
        client = InMemoryMongoClient()
        built.append(client)
        return client

    monkeypatch.setattr(connection, "AsyncMongoClient", build)
    return built


# -- sources -------------------------------------------------------------------------------------


async def test_injected_collection_is_used_as_is() -> None:
    collection = InMemoryMongoClient()["db"]["coll"]
    storage = MongoDBCheckpointStorage(collection, options=OPTIONS)
    assert storage.options is OPTIONS
    await storage.close()


async def test_injected_client_gives_named_collection(owned_clients: list[InMemoryMongoClient]) -> None:
    client = RecordingClient()
    MongoDBCheckpointStorage(mongo_client=client, options=OPTIONS, database_name="db1", collection_name="c1")
    assert client.calls == ["getitem:db1"]
    assert owned_clients == []


@pytest.mark.parametrize(
    "sources",
    [
        {"collection": "c", "mongo_client": "m"},
        {"collection": "c", "connection_string": UNREACHABLE_URI},
        {"mongo_client": "m", "connection_string": UNREACHABLE_URI},
        {"collection": "c", "mongo_client": "m", "connection_string": UNREACHABLE_URI},
    ],
)
def test_more_than_one_source_is_ambiguous(sources: dict[str, Any]) -> None:
    with pytest.raises(MongoDBConfigurationError, match="exactly one"):
        MongoDBCheckpointStorage(options=OPTIONS, **sources)


@pytest.mark.parametrize("names", [{"database_name": "other"}, {"collection_name": "other"}])
def test_names_with_an_injected_collection_are_ambiguous(names: dict[str, Any]) -> None:
    collection = InMemoryMongoClient()["db"]["coll"]
    with pytest.raises(MongoDBConfigurationError, match="injected collection"):
        MongoDBCheckpointStorage(collection, options=OPTIONS, **names)


def test_no_source_and_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MONGODB_URI", raising=False)
    with pytest.raises(MongoDBConfigurationError, match="MONGODB_URI"):
        MongoDBCheckpointStorage(options=OPTIONS)


async def test_environment_uri_is_used_and_owned(
    monkeypatch: pytest.MonkeyPatch, owned_clients: list[InMemoryMongoClient]
) -> None:
    monkeypatch.setenv("MONGODB_URI", UNREACHABLE_URI)
    storage = MongoDBCheckpointStorage(options=OPTIONS)
    assert len(owned_clients) == 1
    await storage.close()
    assert owned_clients[0].close_count == 1


@pytest.mark.parametrize("options", [None, {"tenant_id": "t"}, "options"])
def test_options_must_be_options(options: object) -> None:
    with pytest.raises(MongoDBConfigurationError, match="options must be"):
        MongoDBCheckpointStorage(InMemoryMongoClient()["d"]["c"], options=options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("names", "field"),
    [
        ({"database_name": ""}, "database_name"),
        ({"database_name": "a.b"}, "database_name"),
        ({"database_name": "a b"}, "database_name"),
        ({"database_name": "a$"}, "database_name"),
        ({"database_name": "x" * 64}, "database_name"),
        ({"collection_name": ""}, "collection_name"),
        ({"collection_name": "a$b"}, "collection_name"),
        ({"collection_name": "system.views"}, "collection_name"),
        ({"collection_name": "a\x00b"}, "collection_name"),
        ({"collection_name": "c" * 250}, "database_name.collection_name"),
    ],
)
def test_invalid_names(names: dict[str, Any], field: str) -> None:
    with pytest.raises(MongoDBConfigurationError, match=field):
        MongoDBCheckpointStorage(mongo_client=InMemoryMongoClient(), options=OPTIONS, **names)


@pytest.mark.parametrize("uri", ["", "http://localhost", "mongodb://", "mongodb://localhost:99999"])
def test_invalid_connection_string(uri: str) -> None:
    with pytest.raises(MongoDBConfigurationError):
        MongoDBCheckpointStorage(connection_string=uri, options=OPTIONS)


async def test_real_client_from_connection_string_does_no_io_and_closes() -> None:
    # Nothing listens on port 1: any I/O at construction would fail or hang.
    storage = MongoDBCheckpointStorage(connection_string=UNREACHABLE_URI, options=OPTIONS)
    owned = storage._owned_client
    assert isinstance(owned, AsyncMongoClient)
    await storage.close()
    assert storage._owned_client is None


async def test_construction_creates_no_indexes_and_no_documents() -> None:
    client = InMemoryMongoClient()
    MongoDBCheckpointStorage(mongo_client=client, options=OPTIONS)
    collection = client["agent_framework"]["workflow_checkpoints"]
    indexes = await (await collection.list_indexes()).to_list(None)
    assert [index["name"] for index in indexes] in ([], ["_id_"])
    assert await collection.count_documents({}) == 0


# -- ownership -----------------------------------------------------------------------------------


async def test_injected_client_is_never_closed() -> None:
    client = InMemoryMongoClient()
    async with MongoDBCheckpointStorage(mongo_client=client, options=OPTIONS) as storage:
        await storage.close()
    assert client.close_count == 0


async def test_injected_collection_client_is_never_closed() -> None:
    client = InMemoryMongoClient()
    storage = MongoDBCheckpointStorage(client["d"]["c"], options=OPTIONS)
    await storage.close()
    assert client.close_count == 0


async def test_owned_client_closes_exactly_once(owned_clients: list[InMemoryMongoClient]) -> None:
    async with MongoDBCheckpointStorage(connection_string=UNREACHABLE_URI, options=OPTIONS) as storage:
        pass
    await storage.close()
    await storage.close()
    assert owned_clients[0].close_count == 1


async def test_concurrent_closes_close_once(owned_clients: list[InMemoryMongoClient]) -> None:
    storage = MongoDBCheckpointStorage(connection_string=UNREACHABLE_URI, options=OPTIONS)
    await asyncio.gather(*(storage.close() for _ in range(5)))
    assert owned_clients[0].close_count == 1


async def test_close_that_fails_is_not_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    failing = RecordingClient()
    monkeypatch.setattr(connection, "AsyncMongoClient", lambda *_args, **_kwargs: failing)
    storage = MongoDBCheckpointStorage(connection_string=UNREACHABLE_URI, options=OPTIONS)
    with pytest.raises(AutoReconnect):
        await storage.close()
    await storage.close()
    assert failing.close_count == 1


async def test_exit_closes_owned_client_even_when_the_block_raises(
    owned_clients: list[InMemoryMongoClient],
) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with MongoDBCheckpointStorage(connection_string=UNREACHABLE_URI, options=OPTIONS):
            raise RuntimeError("boom")
    assert owned_clients[0].close_count == 1


async def test_for_session_shares_collection_and_never_owns(owned_clients: list[InMemoryMongoClient]) -> None:
    owner = MongoDBCheckpointStorage(connection_string=UNREACHABLE_URI, options=OPTIONS)
    other = owner.for_session("s2")
    assert other.options == OPTIONS.with_session("s2")
    assert other._collection is owner._collection
    await other.close()
    assert owned_clients[0].close_count == 0
    await owner.close()
    assert owned_clients[0].close_count == 1


async def test_for_session_stops_working_once_the_owner_closes(
    owned_clients: list[InMemoryMongoClient],
) -> None:
    owner = MongoDBCheckpointStorage(connection_string=UNREACHABLE_URI, options=OPTIONS)
    other = owner.for_session("s2")
    await owner.close()
    with pytest.raises(MongoDBConfigurationError, match="This storage is closed"):
        await other.list_checkpoint_ids(workflow_name="w")


# -- use after close -----------------------------------------------------------------------------

CLOSED_CALLS: dict[str, Any] = {
    "get_latest": lambda s: s.get_latest(workflow_name="w"),
    "load": lambda s: s.load("cp-1"),
    "delete": lambda s: s.delete("cp-1"),
    "clear_run": lambda s: s.clear_run(),
    "ensure_indexes": lambda s: s.ensure_indexes(),
}


@pytest.mark.parametrize("name", list(CLOSED_CALLS))
async def test_an_owner_closed_storage_and_its_siblings_refuse_before_any_io(
    owned_clients: list[InMemoryMongoClient], name: str
) -> None:
    owner = MongoDBCheckpointStorage(connection_string=UNREACHABLE_URI, options=OPTIONS)
    before = owner.for_session("s2")
    await owner.close()
    after = owner.for_session("s3")
    for storage in (owner, before, after):
        # The engine would raise InvalidOperation if reached ("the client was closed"); the
        # storage's own refusal comes first.
        with pytest.raises(MongoDBConfigurationError, match="This storage is closed"):
            await CLOSED_CALLS[name](storage)


async def test_a_sibling_closing_itself_leaves_the_owner_and_itself_working(
    owned_clients: list[InMemoryMongoClient],
) -> None:
    owner = MongoDBCheckpointStorage(connection_string=UNREACHABLE_URI, options=OPTIONS)
    sibling = owner.for_session("s2")
    await sibling.close()
    assert await sibling.get_latest(workflow_name="w") is None
    assert await owner.get_latest(workflow_name="w") is None
    await owner.close()


async def test_an_injected_client_closed_by_its_owner_is_a_clear_configuration_error() -> None:
    client = InMemoryMongoClient()
    storage = MongoDBCheckpointStorage(mongo_client=client, options=OPTIONS)
    await client.close()
    with pytest.raises(MongoDBConfigurationError, match="the client was closed") as raised:
        await storage.get_latest(workflow_name="w")
    assert type(raised.value.__cause__).__name__ == "InvalidOperation"


async def test_a_real_client_closed_by_its_owner_is_recognised() -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(UNREACHABLE_URI, connect=False)
    storage = MongoDBCheckpointStorage(mongo_client=client, options=OPTIONS)
    await client.close()
    with pytest.raises(MongoDBConfigurationError, match="the client was closed"):
        await storage.load("cp-1")


# -- allowed_checkpoint_types --------------------------------------------------------------------


class Listed:
    """A module-level class, importable by its name."""


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("nope.mod:Thing", "module 'nope.mod' not found"),
        ("json:Nope", "module 'json' has no attribute 'Nope'"),
        ("json:dumps", "'dumps' is a function, not a class"),
        ("json:JSONDecodeError.nope", "no attribute 'nope'"),
        ("json:JSONDecodeError", "defined elsewhere"),
    ],
)
def test_an_allowed_entry_that_names_no_class_is_refused_at_construction(entry: str, reason: str) -> None:
    options = MongoDBCheckpointStorageOptions(
        tenant_id="t", workflow_name="w", session_id="s", allowed_checkpoint_types=[Listed, entry]
    )  # the options take it: they only check its form
    with pytest.raises(MongoDBConfigurationError) as raised:
        MongoDBCheckpointStorage(mongo_client=InMemoryMongoClient(), options=options)
    message = str(raised.value)
    assert f"allowed_checkpoint_types entry {entry!r}" in message
    assert reason in message


def test_a_module_that_fails_to_import_is_named_with_the_error_class(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    real = importlib.import_module

    def failing(name: str, package: str | None = None) -> Any:
        if name == "broken_app.models":
            raise ModuleNotFoundError("No module named 'missing_dependency'", name="missing_dependency")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", failing)
    options = MongoDBCheckpointStorageOptions(
        tenant_id="t", workflow_name="w", session_id="s", allowed_checkpoint_types=["broken_app.models:State"]
    )
    with pytest.raises(MongoDBConfigurationError, match=r"importing module 'broken_app.models' failed"):
        MongoDBCheckpointStorage(mongo_client=InMemoryMongoClient(), options=options)


def test_allowed_classes_and_names_of_classes_construct() -> None:
    options = MongoDBCheckpointStorageOptions(
        tenant_id="t",
        workflow_name="w",
        session_id="s",
        allowed_checkpoint_types=[Listed, "decimal:Context", "agent_framework:NotChecked"],
    )
    MongoDBCheckpointStorage(mongo_client=InMemoryMongoClient(), options=options)


def test_for_session_validates() -> None:
    storage = MongoDBCheckpointStorage(mongo_client=InMemoryMongoClient(), options=OPTIONS)
    with pytest.raises(MongoDBConfigurationError, match="session_id"):
        storage.for_session("")


# -- connect -------------------------------------------------------------------------------------


async def test_connect_pings_and_returns_a_ready_storage() -> None:
    client = InMemoryMongoClient()
    storage = await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=1)
    assert await storage.get_latest(workflow_name="w") is None


async def test_connect_retries_transient_failures_until_the_server_answers() -> None:
    client = InMemoryMongoClient()
    client.fail_next("command", AutoReconnect("starting"), times=3)
    storage = await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=5)
    assert client.faults.pending == 0
    assert storage.options is OPTIONS


async def test_connect_times_out_with_the_last_error_as_cause() -> None:
    client = InMemoryMongoClient()
    client.fail_next("command", AutoReconnect("never up"), times=10_000)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(MongoDBTimeoutError, match=r"0\.3 seconds") as raised:
        await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=0.3)
    assert 0.25 <= loop.time() - started < 2.0
    assert isinstance(raised.value.__cause__, AutoReconnect)


async def test_connect_bounds_a_ping_that_never_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    client = InMemoryMongoClient()
    database = client["agent_framework"]

    async def hang(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        await asyncio.Event().wait()
        return {"ok": 1.0}

    monkeypatch.setattr(database, "command", hang)
    with pytest.raises(MongoDBTimeoutError):
        await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=0.2)


async def test_connect_raises_permanent_failures_at_once() -> None:
    client = InMemoryMongoClient()
    client.fail_next("command", OperationFailure("auth failed", code=18), times=10_000)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(MongoDBAuthorizationError) as raised:
        await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=30)
    assert loop.time() - started < 1.0
    assert isinstance(raised.value.__cause__, OperationFailure)


async def test_connect_closes_the_client_it_built_when_waiting_fails(
    owned_clients: list[InMemoryMongoClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = InMemoryMongoClient.__init__

    def failing_init(self: InMemoryMongoClient, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.fail_next("command", AutoReconnect("down"), times=10_000)

    monkeypatch.setattr(InMemoryMongoClient, "__init__", failing_init)
    with pytest.raises(MongoDBTimeoutError):
        await MongoDBCheckpointStorage.connect(
            connection_string=UNREACHABLE_URI, options=OPTIONS, wait_timeout=0.1
        )
    assert owned_clients[0].close_count == 1


async def test_connect_cancellation_propagates_unwrapped_and_closes_owned_client(
    owned_clients: list[InMemoryMongoClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    pinging = asyncio.Event()

    async def hang(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        pinging.set()
        await asyncio.Event().wait()
        return {"ok": 1.0}

    original_getitem = InMemoryMongoClient.__getitem__

    def database_with_hanging_ping(self: InMemoryMongoClient, name: str) -> Any:
        database = original_getitem(self, name)
        monkeypatch.setattr(database, "command", hang)
        return database

    monkeypatch.setattr(InMemoryMongoClient, "__getitem__", database_with_hanging_ping)
    task = asyncio.create_task(
        MongoDBCheckpointStorage.connect(connection_string=UNREACHABLE_URI, options=OPTIONS, wait_timeout=30)
    )
    await pinging.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert owned_clients[0].close_count == 1


@pytest.mark.parametrize("wait_timeout", [0, -1, float("inf"), float("nan"), True, "5"])
async def test_connect_rejects_invalid_wait_timeout(wait_timeout: object) -> None:
    client = InMemoryMongoClient()
    with pytest.raises(MongoDBConfigurationError, match="wait_timeout"):
        await MongoDBCheckpointStorage.connect(
            mongo_client=client,
            options=OPTIONS,
            wait_timeout=wait_timeout,  # type: ignore[arg-type]
        )


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("http://localhost", "Invalid URI scheme"),
        ("mongodb://localhost:99999", "Port must be an integer"),
        ("mongodb+srv://cluster.example.net:27017/", "must not include a port number"),
    ],
)
def test_an_invalid_connection_string_says_pymongos_reason(uri: str, reason: str) -> None:
    with pytest.raises(MongoDBConfigurationError, match=reason):
        MongoDBCheckpointStorage(connection_string=uri, options=OPTIONS)


@pytest.mark.parametrize(
    "uri",
    [
        "mongodb://app-user:hunter2-secret@db.internal:99999/",
        "mongodb+srv://app-user:p%40ss-word@db.internal:27017/",
        "mongodb://ab:cd@db.internal:99999/",  # too short to redact: the reason is withheld
    ],
)
def test_the_reason_never_shows_credentials_or_hosts(uri: str) -> None:
    with pytest.raises(MongoDBConfigurationError) as raised:
        MongoDBCheckpointStorage(connection_string=uri, options=OPTIONS)
    message = str(raised.value)
    for secret in ("app-user", "hunter2-secret", "p%40ss-word", "p@ss-word", "db.internal", "ab:cd"):
        assert secret not in message
