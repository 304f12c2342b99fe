"""connect's failures: bounded by wait_timeout, explained by a fixed reason, never by driver text.

The first group drives real pymongo against local sockets (no MongoDB server): a closed port, an
unresolvable name, a listener that is not TLS, one that never answers. The second injects errors
into the in-process engine to cover the classification of errors that keep their cause chain.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import dns.resolver
import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import (
    AutoReconnect,
    ConfigurationError,
    NetworkTimeout,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
)

from agent_framework_mongodb import (
    MongoDBAuthorizationError,
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageOptions,
    MongoDBConfigurationError,
    MongoDBTimeoutError,
)
from agent_framework_mongodb.testing import InMemoryMongoClient

OPTIONS = MongoDBCheckpointStorageOptions(tenant_id="t", workflow_name="w", session_id="s")
REFUSED = "connection refused"
NOT_RESOLVED = "host name not resolved"
TLS = "TLS handshake failed"
TIMED_OUT = "timed out (server did not answer)"
AUTHENTICATION = "authentication failed"
UNKNOWN = "reason: unknown"
DRIVER_TEXT = ("Errno", "SSL", "Connect call", "configured timeouts", "Topology", "No servers")
"""Pieces of what pymongo writes; none may reach a message."""
MARKER = "secret-host.example:27017 pa55word"

Handler = Callable[[asyncio.StreamWriter, asyncio.Event], Awaitable[None]]
"""What a listener does with one connection; the event is set when the listener shuts down."""


def closed_port() -> int:
    """A port nothing listens on: bound, read, released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@asynccontextmanager
async def listener(behaviour: Handler) -> AsyncIterator[int]:
    """A local TCP server running ``behaviour`` per connection; yields its port."""
    release = asyncio.Event()
    handlers: set[asyncio.Task[Any]] = set()

    async def handle(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await behaviour(writer, release)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        release.set()
        server.close()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


async def send_garbage(writer: asyncio.StreamWriter, _release: asyncio.Event) -> None:
    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    await writer.drain()


async def close_at_once(_writer: asyncio.StreamWriter, _release: asyncio.Event) -> None:
    return None


async def hang(_writer: asyncio.StreamWriter, release: asyncio.Event) -> None:
    await release.wait()


async def connect_failure(uri: str, wait_timeout: float) -> tuple[MongoDBTimeoutError, float]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(MongoDBTimeoutError) as raised:
        await MongoDBCheckpointStorage.connect(
            connection_string=uri, options=OPTIONS, wait_timeout=wait_timeout
        )
    return raised.value, loop.time() - started


def assert_clean(message: str, *hidden: str) -> None:
    for text in (*hidden, *DRIVER_TEXT, MARKER):
        assert text not in message, (text, message)


# -- real pymongo, no server ---------------------------------------------------------------------


async def test_a_refused_port_fails_at_the_deadline_saying_connection_refused() -> None:
    port = closed_port()
    error, elapsed = await connect_failure(f"mongodb://someone:pa55word@127.0.0.1:{port}/", 2)
    assert 1.5 <= elapsed < 4.0
    assert REFUSED in str(error)
    assert "within 2 seconds" in str(error)
    assert_clean(str(error), "127.0.0.1", str(port), "someone", "pa55word")
    assert isinstance(error.__cause__, ServerSelectionTimeoutError)


async def test_short_server_selection_attempts_are_retried_and_keep_the_reason() -> None:
    port = closed_port()
    error, elapsed = await connect_failure(f"mongodb://127.0.0.1:{port}/?serverSelectionTimeoutMS=100", 1)
    assert 0.75 <= elapsed < 3.0
    assert REFUSED in str(error)
    assert_clean(str(error), "127.0.0.1", str(port))
    assert isinstance(error.__cause__, ServerSelectionTimeoutError)


async def test_an_unresolvable_host_fails_saying_host_name_not_resolved() -> None:
    error, elapsed = await connect_failure("mongodb://nonexistent.invalid:27017/", 2)
    assert 1.5 <= elapsed < 4.0
    assert NOT_RESOLVED in str(error)
    assert_clean(str(error), "nonexistent", "invalid", "27017")
    assert isinstance(error.__cause__, ServerSelectionTimeoutError)


@pytest.mark.parametrize("behaviour", [send_garbage, close_at_once], ids=["garbage", "closed"])
async def test_a_listener_that_does_not_speak_tls_fails_saying_tls_handshake_failed(
    behaviour: Handler,
) -> None:
    async with listener(behaviour) as port:
        error, elapsed = await connect_failure(f"mongodb://127.0.0.1:{port}/?tls=true", 2)
    assert 1.5 <= elapsed < 4.0
    assert TLS in str(error)
    assert_clean(str(error), "127.0.0.1", str(port))
    assert isinstance(error.__cause__, ServerSelectionTimeoutError)


async def test_a_listener_that_never_answers_fails_saying_timed_out() -> None:
    async with listener(hang) as port:
        error, elapsed = await connect_failure(f"mongodb://127.0.0.1:{port}/", 2)
    assert 1.5 <= elapsed < 4.0
    assert TIMED_OUT in str(error)
    assert_clean(str(error), "127.0.0.1", str(port))
    assert isinstance(error.__cause__, ServerSelectionTimeoutError)


async def test_the_deadline_does_not_stay_in_the_client_monitors() -> None:
    """pymongo 4.13.0's monitors copy the context they start in (PYTHON-5406): a deadline set
    around a client's first operation would fail every heartbeat after it passed."""
    port = closed_port()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        f"mongodb://127.0.0.1:{port}/?heartbeatFrequencyMS=500"
    )
    try:
        with pytest.raises(MongoDBTimeoutError, match=REFUSED):
            await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=0.5)
        await asyncio.sleep(1.5)  # two heartbeats after the deadline
        (description,) = client.topology_description.server_descriptions().values()
        assert isinstance(description.error, AutoReconnect)
        assert not isinstance(description.error, NetworkTimeout), description.error
    finally:
        await client.close()


