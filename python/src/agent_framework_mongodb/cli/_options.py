"""Options several commands share."""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from ..checkpoints.options import validate_type_keys
from ..errors import MongoDBConfigurationError

__all__ = [
    "ALLOW_TYPES_VARIABLE",
    "MODULE_PATH_VARIABLE",
    "allow_type_option",
    "extend_module_path",
    "json_option",
    "scope_options",
]

ALLOW_TYPES_VARIABLE = "AGENT_FRAMEWORK_MONGODB_ALLOW_TYPES"
"""``MODULE:QUALNAME`` entries separated by commas or whitespace, added to any ``--allow-type``."""

MODULE_PATH_VARIABLE = "AGENT_FRAMEWORK_MONGODB_MODULE_PATH"
"""Directories separated by ``os.pathsep`` (``:``; ``;`` on Windows), added to any ``--module-path``."""

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


class _Entries(click.types.StringParamType):  # a concrete class: generic only in newer Click
    """Text entries, checked by the option's callback (which knows where each one came from); an
    environment variable holds several, split where ``separators`` (a pattern) match."""

    def __init__(self, name: str, separators: str) -> None:
        self.name = name
        self._separators = re.compile(separators)

    def split_envvar_value(self, rv: str) -> Sequence[str]:
        return [part for part in self._separators.split(rv) if part]


def _origins(
    context: click.Context, parameter: click.Parameter, value: Sequence[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A repeatable option's entries from its environment variable, and from the command line.

    Click reads an option's ``envvar`` only when the option is not given; these options add the
    two instead, so the variable's entries are read here too when the command line gave some.
    """
    # Typed str | None in older Click and str in newer: str() satisfies both checkers.
    if context.get_parameter_source(str(parameter.name)) is ParameterSource.ENVIRONMENT:
        return tuple(value), ()
    variable = parameter.envvar if isinstance(parameter.envvar, str) else None
    text = os.environ.get(variable, "") if variable is not None else ""
    return tuple(parameter.type.split_envvar_value(text)), tuple(value)


def _option_hint(parameter: click.Parameter) -> str:
    """The option's name alone: Click's own hint names its variable too, which misleads when
    the bad entry came from the command line."""
    return f"'{parameter.opts[0]}'"


def _checked_keys(
    context: click.Context, parameter: click.Parameter, entries: Sequence[str], hint: str | None
) -> tuple[str, ...]:
    try:
        return validate_type_keys(entries)
    except MongoDBConfigurationError as error:
        raise click.BadParameter(str(error), context, parameter, param_hint=hint) from None


def _type_keys(context: click.Context, parameter: click.Parameter, value: Sequence[str]) -> tuple[str, ...]:
    """A Click callback: the variable's and the command line's ``module:qualname`` entries, each
    one checked, or a usage error naming the bad entry and where it came from."""
    from_environment, from_command_line = _origins(context, parameter, value)
    keys = (
        *_checked_keys(context, parameter, from_environment, ALLOW_TYPES_VARIABLE),
        *_checked_keys(context, parameter, from_command_line, _option_hint(parameter)),
    )
    return tuple(dict.fromkeys(keys))  # each class once, in the order given


def extend_module_path(directories: Sequence[Path]) -> None:
    """Make the modules in ``directories`` importable, after every installed one.

    Appended to ``sys.path``, so a file there never replaces a module that imports already (the
    standard library, Agent Framework, pymongo, this package, an installed copy of the
    application): the directories only add modules. Importing still happens only where the
    codec imports a listed ``allowed_checkpoint_types`` entry's module; a payload never names a
    module into being imported.
    """
    for directory in directories:
        entry = str(directory)
        if entry not in sys.path:
            sys.path.append(entry)
    importlib.invalidate_caches()  # a directory's finder must see files written since start-up


def _module_path(context: click.Context, parameter: click.Parameter, value: Sequence[str]) -> None:
    """A Click callback: ``--module-path`` and the variable's directories, each one an existing
    directory (made absolute), added to ``sys.path``; a usage error names one that is not."""
    from_environment, from_command_line = _origins(context, parameter, value)
    directories: list[Path] = []
    for entries, hint in (
        (from_environment, MODULE_PATH_VARIABLE),
        (from_command_line, _option_hint(parameter)),
    ):
        for entry in entries:
            directory = Path(entry).resolve()
            if not directory.is_dir():
                raise click.BadParameter(
                    f"{entry!r} is not a directory (the directory that holds the application's "
                    "top-level package or module, as on PYTHONPATH).",
                    context,
                    parameter,
                    param_hint=hint,
                )
            directories.append(directory)
    extend_module_path(directories)


def allow_type_option(command: F) -> F:
    """``--allow-type MODULE:QUALNAME`` (repeatable): the storage's ``allowed_checkpoint_types``,
    with ``--module-path DIR`` (repeatable), where the application's modules are found.

    Each adds its environment variable's entries (:data:`ALLOW_TYPES_VARIABLE`,
    :data:`MODULE_PATH_VARIABLE`) to the command line's. A malformed entry or a path that is
    not a directory is a usage error (status 2); a well-formed entry whose module does not
    import or names no class fails when the storage is built (status 1, ``[configuration]``).
    """
    command = click.option(
        "--module-path",
        type=_Entries("DIR", re.escape(os.pathsep)),
        multiple=True,
        envvar=MODULE_PATH_VARIABLE,
        show_envvar=True,
        expose_value=False,  # the callback extends sys.path; the commands need not know
        callback=_module_path,
        help="A directory the application's modules are imported from (repeatable), as on "
        "PYTHONPATH but after installed packages; only --allow-type's modules are imported.",
    )(command)
    return click.option(
        "--allow-type",
        "allowed_types",
        type=_Entries("MODULE:QUALNAME", r"[\s,]+"),
        multiple=True,
        envvar=ALLOW_TYPES_VARIABLE,
        show_envvar=True,
        callback=_type_keys,
        help="An application class the checkpoints hold (repeatable), as in allowed_checkpoint_types; "
        "the variable's entries (comma- or space-separated) are added.",
    )(command)


def json_option(help_text: str) -> Callable[[F], F]:
    """``--json``, passed to the command as ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)
