"""Running checks against a factory and collecting their results into a report."""

from __future__ import annotations

import asyncio
import importlib.metadata
import traceback
import uuid
from collections.abc import Iterable

from agent_framework import CheckpointStorage

from . import _extended_checks, _protocol_checks, _workflow_checks
from ._model import Capabilities, CheckResult, CheckStatus, ConformanceReport, StorageFactory, StorageScope
from ._registry import CHECKS, Check, CheckContext, CheckFailedError, CheckSkippedError, NotOfferedError
from ._workflows import suite_types

__all__ = ["DEFAULT_TIMEOUT", "check_names", "run_check", "validate", "validate_sync"]

# The check modules register their checks on import; naming them keeps that import explicit.
_CHECK_MODULES = (_protocol_checks, _workflow_checks, _extended_checks)

DEFAULT_TIMEOUT = 60.0
"""Seconds one check may take before it fails as hung."""


def check_names() -> tuple[str, ...]:
    """Every check's name, in the order they run."""
    return tuple(c.name for c in CHECKS)


def _selected(names: Iterable[str] | None) -> list[Check]:
    if names is None:
        return list(CHECKS)
    wanted = list(names)
    unknown = sorted(set(wanted) - set(check_names()))
    if unknown:
        raise ValueError(f"no such checks: {', '.join(unknown)}; the checks are {', '.join(check_names())}")
    return [c for c in CHECKS if c.name in wanted]


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _where(error: BaseException) -> str:
    """The last frame of the traceback outside this suite: usually the storage's own code."""
    frames = traceback.extract_tb(error.__traceback__)
    outside = [f for f in frames if "agent_framework_checkpoint_conformance" not in f.filename]
    if not frames:
        return ""
    frame = (outside or frames)[-1]
    return f" (at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name})"


async def run_check(
    one: Check,
    factory: StorageFactory,
    *,
    capabilities: Capabilities | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> CheckResult:
    """Run one check against ``factory`` and return its result; never raises for a storage's fault."""
    run_id = f"conformance-{uuid.uuid4().hex[:12]}"
    context = CheckContext(
        factory=factory,
        capabilities=capabilities or Capabilities(),
        run_id=run_id,
        workflow_name=f"{run_id}-workflow",
        allowed_checkpoint_types=suite_types(),
    )

    def result(status: CheckStatus, message: str = "") -> CheckResult:
        return CheckResult(one.name, one.group, one.description, status, message)

    try:
        note = await asyncio.wait_for(one.body(context), timeout)
    except CheckFailedError as failure:
        return result(CheckStatus.FAILED, str(failure))
    except CheckSkippedError as skip:
        return result(CheckStatus.SKIPPED, str(skip))
    except NotOfferedError as absent:
        return result(CheckStatus.NOT_OFFERED, str(absent))
    except asyncio.TimeoutError:
        return result(CheckStatus.FAILED, f"did not finish within {timeout} s")
    except Exception as error:
        # A storage that raises where the check expects an answer fails the check; the message
        # names the exception and where the storage raised it.
        return result(CheckStatus.FAILED, f"raised {type(error).__name__}: {error}{_where(error)}")
    return result(CheckStatus.PASSED, note or "")


async def validate(
    factory: StorageFactory,
    *,
    capabilities: Capabilities | None = None,
    name: str | None = None,
    checks: Iterable[str] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> ConformanceReport:
    """Run the suite's checks against the storages ``factory`` makes and report every result.

    Args:
        factory: ``async (scope) -> CheckpointStorage``; called at least once per check, each
            check with its own ``scope.run_id``.
        capabilities: What the author claims beyond the protocol; claimed-only checks skip
            without it.
        name: The report's name for the storage; the class name of the first storage made by
            default.
        checks: Names of the checks to run (all by default), in the suite's order whatever the
            order given.
        timeout: Seconds each check may take (``None``: no limit).

    Raises:
        ValueError: ``checks`` names a check the suite does not have.
    """
    selected = _selected(checks)
    seen: list[str] = []

    async def remember(scope: StorageScope) -> CheckpointStorage:
        storage = await factory(scope)
        if not seen:
            seen.append(type(storage).__name__)
        return storage

    results = [await run_check(one, remember, capabilities=capabilities, timeout=timeout) for one in selected]
    return ConformanceReport(
        storage=name or (seen[0] if seen else "storage"),
        framework_version=_version("agent-framework-core"),
        suite_version=_version("agent-framework-checkpoint-conformance"),
        results=tuple(results),
    )


def validate_sync(
    factory: StorageFactory,
    *,
    capabilities: Capabilities | None = None,
    name: str | None = None,
    checks: Iterable[str] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> ConformanceReport:
    """``validate`` in a new event loop, for scripts and synchronous tests (not inside a running loop)."""
    return asyncio.run(
        validate(factory, capabilities=capabilities, name=name, checks=checks, timeout=timeout)
    )
