"""Keep an Agent Framework workflow's checkpoints in MongoDB and resume the run in another process.

Run from the repository root (see README.md, Quick start):

    python3 -m pip install --quiet uv && python3 -m uv run --directory python python ../samples/workflow_checkpoint_resume.py

A large expense claim passes a policy check, then waits for a manager. This script runs each half
of the story in a new Python process of its own (the same interpreter, this same file):

1. the first process starts the run, which pauses for the manager; its checkpoints are in
   MongoDB, and the process exits;
2. the second process, which shares nothing with the first but the database, loads the paused
   run's latest checkpoint, resumes it with the manager's answer and finishes it.

With ``MONGODB_URI`` set both processes use that server. Without it they use the in-process engine
from ``agent_framework_mongodb.testing`` kept in a file in a temporary directory
(``InMemoryMongoClient(path=...)``), so the second process finds what the first one saved. It says
which, and every line says which process printed it.
"""  # noqa: E501 - the run command above is quoted verbatim from README.md

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler, response_handler

from agent_framework_mongodb.checkpoints import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from expense_models import ExpenseClaim

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


def say(text: str) -> None:
    print(f"[process {os.getpid()}] {text}", flush=True)


@contextlib.asynccontextmanager
async def open_storage(engine_file: str) -> AsyncIterator[MongoDBCheckpointStorage]:
    """A storage on MONGODB_URI, or on the in-process engine kept in ``engine_file`` when one is named."""
    if not engine_file:
        async with await MongoDBCheckpointStorage.connect(options=OPTIONS, wait_timeout=10) as storage:
            yield storage
        return
    from agent_framework_mongodb.testing import InMemoryMongoClient

    # One process at a time may open the file; closing the client lets the next one in.
    async with (
        InMemoryMongoClient(path=engine_file) as engine,
        await MongoDBCheckpointStorage.connect(mongo_client=engine, options=OPTIONS) as storage,
    ):
        yield storage


async def start(engine_file: str) -> None:
    """The first process: start the run, which pauses for the manager."""
    claim = ExpenseClaim("E-1001", "Dana", 1240.0, "conference travel")
    async with open_storage(engine_file) as storage:
        await storage.ensure_indexes()  # a deploy-time step; see index_provisioning.py
        result = await build_workflow(storage).run(claim)
        request = result.get_request_info_events()[0]
        ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)
    say(f"Run started: {claim.expense_id} waits for a manager (request {request.request_id[:8]}).")
    say(f"{len(ids)} checkpoints saved ({', '.join(i[:8] for i in ids)}); this process exits now.")


async def resume(engine_file: str) -> None:
    """The second process: a new storage and a new workflow instance resume the run from MongoDB."""
    async with open_storage(engine_file) as storage:
        paused = await storage.get_latest(workflow_name=WORKFLOW_NAME)
        if paused is None or not paused.pending_request_info_events:
            raise SystemExit("No paused run in MongoDB: did the first process run?")
        say(f"Resuming from checkpoint {paused.checkpoint_id[:8]} with the manager's answer.")
        responses = dict.fromkeys(paused.pending_request_info_events, "approved")
        result = await build_workflow(storage).run(checkpoint_id=paused.checkpoint_id, responses=responses)
        say(f"Run finished: {result.get_outputs()[0]}")
        cleared = await storage.clear_run()
        say(f"Cleared the run's {cleared.checkpoints_deleted} checkpoints.")


PHASES: dict[str, Callable[[str], Coroutine[None, None, None]]] = {"start": start, "resume": resume}


def run_in_new_process(phase: str, engine_file: str) -> None:
    """Run one phase with this interpreter in a process of its own, and pass its output on."""
    completed = subprocess.run(  # noqa: S603 - this interpreter and this file, fixed arguments
        [sys.executable, str(Path(__file__).resolve()), phase, engine_file],
        capture_output=True,
        text=True,
        check=False,
    )
    print(completed.stdout, end="")
    if completed.returncode != 0:
        print(completed.stderr, end="", file=sys.stderr)
        raise SystemExit(f"The {phase} process failed with exit status {completed.returncode}.")


def main() -> None:
    if os.environ.get("MONGODB_URI"):
        say("Using the MongoDB server named by MONGODB_URI; each step runs in a new process.")
        for phase in PHASES:
            run_in_new_process(phase, "")
        return
    with tempfile.TemporaryDirectory() as directory:
        engine_file = str(Path(directory) / "checkpoints.engine")
        say(
            "MONGODB_URI is not set: using the in-process engine (agent_framework_mongodb.testing)"
            f" kept in {engine_file}; each step runs in a new process."
        )
        for phase in PHASES:
            run_in_new_process(phase, engine_file)


if __name__ == "__main__":
    if len(sys.argv) > 1:  # a phase, in the process main() started for it: PHASE ENGINE_FILE
        phase, engine_file = sys.argv[1:]
        asyncio.run(PHASES[phase](engine_file))
    else:
        main()
