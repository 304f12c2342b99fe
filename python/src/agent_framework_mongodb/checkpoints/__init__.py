"""MongoDB checkpoint storage for Microsoft Agent Framework workflows: the whole public API.

Import from here when Microsoft's ``agent-framework-mongodb`` (the vector store) is installed in the same
environment. Both distributions install the import package ``agent_framework_mongodb``, so they share one
``agent_framework_mongodb/__init__.py``: whichever installed last owns it, and uninstalling either removes
it. This subpackage belongs to this distribution alone and keeps importing in every one of those cases;
see docs/adr/0001-distribution-name.md.

The top-level package re-exports exactly these names (``agent_framework_mongodb.MongoDBCheckpointStorage``
is the specification's path); a unit test keeps the two lists equal.
"""

from ..errors import (
    MongoDBAuthorizationError,
    MongoDBCapabilityError,
    MongoDBCheckpointNotFoundError,
    MongoDBConcurrencyError,
    MongoDBConfigurationError,
    MongoDBIndexError,
    MongoDBIndexMismatchError,
    MongoDBIndexMissingError,
    MongoDBIntegrationError,
    MongoDBIntegrityError,
    MongoDBMappingError,
    MongoDBPersistenceError,
    MongoDBRetrievalError,
    MongoDBSerializationError,
    MongoDBTimeoutError,
    MongoDBTransientPersistenceError,
    MongoDBTransientRetrievalError,
)
from .catalog import MongoDBCheckpointCatalog
from .forking import MongoDBForkResult
from .history import (
    MongoDBCheckpointDiff,
    MongoDBHistoryEntry,
    MongoDBMessageCountChange,
    MongoDBPendingRequestChange,
    MongoDBPendingRequestSummary,
    MongoDBValueChange,
    MongoDBValueSummary,
    checkpoint_history,
    diff_checkpoints,
)
from .options import MongoDBCheckpointStorageOptions
from .provisioning import ensure_checkpoint_indexes, validate_checkpoint_indexes
from .pruning import (
    MongoDBClearedRun,
    MongoDBPrunePlan,
    MongoDBPruneResult,
    MongoDBSkippedRun,
    MongoDBSkipReason,
)
from .results import (
    RUN_COUNT_LIMIT,
    MongoDBCheckpointClearResult,
    MongoDBCheckpointPage,
    MongoDBCheckpointSummary,
    MongoDBCheckpointSummaryPage,
    MongoDBRunPage,
    MongoDBRunSummary,
)
from .storage import MongoDBCheckpointStorage
from .strict import MongoDBStrictSaveFailure

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
