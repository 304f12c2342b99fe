"""What a command says when it finds nothing: where it looked, and what to try next."""

from __future__ import annotations

import shlex

from ._connection import Connection

__all__ = ["NO_APPLICATION_HINT", "empty_checkpoints", "empty_runs", "runs_command", "scope_words"]

NO_APPLICATION_HINT = "runs saved with an application_id are listed with --application"


def scope_words(tenant: str, application: str | None) -> str:
    """``tenant T and application A`` (``(none)`` for runs stored without an application)."""
    return f"tenant {tenant} and application {application or '(none)'}"


def runs_command(tenant: str, application: str | None) -> str:
    """The ``runs`` command that lists the tenant's (and application's) runs, quoted for a shell."""
    command = f"agent-framework-mongodb runs --tenant {shlex.quote(tenant)}"
    return command + (f" --application {shlex.quote(application)}" if application else "")


def _where(connection: Connection) -> str:
    return f"in {connection.database}.{connection.collection}"


def _application_hint(application: str | None) -> str:
    if application:
        return "runs saved without an application_id are listed without --application"
    return NO_APPLICATION_HINT


def empty_runs(
    connection: Connection,
    *,
    tenant: str,
    application: str | None,
    workflow: str | None,
    not_waiting: int | None,
) -> str:
    """Why ``runs`` listed nothing: the scope it read, and each filter that may have hidden runs.

    ``not_waiting`` is how many runs ``--waiting`` left out (``None`` without ``--waiting``).
    """
    of_workflow = f" of workflow {workflow}" if workflow else ""
    waiting = " waiting for input" if not_waiting is not None else ""
    tries: list[str] = []
    if not_waiting:
        tries.append(f"{not_waiting} run(s) are not waiting for input (drop --waiting)")
    if workflow:
        tries.append("drop --workflow to list every workflow's runs")
    tries.append(_application_hint(application))
    tries.append(
        "check --tenant, and --database and --collection against the workers' database_name and "
        "collection_name"
    )
    return (
        f"No runs{of_workflow}{waiting} for {scope_words(tenant, application)} {_where(connection)}; "
        + "; ".join(tries)
        + "."
    )


def empty_checkpoints(
    connection: Connection, *, tenant: str, application: str | None, workflow: str, session: str
) -> str:
    """Why ``checkpoints`` listed nothing: the run and scope it read, and how to find the runs."""
    return (
        f"No checkpoints are stored for {workflow}/{session} for {scope_words(tenant, application)} "
        f"{_where(connection)}: no such run, or its checkpoints expired or were deleted. "
        f"List the runs with `{runs_command(tenant, application)}`; {_application_hint(application)}."
    )
