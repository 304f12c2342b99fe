"""validate() and its report: selection, timeouts, a raising factory, and the report's renderings."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from agent_framework import CheckpointStorage, InMemoryCheckpointStorage

from agent_framework_checkpoint_conformance import (
    CheckResult,
    CheckStatus,
    ConformanceReport,
    StorageScope,
    validate_sync,
)


async def in_memory(scope: StorageScope) -> CheckpointStorage:
    return InMemoryCheckpointStorage()


def test_checks_run_in_the_suites_order_whatever_the_order_asked() -> None:
    report = validate_sync(in_memory, checks=["delete.missing", "save.returns_id"], name="memory")

    assert [r.name for r in report.results] == ["save.returns_id", "delete.missing"]
    assert report.passed
    assert report.storage == "memory"


def test_an_unknown_check_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no such checks: list\.sorted"):
        validate_sync(in_memory, checks=["list.sorted"])


def test_a_hung_storage_fails_at_the_timeout() -> None:
    class Hangs(InMemoryCheckpointStorage):
        async def save(self, checkpoint: object) -> str:
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

    async def factory(scope: StorageScope) -> CheckpointStorage:
        return Hangs()

    report = validate_sync(factory, checks=["save.returns_id"], timeout=0.05)

    assert report.result("save.returns_id").message == "did not finish within 0.05 s"


def test_an_unexpected_exception_fails_the_check_naming_it_and_where() -> None:
    class Raises(InMemoryCheckpointStorage):
        async def get_latest(self, *, workflow_name: str) -> None:
            raise RuntimeError("backend unavailable")

    async def factory(scope: StorageScope) -> CheckpointStorage:
        return Raises()

    result = validate_sync(factory, checks=["get_latest.empty"]).result("get_latest.empty")

    assert result.status is CheckStatus.FAILED
    assert result.message.startswith("raised RuntimeError: backend unavailable (at test_report.py:")
    assert result.message.endswith("in get_latest)")


def test_the_report_is_frozen_and_renders_every_result() -> None:
    failed = CheckResult("list.save_order", "protocol", "Oldest first.", CheckStatus.FAILED, "gave [1, 0]")
    offered = CheckResult("optional.pages", "optional", "Pages.", CheckStatus.NOT_OFFERED, "no pages | here")
    report = ConformanceReport("Mine", "1.26.0", "0.1.0", (failed, offered))

    with pytest.raises(dataclasses.FrozenInstanceError):
        report.storage = "other"  # type: ignore[misc]
    assert not report.passed
    assert report.failures == (failed,)
    assert report.counts()[CheckStatus.NOT_OFFERED] == 1
    assert str(report).splitlines() == [
        "Mine does not conform (1 failed, 1 not offered; agent-framework-core 1.26.0)",
        "[failed] list.save_order: Oldest first.",
        "    gave [1, 0]",
        "[not offered] optional.pages: Pages.",
        "    no pages | here",
    ]
    markdown = report.to_markdown()
    assert markdown.startswith("## Mine\n")
    assert "| `list.save_order` | failed | gave [1, 0] |" in markdown
    assert "| `optional.pages` | not offered | no pages \\| here |" in markdown
    with pytest.raises(KeyError):
        report.result("no.such")
