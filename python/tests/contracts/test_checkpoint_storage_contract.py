"""Replay of the language-neutral storage contract (fixtures/checkpoint_storage_contract.json).

The fixture is hand-written from the persistence specification; this test checks each entry
against the Python implementation on the in-process engine (``InMemoryMongoClient``): index
definitions against both ``CHECKPOINT_INDEXES`` and what ``ensure_indexes`` creates, and every
scenario through real storages. A .NET implementation replays the same file against its own.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageOptions,
    MongoDBIntegrationError,
    errors,
)
from agent_framework_mongodb.checkpoints import options as options_module
from agent_framework_mongodb.checkpoints.chunk_store import PERMANENT_EXPIRY
from agent_framework_mongodb.checkpoints.codec import (
    CHUNKED_PAYLOAD_FORMAT,
    DEFAULT_MAX_CHECKPOINT_BYTES,
    PAYLOAD_FORMAT,
)
from agent_framework_mongodb.checkpoints.codec.chunks import DEFAULT_SPLIT_ABOVE
from agent_framework_mongodb.checkpoints.indexes import CHECKPOINT_INDEXES, SCOPE_PREFIX
from agent_framework_mongodb.checkpoints.queries import counter_filter, run_filter
from agent_framework_mongodb.checkpoints.scope import CHECKPOINT_KIND, CHUNK_KIND, COUNTER_KIND, RunScope
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

FIXTURE = Path(__file__).parent / "fixtures" / "checkpoint_storage_contract.json"
CONTRACT: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
SUPPORTED_VERSION = 1

TENANT = "contract-tenant"
WORKFLOW = "contract-workflow"
SESSION = "contract-run"

StorageFactory = Callable[..., MongoDBCheckpointStorage]


def cases(section: str, key: str, id_field: str | None = "name") -> pytest.MarkDecorator:
    """The entries of ``CONTRACT[section][key]`` as pytest parameters, with readable ids."""
    entries: list[dict[str, Any]] = CONTRACT[section][key]
    ids = [
        str(entry[id_field]) if id_field and id_field in entry else f"{key}-{index}"
        for index, entry in enumerate(entries)
    ]
    return pytest.mark.parametrize("case", entries, ids=ids)


def category_of(error: BaseException) -> str:
    assert isinstance(error, MongoDBIntegrationError), f"{type(error).__name__} is not a package error"
    return type(error).category


def ttl_of(seconds: int | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def checkpoint(
    checkpoint_id: str,
    *,
    state: dict[str, Any] | None = None,
    previous: str | None = None,
    timestamp: str = "2025-01-01T00:00:00+00:00",
    iteration: int = 0,
    workflow_name: str = WORKFLOW,
) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=workflow_name,
        graph_signature_hash="contract-graph",
        checkpoint_id=checkpoint_id,
        previous_checkpoint_id=previous,
        timestamp=timestamp,
        state={} if state is None else state,
        iteration_count=iteration,
    )


@pytest.fixture
def collection() -> InMemoryCollection:
    return InMemoryMongoClient()["contract"]["checkpoints"]


@pytest.fixture
def make_storage(collection: InMemoryCollection) -> StorageFactory:
    def make(**overrides: Any) -> MongoDBCheckpointStorage:
        fields: dict[str, Any] = {"tenant_id": TENANT, "workflow_name": WORKFLOW, "session_id": SESSION}
        options = MongoDBCheckpointStorageOptions(**{**fields, **overrides})
        return MongoDBCheckpointStorage(collection, options=options)

    return make


def scope_of(storage: MongoDBCheckpointStorage) -> RunScope:
    return RunScope.from_options(storage.options)


async def stored(collection: InMemoryCollection, storage: MongoDBCheckpointStorage) -> list[dict[str, Any]]:
    """The run's checkpoint documents, in sequence order."""
    cursor = collection.find(run_filter(scope_of(storage)), sort=[("sequence", 1)])
    return await cursor.to_list(None)