# -- the engine: errors that keep their cause chain ----------------------------------------------


def caused(error: PyMongoError, cause: BaseException) -> PyMongoError:
    error.__cause__ = cause
    return error


def query_srv() -> None:
    raise dns.resolver.NXDOMAIN


def resolve_srv() -> None:
    """What pymongo 4.13 does for an SRV name that does not exist: re-raise ``from None``."""
    try:
        query_srv()
    except dns.resolver.NXDOMAIN:
        raise ConfigurationError(f"{MARKER} does not exist") from None


def srv_lookup_failure() -> ConfigurationError:
    try:
        resolve_srv()
    except ConfigurationError as error:
        return error
    raise AssertionError("unreachable")


TRANSIENT_CASES: list[tuple[str, PyMongoError, str]] = [
    (
        "refused-cause",
        caused(AutoReconnect(MARKER), ConnectionRefusedError(errno.ECONNREFUSED, "refused")),
        REFUSED,
    ),
    (
        "gaierror-cause",
        caused(AutoReconnect(MARKER), socket.gaierror(socket.EAI_NONAME, "unknown name")),
        NOT_RESOLVED,
    ),
    (
        "ssl-cause",
        caused(AutoReconnect(MARKER), ssl.SSLCertVerificationError(1, "verify failed")),
        TLS,
    ),
    ("timeout-cause", caused(AutoReconnect(MARKER), TimeoutError("slow")), TIMED_OUT),
    ("network-timeout", NetworkTimeout(f"{MARKER}: timed out"), TIMED_OUT),
    # The monitor's sanitized errors: no chain, only pymongo's text.
    ("errno-text", AutoReconnect(f"{MARKER}: [Errno {errno.ECONNREFUSED}] Connect call failed"), REFUSED),
    ("eai-text", AutoReconnect(f"{MARKER}: [Errno {socket.EAI_NONAME}] unknown name"), NOT_RESOLVED),
    ("tls-prefix", AutoReconnect(f"SSL handshake failed: {MARKER}: [Errno {errno.ECONNRESET}] reset"), TLS),
    ("no-servers", ServerSelectionTimeoutError("No servers found yet, Timeout: 1s"), TIMED_OUT),
    ("unexplained", AutoReconnect(f"{MARKER} went away"), UNKNOWN),
]


@pytest.mark.parametrize(
    ("error", "reason"), [case[1:] for case in TRANSIENT_CASES], ids=[c[0] for c in TRANSIENT_CASES]
)
async def test_the_timeout_names_the_reason_of_the_last_failure(error: PyMongoError, reason: str) -> None:
    client = InMemoryMongoClient()
    client.fail_next("command", error, times=10_000)
    with pytest.raises(MongoDBTimeoutError) as raised:
        await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=0.3)
    assert reason in str(raised.value)
    assert_clean(str(raised.value))
    assert raised.value.__cause__ is error


