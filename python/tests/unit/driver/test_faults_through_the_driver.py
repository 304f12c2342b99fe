"""The fault and cancellation matrix, through pymongo's own client: fail points, not patched methods.

Every storage operation runs through a real ``AsyncMongoClient`` on the wire front while the
front's ``failCommand`` fail point (configured with ``configureFailPoint``, as MongoDB's drivers'
tests do) fails the commands that operation sends. So server selection, the connection pool,
pymongo's retryable reads and writes and its CSOT deadline all run, as in production. Each cell
checks three things:

- the outcome: the driver's one retry hides a single retryable failure; a lasting one, a
  non-retryable one and a refusal come out as the package's error of the right category, and a
  command held past the deadline as ``MongoDBTimeoutError`` by ``operation_timeout`` plus the
  slack (ADR 0030);
- that the fail point really fired (its activation count), so a cell cannot pass by missing;
- the aftermath, read through a client of its own once the fail point is off: the run is whole
  (every checkpoint that exists loads, unique sequences, no half-written save) and the operation,
  repeated, succeeds.

The cancellation cells cancel the caller while each command of the operation is held by the
server: the caller returns at once, the requests inside pymongo are left to finish (never
cancelled: ADR 0030), and the run is again whole once they have.

Every cell runs under each engine scheduling seed (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import (
    MongoDBAuthorizationError,
    MongoDBCheckpointStorage,
    MongoDBIndexError,
    MongoDBIntegrationError,
    MongoDBPersistenceError,
    MongoDBRetrievalError,
    MongoDBTimeoutError,
    MongoDBTransientPersistenceError,
    MongoDBTransientRetrievalError,
)
from agent_framework_mongodb.checkpoints.codec import CHUNKED_PAYLOAD_FORMAT, canonical_hash
from agent_framework_mongodb.checkpoints.deadlines import DEADLINE_SLACK, requests_left_running
from agent_framework_mongodb.testing import WireProtocolServer

from ..storage._support import CHECKPOINT_KIND, WORKFLOW, make_checkpoint, make_storage
from ..storage.test_chunked_faults import large
from .conftest import Connect, Driver

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)

STORAGE_APP = "storage-under-test"
"""The fail points name the storage's client (``appName``), so the test's own reads never trip them."""
DATABASE, COLLECTION = "checkpoint_db", "checkpoint_coll"
OPERATION_TIMEOUT = 2.0
"""Room for one retry: after a "not primary" error pymongo waits for its monitor to find the
primary again (at most every minHeartbeatFrequencyMS, 500 ms) before it retries."""
SHORT_TIMEOUT = 0.5
"""For the cells that end at the deadline, and the time they take."""
LASTING_TIMEOUT = 1.0
"""Long enough for at least one retry of a lasting failure (see OPERATION_TIMEOUT)."""
NOISE = 2.0
"""Seconds a shared two-core machine may add to a call that ended on time."""
HELD_MS = 300
"""How long a held command waits before it runs, in the cancellation cells."""


# -- the operations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Categories:
    """The package's errors for what an operation does: a retry may clear ``transient``."""

    transient: type[MongoDBIntegrationError]
    failure: type[MongoDBIntegrationError]


WRITE = Categories(MongoDBTransientPersistenceError, MongoDBPersistenceError)
READ = Categories(MongoDBTransientRetrievalError, MongoDBRetrievalError)
PROVISION = Categories(MongoDBIndexError, MongoDBIndexError)


@dataclass(frozen=True)
class Operation:
    name: str
    run: Callable[[MongoDBCheckpointStorage], Awaitable[object]]
    commands: tuple[str, ...]
    """The commands it sends (the front's log; monitoring's ``hello`` left out)."""
    categories: Categories
    retried: bool = True
    """Whether pymongo retries each of its commands: false for ``clear_run``, whose ``delete_many``
    is not a retryable write (mongodb/specifications, retryable-writes.md, "Supported Write
    Operations": multi-document deletes are not)."""

    @property
    def transient(self) -> type[MongoDBIntegrationError]:
        return self.categories.transient

    @property
    def failure(self) -> type[MongoDBIntegrationError]:
        return self.categories.failure


SAVED_BY_CELLS: dict[str, WorkflowCheckpoint] = {
    "cp-3": make_checkpoint("cp-3", previous="cp-2"),
    "cp-big-2": large("cp-big-2", seed=2),
}
"""What the save cells store, beside the run every cell starts from."""


def _list_ids(storage: MongoDBCheckpointStorage) -> Awaitable[object]:
    return storage.list_checkpoint_ids(workflow_name=WORKFLOW)


