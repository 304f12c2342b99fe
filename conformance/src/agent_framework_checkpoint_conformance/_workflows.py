"""The workflows the suite pauses and resumes: plain executors, no language model, no network.

No ``from __future__ import annotations`` in this module: agent-framework-core 1.13 reads handler
annotations as written and cannot resolve string annotations on response handlers.
"""

from dataclasses import dataclass
from typing import Any

from agent_framework import (
    CheckpointStorage,
    Executor,
    Message,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    WorkflowExecutor,
    handler,
    response_handler,
)

__all__ = [
    "APPROVAL_WORKFLOW",
    "SUB_WORKFLOW",
    "Approval",
    "Claim",
    "build_approval_workflow",
    "build_parent_workflow",
    "suite_types",
]

APPROVAL_WORKFLOW = "conformance-approval"
SUB_WORKFLOW = "conformance-parent"


@dataclass
class Claim:
    """The input of both workflows: a user's own class, stored in checkpoints."""

    claim_id: str
    amount: float


@dataclass
class Approval:
    """What the workflow asks a human: a second user class, held by a pending request."""

    claim_id: str
    question: str


def suite_types() -> tuple[str, ...]:
    """``"module:qualname"`` of every class of this module that checkpoints hold."""
    return tuple(f"{cls.__module__}:{cls.__qualname__}" for cls in (Claim, Approval))


class Intake(Executor):
    """Keeps a conversation in its state, so a resumed run shows whether the state came back."""

    def __init__(self) -> None:
        super().__init__(id="intake")
        self.conversation: list[Message] = []

    @handler
    async def receive(self, claim: Claim, ctx: WorkflowContext[Claim]) -> None:
        self.conversation.append(Message("user", [f"claim {claim.claim_id}: {claim.amount:.2f}"]))
        await ctx.send_message(claim)

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"conversation": list(self.conversation)}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.conversation = list(state["conversation"])


class Approver(Executor):
    """Pauses for a human; on the answer, reports whether its own state survived the pause."""

    def __init__(self, executor_id: str = "approver") -> None:
        super().__init__(id=executor_id)
        self.waiting: list[str] = []

    @handler
    async def ask(self, claim: Claim, ctx: WorkflowContext) -> None:
        self.waiting.append(claim.claim_id)
        await ctx.request_info(Approval(claim.claim_id, f"Approve {claim.claim_id}?"), str)

    @response_handler
    async def decide(self, request: Approval, answer: str, ctx: WorkflowContext[None, str]) -> None:
        restored = request.claim_id in self.waiting
        if restored:
            self.waiting.remove(request.claim_id)
        await ctx.yield_output(f"{request.claim_id}: {answer} (state restored: {restored})")

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"waiting": list(self.waiting)}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.waiting = list(state["waiting"])


def build_approval_workflow(storage: CheckpointStorage, name: str = APPROVAL_WORKFLOW) -> Workflow:
    """intake -> approver (asks a human); a fresh instance, checkpointing to ``storage``."""
    intake, approver = Intake(), Approver()
    return (
        WorkflowBuilder(name=name, start_executor=intake, checkpoint_storage=storage)
        .add_edge(intake, approver)
        .build()
    )


class Forward(Executor):
    """The parent's first step: hands the claim to the sub-workflow."""

    def __init__(self) -> None:
        super().__init__(id="forward")

    @handler
    async def forward(self, claim: Claim, ctx: WorkflowContext[Claim]) -> None:
        await ctx.send_message(claim)


class Report(Executor):
    """The parent's last step: yields what the sub-workflow produced."""

    def __init__(self) -> None:
        super().__init__(id="report")

    @handler
    async def report(self, decision: str, ctx: WorkflowContext[None, str]) -> None:
        await ctx.yield_output(f"parent saw: {decision}")


def build_parent_workflow(storage: CheckpointStorage, name: str = SUB_WORKFLOW) -> Workflow:
    """forward -> [sub-workflow: approver asks a human] -> report, the request surfacing in the parent."""
    inner_approver = Approver("inner-approver")
    child = WorkflowBuilder(name="conformance-child", start_executor=inner_approver).build()
    forward, report = Forward(), Report()
    sub = WorkflowExecutor(child, id="sub-workflow", propagate_request=True)
    return (
        WorkflowBuilder(name=name, start_executor=forward, checkpoint_storage=storage)
        .add_edge(forward, sub)
        .add_edge(sub, report)
        .build()
    )