async def test_the_reason_follows_the_last_failure_not_the_first() -> None:
    client = InMemoryMongoClient()
    client.fail_next("command", caused(AutoReconnect(MARKER), socket.gaierror(socket.EAI_NONAME, "x")))
    client.fail_next(
        "command", caused(AutoReconnect(MARKER), ConnectionRefusedError(errno.ECONNREFUSED, "x"))
    )
    client.fail_next("command", NetworkTimeout(MARKER), times=10_000)
    with pytest.raises(MongoDBTimeoutError, match=r"\(reason: timed out \(server did not answer\)\)\.$"):
        await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=1)


PERMANENT_CASES: list[tuple[str, PyMongoError, type[Exception], str]] = [
    (
        "code-18",
        OperationFailure(
            f"{MARKER} Authentication failed.", code=18, details={"codeName": "AuthenticationFailed"}
        ),
        MongoDBAuthorizationError,
        AUTHENTICATION,
    ),
    (
        "atlas",
        OperationFailure(
            f"bad auth : authentication failed {MARKER}", code=8000, details={"codeName": "AtlasError"}
        ),
        MongoDBAuthorizationError,
        AUTHENTICATION,
    ),
    ("srv-nxdomain", srv_lookup_failure(), MongoDBConfigurationError, NOT_RESOLVED),
]


@pytest.mark.parametrize(
    ("error", "category", "reason"),
    [case[1:] for case in PERMANENT_CASES],
    ids=[c[0] for c in PERMANENT_CASES],
)
async def test_permanent_failures_are_raised_at_once_with_the_reason(
    error: PyMongoError, category: type[Exception], reason: str
) -> None:
    client = InMemoryMongoClient()
    client.fail_next("command", error, times=5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(category) as raised:
        await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=30)
    assert loop.time() - started < 1.0
    assert client.faults.pending == 4
    assert reason in str(raised.value)
    assert_clean(str(raised.value))
    assert raised.value.__cause__ is error


async def test_a_permanent_failure_without_a_known_reason_names_none() -> None:
    client = InMemoryMongoClient()
    client.fail_next("command", OperationFailure(MARKER, code=13, details={"codeName": "Unauthorized"}))
    with pytest.raises(MongoDBAuthorizationError) as raised:
        await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=30)
    assert str(raised.value) == "MongoDB could not ping the server (OperationFailure; code 13; Unauthorized)."


async def test_a_database_that_ignores_pymongo_timeout_is_bounded_by_asyncio(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = InMemoryMongoClient()
    database = client["agent_framework"]

    async def never(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        await asyncio.Event().wait()
        return {"ok": 1.0}

    monkeypatch.setattr(database, "command", never)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(MongoDBTimeoutError) as raised:
        await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=0.2)
    assert 0.2 <= loop.time() - started < 3.0
    assert TIMED_OUT in str(raised.value)
    assert raised.value.__cause__ is None


async def test_connect_validates_the_indexes_when_asked() -> None:
    # Issue 31: a worker that asks refuses to start on a collection nobody ran ensure_indexes() on.
    from agent_framework_mongodb import MongoDBConfigurationError, MongoDBIndexMissingError

    client = InMemoryMongoClient()
    unchecked = await MongoDBCheckpointStorage.connect(mongo_client=client, options=OPTIONS, wait_timeout=5)
    assert unchecked.options == OPTIONS  # not asked: it connects as before
    with pytest.raises(MongoDBIndexMissingError, match="ensure_indexes"):
        await MongoDBCheckpointStorage.connect(
            mongo_client=client, options=OPTIONS, wait_timeout=5, validate_indexes=True
        )
    with pytest.raises(MongoDBConfigurationError, match="validate_indexes"):
        await MongoDBCheckpointStorage.connect(
            mongo_client=client,
            options=OPTIONS,
            validate_indexes="yes",  # type: ignore[arg-type]
        )
    await unchecked.ensure_indexes()
    checked = await MongoDBCheckpointStorage.connect(
        mongo_client=client, options=OPTIONS, wait_timeout=5, validate_indexes=True
    )
    assert await checked.list_checkpoint_ids(workflow_name=OPTIONS.workflow_name) == []