def _ensure_indexes(storage: MongoDBCheckpointStorage) -> Awaitable[object]:
    return storage.ensure_indexes(timeout=storage.options.operation_timeout)


OPERATIONS = [
    Operation(
        "save", lambda storage: storage.save(SAVED_BY_CELLS["cp-3"]),
        ("findAndModify", "find", "findAndModify"), WRITE,
    ),
    Operation(
        "chunked save", lambda storage: storage.save(SAVED_BY_CELLS["cp-big-2"]),
        ("update", "findAndModify", "find", "findAndModify"), WRITE,
    ),
    Operation("load", lambda storage: storage.load("cp-1"), ("find",), READ),
    Operation("chunked load", lambda storage: storage.load("cp-big"), ("find", "find"), READ),
    Operation("get_latest", lambda storage: storage.get_latest(workflow_name=WORKFLOW), ("find",), READ),
    Operation("list_checkpoint_ids", _list_ids, ("find",), READ),
    Operation("delete", lambda storage: storage.delete("cp-2"), ("delete",), WRITE),
    Operation(
        "clear_run", lambda storage: storage.clear_run(),
        ("delete", "findAndModify", "delete", "delete", "findAndModify"), WRITE, retried=False,
    ),
    Operation("ensure_indexes", _ensure_indexes, ("listIndexes", "createIndexes"), PROVISION),
]  # fmt: skip
BY_NAME = {operation.name: operation for operation in OPERATIONS}


def operations(*names: str) -> pytest.MarkDecorator:
    chosen = [BY_NAME[name] for name in names] if names else OPERATIONS
    return pytest.mark.parametrize("operation", chosen, ids=[operation.name for operation in chosen])


# -- the run every cell starts from -----------------------------------------------------------


@dataclass
class Run:
    front: WireProtocolServer
    client: Driver
    storage: MongoDBCheckpointStorage
    setup: MongoDBCheckpointStorage
    """Kept alive: the process remembers a collection whose indexes it looked at by a weak
    reference to the handle it looked through (checkpoints/provisioning.py), and the storage's
    collection compares equal to this one's (pymongo clients with the same seeds are equal)."""
    checker: Driver
    saved: dict[str, WorkflowCheckpoint]

    def storage_with(self, operation_timeout: float) -> MongoDBCheckpointStorage:
        """The storage under test's client, with another deadline."""
        return make_storage(self.client[DATABASE][COLLECTION], operation_timeout=operation_timeout)

    def fresh_storage(self) -> MongoDBCheckpointStorage:
        return make_storage(self.checker[DATABASE][COLLECTION], operation_timeout=10.0)

    async def fail(self, mode: object, operation: Operation, **data: Any) -> None:
        command = {"configureFailPoint": "failCommand", "mode": mode, "data": data}
        command["data"] = {"failCommands": sorted(set(operation.commands)), "appName": STORAGE_APP, **data}
        await self.checker["admin"].command(command)

    async def fail_point_off(self) -> int:
        """Turn the fail point off; how many times it fired."""
        reply = await self.checker["admin"].command({"configureFailPoint": "failCommand", "mode": "off"})
        count: int = reply["count"]
        return count


@pytest.fixture
async def run(front: WireProtocolServer, connect: Connect) -> Run:
    """A run with indexes, two small checkpoints and a chunked one, and a storage (the one under
    test) on a client of its own."""
    checker = connect(front, appname="checker")
    setup = make_storage(checker[DATABASE][COLLECTION])
    await setup.ensure_indexes()
    saved = {
        "cp-1": make_checkpoint("cp-1"),
        "cp-2": make_checkpoint("cp-2", previous="cp-1"),
        "cp-big": large("cp-big"),
    }
    for checkpoint in saved.values():
        await setup.save(checkpoint)
    client = connect(front, appname=STORAGE_APP)
    storage = make_storage(client[DATABASE][COLLECTION], operation_timeout=OPERATION_TIMEOUT)
    # Connected, and its first save's look at the unique indexes done, before any cell starts.
    saved["cp-warm"] = make_checkpoint("cp-warm", previous="cp-big")
    assert await storage.save(saved["cp-warm"]) == "cp-warm"
    return Run(front=front, client=client, storage=storage, setup=setup, checker=checker, saved=saved)


