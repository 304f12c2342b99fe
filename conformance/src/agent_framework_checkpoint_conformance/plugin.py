"""The pytest plugin: a registered factory becomes one test per check.

Loaded through the ``pytest11`` entry point whenever the suite is installed beside pytest. In a
test module (or a conftest.py)::

    from agent_framework_checkpoint_conformance.plugin import checkpoint_storage_conformance

    @checkpoint_storage_conformance(capabilities=Capabilities(shared_between_instances=True))
    async def my_storage(scope: StorageScope) -> CheckpointStorage:
        return MyStorage(run=scope.run_id)

collects ``my_storage[protocol.methods]``, ``my_storage[save.returns_id]`` and so on. The checks
of a session share one event loop (as ``validate`` runs them in one), so a factory may keep a
client or a server that is bound to the loop it was made on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ._model import Capabilities, CheckStatus, StorageFactory
from ._registry import CHECKS, Check
from ._runner import DEFAULT_TIMEOUT, check_names, run_check

__all__ = ["ConformanceItem", "ConformanceRegistration", "checkpoint_storage_conformance"]

_LOOP_KEY = pytest.StashKey[asyncio.AbstractEventLoop]()


@dataclass(frozen=True)
class ConformanceRegistration:
    """A factory registered for the suite; the plugin collects one test per selected check.

    Attributes:
        factory: The storage author's factory.
        capabilities: What the author claims.
        checks: The names of the checks to collect (all when ``None``).
        timeout: Seconds each check may take (``None``: no limit).
    """

    factory: StorageFactory
    capabilities: Capabilities
    checks: tuple[str, ...] | None
    timeout: float | None

    def selected(self) -> list[Check]:
        """The checks this registration collects, in the suite's order."""
        return [one for one in CHECKS if self.checks is None or one.name in self.checks]


def checkpoint_storage_conformance(
    *,
    capabilities: Capabilities | None = None,
    checks: Iterable[str] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> Callable[[StorageFactory], ConformanceRegistration]:
    """Register the decorated ``async (scope) -> CheckpointStorage`` factory for the suite.

    The decorated name then collects one test per check, whatever the name (it need not start
    with ``test``). ``checks`` narrows the checks by name.

    Raises:
        ValueError: ``checks`` names a check the suite does not have.
    """
    chosen = None if checks is None else tuple(checks)
    if chosen is not None and (unknown := sorted(set(chosen) - set(check_names()))):
        raise ValueError(f"no such checks: {', '.join(unknown)}")

    def register(factory: StorageFactory) -> ConformanceRegistration:
        return ConformanceRegistration(factory, capabilities or Capabilities(), chosen, timeout)

    return register


class ConformanceFailure(Exception):
    """A check failed; its message is the report's."""


class ConformanceItem(pytest.Item):
    """One check against one registered factory."""

    def __init__(self, *, registration: ConformanceRegistration, check: Check, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.registration = registration
        self.check = check

    def runtest(self) -> None:
        result = _loop(self.config).run_until_complete(
            run_check(
                self.check,
                self.registration.factory,
                capabilities=self.registration.capabilities,
                timeout=self.registration.timeout,
            )
        )
        if result.status is CheckStatus.FAILED:
            raise ConformanceFailure(result.message)
        if result.status in (CheckStatus.SKIPPED, CheckStatus.NOT_OFFERED):
            # Reported at the registration, not at this line of the plugin.
            reason = (
                result.message if result.status is CheckStatus.SKIPPED else f"not offered: {result.message}"
            )
            raise pytest.skip.Exception(reason, _use_item_location=True)

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: object = None,
    ) -> str:
        if isinstance(excinfo.value, ConformanceFailure):
            return f"{self.check.name}: {self.check.description}\n{excinfo.value}"
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        # The factory's own line (0-based, as pytest counts), where the registration is.
        code: object = getattr(self.registration.factory, "__code__", None)
        first_line: object = getattr(code, "co_firstlineno", 1)
        line = first_line - 1 if isinstance(first_line, int) else 0
        return self.path, line, f"{self.name}: {self.check.description}"


def _loop(config: pytest.Config) -> asyncio.AbstractEventLoop:
    """The session's loop for checks, made on first use and closed when pytest ends."""
    loop = config.stash.get(_LOOP_KEY, None)
    if loop is None:
        loop = asyncio.new_event_loop()
        config.stash[_LOOP_KEY] = loop
    return loop


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(
    collector: pytest.Module | pytest.Class, name: str, obj: object
) -> list[pytest.Item] | None:
    if not isinstance(obj, ConformanceRegistration):
        return None
    return [
        ConformanceItem.from_parent(  # pyright: ignore[reportUnknownMemberType]
            collector, name=f"{name}[{one.name}]", registration=obj, check=one
        )
        for one in obj.selected()
    ]


def pytest_unconfigure(config: pytest.Config) -> None:
    loop = config.stash.get(_LOOP_KEY, None)
    if loop is not None:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
