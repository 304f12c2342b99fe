"""Every storage operation runs under one client-side deadline: ``operation_timeout``.

Checked with pymongo's real ``AsyncMongoClient`` against local sockets: a port that refuses and a
listener that accepts but never answers (a hung server). pymongo's own default would wait 30 s
for server selection; under the storage's deadline the call ends in about ``operation_timeout``
with a retryable ``MongoDBTimeoutError``. Bounds are generous: these machines are shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any

import pymongo
import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import AutoReconnect, NetworkTimeout, PyMongoError

from agent_framework_mongodb import MongoDBCheckpointCatalog, MongoDBCheckpointStorage, MongoDBTimeoutError
from agent_framework_mongodb.checkpoints.deadlines import DEADLINE_SLACK
from agent_framework_mongodb.testing import InMemoryMongoClient

from ._support import WORKFLOW, make_checkpoint, make_options, make_storage

# A connection attempt that pymongo abandons at the deadline leaves its socket to the garbage
# collector, which warns about it later, in whichever test runs then. The sockets are pymongo's.
pytestmark = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

TIMEOUT = 0.5


@pytest.fixture(autouse=True)
def _collect_abandoned_sockets() -> Iterator[None]:
    yield
    gc.collect()  # while this module's filters still apply


LATE = 10.0
"""Far below pymongo's 30 s server-selection default, far above the deadline."""

Operation = Callable[[MongoDBCheckpointStorage], Awaitable[object]]
OPERATIONS: dict[str, Operation] = {
    "save": lambda storage: storage.save(make_checkpoint("cp-timeout")),
    "load": lambda storage: storage.load("cp-timeout"),
    "get_latest": lambda storage: storage.get_latest(workflow_name=WORKFLOW),
    "list_checkpoint_ids": lambda storage: storage.list_checkpoint_ids(workflow_name=WORKFLOW),
    "delete": lambda storage: storage.delete("cp-timeout"),
    "clear_run": lambda storage: storage.clear_run(),
    # Index builds have their own deadline, not operation_timeout (issue 20): given here.
    "ensure_indexes": lambda storage: storage.ensure_indexes(timeout=TIMEOUT),
}


