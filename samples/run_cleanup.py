"""Delete a completed run's checkpoints with ``clear_run()``.

Run from the repository root:

    python3 -m uv run --directory python python ../samples/run_cleanup.py

Once a run has finished and nothing will resume it, ``clear_run()`` deletes its checkpoints and its
sequence counter; other runs in the collection are untouched. (For retention by age instead, set
``ttl`` in the options.)

With ``MONGODB_URI`` set the sample uses that server; without it, the in-process engine from
``agent_framework_mongodb.testing``. It says which.
"""

import asyncio
import os

from agent_framework import Executor, WorkflowBuilder, WorkflowContext, handler

from agent_framework_mongodb.checkpoints import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions

WORKFLOW_NAME = "word-count"
OPTIONS = MongoDBCheckpointStorageOptions(
    tenant_id="demo-tenant", workflow_name=WORKFLOW_NAME, session_id="run-7"
)


class Tokenize(Executor):
    @handler
    async def tokenize(self, text: str, ctx: WorkflowContext[list[str]]) -> None:
        await ctx.send_message(text.split())


class Count(Executor):
    @handler
    async def count(self, words: list[str], ctx: WorkflowContext[None, str]) -> None:
        await ctx.yield_output(f"{len(words)} words")


async def open_storage() -> MongoDBCheckpointStorage:
    """A storage on MONGODB_URI when set, else on the in-process engine."""
    if os.environ.get("MONGODB_URI"):
        print("Using the MongoDB server named by MONGODB_URI.")
        return await MongoDBCheckpointStorage.connect(options=OPTIONS, wait_timeout=10)

    from agent_framework_mongodb.testing import InMemoryMongoClient

    print("MONGODB_URI is not set: using the in-process engine (agent_framework_mongodb.testing).")
    return await MongoDBCheckpointStorage.connect(mongo_client=InMemoryMongoClient(), options=OPTIONS)


async def main() -> None:
    async with await open_storage() as storage:
        tokenize, count = Tokenize(id="tokenize"), Count(id="count")
        workflow = (
            WorkflowBuilder(name=WORKFLOW_NAME, start_executor=tokenize, checkpoint_storage=storage)
            .add_edge(tokenize, count)
            .build()
        )
        result = await workflow.run("checkpoints are cheap to keep and easy to clear")
        ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)
        print(f"Run finished ({result.get_outputs()[0]}) with {len(ids)} checkpoints stored.")

        cleared = await storage.clear_run()
        print(
            f"clear_run() deleted {cleared.checkpoints_deleted} checkpoints and "
            f"{cleared.counter_deleted} sequence counter (acknowledged: {cleared.acknowledged})."
        )
        remaining = await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)
        print(f"Checkpoints left for run {storage.options.session_id!r}: {len(remaining)}.")


if __name__ == "__main__":
    asyncio.run(main())
