"""Completion logs: one record per public operation, carrying no identifying data."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pymongo.errors import AutoReconnect, OperationFailure

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBMappingError, MongoDBSerializationError
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import APPLICATION, SESSION, TENANT, WORKFLOW, make_checkpoint, make_storage, save_chain

LOGGER = "agent_framework_mongodb"
MARKER = "MARKER-marker-9c1e"
CHECKPOINT_ID = "cp-log-0xdeadbeef"
PAYLOAD_TEXT = "payload-content-visible-77"
DATABASE = "logdb_private"
COLLECTION = "logcoll_private"
ATTRIBUTES = ("feature", "operation", "outcome", "result_count", "duration_ms", "error_category")
FORBIDDEN = (
    CHECKPOINT_ID,
    TENANT,
    SESSION,
    WORKFLOW,
    APPLICATION,
    DATABASE,
    COLLECTION,
    PAYLOAD_TEXT,
    MARKER,
)

Operation = Callable[[MongoDBCheckpointStorage], Awaitable[Any]]

OPERATIONS: dict[str, tuple[Operation, str, str]] = {
    # name: (call, engine operation to fail, logged operation name)
    "save": (
        lambda s: s.save(make_checkpoint(CHECKPOINT_ID, state={"t": PAYLOAD_TEXT})),
        "find_one_and_update",
        "save",
    ),
    "load": (lambda s: s.load(CHECKPOINT_ID + "-000"), "find_one", "load"),
    "list_checkpoints": (lambda s: s.list_checkpoints(workflow_name=WORKFLOW), "find", "list_checkpoints"),
    "list_checkpoint_ids": (
        lambda s: s.list_checkpoint_ids(workflow_name=WORKFLOW),
        "find",
        "list_checkpoint_ids",
    ),
    "list_checkpoint_page": (
        lambda s: s.list_checkpoint_page(workflow_name=WORKFLOW, limit=1),
        "find",
        "list_checkpoint_page",
    ),
    "get_latest": (lambda s: s.get_latest(workflow_name=WORKFLOW), "find_one", "get_latest"),
    "delete": (lambda s: s.delete(CHECKPOINT_ID + "-001"), "delete_one", "delete"),
    "clear_run": (lambda s: s.clear_run(), "delete_many", "clear_run"),
    "ensure_indexes": (lambda s: s.ensure_indexes(), "create_indexes", "ensure_indexes"),
    "validate_indexes": (lambda s: s.validate_indexes(), "list_indexes", "validate_indexes"),
}


@pytest.fixture
def private_collection(collection: InMemoryCollection) -> InMemoryCollection:
    return collection.database.client[DATABASE][COLLECTION]


async def _storage(collection: InMemoryCollection) -> MongoDBCheckpointStorage:
    storage = make_storage(collection)
    await storage.ensure_indexes()
    await save_chain(storage, 2, prefix=CHECKPOINT_ID)
    return storage


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER]


def _assert_clean(record: logging.LogRecord) -> None:
    for attribute in ATTRIBUTES:
        assert hasattr(record, attribute), attribute
    text = record.getMessage() + " " + " ".join(repr(value) for value in vars(record).values())
    for forbidden in FORBIDDEN:
        assert forbidden not in text, forbidden
    assert record.exc_info is None
    assert isinstance(record.__dict__["duration_ms"], float)
    assert record.__dict__["duration_ms"] >= 0


@pytest.mark.parametrize("name", list(OPERATIONS))
async def test_success_logs_exactly_one_clean_record(
    private_collection: InMemoryCollection, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    storage = await _storage(private_collection)
    call, _, logged = OPERATIONS[name]
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    await call(storage)

    (record,) = _records(caplog)
    _assert_clean(record)
    assert record.__dict__["feature"] == "checkpoint_storage"
    assert record.__dict__["operation"] == logged
    assert record.__dict__["outcome"] == "success"
    assert record.__dict__["error_category"] is None
    assert isinstance(record.__dict__["result_count"], int)


async def test_result_counts(
    private_collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    storage = await _storage(private_collection)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    expectations: list[tuple[Operation, int]] = [
        (lambda s: s.list_checkpoints(workflow_name=WORKFLOW), 2),
        (lambda s: s.list_checkpoint_ids(workflow_name=WORKFLOW), 2),
        (lambda s: s.load(CHECKPOINT_ID + "-000"), 1),
        (lambda s: s.delete("cp-absent"), 0),
        (lambda s: s.clear_run(), 2),
        (lambda s: s.get_latest(workflow_name=WORKFLOW), 0),
    ]
    for call, count in expectations:
        caplog.clear()
        await call(storage)
        (record,) = _records(caplog)
        assert record.__dict__["result_count"] == count


@pytest.mark.parametrize("name", list(OPERATIONS))
@pytest.mark.parametrize(
    "error",
    [
        AutoReconnect(f"connection to {MARKER} reset"),
        OperationFailure(f"not authorized on {MARKER}", 13, {"code": 13, "codeName": "Unauthorized"}),
    ],
    ids=["transient", "authorization"],
)
async def test_driver_failure_logs_exactly_one_clean_record(
    private_collection: InMemoryCollection,
    caplog: pytest.LogCaptureFixture,
    name: str,
    error: Exception,
) -> None:
    storage = await _storage(private_collection)
    call, engine_operation, logged = OPERATIONS[name]
    private_collection.fail_next(engine_operation, error)
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    with pytest.raises(Exception) as raised:  # noqa: PT011 - the category is what is checked
        await call(storage)

    (record,) = _records(caplog)
    _assert_clean(record)
    assert record.__dict__["operation"] == logged
    assert record.__dict__["outcome"] == "error"
    assert record.__dict__["error_category"] == getattr(raised.value, "category", None)
    # A failed save is ERROR: Agent Framework only warns and carries on without the checkpoint.
    assert record.levelno == (logging.ERROR if name == "save" else logging.WARNING)


async def test_not_found_and_configuration_errors_log_one_clean_record(
    private_collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    storage = await _storage(private_collection)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    failing: list[tuple[Operation, str]] = [
        (lambda s: s.load(CHECKPOINT_ID), "not_found"),
        (lambda s: s.list_checkpoints(workflow_name=f"{WORKFLOW}-{MARKER}"), "configuration"),
        (lambda s: s.list_checkpoint_page(workflow_name=WORKFLOW, cursor=f"v1.{MARKER}.00"), "configuration"),
        (lambda s: s.save(make_checkpoint(CHECKPOINT_ID, workflow_name=f"wf-{MARKER}")), "configuration"),
    ]
    for call, category in failing:
        caplog.clear()
        with pytest.raises(Exception):  # noqa: PT011, B017 - the category is what is checked
            await call(storage)
        (record,) = _records(caplog)
        _assert_clean(record)
        assert record.__dict__["outcome"] == "error"
        assert record.__dict__["error_category"] == category
        assert record.levelno == (
            logging.ERROR
            if record.__dict__["operation"] == "save"
            else logging.INFO
            if category == "not_found"
            else logging.WARNING
        )


async def test_mapping_and_conflict_errors_log_one_clean_record(
    private_collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    storage = await _storage(private_collection)
    await private_collection.update_one(
        {"checkpoint_id": CHECKPOINT_ID + "-000"}, {"$set": {"schema_version": 7}}
    )
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    caplog.clear()
    with pytest.raises(Exception):  # noqa: PT011, B017
        await storage.load(CHECKPOINT_ID + "-000")
    (record,) = _records(caplog)
    _assert_clean(record)
    assert record.__dict__["error_category"] == "mapping"

    caplog.clear()
    with pytest.raises(Exception):  # noqa: PT011, B017
        await storage.save(make_checkpoint(CHECKPOINT_ID + "-001", state={"other": PAYLOAD_TEXT}))
    (record,) = _records(caplog)
    _assert_clean(record)
    assert record.__dict__["error_category"] == "concurrency"
    assert record.levelno == logging.ERROR


async def test_a_save_refused_before_any_io_is_an_error_record(
    private_collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    storage = await _storage(private_collection)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    caplog.clear()

    with pytest.raises(MongoDBSerializationError):
        await storage.save(make_checkpoint(CHECKPOINT_ID + "-x", state={"t": object()}))

    (record,) = _records(caplog)
    _assert_clean(record)
    assert (record.levelno, record.__dict__["operation"]) == (logging.ERROR, "save")
    assert record.__dict__["error_category"] == "serialization"


async def test_cancellation_logs_one_cancelled_record(
    private_collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    from ._support import ProxyCollection

    proxy = ProxyCollection(private_collection)
    storage = make_storage(proxy)
    await save_chain(storage, 1, prefix=CHECKPOINT_ID)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    caplog.clear()
    proxy.block("find_one")
    task = asyncio.ensure_future(storage.load(CHECKPOINT_ID + "-000"))
    await asyncio.wait_for(proxy.entered["find_one"].wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    (record,) = _records(caplog)
    _assert_clean(record)
    assert record.__dict__["outcome"] == "cancelled"


class _UnlistedState:
    """A class no storage of these tests lists."""

    def __init__(self) -> None:
        self.note = PAYLOAD_TEXT


async def test_a_save_refused_for_a_class_names_the_class_and_nothing_else(
    private_collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    storage = await _storage(private_collection)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    caplog.clear()

    with pytest.raises(MongoDBSerializationError) as raised:
        await storage.save(make_checkpoint(CHECKPOINT_ID + "-x", state={"t": _UnlistedState()}))

    key = f"{__name__}:_UnlistedState"
    assert raised.value.class_names == (key,)
    (record,) = _records(caplog)
    _assert_clean(record)
    assert record.levelno == logging.ERROR
    assert record.__dict__["class_names"] == (key,)
    assert f"classes={key}" in record.getMessage()


async def test_a_load_refused_for_classes_names_them_in_its_record(
    private_collection: InMemoryCollection, caplog: pytest.LogCaptureFixture
) -> None:
    key = f"{__name__}:_UnlistedState"
    writer = make_storage(private_collection, allowed_checkpoint_types=(key,))
    await writer.ensure_indexes()
    await writer.save(make_checkpoint(CHECKPOINT_ID + "-x", state={"t": _UnlistedState()}))
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    caplog.clear()

    with pytest.raises(MongoDBMappingError) as raised:
        await make_storage(private_collection).load(CHECKPOINT_ID + "-x")

    assert raised.value.class_names == (key,)
    (record,) = _records(caplog)
    _assert_clean(record)
    assert record.__dict__["class_names"] == (key,)