async def counter_of(collection: InMemoryCollection, storage: MongoDBCheckpointStorage) -> dict[str, Any]:
    document = await collection.find_one(counter_filter(scope_of(storage)))
    assert document is not None
    return document


# -- the fixture itself -------------------------------------------------------------------------


def test_contract_version_and_sections() -> None:
    assert CONTRACT["version"] == SUPPORTED_VERSION
    assert {"indexes", "ordering", "pagination", "idempotency", "retention", "errors"} <= CONTRACT.keys()
    assert CONTRACT["document_kinds"] == {
        "checkpoint": CHECKPOINT_KIND,
        "counter": COUNTER_KIND,
        "chunk": CHUNK_KIND,
    }
    assert tuple(CONTRACT["scope_prefix"]) == SCOPE_PREFIX


# -- indexes -----------------------------------------------------------------------------------

DEFINITIONS: list[dict[str, Any]] = CONTRACT["indexes"]["definitions"]


def test_the_contract_names_exactly_the_required_indexes() -> None:
    assert [d["name"] for d in DEFINITIONS] == [spec.name for spec in CHECKPOINT_INDEXES]


@pytest.mark.parametrize("definition", DEFINITIONS, ids=[d["name"] for d in DEFINITIONS])
def test_index_definition_matches_the_model_sent(definition: dict[str, Any]) -> None:
    (spec,) = [spec for spec in CHECKPOINT_INDEXES if spec.name == definition["name"]]
    document = spec.model().document

    assert [list(item) for item in document["key"].items()] == definition["keys"]
    assert document["name"] == definition["name"]
    assert document.get("unique", False) is definition["unique"]
    assert document["partialFilterExpression"] == definition["partialFilterExpression"]
    assert document.get("expireAfterSeconds") == definition["expireAfterSeconds"]
    assert document["collation"] == definition["collation"]


async def test_ensure_indexes_creates_exactly_the_contract_indexes(
    collection: InMemoryCollection, make_storage: StorageFactory
) -> None:
    storage = make_storage()

    names = await storage.ensure_indexes()

    assert sorted(names) == sorted(d["name"] for d in DEFINITIONS)
    listed = {str(i["name"]): i for i in await (await collection.list_indexes()).to_list(None)}
    assert set(listed) == {"_id_", *(d["name"] for d in DEFINITIONS)}
    for definition in DEFINITIONS:
        index = listed[definition["name"]]
        assert [list(item) for item in index["key"].items()] == definition["keys"]
        assert bool(index.get("unique", False)) is definition["unique"]
        assert dict(index["partialFilterExpression"]) == definition["partialFilterExpression"]
        assert index.get("expireAfterSeconds") == definition["expireAfterSeconds"]
        # The server omits a simple collation from the listing; both spellings are the same index.
        assert index.get("collation", definition["collation"])["locale"] == definition["collation"]["locale"]
    await storage.validate_indexes()


# -- chunked payloads ----------------------------------------------------------------------------

CHUNKED: dict[str, Any] = CONTRACT["chunked_payloads"]


def test_chunked_payload_constants_are_the_contracts() -> None:
    assert CHUNKED["payload_formats"] == [PAYLOAD_FORMAT, CHUNKED_PAYLOAD_FORMAT]
    assert CHUNKED["chunk_above_bytes"] == DEFAULT_SPLIT_ABOVE
    assert CHUNKED["default_max_checkpoint_bytes"] == DEFAULT_MAX_CHECKPOINT_BYTES
    expiry = datetime.fromisoformat(CHUNKED["permanent_chunk_expiry"].replace("Z", "+00:00"))
    assert expiry == PERMANENT_EXPIRY


