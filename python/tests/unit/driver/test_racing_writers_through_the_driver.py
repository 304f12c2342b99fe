"""Racing writers of one run, each a storage on an ``AsyncMongoClient`` of its own, through the wire front.

The engine tests of concurrency (``storage/test_concurrency.py``, ``_interleavings.py``,
``test_keep_last.py``, ``test_chunked_faults.py``) race storages on one engine client. Here every
writer is a separate worker: its own pymongo client, connection pool and monitors, talking MongoDB's
wire protocol to the front, whose engine runs under the test's scheduling seed. The guarantees are
the same: unique sequences, each writer's in its order, a save that returned before another started
numbered below it, every checkpoint loading equal, listing in sequence order, ``get_latest`` the
highest, ``keep_last`` keeping the newest, ``clear_run`` leaving no half run. Each test also shows
from pymongo's command monitoring that its writers' saves really were in flight together.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import MongoDBCheckpointClearResult, MongoDBCheckpointStorage
from agent_framework_mongodb.checkpoints.codec import CHUNKED_PAYLOAD_FORMAT
from agent_framework_mongodb.testing import InMemoryCollection, Scheduling, WireProtocolServer

from ...conftest import WireServerFactory
from ..storage._support import WORKFLOW, make_checkpoint, raw_checkpoints, raw_counter, save_chain, scope_of
from ._front import Drivers, Trace, engine_collection, identity, large

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)

WRITERS = 4


class Recorder:
    """Stamps saves with a logical clock shared by the writers, so "returned before the other
    started" is exact, and keeps what each writer saved, in its order."""

    def __init__(self) -> None:
        self._clock = itertools.count()
        self.started: dict[str, int] = {}
        self.returned: dict[str, int] = {}
        self.saved: dict[str, WorkflowCheckpoint] = {}
        self.by_writer: dict[str, list[str]] = {}

    def stamp(self) -> int:
        return next(self._clock)

    async def save(
        self, writer: str, storage: MongoDBCheckpointStorage, checkpoint: WorkflowCheckpoint
    ) -> None:
        self.started[checkpoint.checkpoint_id] = self.stamp()
        assert await storage.save(checkpoint) == checkpoint.checkpoint_id
        self.returned[checkpoint.checkpoint_id] = self.stamp()
        self.saved[checkpoint.checkpoint_id] = checkpoint
        self.by_writer.setdefault(writer, []).append(checkpoint.checkpoint_id)


async def sequences(collection: InMemoryCollection) -> dict[str, int]:
    """Each stored checkpoint's sequence, read from the engine behind the front."""
    return {document["checkpoint_id"]: document["sequence"] for document in await raw_checkpoints(collection)}


def writer_checkpoint(writer: int, step: int) -> WorkflowCheckpoint:
    return make_checkpoint(f"w{writer}-s{step}", state={"writer": writer, "step": step})


async def assert_ordered_and_whole(
    front: WireProtocolServer, reader: MongoDBCheckpointStorage, recorder: Recorder
) -> dict[str, int]:
    """The run's guarantees after racing saves, read through a client of its own and the engine."""
    stored = await sequences(engine_collection(front))
    assert len(set(stored.values())) == len(stored), f"two checkpoints share a sequence: {stored}"
    assert set(recorder.saved) <= set(stored), "a save that returned is not stored"
    for writer, ids in recorder.by_writer.items():
        numbers = [stored[checkpoint_id] for checkpoint_id in ids]
        assert numbers == sorted(numbers), (writer, numbers)
        assert len(set(numbers)) == len(numbers), (writer, numbers)
    for earlier, later in itertools.permutations(recorder.saved, 2):
        if recorder.returned[earlier] < recorder.started[later]:
            assert stored[earlier] < stored[later], (
                f"{later} started after {earlier} returned, sorts before it"
            )
    for checkpoint_id, checkpoint in recorder.saved.items():
        assert identity(await reader.load(checkpoint_id)) == identity(checkpoint), checkpoint_id
    in_order = sorted(stored, key=stored.__getitem__)
    assert await reader.list_checkpoint_ids(workflow_name=WORKFLOW) == in_order
    latest = await reader.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == in_order[-1]
    return stored


