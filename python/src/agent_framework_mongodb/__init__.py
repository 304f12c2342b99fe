"""MongoDB checkpoint storage for Microsoft Agent Framework workflows.

Microsoft's ``agent-framework-mongodb`` (a vector store) installs this same import package, and the two
distributions share this one ``__init__.py``: whichever installed last owns it. So that installing this
distribution last breaks nothing of Microsoft's, this module also re-exports Microsoft's public names
(``MongoDBCollection``, ``MongoDBSettings``, ``MongoDBStore``, ``__version__``) when their module is
installed; they are imported on first access, so nothing is imported or required when it is absent.

Beside Microsoft's package, import the checkpoint storage from ``agent_framework_mongodb.checkpoints``: that
path is this distribution's alone and works whichever ``__init__.py`` is installed (or none). See
docs/adr/0001-distribution-name.md.
"""

# pyright: reportMissingImports=false, reportUnknownVariableType=false

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from typing import TYPE_CHECKING, Any

from .checkpoints import (
    RUN_COUNT_LIMIT,
    MongoDBAuthorizationError,
    MongoDBCapabilityError,
    MongoDBCheckpointCatalog,
    MongoDBCheckpointClearResult,
    MongoDBCheckpointDiff,
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointPage,
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageOptions,
    MongoDBCheckpointSummary,
    MongoDBCheckpointSummaryPage,
    MongoDBClearedRun,
    MongoDBConcurrencyError,
    MongoDBConfigurationError,
    MongoDBForkResult,
    MongoDBHistoryEntry,
    MongoDBIndexError,
    MongoDBIndexMismatchError,
    MongoDBIndexMissingError,
    MongoDBIntegrationError,
    MongoDBIntegrityError,
    MongoDBMappingError,
    MongoDBMessageCountChange,
    MongoDBPendingRequestChange,
    MongoDBPendingRequestSummary,
    MongoDBPersistenceError,
    MongoDBPrunePlan,
    MongoDBPruneResult,
    MongoDBRetrievalError,
    MongoDBRunPage,
    MongoDBRunSummary,
    MongoDBSerializationError,
    MongoDBSkippedRun,
    MongoDBSkipReason,
    MongoDBStrictSaveFailure,
    MongoDBTimeoutError,
    MongoDBTransientPersistenceError,
    MongoDBTransientRetrievalError,
    MongoDBValueChange,
    MongoDBValueSummary,
    checkpoint_history,
    diff_checkpoints,
    ensure_checkpoint_indexes,
    validate_checkpoint_indexes,
)

if TYPE_CHECKING:
    # Microsoft's module, when it is installed: typed names for type checkers. Where it is absent (as in
    # this repository) the names are unknown, hence the file-level pyright settings above.
    from ._vector_store import (  # type: ignore[import-not-found,unused-ignore]
        MongoDBCollection,
        MongoDBSettings,
        MongoDBStore,
    )

    __version__: str

# This distribution's own public API: exactly `agent_framework_mongodb.checkpoints.__all__`.
__all__ = [
    "RUN_COUNT_LIMIT",
    "MongoDBAuthorizationError",
    "MongoDBCapabilityError",
    "MongoDBCheckpointCatalog",
    "MongoDBCheckpointClearResult",
    "MongoDBCheckpointDiff",
    "MongoDBCheckpointNotFoundError",
    "MongoDBCheckpointPage",
    "MongoDBCheckpointStorage",
    "MongoDBCheckpointStorageOptions",
    "MongoDBCheckpointSummary",
    "MongoDBCheckpointSummaryPage",
    "MongoDBClearedRun",
    "MongoDBConcurrencyError",
    "MongoDBConfigurationError",
    "MongoDBForkResult",
    "MongoDBHistoryEntry",
    "MongoDBIndexError",
    "MongoDBIndexMismatchError",
    "MongoDBIndexMissingError",
    "MongoDBIntegrationError",
    "MongoDBIntegrityError",
    "MongoDBMappingError",
    "MongoDBMessageCountChange",
    "MongoDBPendingRequestChange",
    "MongoDBPendingRequestSummary",
    "MongoDBPersistenceError",
    "MongoDBPrunePlan",
    "MongoDBPruneResult",
    "MongoDBRetrievalError",
    "MongoDBRunPage",
    "MongoDBRunSummary",
    "MongoDBSerializationError",
    "MongoDBSkipReason",
    "MongoDBSkippedRun",
    "MongoDBStrictSaveFailure",
    "MongoDBTimeoutError",
    "MongoDBTransientPersistenceError",
    "MongoDBTransientRetrievalError",
    "MongoDBValueChange",
    "MongoDBValueSummary",
    "checkpoint_history",
    "diff_checkpoints",
    "ensure_checkpoint_indexes",
    "validate_checkpoint_indexes",
]

# Microsoft's `agent-framework-mongodb`: its module and the public names its own `__init__` exports.
_VECTOR_STORE_MODULE = f"{__name__}._vector_store"
_VECTOR_STORE_DISTRIBUTION = "agent-framework-mongodb"
_VECTOR_STORE_NAMES = ("MongoDBCollection", "MongoDBSettings", "MongoDBStore")


def _vector_store_installed() -> bool:
    """Whether Microsoft's module is installed: a file-system lookup, nothing is imported."""
    return importlib.util.find_spec(_VECTOR_STORE_MODULE) is not None


if _vector_store_installed():
    __all__ += ["MongoDBCollection", "MongoDBSettings", "MongoDBStore", "__version__"]


def __getattr__(name: str) -> Any:
    """Resolve Microsoft's public names on first access, as their own ``__init__`` would export them."""
    if name in _VECTOR_STORE_NAMES and _vector_store_installed():
        value = getattr(importlib.import_module(_VECTOR_STORE_MODULE), name)
        globals()[name] = value
        return value
    if name == "__version__" and _vector_store_installed():
        try:
            return importlib.metadata.version(_VECTOR_STORE_DISTRIBUTION)
        except importlib.metadata.PackageNotFoundError:
            return "0.0.0"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
