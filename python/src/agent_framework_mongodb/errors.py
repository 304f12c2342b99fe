"""The package's error hierarchy and the translation of pymongo failures into it.

Every error the package raises is a :class:`MongoDBIntegrationError`, which is also Agent
Framework's ``WorkflowCheckpointException``: framework code that catches checkpoint failures
catches ours without knowing this package exists (the one exception: with ``strict_saves``, ``save``
wraps its error in ``MongoDBStrictSaveFailure``, a ``BaseException``; see ``checkpoints/strict.py``).
Each class carries a stable ``category`` string; completion logs record that string and never
the message. Every error also says whether calling the same method again is safe and may succeed
(``retryable``), so a caller's retry policy need not know the class tree.

Driver failures reach callers only through :func:`translate_driver_error`, which picks the
category from the exception class, the server error code and the error labels, and keeps the
driver exception as ``__cause__``. Messages name the operation, server code and labels, never
the driver's own text: that text can quote filters, hosts or credentials.

``asyncio.CancelledError`` is a ``BaseException`` and is never caught or wrapped here.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar, Final, Literal, cast

from agent_framework import WorkflowCheckpointException
from bson.errors import BSONError, InvalidDocument
from pymongo.errors import (
    BulkWriteError,
    ConfigurationError,
    ConnectionFailure,
    DuplicateKeyError,
    InvalidOperation,
    OperationFailure,
    ProtocolError,
    PyMongoError,
)

__all__ = [
    "DRIVER_ERRORS",
    "DUPLICATE_KEY_CODES",
    "BulkFailures",
    "DriverOperation",
    "MongoDBAuthorizationError",
    "MongoDBCapabilityError",
    "MongoDBCheckpointNotFoundError",
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
    "bulk_failures",
    "is_transient_driver_error",
    "translate_driver_error",
    "translated_driver_errors",
]


class MongoDBIntegrationError(WorkflowCheckpointException):
    """Base of every error raised by agent-framework-mongodb.

    Attributes:
        category: A stable name of the error's class, for logs and metrics.
        retryable: Whether calling the same method again with the same arguments is safe and
            may succeed: true for the transient categories and timeouts (every storage method
            may be repeated: a repeated save stores nothing new), and where an error says so,
            such as a save that found no free sequence number. False otherwise, for example
            for a refused configuration or a conflicting checkpoint.
    """

    category: ClassVar[str] = "integration"
    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable


class MongoDBConfigurationError(MongoDBIntegrationError, ValueError):
    """An option, argument or connection setting is invalid; nothing was read or written."""

    category: ClassVar[str] = "configuration"


class MongoDBMappingError(MongoDBIntegrationError):
    """A checkpoint cannot be mapped to or from its stored document.

    Attributes:
        class_names: The ``"module:qualname"`` names of the classes that caused the refusal (not
            listed, or not available in this process), when classes did; empty otherwise. Class
            names are code, not data: the storage's log records name them.
    """

    category: ClassVar[str] = "mapping"
    class_names: tuple[str, ...] = ()

    def __init__(
        self, message: str, *, retryable: bool | None = None, class_names: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message, retryable=retryable)
        if class_names:
            self.class_names = class_names


class MongoDBSerializationError(MongoDBMappingError):
    """A checkpoint value cannot be encoded losslessly, or its bytes do not decode back to it."""

    category: ClassVar[str] = "serialization"


class MongoDBIntegrityError(MongoDBMappingError):
    """A signed storage read a payload that is unsigned, or whose signature does not match it."""

    category: ClassVar[str] = "integrity"


class MongoDBAuthorizationError(MongoDBIntegrationError):
    """The server refused the credentials or the privileges for an operation."""

    category: ClassVar[str] = "authorization"


class MongoDBCapabilityError(MongoDBIntegrationError):
    """The server lacks a feature the storage needs (for example update pipelines)."""

    category: ClassVar[str] = "capability"


class MongoDBIndexError(MongoDBIntegrationError):
    """An index could not be created, or the collection's indexes are not as required."""

    category: ClassVar[str] = "index"


class MongoDBIndexMissingError(MongoDBIndexError):
    """A required index does not exist; run ``ensure_indexes()`` at deploy time."""

    category: ClassVar[str] = "index_missing"


class MongoDBIndexMismatchError(MongoDBIndexError):
    """An index with a required name exists with different keys or options."""

    category: ClassVar[str] = "index_mismatch"


class MongoDBRetrievalError(MongoDBIntegrationError):
    """Reading from MongoDB failed."""

    category: ClassVar[str] = "retrieval"


