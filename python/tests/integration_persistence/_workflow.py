"""A one-executor human-in-the-loop workflow: it asks for approval, then reports the answer.

No ``from __future__ import annotations`` here: agent-framework-core 1.13 reads handler
annotations as objects and refuses strings.
"""

import dataclasses

from agent_framework import (
    CheckpointStorage,
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    response_handler,
)

APPROVAL_WORKFLOW = "expense-approval"
APPROVAL_REQUEST_TYPE = f"{__name__}:ApprovalRequest"
"""The ``allowed_checkpoint_types`` entry that lets a pending request be loaded again."""


@dataclasses.dataclass
class ApprovalRequest:
    """What the workflow asks a person; stored in the paused checkpoint."""

    expense_id: str
    amount: int


class Approver(Executor):
    """Asks for approval of an amount; on the answer, yields ``"<expense> <amount> <answer>"``."""

    def __init__(self) -> None:
        super().__init__(id="approver")

    @handler
    async def start(self, amount: int, ctx: WorkflowContext[str]) -> None:
        ctx.set_state("amount", amount)
        await ctx.request_info(ApprovalRequest(expense_id="expense-42", amount=amount), str)

    @response_handler
    async def on_answer(
        self, original_request: ApprovalRequest, response: str, ctx: WorkflowContext[str, str]
    ) -> None:
        amount = ctx.get_state("amount")
        await ctx.yield_output(f"{original_request.expense_id} {amount} {response}")


def approval_workflow(storage: CheckpointStorage) -> Workflow:
    """A new workflow instance checkpointing into ``storage``."""
    return WorkflowBuilder(
        name=APPROVAL_WORKFLOW, start_executor=Approver(), checkpoint_storage=storage
    ).build()
