"""Two runs of one workflow on one collection never see each other's checkpoints or state."""

from __future__ import annotations

import asyncio

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageOptions,
)

from .support import Client
from .workflows import PIPELINE_WORKFLOW, build_pipeline_workflow, pipeline_output

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)

OPTIONS = MongoDBCheckpointStorageOptions(
    tenant_id="tenant-e2e", workflow_name=PIPELINE_WORKFLOW, session_id="run-a"
)


def messages_text(checkpoint: WorkflowCheckpoint) -> str:
    return repr(checkpoint.messages)


async def test_two_sessions_on_one_collection_stay_isolated(mongo_client: Client, database_name: str) -> None:
    run_a = MongoDBCheckpointStorage(mongo_client=mongo_client, options=OPTIONS, database_name=database_name)
    run_b = run_a.for_session("run-b")

    # Both runs write at the same time, each with its own workflow instance.
    result_a, result_b = await asyncio.gather(
        build_pipeline_workflow(run_a).run("alpha"), build_pipeline_workflow(run_b).run("bravo")
    )
    assert result_a.get_outputs() == [pipeline_output("alpha")]
    assert result_b.get_outputs() == [pipeline_output("bravo")]

    ids_a = await run_a.list_checkpoint_ids(workflow_name=PIPELINE_WORKFLOW)
    ids_b = await run_b.list_checkpoint_ids(workflow_name=PIPELINE_WORKFLOW)
    assert ids_a
    assert ids_b
    assert set(ids_a).isdisjoint(ids_b)

    listed_a = await run_a.list_checkpoints(workflow_name=PIPELINE_WORKFLOW)
    listed_b = await run_b.list_checkpoints(workflow_name=PIPELINE_WORKFLOW)
    assert [checkpoint.checkpoint_id for checkpoint in listed_a] == ids_a
    assert [checkpoint.checkpoint_id for checkpoint in listed_b] == ids_b
    assert all("bravo" not in messages_text(checkpoint) for checkpoint in listed_a)
    assert all("alpha" not in messages_text(checkpoint) for checkpoint in listed_b)

    # Another run's checkpoint id is not found, and its latest is its own.
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await run_a.load(ids_b[0])
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await run_b.load(ids_a[0])
    latest_a = await run_a.get_latest(workflow_name=PIPELINE_WORKFLOW)
    assert latest_a is not None
    assert latest_a.checkpoint_id == ids_a[-1]


async def test_resuming_one_run_never_sees_the_other(mongo_client: Client, database_name: str) -> None:
    run_a = MongoDBCheckpointStorage(mongo_client=mongo_client, options=OPTIONS, database_name=database_name)
    run_b = run_a.for_session("run-b")
    await build_pipeline_workflow(run_a).run("alpha")
    await build_pipeline_workflow(run_b).run("bravo")
    ids_b = await run_b.list_checkpoint_ids(workflow_name=PIPELINE_WORKFLOW)

    # A fresh storage for run A (built from the options, not derived) resumes A's first checkpoint.
    fresh_a = MongoDBCheckpointStorage(
        mongo_client=mongo_client, options=OPTIONS, database_name=database_name
    )
    first_a = (await fresh_a.list_checkpoint_ids(workflow_name=PIPELINE_WORKFLOW))[0]
    resumed = await build_pipeline_workflow(fresh_a).run(checkpoint_id=first_a)
    assert resumed.get_outputs() == [pipeline_output("alpha")]

    # Resuming with B's id through A's storage fails instead of loading B's state.
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await build_pipeline_workflow(fresh_a).run(checkpoint_id=ids_b[0])

    # Clearing A leaves B whole.
    cleared = await fresh_a.clear_run()
    assert cleared.checkpoints_deleted > 0
    assert await fresh_a.list_checkpoint_ids(workflow_name=PIPELINE_WORKFLOW) == []
    assert await run_b.list_checkpoint_ids(workflow_name=PIPELINE_WORKFLOW) == ids_b
