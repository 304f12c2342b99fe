"""``sign-run SESSION``: sign a run's checkpoints in place, to move it onto signing keys."""

from __future__ import annotations

import base64
import binascii
import os

import click

from ..checkpoints import MongoDBCheckpointStorageOptions, MongoDBConfigurationError
from ..checkpoints.transition import SignRunResult, sign_run
from ._connection import Connection
from ._errors import CommandFailure, run
from ._options import scope_options

__all__ = ["sign_run_command"]

KEYS_VARIABLE = "AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS"


@click.command("sign-run")
@scope_options
@click.option("--workflow", required=True, help="The run's workflow.")
@click.option(
    "--allow-type",
    "allowed_types",
    multiple=True,
    metavar="MODULE:QUALNAME",
    help="An application class the checkpoints hold (repeatable), as in allowed_checkpoint_types.",
)
@click.option("--yes", is_flag=True, help="Sign; without it, only list what would be signed.")
@click.argument("session")
@click.pass_obj
def sign_run_command(  # noqa: PLR0917 - Click passes every option
    connection: Connection,
    tenant: str,
    application: str | None,
    workflow: str,
    allowed_types: tuple[str, ...],
    yes: bool,
    session: str,
) -> None:
    """Sign every live checkpoint of the run SESSION with the first key of
    AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS (comma-separated base64 keys, the storage's signing_keys).

    Each checkpoint is first loaded through the restricted loader; one that already verifies is
    left as it is. Signing states that the run's current contents are trusted.
    """
    try:
        options = MongoDBCheckpointStorageOptions(
            tenant_id=tenant,
            application_id=application,
            workflow_name=workflow,
            session_id=session,
            allowed_checkpoint_types=allowed_types,
            signing_keys=_keys_from_environment(),
        )
    except MongoDBConfigurationError as error:
        raise CommandFailure(error.category, str(error)) from error

    async def sign() -> SignRunResult:
        async with connection.collection_handle() as collection:
            return await sign_run(collection, options, write=yes)

    result = run(sign())
    verb = "signed" if yes else "would sign"
    for checkpoint_id in result.signed:
        click.echo(f"{verb} {checkpoint_id}")
    click.echo(
        f"{len(result.signed)} checkpoint(s) {verb}, {len(result.already_signed)} already signed"
        + ("" if yes or not result.signed else "; pass --yes to sign them")
        + "."
    )


def _keys_from_environment() -> tuple[bytes, ...]:
    text = os.environ.get(KEYS_VARIABLE, "")
    if not text.strip():
        raise click.UsageError(
            f"Set {KEYS_VARIABLE} to the storage's signing keys (base64, comma-separated)."
        )
    try:
        return tuple(
            base64.b64decode(part.strip(), validate=True) for part in text.split(",") if part.strip()
        )
    except (binascii.Error, ValueError):
        raise click.UsageError(f"{KEYS_VARIABLE} holds a key that is not base64.") from None
