"""``sign-run SESSION``: sign a run's checkpoints in place, to move it onto signing keys."""

from __future__ import annotations

import json
from datetime import datetime

import click

from ..checkpoints import MongoDBCheckpointStorageOptions, MongoDBConfigurationError
from ..checkpoints.transition import SignRunCandidate, SignRunResult, sign_run
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
@click.option(
    "--written-before",
    type=click.DateTime(
        formats=["%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]
    ),
    default=None,
    help="What you vouch for: sign only checkpoints created before this moment (UTC unless it "
    "names an offset). Required with --yes; the dry run lists every checkpoint's dates.",
)
@click.option(
    "--beside-signed",
    is_flag=True,
    help="In a run that already holds signed checkpoints, sign the unsigned ones older than its "
    "first signed checkpoint (without it, such a run is refused).",
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
    written_before: datetime | None,
    beside_signed: bool,
    yes: bool,
    as_json: bool,
    session: str,
) -> None:
    """Sign every live checkpoint of the run SESSION with the first key of
    AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS (comma-separated base64 keys, the storage's signing_keys).

    The dry run decodes nothing: it lists each checkpoint with its sequence, dates, lifetime and
    the SHA-256 of its stored payload. With --yes, each checkpoint created before --written-before
    is loaded through the restricted loader, then signed; one that already verifies is left as it
    is, and one whose signature fails is refused and never signed. A run that already holds signed
    checkpoints is refused unless --beside-signed. Signing states that what you name is trusted.
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
            return await sign_run(
                collection,
                options,
                write=yes,
                adopt=adopt,
                exclude=excluded,
                written_before=written_before,
                beside_signed=beside_signed,
            )

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
        "adopted_latest": result.adopted_latest,
        "candidates": [_candidate_json(candidate) for candidate in result.candidates],
    }


def _candidate_json(candidate: SignRunCandidate) -> dict[str, object]:
    return {
        "checkpoint_id": candidate.checkpoint_id,
        "sequence": candidate.sequence,
        "created_at": _moment(candidate.created_at),
        "expires_at": _moment(candidate.expires_at),
        "lifetime": candidate.lifetime,
        "payload_sha256": candidate.payload_sha256,
        "verdict": candidate.verdict,
        "reason": candidate.reason,
    }


def _moment(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _print_result(result: SignRunResult, *, yes: bool) -> None:
    verb = "signed" if yes else "would sign"
    labels = {"signed": verb, "already_signed": "already signed", "other_lifetime": "other lifetime"}
    for candidate in result.candidates:
        label = labels.get(candidate.verdict, candidate.verdict)
        lifetime = candidate.lifetime[:12] if candidate.lifetime else "none"
        click.echo(
            f"{label} {candidate.checkpoint_id}: sequence {candidate.sequence}, created "
            f"{_moment(candidate.created_at) or '-'}, expires {_moment(candidate.expires_at) or 'never'}, "
            f"lifetime {lifetime}, sha256 {candidate.payload_sha256[:16]} ({candidate.reason})"
        )
    if result.adopted_latest is not None:
        click.echo(
            f"note: {result.adopted_latest} {'is' if yes else 'would be'} the run's latest checkpoint, from "
            "another lifetime of the run: from before its counter was lost, or from before a clear_run."
        )
    click.echo(
        f"{len(result.signed)} checkpoint(s) {verb}, {len(result.already_signed)} already signed, "
        f"{len(result.refused)} refused, {len(result.other_lifetime)} of another lifetime"
        + ("" if yes or not result.signed else "; pass --yes (with --written-before) to sign them")
        + "."
    )
