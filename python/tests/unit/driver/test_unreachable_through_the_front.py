"""Servers that stop answering, drop connections, vanish, step down or fail over, through a real driver.

``storage/test_timeouts.py`` points pymongo's ``AsyncMongoClient`` at a closed port and at a silent
listener. Here the client talks to the wire front, which served the run until the moment the test
changes it: it stops answering (``hello`` still answered, or not even that), drops every connection,
stops listening and comes back, steps down mid-save or fails over to another member with a save in
flight; and an Agent Framework workflow runs against a front that stops answering partway through.
Each scenario checks three things:

- the call ends by ``operation_timeout`` + ``DEADLINE_SLACK`` (ADR 0030), plus scheduling noise a
  shared machine adds, with a retryable package error: ``MongoDBTimeoutError`` or the transient
  category of the operation (``MongoDBTransientPersistenceError`` for writes,
  ``MongoDBTransientRetrievalError`` for reads); or, for a step-down or failover, it succeeds
  through pymongo's retry;
- ``close()`` of the storage (which owns its client, built from the URI as a worker's is) returns
  by its own bound;
- nothing is half-written: once the front answers again, a storage on a new client loads every
  checkpoint saved before, equal to what was saved, sequences are unique and listed in order, and
  the run goes on saving, its counter at the newest checkpoint.

The save, load and clear scenarios run under each engine scheduling seed (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agent_framework import (
    CheckpointID,
    WorkflowCheckpoint,
)
from benchmarks.unreachable_servers import TimedStorage, three_step_workflow

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBIntegrationError,
    MongoDBStrictSaveFailure,
    MongoDBTimeoutError,
    MongoDBTransientPersistenceError,
    MongoDBTransientRetrievalError,
)
from agent_framework_mongodb.checkpoints.deadlines import DEADLINE_SLACK
from agent_framework_mongodb.testing import Scheduling, WireProtocolServer

from ...conftest import WireServerFactory
from ..storage._support import WORKFLOW, make_checkpoint, raw_checkpoints, raw_counter, scope_of
from ._front import Drivers, Outcome, engine_collection, identity, large, left_requests_end, timed

TIMEOUT = 0.5
"""operation_timeout of the storage under test."""
RETRY_TIMEOUT = 1.0
"""operation_timeout where pymongo must find the server (or the new primary) again and retry within
the deadline: after a network error or NotWritablePrimary its monitor looks again at most every
half second."""
NOISE = 2.0
"""Seconds of scheduling delay a shared machine may add to a call that ends on time."""
STORAGE_APP = "storage-under-test"
URI_OPTIONS = f"&heartbeatFrequencyMS=500&appname={STORAGE_APP}"
"""The storage's client polls its servers every half second (pymongo's floor), as the front's own
replica-set tests do, and names itself so a fail point can single out its commands."""
SETTLE = 0.3
"""Seconds for requests the front held to run once it answers again (DIVERGENCES entry 37: a
stalled server works through its queue); the engine's seeded waits are loop turns, not seconds."""


def bound(timeout: float = TIMEOUT) -> float:
    return timeout + DEADLINE_SLACK + NOISE


# -- operations, and what each may raise when the server does not answer -----------------------

Operation = Callable[[MongoDBCheckpointStorage], Awaitable[object]]
TIMED_OUT = make_checkpoint("cp-timed-out", previous="cp-002", state={"i": 3})
BIG = large("cp-big-timed-out")
"""Stored as chunks: its chunk write goes out beside the allocation."""
OPERATIONS: dict[str, Operation] = {
    "save": lambda storage: storage.save(TIMED_OUT),
    "load": lambda storage: storage.load("cp-001"),
    "clear_run": lambda storage: storage.clear_run(),
    "get_latest": lambda storage: storage.get_latest(workflow_name=WORKFLOW),
    "list_checkpoint_ids": lambda storage: storage.list_checkpoint_ids(workflow_name=WORKFLOW),
    "delete": lambda storage: storage.delete("cp-001"),
    "chunked_save": lambda storage: storage.save(BIG),
}
WRITES = {"save", "clear_run", "delete", "chunked_save"}
FIRST_COMMAND = {
    "save": "findAndModify",
    "load": "find",
    "clear_run": "delete",
    "get_latest": "find",
    "list_checkpoint_ids": "find",
    "delete": "delete",
    "chunked_save": "update",
}
"""The first command each operation sends (the front logs a held command when it runs it)."""