class MongoDBTransientRetrievalError(MongoDBRetrievalError):
    """Reading failed for a reason that may pass (network, failover); retrying is reasonable."""

    category: ClassVar[str] = "transient_retrieval"
    retryable: bool = True


class MongoDBCheckpointNotFoundError(MongoDBRetrievalError):
    """No checkpoint with that id exists in the storage's bound scope."""

    category: ClassVar[str] = "not_found"


class MongoDBPersistenceError(MongoDBIntegrationError):
    """Writing to MongoDB failed."""

    category: ClassVar[str] = "persistence"


class MongoDBTransientPersistenceError(MongoDBPersistenceError):
    """Writing failed for a reason that may pass (network, failover); retrying is reasonable."""

    category: ClassVar[str] = "transient_persistence"
    retryable: bool = True


class MongoDBConcurrencyError(MongoDBPersistenceError):
    """A checkpoint id is already stored with different content, or writers raced.

    ``retryable`` tells the two apart: a conflicting checkpoint is not retryable, a race that
    left no free sequence number is.
    """

    category: ClassVar[str] = "concurrency"


class MongoDBTimeoutError(MongoDBIntegrationError):
    """The server did not answer within the time allowed.

    Retryable: every storage method may be repeated, and the next attempt gets a new deadline.
    """

    category: ClassVar[str] = "timeout"
    retryable: bool = True


DRIVER_ERRORS: Final = (PyMongoError, BSONError)
"""What the driver raises: ``PyMongoError``, and ``BSONError`` for a document that cannot be
encoded (``InvalidDocument``, and ``DocumentTooLarge``, which derives from it, not from
``PyMongoError``) or a reply that cannot be decoded."""

DriverOperation = Literal["read", "write", "provision"]
"""What the storage was doing when the driver failed; picks retrieval, persistence or index errors."""

# Server error codes, from the MongoDB manual's error code reference
# (https://www.mongodb.com/docs/manual/reference/error-codes/).
_AUTHORIZATION_CODES: frozenset[int] = frozenset({13, 18, 31})
"""Unauthorized, AuthenticationFailed, RoleNotFound."""

_ATLAS_ERROR: Final = 8000
_ATLAS_BAD_AUTH: Final = "bad auth"
"""Code 8000 is Atlas's catch-all ``AtlasError`` (for example "you are over your space quota"),
which takes the operation's own category; Atlas also refuses credentials with it, as
"bad auth : Authentication failed.", and only that message makes it an authorization error."""

_CAPABILITY_CODES: frozenset[int] = frozenset({20, 59, 115, 168, 40324})
"""IllegalOperation, CommandNotFound, CommandNotSupported, InvalidPipelineOperator, unknown stage."""

_INDEX_MISMATCH_CODES: frozenset[int] = frozenset({85, 86})
"""IndexOptionsConflict and IndexKeySpecsConflict: same name or keys, other definition."""

_INDEX_MISSING_CODES: frozenset[int] = frozenset({27})
"""IndexNotFound."""

_DOCUMENT_TOO_LARGE_CODES: frozenset[int] = frozenset({10334, 17419, 17420})
DUPLICATE_KEY_CODES: frozenset[int] = frozenset({11000, 11001, 12582})
"""E11000 and its legacy spellings, as pymongo's own ``DuplicateKeyError`` mapping knows them."""
"""BSONObjectTooLarge, an update's result over 16 MiB (17419) and an upsert's (17420:
"Document to upsert is larger than"; src/mongo/db/exec/upsert_stage.cpp, jstests/core/max_doc_size.js).
The storage inserts checkpoints by upsert, so 17420 is what a server reports for one too large."""

_BAD_VALUE: Final = 2
_TOO_LARGE_TO_INSERT: Final = "object to insert too large"
"""The server refuses an oversized insert with the generic BadValue code and this message
(``fixDocumentForInsert`` in src/mongo/db/ops/insert.cpp); only the pair means "too large"."""

_CLIENT_CLOSED: Final = "Cannot use AsyncMongoClient after close"
"""pymongo's whole message when a closed client is used (``Topology._ensure_opened`` in
pymongo/asynchronous/topology.py, read in 4.20.1; the in-process engine raises the same).
``InvalidOperation`` also covers unrelated misuse (a cursor re-used, a session ended), so only
this exact text is read as "the client is closed"."""

_TIMEOUT_CODES: frozenset[int] = frozenset({50, 202, 262})
"""MaxTimeMSExpired, NetworkInterfaceExceededTimeLimit, ExceededTimeLimit."""

