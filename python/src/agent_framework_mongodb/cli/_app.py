"""The command group and its connection options."""

from __future__ import annotations

import functools
from pathlib import Path

import click
from click.core import ParameterSource

from ..checkpoints.connection import DEFAULT_COLLECTION_NAME, DEFAULT_DATABASE_NAME
from ..checkpoints.engine_uri import engine_uri_path, is_engine_uri
from ..checkpoints.options import MAX_OPERATION_TIMEOUT
from ..errors import MongoDBConfigurationError
from ._checkpoints import checkpoints
from ._clear import clear
from ._connection import (
    CliSettings,
    Connection,
    default_client,
    engine_factory,
    require_engine_extra,
    resolve_deadlines,
)
from ._doctor import doctor
from ._fork import fork
from ._history import diff, history
from ._indexes import indexes
from ._prune import prune
from ._runs import runs
from ._serve import serve
from ._show import show
from ._sign_run import sign_run_command

__all__ = ["EXIT_STATUSES", "cli"]

EXIT_STATUSES = (
    "Exit status: 0 when the command did what it says; 1 when it failed or found something wrong "
    "(the error's [category] and message on standard error; doctor: a check failed); 2 for a "
    "usage error (a missing or invalid option, no URI, a missing extra)."
)


@click.group(epilog=EXIT_STATUSES)
@click.option(
    "--uri", envvar="MONGODB_URI", default=None, help="MongoDB connection string [env: MONGODB_URI]."
)
@click.option(
    "--engine-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Use the package's file-backed in-process engine over this file instead of a server "
    "(created when missing; needs the testing extra). A development store, not a database.",
)
@click.option("--database", default=DEFAULT_DATABASE_NAME, show_default=True, help="Database name.")
@click.option("--collection", default=DEFAULT_COLLECTION_NAME, show_default=True, help="Collection name.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True, max=MAX_OPERATION_TIMEOUT),
    default=None,
    metavar="SECONDS",
    help="Seconds each storage call may take, and the wait for a server; 30 by default. The URI's "
    "own timeoutMS and serverSelectionTimeoutMS win over it.",
)
@click.pass_context
def cli(  # noqa: PLR0917 - Click passes every option
    context: click.Context,
    uri: str | None,
    engine_file: Path | None,
    database: str,
    collection: str,
    timeout: float | None,
) -> None:
    """Provision, inspect and clear MongoDB workflow checkpoints."""
    injected = context.obj if isinstance(context.obj, CliSettings) else CliSettings()
    if engine_file is not None:
        if context.get_parameter_source("uri") is ParameterSource.COMMANDLINE:
            raise click.UsageError("Pass either --uri or --engine-file, not both.")
        uri = None  # MONGODB_URI from the environment does not apply to the engine
    elif uri is not None and is_engine_uri(uri):
        # engine:PATH, as a storage's connection string takes it: the same engine as --engine-file.
        try:
            engine_file, uri = Path(engine_uri_path(uri)), None
        except MongoDBConfigurationError as error:
            raise click.UsageError(str(error)) from None
    if engine_file is not None:
        require_engine_extra()
    deadlines = resolve_deadlines(uri, timeout)
    if deadlines.overridden:
        verb = "applies" if len(deadlines.overridden) == 1 else "apply"
        click.echo(
            f"note: the URI's {' and '.join(deadlines.overridden)} {verb} instead of --timeout.", err=True
        )
    if injected.client_factory is not None:
        factory, owns = injected.client_factory, False
    elif engine_file is not None:
        factory, owns = engine_factory(engine_file), True
    else:
        factory, owns = functools.partial(default_client, defaults=deadlines.client_options), True
    context.obj = Connection(
        uri=uri,
        database=database,
        collection=collection,
        client_factory=factory,
        owns_client=owns,
        deadlines=deadlines,
        engine_file=engine_file,
        on_client=injected.on_client,
    )


cli.add_command(indexes)
cli.add_command(runs)
cli.add_command(checkpoints)
cli.add_command(show)
cli.add_command(history)
cli.add_command(diff)
cli.add_command(fork)
cli.add_command(clear)
cli.add_command(prune)
cli.add_command(sign_run_command)
cli.add_command(doctor)
cli.add_command(serve)