def assert_failed_in_time(outcome: Outcome, name: str, timeout: float = TIMEOUT) -> None:
    """The call ended by its deadline plus the slack and the noise, with a retryable package error
    of the operation's category, or a timeout."""
    transient = MongoDBTransientPersistenceError if name in WRITES else MongoDBTransientRetrievalError
    assert isinstance(outcome.error, (MongoDBTimeoutError, transient)), (name, outcome)
    assert outcome.error.retryable is True
    assert outcome.seconds < bound(timeout), (name, outcome.seconds)


async def assert_closes_in_time(storage: MongoDBCheckpointStorage, timeout: float = TIMEOUT) -> None:
    closing = await timed(storage.close)
    assert closing.error is None, closing
    assert closing.seconds < bound(timeout), closing.seconds


async def save_chain(storage: MongoDBCheckpointStorage, count: int = 3) -> dict[str, WorkflowCheckpoint]:
    """``cp-000`` ... saved one after the other, each the parent of the next."""
    saved: dict[str, WorkflowCheckpoint] = {}
    previous: str | None = None
    for index in range(count):
        checkpoint = make_checkpoint(f"cp-{index:03d}", previous=previous, state={"i": index})
        assert await storage.save(checkpoint) == checkpoint.checkpoint_id
        saved[checkpoint.checkpoint_id] = checkpoint
        previous = checkpoint.checkpoint_id
    return saved


async def assert_whole(
    front: WireProtocolServer, drivers: Drivers, saved: dict[str, WorkflowCheckpoint]
) -> None:
    """Read through a client of its own: exactly the ``saved`` checkpoints are stored, each loads
    equal, sequences are unique and listed in order, and the newest is the latest."""
    documents = await raw_checkpoints(engine_collection(front))
    stored = {document["checkpoint_id"]: document["sequence"] for document in documents}
    assert len(stored) == len(documents), "a checkpoint is stored twice"
    assert set(stored) == set(saved), (sorted(stored), sorted(saved))
    assert len(set(stored.values())) == len(stored), f"two checkpoints share a sequence: {stored}"
    reader = drivers.storage(front)
    for checkpoint_id, checkpoint in saved.items():
        assert identity(await reader.load(checkpoint_id)) == identity(checkpoint), checkpoint_id
    in_order = sorted(stored, key=stored.__getitem__)
    assert await reader.list_checkpoint_ids(workflow_name=WORKFLOW) == in_order
    latest = await reader.get_latest(workflow_name=WORKFLOW)
    assert (latest.checkpoint_id if latest is not None else None) == (in_order[-1] if in_order else None)


async def assert_goes_on(
    front: WireProtocolServer,
    drivers: Drivers,
    saved: dict[str, WorkflowCheckpoint],
    storage: MongoDBCheckpointStorage,
) -> None:
    """``storage`` saves the run's next checkpoint: numbered above everything stored, the counter at
    it, and the run whole."""
    following = make_checkpoint("cp-following", state={"following": True})
    assert await storage.save(following) == "cp-following"
    saved = {**saved, "cp-following": following}
    await assert_whole(front, drivers, saved)
    collection = engine_collection(front)
    sequences = {
        document["checkpoint_id"]: document["sequence"] for document in await raw_checkpoints(collection)
    }
    assert max(sequences, key=sequences.__getitem__) == "cp-following"
    counter = await raw_counter(collection, scope_of(storage))
    assert counter is not None
    assert counter["sequence"] == sequences["cp-following"]


async def held_commands_ran() -> None:
    """Wait for the requests the front held to run (they all wake when it answers again) and for
    the requests the storage left running, if any, to end."""
    await asyncio.sleep(SETTLE)
    await left_requests_end()


