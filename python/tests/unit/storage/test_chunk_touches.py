"""Which remembered chunks a save touches (issue 22, ``chunk_memory.py``).

Within the server's touch window of its last write, and under the same counter lineage and expiry,
a remembered chunk is left alone: a save sends only its new chunks. When the window, the lineage or
the expiry moved, every remembered chunk it references is touched (or written whole), before the
insert: beside the allocation when the storage's estimate of the server's clock foresaw it, or in one
more round trip when only the allocation's reply shows it. What the reply shows decides.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from hypothesis import given
from hypothesis import strategies as st
from pymongo.errors import AutoReconnect

from agent_framework_mongodb.checkpoints import documents
from agent_framework_mongodb.checkpoints.chunk_memory import ChunkMemory, ChunkStamp
from agent_framework_mongodb.checkpoints.chunk_store import (
    COLLECTION_GRACE,
    TOUCH_WINDOW,
    chunk_expiry,
    window_end,
)
from agent_framework_mongodb.checkpoints.codec import canonical_hash
from agent_framework_mongodb.checkpoints.codec.chunks import Chunk
from agent_framework_mongodb.checkpoints.deadlines import DEADLINE_SLACK
from agent_framework_mongodb.checkpoints.options import MAX_OPERATION_TIMEOUT
from agent_framework_mongodb.checkpoints.queries import CHUNK_GENERATION_FIELD, counter_filter
from agent_framework_mongodb.checkpoints.scope import CHUNK_KIND, COUNTER_KIND
from agent_framework_mongodb.checkpoints.sequences import Allocation
from agent_framework_mongodb.errors import MongoDBIntegrationError, MongoDBMappingError
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient, Scheduling

from ._support import (
    INSERT,
    ProxyCollection,
    advance_server_clock,
    end_counter_grace,
    engine_client,
    make_checkpoint,
    make_storage,
    pin_server_clock,
    scope_of,
)


@pytest.fixture
async def collection(engine_scheduling: Scheduling | None) -> AsyncIterator[InMemoryCollection]:
    """The checkpoint collection under ``w: "majority"``, the only write concern under which a save
    leaves touches out (with ``w: 1`` a failover can lose what a stamp vouches for)."""
    engine = InMemoryMongoClient(w="majority", scheduling=engine_scheduling)
    yield engine["checkpoint_db"]["checkpoint_coll"]
    await engine.close()


CHUNK_WRITE = "bulk_write"
ALLOCATE = "find_one_and_update"
_WINDOW_START = datetime(2026, 12, 3, 9, 0, tzinfo=timezone.utc)
"""A touch window's first moment: saves a few seconds after it are well inside the window."""


def _history(count: int) -> list[dict[str, Any]]:
    rng = random.Random(7)
    words = ["north", "south", "east", "west", "up", "down", "left", "right"]
    return [{"text": " ".join(rng.choices(words, k=40)), "n": n} for n in range(count)]


def conversation(step: int, *, run: str = "cp") -> WorkflowCheckpoint:
    """Superstep ``step`` of a conversation growing two messages a step."""
    return make_checkpoint(f"{run}-{step:04d}", state={"history": _history(2 * (step + 1)), "step": step})


def identity(checkpoint: WorkflowCheckpoint) -> str:
    return canonical_hash(checkpoint.to_dict())


def statements(proxy: ProxyCollection) -> list[tuple[int, int]]:
    """Each chunk bulk the proxy saw, as (upserts, touches)."""
    bulks = [call.args[0] for call in proxy.named(CHUNK_WRITE)]
    return [(sum(bool(r._upsert) for r in bulk), sum(not r._upsert for r in bulk)) for bulk in bulks]


async def loads_equal(collection: InMemoryCollection, checkpoint: WorkflowCheckpoint) -> bool:
    """Whether a storage that remembers nothing (another process) loads ``checkpoint`` equal."""
    loaded = await make_storage(collection).load(checkpoint.checkpoint_id)
    return identity(loaded) == identity(checkpoint)


async def chunk_documents(collection: InMemoryCollection) -> list[dict[str, Any]]:
    return await collection.find({"_kind": CHUNK_KIND}).to_list(None)