async def test_a_checkpoint_is_chunked_exactly_above_the_contracts_size(
    collection: InMemoryCollection, make_storage: StorageFactory
) -> None:
    storage = make_storage()
    small = checkpoint("cp-small", state={"text": "s" * 100})
    large = checkpoint("cp-large", state={"items": [f"item {n}" * 40 for n in range(200)]})
    await storage.save(small)
    await storage.save(large)

    formats = {
        d["checkpoint_id"]: (d["payload_format"], d["payload_bytes"])
        for d in await stored(collection, storage)
    }
    assert formats["cp-small"][0] == CHUNKED["payload_formats"][0]
    assert formats["cp-small"][1] <= CHUNKED["chunk_above_bytes"]
    assert formats["cp-large"][0] == CHUNKED["payload_formats"][1]
    assert formats["cp-large"][1] > CHUNKED["chunk_above_bytes"]
    chunks = await collection.find({"_kind": CONTRACT["document_kinds"]["chunk"]}).to_list(None)
    assert chunks
    assert all(sorted(chunk) == sorted(CHUNKED["chunk_document_fields"]) for chunk in chunks)
    assert (await make_storage().load("cp-large")).state == large.state
    result = await storage.clear_run()
    assert result.chunks_deleted == len(chunks)


# -- ordering ----------------------------------------------------------------------------------


@cases("ordering", "scenarios")
async def test_ordering(
    case: dict[str, Any], collection: InMemoryCollection, make_storage: StorageFactory
) -> None:
    storage = make_storage()
    for save in case["saves"]:
        await storage.save(
            checkpoint(save["checkpoint_id"], timestamp=save["timestamp"], iteration=save["iteration_count"])
        )
    for checkpoint_id in case.get("deletes", []):
        assert await storage.delete(checkpoint_id) is True

    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == case["expected_order"]
    listed = await storage.list_checkpoints(workflow_name=WORKFLOW)
    assert [c.checkpoint_id for c in listed] == case["expected_order"]
    assert [d["sequence"] for d in await stored(collection, storage)] == case["expected_sequences"]
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert (None if latest is None else latest.checkpoint_id) == case["expected_latest"]


# -- pagination --------------------------------------------------------------------------------

PAGINATION: dict[str, Any] = CONTRACT["pagination"]


def test_page_size_defaults_and_bounds() -> None:
    options = MongoDBCheckpointStorageOptions(tenant_id=TENANT, workflow_name=WORKFLOW, session_id=SESSION)

    assert options.page_size == PAGINATION["default_page_size"]
    assert options.max_page_size == PAGINATION["default_max_page_size"]
    assert PAGINATION["absolute_max_page_size"] == options_module.ABSOLUTE_MAX_PAGE_SIZE
    MongoDBCheckpointStorageOptions(
        tenant_id=TENANT,
        workflow_name=WORKFLOW,
        session_id=SESSION,
        max_page_size=PAGINATION["absolute_max_page_size"],
    )


@pytest.mark.parametrize("limit", PAGINATION["valid_limits"])
async def test_valid_limit(limit: int, make_storage: StorageFactory) -> None:
    storage = make_storage()
    await storage.save(checkpoint("only"))

    page = await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=limit)

    assert [c.checkpoint_id for c in page.checkpoints] == ["only"]
    assert (page.next_cursor is not None) is (limit == 1)


@cases("pagination", "invalid_limits", id_field="limit")
async def test_invalid_limit(case: dict[str, Any], make_storage: StorageFactory) -> None:
    with pytest.raises(MongoDBIntegrationError) as raised:
        await make_storage().list_checkpoint_page(workflow_name=WORKFLOW, limit=case["limit"])
    assert category_of(raised.value) == case["error"]


@cases("pagination", "invalid_page_bounds", id_field=None)
def test_invalid_page_bounds(case: dict[str, Any]) -> None:
    with pytest.raises(MongoDBIntegrationError) as raised:
        MongoDBCheckpointStorageOptions(
            tenant_id=TENANT,
            workflow_name=WORKFLOW,
            session_id=SESSION,
            page_size=case["page_size"],
            max_page_size=case["max_page_size"],
        )
    assert category_of(raised.value) == case["error"]