def sent_since(front: WireProtocolServer, logged: int) -> list[str]:
    """The commands the front ran since ``logged`` commands, monitoring's handshakes left out."""
    return [record.name for record in front.commands[logged:] if record.name not in ("hello", "ismaster")]


# -- a front that stops answering mid-run --------------------------------------------------------


@pytest.mark.seeded_engine
@pytest.mark.parametrize("name", ["save", "load", "clear_run"])
@pytest.mark.parametrize("handshake", [False, True], ids=["hello-answered", "silent"])
async def test_a_front_that_stops_answering_ends_the_operation_and_close_by_their_deadlines(
    make_wire_server: WireServerFactory,
    engine_scheduling: Scheduling | None,
    drivers: Drivers,
    name: str,
    handshake: bool,
) -> None:
    front = await make_wire_server(scheduling=engine_scheduling)
    storage = drivers.owned_storage(front, uri_options=URI_OPTIONS, operation_timeout=TIMEOUT)
    await storage.ensure_indexes()
    saved = await save_chain(storage)
    before = front.command_names().count(FIRST_COMMAND[name])

    front.stop_answering(handshake=handshake)
    outcome = await timed(lambda: OPERATIONS[name](storage))

    assert_failed_in_time(outcome, name)
    assert outcome.seconds >= TIMEOUT * 0.8, "the front did not hold the call: it failed another way"
    await assert_closes_in_time(storage)

    front.answer_again()
    await held_commands_ran()
    assert front.command_names().count(FIRST_COMMAND[name]) > before, "the call never reached the front"
    if name == "clear_run":
        # A clear that timed out may still be applied, as any write whose reply was lost: the
        # front ran its held delete once it answered again. Either way nothing is half-cleared,
        # and repeating the clear (the error is retryable) finishes it.
        remaining = {
            document["checkpoint_id"] for document in await raw_checkpoints(engine_collection(front))
        }
        assert remaining in (set(), set(saved)), remaining
        if remaining:
            await assert_whole(front, drivers, saved)
        await drivers.storage(front).clear_run()
        saved = {}
    await assert_whole(front, drivers, saved)
    after = drivers.storage(front)  # the worker, restarted
    if name == "save":
        assert await after.save(TIMED_OUT) == TIMED_OUT.checkpoint_id  # the retry stores it, once
        saved = {**saved, TIMED_OUT.checkpoint_id: TIMED_OUT}
        await assert_whole(front, drivers, saved)
    await assert_goes_on(front, drivers, saved, after)


@pytest.mark.parametrize("name", ["get_latest", "list_checkpoint_ids", "delete", "chunked_save"])
async def test_every_other_operation_ends_by_its_deadline_against_a_front_that_stopped_answering(
    make_wire_server: WireServerFactory, drivers: Drivers, name: str
) -> None:
    front = await make_wire_server()
    storage = drivers.owned_storage(front, uri_options=URI_OPTIONS, operation_timeout=TIMEOUT)
    saved = await save_chain(storage)
    before = front.command_names().count(FIRST_COMMAND[name])

    front.stop_answering(handshake=False)
    outcome = await timed(lambda: OPERATIONS[name](storage))

    assert_failed_in_time(outcome, name)
    assert outcome.seconds >= TIMEOUT * 0.8
    await assert_closes_in_time(storage)
    front.answer_again()
    await held_commands_ran()
    assert front.command_names().count(FIRST_COMMAND[name]) > before, "the call never reached the front"
    if name == "delete":  # applied late or not at all, the retry makes it so (assert_whole checks)
        await drivers.storage(front).delete("cp-001")
        del saved["cp-001"]
    await assert_whole(front, drivers, saved)
    after = drivers.storage(front)
    if name == "chunked_save":  # its chunks may have landed late; the retry stores it whole
        assert await after.save(BIG) == BIG.checkpoint_id
        saved = {**saved, BIG.checkpoint_id: BIG}
        await assert_whole(front, drivers, saved)
    await assert_goes_on(front, drivers, saved, after)


# -- dropped connections, and a front that stops listening ---------------------------------------