def assert_saves_in_flight_together(trace: Trace, writers: list[str]) -> None:
    """Pymongo's own record: saves of different clients, from their allocation going out to their
    insert coming back, overlapped on the wire (else the writers did not race at all)."""
    spans = {writer: trace.spans(writer, "allocate", "insert") for writer in writers}
    assert all(spans.values()), f"a writer's save never went over the wire: {spans}"
    overlapping = trace.overlapping_tags(spans)
    assert len(overlapping) >= len(writers) - 1, f"saves of these clients overlapped: {overlapping}"


async def test_writers_with_clients_of_their_own_get_unique_ordered_sequences(
    make_wire_server: WireServerFactory, engine_scheduling: Scheduling | None, drivers: Drivers
) -> None:
    front = await make_wire_server(scheduling=engine_scheduling)
    await drivers.storage(front).ensure_indexes()
    trace = Trace()
    tags = [f"writer-{index}" for index in range(WRITERS)]
    writers = [drivers.storage(front, trace=trace, tag=tag) for tag in tags]
    recorder = Recorder()

    async def write(index: int) -> None:
        for step in range(5):
            await recorder.save(tags[index], writers[index], writer_checkpoint(index, step))

    await asyncio.gather(*(write(index) for index in range(WRITERS)))

    stored = await assert_ordered_and_whole(front, drivers.storage(front), recorder)
    assert len(stored) == 5 * WRITERS
    assert_saves_in_flight_together(trace, tags)
    # Two round trips a save at least (allocation, insert), every one of them through the front.
    assert front.command_names().count("findAndModify") >= 2 * 5 * WRITERS
    for tag in tags:
        assert trace.kinds(tag).count("insert") == 5


async def test_clear_run_racing_writers_leaves_no_half_run(
    make_wire_server: WireServerFactory, engine_scheduling: Scheduling | None, drivers: Drivers
) -> None:
    front = await make_wire_server(scheduling=engine_scheduling)
    await drivers.storage(front).ensure_indexes()
    old = await save_chain(drivers.storage(front), 4, prefix="old")
    trace = Trace()
    tags = [f"writer-{index}" for index in range(3)]
    writers = [drivers.storage(front, trace=trace, tag=tag) for tag in tags]
    clearing = drivers.storage(front, trace=trace, tag="clear")
    recorder = Recorder()

    async def write(index: int) -> None:
        for step in range(3):
            await recorder.save(tags[index], writers[index], writer_checkpoint(index, step))

    async def clear() -> MongoDBCheckpointClearResult:
        result = await clearing.clear_run()
        recorder.returned["clear"] = recorder.stamp()
        return result

    cleared, _ = await asyncio.gather(clear(), asyncio.gather(*(write(index) for index in range(3))))

    assert cleared.checkpoints_deleted >= len(old)
    collection = engine_collection(front)
    stored = await sequences(collection)
    assert not set(old) & set(stored), "a checkpoint saved before the clear survived it"
    later = {name for name in recorder.saved if recorder.started[name] > recorder.returned["clear"]}
    assert later <= set(stored), f"saves started after the clear returned were removed: {later - set(stored)}"
    reader = drivers.storage(front)
    for checkpoint_id in stored:  # a racing save is either gone whole or there whole
        assert identity(await reader.load(checkpoint_id)) == identity(recorder.saved[checkpoint_id])
    # The run goes on: one more save after all of it is numbered above everything that survived,
    # and the counter stands at it (no counter left behind below a retained checkpoint).
    await recorder.save("after", writers[0], make_checkpoint("after-clear", state={"after": True}))
    stored = await assert_ordered_and_whole(front, reader, _surviving(recorder, stored))
    assert max(stored, key=stored.__getitem__) == "after-clear"
    counter = await raw_counter(collection, scope_of(writers[0]))
    assert counter is not None
    assert counter["sequence"] == stored["after-clear"]
    # The clear's deletes went out while writers' saves were in flight.
    spans = {tag: trace.spans(tag, "allocate", "insert") for tag in tags}
    spans["clear"] = trace.spans("clear", "delete", "delete")
    assert any("clear" in pair for pair in trace.overlapping_tags(spans)), trace.events


def _surviving(recorder: Recorder, stored: dict[str, int]) -> Recorder:
    """The recorder, keeping only the saves the clear did not remove (and the save after it)."""
    kept = Recorder()
    for checkpoint_id, checkpoint in recorder.saved.items():
        if checkpoint_id in stored or checkpoint_id == "after-clear":
            kept.saved[checkpoint_id] = checkpoint
            kept.started[checkpoint_id] = recorder.started[checkpoint_id]
            kept.returned[checkpoint_id] = recorder.returned[checkpoint_id]
    for writer, ids in recorder.by_writer.items():
        kept.by_writer[writer] = [checkpoint_id for checkpoint_id in ids if checkpoint_id in kept.saved]
    return kept


