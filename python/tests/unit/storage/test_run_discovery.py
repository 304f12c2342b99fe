"""``list_runs``: the tenant's runs from their counter documents, newest activity first."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from bson.int64 import Int64

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.checkpoints.queries import RUN_SUMMARY_PROJECTION
from agent_framework_mongodb.errors import MongoDBConfigurationError
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    INSERT,
    TENANT,
    WORKFLOW,
    ProxyCollection,
    advance_server_clock,
    end_counter_grace,
    make_checkpoint,
    make_storage,
    raw_checkpoints,
    raw_counter,
    save_chain,
    scope_of,
)

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)

OTHER_WORKFLOW = "other-flow"


def tick(collection: object) -> None:
    """Let the server clock move on, so the next save's activity is strictly later."""
    advance_server_clock(collection, timedelta(seconds=1))


async def save_runs(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage, count: int
) -> list[str]:
    """Save one checkpoint in each of ``count`` runs, oldest first; return their session ids."""
    sessions = [f"run-{index:02d}" for index in range(count)]
    for session in sessions:
        await storage.for_session(session).save(make_checkpoint(f"{session}-cp"))
        tick(collection)
    return sessions


async def all_runs(storage: MongoDBCheckpointStorage, **filters: object) -> list[str]:
    sessions: list[str] = []
    cursor: str | None = None
    while True:
        page = await storage.list_runs(cursor=cursor, limit=2, **filters)  # type: ignore[arg-type]
        sessions.extend(run.session_id for run in page.runs)
        if page.next_cursor is None:
            return sessions
        cursor = page.next_cursor


