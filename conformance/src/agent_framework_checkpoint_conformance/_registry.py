"""How a check is declared, what it is given, and how it ends other than by passing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent_framework import CheckpointStorage

from ._model import Capabilities, StorageFactory, StorageScope

__all__ = [
    "CHECKS",
    "GROUPS",
    "Check",
    "CheckContext",
    "CheckFailedError",
    "CheckSkippedError",
    "NotOfferedError",
    "check",
]


class CheckFailedError(Exception):
    """The storage did something the check does not allow; the message says what."""


class CheckSkippedError(Exception):
    """The check does not apply: a capability is not claimed or a package is missing."""


class NotOfferedError(Exception):
    """The storage lacks an optional capability; the message says what was looked for."""


@dataclass(frozen=True)
class CheckContext:
    """What one check runs with: the author's factory and claims, and the check's own run.

    Attributes:
        factory: The storage author's factory.
        capabilities: What the author claims.
        run_id: This check's run (every storage it asks for shares it).
        workflow_name: A workflow name no other check uses, for checkpoints the check makes up.
    """

    factory: StorageFactory
    capabilities: Capabilities
    run_id: str
    workflow_name: str
    allowed_checkpoint_types: tuple[str, ...]

    async def storage(self, workflow_name: str | None = None) -> CheckpointStorage:
        """A storage for this check's run of ``workflow_name`` (the check's own by default)."""
        scope = StorageScope(
            workflow_name=self.workflow_name if workflow_name is None else workflow_name,
            run_id=self.run_id,
            allowed_checkpoint_types=self.allowed_checkpoint_types,
        )
        return await self.factory(scope)


CheckBody = Callable[[CheckContext], Awaitable[str | None]]
"""Runs the check: returns (a note, or ``None``) when it passes, raises when it does not."""


@dataclass(frozen=True)
class Check:
    """One check of the suite.

    Attributes:
        name: Stable, dotted: ``"<area>.<property>"``; pytest test ids use it.
        group: ``"protocol"``, ``"workflows"``, ``"concurrency"`` or ``"optional"``.
        description: What a storage must do to pass, in one sentence.
        body: The check itself.
    """

    name: str
    group: str
    description: str
    body: CheckBody


GROUPS = ("protocol", "workflows", "concurrency", "optional")
"""The groups, in the order their checks run and are reported."""

CHECKS: list[Check] = []
"""Every check, by group and then in declaration order; filled in by the check modules."""


def check(name: str, group: str, description: str) -> Callable[[CheckBody], CheckBody]:
    """Declare ``body`` as the check ``name`` (in declaration order)."""

    def register(body: CheckBody) -> CheckBody:
        if any(existing.name == name for existing in CHECKS):
            raise ValueError(f"two checks are called {name}")
        if group not in GROUPS:
            raise ValueError(f"check {name} names an unknown group {group!r}")
        CHECKS.append(Check(name, group, description, body))
        CHECKS.sort(key=lambda one: GROUPS.index(one.group))  # stable: declaration order within a group
        return body

    return register
