"""An application dataclass in executor state: refused at save unless allowed, then lossless.

``LedgerEntry`` is defined here, in a test module, and pickles by default (no hooks).
"""

import logging
from dataclasses import dataclass
from typing import Any

import pytest
from agent_framework import (
    CheckpointStorage,
    Executor,
    InMemoryCheckpointStorage,
    Workflow,
    WorkflowBuilder,
    WorkflowCheckpoint,
    WorkflowContext,
    handler,
)

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageOptions,
    MongoDBIntegrationError,
    MongoDBSerializationError,
)

from .support import Client, instances_in, type_key

LEDGER_WORKFLOW = "ledger"


@dataclass
class LedgerEntry:
    description: str
    cents: int


class Ledger(Executor):
    """Keeps every entry it has seen in its checkpointed state."""

    def __init__(self) -> None:
        super().__init__(id="ledger")
        self.entries: list[LedgerEntry] = []

    @handler
    async def record(self, line: str, ctx: WorkflowContext[int]) -> None:
        description, amount = line.split("=")
        self.entries.append(LedgerEntry(description, int(amount)))
        await ctx.send_message(sum(entry.cents for entry in self.entries))

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"entries": list(self.entries)}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.entries = list(state["entries"])


class Report(Executor):
    def __init__(self) -> None:
        super().__init__(id="report")

    @handler
    async def report(self, total: int, ctx: WorkflowContext[None, str]) -> None:
        await ctx.yield_output(f"total {total} cents")


def build_ledger_workflow(storage: CheckpointStorage) -> Workflow:
    ledger, report = Ledger(), Report()
    return (
        WorkflowBuilder(name=LEDGER_WORKFLOW, start_executor=ledger, checkpoint_storage=storage)
        .add_edge(ledger, report)
        .build()
    )


def ledger_options(*allowed: type) -> MongoDBCheckpointStorageOptions:
    return MongoDBCheckpointStorageOptions(
        tenant_id="tenant-e2e",
        workflow_name=LEDGER_WORKFLOW,
        session_id="ledger-1",
        allowed_checkpoint_types=tuple(type_key(cls) for cls in allowed),
    )


def entries_in(checkpoint: WorkflowCheckpoint) -> list[LedgerEntry]:
    return instances_in(checkpoint, LedgerEntry)


async def reference_checkpoints() -> list[WorkflowCheckpoint]:
    """The checkpoints the workflow produces, captured with Agent Framework's in-memory storage."""
    memory = InMemoryCheckpointStorage()
    result = await build_ledger_workflow(memory).run("taxi=2350")
    assert result.get_outputs() == ["total 2350 cents"]
    checkpoints = await memory.list_checkpoints(workflow_name=LEDGER_WORKFLOW)
    assert any(entries_in(checkpoint) for checkpoint in checkpoints)
    return checkpoints


async def test_a_class_not_allowed_fails_at_save_and_nothing_is_written(
    mongo_client: Client, database_name: str
) -> None:
    storage = MongoDBCheckpointStorage(
        mongo_client=mongo_client, options=ledger_options(), database_name=database_name
    )
    for checkpoint in await reference_checkpoints():
        if not entries_in(checkpoint):
            continue
        with pytest.raises(MongoDBSerializationError, match="allowed_checkpoint_types") as caught:
            await storage.save(checkpoint)
        assert type_key(LedgerEntry) in str(caught.value)
        assert await storage.list_checkpoint_ids(workflow_name=LEDGER_WORKFLOW) == []


async def test_a_workflow_run_logs_the_refused_save_and_keeps_only_loadable_checkpoints(
    mongo_client: Client, database_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    storage = MongoDBCheckpointStorage(
        mongo_client=mongo_client, options=ledger_options(), database_name=database_name
    )
    reference = await reference_checkpoints()

    with caplog.at_level(logging.WARNING):
        result = await build_ledger_workflow(storage).run("taxi=2350")

    # Agent Framework does not fail the run when a checkpoint cannot be saved: it logs the
    # storage error's message at WARNING and carries on, parenting later checkpoints to the
    # last one that was saved.
    assert result.get_outputs() == ["total 2350 cents"]
    refusals = [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("agent_framework.") and "Failed to create checkpoint" in record.getMessage()
    ]
    assert refusals
    assert all(type_key(LedgerEntry) in message for message in refusals)
    # The storage's own record of each refused save is ERROR, with its category and no message.
    ours = [
        record
        for record in caplog.records
        if record.name == "agent_framework_mongodb"
        and record.__dict__["operation"] == "save"
        and record.__dict__["outcome"] == "error"
    ]
    assert len(ours) == len(refusals)
    assert all(record.levelno == logging.ERROR for record in ours)
    assert all(record.__dict__["error_category"] == "serialization" for record in ours)

    # What was stored is exactly the checkpoints without the class, and every one loads.
    stored = await storage.list_checkpoints(workflow_name=LEDGER_WORKFLOW)
    assert len(stored) == sum(1 for checkpoint in reference if not entries_in(checkpoint))
    assert len(stored) < len(reference)
    for checkpoint in stored:
        assert (await storage.load(checkpoint.checkpoint_id)).checkpoint_id == checkpoint.checkpoint_id
        assert entries_in(checkpoint) == []


async def test_an_allowed_class_round_trips_and_restores_executor_state(
    mongo_client: Client, database_name: str
) -> None:
    storage = MongoDBCheckpointStorage(
        mongo_client=mongo_client, options=ledger_options(LedgerEntry), database_name=database_name
    )
    reference = await reference_checkpoints()
    result = await build_ledger_workflow(storage).run("taxi=2350")
    assert result.get_outputs() == ["total 2350 cents"]

    storage = MongoDBCheckpointStorage(
        mongo_client=mongo_client, options=ledger_options(LedgerEntry), database_name=database_name
    )
    stored = await storage.list_checkpoints(workflow_name=LEDGER_WORKFLOW)
    assert len(stored) == len(reference)
    with_entries = [checkpoint for checkpoint in stored if entries_in(checkpoint)]
    assert with_entries
    for checkpoint in with_entries:
        entries = entries_in(await storage.load(checkpoint.checkpoint_id))
        assert entries == [LedgerEntry("taxi", 2350)]
        assert all(type(entry) is LedgerEntry for entry in entries)

    # A new workflow instance resumes from the first checkpoint holding the entry. Its ledger
    # starts empty, so the entry in the resumed run's own checkpoints can only be the restored one.
    ids_before = await storage.list_checkpoint_ids(workflow_name=LEDGER_WORKFLOW)
    resumed = await build_ledger_workflow(storage).run(checkpoint_id=with_entries[0].checkpoint_id)
    assert resumed.get_outputs() == ["total 2350 cents"]
    new_ids = (await storage.list_checkpoint_ids(workflow_name=LEDGER_WORKFLOW))[len(ids_before) :]
    assert new_ids
    for checkpoint_id in new_ids:
        assert entries_in(await storage.load(checkpoint_id)) == [LedgerEntry("taxi", 2350)]


def test_storage_errors_are_agent_framework_checkpoint_errors() -> None:
    from agent_framework import WorkflowCheckpointException

    assert issubclass(MongoDBSerializationError, MongoDBIntegrationError)
    assert issubclass(MongoDBIntegrationError, WorkflowCheckpointException)