async def test_runs_are_listed_newest_activity_first(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    sessions = await save_runs(collection, storage, 3)
    await storage.for_session(sessions[0]).save(make_checkpoint("run-00-again"))

    page = await storage.list_runs()

    assert [run.session_id for run in page.runs] == [sessions[0], sessions[2], sessions[1]]
    assert page.next_cursor is None
    assert page.runs[0].updated_at > page.runs[1].updated_at > page.runs[2].updated_at
    assert page.runs[0].updated_at.tzinfo is not None


async def test_summary_fields_come_from_the_latest_save(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await save_chain(storage, 3)
    (run,) = (await storage.list_runs()).runs

    assert (run.workflow_name, run.session_id) == (WORKFLOW, storage.options.session_id)
    assert run.latest_checkpoint_id == "cp-002"
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert latest is not None
    assert run.latest_checkpoint_id == latest.checkpoint_id
    assert (run.checkpoint_count, run.saves, run.checkpoint_count_capped) == (3, 3, False)
    assert run.latest_sequence == (await raw_counter(collection, scope_of(storage)) or {})["sequence"]
    assert run.waiting_for_input is False


async def test_an_identical_retry_names_the_stored_checkpoint_and_counts_as_a_save_not_a_checkpoint(
    storage: MongoDBCheckpointStorage,
) -> None:
    checkpoint = make_checkpoint("cp-retry")
    await storage.save(checkpoint)
    await storage.save(checkpoint)

    (run,) = (await storage.list_runs()).runs

    assert run.latest_checkpoint_id == "cp-retry"
    assert run.saves == 2, "both calls of save are counted"
    assert run.checkpoint_count == 1 == len(await storage.list_checkpoint_ids(workflow_name=WORKFLOW))


async def test_a_late_check_does_not_rename_the_latest_checkpoint(collection: InMemoryCollection) -> None:
    # Found by the engine's seeded scheduling (ADR 0015). The first saves after a new counter's
    # grace each read the retained maximum and mark the counter checked. A allocates 2 and is
    # slow to read; B allocates 3, reads, marks and is slow to insert; then A reads, marks and
    # inserts. A mark spends no number, so it must not name A as the latest checkpoint (nor
    # copy A's waiting_for_input): the summary would name A at sequence 3, where B is stored.
    proxy = ProxyCollection(collection)
    writer_a, writer_b = make_storage(collection), make_storage(proxy)
    await writer_a.save(make_checkpoint("cp-first"))
    end_counter_grace(collection)
    paused = make_checkpoint("cp-a")
    paused.pending_request_info_events = {"request-1": {"question": "approve?"}}  # type: ignore[dict-item]
    held_read = collection.hold("find_one")
    saving_a = asyncio.ensure_future(writer_a.save(paused))
    await held_read.reached()
    gate = proxy.block(INSERT)
    saving_b = asyncio.ensure_future(writer_b.save(make_checkpoint("cp-b")))
    await asyncio.wait_for(proxy.entered[INSERT].wait(), timeout=5)
    held_read.release()
    await saving_a
    gate.set()
    await saving_b

    (run,) = (await writer_a.list_runs()).runs
    stored = {d["checkpoint_id"]: d["sequence"] for d in await raw_checkpoints(collection)}
    assert stored == {"cp-first": 1, "cp-a": 2, "cp-b": 3}
    assert (run.latest_checkpoint_id, run.latest_sequence) == ("cp-b", 3)
    assert run.waiting_for_input is False
    counter = await raw_counter(collection, scope_of(writer_a))
    assert counter is not None
    assert counter["sequence_checked"] is True, "the checks still mark the counter"


async def test_waiting_for_input_follows_the_latest_checkpoints_pending_requests(
    storage: MongoDBCheckpointStorage,
) -> None:
    paused = make_checkpoint("cp-paused")
    paused.pending_request_info_events = {"request-1": {"question": "approve?"}}  # type: ignore[dict-item]
    await storage.save(make_checkpoint("cp-before"))
    await storage.save(paused)
    assert [run.waiting_for_input for run in (await storage.list_runs()).runs] == [True]

    await storage.save(make_checkpoint("cp-answered"))
    assert [run.waiting_for_input for run in (await storage.list_runs()).runs] == [False]


async def test_pages_follow_cursors_to_the_end(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    sessions = await save_runs(collection, storage, 5)

    first = await storage.list_runs(limit=2)
    assert first.next_cursor is not None
    assert await all_runs(storage) == sessions[::-1]


async def test_a_full_last_page_has_a_cursor_to_an_empty_page(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await save_runs(collection, storage, 2)
    page = await storage.list_runs(limit=2)
    assert page.next_cursor is not None
    following = await storage.list_runs(cursor=page.next_cursor, limit=2)
    assert following.runs == ()
    assert following.next_cursor is None


async def test_runs_with_the_same_activity_time_are_paged_by_id_without_loss(
    storage: MongoDBCheckpointStorage,
) -> None:
    # No clock tick: every save falls in the same millisecond order at most; _id breaks ties.
    sessions = [f"same-{index}" for index in range(5)]
    for session in sessions:
        await storage.for_session(session).save(make_checkpoint(f"{session}-cp"))

    listed = await all_runs(storage)

    assert sorted(listed) == sessions
    assert len(listed) == len(set(listed))


async def test_paging_is_stable_under_concurrent_saves(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    sessions = await save_runs(collection, storage, 6)
    first = await storage.list_runs(limit=2)
    assert [run.session_id for run in first.runs] == [sessions[5], sessions[4]]

    # Meanwhile: a listed run and a not-yet-listed run save again, and a new run starts.
    await asyncio.gather(
        storage.for_session(sessions[5]).save(make_checkpoint("again-5")),
        storage.for_session(sessions[1]).save(make_checkpoint("again-1")),
        storage.for_session("run-new").save(make_checkpoint("new-cp")),
    )

    rest: list[str] = []
    cursor = first.next_cursor
    while cursor is not None:
        page = await storage.list_runs(cursor=cursor, limit=2)
        rest.extend(run.session_id for run in page.runs)
        cursor = page.next_cursor
    # Runs saved meanwhile moved in front of the cursor; every other run appears exactly once.
    assert rest == [sessions[3], sessions[2], sessions[0]]


async def test_workflow_filter_and_for_workflow(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.save(make_checkpoint("mine"))
    tick(collection)
    other = storage.for_workflow(OTHER_WORKFLOW, "other-session")
    await other.save(make_checkpoint("theirs", workflow_name=OTHER_WORKFLOW))

    everything = await storage.list_runs()
    only_other = await storage.list_runs(workflow_name=OTHER_WORKFLOW)
    only_mine = await storage.list_runs(workflow_name=WORKFLOW)

    assert [(run.workflow_name, run.session_id) for run in everything.runs] == [
        (OTHER_WORKFLOW, "other-session"),
        (WORKFLOW, storage.options.session_id),
    ]
    assert [run.latest_checkpoint_id for run in only_other.runs] == ["theirs"]
    assert [run.latest_checkpoint_id for run in only_mine.runs] == ["mine"]
    (summary,) = only_other.runs
    opened = storage.for_workflow(summary.workflow_name, summary.session_id)
    assert (await opened.load("theirs")).checkpoint_id == "theirs"
    assert opened.options.tenant_id == TENANT


async def test_other_tenants_and_applications_are_never_listed(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await storage.save(make_checkpoint("mine"))
    await make_storage(collection, tenant_id="tenant-other", session_id="t").save(make_checkpoint("t-cp"))
    await make_storage(collection, application_id="app-other", session_id="a").save(make_checkpoint("a-cp"))
    no_application = make_storage(collection, application_id=None, session_id="n")
    await no_application.save(make_checkpoint("n-cp"))

    assert [run.latest_checkpoint_id for run in (await storage.list_runs()).runs] == ["mine"]
    # application_id=None lists exactly the runs stored without an application.
    assert [run.latest_checkpoint_id for run in (await no_application.list_runs()).runs] == ["n-cp"]


async def test_a_foreign_or_altered_cursor_is_refused(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await save_runs(collection, storage, 3)
    cursor = (await storage.list_runs(limit=1)).next_cursor
    assert cursor is not None
    other_tenant = make_storage(collection, tenant_id="tenant-other")
    other_application = make_storage(collection, application_id="app-other")
    checkpoint_cursor = await storage.for_session("run-00").list_checkpoint_page(
        workflow_name=WORKFLOW, limit=1
    )
    with pytest.raises(MongoDBConfigurationError, match="another listing"):
        await other_tenant.list_runs(cursor=cursor)
    with pytest.raises(MongoDBConfigurationError, match="another listing"):
        await other_application.list_runs(cursor=cursor)
    with pytest.raises(MongoDBConfigurationError, match="another listing"):
        await storage.list_runs(cursor=cursor, workflow_name=WORKFLOW)
    assert checkpoint_cursor.next_cursor is not None
    with pytest.raises(MongoDBConfigurationError, match="another listing"):
        await storage.list_runs(cursor=checkpoint_cursor.next_cursor)
    with pytest.raises(MongoDBConfigurationError, match="another run"):
        await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=cursor)
    with pytest.raises(MongoDBConfigurationError):
        await storage.list_runs(cursor=cursor[:-1] + ("0" if cursor[-1] != "0" else "1"))


async def test_invalid_limits_and_workflow_names_are_refused(storage: MongoDBCheckpointStorage) -> None:
    for limit in (0, storage.options.max_page_size + 1, True):
        with pytest.raises(MongoDBConfigurationError, match="limit"):
            await storage.list_runs(limit=limit)
    with pytest.raises(MongoDBConfigurationError, match="workflow_name"):
        await storage.list_runs(workflow_name="")


async def test_a_cleared_run_disappears(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    await save_runs(collection, storage, 2)
    await storage.for_session("run-00").clear_run()

    assert [run.session_id for run in (await storage.list_runs()).runs] == ["run-01"]


async def test_each_page_costs_one_round_trip_and_reads_no_payload(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    for index in range(3):
        await proxied_storage.for_session(f"run-{index}").save(make_checkpoint(f"cp-{index}"))
    proxy.reset()

    page = await proxied_storage.list_runs(limit=2)
    assert len(proxy.trip_names) == 1
    proxy.reset()
    await proxied_storage.list_runs(cursor=page.next_cursor, limit=2)
    assert len(proxy.trip_names) == 1
    (call,) = proxy.named("aggregate")
    assert call.args[0][-1] == {"$project": RUN_SUMMARY_PROJECTION}, (
        "counter fields and a count, never a payload"
    )


@pytest.mark.parametrize("width", [int, Int64])
async def test_counts_read_the_same_at_either_bson_integer_width(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage, width: type[int]
) -> None:
    # The server may store the counter's numbers as int32 or int64; pymongo returns Int64 for the
    # latter. Neither must change what a summary reports.
    await save_chain(storage, 2)
    scope = scope_of(storage)
    await collection.update_one(
        {"_id": scope.counter_document_id}, {"$set": {"allocations": width(7), "sequence": width(2)}}
    )

    (run,) = (await storage.list_runs()).runs

    assert run.saves == 7
    assert run.checkpoint_count == 2
    assert run.latest_sequence == 2
    assert type(run.saves) is int
