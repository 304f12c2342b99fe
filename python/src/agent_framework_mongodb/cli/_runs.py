"""``runs``: the tenant's runs, newest activity first, from their counters and a count of their
checkpoints (no payload is read)."""

from __future__ import annotations

import json

import click

from ..checkpoints import MongoDBCheckpointCatalog, MongoDBRunSummary
from ._connection import Connection
from ._errors import run
from ._hints import empty_runs
from ._options import scope_options
from ._tables import print_listing

__all__ = ["runs"]


async def all_runs(
    connection: Connection, *, tenant: str, application: str | None, workflow: str | None
) -> list[MongoDBRunSummary]:
    """Every run of the tenant and application (and workflow), one bounded page at a time."""
    async with connection.catalog(tenant=tenant, application=application) as catalog:
        return await runs_of(catalog, workflow)


async def runs_of(catalog: MongoDBCheckpointCatalog, workflow: str | None) -> list[MongoDBRunSummary]:
    """Every run the catalog lists (of ``workflow``, or all)."""
    return [summary async for summary in catalog.iter_runs(workflow_name=workflow)]


def checkpoints_cell(summary: MongoDBRunSummary) -> str:
    """The retained checkpoints, ``10000+`` past the count's limit."""
    return (
        f"{summary.checkpoint_count}+" if summary.checkpoint_count_capped else str(summary.checkpoint_count)
    )


def summary_json(summary: MongoDBRunSummary) -> dict[str, object]:
    """A run summary as a JSON object (``updated_at`` in ISO 8601)."""
    return {
        "workflow_name": summary.workflow_name,
        "session_id": summary.session_id,
        "latest_checkpoint_id": summary.latest_checkpoint_id,
        "latest_sequence": summary.latest_sequence,
        "checkpoint_count": summary.checkpoint_count,
        "checkpoint_count_capped": summary.checkpoint_count_capped,
        "saves": summary.saves,
        "updated_at": summary.updated_at.isoformat(),
        "waiting_for_input": summary.waiting_for_input,
    }


RUN_HEADERS = ("workflow", "session", "latest sequence", "checkpoints", "saves", "updated", "waiting")


def run_rows(summaries: list[MongoDBRunSummary]) -> list[tuple[str, ...]]:
    """The runs' cells under :data:`RUN_HEADERS`: "checkpoints" are those the run retains, "saves"
    those it made."""
    return [
        (
            summary.workflow_name,
            summary.session_id,
            str(summary.latest_sequence),
            checkpoints_cell(summary),
            str(summary.saves),
            summary.updated_at.isoformat(timespec="seconds"),
            "yes" if summary.waiting_for_input else "no",
        )
        for summary in summaries
    ]


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
    listed = run(all_runs(connection, tenant=tenant, application=application, workflow=workflow))
    summaries = [summary for summary in listed if summary.waiting_for_input] if waiting else listed
    if as_json:
        click.echo(json.dumps([summary_json(summary) for summary in summaries], indent=2))
    elif summaries:
        print_listing(RUN_HEADERS, run_rows(summaries))
    if not summaries:  # why, and what to try: in place of the table, or on stderr beside the JSON
        not_waiting = len(listed) if waiting else None
        hint = empty_runs(
            connection, tenant=tenant, application=application, workflow=workflow, not_waiting=not_waiting
        )
        click.echo(hint, err=as_json)
