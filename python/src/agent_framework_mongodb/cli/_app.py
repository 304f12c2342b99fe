"""The command group and its connection options."""

from __future__ import annotations

import click

from ..checkpoints.connection import DEFAULT_COLLECTION_NAME, DEFAULT_DATABASE_NAME
from ._checkpoints import checkpoints
from ._clear import clear
from ._connection import CliSettings, Connection, default_client
from ._indexes import indexes
from ._prune import prune
from ._runs import runs
from ._show import show
from ._sign_run import sign_run_command

__all__ = ["cli"]


@click.group()
@click.option(
    "--uri", envvar="MONGODB_URI", default=None, help="MongoDB connection string [env: MONGODB_URI]."
)
@click.option("--database", default=DEFAULT_DATABASE_NAME, show_default=True, help="Database name.")
@click.option("--collection", default=DEFAULT_COLLECTION_NAME, show_default=True, help="Collection name.")
@click.pass_context
def cli(context: click.Context, uri: str | None, database: str, collection: str) -> None:
    """Provision, inspect and clear MongoDB workflow checkpoints."""
    injected = context.obj if isinstance(context.obj, CliSettings) else None
    context.obj = Connection(
        uri=uri,
        database=database,
        collection=collection,
        client_factory=default_client if injected is None else injected.client_factory,
        owns_client=injected is None,
    )


cli.add_command(indexes)
cli.add_command(runs)
cli.add_command(checkpoints)
cli.add_command(show)
cli.add_command(clear)
cli.add_command(prune)
cli.add_command(sign_run_command)
