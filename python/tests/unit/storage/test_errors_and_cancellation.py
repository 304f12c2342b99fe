"""Bad input fails before I/O; driver failures are translated; cancellation passes through."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agent_framework import WorkflowCheckpointException
from bson.errors import InvalidBSON, InvalidDocument
from pymongo.errors import (
    AutoReconnect,
    DocumentTooLarge,
    ExecutionTimeout,
    NetworkTimeout,
    NotPrimaryError,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WriteError,
)

from agent_framework_mongodb import (
    MongoDBAuthorizationError,
    MongoDBCapabilityError,
    MongoDBCheckpointStorage,
    MongoDBConfigurationError,
    MongoDBIndexError,
    MongoDBIntegrationError,
    MongoDBMappingError,
    MongoDBPersistenceError,
    MongoDBRetrievalError,
    MongoDBSerializationError,
    MongoDBTimeoutError,
    MongoDBTransientPersistenceError,
    MongoDBTransientRetrievalError,
)
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    INSERT,
    WORKFLOW,
    ProxyCollection,
    make_checkpoint,
    make_storage,
    raw_all,
    raw_checkpoints,
    raw_counter,
    save_chain,
    scope_of,
)

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)

MARKER = "MARKER-driver-text-7f3a"
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


@pytest.fixture
def unchunked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints are stored whole, as one that the split cannot cut is (a tuple of millions of
    items): MongoDB's document limit then applies to the checkpoint document itself."""
    from agent_framework_mongodb.checkpoints import codec

    monkeypatch.setattr(codec, "DEFAULT_SPLIT_ABOVE", 2**62)


# -- bad input, before any I/O -------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "cp-1", {"checkpoint_id": "cp-1"}, 42, object()])
async def test_save_of_a_non_checkpoint_is_a_configuration_error(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage, value: object
) -> None:
    with pytest.raises(MongoDBConfigurationError):
        await proxied_storage.save(value)  # type: ignore[arg-type]
    assert proxy.round_trips == 0


@pytest.mark.parametrize("value", [None, 42, b"cp-1", ["cp-1"], 1.5])
async def test_non_str_checkpoint_id_is_a_configuration_error(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage, value: object
) -> None:
    with pytest.raises(MongoDBConfigurationError):
        await proxied_storage.load(value)  # type: ignore[arg-type]
    with pytest.raises(MongoDBConfigurationError):
        await proxied_storage.delete(value)  # type: ignore[arg-type]
    assert proxy.round_trips == 0


@pytest.mark.parametrize("checkpoint_id", [" cp-1", "cp-1 ", "\tcp-1", "cp-1\n", ""])
async def test_save_of_an_id_with_surrounding_whitespace_is_refused(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage, checkpoint_id: str
) -> None:
    with pytest.raises(MongoDBConfigurationError):
        await proxied_storage.save(make_checkpoint(checkpoint_id))
    assert proxy.round_trips == 0


@pytest.mark.parametrize("checkpoint_id", [" cp-1", "cp-1 ", "\tcp-1", "cp-1\n", ""])
async def test_load_of_an_id_with_surrounding_whitespace_is_refused_without_io(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage, checkpoint_id: str
) -> None:
    with pytest.raises(MongoDBConfigurationError):
        await proxied_storage.load(checkpoint_id)
    assert proxy.round_trips == 0


@pytest.mark.parametrize("checkpoint_id", [" cp-1", "cp-1 ", "\tcp-1", "cp-1\n", ""])
async def test_delete_of_an_id_with_surrounding_whitespace_is_refused_without_io(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage, checkpoint_id: str
) -> None:
    with pytest.raises(MongoDBConfigurationError):
        await proxied_storage.delete(checkpoint_id)
    assert proxy.round_trips == 0