@pytest.mark.seeded_engine
@pytest.mark.parametrize("name", ["save", "load", "clear_run"])
async def test_dropped_connections_end_the_operation_retryably_by_its_deadline(
    make_wire_server: WireServerFactory, engine_scheduling: Scheduling | None, drivers: Drivers, name: str
) -> None:
    front = await make_wire_server(scheduling=engine_scheduling)
    storage = drivers.owned_storage(front, uri_options=URI_OPTIONS, operation_timeout=TIMEOUT)
    await storage.ensure_indexes()
    saved = await save_chain(storage)
    accepted = front.connections_accepted()
    logged = len(front.commands)

    front.drop_connections()
    outcome = await timed(lambda: OPERATIONS[name](storage))

    assert_failed_in_time(outcome, name)
    # Every request was dropped before it ran (the driver's retry included): nothing reached the
    # engine, and the driver tried again on new connections.
    assert sent_since(front, logged) == []
    assert front.connections_accepted() > accepted
    await assert_closes_in_time(storage)
    front.answer_again()
    await left_requests_end()
    await assert_whole(front, drivers, saved)
    await assert_goes_on(front, drivers, saved, drivers.storage(front))


@pytest.mark.seeded_engine
async def test_a_front_that_stops_listening_then_listens_again(
    make_wire_server: WireServerFactory, engine_scheduling: Scheduling | None, drivers: Drivers
) -> None:
    front = await make_wire_server(scheduling=engine_scheduling)
    storage = drivers.owned_storage(front, uri_options=URI_OPTIONS, operation_timeout=TIMEOUT)
    await storage.ensure_indexes()
    saved = await save_chain(storage)
    logged = len(front.commands)

    await front.stop_listening()
    for name in ("save", "load", "clear_run"):
        assert_failed_in_time(await timed(functools.partial(OPERATIONS[name], storage)), name)
    assert sent_since(front, logged) == []  # nothing reached the server
    await front.listen_again()

    # The same storage, on the same client, goes on once pymongo sees the server again: a caller
    # retries a retryable error, each attempt still bounded by its deadline.
    attempts = await eventually(lambda: storage.save(TIMED_OUT))
    assert attempts <= 10
    saved = {**saved, TIMED_OUT.checkpoint_id: TIMED_OUT}
    await assert_whole(front, drivers, saved)
    await assert_goes_on(front, drivers, saved, storage)
    await assert_closes_in_time(storage)


AT_ONCE = 15


@dataclasses.dataclass(frozen=True)
class Call:
    name: str
    seconds: float
    ended: object
    """``"cancelled"``, what it raised, or None."""


