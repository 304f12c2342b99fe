"""The suite's values: what a factory is given, what an author claims, and what a run reports."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agent_framework import CheckpointStorage

__all__ = [
    "Capabilities",
    "CheckResult",
    "CheckStatus",
    "ConformanceReport",
    "StorageFactory",
    "StorageScope",
]


@dataclass(frozen=True)
class StorageScope:
    """What a check asks the factory for: a storage for one run of one workflow.

    Storages that bind a workflow and a run at construction (a database-backed one usually
    does) build theirs from ``workflow_name`` and ``run_id``; storages that take neither (Agent
    Framework's in-memory and file storages) may ignore them. Every check uses its own
    ``run_id``, so a factory that keeps one backend for the whole run never mixes two checks.

    Attributes:
        workflow_name: The workflow whose checkpoints the check saves.
        run_id: Unique to the check (and the same for every storage one check asks for).
        allowed_checkpoint_types: ``"module:qualname"`` of the suite's own classes that the
            checks store in checkpoints; a storage that restricts what it restores (an
            ``allowed_checkpoint_types`` option) must accept these.
    """

    workflow_name: str
    run_id: str
    allowed_checkpoint_types: tuple[str, ...] = ()


StorageFactory = Callable[[StorageScope], Awaitable[CheckpointStorage]]
"""``async (scope) -> CheckpointStorage``: a storage for the scope's run, ready to use."""


@dataclass(frozen=True)
class Capabilities:
    """What the storage's author claims beyond the protocol; unclaimed checks are skipped.

    Attributes:
        shared_between_instances: Two storages the factory returns for the same scope see the
            same checkpoints, as two processes sharing a database would. Agent Framework's
            ``FileCheckpointStorage`` on one directory does; ``InMemoryCheckpointStorage`` does not.
        concurrent_writers: Two such storages may save to the same run at the same time and
            neither loses a checkpoint. Implies ``shared_between_instances``.
    """

    shared_between_instances: bool = False
    concurrent_writers: bool = False


class CheckStatus(enum.Enum):
    """How one check ended."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    """Not run: the capability is not claimed, or an optional package is not installed."""
    NOT_OFFERED = "not offered"
    """An optional capability the storage does not have (detected, so not a failure)."""


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    Attributes:
        name: The check's stable name, such as ``"get_latest.newest"``.
        group: ``"protocol"``, ``"workflows"``, ``"concurrency"`` or ``"optional"``.
        description: What the check asks of a storage, in one sentence.
        status: How it ended.
        message: Why it failed, was skipped or is not offered; what it detected when it passed
            on presence alone; empty otherwise.
    """

    name: str
    group: str
    description: str
    status: CheckStatus
    message: str = ""

    @property
    def passed(self) -> bool:
        """Anything but a failure: a skipped or not offered check is not held against a storage."""
        return self.status is not CheckStatus.FAILED

    def __str__(self) -> str:
        line = f"[{self.status.value}] {self.name}: {self.description}"
        return f"{line}\n    {self.message}" if self.message else line


@dataclass(frozen=True)
class ConformanceReport:
    """Every check's result for one storage, in the suite's order.

    Attributes:
        storage: The name the run was given (the storage's class name by default).
        framework_version: The agent-framework-core version the checks ran against.
        suite_version: This suite's version.
        results: One result per check that was asked for.
    """

    storage: str
    framework_version: str
    suite_version: str
    results: tuple[CheckResult, ...] = field(default=())

    @property
    def passed(self) -> bool:
        """True when no check failed."""
        return all(result.passed for result in self.results)

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The failed checks, in order."""
        return tuple(result for result in self.results if result.status is CheckStatus.FAILED)

    def result(self, name: str) -> CheckResult:
        """The result of the check called ``name``.

        Raises:
            KeyError: No such check ran.
        """
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(name)

    def counts(self) -> dict[CheckStatus, int]:
        """How many checks ended in each status (every status present, zero included)."""
        return {status: sum(r.status is status for r in self.results) for status in CheckStatus}

    def summary(self) -> str:
        """One line: the storage, the verdict and the counts."""
        counts = ", ".join(f"{n} {status.value}" for status, n in self.counts().items() if n)
        verdict = "conforms" if self.passed else "does not conform"
        return f"{self.storage} {verdict} ({counts}; agent-framework-core {self.framework_version})"

    def __str__(self) -> str:
        return "\n".join([self.summary(), *(str(result) for result in self.results)])

    def to_markdown(self, *, heading_level: int = 2) -> str:
        """The report as a Markdown section: a heading, the summary and one table row per check."""
        lines = [
            f"{'#' * heading_level} {self.storage}",
            "",
            self.summary(),
            "",
            "| Check | Status | Detail |",
            "| --- | --- | --- |",
        ]
        lines.extend(
            f"| `{r.name}` | {r.status.value} | {_cell(r.message or r.description)} |" for r in self.results
        )
        return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """``text`` on one line, safe inside a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")
