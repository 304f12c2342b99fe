"""The error hierarchy, and translation of every pymongo failure class, code and label."""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework import WorkflowCheckpointException
from bson.errors import InvalidBSON, InvalidDocument
from pymongo.errors import (
    AutoReconnect,
    ConfigurationError,
    CursorNotFound,
    DocumentTooLarge,
    DuplicateKeyError,
    ExecutionTimeout,
    InvalidOperation,
    InvalidURI,
    NetworkTimeout,
    NotPrimaryError,
    OperationFailure,
    ProtocolError,
    PyMongoError,
    ServerSelectionTimeoutError,
    WriteConcernError,
    WriteError,
    WTimeoutError,
)

import agent_framework_mongodb as package
from agent_framework_mongodb.errors import (
    DriverOperation,
    MongoDBAuthorizationError,
    MongoDBCapabilityError,
    MongoDBCheckpointNotFoundError,
    MongoDBConcurrencyError,
    MongoDBConfigurationError,
    MongoDBIndexError,
    MongoDBIndexMismatchError,
    MongoDBIndexMissingError,
    MongoDBIntegrationError,
    MongoDBMappingError,
    MongoDBPersistenceError,
    MongoDBRetrievalError,
    MongoDBSerializationError,
    MongoDBTimeoutError,
    MongoDBTransientPersistenceError,
    MongoDBTransientRetrievalError,
    is_transient_driver_error,
    translate_driver_error,
)

ALL_ERRORS: list[type[MongoDBIntegrationError]] = [
    MongoDBIntegrationError,
    MongoDBConfigurationError,
    MongoDBMappingError,
    MongoDBSerializationError,
    MongoDBAuthorizationError,
    MongoDBCapabilityError,
    MongoDBIndexError,
    MongoDBIndexMissingError,
    MongoDBIndexMismatchError,
    MongoDBRetrievalError,
    MongoDBTransientRetrievalError,
    MongoDBCheckpointNotFoundError,
    MongoDBPersistenceError,
    MongoDBTransientPersistenceError,
    MongoDBConcurrencyError,
    MongoDBTimeoutError,
]


def failure(
    code: int,
    *,
    labels: tuple[str, ...] = (),
    code_name: str = "",
    message: str = "secret filter {tenant: 'acme'}",
) -> OperationFailure:
    details: dict[str, Any] = {"ok": 0, "code": code, "errmsg": message}
    if code_name:
        details["codeName"] = code_name
    if labels:
        details["errorLabels"] = list(labels)
    return OperationFailure(message, code=code, details=details)


@pytest.mark.parametrize("error_class", ALL_ERRORS)
def test_every_error_is_a_framework_checkpoint_exception_with_a_category(
    error_class: type[MongoDBIntegrationError],
) -> None:
    assert issubclass(error_class, WorkflowCheckpointException)
    assert error_class.category.isidentifier()
    assert error_class.__name__ in package.__all__


def test_categories_are_unique() -> None:
    categories = [error_class.category for error_class in ALL_ERRORS]
    assert len(categories) == len(set(categories))


@pytest.mark.parametrize(
    ("child", "parent"),
    [
        (MongoDBConfigurationError, ValueError),
        (MongoDBSerializationError, MongoDBMappingError),
        (MongoDBIndexMissingError, MongoDBIndexError),
        (MongoDBIndexMismatchError, MongoDBIndexError),
        (MongoDBTransientRetrievalError, MongoDBRetrievalError),
        (MongoDBCheckpointNotFoundError, MongoDBRetrievalError),
        (MongoDBTransientPersistenceError, MongoDBPersistenceError),
        (MongoDBConcurrencyError, MongoDBPersistenceError),
    ],
)
def test_hierarchy(child: type[Exception], parent: type[Exception]) -> None:
    assert issubclass(child, parent)


