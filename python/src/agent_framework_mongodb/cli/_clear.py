"""``clear RUN``: delete one run's checkpoints, its chunks and its counter."""

from __future__ import annotations

import click

from ..checkpoints import MongoDBCheckpointClearResult
from ._connection import Connection
from ._errors import run
from ._options import scope_options

__all__ = ["clear"]


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
    click.echo(
        f"Cleared {workflow}/{session}: {result.checkpoints_deleted} checkpoint(s), "
        f"{result.chunks_deleted} chunk(s), {result.counter_deleted} counter(s) deleted."
    )
