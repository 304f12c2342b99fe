"""Options several commands share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..checkpoints.options import validate_type_keys
from ..errors import MongoDBConfigurationError

__all__ = ["allow_type_option", "json_option", "scope_options"]

F = TypeVar("F", bound=Callable[..., Any])


def scope_options(command: F) -> F:
    """``--tenant`` (required) and ``--application``: the tenant a command reads or clears."""
    command = click.option(
        "--application",
        envvar="AGENT_FRAMEWORK_MONGODB_APPLICATION",
        default=None,
        help="Application within the tenant; omit for runs stored without one.",
    )(command)
    return click.option(
        "--tenant", envvar="AGENT_FRAMEWORK_MONGODB_TENANT", required=True, help="The tenant's id."
    )(command)


def _type_keys(context: click.Context, parameter: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """A Click callback: each entry of the form ``module:qualname``, or a usage error naming it."""
    try:
        return validate_type_keys(value)
    except MongoDBConfigurationError as error:
        raise click.BadParameter(str(error), context, parameter) from None


def allow_type_option(command: F) -> F:
    """``--allow-type MODULE:QUALNAME`` (repeatable): the storage's ``allowed_checkpoint_types``.

    A malformed entry is a usage error (status 2); a well-formed one whose module does not import
    or names no class fails when the storage is built (status 1, ``[configuration]``).
    """
    return click.option(
        "--allow-type",
        "allowed_types",
        multiple=True,
        metavar="MODULE:QUALNAME",
        callback=_type_keys,
        help="An application class the checkpoints hold (repeatable), as in allowed_checkpoint_types.",
    )(command)


def json_option(help_text: str) -> Callable[[F], F]:
    """``--json``, passed to the command as ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)
