"""``fork SESSION --to NEW``: copy a run up to a checkpoint into another session, to resume it apart."""

from __future__ import annotations

import json

import click

from ..checkpoints import MongoDBForkResult
from ..checkpoints.forking import ForkKeep
from ._connection import Connection
from ._errors import allow_type_hint, run
from ._options import allow_type_option, json_option, scope_options
from ._tables import print_listing
from ._text import printable

__all__ = ["fork"]


def _keep(ctx: click.Context, param: click.Parameter, value: str) -> ForkKeep:
    """``latest``, ``chain`` or a count of at least 1 (a callback: Click's ``ParamType`` is
    generic only in its newest releases)."""
    del ctx, param
    text = value.strip().lower()
    if text in {"latest", "chain"}:
        return "latest" if text == "latest" else "chain"
    if not text.isdigit() or int(text) < 1:
        raise click.BadParameter(f"{value!r} is not 'latest', 'chain' or a count of at least 1")
    return int(text)


def summary_lines(result: MongoDBForkResult) -> list[str]:
    """What a fork did, one value to a line, so a long id is never cut at 80 columns."""
    return [
        f"forked:     {printable(result.workflow_name)}/{printable(result.source_session_id)}",
        f"into:       {printable(result.session_id)}",
        f"resume at:  {printable(result.checkpoint_id)}",
        f"copied:     {result.copied}, already there: {result.already_copied}",
        f"moved:      {result.transplanted} as stored, {result.reencoded} re-encoded",
        f"signed:     {'yes' if result.signed else 'no'}",
    ]


@click.command()
@scope_options
@click.option("--workflow", required=True, help="The run's workflow.")
@click.option("--to", "to_session", required=True, metavar="NEW_SESSION", help="The session to copy into.")
@click.option(
    "--checkpoint",
    default=None,
    metavar="CHECKPOINT",
    help="The checkpoint to fork at (default: the latest).",
)
@click.option(
    "--keep",
    callback=_keep,
    default="latest",
    metavar="latest|chain|N",
    show_default=True,
    help="Copy the checkpoint alone (latest), it and its N-1 nearest ancestors (N), or every "
    "ancestor (chain).",
)
@allow_type_option
@json_option("Print what was copied as a JSON object.")
@click.argument("session")
@click.pass_obj
def fork(  # noqa: PLR0917 - Click passes every option
    connection: Connection,
    tenant: str,
    application: str | None,
    workflow: str,
    to_session: str,
    checkpoint: str | None,
    keep: ForkKeep,
    allowed_types: tuple[str, ...],
    as_json: bool,
    session: str,
) -> None:
    """Copy the run SESSION up to a checkpoint into NEW_SESSION of the same workflow, so the copy
    can be resumed with another answer; SESSION is only read.

    Ids are kept: resume the copy with the checkpoint id printed, on a storage for NEW_SESSION.
    Each checkpoint is loaded through the restricted loader (so the application classes it holds
    are named with --allow-type) and saved into the copy; with signing keys, the source must verify
    and the copy is signed. Running the same fork again copies only what is missing. The copies are
    kept until the run is cleared (the command sets no ttl).
    """

    async def fork_one() -> MongoDBForkResult:
        async with connection.storage(
            tenant=tenant,
            application=application,
            workflow=workflow,
            session=session,
            allowed_types=allowed_types,
        ) as storage:
            return await storage.fork_run(to_session_id=to_session, checkpoint_id=checkpoint, keep=keep)

    with allow_type_hint():
        result = run(fork_one())
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    for line in summary_lines(result):
        click.echo(line)
    click.echo()
    print_listing(
        ["#", "checkpoint"], [[str(index), cp] for index, cp in enumerate(result.checkpoint_ids, 1)]
    )
