"""A sequential orchestration (agent_framework_orchestrations) paused for a review and resumed.

Imported only where agent_framework_orchestrations is installed. No ``from __future__ import
annotations``: agent-framework-core 1.13 reads handler annotations as written.
"""

from typing import Any, cast

from agent_framework import (
    CheckpointStorage,
    Executor,
    Message,
    Workflow,
    WorkflowContext,
    handler,
    response_handler,
)
from agent_framework_orchestrations import SequentialBuilder

from ._compare import first_difference
from ._registry import CheckContext, CheckFailedError, CheckSkippedError
from ._workflows import Approval

__all__ = ["run_sequential_review"]


class Reviewer(Executor):
    """A participant that asks a human before passing the conversation on."""

    def __init__(self) -> None:
        super().__init__(id="reviewer")
        self.seen: list[Message] = []

    @handler
    async def review(self, conversation: list[Message], ctx: WorkflowContext[list[Message]]) -> None:
        self.seen = list(conversation)
        await ctx.request_info(Approval("draft", "Publish the draft?"), str)

    @response_handler
    async def decided(self, request: Approval, answer: str, ctx: WorkflowContext[list[Message]]) -> None:
        await ctx.send_message([*self.seen, Message("assistant", [f"reviewer: {answer}"])])

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"seen": list(self.seen)}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.seen = list(state["seen"])


class Signer(Executor):
    """The last participant: yields the conversation as the orchestration's output."""

    def __init__(self) -> None:
        super().__init__(id="signer")

    @handler
    async def sign(
        self, conversation: list[Message], ctx: WorkflowContext[list[Message], list[Message]]
    ) -> None:
        await ctx.yield_output([*conversation, Message("assistant", ["signer: signed"])])


def _build(name: str) -> Workflow:
    try:
        builder = SequentialBuilder(name=name, participants=[Reviewer(), Signer()])  # type: ignore[call-arg,unused-ignore]
    except TypeError as error:
        # Orchestrations before 1.2 take no name= and give every built workflow a new random
        # name, so a resumed instance saves under another workflow than the paused one.
        raise CheckSkippedError(
            f"this agent_framework_orchestrations builds no named workflows ({error})"
        ) from error
    return builder.build()


async def run_sequential_review(context: CheckContext) -> str:
    """Pause at the review, resume in a new workflow instance from get_latest, compare the ends."""
    name = f"{context.workflow_name}-sequential"
    storage: CheckpointStorage = await context.storage(name)
    first = await _build(name).run("draft text", checkpoint_storage=storage)
    requests = first.get_request_info_events()
    if len(requests) != 1:
        raise CheckFailedError(f"the orchestration did not pause for one review: {len(requests)} requests")
    if context.capabilities.shared_between_instances:
        storage = await context.storage(name)
    paused = await storage.get_latest(workflow_name=name)
    if paused is None or requests[0].request_id not in paused.pending_request_info_events:
        raise CheckFailedError("get_latest did not return the checkpoint holding the review request")
    listed = await storage.list_checkpoints(workflow_name=name)
    reloaded = [await storage.load(checkpoint.checkpoint_id) for checkpoint in listed]
    for listed_one, loaded in zip(listed, reloaded, strict=True):
        difference = first_difference(listed_one.to_dict(), loaded.to_dict())
        if difference is not None:
            raise CheckFailedError(f"list_checkpoints and load disagree: {difference}")

    resumed = await _build(name).run(
        checkpoint_id=paused.checkpoint_id,
        responses={requests[0].request_id: "yes"},
        checkpoint_storage=storage,
    )
    outputs: list[object] = list(resumed.get_outputs())
    last: object = outputs[-1] if outputs else None
    items = cast("list[object]", last) if isinstance(last, list) else []
    texts = [item.text for item in items if isinstance(item, Message)]
    if texts != ["draft text", "reviewer: yes", "signer: signed"]:
        raise CheckFailedError(f"the resumed orchestration gave {outputs!r}")
    return f"{len(listed)} checkpoints before the review, resumed to the signed conversation"
