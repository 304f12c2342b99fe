"""``indexes ensure``, ``indexes validate`` and ``indexes drop``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol, cast

import click

from ..checkpoints import ensure_checkpoint_indexes, validate_checkpoint_indexes
from ..checkpoints.deadlines import bounded, operation_deadline
from ..checkpoints.diagnostics._deployment import cli_command
from ..checkpoints.indexes import CHECKPOINT_INDEXES, index_differences
from ..errors import translated_driver_errors
from ._connection import Connection
from ._errors import CommandFailure, run
from ._options import json_option

__all__ = ["indexes"]

_BY_NAME = {spec.name: spec for spec in CHECKPOINT_INDEXES}


class _DroppingCollection(Protocol):
    """What ``indexes drop`` needs of a collection (pymongo's, or the in-process engine's)."""

    async def list_indexes(self) -> Any: ...

    async def drop_index(self, index_or_name: str, /) -> None: ...


@click.group()
def indexes() -> None:
    """Create or check the checkpoint collection's indexes, or drop one that differs."""


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


@indexes.command()
@click.argument("name", type=click.Choice(sorted(_BY_NAME)), metavar="NAME")
@click.option("--yes", is_flag=True, help="Drop it; without --yes, only say what would be dropped.")
@click.pass_obj
def drop(connection: Connection, name: str, yes: bool) -> None:
    """Drop NAME, one of this package's indexes that differs from its definition, so that
    `indexes ensure` can create it as defined (the fix doctor prints for a different index).

    Only the package's own index names are accepted, and only one that exists and differs; without
    --yes nothing is dropped. Between the drop and `indexes ensure`, a unique index's guarantee is
    gone: run both in one deploy step, with the run's writers quiet.
    """
    spec = _BY_NAME[name]
    where = f"{connection.database}.{connection.collection}"

    async def drop_one() -> str:
        async with connection.collection_handle() as handle:
            collection = cast("_DroppingCollection", handle)
            with (
                operation_deadline(connection.deadlines.operation),
                translated_driver_errors(operation="provision", action="drop the index"),
            ):
                cursor = await bounded(collection.list_indexes())
                listed: dict[str, Mapping[str, Any]] = {
                    str(index.get("name")): index for index in await bounded(cursor.to_list(None))
                }
                if name not in listed:
                    raise CommandFailure(
                        "not_found", f"{where} has no index {name}: nothing to drop; run indexes ensure."
                    )
                differences = index_differences(spec, listed[name])
                if not differences:
                    raise CommandFailure(
                        "index", f"{name} on {where} is as defined: not dropped (nothing to fix)."
                    )
                if yes:
                    await bounded(collection.drop_index(name))
                return ", ".join(differences)

    differences = run(drop_one())
    ensure = f"{cli_command(connection.database, connection.collection)} indexes ensure"
    consequence = " Until then saves are neither idempotent nor ordered." if spec.unique else ""
    if yes:
        click.echo(
            f"dropped {name} on {where} (it differed: {differences}); now run "
            f"`{ensure}` to create it as defined.{consequence}"
        )
    else:
        click.echo(
            f"would drop {name} on {where} (it differs: {differences}); pass --yes to drop it, then run "
            f"`{ensure}`.{consequence}"
        )
