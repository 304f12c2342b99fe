"""``MongoDBCheckpointCatalog``: a tenant's runs, counted, pruned and cleared without a placeholder run."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta, timezone

import pytest
from pymongo.errors import AutoReconnect

import agent_framework_mongodb.checkpoints.runs as runs_module
import agent_framework_mongodb.checkpoints.summaries as summaries_module
from agent_framework_mongodb import (
    MongoDBCheckpointCatalog,
    MongoDBCheckpointStorage,
    MongoDBConfigurationError,
    MongoDBSkipReason,
    MongoDBTransientPersistenceError,
    MongoDBTransientRetrievalError,
)
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient, expire_documents

from ._support import (
    APPLICATION,
    TENANT,
    WORKFLOW,
    ProxyCollection,
    advance_server_clock,
    make_checkpoint,
    raw_checkpoints,
    save_chain,
)

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)


def make_catalog(collection: object, **settings: object) -> MongoDBCheckpointCatalog:
    return MongoDBCheckpointCatalog(collection, tenant_id=TENANT, application_id=APPLICATION, **settings)  # type: ignore[arg-type]


async def counts(catalog: MongoDBCheckpointCatalog) -> dict[str, tuple[int, int]]:
    """Each run's (retained checkpoints, saves)."""
    return {run.session_id: (run.checkpoint_count, run.saves) async for run in catalog.iter_runs()}


async def stored(collection: InMemoryCollection, session: str) -> int:
    return len(await raw_checkpoints(collection, session_id=session))


# -- construction and for_session --------------------------------------------------------------


async def test_for_session_opens_a_run_with_the_catalogs_settings_on_its_collection(
    collection: InMemoryCollection,
) -> None:
    catalog = make_catalog(collection, keep_last=2, page_size=7)
    storage = catalog.for_session(WORKFLOW, "run-a")
    assert isinstance(storage, MongoDBCheckpointStorage)
    assert (storage.options.tenant_id, storage.options.application_id) == (TENANT, APPLICATION)
    assert (storage.options.workflow_name, storage.options.session_id) == (WORKFLOW, "run-a")
    assert (storage.options.keep_last, storage.options.page_size) == (2, 7)
    await save_chain(storage, 5)
    assert await stored(collection, "run-a") == 2
    assert (catalog.tenant_id, catalog.application_id) == (TENANT, APPLICATION)


@pytest.mark.parametrize(
    "settings",
    [{"keep_last": 0}, {"page_size": 0}, {"operation_timeout": -1}, {"tenant_id": " padded"}, {"ttl": 5}],
)
def test_an_invalid_setting_is_refused_at_construction(
    collection: InMemoryCollection, settings: dict[str, object]
) -> None:
    arguments: dict[str, object] = {"tenant_id": TENANT, **settings}
    with pytest.raises(MongoDBConfigurationError):
        MongoDBCheckpointCatalog(collection, **arguments)  # type: ignore[arg-type]


def test_sources_are_resolved_as_the_storages_are(collection: InMemoryCollection) -> None:
    with pytest.raises(MongoDBConfigurationError, match="exactly one"):
        MongoDBCheckpointCatalog(collection, tenant_id=TENANT, connection_string="mongodb://localhost")
    with pytest.raises(MongoDBConfigurationError):
        make_catalog(collection).for_session(WORKFLOW, "")


async def test_connect_pings_and_a_closed_catalog_refuses_its_operations() -> None:
    client = InMemoryMongoClient()
    catalog = await MongoDBCheckpointCatalog.connect(mongo_client=client, tenant_id=TENANT, wait_timeout=1)
    assert (await catalog.list_runs()).runs == ()
    await catalog.close()  # an injected client stays open
    assert (await catalog.list_runs()).runs == ()
    async with MongoDBCheckpointCatalog(
        tenant_id=TENANT, connection_string="mongodb://127.0.0.1:1"
    ) as catalog:
        pass  # it built its client, and closes it here: nothing was sent
    with pytest.raises(MongoDBConfigurationError, match="closed"):
        await catalog.list_runs()
    with pytest.raises(MongoDBConfigurationError, match="closed"):
        catalog.for_session(WORKFLOW, "run-a")


# -- listing and counts ------------------------------------------------------------------------


