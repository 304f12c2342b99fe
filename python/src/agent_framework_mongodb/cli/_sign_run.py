"""``sign-run SESSION``: sign a run's checkpoints in place, to move it onto signing keys."""

from __future__ import annotations

import json

import click

from ..checkpoints import MongoDBCheckpointStorageOptions, MongoDBConfigurationError
from ..checkpoints.transition import SignRunResult, sign_run
from ._connection import Connection
from ._errors import FAILURE_STATUS, CommandFailure, run
from ._keys import keys_from_environment
from ._options import allow_type_option, json_option, scope_options

__all__ = ["sign_run_command"]


@click.command("sign-run")
@scope_options
@click.option("--workflow", required=True, help="The run's workflow.")
@allow_type_option
@click.option(
    "--adopt",
    is_flag=True,
    help="Also sign checkpoints signed in another lifetime of the run: only when its counter was "
    "deleted by hand, never after clear_run (the dry run lists them).",
)
@click.option(
    "--exclude", "excluded", multiple=True, metavar="CHECKPOINT", help="A checkpoint to leave as it is."
)
@click.option("--yes", is_flag=True, help="Sign; without it, only list what would be signed.")
@json_option("Print what was (or would be) signed as a JSON object of checkpoint id lists.")
@click.argument("session")
@click.pass_obj
def sign_run_command(  # noqa: PLR0917 - Click passes every option
    connection: Connection,
    tenant: str,
    application: str | None,
    workflow: str,
    allowed_types: tuple[str, ...],
    adopt: bool,
    excluded: tuple[str, ...],
    yes: bool,
    as_json: bool,
    session: str,
) -> None:
    """Sign every live checkpoint of the run SESSION with the first key of
    AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS (comma-separated base64 keys, the storage's signing_keys).

    Each checkpoint is first loaded through the restricted loader; one that already verifies is
    left as it is, and one whose signature fails is refused and never signed. Signing states that
    the run's current contents are trusted.
    """
    try:
        options = MongoDBCheckpointStorageOptions(
            tenant_id=tenant,
            application_id=application,
            workflow_name=workflow,
            session_id=session,
            allowed_checkpoint_types=allowed_types,
            operation_timeout=connection.deadlines.operation,
            signing_keys=keys_from_environment(required=True),
        )
    except MongoDBConfigurationError as error:
        raise CommandFailure(error.category, str(error)) from error

    async def sign() -> SignRunResult:
        async with connection.collection_handle() as collection:
            return await sign_run(collection, options, write=yes, adopt=adopt, exclude=excluded)

    result = run(sign())
    if as_json:
        click.echo(json.dumps(_result_json(result), indent=2))
    else:
        _print_result(result, yes=yes)
    if result.refused:
        raise SystemExit(FAILURE_STATUS)


def _result_json(result: SignRunResult) -> dict[str, object]:
    return {
        "signed": list(result.signed),
        "already_signed": list(result.already_signed),
        "refused": list(result.refused),
        "other_lifetime": list(result.other_lifetime),
        "written": result.written,
    }


def _print_result(result: SignRunResult, *, yes: bool) -> None:
    verb = "signed" if yes else "would sign"
    for checkpoint_id in result.signed:
        click.echo(f"{verb} {checkpoint_id}")
    for checkpoint_id in result.refused:
        click.echo(f"refused {checkpoint_id}: its signature does not verify (modified outside the storage)")
    for checkpoint_id in result.other_lifetime:
        click.echo(
            f"other lifetime {checkpoint_id}: signed before the run's counter was replaced (see --adopt)"
        )
    click.echo(
        f"{len(result.signed)} checkpoint(s) {verb}, {len(result.already_signed)} already signed, "
        f"{len(result.refused)} refused, {len(result.other_lifetime)} of another lifetime"
        + ("" if yes or not result.signed else "; pass --yes to sign them")
        + "."
    )