def _refusing_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
async def hung_server() -> AsyncIterator[int]:
    """A listener that accepts connections and never sends a byte."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    yield port
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


async def _timed(uri: str, operation: Operation, **options: Any) -> tuple[float, MongoDBTimeoutError]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, connect=False)
    storage = MongoDBCheckpointStorage(mongo_client=client, options=make_options(**options))
    started = time.monotonic()
    try:
        with pytest.raises(MongoDBTimeoutError) as raised:
            await operation(storage)
        return time.monotonic() - started, raised.value
    finally:
        await client.close()


@pytest.mark.parametrize("name", list(OPERATIONS))
async def test_an_unreachable_server_ends_each_operation_at_its_deadline(name: str) -> None:
    elapsed, error = await _timed(
        f"mongodb://127.0.0.1:{_refusing_port()}/", OPERATIONS[name], operation_timeout=TIMEOUT
    )

    assert TIMEOUT * 0.8 <= elapsed < LATE, elapsed
    assert error.retryable is True
    assert isinstance(error.__cause__, PyMongoError)
    assert error.__cause__.timeout


async def test_a_hung_server_cannot_hold_an_operation_past_its_deadline(hung_server: int) -> None:
    elapsed, error = await _timed(
        f"mongodb://127.0.0.1:{hung_server}/", OPERATIONS["save"], operation_timeout=TIMEOUT
    )

    assert TIMEOUT * 0.8 <= elapsed < LATE, elapsed
    assert error.retryable is True


async def test_a_callers_enclosing_deadline_can_only_shorten_it() -> None:
    async def load_within_a_shorter_block(storage: MongoDBCheckpointStorage) -> object:
        with pymongo.timeout(TIMEOUT):
            return await storage.load("cp-timeout")

    elapsed, _ = await _timed(
        f"mongodb://127.0.0.1:{_refusing_port()}/", load_within_a_shorter_block, operation_timeout=60
    )

    assert elapsed < LATE, elapsed


async def test_the_default_deadline_replaces_the_clients_timeout_ms_for_the_storage() -> None:
    # timeoutMS on the client is pymongo's default for operations without a block; the storage
    # states its own. A client timeoutMS far above the option does not keep an operation waiting.
    elapsed, _ = await _timed(
        f"mongodb://127.0.0.1:{_refusing_port()}/?timeoutMS=120000",
        OPERATIONS["load"],
        operation_timeout=TIMEOUT,
    )

    assert elapsed < LATE, elapsed


async def test_a_held_insert_times_out_unapplied_and_the_retry_stores_it_once() -> None:
    # Over the engine, which honours pymongo.timeout: the insert never reaches the data.
    client = InMemoryMongoClient()
    collection = client["db"]["checkpoints"]
    storage = make_storage(collection, operation_timeout=TIMEOUT)
    await storage.save(make_checkpoint("cp-before"))
    checkpoint = make_checkpoint("cp-slow")
    await storage.save(make_checkpoint("cp-steady"))
    held = client.hold("find_one_and_update")

    with pytest.raises(MongoDBTimeoutError) as raised:
        await storage.save(checkpoint)

    assert held.is_reached
    assert raised.value.retryable is True
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-before", "cp-steady"]
    assert await storage.save(checkpoint) == "cp-slow"
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-before", "cp-steady", "cp-slow"]


async def test_the_first_operations_deadline_does_not_stay_in_the_clients_monitors() -> None:
    # pymongo 4.13.0 started a lazily connected client's monitor tasks inside the context of its
    # first operation, deadline included, and every heartbeat failed once it passed (PYTHON-5406).
    # The storage's first operation is such a first operation; the package requires 4.13.1.
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        f"mongodb://127.0.0.1:{_refusing_port()}/?heartbeatFrequencyMS=500"
    )
    storage = MongoDBCheckpointStorage(mongo_client=client, options=make_options(operation_timeout=TIMEOUT))
    try:
        with pytest.raises(MongoDBTimeoutError):
            await storage.load("cp-timeout")
        await asyncio.sleep(1.5)  # heartbeats after the deadline passed
        (description,) = client.topology_description.server_descriptions().values()
        assert isinstance(description.error, AutoReconnect)
        assert not isinstance(description.error, NetworkTimeout), description.error
    finally:
        await client.close()


async def test_index_builds_are_not_bound_by_the_operation_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ensure_indexes`` runs under its own deadline (none by default: no ``pymongo.timeout`` block
    at all, so a caller's enclosing one still applies), never ``operation_timeout``: MongoDB aborts a
    ``createIndexes`` its deadline cuts short (SERVER-46595)."""
    from agent_framework_mongodb.testing import InMemoryMongoClient

    seen: list[float | None] = []
    real = pymongo.timeout

    def recording(seconds: float | None) -> Any:
        seen.append(seconds)
        return real(seconds)

    client = InMemoryMongoClient()
    storage = MongoDBCheckpointStorage(client["db"]["c"], options=make_options(operation_timeout=TIMEOUT))
    monkeypatch.setattr(pymongo, "timeout", recording)
    await storage.ensure_indexes()
    await storage.ensure_indexes(timeout=600)
    await storage.validate_indexes()
    assert seen == [600.0, TIMEOUT]


# -- many operations at once, cancelled or not (issue 28) ---------------------------------------
# Before the fix, 30 storages saving at once against a refusing port left pymongo's topology lock
# orphaned in most runs: a save's two concurrent requests both waited for server selection, one
# failed, the other was cancelled inside pymongo's wait (deadlines.py says how), and every later
# call and close() waited for ever. Each call here must end by its deadline plus the slack.

AT_ONCE = 30
LOAD_TIMEOUT = 1.0
"""The deadline under which the hang showed most often (its half-second waits line up)."""
NOISE = 2.0
"""Seconds of scheduling delay a shared machine may add to a call that ends on time."""


