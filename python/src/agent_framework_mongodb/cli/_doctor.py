"""``doctor``: check the installation, the process's configuration and the deployment, and say how
to fix what is wrong (the checks are in ``checkpoints/diagnostics``)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence

import click

from ..checkpoints.diagnostics import (
    Check,
    Status,
    check_allowed_types,
    check_deployment,
    check_framework_types,
    check_installation,
    check_signing_keys,
)
from ..errors import MongoDBIntegrationError
from ._connection import Connection
from ._errors import FAILURE_STATUS
from ._keys import KEYS_VARIABLE, keys_from_environment
from ._options import allow_type_option, json_option

__all__ = ["doctor", "render_checks"]

DOCTOR_EPILOG = (
    "Each check prints ok, warn, fail or skip, and a fix for anything not ok. Exit status: 0 when no "
    "check failed (with --strict: and none warned), 1 otherwise, 2 for a usage error."
)
_WIDTH = max(len(status.value) for status in Status)


def signing_check() -> Check:
    """The signing keys the commands read from :data:`KEYS_VARIABLE`."""
    text = os.environ.get(KEYS_VARIABLE, "")
    try:
        keys = keys_from_environment(required=False)
    except click.UsageError as error:
        return Check(
            "signing", Status.FAIL, error.message, f"Set {KEYS_VARIABLE} to base64 keys, comma-separated."
        )
    if text.strip() and not keys:
        return Check("signing", Status.FAIL, f"{KEYS_VARIABLE} holds no key.", None)
    return check_signing_keys(keys, source=KEYS_VARIABLE)


async def deployment_checks(connection: Connection) -> list[Check]:
    """The connection, server and collection checks, or one failed connection check."""
    try:
        async with connection.client() as client:
            return await check_deployment(
                client,
                database_name=connection.database,
                collection_name=connection.collection,
                operation_timeout=connection.deadlines.operation,
                server_selection_timeout=connection.deadlines.server_selection,
            )
    except click.UsageError as error:  # no URI
        return [
            Check(
                "connection", Status.FAIL, error.message, "Set MONGODB_URI, or pass --uri or --engine-file."
            )
        ]
    except click.ClickException as error:  # the engine file cannot be opened
        return [Check("connection", Status.FAIL, error.format_message(), None)]
    except MongoDBIntegrationError as error:  # a URI pymongo refuses
        return [Check("connection", Status.FAIL, str(error), "Correct the connection string.")]


def render_checks(checks: Sequence[Check]) -> None:
    """One line per check, and the fix indented under any that is not ok."""
    for check in checks:
        click.echo(f"{check.status.value:<{_WIDTH}}  {check.name}: {check.summary}")
        if check.fix and check.status is not Status.OK:
            click.echo(f"{'':<{_WIDTH}}  fix: {check.fix}")


@click.command(epilog=DOCTOR_EPILOG)
@allow_type_option
@click.option("--strict", is_flag=True, help="Count a warning as a failure (exit status 1).")
@json_option("Print the checks as a JSON object.")
@click.pass_obj
def doctor(connection: Connection, allowed_types: tuple[str, ...], strict: bool, as_json: bool) -> None:
    """Check the installation, the framework types, the signing keys, the connection, the server
    (version, featureCompatibilityVersion, replica set), the collection (indexes, collation) and the
    write concern and read preference; say how to fix each problem."""
    checks = [
        check_installation(),
        check_framework_types(),
        check_allowed_types(allowed_types),
        signing_check(),
        *asyncio.run(deployment_checks(connection)),
    ]
    bad = {Status.FAIL, Status.WARN} if strict else {Status.FAIL}
    healthy = not any(check.status in bad for check in checks)
    if as_json:
        click.echo(json.dumps({"ok": healthy, "checks": [check.to_json() for check in checks]}, indent=2))
    else:
        render_checks(checks)
        failed = sum(check.status is Status.FAIL for check in checks)
        warned = sum(check.status is Status.WARN for check in checks)
        click.echo(f"{failed} failed, {warned} warned, {len(checks)} checked.")
    if not healthy:
        raise SystemExit(FAILURE_STATUS)
