"""A storage broken in one way fails the check for that way, with a message that says what happened."""

from __future__ import annotations

import pytest
from agent_framework import CheckpointStorage, InMemoryCheckpointStorage

from agent_framework_checkpoint_conformance import CheckStatus, StorageScope, validate_sync
from broken_storages import BROKEN


@pytest.mark.parametrize("storage_class", list(BROKEN), ids=[cls.__name__ for cls in BROKEN])
def test_the_broken_storage_fails_its_check_with_a_clear_message(
    storage_class: type[InMemoryCheckpointStorage],
) -> None:
    async def factory(scope: StorageScope) -> CheckpointStorage:
        return storage_class()

    check_name, fragment = BROKEN[storage_class]

    report = validate_sync(factory)

    assert not report.passed
    result = report.result(check_name)
    assert result.status is CheckStatus.FAILED, str(report)
    assert fragment in result.message
    assert fragment in str(report)
    assert f"| `{check_name}` | failed | " in report.to_markdown()
    assert report.summary().startswith(f"{storage_class.__name__} does not conform")
