"""Checks that run real workflows through the storage: pause for a human, resume in a new instance."""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Awaitable, Callable

from agent_framework import CheckpointStorage, Workflow, WorkflowCheckpoint

from ._compare import first_difference
from ._registry import CheckContext, CheckFailedError, CheckSkippedError, check
from ._workflows import Approval, Claim, build_approval_workflow, build_parent_workflow

__all__: list[str] = []


class _Recorder:
    """A storage that keeps a deep copy of every checkpoint the framework saves, then passes it on.

    The copies are what the framework handed over, so what the storage gives back can be compared
    with them field by field.
    """

    def __init__(self, storage: CheckpointStorage) -> None:
        self.storage = storage
        self.saved: dict[str, WorkflowCheckpoint] = {}

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        self.saved[checkpoint.checkpoint_id] = copy.deepcopy(checkpoint)
        return await self.storage.save(checkpoint)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        return await self.storage.load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return await self.storage.list_checkpoints(workflow_name=workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return await self.storage.list_checkpoint_ids(workflow_name=workflow_name)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        return await self.storage.get_latest(workflow_name=workflow_name)

    async def delete(self, checkpoint_id: str) -> bool:
        return await self.storage.delete(checkpoint_id)


async def _resuming_storage(
    context: CheckContext, first: CheckpointStorage, workflow_name: str
) -> CheckpointStorage:
    """A new storage for the run when the author says two share it (a new process would make one)."""
    if context.capabilities.shared_between_instances:
        return await context.storage(workflow_name)
    return first


async def _pause_and_resume(
    context: CheckContext, workflow_name: str, build: Callable[[CheckpointStorage], Workflow]
) -> str:
    """Run until the workflow asks a human; resume from get_latest in a new instance; check both ends."""
    recorder = _Recorder(await context.storage(workflow_name))
    first = await build(recorder).run(Claim("C-7", 120.0))
    requests = first.get_request_info_events()
    if len(requests) != 1 or first.get_outputs():
        raise CheckFailedError(
            f"the run did not pause for one request: {len(requests)} requests, outputs {first.get_outputs()}"
        )
    request_id = requests[0].request_id

    storage = await _resuming_storage(context, recorder.storage, workflow_name)
    paused = await storage.get_latest(workflow_name=workflow_name)
    if paused is None:
        raise CheckFailedError("get_latest returned None for a paused run")
    if list(paused.pending_request_info_events) != [request_id]:
        raise CheckFailedError(
            f"the latest checkpoint holds pending requests {list(paused.pending_request_info_events)}, "
            f"not the run's {request_id!r}"
        )
    pending = paused.pending_request_info_events[request_id]
    if not isinstance(pending.data, Approval) or pending.data != requests[0].data:
        raise CheckFailedError(
            f"the pending request came back as {pending.data!r}, asked {requests[0].data!r}"
        )
    for checkpoint_id, saved in recorder.saved.items():
        difference = first_difference(saved.to_dict(), (await storage.load(checkpoint_id)).to_dict())
        if difference is not None:
            raise CheckFailedError(
                f"a checkpoint the framework saved did not come back as saved: {difference}"
            )

    resumed = await build(storage).run(checkpoint_id=paused.checkpoint_id, responses={request_id: "approved"})
    outputs = resumed.get_outputs()
    if not outputs or "C-7: approved (state restored: True)" not in str(outputs[-1]):
        raise CheckFailedError(f"the resumed run gave {outputs}, not the approval with its state restored")
    finished = await storage.get_latest(workflow_name=workflow_name)
    if finished is None or finished.pending_request_info_events:
        raise CheckFailedError(
            "after the answer, the latest checkpoint still holds a pending request (or is None)"
        )
    if finished.checkpoint_id in recorder.saved:
        raise CheckFailedError(
            "after the resumed run, get_latest returned a checkpoint from before the pause"
        )
    how = "a second storage from the factory" if storage is not recorder.storage else "the same storage"
    return f"{len(recorder.saved)} checkpoints compared field by field; resumed through {how}"


@check(
    "workflows.human_in_the_loop",
    "workflows",
    "A run paused by request_info resumes from get_latest with its request, state and answer.",
)
async def human_in_the_loop(context: CheckContext) -> str | None:
    name = f"{context.workflow_name}-approval"
    return await _pause_and_resume(context, name, lambda storage: build_approval_workflow(storage, name))


@check(
    "workflows.sub_workflow",
    "workflows",
    "A sub-workflow's request surfaces in the parent; the parent pauses and resumes through the storage.",
)
async def sub_workflow(context: CheckContext) -> str | None:
    name = f"{context.workflow_name}-parent"
    return await _pause_and_resume(context, name, lambda storage: build_parent_workflow(storage, name))


@check(
    "workflows.orchestration",
    "workflows",
    "A sequential orchestration with a human review pauses and resumes (agent_framework_orchestrations).",
)
async def orchestration(context: CheckContext) -> str | None:
    if importlib.util.find_spec("agent_framework_orchestrations") is None:
        raise CheckSkippedError("agent_framework_orchestrations is not installed")
    # Imported here, not at the top: the module imports agent_framework_orchestrations.
    from ._orchestration import run_sequential_review  # noqa: PLC0415

    run: Callable[[CheckContext], Awaitable[str]] = run_sequential_review
    return await run(context)
