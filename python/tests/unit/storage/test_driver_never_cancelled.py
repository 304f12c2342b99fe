"""Nothing the storage does cancels a request inside the driver (docs/adr/0030).

pymongo's async client must not be cancelled mid-request: on Python 3.10 and 3.11 a cancellation
that meets its topology wait at the wrong moment leaves the client's lock orphaned, and every later
call and ``close()`` waits for ever (issue 28). These tests park requests in the proxy and check
that whatever fails around them, and whoever cancels the operation, the request itself is never
cancelled: it ends on its own, and an operation waits for it unless its caller stopped waiting.
"""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
from pymongo.errors import AutoReconnect

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBTimeoutError
from agent_framework_mongodb.checkpoints import deadlines
from agent_framework_mongodb.checkpoints.deadlines import requests_left_running
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import INSERT, WORKFLOW, ProxyCollection, make_checkpoint, make_storage, save_chain


async def _turns(count: int = 20) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def _parked(proxy: ProxyCollection, name: str) -> asyncio.Event:
    await asyncio.wait_for(proxy.entered[name].wait(), timeout=5)
    return proxy.entered[name]


async def test_a_failed_allocation_waits_for_the_read_beside_it_instead_of_cancelling_it(
    collection: InMemoryCollection,
) -> None:
    # A run's first save sends its allocation and the retained-maximum read together.
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    gate = proxy.block("find_one")
    proxy.fail("find_one_and_update", AutoReconnect("connection closed"))

    save = asyncio.ensure_future(storage.save(make_checkpoint("cp-1")))
    await _parked(proxy, "find_one")
    await _turns()
    assert not save.done(), "the save ends only once the read beside it has ended"

    gate.set()
    with pytest.raises(Exception, match="allocate a sequence"):
        await save
    assert proxy.cancelled == []
    assert "find_one" in proxy.ended


async def test_a_failed_delete_of_clear_run_waits_for_the_counter_update_beside_it(
    collection: InMemoryCollection,
) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    await save_chain(storage, 2)
    gate = proxy.block("find_one_and_update")
    proxy.fail("delete_many", AutoReconnect("connection closed"))

    clearing = asyncio.ensure_future(storage.clear_run())
    await _parked(proxy, "find_one_and_update")
    await _turns()
    assert not clearing.done()

    gate.set()
    with pytest.raises(Exception, match="clear the run"):
        await clearing
    assert proxy.cancelled == []


@pytest.mark.parametrize("name", ["find_one_and_update", "find_one", INSERT])
async def test_a_cancelled_save_leaves_its_request_running_and_returns_at_once(
    collection: InMemoryCollection, name: str
) -> None:
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy)
    if name == INSERT:
        await save_chain(storage, 1)
    gate = proxy.block(name)
    before = requests_left_running()

    save = asyncio.ensure_future(storage.save(make_checkpoint("cp-cancelled")))
    await _parked(proxy, name)
    save.cancel()
    with pytest.raises(asyncio.CancelledError):
        await save

    assert proxy.cancelled == []
    assert requests_left_running() > before, "the parked request is still running, held"
    gate.set()
    await _turns()
    assert name in proxy.ended
    assert requests_left_running() == before
    # The storage goes on working, and the save can be repeated.
    await storage.save(make_checkpoint("cp-cancelled"))
    assert "cp-cancelled" in await storage.list_checkpoint_ids(workflow_name=WORKFLOW)


async def test_a_request_the_driver_never_ends_is_abandoned_at_the_deadline_plus_the_slack(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deadlines, "DEADLINE_SLACK", 0.2)
    proxy = ProxyCollection(collection)
    storage = make_storage(proxy, operation_timeout=0.3)
    await save_chain(storage, 1)
    gate = proxy.block("find_one")  # a proxy gate ignores pymongo's deadline: a driver that hangs

    started = time.monotonic()
    with pytest.raises(MongoDBTimeoutError, match="did not answer by the operation's deadline"):
        await asyncio.wait_for(storage.load("cp-000"), timeout=5)
    elapsed = time.monotonic() - started

    assert 0.5 * 0.8 <= elapsed < 3, elapsed
    assert proxy.cancelled == []
    gate.set()
    await _turns()
    assert requests_left_running() == 0


async def test_a_request_left_running_that_fails_is_retrieved_quietly(
    collection: InMemoryCollection,
) -> None:
    proxy = ProxyCollection(collection)
    storage: MongoDBCheckpointStorage = make_storage(proxy)
    await save_chain(storage, 1)
    gate = proxy.block("find_one")
    unretrieved: list[object] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))

    loading = asyncio.ensure_future(storage.load("cp-000"))
    await _parked(proxy, "find_one")
    loading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loading
    proxy.fail("find_one", AutoReconnect("connection closed"))  # the parked request fails late
    gate.set()
    await _turns()
    gc.collect()
    await _turns()
    loop.set_exception_handler(None)
    assert unretrieved == []
    assert requests_left_running() == 0
