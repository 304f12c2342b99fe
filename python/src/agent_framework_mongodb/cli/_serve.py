"""``serve``: the in-process engine behind MongoDB's wire protocol, for any client, until interrupted.

A developer without MongoDB points pymongo (or any driver, or the README's examples) at the URI
it prints. The data is the file-backed engine's (``--engine-file``, given to the group or to
``serve``), or memory only without one. Needs the testing extra, as ``--engine-file`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Generator
from pathlib import Path

import click

from ._connection import Connection, require_engine_extra
from ._errors import CommandFailure

__all__ = ["serve"]

DEFAULT_PORT = 27017


@click.command()
@click.option(
    "--engine-file",
    "serve_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The engine file to serve (the group's --engine-file works too); memory only without one.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="The port on 127.0.0.1 to listen on; 0 picks a free one.",
)
@click.option("--replica-set", default="rs0", show_default=True, help="The replica set's name.")
@click.pass_obj
def serve(connection: Connection, serve_file: Path | None, port: int, replica_set: str) -> None:
    """Serve the in-process engine on 127.0.0.1 over MongoDB's wire protocol until interrupted."""
    path = _engine_file(connection.engine_file, serve_file)
    require_engine_extra()
    asyncio.run(_serve(path, port, replica_set))


def _engine_file(group_file: Path | None, serve_file: Path | None) -> Path | None:
    if group_file is not None and serve_file is not None and group_file.resolve() != serve_file.resolve():
        raise click.UsageError("serve got two different engine files; pass --engine-file once.")
    return serve_file or group_file


async def _serve(path: Path | None, port: int, replica_set: str) -> None:
    from ..testing import EngineFileError, InMemoryMongoClient, WireProtocolServer  # noqa: PLC0415 - the testing extra

    try:
        engine = InMemoryMongoClient(path=path)
    except EngineFileError as error:
        raise CommandFailure("engine_file", str(error)) from error
    except OSError as error:
        message = f"The engine file {str(path)!r} cannot be opened ({error.strerror or error})."
        raise CommandFailure("engine_file", message) from error
    try:
        server = WireProtocolServer(engine, port=port, replica_set=replica_set)
        try:
            await server.start()
        except OSError as error:
            raise CommandFailure(
                "serve", f"Cannot listen on 127.0.0.1:{port} ({error.strerror or error})."
            ) from error
        with _until_interrupted() as interrupted:  # handlers first: a signal right after the URI counts
            held = (
                f"the engine file {str(path)!r}" if path is not None else "memory only (gone when it stops)"
            )
            click.echo(f"Serving {held} at {server.uri}")
            click.echo(f"Point a client at it, e.g. MONGODB_URI='{server.uri}'. Stop with Ctrl-C.")
            try:
                await interrupted.wait()
            finally:
                await server.stop()
    finally:
        await engine.close()
    click.echo("Stopped.")


@contextlib.contextmanager
def _until_interrupted() -> Generator[asyncio.Event]:
    """An event SIGINT or SIGTERM sets, while the block runs."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        yield stop
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
