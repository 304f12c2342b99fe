"""The workflows the end-to-end tests run: plain executors, no language model, no network.

No ``from __future__ import annotations`` here: Agent Framework Core 1.13 reads handler
annotations as written, and cannot resolve string annotations on response handlers.
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
    handler,
    response_handler,
)

__all__ = [
    "APPROVAL_WORKFLOW",
    "PIPELINE_WORKFLOW",
    "ApprovalRequest",
    "ExpenseClaim",
    "build_approval_workflow",
    "build_pipeline_workflow",
    "pipeline_output",
]

APPROVAL_WORKFLOW = "expense-approval"
PIPELINE_WORKFLOW = "text-pipeline"


# -- Human in the loop: an expense claim waits for a manager ------------------------------


@dataclass
class ExpenseClaim:
    expense_id: str
    employee: str
    amount: float
    purpose: str


@dataclass
class ApprovalRequest:
    expense_id: str
    amount: float
    question: str


class Intake(Executor):
    """Records the claim in a simulated agent conversation, then hands it to the manager."""

    def __init__(self) -> None:
        super().__init__(id="intake")
        self.conversation: list[Message] = []

    @handler
    async def receive(self, claim: ExpenseClaim, ctx: WorkflowContext[ExpenseClaim]) -> None:
        self.conversation.append(Message("user", [f"{claim.employee}: {claim.purpose}, ${claim.amount:.2f}"]))
        self.conversation.append(Message("assistant", [f"Claim {claim.expense_id} is within policy."]))
        await ctx.send_message(claim)

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"conversation": list(self.conversation)}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.conversation = list(state["conversation"])


class ManagerApproval(Executor):
    """Pauses the workflow until a manager answers, then reports the decision."""

    def __init__(self) -> None:
        super().__init__(id="manager")
        self.pending: list[str] = []

    @handler
    async def ask(self, claim: ExpenseClaim, ctx: WorkflowContext) -> None:
        self.pending.append(claim.expense_id)
        question = f"Approve {claim.expense_id} for ${claim.amount:.2f} ({claim.purpose})?"
        await ctx.request_info(ApprovalRequest(claim.expense_id, claim.amount, question), str)

    @response_handler
    async def decide(self, request: ApprovalRequest, answer: str, ctx: WorkflowContext[None, str]) -> None:
        # The restored state proves the executor resumed with what it had before the pause.
        restored = request.expense_id in self.pending
        if restored:
            self.pending.remove(request.expense_id)
        await ctx.yield_output(f"{request.expense_id}: {answer} (state restored: {restored})")

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"pending": list(self.pending)}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.pending = list(state["pending"])


def build_approval_workflow(storage: CheckpointStorage) -> Workflow:
    """A fresh instance of the approval workflow, checkpointing to ``storage``."""
    intake, manager = Intake(), ManagerApproval()
    return (
        WorkflowBuilder(name=APPROVAL_WORKFLOW, start_executor=intake, checkpoint_storage=storage)
        .add_edge(intake, manager)
        .build()
    )


# -- Fan-out / fan-in: several supersteps, no human ----------------------------------------


class Split(Executor):
    def __init__(self, trace: list[str]) -> None:
        super().__init__(id="split")
        self._trace = trace

    @handler
    async def split(self, text: str, ctx: WorkflowContext[str]) -> None:
        self._trace.append(self.id)
        await ctx.send_message(text.strip())


class Upper(Executor):
    def __init__(self, trace: list[str]) -> None:
        super().__init__(id="upper")
        self._trace = trace

    @handler
    async def upper(self, text: str, ctx: WorkflowContext[str]) -> None:
        self._trace.append(self.id)
        await ctx.send_message(text.upper())


class Reverse(Executor):
    def __init__(self, trace: list[str]) -> None:
        super().__init__(id="reverse")
        self._trace = trace

    @handler
    async def reverse(self, text: str, ctx: WorkflowContext[str]) -> None:
        self._trace.append(self.id)
        await ctx.send_message(text[::-1])


class Join(Executor):
    def __init__(self, trace: list[str]) -> None:
        super().__init__(id="join")
        self._trace = trace

    @handler
    async def join(self, parts: list[str], ctx: WorkflowContext[str]) -> None:
        self._trace.append(self.id)
        await ctx.send_message(" | ".join(sorted(parts)))


class Finish(Executor):
    def __init__(self, trace: list[str]) -> None:
        super().__init__(id="finish")
        self._trace = trace

    @handler
    async def finish(self, text: str, ctx: WorkflowContext[None, str]) -> None:
        self._trace.append(self.id)
        await ctx.yield_output(f"[{text}]")


def build_pipeline_workflow(storage: CheckpointStorage, trace: list[str] | None = None) -> Workflow:
    """split -> (upper, reverse) -> join -> finish; ``trace`` records which executors ran."""
    ran = [] if trace is None else trace
    split, upper, reverse = Split(ran), Upper(ran), Reverse(ran)
    join, finish = Join(ran), Finish(ran)
    return (
        WorkflowBuilder(name=PIPELINE_WORKFLOW, start_executor=split, checkpoint_storage=storage)
        .add_fan_out_edges(split, [upper, reverse])
        .add_fan_in_edges([upper, reverse], join)
        .add_edge(join, finish)
        .build()
    )


def pipeline_output(text: str) -> str:
    """What the pipeline yields for ``text``."""
    word = text.strip()
    return f"[{' | '.join(sorted([word.upper(), word[::-1]]))}]"
