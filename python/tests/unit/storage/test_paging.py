"""Pages: limits, next cursors, walking a run, and cursors that fail closed."""

from __future__ import annotations

import pytest

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBConfigurationError
from agent_framework_mongodb.checkpoints.paging import PagePosition, encode_cursor
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import WORKFLOW, ProxyCollection, make_storage, save_chain, scope_of


async def walk(storage: MongoDBCheckpointStorage, limit: int | None) -> tuple[list[str], int]:
    seen: list[str] = []
    pages = 0
    cursor: str | None = None
    while True:
        page = await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=cursor, limit=limit)
        pages += 1
        assert len(page.checkpoints) <= (limit or storage.options.page_size)
        seen.extend(c.checkpoint_id for c in page.checkpoints)
        if page.next_cursor is None:
            return seen, pages
        cursor = page.next_cursor


async def test_default_limit_is_the_page_size(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, page_size=4, max_page_size=10)
    ids = await save_chain(storage, 6)

    page = await storage.list_checkpoint_page(workflow_name=WORKFLOW)

    assert [c.checkpoint_id for c in page.checkpoints] == ids[:4]
    assert page.next_cursor is not None


async def test_default_page_size_is_one_hundred(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    assert storage.options.page_size == 100
    assert storage.options.max_page_size == 1000
    await save_chain(storage, 3)
    page = await storage.list_checkpoint_page(workflow_name=WORKFLOW)
    assert len(page.checkpoints) == 3
    assert page.next_cursor is None


@pytest.mark.parametrize(("count", "limit"), [(10, 3), (9, 3), (10, 1), (10, 10), (10, 25), (0, 5)])
async def test_walking_cursors_visits_every_checkpoint_once(
    collection: InMemoryCollection, count: int, limit: int
) -> None:
    storage = make_storage(collection, page_size=5, max_page_size=25)
    ids = await save_chain(storage, count)

    seen, pages = await walk(storage, limit)

    assert seen == ids
    assert pages == count // limit + 1


async def test_page_that_is_not_full_has_no_cursor(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await save_chain(storage, 4)

    page = await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=5)

    assert len(page.checkpoints) == 4
    assert page.next_cursor is None


async def test_full_last_page_has_a_cursor_to_an_empty_page(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    await save_chain(storage, 4)

    page = await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=4)
    assert page.next_cursor is not None
    after = await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=page.next_cursor, limit=4)

    assert after.checkpoints == ()
    assert after.next_cursor is None


async def test_cursor_survives_deletions_and_sees_later_saves(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    ids = await save_chain(storage, 6)
    first = await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=2)
    assert first.next_cursor is not None
    await storage.delete(ids[1])  # the cursor's own position
    await storage.delete(ids[2])
    await save_chain(storage, 1, prefix="late")

    rest = await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=first.next_cursor, limit=10)

    assert [c.checkpoint_id for c in rest.checkpoints] == [*ids[3:], "late-000"]


async def test_cursor_is_usable_by_another_storage_of_the_same_run(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    ids = await save_chain(storage, 4)
    page = await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=2)
    assert page.next_cursor is not None

    twin = make_storage(collection)
    rest = await twin.list_checkpoint_page(workflow_name=WORKFLOW, cursor=page.next_cursor, limit=2)

    assert [c.checkpoint_id for c in rest.checkpoints] == ids[2:]


@pytest.mark.parametrize("limit", [0, -1, 11, True, False, 2.0, "5", [3]])
async def test_invalid_limits_are_configuration_errors(collection: InMemoryCollection, limit: object) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy, page_size=5, max_page_size=10)

    with pytest.raises(MongoDBConfigurationError):
        await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=limit)  # type: ignore[arg-type]

    assert proxy.round_trips == 0


async def test_limit_at_the_bounds_is_accepted(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, page_size=5, max_page_size=10)
    await save_chain(storage, 12)

    assert len((await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=1)).checkpoints) == 1
    assert len((await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=10)).checkpoints) == 10


