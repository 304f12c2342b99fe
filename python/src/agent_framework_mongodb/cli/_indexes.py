"""``indexes ensure`` and ``indexes validate``."""

from __future__ import annotations

import json

import click

from ..checkpoints import ensure_checkpoint_indexes, validate_checkpoint_indexes
from ._connection import Connection
from ._errors import run
from ._options import json_option

__all__ = ["indexes"]


@click.group()
def indexes() -> None:
    """Create or check the checkpoint collection's indexes."""


@indexes.command()
@click.option(
    "--timeout",
    type=float,
    default=None,
    help="Seconds the builds may take; none by default (MongoDB aborts a build cut short).",
)
@json_option("Print the ensured index names as a JSON array.")
@click.pass_obj
def ensure(connection: Connection, timeout: float | None, as_json: bool) -> None:
    """Create the indexes (a deploy-time step); existing identical ones are kept.

    The builds have no deadline unless --timeout is given here (the group's --timeout bounds the
    wait for a server only): MongoDB aborts a build its deadline cuts short.
    """

    async def ensure_all() -> tuple[str, ...]:
        async with connection.collection_handle() as collection:
            return await ensure_checkpoint_indexes(collection, timeout=timeout)

    names = run(ensure_all())
    if as_json:
        click.echo(json.dumps(list(names), indent=2))
        return
    for name in names:
        click.echo(f"ensured {name}")


@indexes.command()
@click.pass_obj
def validate(connection: Connection) -> None:
    """Check, read-only, that every index exists as defined; non-zero exit naming a bad one."""

    async def validate_all() -> None:
        async with connection.collection_handle() as collection:
            await validate_checkpoint_indexes(collection, timeout=connection.deadlines.operation)

    run(validate_all())
    click.echo("All checkpoint indexes are present and match.")