async def test_many_workers_cancelled_at_any_moment_while_the_front_is_gone_all_end_and_go_on(
    make_wire_server: WireServerFactory, drivers: Drivers
) -> None:
    # Issue 28's hang, on clients that were connected when the server went away: many storages wait
    # for server selection on the same half-second beat, some cancelled by their callers at seeded
    # moments around the deadline. Every call ends on time, and each client still works afterwards
    # (an orphaned topology lock would hang its next call and its close for ever; ADR 0030).
    front = await make_wire_server()
    storages = [
        drivers.owned_storage(
            front, uri_options=URI_OPTIONS, operation_timeout=TIMEOUT, session_id=f"s-{index}"
        )
        for index in range(AT_ONCE)
    ]
    await drivers.storage(front).ensure_indexes()
    # Fifteen handshakes at once on a loaded machine can outlast a half-second deadline: the first
    # save is retried as an application would (saves are idempotent by checkpoint id).
    first = make_checkpoint("cp-first")
    await asyncio.gather(*(eventually(functools.partial(storage.save, first)) for storage in storages))
    chance = random.Random(28)
    cancel_after = [chance.uniform(0.0, TIMEOUT * 1.3) if index % 2 else None for index in range(AT_ONCE)]

    async def calls_of(storage: MongoDBCheckpointStorage, after: float | None) -> list[Call]:
        calls: list[Call] = []
        for position, name in enumerate(("save", "save", "get_latest")):
            started = time.monotonic()
            task = asyncio.ensure_future(OPERATIONS[name](storage))
            if position == 0 and after is not None:
                await asyncio.sleep(after)
                task.cancel()
            await asyncio.wait({task})
            ended: object = "cancelled" if task.cancelled() else task.exception()
            calls.append(Call(name, time.monotonic() - started, ended))
        return calls

    await front.stop_listening()
    tasks = [
        asyncio.ensure_future(calls_of(storage, after))
        for storage, after in zip(storages, cancel_after, strict=True)
    ]
    # A watchdog, not a deadline under test: a hung client must fail the test, not hang it.
    done, pending = await asyncio.wait(tasks, timeout=3 * bound() + NOISE)
    for task in pending:
        task.cancel()
    assert not pending, f"{len(pending)} of {len(tasks)} workers never finished: a call hung"
    calls = [call for task in done for call in task.result()]
    late = [(call.name, round(call.seconds, 2)) for call in calls if call.seconds > bound()]
    assert late == [], f"calls that outlived their deadline plus {DEADLINE_SLACK:g} s: {late}"
    # Each call the caller did not cancel failed retryably: a timeout, or its connection closed.
    failed = [call.ended for call in calls if call.ended != "cancelled"]
    assert len(failed) >= 2 * AT_ONCE
    assert all(isinstance(ended, MongoDBIntegrationError) and ended.retryable for ended in failed), failed

    # A third of the workers stop here: their close returns while the server is still gone.
    stopping, going_on = storages[::3], [storage for index, storage in enumerate(storages) if index % 3]
    closes = await asyncio.gather(*(timed(storage.close) for storage in stopping))
    assert all(close.error is None and close.seconds < bound() for close in closes), closes

    await front.listen_again()
    await left_requests_end()
    # The others go on, on the same clients (each retrying a retryable error within its deadline).
    await asyncio.gather(*(eventually(functools.partial(storage.save, TIMED_OUT)) for storage in going_on))
    for storage in going_on:
        await assert_closes_in_time(storage)
    for index in range(AT_ONCE):
        reader = drivers.storage(front, session_id=f"s-{index}")
        expected = ["cp-first"] if index % 3 == 0 else ["cp-first", TIMED_OUT.checkpoint_id]
        assert await reader.list_checkpoint_ids(workflow_name=WORKFLOW) == expected


async def eventually(call: Callable[[], Awaitable[object]], *, watchdog: float = 10.0) -> int:
    """Call until it succeeds, retrying retryable package errors; how many attempts it took. Each
    attempt must end by its own deadline."""
    started = time.monotonic()
    for attempt in range(1, 1000):
        outcome = await timed(call)
        assert outcome.seconds < bound(), outcome
        if outcome.error is None:
            return attempt
        assert isinstance(outcome.error, MongoDBIntegrationError), outcome.error
        assert outcome.error.retryable, outcome.error
        assert time.monotonic() - started < watchdog, f"still failing after {attempt} attempts: {outcome}"
        await asyncio.sleep(0.1)
    raise AssertionError("unreachable")


