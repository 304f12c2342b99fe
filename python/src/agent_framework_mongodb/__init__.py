"""MongoDB checkpoint storage for Microsoft Agent Framework workflows."""

from .checkpoints.options import MongoDBCheckpointStorageOptions
from .checkpoints.provisioning import ensure_checkpoint_indexes, validate_checkpoint_indexes
from .checkpoints.results import MongoDBCheckpointClearResult, MongoDBCheckpointPage
from .checkpoints.storage import MongoDBCheckpointStorage
from .errors import (
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

__all__ = [
    "MongoDBAuthorizationError",
    "MongoDBCapabilityError",
    "MongoDBCheckpointClearResult",
    "MongoDBCheckpointNotFoundError",
    "MongoDBCheckpointPage",
    "MongoDBCheckpointStorage",
    "MongoDBCheckpointStorageOptions",
    "MongoDBConcurrencyError",
    "MongoDBConfigurationError",
    "MongoDBIndexError",
    "MongoDBIndexMismatchError",
    "MongoDBIndexMissingError",
    "MongoDBIntegrationError",
    "MongoDBIntegrityError",
    "MongoDBMappingError",
    "MongoDBPersistenceError",
    "MongoDBRetrievalError",
    "MongoDBSerializationError",
    "MongoDBTimeoutError",
    "MongoDBTransientPersistenceError",
    "MongoDBTransientRetrievalError",
    "ensure_checkpoint_indexes",
    "validate_checkpoint_indexes",
]