async def _run_of_calls(uri: str, index: int, cancel_after: float | None) -> list[tuple[str, float]]:
    """One storage of its own client: two saves (the first cancelled after ``cancel_after``
    seconds, when given), a read, and close; how long each call took."""
    storage = MongoDBCheckpointStorage(
        connection_string=uri, options=make_options(session_id=f"s-{index}", operation_timeout=LOAD_TIMEOUT)
    )
    took: list[tuple[str, float]] = []
    calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("save", lambda: storage.save(make_checkpoint(f"cp-{index}-a"))),
        ("save", lambda: storage.save(make_checkpoint(f"cp-{index}-b"))),
        ("get_latest", lambda: storage.get_latest(workflow_name=WORKFLOW)),
    ]
    for position, (name, call) in enumerate(calls):
        started = time.monotonic()
        task = asyncio.ensure_future(call())
        if position == 0 and cancel_after is not None:
            await asyncio.sleep(cancel_after)
            task.cancel()
        with contextlib.suppress(MongoDBTimeoutError, asyncio.CancelledError):
            await task
        took.append((name, time.monotonic() - started))
    started = time.monotonic()
    await storage.close()
    took.append(("close", time.monotonic() - started))
    return took


async def _all_end(uri: str, cancel_after: list[float | None]) -> None:
    tasks = [
        asyncio.ensure_future(_run_of_calls(uri, index, after)) for index, after in enumerate(cancel_after)
    ]
    # A watchdog, not a deadline under test: a hung client must fail the test, not hang it.
    done, pending = await asyncio.wait(tasks, timeout=6 * (LOAD_TIMEOUT + DEADLINE_SLACK) + 4 * NOISE)
    for task in pending:
        task.cancel()
    assert not pending, f"{len(pending)} of {len(tasks)} storages never finished: a call hung"
    bound = LOAD_TIMEOUT + DEADLINE_SLACK + NOISE
    late = [(name, round(took, 2)) for task in done for name, took in task.result() if took > bound]
    assert late == [], f"calls that outlived their deadline plus {DEADLINE_SLACK:g} s: {late}"


async def test_many_storages_at_once_against_an_unreachable_server_all_end_by_their_deadlines() -> None:
    await _all_end(f"mongodb://127.0.0.1:{_refusing_port()}/", [None] * AT_ONCE)


async def test_many_storages_at_once_against_a_hung_server_all_end_by_their_deadlines(
    hung_server: int,
) -> None:
    await _all_end(f"mongodb://127.0.0.1:{hung_server}/", [None] * AT_ONCE)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_saves_cancelled_at_any_moment_leave_the_client_working(seed: int) -> None:
    # Cancelled by their callers at seeded moments around the deadline: what follows on the same
    # client still ends on time, and close() returns.
    chance = random.Random(seed)
    offsets: list[float | None] = [chance.uniform(0.0, LOAD_TIMEOUT * 1.3) for _ in range(AT_ONCE)]
    await _all_end(f"mongodb://127.0.0.1:{_refusing_port()}/", offsets)


CATALOG_OPERATIONS: dict[str, Callable[[MongoDBCheckpointCatalog], Awaitable[object]]] = {
    "list_runs": lambda catalog: catalog.list_runs(),
    "plan_prune": lambda catalog: catalog.plan_prune(older_than=timedelta(days=1)),
    "clear_run": lambda catalog: catalog.clear_run(WORKFLOW, "s-1"),
}


@pytest.mark.parametrize("name", list(CATALOG_OPERATIONS))
async def test_the_catalogs_operations_and_close_end_by_their_deadline_too(name: str) -> None:
    uri = f"mongodb://127.0.0.1:{_refusing_port()}/"
    catalogs = [
        MongoDBCheckpointCatalog(connection_string=uri, tenant_id="t", operation_timeout=LOAD_TIMEOUT)
        for _ in range(AT_ONCE // 3)
    ]

    async def timed(catalog: MongoDBCheckpointCatalog) -> tuple[float, float]:
        started = time.monotonic()
        with pytest.raises(MongoDBTimeoutError):
            await CATALOG_OPERATIONS[name](catalog)
        took = time.monotonic() - started
        started = time.monotonic()
        await catalog.close()
        return took, time.monotonic() - started

    done, pending = await asyncio.wait(
        [asyncio.ensure_future(timed(catalog)) for catalog in catalogs], timeout=10 * (LOAD_TIMEOUT + NOISE)
    )
    assert not pending, "a catalog call or close hung"
    bound = LOAD_TIMEOUT + DEADLINE_SLACK + NOISE
    assert all(max(task.result()) <= bound for task in done), [task.result() for task in done]