async def _steady(proxy: ProxyCollection, *, at: datetime = _WINDOW_START) -> Any:
    """A storage past its counter's grace whose chunks were just written, at ``at``."""
    storage = make_storage(proxy)
    await storage.ensure_indexes()
    pin_server_clock(proxy, at - timedelta(minutes=5))
    await storage.save(conversation(100))
    end_counter_grace(proxy)
    pin_server_clock(proxy, at)
    await storage.save(conversation(101))  # touches the chunks (the clock jumped) and stamps them at `at`
    proxy.reset()
    return storage


async def test_a_save_within_the_window_sends_only_its_new_chunks(proxy: ProxyCollection) -> None:
    storage = await _steady(proxy)

    await storage.save(conversation(102))

    assert proxy.waves == [[CHUNK_WRITE, ALLOCATE], [INSERT]]
    ((upserts, touches),) = statements(proxy)
    assert 0 < upserts <= 3
    assert touches == 0
    assert await loads_equal(proxy.inner, conversation(102))


@pytest.mark.parametrize("write_concern", [{}, {"w": 1}], ids=["unstated", "w1"])
async def test_without_a_stated_majority_write_concern_every_remembered_chunk_is_touched(
    write_concern: dict[str, Any],
) -> None:
    engine = InMemoryMongoClient(**write_concern)
    try:
        proxy = ProxyCollection(engine["checkpoint_db"]["checkpoint_coll"])
        storage = await _steady(proxy)

        await storage.save(conversation(102))

        ((upserts, touches),) = statements(proxy)
        assert 0 < upserts <= 3
        assert touches > 10  # every chunk the checkpoint shares with the last one
        assert await loads_equal(proxy.inner, conversation(102))
    finally:
        await engine.close()


async def test_a_save_in_the_next_window_touches_after_the_reply_when_the_estimate_missed(
    proxy: ProxyCollection,
) -> None:
    storage = await _steady(proxy)
    advance_server_clock(proxy, TOUCH_WINDOW)  # the server's clock jumps; the storage's estimate does not

    await storage.save(conversation(102))

    # The estimate deferred the touches; the allocation's reply showed the window passed.
    assert proxy.waves == [[CHUNK_WRITE, ALLOCATE], [CHUNK_WRITE], [INSERT]]
    (_, first_touches), (second_upserts, second_touches) = statements(proxy)
    assert (first_touches, second_upserts) == (0, 0)
    assert second_touches > 0
    server_window = window_end(engine_client(proxy).server_now().replace(tzinfo=timezone.utc))
    touched = [chunk["touched_at"] for chunk in await chunk_documents(proxy.inner)]
    (first_upserts, _), _ = statements(proxy)
    assert touched.count(server_window.replace(tzinfo=None)) == first_upserts + second_touches


async def test_a_save_in_the_last_minute_of_a_window_touches_beside_the_allocation(
    proxy: ProxyCollection,
) -> None:
    storage = await _steady(proxy, at=_WINDOW_START + TOUCH_WINDOW - timedelta(seconds=30))

    await storage.save(conversation(102))

    assert proxy.waves == [[CHUNK_WRITE, ALLOCATE], [INSERT]]
    ((_, touches),) = statements(proxy)
    assert touches > 0


