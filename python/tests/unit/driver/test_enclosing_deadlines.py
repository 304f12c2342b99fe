"""Index builds have no deadline of their own by default, and keep the caller's (issue 29).

``ensure_indexes()`` runs without ``operation_timeout`` (a build may take minutes), but a caller's
enclosing ``pymongo.timeout`` block still bounds it, as docs/deployment.md promises: an operation
without a deadline of its own must not enter ``pymongo.timeout(None)``, which lifts every enclosing
one for pymongo. Checked through a real client, with the front holding ``createIndexes``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pymongo
import pymongo.asynchronous.collection
import pytest

from agent_framework_mongodb import MongoDBIntegrationError, ensure_checkpoint_indexes
from agent_framework_mongodb.checkpoints.deadlines import DEADLINE_SLACK
from agent_framework_mongodb.testing import WireProtocolServer

from ..storage._support import make_storage
from .conftest import Connect, Driver

HELD_S = 3.0
CALLERS_DEADLINE = 0.5

Collection = pymongo.asynchronous.collection.AsyncCollection[dict[str, Any]]
Build = Callable[[Collection], Awaitable[object]]
BUILDS: dict[str, Build] = {
    "storage.ensure_indexes": lambda collection: make_storage(
        collection, operation_timeout=HELD_S / 10
    ).ensure_indexes(),
    "ensure_checkpoint_indexes": ensure_checkpoint_indexes,
}


async def hold_index_builds(checker: Driver) -> None:
    await checker["admin"].command(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {
                "failCommands": ["createIndexes"],
                "blockConnection": True,
                "blockTimeMS": int(HELD_S * 1000),
            },
        }
    )


@pytest.mark.parametrize("build", list(BUILDS), ids=list(BUILDS))
async def test_a_callers_enclosing_deadline_bounds_an_index_build(
    wire_server: WireProtocolServer, connect: Connect, build: str
) -> None:
    collection = connect(wire_server)["db"]["checkpoints"]
    await hold_index_builds(connect(wire_server))
    started = time.monotonic()
    with pytest.raises(MongoDBIntegrationError) as raised, pymongo.timeout(CALLERS_DEADLINE):
        await BUILDS[build](collection)
    assert time.monotonic() - started < CALLERS_DEADLINE + DEADLINE_SLACK
    assert raised.value.retryable


async def test_without_one_a_slow_index_build_is_waited_for_past_operation_timeout(
    wire_server: WireProtocolServer, connect: Connect
) -> None:
    storage = make_storage(connect(wire_server)["db"]["checkpoints"], operation_timeout=HELD_S / 10)
    await hold_index_builds(connect(wire_server))
    started = time.monotonic()
    assert await storage.ensure_indexes()
    assert time.monotonic() - started >= HELD_S