async def assert_whole(run: Run) -> None:
    """Read through the checker: every checkpoint that exists loads equal to what was saved, and no
    save is half-written (a chunked root's chunks all exist, one document per checkpoint)."""
    collection = run.checker[DATABASE][COLLECTION]
    roots = await collection.find({"_kind": CHECKPOINT_KIND}).to_list()
    ids = [root["checkpoint_id"] for root in roots]
    sequences = [root["sequence"] for root in roots]
    assert len(set(ids)) == len(ids), ids
    assert len(set(sequences)) == len(sequences), sequences
    reader = run.fresh_storage()
    for checkpoint_id in ids:
        loaded = await reader.load(checkpoint_id)
        expected = run.saved.get(checkpoint_id) or SAVED_BY_CELLS[checkpoint_id]
        assert canonical_hash(loaded.to_dict()) == canonical_hash(expected.to_dict())
    assert await reader.list_checkpoint_ids(workflow_name=WORKFLOW) == [
        root["checkpoint_id"] for root in sorted(roots, key=lambda root: root["sequence"])
    ]
    assert all(
        root["payload_format"] == CHUNKED_PAYLOAD_FORMAT for root in roots if "big" in root["checkpoint_id"]
    )


async def assert_repeat_succeeds(run: Run, operation: Operation) -> None:
    await operation.run(run.storage)
    await assert_whole(run)


async def left_requests_end() -> None:
    """Wait (bounded) for the requests abandoned by a cancelled or late caller to end."""
    for _ in range(200):
        if requests_left_running() == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{requests_left_running()} requests still running 10 s after their caller left")


@dataclass
class Timed:
    error: MongoDBIntegrationError | None
    seconds: float


async def timed(call: Awaitable[object]) -> Timed:
    started = time.monotonic()
    try:
        await call
    except MongoDBIntegrationError as error:
        return Timed(error, time.monotonic() - started)
    return Timed(None, time.monotonic() - started)


# -- the matrix ---------------------------------------------------------------------------------


def test_the_operations_send_the_commands_the_matrix_fails() -> None:
    """Each operation's command list is what the front logs for it (checked in the next test); the
    matrix targets each name, so a new command an operation sends must be added here."""
    assert {name for operation in OPERATIONS for name in operation.commands} <= {
        "find", "findAndModify", "update", "delete", "listIndexes", "createIndexes",
    }  # fmt: skip


@operations()
async def test_each_operation_sends_the_listed_commands(run: Run, operation: Operation) -> None:
    before = len(run.front.commands)
    await operation.run(run.storage)
    sent = [name for name in run.front.command_names()[before:] if name not in ("hello", "ismaster")]
    assert sorted(sent) == sorted(operation.commands)  # some are sent together, in either order


@pytest.mark.parametrize(
    ("code", "name"), [(10107, "NotWritablePrimary"), (91, "ShutdownInProgress"), (189, "PrimarySteppedDown")]
)
@operations()
async def test_one_retryable_failure_of_each_command_is_hidden_by_the_drivers_retry(
    run: Run, operation: Operation, code: int, name: str
) -> None:
    del name  # the id says which
    await run.fail({"times": 1}, operation, errorCode=code)
    outcome = await timed(operation.run(run.storage))
    fired = await run.fail_point_off()
    assert fired == 1
    if operation.retried:
        assert outcome.error is None
    else:
        assert isinstance(outcome.error, operation.transient)
        assert outcome.error.retryable
    await assert_repeat_succeeds(run, operation)


@operations()
async def test_a_lasting_retryable_failure_is_retried_until_the_deadline_and_ends_retryably(
    run: Run, operation: Operation
) -> None:
    await run.fail("alwaysOn", operation, errorCode=11600)  # InterruptedAtShutdown
    outcome = await timed(operation.run(run.storage_with(LASTING_TIMEOUT)))
    fired = await run.fail_point_off()
    if operation.retried:
        # Under a deadline (the storage's pymongo.timeout) pymongo retries a retryable command
        # until the deadline, not once (mongodb/specifications, client-side-operations-timeout.md,
        # "Retryability"); the last failure is a timeout (a listing's, the server's own error).
        assert isinstance(outcome.error, (MongoDBTimeoutError, operation.transient)), outcome.error
        assert fired >= 2
    else:
        # clear_run's delete_many fails at once, as not retryable; its other requests end.
        assert isinstance(outcome.error, (operation.transient, MongoDBTimeoutError)), outcome.error
    assert outcome.error.retryable
    assert outcome.seconds < LASTING_TIMEOUT + DEADLINE_SLACK + NOISE
    await assert_repeat_succeeds(run, operation)


@operations()
async def test_a_non_retryable_server_error_fails_the_operation_once_and_not_retryably(
    run: Run, operation: Operation
) -> None:
    await run.fail("alwaysOn", operation, errorCode=2)  # BadValue
    outcome = await timed(operation.run(run.storage))
    fired = await run.fail_point_off()
    assert isinstance(outcome.error, operation.failure)
    assert type(outcome.error) is operation.failure, outcome.error  # not its transient subclass
    assert 1 <= fired <= len(operation.commands)  # no command retried (some are sent together)
    assert not outcome.error.retryable
    await assert_repeat_succeeds(run, operation)