async def _issued_cursor(storage: MongoDBCheckpointStorage) -> str:
    await save_chain(storage, 5)
    page = await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=2)
    assert page.next_cursor is not None
    return page.next_cursor


async def test_cursor_from_another_session_is_rejected(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    other = storage.for_session("session-other")
    await save_chain(other, 5)
    foreign = await other.list_checkpoint_page(workflow_name=WORKFLOW, limit=2)
    assert foreign.next_cursor is not None
    await save_chain(storage, 5)

    with pytest.raises(MongoDBConfigurationError):
        await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=foreign.next_cursor)


@pytest.mark.parametrize("other", [{"tenant_id": "tenant-x"}, {"application_id": None}])
async def test_cursor_from_another_tenant_or_application_is_rejected(
    collection: InMemoryCollection, other: dict[str, object]
) -> None:
    foreign_storage = make_storage(collection, **other)
    cursor = await _issued_cursor(foreign_storage)
    storage = make_storage(collection)

    with pytest.raises(MongoDBConfigurationError):
        await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=cursor)


async def test_every_single_character_change_is_rejected(collection: InMemoryCollection) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    cursor = await _issued_cursor(storage)
    proxy.reset()

    for index, original in enumerate(cursor):
        for replacement in {"A", "0", "z", "-", "_", "."} - {original}:
            tampered = cursor[:index] + replacement + cursor[index + 1 :]
            with pytest.raises(MongoDBConfigurationError):
                await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=tampered)
    assert proxy.round_trips == 0


@pytest.mark.parametrize("part", ["version", "body", "tag"])
async def test_non_ascii_character_in_a_cursor_is_rejected(collection: InMemoryCollection, part: str) -> None:
    storage = make_storage(collection)
    cursor = await _issued_cursor(storage)
    pieces = dict(zip(("version", "body", "tag"), cursor.split("."), strict=True))
    pieces[part] = pieces[part][:-1] + "\u00e9"
    tampered = ".".join(pieces.values())

    with pytest.raises(MongoDBConfigurationError):
        await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=tampered)


async def test_truncated_or_extended_cursors_are_rejected(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    cursor = await _issued_cursor(storage)

    for tampered in (cursor[:-1], cursor[1:], cursor + "0", cursor + ".", "." + cursor, cursor.upper()):
        with pytest.raises(MongoDBConfigurationError):
            await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=tampered)


async def test_unknown_cursor_version_is_rejected(collection: InMemoryCollection) -> None:
    storage = make_storage(collection)
    cursor = await _issued_cursor(storage)
    _, body, tag = cursor.split(".")

    for version in ("v2", "v0", "V1", "", "v1x"):
        with pytest.raises(MongoDBConfigurationError):
            await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=f"{version}.{body}.{tag}")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "garbage",
        "v1",
        "v1..",
        "v1.e30.0000",
        "....",
        "v1.%%%.abc",
        "\x00",
        "x" * 5000,
        42,
        b"v1.abc.def",
        1.5,
    ],
)
async def test_garbage_cursors_are_rejected(collection: InMemoryCollection, cursor: object) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    await save_chain(storage, 2)
    proxy.reset()

    with pytest.raises(MongoDBConfigurationError):
        await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=cursor)  # type: ignore[arg-type]
    assert proxy.round_trips == 0


async def test_cursor_with_an_out_of_range_position_fails_closed(collection: InMemoryCollection) -> None:
    # The tag is not a secret: whoever can compute it can name any position. A position BSON
    # cannot hold must still fail closed as an invalid cursor, not as a raw OverflowError.
    storage = make_storage(collection)
    await save_chain(storage, 2)
    forged = encode_cursor(scope_of(storage), PagePosition(2**70, "cp-000"))

    with pytest.raises(MongoDBConfigurationError):
        await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=forged)
