"""Running a command's coroutine, and reporting the package's errors without hosts or credentials."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

import click
from pymongo.errors import PyMongoError

from ..errors import MongoDBIntegrationError

__all__ = ["FAILURE_STATUS", "CommandFailure", "allow_type_hint", "run"]

FAILURE_STATUS = 1

T = TypeVar("T")


class CommandFailure(click.ClickException):
    """A failed command: ``Error [category]: message`` on standard error, exit status 1."""

    exit_code = FAILURE_STATUS

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category

    def format_message(self) -> str:
        return f"[{self.category}] {self.message}"


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion, turning the package's errors into a ``CommandFailure``.

    A package error's message never names hosts or credentials. A driver error that escaped
    translation (such as an invalid URI, whose text may quote it) is reported by its class only.
    """
    try:
        return asyncio.run(coroutine)
    except MongoDBIntegrationError as error:
        raise CommandFailure(error.category, str(error)) from error
    except PyMongoError as error:
        raise CommandFailure("driver", f"The MongoDB driver failed ({type(error).__name__}).") from error


@contextlib.contextmanager
def allow_type_hint() -> Generator[None]:
    """A failure the command line's options fix says which option fixes it.

    - ``[mapping]`` naming a class to allow: ``--allow-type`` (or its variable).
    - ``[configuration]``, an allowed entry's module not found: ``--module-path`` (or its variable).
    """
    try:
        yield
    except CommandFailure as failure:
        if failure.category == "mapping" and "allowed_checkpoint_types" in failure.message:
            hint = "Here: --allow-type MODULE:QUALNAME (repeatable) or AGENT_FRAMEWORK_MONGODB_ALLOW_TYPES."
        elif (
            failure.category == "configuration"
            and "allowed_checkpoint_types entry" in failure.message
            and "not found" in failure.message
        ):
            hint = (
                "Name the directory that holds it with --module-path DIR (repeatable) or "
                "AGENT_FRAMEWORK_MONGODB_MODULE_PATH, or install its package."
            )
        else:
            raise
        raise CommandFailure(failure.category, f"{failure.message} {hint}") from failure
