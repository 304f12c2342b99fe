"""``strict_saves``: a failed save ends the workflow run with an error the caller can inspect.

Agent Framework catches every ``Exception`` a save raises and carries on; with ``strict_saves``
the storage raises ``MongoDBStrictSaveFailure`` (a ``BaseException``) instead, so ``run`` fails
at the first checkpoint that could not be saved, and nothing of that checkpoint is stored.
"""

import logging
from typing import Any

import pytest
from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler
from pymongo.errors import AutoReconnect

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageOptions,
    MongoDBConfigurationError,
    MongoDBSerializationError,
    MongoDBStrictSaveFailure,
    MongoDBTransientPersistenceError,
)
from agent_framework_mongodb.checkpoints.connection import DEFAULT_COLLECTION_NAME
from agent_framework_mongodb.checkpoints.scope import CHECKPOINT_KIND, COUNTER_KIND
from agent_framework_mongodb.testing import InMemoryMongoClient

from .support import Client
from .test_application_state import LEDGER_WORKFLOW, LedgerEntry, build_ledger_workflow
from .workflows import PIPELINE_WORKFLOW, build_pipeline_workflow, pipeline_output

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)

TENANT = "tenant-strict"


def strict_options(workflow_name: str, *, strict: bool = True) -> MongoDBCheckpointStorageOptions:
    return MongoDBCheckpointStorageOptions(
        tenant_id=TENANT, workflow_name=workflow_name, session_id="strict-1", strict_saves=strict
    )


def storage_for(
    client: Client, database_name: str, options: MongoDBCheckpointStorageOptions
) -> MongoDBCheckpointStorage:
    return MongoDBCheckpointStorage(mongo_client=client, options=options, database_name=database_name)


async def stored_documents(client: Client, database_name: str, kind: str) -> list[dict[str, Any]]:
    collection = client[database_name][DEFAULT_COLLECTION_NAME]
    return [document async for document in collection.find({"_kind": kind, "tenant_id": TENANT})]


async def test_a_class_not_allowed_fails_the_run_and_nothing_is_written(
    mongo_client: Client, database_name: str
) -> None:
    # The ledger's entry checkpoint holds no LedgerEntry and is stored; the first superstep's
    # checkpoint holds one, which the options do not allow.
    storage = storage_for(mongo_client, database_name, strict_options(LEDGER_WORKFLOW))
    workflow = build_ledger_workflow(storage)

    with pytest.raises(MongoDBStrictSaveFailure) as caught:
        await workflow.run("taxi=2350")

    failure = caught.value
    assert failure.category == "serialization"
    assert failure.retryable is False
    assert isinstance(failure.error, MongoDBSerializationError)
    assert failure.__cause__ is failure.error
    assert f"{LedgerEntry.__module__}:{LedgerEntry.__qualname__}" in str(failure.error)
    assert not isinstance(failure, Exception)

    # Only the entry checkpoint is stored, and the counter agrees with it.
    checkpoints = await storage.list_checkpoints(workflow_name=LEDGER_WORKFLOW)
    assert len(checkpoints) == 1
    assert checkpoints[0].iteration_count == 0
    [counter] = await stored_documents(mongo_client, database_name, COUNTER_KIND)
    [document] = await stored_documents(mongo_client, database_name, CHECKPOINT_KIND)
    assert counter["sequence"] == document["sequence"]


async def test_a_wrong_workflow_name_fails_the_streaming_run_before_any_executor(
    mongo_client: Client, database_name: str
) -> None:
    storage = storage_for(mongo_client, database_name, strict_options("not-the-pipeline"))
    trace: list[str] = []
    seen: list[str] = []

    async def consume() -> None:
        async for event in build_pipeline_workflow(storage, trace).run("alpha", stream=True):
            seen.append(event.type)  # noqa: PERF401 - every event up to the failure

    with pytest.raises(MongoDBStrictSaveFailure) as caught:
        await consume()

    assert caught.value.category == "configuration"
    assert isinstance(caught.value.__cause__, MongoDBConfigurationError)
    assert trace == []  # the entry checkpoint failed: no executor ran
    assert "output" not in seen
    # The framework's own failure events come from an ``except Exception``: not emitted.
    assert "failed" not in seen
    assert await stored_documents(mongo_client, database_name, CHECKPOINT_KIND) == []
    assert await stored_documents(mongo_client, database_name, COUNTER_KIND) == []


