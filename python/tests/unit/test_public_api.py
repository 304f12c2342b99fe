"""The two import paths of the public API cannot drift apart.

`agent_framework_mongodb.checkpoints` is the path that works beside Microsoft's `agent-framework-mongodb`
(which shares the top-level `__init__.py`); `agent_framework_mongodb` is the specification's path. Both
export the same objects, and the top-level package adds only Microsoft's names, and only when their module
is installed.
"""

from __future__ import annotations

import importlib.util

import pytest

import agent_framework_mongodb as package
from agent_framework_mongodb import checkpoints, errors

VECTOR_STORE_NAMES = {"MongoDBCollection", "MongoDBSettings", "MongoDBStore", "__version__"}
VECTOR_STORE_INSTALLED = importlib.util.find_spec("agent_framework_mongodb._vector_store") is not None


def own_api() -> list[str]:
    return [name for name in package.__all__ if name not in VECTOR_STORE_NAMES]


def test_checkpoints_all_equals_the_top_level_packages_own_api() -> None:
    assert checkpoints.__all__ == own_api()
    assert len(set(checkpoints.__all__)) == len(checkpoints.__all__)


@pytest.mark.parametrize("name", checkpoints.__all__)
def test_both_paths_export_the_same_object(name: str) -> None:
    assert getattr(checkpoints, name) is getattr(package, name)


def test_every_public_error_class_is_exported() -> None:
    public_errors = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, errors.MongoDBIntegrationError)
        and value.__module__ == errors.__name__
        and not name.startswith("_")
    }
    assert public_errors <= set(checkpoints.__all__)


def test_microsofts_names_are_exported_only_when_their_module_is_installed() -> None:
    exported = VECTOR_STORE_NAMES & set(package.__all__)
    assert exported == (VECTOR_STORE_NAMES if VECTOR_STORE_INSTALLED else set())


@pytest.mark.skipif(VECTOR_STORE_INSTALLED, reason="Microsoft's agent-framework-mongodb is installed here")
@pytest.mark.parametrize("name", sorted(VECTOR_STORE_NAMES))
def test_microsofts_names_raise_attribute_error_when_absent(name: str) -> None:
    with pytest.raises(AttributeError, match=name):
        getattr(package, name)


HISTORY_NAMES = {
    "MongoDBCheckpointDiff",
    "MongoDBHistoryEntry",
    "MongoDBMessageCountChange",
    "MongoDBPendingRequestChange",
    "MongoDBPendingRequestSummary",
    "MongoDBValueChange",
    "MongoDBValueSummary",
    "checkpoint_history",
    "diff_checkpoints",
}


def test_history_and_diff_are_public_on_both_paths() -> None:
    assert set(checkpoints.__all__) >= HISTORY_NAMES
    for name in HISTORY_NAMES:
        assert getattr(package, name) is getattr(checkpoints, name)
        assert getattr(checkpoints, name).__module__ == "agent_framework_mongodb.checkpoints.history"


def test_fork_is_public_on_both_paths() -> None:
    assert "MongoDBForkResult" in checkpoints.__all__
    assert package.MongoDBForkResult is checkpoints.MongoDBForkResult
    assert checkpoints.MongoDBForkResult.__module__ == "agent_framework_mongodb.checkpoints.forking"
    assert callable(checkpoints.MongoDBCheckpointStorage.fork_run)
