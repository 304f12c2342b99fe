"""A workflow pauses for a human, and a new process (new storage, new workflow) finishes it."""

from __future__ import annotations

from agent_framework import Message, WorkflowCheckpoint

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions

from .support import Client, instances_in, type_key
from .workflows import (
    APPROVAL_WORKFLOW,
    ApprovalRequest,
    ExpenseClaim,
    build_approval_workflow,
)

CLAIM = ExpenseClaim("E-1001", "Dana", 1240.0, "conference travel")


def approval_options(session_id: str = "claim-e-1001") -> MongoDBCheckpointStorageOptions:
    return MongoDBCheckpointStorageOptions(
        tenant_id="tenant-e2e",
        workflow_name=APPROVAL_WORKFLOW,
        session_id=session_id,
        allowed_checkpoint_types=(type_key(ExpenseClaim), type_key(ApprovalRequest)),
    )


def new_storage(client: Client, database_name: str) -> MongoDBCheckpointStorage:
    return MongoDBCheckpointStorage(
        mongo_client=client, options=approval_options(), database_name=database_name
    )


def conversation_of(checkpoint: WorkflowCheckpoint) -> list[Message]:
    """The simulated conversation the intake executor keeps, found anywhere in the checkpoint state."""
    return instances_in(checkpoint, Message)


async def test_paused_run_resumes_in_a_new_storage_and_workflow_instance(
    mongo_client: Client, database_name: str
) -> None:
    # First process: run until the workflow asks the manager, then drop everything.
    storage = new_storage(mongo_client, database_name)
    first = await build_approval_workflow(storage).run(CLAIM)
    requests = first.get_request_info_events()
    assert len(requests) == 1
    request_id = requests[0].request_id
    assert isinstance(requests[0].data, ApprovalRequest)
    assert first.get_outputs() == []
    saved_before_pause = await storage.list_checkpoint_ids(workflow_name=APPROVAL_WORKFLOW)
    (waiting,) = (await storage.list_runs()).runs
    assert waiting.waiting_for_input is True
    assert waiting.latest_checkpoint_id == saved_before_pause[-1]
    del storage, first

    # Second process: only the client (the database) is shared.
    storage = new_storage(mongo_client, database_name)
    assert await storage.list_checkpoint_ids(workflow_name=APPROVAL_WORKFLOW) == saved_before_pause
    paused = await storage.get_latest(workflow_name=APPROVAL_WORKFLOW)
    assert paused is not None
    assert list(paused.pending_request_info_events) == [request_id]
    pending = paused.pending_request_info_events[request_id]
    assert pending.data == ApprovalRequest(
        "E-1001", 1240.0, "Approve E-1001 for $1240.00 (conference travel)?"
    )
    conversation = conversation_of(paused)
    assert [message.role for message in conversation] == ["user", "assistant"]
    assert conversation[0].text == "Dana: conference travel, $1240.00"

    resumed = await build_approval_workflow(storage).run(
        checkpoint_id=paused.checkpoint_id, responses={request_id: "approved"}
    )

    assert resumed.get_outputs() == ["E-1001: approved (state restored: True)"]
    after = await storage.list_checkpoint_ids(workflow_name=APPROVAL_WORKFLOW)
    assert after[: len(saved_before_pause)] == saved_before_pause
    latest = await storage.get_latest(workflow_name=APPROVAL_WORKFLOW)
    assert latest is not None
    assert latest.checkpoint_id == after[-1]
    assert latest.pending_request_info_events == {}
    (finished,) = (await storage.list_runs(workflow_name=APPROVAL_WORKFLOW)).runs
    assert (finished.session_id, finished.latest_checkpoint_id) == ("claim-e-1001", latest.checkpoint_id)
    assert finished.waiting_for_input is False


async def test_the_checkpoint_holding_the_request_is_found_by_listing(
    mongo_client: Client, database_name: str
) -> None:
    storage = new_storage(mongo_client, database_name)
    first = await build_approval_workflow(storage).run(CLAIM)
    request_id = first.get_request_info_events()[0].request_id

    storage = new_storage(mongo_client, database_name)
    holding = [
        checkpoint
        for checkpoint in await storage.list_checkpoints(workflow_name=APPROVAL_WORKFLOW)
        if request_id in checkpoint.pending_request_info_events
    ]
    assert len(holding) == 1

    resumed = await build_approval_workflow(storage).run(
        checkpoint_id=holding[0].checkpoint_id, responses={request_id: "rejected"}
    )
    assert resumed.get_outputs() == ["E-1001: rejected (state restored: True)"]
