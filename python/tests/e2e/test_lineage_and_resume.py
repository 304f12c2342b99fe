"""A multi-superstep fan-out/fan-in workflow: its checkpoint lineage, and resuming mid-run."""

from __future__ import annotations

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions

from .support import Client
from .workflows import PIPELINE_WORKFLOW, build_pipeline_workflow, pipeline_output

OPTIONS = MongoDBCheckpointStorageOptions(
    tenant_id="tenant-e2e", workflow_name=PIPELINE_WORKFLOW, session_id="pipeline-1", page_size=2
)
"""``page_size=2`` makes every listing below span several pages."""


def new_storage(client: Client, database_name: str) -> MongoDBCheckpointStorage:
    return MongoDBCheckpointStorage(mongo_client=client, options=OPTIONS, database_name=database_name)


async def run_to_completion(storage: MongoDBCheckpointStorage, text: str) -> list[str]:
    result = await build_pipeline_workflow(storage).run(text)
    outputs: list[str] = result.get_outputs()
    return outputs


async def test_lineage_from_latest_to_first_covers_every_checkpoint_in_order(
    mongo_client: Client, database_name: str
) -> None:
    storage = new_storage(mongo_client, database_name)
    assert await run_to_completion(storage, "checkpoint") == [pipeline_output("checkpoint")]

    storage = new_storage(mongo_client, database_name)
    ids = await storage.list_checkpoint_ids(workflow_name=PIPELINE_WORKFLOW)
    # The entry checkpoint and one per superstep: split, the two branches, join, finish.
    assert len(ids) >= 4
    assert len(set(ids)) == len(ids)

    latest = await storage.get_latest(workflow_name=PIPELINE_WORKFLOW)
    assert latest is not None
    lineage: list[WorkflowCheckpoint] = [latest]
    while (parent := lineage[-1].previous_checkpoint_id) is not None:
        lineage.append(await storage.load(parent))
    lineage.reverse()

    assert [checkpoint.checkpoint_id for checkpoint in lineage] == ids
    assert lineage[0].previous_checkpoint_id is None
    assert [checkpoint.iteration_count for checkpoint in lineage] == sorted(
        checkpoint.iteration_count for checkpoint in lineage
    )
    listed = await storage.list_checkpoints(workflow_name=PIPELINE_WORKFLOW)
    assert [checkpoint.to_dict() for checkpoint in listed] == [checkpoint.to_dict() for checkpoint in lineage]
    # The fan-out is visible: one checkpoint carries both branches' messages in flight.
    assert any({"upper", "reverse"} <= set(checkpoint.messages) for checkpoint in lineage), (
        "no checkpoint holds both fan-out branches"
    )


def fan_out_checkpoint(checkpoints: list[WorkflowCheckpoint]) -> WorkflowCheckpoint:
    """The checkpoint taken after ``split`` ran, its message to both branches not yet delivered."""
    matches = [checkpoint for checkpoint in checkpoints if set(checkpoint.messages) == {"split"}]
    assert len(matches) == 1, "expected exactly one checkpoint with split's message in flight"
    return matches[0]


async def test_resume_from_a_mid_run_checkpoint_with_a_new_workflow_instance(
    mongo_client: Client, database_name: str
) -> None:
    storage = new_storage(mongo_client, database_name)
    assert await run_to_completion(storage, "superstep") == [pipeline_output("superstep")]
    first_run = await storage.list_checkpoints(workflow_name=PIPELINE_WORKFLOW)
    middle = fan_out_checkpoint(first_run)
    assert middle.checkpoint_id != first_run[-1].checkpoint_id
    del storage

    storage = new_storage(mongo_client, database_name)
    trace: list[str] = []
    resumed = await build_pipeline_workflow(storage, trace).run(checkpoint_id=middle.checkpoint_id)

    assert resumed.get_outputs() == [pipeline_output("superstep")]
    # Only the executors after the checkpoint ran again; the split was not repeated.
    assert sorted(trace) == ["finish", "join", "reverse", "upper"]
    # The resumed run's checkpoints continue the lineage from the checkpoint it resumed.
    ids = await storage.list_checkpoint_ids(workflow_name=PIPELINE_WORKFLOW)
    assert ids[: len(first_run)] == [checkpoint.checkpoint_id for checkpoint in first_run]
    continued = ids[len(first_run) :]
    assert continued
    first_new = await storage.load(continued[0])
    assert first_new.previous_checkpoint_id == middle.checkpoint_id


async def test_resuming_an_unknown_checkpoint_surfaces_the_storage_error(
    mongo_client: Client, database_name: str
) -> None:
    from agent_framework_mongodb import MongoDBCheckpointNotFoundError

    storage = new_storage(mongo_client, database_name)
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await build_pipeline_workflow(storage).run(checkpoint_id="no-such-checkpoint")