@pytest.mark.seeded_engine
@pytest.mark.parametrize("lost", [1, 2], ids=["reply-lost", "reply-and-retry-lost"])
async def test_a_save_whose_allocation_reply_is_lost_is_applied_once(
    make_wire_server: WireServerFactory, engine_scheduling: Scheduling | None, drivers: Drivers, lost: int
) -> None:
    # The connection drops after the server applied the allocation. pymongo retries it as a
    # retryable write, which the server answers from its record: the number is spent once. If the
    # retry's reply is lost too, pymongo retries again while its deadline allows (CSOT), so the save
    # succeeds, or fails retryably by its deadline and the caller's retry stores it once.
    front = await make_wire_server(scheduling=engine_scheduling)
    storage = drivers.owned_storage(front, uri_options=URI_OPTIONS, operation_timeout=RETRY_TIMEOUT)
    await storage.ensure_indexes()
    saved = await save_chain(storage)
    collection = engine_collection(front)
    counter = await raw_counter(collection, scope_of(storage))
    assert counter is not None
    allocations = front.command_names().count("findAndModify")

    front.drop_reply_after_apply("findAndModify", times=lost)
    outcome = await timed(lambda: storage.save(TIMED_OUT))

    # Sent, and retried by pymongo (under a deadline it retries until the deadline, not once): a save
    # that succeeded sent one allocation per lost reply and one answered; one that ran out of deadline
    # on a loaded machine may have sent fewer (CI's oldest-dependency run once saw two for two lost).
    sent = front.command_names().count("findAndModify") - allocations
    assert sent >= (lost + 1 if outcome.error is None else 1), (sent, outcome)
    if lost == 1:
        assert outcome.error is None, outcome
    if outcome.error is None:
        assert outcome.seconds < bound(RETRY_TIMEOUT)
        stored = {document["checkpoint_id"]: document for document in await raw_checkpoints(collection)}
        assert stored[TIMED_OUT.checkpoint_id]["sequence"] == counter["sequence"] + 1  # allocated once
    else:
        assert_failed_in_time(outcome, "save", RETRY_TIMEOUT)
        assert await storage.save(TIMED_OUT) == TIMED_OUT.checkpoint_id
    saved = {**saved, TIMED_OUT.checkpoint_id: TIMED_OUT}
    await assert_whole(front, drivers, saved)
    await assert_goes_on(front, drivers, saved, storage)
    await assert_closes_in_time(storage, RETRY_TIMEOUT)


# -- a step-down mid-save, and a failover with a save in flight ----------------------------------


async def hold_next(drivers: Drivers, front: WireProtocolServer, command: str, milliseconds: int) -> None:
    """The front holds the storage's next ``command`` (the test's own clients are not held), as a
    busy server would, so the test can change the set while the command is inside the server."""
    checker = drivers.connect(front)
    await checker["admin"].command(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {
                "failCommands": [command],
                "blockConnection": True,
                "blockTimeMS": milliseconds,
                "appName": STORAGE_APP,
            },
        }
    )


async def assert_retried_or_failed_cleanly(
    front: WireProtocolServer, drivers: Drivers, saved: dict[str, WorkflowCheckpoint], outcome: Outcome
) -> dict[str, WorkflowCheckpoint]:
    """The save in flight succeeded (through the driver's retry) or failed retryably by its deadline;
    either way the run is whole, and the checkpoint is stored once (after a retry, if it failed)."""
    if outcome.error is not None:
        assert_failed_in_time(outcome, "save", RETRY_TIMEOUT)
        assert await drivers.storage(front).save(TIMED_OUT) == TIMED_OUT.checkpoint_id
    else:
        assert outcome.value == TIMED_OUT.checkpoint_id
        assert outcome.seconds < bound(RETRY_TIMEOUT)
    saved = {**saved, TIMED_OUT.checkpoint_id: TIMED_OUT}
    await assert_whole(front, drivers, saved)
    return saved


@pytest.mark.seeded_engine
async def test_a_step_down_mid_save_is_retried_or_fails_cleanly(
    make_wire_server: WireServerFactory, engine_scheduling: Scheduling | None, drivers: Drivers
) -> None:
    front = await make_wire_server(scheduling=engine_scheduling)
    storage = drivers.owned_storage(front, uri_options=URI_OPTIONS, operation_timeout=RETRY_TIMEOUT)
    await storage.ensure_indexes()
    saved = await save_chain(storage, 2)
    allocations = front.command_names().count("findAndModify")
    await hold_next(drivers, front, "findAndModify", 150)

    saving = asyncio.ensure_future(timed(lambda: storage.save(TIMED_OUT)))
    await asyncio.wait_for(front.received("findAndModify", count=allocations + 1), timeout=10)
    front.step_down()  # the held allocation is refused when it runs: NotWritablePrimary
    await asyncio.sleep(0.3)
    await front.elect(0)
    outcome = await saving

    if outcome.error is None:
        # Refused once, then retried by pymongo on the re-elected primary, then the insert.
        assert front.command_names().count("findAndModify") >= allocations + 3
    saved = await assert_retried_or_failed_cleanly(front, drivers, saved, outcome)
    await assert_goes_on(front, drivers, saved, storage)
    await assert_closes_in_time(storage, RETRY_TIMEOUT)