class FaultInjector(Executor):
    """Arms the next of ``faults`` for the next sequence allocation: this superstep's checkpoint."""

    def __init__(self, client: InMemoryMongoClient, faults: list[BaseException]) -> None:
        super().__init__(id="inject")
        self._client = client
        self._faults = faults

    @handler
    async def inject(self, text: str, ctx: WorkflowContext[str]) -> None:
        if self._faults:
            self._client.fail_next("find_one_and_update", self._faults.pop())
        await ctx.send_message(text)


class Echo(Executor):
    def __init__(self, trace: list[str]) -> None:
        super().__init__(id="echo")
        self._trace = trace

    @handler
    async def echo(self, text: str, ctx: WorkflowContext[None, str]) -> None:
        self._trace.append(self.id)
        await ctx.yield_output(text)


FAULT_WORKFLOW = "fault-mid-run"


def build_fault_workflow(
    storage: MongoDBCheckpointStorage,
    client: InMemoryMongoClient,
    trace: list[str],
    faults: list[BaseException],
) -> Workflow:
    inject, echo = FaultInjector(client, faults), Echo(trace)
    return (
        WorkflowBuilder(name=FAULT_WORKFLOW, start_executor=inject, checkpoint_storage=storage)
        .add_edge(inject, echo)
        .build()
    )


def engine(client: Client) -> InMemoryMongoClient:
    if not isinstance(client, InMemoryMongoClient):
        pytest.skip("injects driver faults: in-process engine only")
    return client


async def test_an_unreachable_server_mid_run_fails_the_run_and_a_resume_completes_it(
    mongo_client: Client, database_name: str
) -> None:
    client = engine(mongo_client)
    storage = storage_for(mongo_client, database_name, strict_options(FAULT_WORKFLOW))
    trace: list[str] = []
    faults: list[BaseException] = [AutoReconnect("connection reset")]

    with pytest.raises(MongoDBStrictSaveFailure) as caught:
        await build_fault_workflow(storage, client, trace, faults).run("alpha")

    failure = caught.value
    assert failure.category == "transient_persistence"
    assert failure.retryable is True
    assert isinstance(failure.error, MongoDBTransientPersistenceError)
    assert isinstance(failure.error.__cause__, AutoReconnect)
    assert trace == []  # stopped at the failed checkpoint: the next superstep never ran

    # The allocation failed before the server ran it: one checkpoint, the counter still at it.
    [entry] = await stored_documents(mongo_client, database_name, CHECKPOINT_KIND)
    [counter] = await stored_documents(mongo_client, database_name, COUNTER_KIND)
    assert counter["sequence"] == entry["sequence"]

    # The run resumes from its last stored checkpoint; later saves number on from the counter.
    latest = await storage.get_latest(workflow_name=FAULT_WORKFLOW)
    assert latest is not None
    resumed = await build_fault_workflow(storage, client, trace, faults).run(
        checkpoint_id=latest.checkpoint_id
    )
    assert resumed.get_outputs() == ["alpha"]
    assert trace == ["echo"]
    sequences = [
        document["sequence"]
        for document in await stored_documents(mongo_client, database_name, CHECKPOINT_KIND)
    ]
    assert sorted(sequences) == list(range(entry["sequence"], entry["sequence"] + len(sequences)))


async def test_without_strict_saves_the_run_completes_and_the_framework_warns(
    mongo_client: Client, database_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = engine(mongo_client)
    storage = storage_for(mongo_client, database_name, strict_options(FAULT_WORKFLOW, strict=False))
    trace: list[str] = []
    faults: list[BaseException] = [AutoReconnect("connection reset")]

    with caplog.at_level(logging.WARNING):
        result = await build_fault_workflow(storage, client, trace, faults).run("alpha")

    assert result.get_outputs() == ["alpha"]
    assert trace == ["echo"]
    assert faults == []
    assert any(
        record.name.startswith("agent_framework.") and "Failed to create checkpoint" in record.getMessage()
        for record in caplog.records
    )


async def test_strict_saves_change_nothing_when_every_save_succeeds(
    mongo_client: Client, database_name: str
) -> None:
    storage = storage_for(mongo_client, database_name, strict_options(PIPELINE_WORKFLOW))
    result = await build_pipeline_workflow(storage).run("alpha")
    assert result.get_outputs() == [pipeline_output("alpha")]
    assert len(await storage.list_checkpoint_ids(workflow_name=PIPELINE_WORKFLOW)) >= 2