@cases("pagination", "page_scenarios", id_field=None)
async def test_page_scenario(case: dict[str, Any], make_storage: StorageFactory) -> None:
    storage = make_storage(page_size=case["page_size"])
    ids = [f"cp-{index:03d}" for index in range(case["checkpoints"])]
    for checkpoint_id in ids:
        await storage.save(checkpoint(checkpoint_id))

    lengths: list[int] = []
    cursors: list[bool] = []
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=cursor)
        lengths.append(len(page.checkpoints))
        cursors.append(page.next_cursor is not None)
        seen.extend(c.checkpoint_id for c in page.checkpoints)
        cursor = page.next_cursor
        if cursor is None:
            break

    assert lengths == case["expected_page_lengths"]
    assert cursors == case["expected_cursor_after_each"]
    assert seen == ids


def _mutate_last_character(cursor: str) -> str:
    return cursor[:-1] + ("b" if cursor[-1] != "b" else "c")


def _mutate_version_prefix(cursor: str) -> str:
    prefix, separator, rest = cursor.partition(".")
    assert separator, "the cursor has no version prefix"
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) + separator + rest


@cases("pagination", "cursor_cases", id_field="case")
async def test_cursor_case(case: dict[str, Any], make_storage: StorageFactory) -> None:
    storage = make_storage(page_size=2)
    issuers: dict[str, MongoDBCheckpointStorage] = {
        "issued_by_this_run": storage,
        "issued_by_another_storage_instance_of_this_run": make_storage(page_size=2),
        "issued_by_another_session": make_storage(page_size=2, session_id="another-run"),
        "issued_by_another_tenant": make_storage(page_size=2, tenant_id="another-tenant"),
    }
    for issuer in {id(s): s for s in issuers.values()}.values():
        for index in range(3):
            await issuer.save(checkpoint(f"cp-{index}"))
    kind = case["case"]
    if kind == "literal":
        cursor = case["cursor"]
    elif kind == "oversized":
        cursor = "a" * case["length"]
    else:
        issued = (await issuers.get(kind, storage).list_checkpoint_page(workflow_name=WORKFLOW)).next_cursor
        assert issued is not None
        mutations = {"last_character_changed": _mutate_last_character}
        mutations["version_prefix_changed"] = _mutate_version_prefix
        cursor = mutations.get(kind, lambda value: value)(issued)

    if case["outcome"] == "ok":
        page = await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=cursor)
        assert [c.checkpoint_id for c in page.checkpoints] == ["cp-2"]
        return
    with pytest.raises(MongoDBIntegrationError) as raised:
        await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=cursor)
    assert category_of(raised.value) == case["error"]


# -- idempotency -------------------------------------------------------------------------------


def _from_case(entry: dict[str, Any]) -> WorkflowCheckpoint:
    return checkpoint(
        entry["checkpoint_id"], state=entry["state"], previous=entry.get("previous_checkpoint_id")
    )


@cases("idempotency", "cases")
async def test_idempotency(
    case: dict[str, Any], collection: InMemoryCollection, make_storage: StorageFactory
) -> None:
    first_run = make_storage()
    second_run = first_run if case["same_run"] else make_storage(session_id="another-run")
    expected = case["expected"]
    first = _from_case(case["first"])

    assert await first_run.save(first) == first.checkpoint_id
    if expected["outcome"] == "same_id":
        assert await second_run.save(_from_case(case["second"])) == first.checkpoint_id
    else:
        with pytest.raises(MongoDBIntegrationError) as raised:
            await second_run.save(_from_case(case["second"]))
        assert category_of(raised.value) == expected["error"]

    documents = [d for d in await stored(collection, first_run) if d["checkpoint_id"] == first.checkpoint_id]
    assert len(documents) == expected["documents_in_run"]
    assert (await first_run.load(first.checkpoint_id)).state == expected["stored_state"]


# -- retention ---------------------------------------------------------------------------------