@pytest.mark.seeded_engine
async def test_a_failover_with_a_save_in_flight_is_retried_on_the_new_primary_or_fails_cleanly(
    make_wire_server: WireServerFactory, engine_scheduling: Scheduling | None, drivers: Drivers
) -> None:
    front = await make_wire_server(scheduling=engine_scheduling, members=2)
    storage = drivers.owned_storage(front, uri_options=URI_OPTIONS, operation_timeout=RETRY_TIMEOUT)
    await storage.ensure_indexes()
    saved = await save_chain(storage, 2)
    allocations = front.command_names(member=0).count("findAndModify")
    await hold_next(drivers, front, "findAndModify", 150)

    saving = asyncio.ensure_future(timed(lambda: storage.save(TIMED_OUT)))
    await asyncio.wait_for(front.received("findAndModify", count=allocations + 1, member=0), timeout=10)
    await front.fail_over(to=1)
    outcome = await saving

    assert front.primary == 1
    if outcome.error is None:
        assert "findAndModify" in front.command_names(member=1), "the save did not go on at the new primary"
    saved = await assert_retried_or_failed_cleanly(front, drivers, saved, outcome)
    await assert_goes_on(front, drivers, saved, storage)
    await assert_closes_in_time(storage, RETRY_TIMEOUT)


# -- an Agent Framework workflow against a front that stops answering partway through ------------


class _StopsAnsweringAfterFirstSave(TimedStorage):
    """Times every call; once the first save is stored, the front stops answering (``hello`` still
    answered, as a server stalled mid-run is seen by its monitor)."""

    def __init__(self, inner: MongoDBCheckpointStorage, front: WireProtocolServer) -> None:
        super().__init__(inner)
        self._front = front
        self.stored: list[WorkflowCheckpoint] = []

    async def save(self, checkpoint: WorkflowCheckpoint) -> CheckpointID:
        result = await super().save(checkpoint)
        if not self.stored:
            self._front.stop_answering(handshake=False)
        self.stored.append(checkpoint)
        return result


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
async def test_a_workflow_run_against_a_front_that_stops_answering_ends_by_its_deadlines(
    make_wire_server: WireServerFactory, drivers: Drivers, strict: bool
) -> None:
    front = await make_wire_server()
    storage = drivers.owned_storage(
        front, uri_options=URI_OPTIONS, operation_timeout=TIMEOUT, strict_saves=strict
    )
    await storage.ensure_indexes()
    timing = _StopsAnsweringAfterFirstSave(storage, front)
    workflow = three_step_workflow(timing, name=WORKFLOW)

    started = time.monotonic()
    failure: MongoDBStrictSaveFailure | None = None
    outputs: list[Any] = []
    try:
        outputs = (await workflow.run(0)).get_outputs()
    except MongoDBStrictSaveFailure as raised:
        failure = raised
    took = time.monotonic() - started

    saves = [call for call in timing.calls if call.name == "save"]
    assert len(timing.stored) == 1, timing.calls  # the first save, then nothing answered
    assert all(call.seconds < bound() for call in timing.calls), timing.calls
    failed = [call.error for call in saves if call.error is not None]
    if strict:
        assert failure is not None, "a failed strict save did not end the run"
        assert isinstance(failure.error, MongoDBTimeoutError), failure.error
        assert failure.retryable
        assert len(saves) == 2  # the run stopped at its first failed save
    else:
        assert failure is None
        assert outputs == [3]  # Agent Framework logged the failed saves and finished the run
        assert len(failed) == len(saves) - 1 >= 1
        assert all(isinstance(error, MongoDBTimeoutError) for error in failed), failed
    assert took < len(timing.calls) * bound() + NOISE, took
    await assert_closes_in_time(storage)

    front.answer_again()
    await held_commands_ran()  # the held allocations run: spent numbers, nothing stored
    (first,) = timing.stored
    await assert_whole(front, drivers, {first.checkpoint_id: first})
    resumed = drivers.storage(front)  # the run resumed by another worker
    latest = await resumed.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert identity(latest) == identity(first)
    await assert_goes_on(front, drivers, {first.checkpoint_id: first}, resumed)