@pytest.mark.parametrize("keep_last", [5, 20], ids=["prune-every-save", "prune-every-other"])
async def test_writers_with_keep_last_keep_exactly_the_newest(
    make_wire_server: WireServerFactory,
    engine_scheduling: Scheduling | None,
    drivers: Drivers,
    keep_last: int,
) -> None:
    front = await make_wire_server(scheduling=engine_scheduling)
    await drivers.storage(front).ensure_indexes()
    trace = Trace()
    tags = [f"writer-{index}" for index in range(WRITERS)]
    writers = [drivers.storage(front, trace=trace, tag=tag, keep_last=keep_last) for tag in tags]
    period = writers[0].options.prune_period
    saves = keep_last // 2 + 3  # enough for every writer to prune what the others stored
    recorder = Recorder()

    async def write(index: int) -> None:
        for step in range(saves):
            await recorder.save(tags[index], writers[index], writer_checkpoint(index, step))

    await asyncio.gather(*(write(index) for index in range(WRITERS)))

    collection = engine_collection(front)
    held = await sequences(collection)
    # ADR 0012: sequential saves leave at most keep_last + period - 1; each other save in flight one
    # more. Once every writer has returned, at most the other writers' last saves remain beyond that.
    assert keep_last <= len(held) <= keep_last + period - 1 + WRITERS - 1, len(held)
    last = 0
    while not last or last % period:  # save until a number is due, no other save in flight
        await writers[0].save(make_checkpoint(f"cp-last-{last}", state={"last": int(last)}))
        last = max((await sequences(collection)).values())
    kept = await sequences(collection)
    assert len(kept) == keep_last
    everything = sorted({*held.values(), *kept.values()})
    assert sorted(kept.values()) == everything[-keep_last:], "what a due prune kept is not the newest"
    reader = drivers.storage(front)
    for checkpoint_id in kept:
        loaded = await reader.load(checkpoint_id)
        expected = recorder.saved.get(checkpoint_id)
        assert expected is None or identity(loaded) == identity(expected)
    assert await reader.list_checkpoint_ids(workflow_name=WORKFLOW) == sorted(kept, key=kept.__getitem__)
    assert trace.spans(tags[0], "allocate", "insert")
    # The prunes went over the wire too: deletes of the run's older checkpoints by several clients.
    assert sum(1 for tag in tags if "delete" in trace.kinds(tag)) >= 2
    assert_saves_in_flight_together(trace, tags)


async def test_concurrent_chunked_saves_of_one_run_load_intact(
    make_wire_server: WireServerFactory, engine_scheduling: Scheduling | None, drivers: Drivers
) -> None:
    front = await make_wire_server(scheduling=engine_scheduling)
    await drivers.storage(front).ensure_indexes()
    trace = Trace()
    tags = [f"writer-{index}" for index in range(3)]
    writers = [drivers.storage(front, trace=trace, tag=tag) for tag in tags]
    # The histories overlap (each a prefix of the next), so the writers race on the same chunks.
    checkpoints = [large(f"cp-{index}", messages=150 + 10 * index) for index in range(6)]
    recorder = Recorder()

    await asyncio.gather(
        *(recorder.save(tags[index % 3], writers[index % 3], item) for index, item in enumerate(checkpoints))
    )

    roots = await raw_checkpoints(engine_collection(front))
    assert len(roots) == len(checkpoints)
    assert {root["payload_format"] for root in roots} == {CHUNKED_PAYLOAD_FORMAT}
    reader = drivers.storage(front)  # another process: it remembers no chunk
    for item in checkpoints:
        assert identity(await reader.load(item.checkpoint_id)) == identity(item)
    listed = await reader.list_checkpoints(workflow_name=WORKFLOW)
    assert sorted(identity(item) for item in listed) == sorted(identity(item) for item in checkpoints)
    # Chunk writes of different clients were in flight together, beside each other's saves.
    spans = {tag: trace.spans(tag, "chunks", "insert") for tag in tags}
    assert len(trace.overlapping_tags(spans)) >= 2, trace.events
