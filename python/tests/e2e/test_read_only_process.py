"""A process that imported only ``agent_framework`` and this package reads every checkpoint of a
run waiting for input, in-flight messages included (issue 21, ADR 0023).

The workflow's request, messages and state hold only framework and built-in values, so the reading
process needs no application module: whatever it could not resolve would be a framework class it
had not imported.
"""

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from agent_framework import Executor, Message, WorkflowBuilder, WorkflowContext, handler, response_handler

from agent_framework_mongodb.checkpoints import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.testing import InMemoryMongoClient

WORKFLOW = "read-only-inbox"
SESSION = "claim-7"


class Intake(Executor):
    def __init__(self) -> None:
        super().__init__(id="intake")
        self.conversation: list[Message] = []

    @handler
    async def receive(self, claim: str, ctx: WorkflowContext[str]) -> None:
        self.conversation.append(Message("user", [claim]))
        await ctx.send_message(claim)

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"conversation": list(self.conversation)}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.conversation = list(state["conversation"])


class Approver(Executor):
    def __init__(self) -> None:
        super().__init__(id="approver")

    @handler
    async def ask(self, claim: str, ctx: WorkflowContext) -> None:
        await ctx.request_info(f"Approve {claim}?", str)

    @response_handler
    async def decide(self, question: str, answer: str, ctx: WorkflowContext[None, str]) -> None:
        await ctx.yield_output(answer)


def _options() -> MongoDBCheckpointStorageOptions:
    return MongoDBCheckpointStorageOptions(tenant_id="tenant-ro", workflow_name=WORKFLOW, session_id=SESSION)


_READER = textwrap.dedent(
    """
    import asyncio, json, sys

    import agent_framework
    from agent_framework_mongodb.checkpoints import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
    from agent_framework_mongodb.testing import InMemoryMongoClient

    LAZY = ("agent_framework._workflows._events", "agent_framework._workflows._runner_context")

    async def main() -> None:
        before = [name for name in LAZY if name in sys.modules]
        client = InMemoryMongoClient(path=sys.argv[1])
        options = MongoDBCheckpointStorageOptions(
            tenant_id="tenant-ro", workflow_name=sys.argv[2], session_id=sys.argv[3]
        )
        storage = MongoDBCheckpointStorage(client["db"]["checkpoints"], options=options)
        loaded = []
        for checkpoint in await storage.list_checkpoints(workflow_name=sys.argv[2]):
            again = await storage.load(checkpoint.checkpoint_id)
            loaded.append({
                "id": again.checkpoint_id,
                "pending": [type(event).__name__ for event in again.pending_request_info_events.values()],
                "questions": [event.data for event in again.pending_request_info_events.values()],
                "in_flight": sorted(
                    type(message).__name__ for queue in again.messages.values() for message in queue
                ),
            })
        await client.close()
        print(json.dumps({"imported_before": before, "loaded": loaded}))

    asyncio.run(main())
    """
)


async def test_a_process_that_imported_only_the_framework_reads_a_waiting_run(tmp_path: Path) -> None:
    engine_file = tmp_path / "engine.json"
    client = InMemoryMongoClient(path=engine_file)
    storage = MongoDBCheckpointStorage(client["db"]["checkpoints"], options=_options())
    intake, approver = Intake(), Approver()
    workflow = (
        WorkflowBuilder(name=WORKFLOW, start_executor=intake, checkpoint_storage=storage)
        .add_edge(intake, approver)
        .build()
    )
    result = await workflow.run("claim 7: $40 taxi")
    assert len(result.get_request_info_events()) == 1
    ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
    await client.close()

    completed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _READER, str(engine_file), WORKFLOW, SESSION],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    # The reader had not touched the lazily imported workflow modules before building a storage.
    assert report["imported_before"] == []
    loaded = report["loaded"]
    assert [entry["id"] for entry in loaded] == ids
    assert any(entry["in_flight"] for entry in loaded), "a checkpoint with a message in flight was read"
    waiting = loaded[-1]
    assert waiting["questions"] == ["Approve claim 7: $40 taxi?"]
    assert len(waiting["pending"]) == 1