_TRANSIENT_CODES: frozenset[int] = frozenset(
    {6, 7, 89, 91, 134, 189, 9001, 10107, 11600, 11602, 13435, 13436}
)
"""The codes MongoDB's retryable reads and writes treat as retryable: host unreachable or not
found, network timeout, shutdown or step-down in progress, not primary, socket exception."""

_TRANSIENT_LABELS: tuple[str, ...] = (
    "RetryableWriteError",
    "RetryableError",
    "TransientTransactionError",
    "SystemOverloadedError",
)
"""Labels the server or driver attaches to failures that a retry may clear."""


def translate_driver_error(
    error: PyMongoError | BSONError,
    *,
    operation: DriverOperation,
    action: str,
) -> MongoDBIntegrationError:
    """Return the package error for a pymongo failure; the caller raises it ``from error``.

    Args:
        error: What pymongo (or bson) raised.
        operation: Whether the storage was reading, writing, or provisioning indexes.
        action: A short, data-free description such as ``"load a checkpoint"``; it becomes
            part of the message and must not contain ids, scopes or names.
    """
    if _is_closed_client(error):
        return MongoDBConfigurationError(
            f"MongoDB could not {action}: the client was closed. A storage cannot be used after its "
            "client is closed; whoever owns the client closed it."
        )
    code = _error_code(error)
    message = f"MongoDB could not {action}{_describe(error, code)}"
    category = _categorize(error, code, operation)
    return category(message, retryable=_is_retryable(error, category))


@contextmanager
def translated_driver_errors(*, operation: DriverOperation, action: str) -> Generator[None]:
    """Raise any driver failure inside the block as the package error ``translate_driver_error``
    picks, with the driver exception as ``__cause__``."""
    try:
        yield
    except DRIVER_ERRORS as error:
        raise translate_driver_error(error, operation=operation, action=action) from error


def _is_retryable(error: PyMongoError | BSONError, category: type[MongoDBIntegrationError]) -> bool:
    if category.retryable or category is MongoDBConcurrencyError:
        # An escaped duplicate key is a race between writers, which the next attempt re-runs.
        return True
    # Transient failures while provisioning are index errors, and still pass.
    return isinstance(error, PyMongoError) and (error.timeout or is_transient_driver_error(error))


def _categorize(  # noqa: PLR0911 - one return per category, in order of precedence
    error: PyMongoError | BSONError, code: int | None, operation: DriverOperation
) -> type[MongoDBIntegrationError]:
    if isinstance(error, BSONError):
        # Nothing was sent: a document (DocumentTooLarge included) that cannot be encoded is the
        # checkpoint's problem; a reply that cannot be decoded is the stored document's.
        return MongoDBSerializationError if isinstance(error, InvalidDocument) else MongoDBMappingError
    if isinstance(error, ConfigurationError):
        return MongoDBConfigurationError
    if code in _DOCUMENT_TOO_LARGE_CODES or _is_insert_too_large(error, code):
        return MongoDBSerializationError
    if code in _AUTHORIZATION_CODES or (
        code == _ATLAS_ERROR and _server_message_starts(error, _ATLAS_BAD_AUTH)
    ):
        return MongoDBAuthorizationError
    if code in _CAPABILITY_CODES:
        return MongoDBCapabilityError
    if operation == "provision" and code in _INDEX_MISMATCH_CODES:
        return MongoDBIndexMismatchError
    if operation == "provision" and code in _INDEX_MISSING_CODES:
        return MongoDBIndexMissingError
    if error.timeout or code in _TIMEOUT_CODES:
        return MongoDBTimeoutError
    if operation == "provision" and (isinstance(error, DuplicateKeyError) or code in DUPLICATE_KEY_CODES):
        # A unique index cannot be built over documents that already repeat its key.
        return MongoDBIndexError
    if isinstance(error, DuplicateKeyError) or code in DUPLICATE_KEY_CODES:
        # The storage resolves duplicate ids itself; one that still escapes is a write race.
        return MongoDBConcurrencyError
    if is_transient_driver_error(error):
        return _TRANSIENT_BY_OPERATION[operation]
    return _FAILURE_BY_OPERATION[operation]


def is_transient_driver_error(error: PyMongoError) -> bool:
    """Whether a retry of the same operation may succeed: network, failover or overload."""
    if isinstance(error, (ConnectionFailure, ProtocolError)):
        return True
    if _error_code(error) in _TRANSIENT_CODES:
        return True
    return any(error.has_error_label(label) for label in _TRANSIENT_LABELS)


_TRANSIENT_BY_OPERATION: Mapping[DriverOperation, type[MongoDBIntegrationError]] = {
    "read": MongoDBTransientRetrievalError,
    "write": MongoDBTransientPersistenceError,
    "provision": MongoDBIndexError,
}

