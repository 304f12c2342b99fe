"""``show SESSION CHECKPOINT``: one checkpoint decoded through the storage's restricted loader."""

from __future__ import annotations

import json
from typing import Any

import click
from agent_framework import WorkflowCheckpoint
from rich.console import Console
from rich.table import Table

from ..checkpoints.history import (
    EXECUTOR_STATE_KEY,
    MongoDBPendingRequestSummary,
    pending_request_summary,
    value_summary,
)
from ._connection import Connection
from ._errors import allow_type_hint, run
from ._options import allow_type_option, scope_options
from ._text import data_text, folded, printable, terminal_width

__all__ = ["show"]

_INDENT = "  "


def checkpoint_summary(checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
    """What ``show`` reports of a checkpoint: never the state's or the messages' contents."""
    executors: object = checkpoint.state.get(EXECUTOR_STATE_KEY, {})
    executor_states: dict[str, int] = {}
    if isinstance(executors, dict):
        for executor_id, state in executors.items():  # pyright: ignore[reportUnknownVariableType]
            executor_states[str(executor_id)] = value_summary(state).size  # pyright: ignore[reportUnknownArgumentType]
    return {
        "checkpoint_id": checkpoint.checkpoint_id,
        "workflow_name": checkpoint.workflow_name,
        "previous_checkpoint_id": checkpoint.previous_checkpoint_id,
        "timestamp": checkpoint.timestamp,
        "iteration_count": checkpoint.iteration_count,
        "version": checkpoint.version,
        "state_keys": sorted(key for key in checkpoint.state if key != EXECUTOR_STATE_KEY),
        "executor_state_bytes": executor_states,
        "pending_requests": {
            request_id: request.to_dict() for request_id, request in pending_requests(checkpoint).items()
        },
        "message_counts": {source: len(messages) for source, messages in checkpoint.messages.items()},
    }


def pending_requests(checkpoint: WorkflowCheckpoint) -> dict[str, MongoDBPendingRequestSummary]:
    """Each pending request of ``checkpoint`` by id, summarised as ``history`` and ``diff`` do."""
    return {
        str(request_id): pending_request_summary(event)
        for request_id, event in checkpoint.pending_request_info_events.items()
    }


def request_block(request_id: str, request: MongoDBPendingRequestSummary) -> list[str]:
    """A pending request as ``label: value`` lines under its id (not a table: its field names
    alone may be wider than a terminal, and a block keeps each value whole at any width)."""
    rows = [
        ("request", request.request_type or "-"),
        ("event", request.event_type),
        ("expects", request.response_type or "-"),
        ("from", request.source_executor_id or "-"),
        ("payload", data_text(request)),
        ("fields", ", ".join(request.data_fields) or "-"),
    ]
    label = max(len(name) for name, _ in rows) + 1
    return [request_id, *(f"{_INDENT}{name + ':':<{label}} {value}" for name, value in rows)]


def print_summary(summary: dict[str, Any], requests: dict[str, MongoDBPendingRequestSummary]) -> None:
    console = Console(soft_wrap=True)
    for field in ("checkpoint_id", "workflow_name", "previous_checkpoint_id", "timestamp", "iteration_count"):
        console.print(f"{field}: {summary[field]}", markup=False, highlight=False)
    console.print(f"state keys: {', '.join(summary['state_keys']) or '-'}", markup=False, highlight=False)
    executors = Table("executor", "state bytes", title="Executors")
    for executor_id, size in summary["executor_state_bytes"].items():
        executors.add_row(executor_id, str(size))
    console.print(executors)
    click.echo(f"Pending requests: {len(requests) or 'none'}")
    width = terminal_width()
    for request_id, request in requests.items():
        for line in request_block(request_id, request):
            for part in folded(printable(line), width):
                click.echo(part)
    messages = Table("source", "messages", title="Messages")
    for source, count in summary["message_counts"].items():
        messages.add_row(source, str(count))
    console.print(messages)


@click.command()
@scope_options
@click.option("--workflow", required=True, help="The run's workflow.")
@allow_type_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--raw", is_flag=True, help="Print the whole decoded checkpoint (its to_dict(), as JSON).")
@click.argument("session")
@click.argument("checkpoint_id")
@click.pass_obj
def show(  # noqa: PLR0917 - Click passes every option
    connection: Connection,
    tenant: str,
    application: str | None,
    workflow: str,
    allowed_types: tuple[str, ...],
    as_json: bool,
    raw: bool,
    session: str,
    checkpoint_id: str,
) -> None:
    """Summarise checkpoint CHECKPOINT_ID of the run SESSION, loaded as a worker would load it.

    The application classes the checkpoint holds must be named with --allow-type, as in the
    workers' allowed_checkpoint_types; Agent Framework's own types need no entry.
    """

    async def load() -> WorkflowCheckpoint:
        async with connection.storage(
            tenant=tenant,
            application=application,
            workflow=workflow,
            session=session,
            allowed_types=allowed_types,
        ) as storage:
            return await storage.load(checkpoint_id)

    with allow_type_hint():
        checkpoint = run(load())
    if raw:
        click.echo(json.dumps(checkpoint.to_dict(), indent=2, default=repr))
    elif as_json:
        click.echo(json.dumps(checkpoint_summary(checkpoint), indent=2))
    else:
        print_summary(checkpoint_summary(checkpoint), pending_requests(checkpoint))
