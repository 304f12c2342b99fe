"""Scope: every read, write and delete is bound to the storage's run and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorage,
    MongoDBConfigurationError,
)
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    SCOPE_FIELDS,
    WORKFLOW,
    ProxyCollection,
    make_checkpoint,
    make_storage,
    raw_all,
    raw_checkpoints,
    scope_of,
)

OTHER_SCOPES: list[dict[str, Any]] = [
    {"tenant_id": "tenant-beta"},
    {"application_id": "app-other"},
    {"application_id": None},
    {"session_id": "session-002"},
    {"workflow_name": "other-flow"},
]
SCOPE_IDS = ["tenant", "application", "no-application", "session", "workflow"]


@pytest.mark.parametrize("other_scope", OTHER_SCOPES, ids=SCOPE_IDS)
async def test_another_runs_checkpoint_is_invisible_and_undeletable(
    collection: InMemoryCollection, other_scope: dict[str, Any]
) -> None:
    mine = make_storage(collection)
    theirs = make_storage(collection, **other_scope)
    their_workflow = theirs.options.workflow_name
    # The same checkpoint id in both runs: ids alone must never select a document.
    await theirs.save(make_checkpoint("cp-shared", workflow_name=their_workflow, state={"owner": "them"}))
    await theirs.save(make_checkpoint("cp-theirs-only", workflow_name=their_workflow))

    with pytest.raises(MongoDBCheckpointNotFoundError):
        await mine.load("cp-shared")
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await mine.load("cp-theirs-only")
    assert await mine.list_checkpoints(workflow_name=WORKFLOW) == []
    assert await mine.list_checkpoint_ids(workflow_name=WORKFLOW) == []
    assert await mine.get_latest(workflow_name=WORKFLOW) is None
    page = await mine.list_checkpoint_page(workflow_name=WORKFLOW)
    assert page.checkpoints == ()
    assert page.next_cursor is None
    assert await mine.delete("cp-shared") is False
    assert await mine.delete("cp-theirs-only") is False
    cleared = await mine.clear_run()
    assert cleared.checkpoints_deleted == 0

    assert len(await raw_checkpoints(collection)) == 2
    assert (await theirs.load("cp-shared")).state == {"owner": "them"}


@pytest.mark.parametrize("other_scope", OTHER_SCOPES, ids=SCOPE_IDS)
async def test_same_id_in_two_runs_are_two_documents(
    collection: InMemoryCollection, other_scope: dict[str, Any]
) -> None:
    mine = make_storage(collection)
    theirs = make_storage(collection, **other_scope)
    await mine.save(make_checkpoint("cp-same", state={"owner": "me"}))
    await theirs.save(
        make_checkpoint("cp-same", workflow_name=theirs.options.workflow_name, state={"owner": "them"})
    )

    assert (await mine.load("cp-same")).state == {"owner": "me"}
    assert (await theirs.load("cp-same")).state == {"owner": "them"}
    assert await mine.delete("cp-same") is True
    assert (await theirs.load("cp-same")).state == {"owner": "them"}


async def test_every_document_carries_the_discriminator_and_raw_scope_fields(
    collection: InMemoryCollection,
) -> None:
    storages = [make_storage(collection), make_storage(collection, session_id="s-2", application_id=None)]
    for storage in storages:
        await storage.save(make_checkpoint(ttl_free_id := f"cp-{storage.options.session_id}"))
        await storage.save(make_checkpoint(f"{ttl_free_id}-b", previous=ttl_free_id))

    documents = await raw_all(collection)
    assert len(documents) == 6  # four checkpoints, two counters
    for document in documents:
        for field in SCOPE_FIELDS:
            assert field in document, (field, document["_kind"])
    for storage in storages:
        scope = scope_of(storage)
        own = [d for d in documents if d["session_id"] == storage.options.session_id]
        assert len(own) == 3
        for document in own:
            assert document["scope_discriminator"] == scope.discriminator
            assert document["tenant_id"] == scope.tenant_id
            assert document["application_id"] == scope.application_id
            assert document["workflow_name"] == scope.workflow_name


async def test_every_filter_states_the_complete_scope(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    scope = scope_of(storage)
    await storage.save(make_checkpoint("cp-1"))
    await storage.save(make_checkpoint("cp-1"))  # idempotent retry: the compare read
    await storage.save(make_checkpoint("cp-2"))
    await storage.load("cp-1")
    await storage.get_latest(workflow_name=WORKFLOW)
    await storage.list_checkpoints(workflow_name=WORKFLOW)
    await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
    page = await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=1)
    assert page.next_cursor is not None
    await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=page.next_cursor, limit=1)
    await storage.delete("cp-2")
    await storage.clear_run()

    filtered = [
        call for call in proxy.calls if call.name not in ("insert_one", "create_indexes", "list_indexes")
    ]
    assert {call.name for call in filtered} >= {
        "find_one",
        "find",
        "find_one_and_update",
        "delete_one",
        "delete_many",
    }
    for call in filtered:
        query = call.args[0] if call.args else call.kwargs.get("filter")
        assert isinstance(query, dict), call
        assert query.get("scope_discriminator") == scope.discriminator, call
        for field, value in scope.fields().items():
            assert field in query, (call.name, field)
            assert query[field] == value, (call.name, field)
    for call in proxy.named("insert_one"):
        document = call.args[0]
        for field, value in scope.fields().items():
            assert document[field] == value


@pytest.mark.parametrize("wrong", ["other-flow", "approval-flow ", "APPROVAL-FLOW", ""])
async def test_workflow_name_argument_must_be_the_bound_one(
    collection: InMemoryCollection, wrong: str
) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)

    with pytest.raises(MongoDBConfigurationError):
        await storage.list_checkpoints(workflow_name=wrong)
    with pytest.raises(MongoDBConfigurationError):
        await storage.list_checkpoint_ids(workflow_name=wrong)
    with pytest.raises(MongoDBConfigurationError):
        await storage.get_latest(workflow_name=wrong)
    with pytest.raises(MongoDBConfigurationError):
        await storage.list_checkpoint_page(workflow_name=wrong)
    assert proxy.round_trips == 0


async def test_saving_another_workflows_checkpoint_writes_nothing(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await storage.save(make_checkpoint("cp-existing"))
    before = await raw_all(collection)

    with pytest.raises(MongoDBConfigurationError):
        await storage.save(make_checkpoint("cp-foreign", workflow_name="other-flow"))

    after = await raw_all(collection)
    assert after == before  # neither a checkpoint nor a counter change


async def test_saving_another_workflows_checkpoint_into_a_new_run_creates_no_counter(
    collection: InMemoryCollection,
) -> None:
    storage = make_storage(collection)

    with pytest.raises(MongoDBConfigurationError):
        await storage.save(make_checkpoint("cp-foreign", workflow_name="other-flow"))

    assert await raw_all(collection) == []


async def test_for_session_is_a_separate_run_on_the_same_collection(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage
) -> None:
    sibling = storage.for_session("session-sibling")
    await storage.save(make_checkpoint("cp-mine"))
    await sibling.save(make_checkpoint("cp-sibling"))

    assert sibling.options.session_id == "session-sibling"
    assert sibling.options.tenant_id == storage.options.tenant_id
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-mine"]
    assert await sibling.list_checkpoint_ids(workflow_name=WORKFLOW) == ["cp-sibling"]
    assert len(await raw_checkpoints(collection)) == 2
