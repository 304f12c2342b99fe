"""Keep an Agent Framework workflow's checkpoints in MongoDB.

Run from the repository root (see README.md, Quick start):

    python3 -m pip install --quiet uv && python3 -m uv run --directory python python ../samples/workflow_checkpoint_resume.py

With ``MONGODB_URI`` set the sample uses that server; without it, the in-process engine from
``agent_framework_mongodb.testing``. It says which.

A large expense claim passes a policy check, then waits for a manager. The run pauses there; its
checkpoints are in MongoDB. A new storage and a new workflow instance, as a new process would
build them, resume the run from MongoDB with the manager's answer and finish it.
"""  # noqa: E501 - the run command above is quoted verbatim from README.md

import asyncio
import os
from typing import TYPE_CHECKING

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler, response_handler

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from expense_models import ExpenseClaim

if TYPE_CHECKING:
    from agent_framework_mongodb.testing import InMemoryMongoClient

WORKFLOW_NAME = "expense-approval"
AUTO_APPROVE_LIMIT = 100.0


OPTIONS = MongoDBCheckpointStorageOptions(
    tenant_id="demo-tenant",
    workflow_name=WORKFLOW_NAME,
    session_id="expense-42",
    # Application classes that checkpoints hold must be listed to be loaded again. ExpenseClaim
    # lives in an importable module, not in this script: a class defined here would be stored as
    # "__main__:ExpenseClaim", which a worker started from another entry point cannot load.
    allowed_checkpoint_types=[ExpenseClaim],
)


class PolicyCheck(Executor):
    @handler
    async def check(self, claim: ExpenseClaim, ctx: WorkflowContext[ExpenseClaim, str]) -> None:
        if claim.amount < AUTO_APPROVE_LIMIT:
            await ctx.yield_output(f"{claim.expense_id}: approved automatically")
        else:
            await ctx.send_message(claim)  # large claims need a manager


class ManagerApproval(Executor):
    @handler
    async def ask(self, claim: ExpenseClaim, ctx: WorkflowContext) -> None:
        await ctx.request_info(claim, str)  # pauses the run until a manager answers

    @response_handler
    async def decide(self, claim: ExpenseClaim, decision: str, ctx: WorkflowContext[None, str]) -> None:
        await ctx.yield_output(f"{claim.expense_id} ({claim.purpose}, ${claim.amount:,.2f}): {decision}")


def build_workflow(storage: MongoDBCheckpointStorage) -> Workflow:
    policy, manager = PolicyCheck(id="policy"), ManagerApproval(id="manager")
    builder = WorkflowBuilder(name=WORKFLOW_NAME, start_executor=policy, checkpoint_storage=storage)
    return builder.add_edge(policy, manager).build()


async def open_storage(engine: "InMemoryMongoClient | None") -> MongoDBCheckpointStorage:
    """A storage on MONGODB_URI, or on the in-process engine when one is given."""
    if engine is None:
        return await MongoDBCheckpointStorage.connect(options=OPTIONS, wait_timeout=10)
    return await MongoDBCheckpointStorage.connect(mongo_client=engine, options=OPTIONS)


def choose_backend() -> "InMemoryMongoClient | None":
    if os.environ.get("MONGODB_URI"):
        print("Using the MongoDB server named by MONGODB_URI.")
        return None
    from agent_framework_mongodb.testing import InMemoryMongoClient

    print("MONGODB_URI is not set: using the in-process engine (agent_framework_mongodb.testing).")
    return InMemoryMongoClient()


async def main() -> None:
    engine = choose_backend()
    claim = ExpenseClaim("E-1001", "Dana", 1240.0, "conference travel")

    async with await open_storage(engine) as storage:
        await storage.ensure_indexes()  # a deploy-time step; see index_provisioning.py
        result = await build_workflow(storage).run(claim)
        request = result.get_request_info_events()[0]
        print(f"Run paused: {claim.expense_id} waits for a manager (request {request.request_id[:8]}).")
        ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)
        print(f"{len(ids)} checkpoints in MongoDB: {', '.join(i[:8] for i in ids)}.")

    # Later, perhaps in another process: a new storage and a new workflow instance.
    async with await open_storage(engine) as storage:
        paused = await storage.get_latest(workflow_name=WORKFLOW_NAME)
        if paused is None or request.request_id not in paused.pending_request_info_events:
            raise SystemExit("The paused checkpoint is not in MongoDB.")
        print(f"Resuming from checkpoint {paused.checkpoint_id[:8]} with the manager's answer.")
        result = await build_workflow(storage).run(
            checkpoint_id=paused.checkpoint_id, responses={request.request_id: "approved"}
        )
        print(f"Run finished: {result.get_outputs()[0]}")
        cleared = await storage.clear_run()
        print(f"Cleared the run's {cleared.checkpoints_deleted} checkpoints.")


if __name__ == "__main__":
    asyncio.run(main())
