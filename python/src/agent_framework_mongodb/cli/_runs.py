"""``runs``: the tenant's runs, newest activity first, from their counters (no payload is read)."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from ..checkpoints import MongoDBRunSummary
from ._connection import Connection
from ._errors import run
from ._options import scope_options

__all__ = ["runs"]


async def all_runs(
    connection: Connection, *, tenant: str, application: str | None, workflow: str | None
) -> list[MongoDBRunSummary]:
    """Every run of the tenant and application (and workflow), one bounded page at a time."""
    summaries: list[MongoDBRunSummary] = []
    async with connection.storage(tenant=tenant, application=application) as storage:
        cursor: str | None = None
        while True:
            page = await storage.list_runs(workflow_name=workflow, cursor=cursor)
            summaries.extend(page.runs)
            cursor = page.next_cursor
            if cursor is None:
                return summaries


def summary_json(summary: MongoDBRunSummary) -> dict[str, object]:
    """A run summary as a JSON object (``updated_at`` in ISO 8601)."""
    return {
        "workflow_name": summary.workflow_name,
        "session_id": summary.session_id,
        "latest_checkpoint_id": summary.latest_checkpoint_id,
        "latest_sequence": summary.latest_sequence,
        "checkpoint_count": summary.checkpoint_count,
        "updated_at": summary.updated_at.isoformat(),
        "waiting_for_input": summary.waiting_for_input,
    }


def runs_table(summaries: list[MongoDBRunSummary]) -> Table:
    """The runs as a Rich table."""
    table = Table("workflow", "session", "latest sequence", "checkpoints", "updated", "waiting")
    for summary in summaries:
        table.add_row(
            summary.workflow_name,
            summary.session_id,
            str(summary.latest_sequence),
            str(summary.checkpoint_count),
            summary.updated_at.isoformat(timespec="seconds"),
            "yes" if summary.waiting_for_input else "no",
        )
    return table


@click.command()
@scope_options
@click.option("--workflow", default=None, help="Only runs of this workflow.")
@click.option("--waiting", is_flag=True, help="Only runs waiting for input.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.pass_obj
def runs(  # noqa: PLR0917 - Click passes every option
    connection: Connection,
    tenant: str,
    application: str | None,
    workflow: str | None,
    waiting: bool,
    as_json: bool,
) -> None:
    """List the tenant's runs, newest activity first."""
    summaries = run(all_runs(connection, tenant=tenant, application=application, workflow=workflow))
    if waiting:
        summaries = [summary for summary in summaries if summary.waiting_for_input]
    if as_json:
        click.echo(json.dumps([summary_json(summary) for summary in summaries], indent=2))
    else:
        Console(soft_wrap=True).print(runs_table(summaries))
