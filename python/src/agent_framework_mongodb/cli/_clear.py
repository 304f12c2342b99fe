"""``clear RUN``: delete one run's checkpoints, its chunks and its counter."""

from __future__ import annotations

import click

from ..checkpoints import MongoDBCheckpointClearResult
from ._connection import Connection
from ._errors import CommandFailure, run
from ._hints import NO_APPLICATION_HINT, runs_command, scope_words
from ._options import scope_options

__all__ = ["clear"]


def nothing_deleted(result: MongoDBCheckpointClearResult) -> bool:
    """Whether ``clear_run`` found no run: no checkpoint, no chunk and no counter was deleted.

    A run's counter exists from its first save until it is cleared, so a clear that deletes nothing
    met a name no run has (or a run already cleared); telling needs no further round trip.
    """
    return not (result.checkpoints_deleted or result.chunks_deleted or result.counter_deleted)


@click.command()
@scope_options
@click.option("--workflow", required=True, help="The run's workflow.")
@click.argument("session")
@click.pass_obj
def clear(connection: Connection, tenant: str, application: str | None, workflow: str, session: str) -> None:
    """Delete every checkpoint of the run SESSION, then its chunks and counter (quiesce its writers first)."""

    async def clear_one() -> MongoDBCheckpointClearResult:
        async with connection.catalog(tenant=tenant, application=application) as catalog:
            return await catalog.clear_run(workflow, session)

    result = run(clear_one())
    if nothing_deleted(result):
        hint = "" if application else f"; {NO_APPLICATION_HINT}"
        raise CommandFailure(
            "not_found",
            f"No run {workflow}/{session} for {scope_words(tenant, application)}: nothing was cleared. "
            f"List the runs with `{runs_command(tenant, application)}`{hint}.",
        )
    click.echo(
        f"Cleared {workflow}/{session}: {result.checkpoints_deleted} checkpoint(s), "
        f"{result.chunks_deleted} chunk(s), {result.counter_deleted} counter(s) deleted."
    )