async def test_list_runs_is_the_storages_with_shared_cursors(collection: InMemoryCollection) -> None:
    catalog = make_catalog(collection)
    for index in range(5):
        await catalog.for_session(WORKFLOW, f"run-{index}").save(make_checkpoint(f"cp-{index}"))
        advance_server_clock(collection, timedelta(seconds=1))
    storage = catalog.for_session(WORKFLOW, "run-0")
    first = await catalog.list_runs(limit=2)
    assert first == await storage.list_runs(limit=2)
    assert first.next_cursor is not None
    following = await storage.list_runs(cursor=first.next_cursor, limit=2)
    assert following == await catalog.list_runs(cursor=first.next_cursor, limit=2)
    assert [run.session_id for run in first.runs + following.runs] == ["run-4", "run-3", "run-2", "run-1"]
    assert [run.session_id async for run in catalog.iter_runs()] == [
        f"run-{index}" for index in range(4, -1, -1)
    ]


async def test_counts_are_the_checkpoints_retained_after_keep_last_and_the_saves_made(
    collection: InMemoryCollection,
) -> None:
    # issue 21: with keep_last=3 after 22 saves the summary said 22 under "checkpoints".
    catalog = make_catalog(collection, keep_last=3)
    await save_chain(catalog.for_session(WORKFLOW, "pruned"), 22)
    await save_chain(make_catalog(collection, keep_last=20).for_session(WORKFLOW, "periodic"), 25)
    assert await counts(catalog) == {
        "periodic": (await stored(collection, "periodic"), 25),
        "pruned": (3, 22),
    }
    assert await stored(collection, "periodic") in range(20, 22), "keep_last=20 prunes every second number"


async def test_counts_follow_deletes_expiry_and_clear_run(collection: InMemoryCollection) -> None:
    catalog = make_catalog(collection, ttl=timedelta(hours=1))
    storage = catalog.for_session(WORKFLOW, "run-a")
    await storage.ensure_indexes()
    ids = await save_chain(storage, 4)
    await save_chain(make_catalog(collection).for_session(WORKFLOW, "permanent"), 2)
    assert await storage.delete(ids[0])
    assert not await storage.delete(ids[0])
    assert await counts(catalog) == {"run-a": (3, 4), "permanent": (2, 2)}
    # A later save that lives longer keeps the run's counter; the TTL monitor then removes the
    # earlier checkpoints without telling anyone, and the count still follows: it is read, not kept.
    later = make_catalog(collection, ttl=timedelta(hours=3)).for_session(WORKFLOW, "run-a")
    await later.save(make_checkpoint("cp-later"))
    expire_documents(collection, now=datetime.now(timezone.utc) + timedelta(hours=2))
    assert await counts(catalog) == {"run-a": (1, 5), "permanent": (2, 2)}
    cleared = await catalog.clear_run(WORKFLOW, "permanent")
    assert (cleared.checkpoints_deleted, cleared.counter_deleted) == (2, 1)
    assert await counts(catalog) == {"run-a": (1, 5)}


async def test_a_recovering_save_is_counted_once(collection: InMemoryCollection) -> None:
    # The counter vanished (TTL, an operator) while checkpoints remain: the next save's allocation
    # reads the retained maximum and allocates again above it, two counter updates for one save.
    catalog = make_catalog(collection)
    storage = catalog.for_session(WORKFLOW, "run-a")
    await save_chain(storage, 3)
    await collection.delete_many({"_kind": "workflow_checkpoint_counter"})
    await storage.save(make_checkpoint("cp-after"))
    (run,) = (await catalog.list_runs()).runs
    assert (run.latest_sequence, run.checkpoint_count, run.saves) == (4, 4, 1), (
        "saves since the counter's creation"
    )


async def test_a_run_whose_checkpoints_are_gone_counts_none(collection: InMemoryCollection) -> None:
    catalog = make_catalog(collection)
    await save_chain(catalog.for_session(WORKFLOW, "run-a"), 3)
    await collection.delete_many({"_kind": "workflow_checkpoint"})
    ((session, (retained, saves)),) = (await counts(catalog)).items()
    assert (session, retained, saves) == ("run-a", 0, 3)


