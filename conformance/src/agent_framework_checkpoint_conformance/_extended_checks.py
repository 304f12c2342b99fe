"""Checks of what the author claims (instances sharing a run, concurrent writers) and of optional
capabilities, which are detected on the storage rather than assumed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import cast

from agent_framework import CheckpointStorage

from ._protocol_checks import make_checkpoint
from ._registry import CheckContext, CheckFailedError, CheckSkippedError, NotOfferedError, check

__all__: list[str] = []

_WRITES_EACH = 10


@check(
    "instances.shared_run",
    "concurrency",
    "A second storage from the factory for the same run sees, and can delete, what the first saved.",
)
async def shared_run(context: CheckContext) -> str | None:
    if not context.capabilities.shared_between_instances:
        raise CheckSkippedError("not claimed (Capabilities.shared_between_instances)")
    first, second = await context.storage(), await context.storage()
    checkpoints = [make_checkpoint(context, index) for index in range(3)]
    for checkpoint in checkpoints:
        await first.save(checkpoint)
    ids = [c.checkpoint_id for c in checkpoints]
    seen = await second.list_checkpoint_ids(workflow_name=context.workflow_name)
    if sorted(seen) != sorted(ids):  # the order is list.save_order's to check
        raise CheckFailedError(f"the second storage lists {seen}, the first saved {ids}")
    latest = await second.get_latest(workflow_name=context.workflow_name)
    if latest is None or latest.checkpoint_id != ids[-1]:
        raise CheckFailedError("the second storage's get_latest is not the first's newest save")
    await second.delete(ids[0])
    if sorted(after := await first.list_checkpoint_ids(workflow_name=context.workflow_name)) != sorted(
        ids[1:]
    ):
        raise CheckFailedError(f"after the second storage deleted {ids[0]!r}, the first lists {after}")
    return None


@check(
    "concurrency.two_writers",
    "concurrency",
    "Two storages saving to one run at once lose nothing and agree on the listing and the latest.",
)
async def two_writers(context: CheckContext) -> str | None:
    if not context.capabilities.concurrent_writers:
        raise CheckSkippedError("not claimed (Capabilities.concurrent_writers)")
    writers = [await context.storage(), await context.storage()]

    async def write(writer: CheckpointStorage, offset: int) -> None:
        for index in range(offset, offset + 2 * _WRITES_EACH, 2):
            await writer.save(make_checkpoint(context, index))

    await asyncio.gather(*(write(writer, offset) for offset, writer in enumerate(writers)))
    expected = sorted(make_checkpoint(context, index).checkpoint_id for index in range(2 * _WRITES_EACH))
    listings = [await writer.list_checkpoint_ids(workflow_name=context.workflow_name) for writer in writers]
    for number, listing in enumerate(listings, start=1):
        if sorted(listing) != expected:
            lost = sorted(set(expected) - set(listing))
            raise CheckFailedError(
                f"storage {number} lists {len(listing)} of {len(expected)} saves; lost {lost}"
            )
    if listings[0] != listings[1]:
        raise CheckFailedError("the two storages list the run's checkpoints in different orders")
    latest = [await writer.get_latest(workflow_name=context.workflow_name) for writer in writers]
    ids = [None if one is None else one.checkpoint_id for one in latest]
    if ids[0] != ids[1]:
        raise CheckFailedError(f"the two storages disagree on the latest: {ids[0]!r} and {ids[1]!r}")
    return f"{len(expected)} concurrent saves from two storages, none lost"


def _method(storage: CheckpointStorage, name: str) -> Callable[..., Awaitable[object]]:
    method: object = getattr(storage, name, None)
    if not callable(method):
        raise NotOfferedError(f"no {name}() method")
    return cast("Callable[..., Awaitable[object]]", method)


def _setting(storage: CheckpointStorage, name: str) -> tuple[bool, object]:
    """Whether the storage, or its ``options``, has the setting ``name``, and its value."""
    for holder in (storage, getattr(storage, "options", None)):
        if holder is not None and hasattr(holder, name):
            return True, getattr(holder, name)
    return False, None


async def _page_ids(list_page: Callable[..., Awaitable[object]], workflow_name: str) -> list[str]:
    ids: list[str] = []
    cursor: object = None
    for _ in range(100):
        page = await list_page(workflow_name=workflow_name, cursor=cursor, limit=2)
        checkpoints: object = getattr(page, "checkpoints", None)
        if not isinstance(checkpoints, Iterable):
            raise CheckFailedError(f"a page has no checkpoints sequence: {page!r}")
        ids.extend(
            str(getattr(item, "checkpoint_id", item)) for item in cast("Iterable[object]", checkpoints)
        )
        cursor = getattr(page, "next_cursor", None)
        if cursor is None:
            return ids
    raise CheckFailedError("paging did not end after 100 pages of two")


@check(
    "optional.pages",
    "optional",
    "list_checkpoint_page(workflow_name=, cursor=, limit=) pages through the listing in its order.",
)
async def pages(context: CheckContext) -> str | None:
    storage = await context.storage()
    list_page = _method(storage, "list_checkpoint_page")
    for index in range(5):
        await storage.save(make_checkpoint(context, index))
    paged = await _page_ids(list_page, context.workflow_name)
    listed = await storage.list_checkpoint_ids(workflow_name=context.workflow_name)
    if paged != listed:
        raise CheckFailedError(f"pages of two gave {paged}, list_checkpoint_ids {listed}")
    return "offered: list_checkpoint_page, pages of 2 give the listing"


@check("optional.run_listing", "optional", "list_runs() lists a run once it has a checkpoint.")
async def run_listing(context: CheckContext) -> str | None:
    storage = await context.storage()
    list_runs = _method(storage, "list_runs")
    await storage.save(make_checkpoint(context, 0))
    answer = await list_runs()
    runs: object = getattr(answer, "runs", answer)
    if not isinstance(runs, Iterable):
        raise CheckFailedError(f"list_runs returned {answer!r}, neither runs nor a page of them")
    listed = list(cast("Iterable[object]", runs))
    if not any(context.run_id in repr(run) for run in listed):
        raise CheckFailedError(f"the run {context.run_id!r} is not among the {len(listed)} runs listed")
    return "offered: list_runs lists the run"


@check("optional.clearing", "optional", "clear_run() removes every checkpoint of the run.")
async def clearing(context: CheckContext) -> str | None:
    storage = await context.storage()
    clear_run = _method(storage, "clear_run")
    for index in range(3):
        await storage.save(make_checkpoint(context, index))
    await clear_run()
    left = await storage.list_checkpoint_ids(workflow_name=context.workflow_name)
    latest = await storage.get_latest(workflow_name=context.workflow_name)
    if left or latest is not None:
        raise CheckFailedError(f"after clear_run, {left} are listed and get_latest is {latest!r}")
    return "offered: clear_run empties the run"


@check(
    "optional.ttl",
    "optional",
    "A ttl setting (on the storage or its options) is None or a positive timedelta.",
)
async def ttl(context: CheckContext) -> str | None:
    storage = await context.storage()
    found, value = _setting(storage, "ttl")
    if not found:
        raise NotOfferedError("no ttl setting on the storage or its options")
    if value is not None and not (isinstance(value, timedelta) and value > timedelta(0)):
        raise CheckFailedError(f"ttl is {value!r}, neither None nor a positive timedelta")
    # Expiry runs on the backend's clock (a TTL monitor, a sweeper), which a suite cannot advance.
    return f"offered: ttl={value!r} as configured by the factory (expiry itself is not exercised)"


@check("optional.signing", "optional", "A signing_keys setting (on the storage or its options) is detected.")
async def signing(context: CheckContext) -> str | None:
    storage = await context.storage()
    found, value = _setting(storage, "signing_keys")
    if not found:
        raise NotOfferedError("no signing_keys setting on the storage or its options")
    count = len(list(cast("Iterable[object]", value))) if isinstance(value, Iterable) else 0
    # Verifying a signature needs write access behind the storage to forge a payload.
    return f"offered: {count} signing key(s) configured by the factory (verification is not exercised)"
