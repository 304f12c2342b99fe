"""A conformance suite for Agent Framework ``CheckpointStorage`` implementations.

``validate(factory)`` runs every check against the storages ``factory`` makes and returns a
``ConformanceReport``; the pytest plugin (``checkpoint_storage_conformance``) turns each check
into a test. See the README beside this package's pyproject.toml.
"""

from ._model import (
    Capabilities,
    CheckResult,
    CheckStatus,
    ConformanceReport,
    StorageFactory,
    StorageScope,
)
from ._registry import Check
from ._runner import DEFAULT_TIMEOUT, check_names, run_check, validate, validate_sync

__all__ = [
    "DEFAULT_TIMEOUT",
    "Capabilities",
    "Check",
    "CheckResult",
    "CheckStatus",
    "ConformanceReport",
    "StorageFactory",
    "StorageScope",
    "check_names",
    "run_check",
    "validate",
    "validate_sync",
]