TRANSLATIONS: list[tuple[PyMongoError | InvalidDocument | InvalidBSON, DriverOperation, type[Exception]]] = [
    # Authorization by server code, whatever the operation.
    (failure(13, code_name="Unauthorized"), "read", MongoDBAuthorizationError),
    (failure(18, code_name="AuthenticationFailed"), "write", MongoDBAuthorizationError),
    # Atlas's catch-all AtlasError (for example a space quota) takes the operation's category,
    # unless it is Atlas refusing the credentials.
    (
        failure(8000, code_name="AtlasError", message="you are over your space quota"),
        "write",
        MongoDBPersistenceError,
    ),
    (
        failure(8000, code_name="AtlasError", message="bad auth : Authentication failed."),
        "read",
        MongoDBAuthorizationError,
    ),
    (failure(8000, code_name="AtlasError"), "read", MongoDBRetrievalError),
    (failure(8000, code_name="AtlasError"), "provision", MongoDBIndexError),
    # Capability.
    (failure(40324), "write", MongoDBCapabilityError),
    (failure(168, code_name="InvalidPipelineOperator"), "write", MongoDBCapabilityError),
    (failure(59, code_name="CommandNotFound"), "read", MongoDBCapabilityError),
    # Index definitions, only while provisioning.
    (failure(85, code_name="IndexOptionsConflict"), "provision", MongoDBIndexMismatchError),
    (failure(86, code_name="IndexKeySpecsConflict"), "provision", MongoDBIndexMismatchError),
    (failure(27, code_name="IndexNotFound"), "provision", MongoDBIndexMissingError),
    (failure(27, code_name="IndexNotFound"), "read", MongoDBRetrievalError),
    (failure(67, code_name="CannotCreateIndex"), "provision", MongoDBIndexError),
    # Timeouts.
    (ExecutionTimeout("slow", code=50), "read", MongoDBTimeoutError),
    (ServerSelectionTimeoutError("no server"), "write", MongoDBTimeoutError),
    (NetworkTimeout("slow socket"), "read", MongoDBTimeoutError),
    (WTimeoutError("wtimeout", code=64), "write", MongoDBTimeoutError),
    (failure(262, code_name="ExceededTimeLimit"), "read", MongoDBTimeoutError),
    # Transient by class, code or label.
    (AutoReconnect("reconnect"), "read", MongoDBTransientRetrievalError),
    (AutoReconnect("reconnect"), "write", MongoDBTransientPersistenceError),
    (NotPrimaryError("stepped down"), "write", MongoDBTransientPersistenceError),
    (ProtocolError("bad frame"), "read", MongoDBTransientRetrievalError),
    (failure(91, code_name="ShutdownInProgress"), "write", MongoDBTransientPersistenceError),
    (failure(11600, code_name="InterruptedAtShutdown"), "read", MongoDBTransientRetrievalError),
    (failure(112, labels=("RetryableWriteError",)), "write", MongoDBTransientPersistenceError),
    (failure(112, labels=("TransientTransactionError",)), "read", MongoDBTransientRetrievalError),
    (failure(462, labels=("SystemOverloadedError",)), "read", MongoDBTransientRetrievalError),
    (AutoReconnect("reconnect"), "provision", MongoDBIndexError),
    # Plain failures per operation.
    (failure(2, code_name="BadValue"), "read", MongoDBRetrievalError),
    (failure(2, code_name="BadValue"), "write", MongoDBPersistenceError),
    (failure(2, code_name="BadValue"), "provision", MongoDBIndexError),
    (CursorNotFound("cursor gone", code=43), "read", MongoDBRetrievalError),
    (WriteError("write failed", code=121), "write", MongoDBPersistenceError),
    (WriteConcernError("not majority", code=100), "write", MongoDBPersistenceError),
    (InvalidOperation("client closed"), "read", MongoDBRetrievalError),
    (PyMongoError("unknown"), "write", MongoDBPersistenceError),
    # Duplicate keys the storage did not resolve itself.
    (DuplicateKeyError("E11000", code=11000), "write", MongoDBConcurrencyError),
    # A unique index over documents that already repeat its key cannot be built.
    (DuplicateKeyError("E11000", code=11000), "provision", MongoDBIndexError),
    # Configuration.
    (ConfigurationError("bad option"), "read", MongoDBConfigurationError),
    (InvalidURI("bad uri"), "read", MongoDBConfigurationError),
    # Documents.
    (DocumentTooLarge("too big"), "write", MongoDBSerializationError),
    (failure(10334, code_name="BSONObjectTooLarge"), "write", MongoDBSerializationError),
    (
        failure(2, code_name="BadValue", message="object to insert too large. size in bytes: 16777300"),
        "write",
        MongoDBSerializationError,
    ),
    (InvalidDocument("cannot encode"), "write", MongoDBSerializationError),
    (InvalidBSON("bad bytes"), "read", MongoDBMappingError),
]


@pytest.mark.parametrize(("error", "operation", "expected"), TRANSLATIONS)
def test_translation(
    error: PyMongoError | InvalidDocument, operation: DriverOperation, expected: type[Exception]
) -> None:
    translated = translate_driver_error(error, operation=operation, action="load a checkpoint")
    assert type(translated) is expected


