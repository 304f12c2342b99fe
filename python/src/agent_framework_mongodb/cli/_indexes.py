"""``indexes ensure`` and ``indexes validate``."""

from __future__ import annotations

import click

from ..checkpoints import ensure_checkpoint_indexes, validate_checkpoint_indexes
from ._connection import Connection
from ._errors import run

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
@click.pass_obj
def ensure(connection: Connection, timeout: float | None) -> None:
    """Create the indexes (a deploy-time step); existing identical ones are kept."""

    async def ensure_all() -> tuple[str, ...]:
        async with connection.collection_handle() as collection:
            return await ensure_checkpoint_indexes(collection, timeout=timeout)

    for name in run(ensure_all()):
        click.echo(f"ensured {name}")


@indexes.command()
@click.pass_obj
def validate(connection: Connection) -> None:
    """Check, read-only, that every index exists as defined; non-zero exit naming a bad one."""

    async def validate_all() -> None:
        async with connection.collection_handle() as collection:
            await validate_checkpoint_indexes(collection)

    run(validate_all())
    click.echo("All checkpoint indexes are present and match.")