async def test_a_longer_expiry_touches_beside_the_allocation(
    proxy: ProxyCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = make_storage(proxy, ttl=timedelta(hours=1))
    pin_server_clock(proxy, _WINDOW_START)
    await storage.save(conversation(100))
    end_counter_grace(proxy)
    await storage.save(conversation(101))
    before = {chunk["_id"]: chunk["expires_at"] for chunk in await chunk_documents(proxy.inner)}
    later = documents.utc_now() + timedelta(minutes=20)
    monkeypatch.setattr("agent_framework_mongodb.checkpoints.storage.utc_now", lambda: later)
    proxy.reset()

    await storage.save(conversation(102))

    assert proxy.waves == [[CHUNK_WRITE, ALLOCATE], [INSERT]]
    ((upserts, touches),) = statements(proxy)
    assert touches > 0
    expected = chunk_expiry(later + timedelta(hours=1)).replace(tzinfo=None)
    after = {chunk["_id"]: chunk["expires_at"] for chunk in await chunk_documents(proxy.inner)}
    assert list(after.values()).count(expected) == upserts + touches
    assert all(after[address] >= expires for address, expires in before.items())
    assert expected > max(before.values())


async def test_a_clear_run_elsewhere_makes_the_next_save_write_its_chunks_whole(
    proxy: ProxyCollection,
) -> None:
    storage = await _steady(proxy)
    await make_storage(proxy.inner).clear_run()  # another process; the counter goes, and its epoch
    proxy.reset()

    await storage.save(conversation(102))

    # The new counter's lineage differs from the stamps': everything deferred is written whole.
    (_, first_touches), (second_upserts, second_touches) = statements(proxy)
    assert (first_touches, second_touches) == (0, 0)
    assert second_upserts > 0
    assert await loads_equal(proxy.inner, conversation(102))


class _CounterDeleteFails(ProxyCollection):
    """A clear_run that stops after deleting the chunks: its counter delete fails."""

    async def delete_one(self, filter: Any, *args: Any, **kwargs: Any) -> Any:
        if filter.get("_kind") == COUNTER_KIND:
            raise AutoReconnect("connection reset")
        return await super().delete_one(filter, *args, **kwargs)


async def test_a_clear_run_that_stopped_before_the_counter_still_tells_the_writers(
    proxy: ProxyCollection,
) -> None:
    storage = await _steady(proxy)
    with pytest.raises(MongoDBIntegrationError):
        await make_storage(_CounterDeleteFails(proxy.inner)).clear_run()
    assert await chunk_documents(proxy.inner) == []
    counter = await proxy.inner.find_one(counter_filter(scope_of(storage)))
    assert counter is not None
    assert len(counter[CHUNK_GENERATION_FIELD]) == 16

    await storage.save(conversation(102))

    assert await loads_equal(proxy.inner, conversation(102))


class _SaveBeforeChunksGoThenCounterDeleteFails(_CounterDeleteFails):
    """A clear_run raced by a save between its generation update and its chunk delete (so the save
    read the new generation and wrote its chunks under it), that then stops before the counter."""

    def __init__(self, inner: InMemoryCollection, racing: Callable[[], Awaitable[object]]) -> None:
        super().__init__(inner)
        self._racing: Callable[[], Awaitable[object]] | None = racing

    @property
    def raced(self) -> bool:
        return self._racing is None

    async def delete_many(self, filter: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        racing = self._racing
        if filter.get("_kind") == CHUNK_KIND and racing is not None:
            self._racing = None
            await racing()
        return await super().delete_many(filter, *args, **kwargs)


async def test_a_partly_failed_clear_run_raced_by_a_save_still_tells_that_writer(
    proxy: ProxyCollection,
) -> None:
    """Issue 29: the writer read the generation the clear set before deleting chunks, so that one
    cannot tell it its chunks went; the clear marks the counter again after the chunk delete."""
    storage = await _steady(proxy)
    clearing = _SaveBeforeChunksGoThenCounterDeleteFails(
        proxy.inner,
        lambda: storage.save(conversation(102)),  # its chunks go right after
    )
    with pytest.raises(MongoDBIntegrationError):
        await make_storage(clearing).clear_run()
    assert clearing.raced
    assert await chunk_documents(proxy.inner) == []

    await storage.save(conversation(103))  # in the same window as 102, whose chunks it shares

    assert await loads_equal(proxy.inner, conversation(103))


@pytest.mark.parametrize("generation", [7, "x", b"short", None])
async def test_a_counter_with_an_invalid_chunk_generation_is_never_relied_on(
    proxy: ProxyCollection, generation: object
) -> None:
    storage = await _steady(proxy)
    await proxy.inner.update_one(
        counter_filter(scope_of(storage)), {"$set": {CHUNK_GENERATION_FIELD: generation}}
    )
    await proxy.inner.delete_many({"_kind": CHUNK_KIND})  # what such a counter may be hiding

    await storage.save(conversation(102))
    await storage.save(conversation(103))

    for step in (102, 103):
        assert await loads_equal(proxy.inner, conversation(step))


async def test_a_chunk_deleted_by_hand_is_written_again_in_the_next_window(proxy: ProxyCollection) -> None:
    storage = await _steady(proxy)
    await proxy.inner.delete_many({"_kind": CHUNK_KIND})  # by hand: no clear_run, prune or TTL

    # Within the window the storage cannot tell (the documented cost of leaving touches out), and
    # the load says so clearly rather than returning a partial checkpoint.
    await storage.save(conversation(102))
    with pytest.raises(MongoDBMappingError):
        await make_storage(proxy.inner).load(conversation(102).checkpoint_id)

    advance_server_clock(proxy, TOUCH_WINDOW)
    await storage.save(conversation(103))
    assert await loads_equal(proxy.inner, conversation(103))


async def test_a_failed_follow_up_write_stores_no_checkpoint_and_a_retry_succeeds(
    proxy: ProxyCollection,
) -> None:
    storage = await _steady(proxy)
    advance_server_clock(proxy, TOUCH_WINDOW)
    same = make_checkpoint("cp-same", state={"history": _history(2 * 102), "step": 101})
    proxy.fail(CHUNK_WRITE, AutoReconnect("connection reset"))  # every chunk is deferred: the follow-up

    with pytest.raises(MongoDBIntegrationError):
        await storage.save(same)
    assert await proxy.inner.find_one({"checkpoint_id": "cp-same"}) is None
    assert proxy.waves == [[ALLOCATE], [CHUNK_WRITE]]

    assert await storage.save(same) == "cp-same"
    assert await loads_equal(proxy.inner, same)


def _chunk(n: int) -> Chunk:
    return Chunk(bytes([n]) * 32, b"data")


def _saved(memory: ChunkMemory, chunks: list[Chunk], allocation: Allocation) -> None:
    """What a save does with its memory: plan, learn the reply, remember."""
    writes = memory.plan(chunks, None)
    upserts, touches = memory.follow_up(writes, allocation)
    memory.remember(writes, allocation, [*upserts, *touches])


def _allocation(at: datetime, lineage: bytes = b"e" * 16) -> Allocation:
    return Allocation(1, b"e" * 16, at, lineage)


def test_the_reply_decides_what_a_deferred_chunk_still_needs() -> None:
    memory = ChunkMemory(leave_out_touches=True)
    stamped = _WINDOW_START + timedelta(seconds=1)
    _saved(memory, [_chunk(1), _chunk(2)], _allocation(stamped))

    writes = memory.plan([_chunk(1), _chunk(2), _chunk(3)], None)
    assert (writes.upserts, writes.touches, writes.deferred) == ((_chunk(3),), (), (_chunk(1), _chunk(2)))
    in_window = stamped + timedelta(minutes=10)
    assert memory.follow_up(writes, _allocation(in_window)) == ([], [])
    next_window = _WINDOW_START + TOUCH_WINDOW
    assert memory.follow_up(writes, _allocation(next_window)) == ([], [_chunk(1), _chunk(2)])
    cleared = _allocation(in_window, lineage=b"f" * 16)
    assert memory.follow_up(writes, cleared) == ([_chunk(1), _chunk(2)], [])
    no_date = Allocation(1, b"e" * 16, None, b"e" * 16)
    assert memory.follow_up(writes, no_date) == ([], [_chunk(1), _chunk(2)])


def test_a_write_beside_an_allocation_without_a_date_or_lineage_is_touched_next_time() -> None:
    memory = ChunkMemory(leave_out_touches=True)
    for allocation in (Allocation(1, b"e" * 16, None, b"e" * 16), _allocation(_WINDOW_START, lineage=None)):  # type: ignore[arg-type]
        _saved(memory, [_chunk(1)], allocation)
        _saved(memory, [_chunk(9)], _allocation(_WINDOW_START + timedelta(seconds=1)))
        writes = memory.plan([_chunk(1)], None)
        assert writes.touches == (_chunk(1),)
        assert not writes.deferred


_MOMENTS = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(timezone.utc)
)


@given(stamped=_MOMENTS, gap=st.timedeltas(min_value=timedelta(0), max_value=2 * TOUCH_WINDOW))
def test_a_covered_chunk_outlives_the_save_that_left_its_touch_out(stamped: datetime, gap: timedelta) -> None:
    """The bound ``chunk_memory.py`` argues, over the constants as they are: the stamped write ran
    within a save's longest life of its allocation, and a covered save inserts within as long of
    its own; a collection running across that insert deletes within as long again, and still
    spares the chunk."""
    expiry = chunk_expiry(None)
    stamp = ChunkStamp(b"e" * 16, window_end(stamped), expiry)
    later = stamped + gap
    covered = stamp.covers(_allocation(later), expiry)
    assert covered is (later < window_end(stamped))  # exactly the rest of the stamp's window
    if not covered:
        return
    longest = timedelta(seconds=MAX_OPERATION_TIMEOUT) + timedelta(seconds=DEADLINE_SLACK)
    earliest_touch = stamped - longest
    latest_insert = later + longest
    # A collection that read the run's references just before that insert (so it missed the new
    # root) deletes within its own longest operation, and must still spare the chunk (issue 29).
    latest_delete = latest_insert + longest
    assert latest_delete - COLLECTION_GRACE < earliest_touch