def test_translation_keeps_driver_error_as_cause() -> None:
    error = failure(13, code_name="Unauthorized")

    def load() -> None:
        try:
            raise error
        except PyMongoError as caught:
            raise translate_driver_error(caught, operation="read", action="load a checkpoint") from caught

    with pytest.raises(MongoDBAuthorizationError) as raised:
        load()
    assert raised.value.__cause__ is error


def test_message_names_action_code_and_labels_but_never_driver_text() -> None:
    error = failure(112, labels=("RetryableWriteError",), code_name="WriteConflict")
    message = str(translate_driver_error(error, operation="write", action="save a checkpoint"))
    assert message.startswith("MongoDB could not save a checkpoint")
    assert "code 112" in message
    assert "WriteConflict" in message
    assert "RetryableWriteError" in message
    assert "secret" not in message
    assert "acme" not in message


def test_untrusted_code_name_is_dropped() -> None:
    error = OperationFailure("x", code=2, details={"codeName": "tenant acme: secret"})
    assert "acme" not in str(translate_driver_error(error, operation="read", action="read"))


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (AutoReconnect("x"), True),
        (ServerSelectionTimeoutError("x"), True),
        (failure(10107, code_name="NotWritablePrimary"), True),
        (failure(2, labels=("RetryableError",)), True),
        (failure(13), False),
        (failure(2), False),
        (ConfigurationError("x"), False),
    ],
)
def test_is_transient(error: PyMongoError, transient: bool) -> None:
    assert is_transient_driver_error(error) is transient


RETRYABLE: list[tuple[PyMongoError | InvalidDocument | InvalidBSON, DriverOperation, bool]] = [
    (AutoReconnect("reconnect"), "read", True),
    (AutoReconnect("reconnect"), "write", True),
    # Transient while provisioning is an index error, and still worth retrying.
    (AutoReconnect("reconnect"), "provision", True),
    (failure(91, code_name="ShutdownInProgress"), "write", True),
    (NetworkTimeout("slow socket"), "read", True),
    (ExecutionTimeout("slow", code=50), "read", True),
    (WTimeoutError("wtimeout", code=64), "write", True),
    (DuplicateKeyError("E11000", code=11000), "write", True),
    (failure(13, code_name="Unauthorized"), "read", False),
    (failure(8000, code_name="AtlasError"), "write", False),
    (failure(2, code_name="BadValue"), "write", False),
    (failure(40324), "write", False),
    (failure(85, code_name="IndexOptionsConflict"), "provision", False),
    (DuplicateKeyError("E11000", code=11000), "provision", False),
    (ConfigurationError("bad option"), "read", False),
    (DocumentTooLarge("too big"), "write", False),
    (InvalidBSON("bad bytes"), "read", False),
]


@pytest.mark.parametrize(("error", "operation", "retryable"), RETRYABLE)
def test_retryable_says_whether_the_same_call_may_succeed(
    error: PyMongoError | InvalidDocument | InvalidBSON, operation: DriverOperation, retryable: bool
) -> None:
    translated = translate_driver_error(error, operation=operation, action="save a checkpoint")
    assert translated.retryable is retryable


@pytest.mark.parametrize("error_class", ALL_ERRORS)
def test_retryable_defaults_by_class_and_can_be_stated(error_class: type[MongoDBIntegrationError]) -> None:
    transient = (MongoDBTransientRetrievalError, MongoDBTransientPersistenceError, MongoDBTimeoutError)
    assert error_class("x").retryable is issubclass(error_class, transient)
    assert error_class("x", retryable=True).retryable is True
    assert error_class("x", retryable=False).retryable is False
    assert error_class("x").args == ("x",)


def test_insert_too_large_needs_both_the_code_and_the_message() -> None:
    other_bad_value = failure(2, code_name="BadValue", message="object to insert is fine, filter is not")
    too_large_elsewhere = failure(9, message="object to insert too large")
    for error in (other_bad_value, too_large_elsewhere):
        assert (
            type(translate_driver_error(error, operation="write", action="save")) is MongoDBPersistenceError
        )


@pytest.mark.parametrize("operation", ["read", "write", "provision"])
def test_a_closed_client_is_a_configuration_error_saying_so(operation: DriverOperation) -> None:
    error = InvalidOperation("Cannot use AsyncMongoClient after close")
    translated = translate_driver_error(error, operation=operation, action="read the latest")
    assert type(translated) is MongoDBConfigurationError
    assert "the client was closed" in str(translated)
    assert translated.retryable is False


def test_only_the_closed_client_text_is_read_as_closed() -> None:
    other = InvalidOperation("cannot set options after executing query")
    translated = translate_driver_error(other, operation="read", action="read a page of checkpoints")
    assert type(translated) is MongoDBRetrievalError
    assert "closed" not in str(translated)