async def test_a_count_stops_past_its_limit_and_says_so(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs_module, "RUN_COUNT_LIMIT", 4)
    monkeypatch.setattr(summaries_module, "RUN_COUNT_LIMIT", 4)
    catalog = make_catalog(collection)
    await save_chain(catalog.for_session(WORKFLOW, "long"), 6)
    await save_chain(catalog.for_session(WORKFLOW, "short"), 4)
    runs = {run.session_id: run async for run in catalog.iter_runs()}
    assert (runs["long"].checkpoint_count, runs["long"].checkpoint_count_capped) == (4, True)
    assert (runs["short"].checkpoint_count, runs["short"].checkpoint_count_capped) == (4, False)


async def test_a_page_of_runs_is_one_round_trip_whatever_it_counts(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    catalog = make_catalog(proxy)
    for index in range(3):
        await save_chain(catalog.for_session(WORKFLOW, f"run-{index}"), 4, prefix=f"r{index}")
    proxy.reset()
    page = await catalog.list_runs(limit=2)
    assert proxy.trip_names == ["aggregate"]
    assert [run.checkpoint_count for run in page.runs] == [4, 4]
    proxy.reset()
    await catalog.list_runs(cursor=page.next_cursor, limit=2)
    assert proxy.trip_names == ["aggregate"]


async def test_a_failed_page_is_translated(collection: InMemoryCollection) -> None:
    catalog = make_catalog(collection)
    await save_chain(catalog.for_session(WORKFLOW, "run-a"), 1)
    collection.fail_next("aggregate", AutoReconnect("MARKER-driver-text"))
    with pytest.raises(MongoDBTransientRetrievalError) as raised:
        await catalog.list_runs()
    assert "MARKER" not in str(raised.value)


async def test_concurrent_saves_and_listings_count_what_is_stored(collection: InMemoryCollection) -> None:
    # Under each seed's server-like interleaving: saves of three runs (keep_last prunes as they go)
    # race with listings; once the saves return, each count is exactly what the run stores, and
    # each save is counted once, whatever the allocations re-tried.
    catalog = make_catalog(collection, keep_last=4)

    async def save_run(session: str) -> None:
        await save_chain(catalog.for_session(WORKFLOW, session), 9, prefix=session)

    async def list_meanwhile() -> None:
        for _ in range(5):
            for run in (await catalog.list_runs()).runs:
                assert 0 <= run.checkpoint_count <= 4 + 1, "keep_last + one in flight"
                assert run.saves <= 9

    await asyncio.gather(*(save_run(f"run-{index}") for index in range(3)), list_meanwhile())
    assert await counts(catalog) == {
        f"run-{index}": (await stored(collection, f"run-{index}"), 9) for index in range(3)
    }
    assert {await stored(collection, f"run-{index}") for index in range(3)} == {4}


async def test_concurrent_writers_of_one_run_count_each_save_once(collection: InMemoryCollection) -> None:
    catalog = make_catalog(collection)
    writers = [catalog.for_session(WORKFLOW, "shared") for _ in range(4)]
    await asyncio.gather(
        *(writer.save(make_checkpoint(f"cp-{index}")) for index, writer in enumerate(writers))
    )
    await asyncio.gather(*(writer.save(make_checkpoint("cp-0")) for writer in writers))  # identical retries
    (run,) = (await catalog.list_runs()).runs
    assert (run.checkpoint_count, run.saves) == (4, 8)


# -- prune -------------------------------------------------------------------------------------


async def age(
    collection: InMemoryCollection, catalog: MongoDBCheckpointCatalog, *, waiting: str | None = None
) -> None:
    """Runs "old" (and ``waiting``, pending input) saved ten days ago by the server's clock, "new" now."""
    advance_server_clock(collection, -timedelta(days=10))
    await save_chain(catalog.for_session(WORKFLOW, "old"), 2)
    if waiting is not None:
        paused = make_checkpoint("cp-paused")
        paused.pending_request_info_events = {"request-1": {"question": "approve?"}}  # type: ignore[dict-item]
        await catalog.for_session(WORKFLOW, waiting).save(paused)
    advance_server_clock(collection, timedelta(days=10))
    await save_chain(catalog.for_session(WORKFLOW, "new"), 1)


async def test_a_prune_plan_skips_runs_waiting_for_input_unless_asked(collection: InMemoryCollection) -> None:
    catalog = make_catalog(collection)
    await age(collection, catalog, waiting="paused")
    plan = await catalog.plan_prune(older_than=timedelta(days=7))
    assert [run.session_id for run in plan.runs] == ["old"]
    assert [(skip.run.session_id, skip.reason) for skip in plan.skipped] == [
        ("paused", MongoDBSkipReason.WAITING_FOR_INPUT)
    ]
    included = await catalog.plan_prune(older_than=timedelta(days=7), include_waiting=True)
    assert sorted(run.session_id for run in included.runs) == ["old", "paused"]
    assert included.skipped == ()
    assert (await catalog.plan_prune(older_than=timedelta(days=11))).runs == ()
    assert sorted(await counts(catalog)) == ["new", "old", "paused"], "planning clears nothing"


async def test_the_servers_clock_decides_what_is_idle(collection: InMemoryCollection) -> None:
    catalog = make_catalog(collection)
    await save_chain(catalog.for_session(WORKFLOW, "run-a"), 1)
    assert (await catalog.plan_prune(older_than=timedelta(hours=1))).runs == ()
    advance_server_clock(collection, timedelta(hours=2))  # the client's clock stays where it is
    assert [run.session_id for run in (await catalog.plan_prune(older_than=timedelta(hours=1))).runs] == [
        "run-a"
    ]


async def test_prune_clears_the_planned_runs_and_skips_one_saved_since(
    collection: InMemoryCollection,
) -> None:
    catalog = make_catalog(collection)
    await age(collection, catalog, waiting="paused")
    advance_server_clock(collection, -timedelta(days=10))
    await save_chain(catalog.for_session(WORKFLOW, "resumed"), 1)
    advance_server_clock(collection, timedelta(days=10))
    plan = await catalog.plan_prune(older_than=timedelta(days=7))
    assert sorted(run.session_id for run in plan.runs) == ["old", "resumed"]
    # Between the plan and the prune, "resumed" saves a checkpoint waiting for input.
    waiting = make_checkpoint("cp-question")
    waiting.pending_request_info_events = {"request-1": {"question": "approve?"}}  # type: ignore[dict-item]
    await catalog.for_session(WORKFLOW, "resumed").save(waiting)

    result = await catalog.prune(plan)

    assert [(done.run.session_id, done.result.checkpoints_deleted) for done in result.cleared] == [("old", 2)]
    assert [(skip.run.session_id, skip.reason) for skip in result.skipped] == [
        ("paused", MongoDBSkipReason.WAITING_FOR_INPUT),
        ("resumed", MongoDBSkipReason.SAVED_SINCE_PLANNED),
    ]
    assert sorted(await counts(catalog)) == ["new", "paused", "resumed"]
    assert await stored(collection, "resumed") == 2


async def test_prune_refuses_another_catalogs_plan_and_bad_durations(collection: InMemoryCollection) -> None:
    catalog = make_catalog(collection)
    plan = await catalog.plan_prune(older_than=timedelta(days=1))
    other = MongoDBCheckpointCatalog(collection, tenant_id="tenant-other")
    with pytest.raises(MongoDBConfigurationError):
        await other.prune(plan)
    with pytest.raises(MongoDBConfigurationError):
        await catalog.prune(dataclasses.replace(plan, application_id=None))
    for older_than in (timedelta(0), timedelta(days=-1), 3600):
        with pytest.raises(MongoDBConfigurationError):
            await catalog.plan_prune(older_than=older_than)  # type: ignore[arg-type]


async def test_a_failed_clear_stops_the_prune_and_planning_again_finds_the_rest(
    collection: InMemoryCollection,
) -> None:
    catalog = make_catalog(collection)
    advance_server_clock(collection, -timedelta(days=10))
    for index in range(3):
        await save_chain(catalog.for_session(WORKFLOW, f"old-{index}"), 1, prefix=f"o{index}")
    advance_server_clock(collection, timedelta(days=10))
    plan = await catalog.plan_prune(older_than=timedelta(days=7))
    assert len(plan.runs) == 3
    collection.fail_next("delete_many", AutoReconnect("lost"), times=1)
    with pytest.raises(MongoDBTransientPersistenceError):
        await catalog.prune(plan)
    again = await catalog.plan_prune(older_than=timedelta(days=7))
    assert len(again.runs) == 3, "the first clear failed before anything was deleted"
    result = await catalog.prune(again)
    assert len(result.cleared) == 3
    assert await counts(catalog) == {}
