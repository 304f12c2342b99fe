"""keep_last: each run keeps its newest checkpoints, pruned every ``prune_period`` numbers."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from pymongo.errors import AutoReconnect

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    INSERT,
    WORKFLOW,
    ProxyCollection,
    end_counter_grace,
    make_checkpoint,
    make_storage,
    raw_checkpoints,
    save_chain,
)

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)

ALLOCATE = "find_one_and_update"
CUTOFF = "find_one"
PRUNE = "delete_many"


async def stored_ids(collection: InMemoryCollection, session_id: str | None = None) -> list[str]:
    match = {} if session_id is None else {"session_id": session_id}
    return [document["checkpoint_id"] for document in await raw_checkpoints(collection, **match)]


async def test_the_bound_holds_after_every_save_and_the_newest_are_kept(
    collection: InMemoryCollection,
) -> None:
    storage = make_storage(collection, keep_last=25)
    period = storage.options.prune_period
    assert period == 2
    saved: list[str] = []
    for index in range(60):
        saved.append(await storage.save(make_checkpoint(f"cp-{index:03d}")))
        held = await stored_ids(collection)
        assert len(held) <= 25 + period - 1
        assert saved[-1] in held, "a save never removes what it stored"
        assert held == saved[-len(held) :], "what is kept is the newest, in order"
    assert len(await stored_ids(collection)) >= 25


async def test_a_period_of_one_keeps_exactly_keep_last(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, keep_last=3)
    ids = await save_chain(storage, 10)

    assert await stored_ids(collection) == ids[-3:]
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == ids[-1]


async def test_gaps_from_retries_still_keep_keep_last(collection: InMemoryCollection) -> None:
    # Each identical retry spends a number: deleting below `saved - keep_last` would keep fewer.
    storage = make_storage(collection, keep_last=3)
    ids: list[str] = []
    for index in range(6):
        checkpoint = make_checkpoint(f"cp-{index}")
        ids.append(await storage.save(checkpoint))
        await storage.save(checkpoint)

    documents = await raw_checkpoints(collection)
    assert [document["checkpoint_id"] for document in documents] == ids[-3:]
    sequences = [document["sequence"] for document in documents]
    assert sequences[-1] - sequences[0] > 2, "the kept sequences have gaps"


async def test_an_identical_retry_deletes_nothing_more(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, keep_last=3)
    ids = await save_chain(storage, 5)
    retried = make_checkpoint("cp-004", previous="cp-003", state={"i": 4})

    assert await storage.save(retried) == "cp-004"

    assert await stored_ids(collection) == ids[-3:]


async def test_an_old_checkpoint_retried_is_not_removed_by_its_own_save(
    collection: InMemoryCollection,
) -> None:
    # keep_last=20 prunes on even numbers: after 1..21 the first is still stored (21 is not due).
    # Its retry spends 22, which is due; the cut-off stops at the retried checkpoint's sequence.
    storage = make_storage(collection, keep_last=20)
    first = make_checkpoint("cp-first")
    await storage.save(first)
    await save_chain(storage, 20)

    assert await storage.save(first) == "cp-first"

    held = await stored_ids(collection)
    assert held[0] == "cp-first"
    assert len(held) == 21
    await save_chain(storage, 2, prefix="later")
    assert "cp-first" not in await stored_ids(collection), "the next due save prunes it"


async def test_concurrent_writers_of_one_run(collection: InMemoryCollection) -> None:
    writers = [make_storage(collection, keep_last=5) for _ in range(4)]

    async def write(writer: int) -> list[str]:
        return [await writers[writer].save(make_checkpoint(f"cp-{writer}-{index}")) for index in range(10)]

    await asyncio.gather(*(write(writer) for writer in range(len(writers))))

    # A lower sequence inserted late is protected by its own save and pruned by the next one.
    held = await raw_checkpoints(collection)
    assert len(held) <= 5 + len(writers) - 1
    last = await writers[0].save(make_checkpoint("cp-last"))
    documents = await raw_checkpoints(collection)
    assert len(documents) == 5
    assert documents[-1]["checkpoint_id"] == last
    all_sequences = [document["sequence"] for document in held]
    assert [document["sequence"] for document in documents[:-1]] == all_sequences[-4:]


async def test_keep_last_and_ttl_combine(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, keep_last=2, ttl=timedelta(hours=1))
    ids = await save_chain(storage, 5)

    documents = await raw_checkpoints(collection)
    assert [document["checkpoint_id"] for document in documents] == ids[-2:]
    assert all(document.get("expires_at") is not None for document in documents)


async def test_another_run_is_untouched(collection: InMemoryCollection) -> None:
    pruned = make_storage(collection, keep_last=2)
    other = pruned.for_session("session-other")
    unbounded = make_storage(collection, session_id="session-unbounded")
    other_ids = await save_chain(other, 4, prefix="other")
    unbounded_ids = await save_chain(unbounded, 4, prefix="unbounded")

    await save_chain(pruned, 6)

    assert await stored_ids(collection, "session-other") == other_ids[-2:]
    assert await stored_ids(collection, "session-unbounded") == unbounded_ids
    assert len(await stored_ids(collection, "session-001")) == 2


async def test_clear_run_still_removes_the_run(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, keep_last=2)
    await save_chain(storage, 4)

    result = await storage.clear_run()

    assert result.checkpoints_deleted == 2
    assert await stored_ids(collection) == []


# -- round trips -----------------------------------------------------------------------------


async def test_a_pruning_save_costs_two_more(proxy: ProxyCollection) -> None:
    storage = make_storage(proxy, keep_last=2)
    await save_chain(storage, 1)
    end_counter_grace(proxy)
    await storage.save(make_checkpoint("cp-checks"))
    proxy.reset()

    await storage.save(make_checkpoint("cp-steady"))

    assert proxy.trip_names == [ALLOCATE, INSERT, CUTOFF, PRUNE]
    cutoff, prune = proxy.named(CUTOFF)[0], proxy.named(PRUNE)[0]
    assert cutoff.kwargs["skip"] == 1
    assert cutoff.kwargs["sort"] == [("sequence", -1)]
    kept = [document["sequence"] for document in await raw_checkpoints(proxy.inner)]
    assert prune.args[0]["sequence"] == {"$lt": kept[0]}
    assert {"_kind", "scope_discriminator", "session_id"} <= set(prune.args[0])
    assert prune.kwargs["collation"] == cutoff.kwargs["collation"] == {"locale": "simple"}


async def test_fewer_than_keep_last_costs_one_more(proxy: ProxyCollection) -> None:
    storage = make_storage(proxy, keep_last=5)
    await save_chain(storage, 1)
    end_counter_grace(proxy)
    await storage.save(make_checkpoint("cp-checks"))
    proxy.reset()

    await storage.save(make_checkpoint("cp-steady"))

    assert proxy.trip_names == [ALLOCATE, INSERT, CUTOFF]


async def test_saves_between_prunes_cost_two(proxy: ProxyCollection) -> None:
    storage = make_storage(proxy, keep_last=30)  # period 3
    await save_chain(storage, 1)
    end_counter_grace(proxy)
    await storage.save(make_checkpoint("cp-checks"))
    costs: list[int] = []
    for index in range(6):
        proxy.reset()
        await storage.save(make_checkpoint(f"cp-{index}"))
        costs.append(proxy.round_trips)

    assert sorted(costs) == [2, 2, 2, 2, 3, 3], "one save in three reads the cut-off"


# -- failure -----------------------------------------------------------------------------------


@pytest.mark.parametrize("failing", [CUTOFF, PRUNE])
async def test_a_failed_prune_is_logged_and_the_next_catches_up(
    proxy: ProxyCollection, failing: str, caplog: pytest.LogCaptureFixture
) -> None:
    storage = make_storage(proxy, keep_last=2)
    await storage.ensure_indexes()  # as deployed: the only ERROR a save could log is the index report
    await save_chain(storage, 3)
    end_counter_grace(proxy)
    await storage.save(make_checkpoint("cp-checks"))
    proxy.fail(failing, AutoReconnect("connection reset"))
    caplog.set_level(logging.WARNING, logger="agent_framework_mongodb")

    assert await storage.save(make_checkpoint("cp-stored")) == "cp-stored"

    loaded = await storage.load("cp-stored")
    assert loaded.checkpoint_id == "cp-stored"
    assert len(await stored_ids(proxy.inner)) == 3
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "keep_last prune failed" in warnings[0].getMessage()
    assert "connection reset" not in caplog.text
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]

    await storage.save(make_checkpoint("cp-next"))
    assert await stored_ids(proxy.inner) == ["cp-stored", "cp-next"]


async def test_a_failed_prune_never_escalates_a_strict_save(proxy: ProxyCollection) -> None:
    storage: MongoDBCheckpointStorage = make_storage(proxy, keep_last=1, strict_saves=True)
    await storage.ensure_indexes()  # a strict save refuses an unprovisioned collection
    await save_chain(storage, 2)
    end_counter_grace(proxy)
    proxy.fail(PRUNE, AutoReconnect("connection reset"))

    assert await storage.save(make_checkpoint("cp-stored")) == "cp-stored"
