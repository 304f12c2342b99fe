"""``prune --older-than DURATION``: clear the runs idle for longer (a dry run by default).

The catalog plans the prune (``MongoDBCheckpointCatalog.plan_prune``): a run is idle when its latest
save is more than DURATION before the server's current time, and an idle run waiting for input is
skipped unless ``--include-waiting`` is given. The dry run names each run it would clear and each idle
run it skips, with the reason; ``--yes`` clears the planned runs one at a time, each only if it has
not saved since the plan (else it is skipped, and said so).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import click
from rich.console import Console
from rich.progress import Progress

from ..checkpoints import (
    MongoDBCheckpointCatalog,
    MongoDBPrunePlan,
    MongoDBPruneResult,
    MongoDBRunSummary,
    MongoDBSkippedRun,
    MongoDBSkipReason,
)
from ._connection import Connection
from ._durations import parse_duration
from ._errors import run
from ._options import scope_options

__all__ = ["prune"]

_HINTS = {
    MongoDBSkipReason.WAITING_FOR_INPUT: "pass --include-waiting to clear it",
    MongoDBSkipReason.SAVED_SINCE_PLANNED: "it is active again",
}


def run_name(summary: MongoDBRunSummary) -> str:
    return f"{summary.workflow_name}/{summary.session_id}"


def last_activity(summary: MongoDBRunSummary) -> str:
    return f"last activity {summary.updated_at.isoformat(timespec='seconds')}"


def skip_line(skipped: MongoDBSkippedRun) -> str:
    """``skip RUN: REASON (last activity ...); HINT``."""
    return (
        f"skip {run_name(skipped.run)}: {skipped.reason.value} ({last_activity(skipped.run)}); "
        f"{_HINTS[skipped.reason]}"
    )


def report_plan(plan: MongoDBPrunePlan) -> None:
    """The dry run: each run it would clear, each idle run it skips and why, and the totals."""
    for summary in plan.runs:
        click.echo(f"would clear {run_name(summary)} ({last_activity(summary)})")
    for skipped in plan.skipped:
        click.echo(skip_line(skipped))
    click.echo(
        f"{len(plan.runs)} run(s) would be cleared, {len(plan.skipped)} skipped; pass --yes to clear them."
    )


async def carry_out(catalog: MongoDBCheckpointCatalog, plan: MongoDBPrunePlan) -> MongoDBPruneResult:
    """Prune one planned run at a time (a progress bar on a terminal, a line per run otherwise)."""
    console = Console()
    cleared: list[MongoDBPruneResult] = []
    with Progress(console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("Clearing runs", total=len(plan.runs))
        for summary in plan.runs:
            outcome = await catalog.prune(dataclasses.replace(plan, runs=(summary,), skipped=()))
            for done in outcome.cleared:
                if not console.is_terminal:
                    click.echo(
                        f"cleared {run_name(done.run)}: {done.result.checkpoints_deleted} checkpoint(s)"
                    )
            cleared.append(outcome)
            progress.advance(task)
    return MongoDBPruneResult(
        tuple(done for outcome in cleared for done in outcome.cleared),
        plan.skipped + tuple(skip for outcome in cleared for skip in outcome.skipped),
    )


async def prune_runs(
    connection: Connection,
    *,
    tenant: str,
    application: str | None,
    workflow: str | None,
    older_than: timedelta,
    include_waiting: bool,
    act: bool,
) -> None:
    """Plan the prune; then report it (dry run) or carry it out and report what it did."""
    async with connection.catalog(tenant=tenant, application=application) as catalog:
        plan = await catalog.plan_prune(
            older_than=older_than, workflow_name=workflow, include_waiting=include_waiting
        )
        if not act:
            report_plan(plan)
            return
        result = await carry_out(catalog, plan)
    for skipped in result.skipped:
        click.echo(skip_line(skipped))
    click.echo(f"{len(result.cleared)} run(s) cleared, {len(result.skipped)} skipped.")


@click.command()
@scope_options
@click.option(
    "--older-than",
    "older_than",
    callback=parse_duration,
    required=True,
    help="Last activity before the server's current time minus this.",
)
@click.option("--workflow", default=None, help="Only runs of this workflow.")
@click.option(
    "--include-waiting",
    is_flag=True,
    help="Also clear idle runs waiting for input (by default they are skipped).",
)
@click.option("--dry-run/--yes", "dry_run", default=True, help="List the runs (default), or clear them.")
@click.pass_obj
def prune(  # noqa: PLR0917 - Click passes every option
    connection: Connection,
    tenant: str,
    application: str | None,
    older_than: timedelta,
    workflow: str | None,
    include_waiting: bool,
    dry_run: bool,
) -> None:
    """Clear the runs idle for longer than --older-than, except those waiting for input (quiesce their
    writers first)."""
    run(
        prune_runs(
            connection,
            tenant=tenant,
            application=application,
            workflow=workflow,
            older_than=older_than,
            include_waiting=include_waiting,
            act=not dry_run,
        )
    )