async def test_save_with_a_whitespace_parent_id_is_refused(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    with pytest.raises(MongoDBConfigurationError):
        await proxied_storage.save(make_checkpoint("cp-1", previous="cp-0 "))
    assert proxy.round_trips == 0


@pytest.mark.usefixtures("unchunked")
async def test_oversized_checkpoint_fails_before_any_io_stating_size_and_limit(
    collection: InMemoryCollection,
) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    checkpoint = make_checkpoint("cp-huge", state={"blob": b"\x01" * (17 * 1000 * 1000)})

    with pytest.raises(MongoDBSerializationError) as raised:
        await storage.save(checkpoint)

    assert proxy.round_trips == 0
    assert proxy.calls == []
    assert await raw_counter(collection, scope_of(storage)) is None
    assert await raw_all(collection) == []
    numbers = [int(n.replace(",", "").replace("_", "")) for n in re.findall(r"\d[\d,_]*", str(raised.value))]
    assert MAX_DOCUMENT_BYTES in numbers
    assert any(n > MAX_DOCUMENT_BYTES for n in numbers)


async def test_checkpoint_just_under_the_limit_is_stored(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    checkpoint = make_checkpoint("cp-big", state={"blob": b"\x02" * (15 * 1024 * 1024)})

    await storage.save(checkpoint)

    assert (await storage.load("cp-big")).state["blob"] == checkpoint.state["blob"]


# -- driver failures -----------------------------------------------------------------------

Operation = Callable[[MongoDBCheckpointStorage], Awaitable[Any]]


def _op_save(storage: MongoDBCheckpointStorage) -> Awaitable[Any]:
    return storage.save(make_checkpoint("cp-new"))


OPERATIONS: dict[str, tuple[str, Operation]] = {
    "save-allocate": ("find_one_and_update", _op_save),
    "save-insert": (INSERT, _op_save),
    "load": ("find_one", lambda s: s.load("cp-000")),
    "get_latest": ("find_one", lambda s: s.get_latest(workflow_name=WORKFLOW)),
    "list_checkpoints": ("find_fetch", lambda s: s.list_checkpoints(workflow_name=WORKFLOW)),
    "list_checkpoint_ids": ("find_fetch", lambda s: s.list_checkpoint_ids(workflow_name=WORKFLOW)),
    "list_checkpoint_page": ("find_fetch", lambda s: s.list_checkpoint_page(workflow_name=WORKFLOW)),
    "delete": ("delete_one", lambda s: s.delete("cp-000")),
    "clear_run-checkpoints": ("delete_many", lambda s: s.clear_run()),
    "clear_run-counter": ("delete_one", lambda s: s.clear_run()),
    "ensure_indexes": ("create_indexes", lambda s: s.ensure_indexes()),
    "validate_indexes": ("list_indexes", lambda s: s.validate_indexes()),
}
READS = {"load", "get_latest", "list_checkpoints", "list_checkpoint_ids", "list_checkpoint_page"}
WRITES = {"save-allocate", "save-insert", "delete", "clear_run-checkpoints", "clear_run-counter"}
PROVISION = {"ensure_indexes", "validate_indexes"}


def _transient_for(name: str) -> type[MongoDBIntegrationError]:
    if name in READS:
        return MongoDBTransientRetrievalError
    if name in WRITES:
        return MongoDBTransientPersistenceError
    return MongoDBIndexError


def _failure_for(name: str) -> type[MongoDBIntegrationError]:
    if name in READS:
        return MongoDBRetrievalError
    if name in WRITES:
        return MongoDBPersistenceError
    return MongoDBIndexError


async def _prepared(collection: ProxyCollection) -> MongoDBCheckpointStorage:
    storage = make_storage(collection)
    await save_chain(storage, 2)
    return storage


ERROR_CASES: list[tuple[str, PyMongoError, Callable[[str], type[MongoDBIntegrationError]]]] = [
    ("auto-reconnect", AutoReconnect(f"connection reset {MARKER}"), _transient_for),
    ("network-timeout", NetworkTimeout(f"timed out {MARKER}"), lambda _: MongoDBTimeoutError),
    ("server-selection", ServerSelectionTimeoutError(f"no servers {MARKER}"), lambda _: MongoDBTimeoutError),
    (
        "unauthorized",
        OperationFailure(f"not authorized {MARKER}", 13, {"code": 13, "codeName": "Unauthorized"}),
        lambda _: MongoDBAuthorizationError,
    ),
    (
        "auth-failed",
        OperationFailure(f"auth failed {MARKER}", 18, {"code": 18, "codeName": "AuthenticationFailed"}),
        lambda _: MongoDBAuthorizationError,
    ),
    (
        "not-primary",
        NotPrimaryError(f"not primary {MARKER}", {"code": 10107, "codeName": "NotWritablePrimary"}),
        _transient_for,
    ),
    (
        "max-time",
        ExecutionTimeout(f"operation exceeded time limit {MARKER}", 50, {"code": 50}),
        lambda _: MongoDBTimeoutError,
    ),
    (
        "command-not-found",
        OperationFailure(f"no such command {MARKER}", 59, {"code": 59, "codeName": "CommandNotFound"}),
        lambda _: MongoDBCapabilityError,
    ),
    (
        "other-failure",
        OperationFailure(f"boom {MARKER}", 2, {"code": 2, "codeName": "BadValue"}),
        _failure_for,
    ),
    ("write-error", WriteError(f"write failed {MARKER}", 121, {"code": 121}), _failure_for),
]


@pytest.mark.parametrize("operation", list(OPERATIONS))
@pytest.mark.parametrize(("case", "error", "expected"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
async def test_driver_errors_are_translated_with_the_cause_kept(
    collection: InMemoryCollection,
    operation: str,
    case: str,
    error: PyMongoError,
    expected: Callable[[str], type[MongoDBIntegrationError]],
) -> None:
    proxy = ProxyCollection(collection)
    storage = await _prepared(proxy)
    op_name, call = OPERATIONS[operation]
    proxy.fail(op_name, error)

    with pytest.raises(MongoDBIntegrationError) as raised:
        await call(storage)

    assert type(raised.value) is expected(operation), (case, operation, type(raised.value))
    assert isinstance(raised.value, WorkflowCheckpointException)
    assert raised.value.__cause__ is error
    assert MARKER not in str(raised.value)
    assert op_name in proxy.trip_names, "the failure was never injected"


async def test_failed_insert_writes_no_checkpoint_and_next_save_succeeds(
    collection: InMemoryCollection,
) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    await storage.ensure_indexes()
    await save_chain(storage, 2)
    proxy.fail(INSERT, AutoReconnect("reset"))

    with pytest.raises(MongoDBTransientPersistenceError):
        await storage.save(make_checkpoint("cp-lost"))

    assert [d["checkpoint_id"] for d in await raw_checkpoints(collection)] == ["cp-000", "cp-001"]
    await storage.save(make_checkpoint("cp-lost"))
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-000", "cp-001", "cp-lost"]


async def test_failed_recovery_read_surfaces_as_retrieval_error(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    collection.fail_next("find_one", AutoReconnect("reset"))

    with pytest.raises(MongoDBTransientRetrievalError):
        await storage.save(make_checkpoint("cp-first"))

    await storage.save(make_checkpoint("cp-first"))
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-first"]


async def test_clear_run_failing_between_its_deletes_can_be_retried(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await save_chain(storage, 3)
    collection.fail_next("delete_one", AutoReconnect("reset"))

    with pytest.raises(MongoDBTransientPersistenceError):
        await storage.clear_run()
    assert await raw_checkpoints(collection) == []
    assert await raw_counter(collection, scope_of(storage)) is not None

    result = await storage.clear_run()
    assert (result.checkpoints_deleted, result.counter_deleted) == (0, 1)
    assert await raw_all(collection) == []


async def test_errors_are_framework_checkpoint_exceptions(storage: MongoDBCheckpointStorage) -> None:
    with pytest.raises(WorkflowCheckpointException):
        await storage.load("cp-missing")
    with pytest.raises(WorkflowCheckpointException):
        await storage.list_checkpoints(workflow_name="other-flow")


async def test_a_workflow_name_mismatch_says_to_name_the_builder_and_names_both(
    storage: MongoDBCheckpointStorage,
) -> None:
    # Agent Framework's default name: f"WorkflowBuilder-{uuid.uuid4()}", new for every builder.
    unnamed = "WorkflowBuilder-5b0c1f0e-8a51-4d7e-9f64-2f4cc1a5e0d1"
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: storage.save(make_checkpoint("cp-unnamed", workflow_name=unnamed)),
        lambda: storage.get_latest(workflow_name=unnamed),
        lambda: storage.list_checkpoint_ids(workflow_name=unnamed),
    ]
    for call in calls:
        with pytest.raises(MongoDBConfigurationError) as raised:
            await call()
        message = str(raised.value)
        assert "WorkflowBuilder(name=...)" in message
        assert "workflow_name" in message
        # Workflow names are code, not run data (issue 21): the caller sees what differs.
        assert f"bound to {WORKFLOW!r}, got {unnamed!r}" in message


async def test_a_workflow_name_of_another_type_is_named_by_its_type(
    storage: MongoDBCheckpointStorage,
) -> None:
    with pytest.raises(MongoDBConfigurationError, match=f"bound to {WORKFLOW!r}, got int"):
        await storage.get_latest(workflow_name=42)  # type: ignore[arg-type]


# -- cancellation --------------------------------------------------------------------------


async def _cancel_inside(proxy: ProxyCollection, name: str, operation: Awaitable[Any]) -> None:
    gate = proxy.block(name)
    task = asyncio.ensure_future(operation)
    await asyncio.wait_for(proxy.entered[name].wait(), timeout=5)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert not gate.is_set()


async def test_save_cancelled_inside_the_insert(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    await save_chain(storage, 2)

    await _cancel_inside(proxy, INSERT, storage.save(make_checkpoint("cp-cancelled")))

    assert [d["checkpoint_id"] for d in await raw_checkpoints(collection)] == ["cp-000", "cp-001"]
    await storage.save(make_checkpoint("cp-cancelled"))
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-000", "cp-001", "cp-cancelled"]


async def test_save_cancelled_inside_the_allocation_writes_nothing(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)

    await _cancel_inside(proxy, "find_one_and_update", storage.save(make_checkpoint("cp-cancelled")))

    assert await raw_all(collection) == []


async def test_save_cancelled_inside_the_recovery_read(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)

    await _cancel_inside(proxy, "find_one", storage.save(make_checkpoint("cp-cancelled")))

    assert await raw_checkpoints(collection) == []
    await storage.save(make_checkpoint("cp-after"))
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-after"]


async def test_load_cancelled_inside_the_read(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    await save_chain(storage, 1)

    await _cancel_inside(proxy, "find_one", storage.load("cp-000"))


@pytest.mark.parametrize("which", ["list_checkpoints", "list_checkpoint_ids", "list_checkpoint_page"])
async def test_listing_cancelled_inside_a_page_fetch(collection: InMemoryCollection, which: str) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy, page_size=2, max_page_size=2)
    await save_chain(storage, 5)
    operations: dict[str, Callable[[], Awaitable[Any]]] = {
        "list_checkpoints": lambda: storage.list_checkpoints(workflow_name=WORKFLOW),
        "list_checkpoint_ids": lambda: storage.list_checkpoint_ids(workflow_name=WORKFLOW),
        "list_checkpoint_page": lambda: storage.list_checkpoint_page(workflow_name=WORKFLOW),
    }

    await _cancel_inside(proxy, "find_fetch", operations[which]())


async def test_clear_run_cancelled_between_deletes_is_retry_safe(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    await save_chain(storage, 3)

    await _cancel_inside(proxy, "delete_one", storage.clear_run())

    assert await raw_checkpoints(collection) == []
    result = await storage.clear_run()
    assert result.counter_deleted == 1


@pytest.mark.usefixtures("unchunked")
async def test_document_of_exactly_the_limit_is_stored_and_one_byte_more_is_refused(
    collection: InMemoryCollection,
) -> None:
    import bson

    storage = make_storage(collection)
    probe = 15 * 1024 * 1024
    await storage.save(make_checkpoint("cp-probe", state={"blob": b"\x03" * probe}))
    (stored,) = await raw_checkpoints(collection)
    # The stored document's size grows byte for byte with the blob (same pickle opcodes).
    exact = probe + MAX_DOCUMENT_BYTES - len(bson.encode(stored))
    await collection.delete_many({})

    await storage.save(make_checkpoint("cp-probe", state={"blob": b"\x03" * exact}))
    (stored,) = await raw_checkpoints(collection)
    assert len(bson.encode(stored)) == MAX_DOCUMENT_BYTES
    # Same id length as the probe: the id is stored twice (field and payload).
    with pytest.raises(MongoDBSerializationError, match=f"{MAX_DOCUMENT_BYTES + 1:,} bytes"):
        await storage.save(make_checkpoint("cp-extra", state={"blob": b"\x03" * (exact + 1)}))
    assert [d["checkpoint_id"] for d in await raw_checkpoints(collection)] == ["cp-probe"]


@pytest.mark.usefixtures("unchunked")
@pytest.mark.parametrize("excess", [1, 16 * 1024], ids=["server-refuses-17420", "pymongo-refuses"])
async def test_an_oversized_checkpoint_that_slipped_past_the_own_check_is_a_serialization_error(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch, excess: int
) -> None:
    # The checkpoint is inserted by an upsert: a server refuses a document over 16 MiB with 17420
    # ("Document to upsert is larger than"), and pymongo refuses a findAndModify past 16 MiB +
    # 16,382 bytes itself. Both must read as the checkpoint's problem, not a write failure.
    import bson

    from agent_framework_mongodb.checkpoints import documents

    storage = make_storage(collection)
    await storage.save(make_checkpoint("cp-probe", state={"blob": b"\x03" * 1024}))
    (stored,) = await raw_checkpoints(collection)
    blob = 1024 + MAX_DOCUMENT_BYTES + excess - len(bson.encode(stored))
    monkeypatch.setattr(documents, "MAX_DOCUMENT_BYTES", 2 * MAX_DOCUMENT_BYTES)

    with pytest.raises(MongoDBSerializationError) as raised:
        await storage.save(make_checkpoint("cp-prob2", state={"blob": b"\x03" * blob}))
    cause = raised.value.__cause__
    if excess == 1:
        assert isinstance(cause, OperationFailure)
        assert cause.code == 17420
    else:
        assert isinstance(cause, DocumentTooLarge)
    assert [d["checkpoint_id"] for d in await raw_checkpoints(collection)] == ["cp-probe"]


async def test_unsupported_checkpoint_version_fails_before_io(
    proxy: ProxyCollection, proxied_storage: MongoDBCheckpointStorage
) -> None:
    checkpoint = make_checkpoint("cp-v2")
    checkpoint.version = "2.0"

    with pytest.raises(MongoDBIntegrationError):
        await proxied_storage.save(checkpoint)
    assert proxy.round_trips == 0


@pytest.mark.parametrize("session_id", ["", " s", "s ", "s\x00", 5])
def test_for_session_with_an_invalid_session_is_refused(
    proxied_storage: MongoDBCheckpointStorage, session_id: object
) -> None:
    with pytest.raises(MongoDBConfigurationError):
        proxied_storage.for_session(session_id)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (DocumentTooLarge("BSON document too large"), MongoDBSerializationError),
        (InvalidDocument("cannot encode object"), MongoDBSerializationError),
        (InvalidBSON("bad reply"), MongoDBMappingError),
    ],
    ids=["document-too-large", "invalid-document", "invalid-bson"],
)
async def test_bson_errors_from_the_driver_are_translated(
    collection: InMemoryCollection, error: Exception, expected: type[MongoDBIntegrationError]
) -> None:
    # BSONError is not a PyMongoError: DocumentTooLarge and InvalidDocument used to escape as is.
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    proxy.fail(INSERT, error)

    with pytest.raises(MongoDBIntegrationError) as raised:
        await storage.save(make_checkpoint("cp-bson"))

    assert type(raised.value) is expected
    assert raised.value.__cause__ is error
    assert raised.value.retryable is False
