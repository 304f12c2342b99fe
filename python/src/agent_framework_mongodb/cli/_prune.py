"""``prune --older-than DURATION``: clear the runs whose last activity is older (a dry run by default)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import click
from rich.console import Console
from rich.progress import Progress

from ..checkpoints import MongoDBCheckpointStorage, MongoDBRunSummary
from ._connection import Connection
from ._durations import parse_duration
from ._errors import run
from ._options import scope_options
from ._runs import all_runs

__all__ = ["prune"]


def stale_runs(summaries: list[MongoDBRunSummary], older_than: timedelta) -> list[MongoDBRunSummary]:
    """The runs whose latest save (``updated_at``, server time) is before now minus ``older_than``."""
    cutoff = datetime.now(timezone.utc) - older_than
    return [summary for summary in summaries if _aware(summary.updated_at) < cutoff]


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


async def clear_runs(
    connection: Connection,
    *,
    tenant: str,
    application: str | None,
    workflow: str | None,
    older_than: timedelta,
    act: bool,
) -> None:
    """List the stale runs, then (when acting) clear each: a progress bar on a terminal, lines otherwise."""
    summaries = stale_runs(
        await all_runs(connection, tenant=tenant, application=application, workflow=workflow), older_than
    )
    if not act:
        for summary in summaries:
            click.echo(
                f"would clear {summary.workflow_name}/{summary.session_id} "
                f"(last activity {summary.updated_at.isoformat(timespec='seconds')})"
            )
        click.echo(f"{len(summaries)} run(s) would be cleared; pass --yes to clear them.")
        return
    async with connection.storage(tenant=tenant, application=application) as storage:
        console = Console()
        if console.is_terminal:
            with Progress(console=console) as progress:
                task = progress.add_task("Clearing runs", total=len(summaries))
                for summary in summaries:
                    await _clear(storage, summary)
                    progress.advance(task)
        else:
            for summary in summaries:
                deleted = await _clear(storage, summary)
                click.echo(f"cleared {summary.workflow_name}/{summary.session_id}: {deleted} checkpoint(s)")
    click.echo(f"{len(summaries)} run(s) cleared.")


async def _clear(storage: MongoDBCheckpointStorage, summary: MongoDBRunSummary) -> int:
    result = await storage.for_workflow(summary.workflow_name, summary.session_id).clear_run()
    return result.checkpoints_deleted


@click.command()
@scope_options
@click.option(
    "--older-than",
    "older_than",
    callback=parse_duration,
    required=True,
    help="Last activity before now minus this.",
)
@click.option("--workflow", default=None, help="Only runs of this workflow.")
@click.option("--dry-run/--yes", "dry_run", default=True, help="List the runs (default), or clear them.")
@click.pass_obj
def prune(  # noqa: PLR0917 - Click passes every option
    connection: Connection,
    tenant: str,
    application: str | None,
    older_than: timedelta,
    workflow: str | None,
    dry_run: bool,
) -> None:
    """Clear the runs whose last activity is older than --older-than (quiesce their writers first)."""
    run(
        clear_runs(
            connection,
            tenant=tenant,
            application=application,
            workflow=workflow,
            older_than=older_than,
            act=not dry_run,
        )
    )