_FAILURE_BY_OPERATION: Mapping[DriverOperation, type[MongoDBIntegrationError]] = {
    "read": MongoDBRetrievalError,
    "write": MongoDBPersistenceError,
    "provision": MongoDBIndexError,
}


def _is_closed_client(error: PyMongoError | BSONError) -> bool:
    # Read to classify, never repeated (the rule every driver message follows here).
    return isinstance(error, InvalidOperation) and str(error) == _CLIENT_CLOSED


def _is_insert_too_large(error: PyMongoError | BSONError, code: int | None) -> bool:
    return code == _BAD_VALUE and _server_message_starts(error, _TOO_LARGE_TO_INSERT)


def _server_message_starts(error: PyMongoError | BSONError, prefix: str) -> bool:
    """Whether the server's message begins with ``prefix``, case-insensitively. Read to classify,
    never repeated: a server message can quote sizes, namespaces, hosts or user names."""
    if not isinstance(error, OperationFailure):
        return False
    message = (error.details or {}).get("errmsg", str(error))
    return isinstance(message, str) and message.lower().startswith(prefix.lower())


def _error_code(error: PyMongoError | BSONError) -> int | None:
    if isinstance(error, BulkWriteError):
        return _bulk_code(error)
    if isinstance(error, OperationFailure):
        return error.code
    return None


def _bulk_code(error: BulkWriteError) -> int | None:
    """The code that decides a bulk's category: its own is 65 (MultipleErrorsOccurred) whatever
    went wrong, so the codes of its write errors and write-concern errors decide, in this order: a
    size code (the request was too large: serialization), a write-concern error that a retry may
    clear (a step-down while replicating: transient), then the first write error, then the first
    write-concern error."""
    details = error.details or {}
    write_codes = [_code_of(entry) for entry in _entries(details, "writeErrors")]
    concern_codes = [_code_of(entry) for entry in _entries(details, "writeConcernErrors")]
    for code in write_codes:
        if code in _DOCUMENT_TOO_LARGE_CODES:
            return code
    for code in concern_codes:
        if code in _TRANSIENT_CODES:
            return code
    known = [code for code in (*write_codes, *concern_codes) if code is not None]
    return known[0] if known else error.code


@dataclass(frozen=True, slots=True)
class BulkFailures:
    """What a ``BulkWriteError`` holds: each failed statement's code by its index in the bulk,
    whether a write-concern error was reported, and the bulk's own counts."""

    codes: Mapping[int, int | None]
    write_concern_failed: bool
    matched: int
    upserted: int


def bulk_failures(error: BulkWriteError) -> BulkFailures:
    """Read a ``BulkWriteError``'s details (malformed entries count as unknown codes)."""
    details = error.details or {}
    codes: dict[int, int | None] = {}
    for entry in _entries(details, "writeErrors"):
        index = entry.get("index")
        codes[index if isinstance(index, int) else -1] = _code_of(entry)
    return BulkFailures(
        codes=codes,
        write_concern_failed=bool(_entries(details, "writeConcernErrors")),
        matched=_count_of(details, "nMatched"),
        upserted=_count_of(details, "nUpserted"),
    )


def _count_of(details: Mapping[str, object], name: str) -> int:
    value = details.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _entries(details: Mapping[str, object], name: str) -> list[Mapping[str, object]]:
    entries = details.get(name)
    if not isinstance(entries, list):
        return []
    return [
        cast("Mapping[str, object]", entry)
        for entry in cast("list[object]", entries)
        if isinstance(entry, Mapping)
    ]


def _code_of(entry: Mapping[str, object]) -> int | None:
    code = entry.get("code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _describe(error: PyMongoError | BSONError, code: int | None) -> str:
    """Name the failure by class, server code and labels only: never the driver's text."""
    parts = [type(error).__name__]
    if code is not None:
        parts.append(f"code {code}")
        code_name = _code_name(error)
        if code_name:
            parts.append(code_name)
    labels = _labels(error)
    if labels:
        parts.append("labels " + ",".join(labels))
    return " (" + "; ".join(parts) + ")."


def _code_name(error: PyMongoError | BSONError) -> str | None:
    if not isinstance(error, OperationFailure):
        return None
    details = error.details
    if details is None:
        return None
    code_name = details.get("codeName")
    # codeName is a server identifier such as "Unauthorized"; anything else is not trusted.
    if isinstance(code_name, str) and code_name.isidentifier():
        return code_name
    return None


def _labels(error: PyMongoError | BSONError) -> list[str]:
    if not isinstance(error, PyMongoError):
        return []
    return [label for label in _TRANSIENT_LABELS if error.has_error_label(label)]
