"""The pytest plugin: one test per check for a registered factory; failures show the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_framework_checkpoint_conformance import check_names
from agent_framework_checkpoint_conformance.plugin import checkpoint_storage_conformance

MODULE = """
from agent_framework import CheckpointStorage, InMemoryCheckpointStorage

from agent_framework_checkpoint_conformance import StorageScope, check_names
from agent_framework_checkpoint_conformance.plugin import checkpoint_storage_conformance
from broken_storages import ReorderedListing

DIFFER_IN_1_13 = ("load.copies", "get_latest.shared_timestamp")


# Agent Framework 1.13's InMemoryCheckpointStorage fails these two (REPORT.md says why).
@checkpoint_storage_conformance(checks=[n for n in check_names() if n not in DIFFER_IN_1_13])
async def reference(scope: StorageScope) -> CheckpointStorage:
    return InMemoryCheckpointStorage()


@checkpoint_storage_conformance(checks=["list.save_order", "optional.pages"])
async def reordered(scope: StorageScope) -> CheckpointStorage:
    return ReorderedListing()
"""


def test_a_registration_collects_one_test_per_check(pytester: pytest.Pytester) -> None:
    broken = Path(__file__).with_name("broken_storages.py").read_text(encoding="utf-8")
    pytester.makepyfile(test_storages=MODULE, broken_storages=broken)

    result = pytester.runpytest("-p", "no:asyncio", "-rs")

    collected = len(check_names()) - 2 + 2
    outcomes = result.parseoutcomes()
    assert sum(outcomes.get(key, 0) for key in ("passed", "failed", "skipped")) == collected
    assert outcomes["failed"] == 1
    result.stdout.fnmatch_lines(
        [
            "*reordered?list.save_order?*",
            "*list_checkpoints gave [[]7, 6, 5, 4, 3, 2, 1, 0[]]; saved 0..7*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "SKIPPED ?1? test_storages.py:*: not claimed (Capabilities.shared_between_instances)",
            "SKIPPED ?1? test_storages.py:*: not offered: no list_checkpoint_page() method",
        ]
    )


def test_an_unknown_check_name_is_refused_at_registration() -> None:
    with pytest.raises(ValueError, match=r"no such checks: list\.sorted"):
        checkpoint_storage_conformance(checks=["list.sorted"])