@operations()
async def test_an_unauthorized_command_is_an_authorization_error(run: Run, operation: Operation) -> None:
    await run.fail("alwaysOn", operation, errorCode=13)  # Unauthorized
    outcome = await timed(operation.run(run.storage))
    assert 1 <= await run.fail_point_off() <= len(operation.commands)
    assert isinstance(outcome.error, MongoDBAuthorizationError), outcome.error
    await assert_repeat_succeeds(run, operation)


@operations()
async def test_a_connection_closed_once_is_retried_or_reported_retryably(
    run: Run, operation: Operation
) -> None:
    await run.fail({"times": 1}, operation, closeConnection=True)
    outcome = await timed(operation.run(run.storage))
    assert await run.fail_point_off() == 1
    if operation.retried:
        assert outcome.error is None
    else:
        assert isinstance(outcome.error, operation.transient)
        assert outcome.error.retryable
    await assert_repeat_succeeds(run, operation)


@operations()
async def test_connections_closed_every_time_give_a_retryable_error(run: Run, operation: Operation) -> None:
    await run.fail("alwaysOn", operation, closeConnection=True)
    outcome = await timed(operation.run(run.storage_with(SHORT_TIMEOUT)))
    assert await run.fail_point_off() >= 1
    assert isinstance(outcome.error, (operation.transient, MongoDBTimeoutError)), outcome.error
    assert outcome.error.retryable
    assert outcome.seconds < SHORT_TIMEOUT + DEADLINE_SLACK + NOISE
    await assert_repeat_succeeds(run, operation)


@operations()
async def test_a_command_held_past_the_deadline_is_a_timeout_by_the_deadline(
    run: Run, operation: Operation
) -> None:
    held_ms = int((SHORT_TIMEOUT + DEADLINE_SLACK + NOISE) * 1000) + 1000
    await run.fail({"times": 1}, operation, blockConnection=True, blockTimeMS=held_ms)
    outcome = await timed(operation.run(run.storage_with(SHORT_TIMEOUT)))
    assert isinstance(outcome.error, MongoDBTimeoutError), outcome.error
    assert outcome.error.retryable
    assert outcome.seconds < SHORT_TIMEOUT + DEADLINE_SLACK + NOISE
    await run.fail_point_off()
    await left_requests_end()
    await assert_repeat_succeeds(run, operation)


@pytest.mark.parametrize(
    ("code", "label"), [(91, "RetryableWriteError"), (64, None)], ids=["shutdown-retried", "wtimeout"]
)
@operations("save", "chunked save", "delete")
async def test_a_write_concern_error_is_retried_when_labelled_and_otherwise_reported(
    run: Run, operation: Operation, code: int, label: str | None
) -> None:
    concern_error: dict[str, Any] = {"code": code, "errmsg": "injected write concern error"}
    await run.fail({"times": 1}, operation, writeConcernError=concern_error)
    outcome = await timed(operation.run(run.storage))
    assert await run.fail_point_off() == 1
    if label is not None:
        assert outcome.error is None  # the server labelled it; pymongo retried the applied write
    else:
        # The write was applied but not acknowledged as durable: a failure of the save, which the
        # caller may repeat (idempotent) once the set has caught up.
        assert isinstance(outcome.error, MongoDBPersistenceError), outcome.error
    await assert_repeat_succeeds(run, operation)


# -- cancellation at each command ----------------------------------------------------------------


def positions() -> Iterator[tuple[Operation, int]]:
    for operation in OPERATIONS:
        for position in range(len(operation.commands)):
            yield operation, position


@pytest.mark.parametrize(
    ("operation", "position"),
    list(positions()),
    ids=[f"{operation.name}-{operation.commands[position]}{position}" for operation, position in positions()],
)
async def test_a_caller_cancelled_while_a_command_is_held_returns_at_once_and_leaves_the_run_whole(
    run: Run, operation: Operation, position: int
) -> None:
    name = operation.commands[position]
    earlier = operation.commands[:position].count(name)
    await run.fail({"skip": earlier}, operation, blockConnection=True, blockTimeMS=HELD_MS)
    already = run.front.command_names().count(name)
    task = asyncio.ensure_future(operation.run(run.storage))
    await asyncio.wait_for(run.front.received(name, count=already + earlier + 1), timeout=10)

    task.cancel()
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < HELD_MS / 1000  # did not wait for the held command

    await left_requests_end()
    await run.fail_point_off()
    await assert_whole(run)
    await assert_repeat_succeeds(run, operation)
