"""Options several commands share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["scope_options"]

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
