"""Storage spans nest under Agent Framework's own workflow spans during a real run."""

from __future__ import annotations

from agent_framework.observability import OtelAttr, enable_instrumentation
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.connection import DEFAULT_COLLECTION_NAME
from tests.telemetry_support import attribute, collected

from .support import Client
from .workflows import PIPELINE_WORKFLOW, build_pipeline_workflow, pipeline_output

TENANT = "tenant-otel-e2e"
SESSION = "session-otel-e2e"


async def test_storage_spans_nest_under_the_workflow_run_and_name_no_data(
    mongo_client: Client, database_name: str
) -> None:
    # Agent Framework emits workflow spans unless ENABLE_INSTRUMENTATION=false; state it anyway.
    enable_instrumentation()
    telemetry = collected()
    options = MongoDBCheckpointStorageOptions(
        tenant_id=TENANT, workflow_name=PIPELINE_WORKFLOW, session_id=SESSION
    )
    storage = MongoDBCheckpointStorage(
        mongo_client=mongo_client, options=options, database_name=database_name
    )

    result = await build_pipeline_workflow(storage).run("nested")
    assert result.get_outputs() == [pipeline_output("nested")]

    spans = telemetry.spans()
    by_id = {span.context.span_id: span for span in spans if span.context is not None}
    storage_spans = telemetry.storage_spans()
    saves = [span for span in storage_spans if attribute(span, "db.operation.name") == "save"]
    assert saves, "the run saved checkpoints"
    # The framework names its run span by this constant: "workflow.run", "invoke_workflow" from 1.26.
    workflow_run = [span for span in spans if span.name.startswith(OtelAttr.WORKFLOW_RUN_SPAN)]
    assert len(workflow_run) == 1, sorted({span.name for span in spans})
    run_context = workflow_run[0].context
    assert run_context is not None

    def ancestors(span: ReadableSpan) -> list[ReadableSpan]:
        chain: list[ReadableSpan] = []
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            chain.append(span)
        return chain

    for span in storage_spans:
        assert span.context is not None
        assert span.context.trace_id == run_context.trace_id
        assert workflow_run[0] in ancestors(span), span.name
    checkpoint_ids = await storage.list_checkpoint_ids(workflow_name=PIPELINE_WORKFLOW)
    assert checkpoint_ids
    # Database client spans (ADR 0035) name the configured database and collection; identifying
    # values stay out of them (Agent Framework's own spans may carry them).
    for span in storage_spans:
        assert span.kind is SpanKind.CLIENT
        assert attribute(span, "db.namespace") == database_name
        assert attribute(span, "db.collection.name") == DEFAULT_COLLECTION_NAME
        text = span.name + repr(dict(span.attributes or {}))
        for forbidden in (TENANT, SESSION, PIPELINE_WORKFLOW, *checkpoint_ids):
            assert forbidden not in text