@cases("retention", "scenarios")
async def test_retention_scenario(
    case: dict[str, Any], collection: InMemoryCollection, make_storage: StorageFactory
) -> None:
    reader = make_storage()
    if "initial_counter" in case:
        await collection.insert_one({**counter_filter(scope_of(reader)), **case["initial_counter"]})
    for index, seconds in enumerate(case["ttl_seconds_per_save"]):
        await make_storage(ttl=ttl_of(seconds)).save(checkpoint(f"cp-{index}"))

    documents = await stored(collection, reader)
    counter = await counter_of(collection, reader)
    expected = case["expected_counter"]
    assert counter["retention_mode"] == expected["retention_mode"]
    if expected["expires_at"] == "absent":
        assert "expires_at" not in counter
    else:
        assert expected["expires_at"] == "latest_checkpoint_expiry"
        assert counter["expires_at"] == max(d["expires_at"] for d in documents)
    if "expected_sequences" in case:
        assert [d["sequence"] for d in documents] == case["expected_sequences"]


@cases("retention", "checkpoint_expiry", id_field="ttl_seconds")
async def test_checkpoint_expiry(
    case: dict[str, Any], collection: InMemoryCollection, make_storage: StorageFactory
) -> None:
    storage = make_storage(ttl=ttl_of(case["ttl_seconds"]))
    await storage.save(checkpoint("cp"))

    (document,) = await stored(collection, storage)

    assert document["created_at"].microsecond % 1000 == 0
    if case["expires_at"] == "absent":
        assert "expires_at" not in document
    else:
        assert case["expires_at"] == "created_at_plus_ttl"
        assert document["expires_at"] - document["created_at"] == ttl_of(case["ttl_seconds"])


@cases("retention", "invalid_ttls_seconds", id_field="ttl_seconds")
def test_invalid_ttl(case: dict[str, Any]) -> None:
    with pytest.raises(MongoDBIntegrationError) as raised:
        MongoDBCheckpointStorageOptions(
            tenant_id=TENANT, workflow_name=WORKFLOW, session_id=SESSION, ttl=ttl_of(case["ttl_seconds"])
        )
    assert category_of(raised.value) == case["error"]


# -- errors ------------------------------------------------------------------------------------

ERROR_CLASSES: list[dict[str, Any]] = CONTRACT["errors"]["classes"]


def test_every_package_error_is_in_the_contract() -> None:
    exported = {
        name
        for name in errors.__all__
        if inspect.isclass(getattr(errors, name)) and issubclass(getattr(errors, name), BaseException)
    }
    assert {entry["name"] for entry in ERROR_CLASSES} == exported
    assert len({entry["category"] for entry in ERROR_CLASSES}) == len(ERROR_CLASSES)
    assert CONTRACT["errors"]["framework_base"] == WorkflowCheckpointException.__name__


@cases("errors", "classes")
def test_error_class(case: dict[str, Any]) -> None:
    cls = getattr(errors, case["name"])
    parents = [base.__name__ for base in cls.__bases__ if issubclass(base, MongoDBIntegrationError)]

    assert cls.category == case["category"]
    assert parents == ([] if case["parent"] is None else [case["parent"]])
    assert issubclass(cls, WorkflowCheckpointException)


@cases("errors", "operation_cases", id_field="operation")
async def test_operation_outcome(case: dict[str, Any], make_storage: StorageFactory) -> None:
    storage = make_storage()
    other_run = make_storage(session_id="another-run")
    await other_run.save(checkpoint("theirs"))
    operations: dict[str, Callable[[], Awaitable[object]]] = {
        "load_missing_id": lambda: storage.load("missing"),
        "load_id_of_another_run": lambda: storage.load("theirs"),
        "delete_missing_id": lambda: storage.delete("missing"),
        "save_checkpoint_of_another_workflow": lambda: storage.save(
            checkpoint("cp", workflow_name="another-workflow")
        ),
        "list_another_workflow": lambda: storage.list_checkpoint_ids(workflow_name="another-workflow"),
        "validate_indexes_before_ensure": storage.validate_indexes,
    }
    operation = operations[case["operation"]]

    if case["outcome"] == "error":
        with pytest.raises(MongoDBIntegrationError) as raised:
            await operation()
        assert category_of(raised.value) == case["error"]
    else:
        assert json.dumps(await operation()) == case["outcome"]
