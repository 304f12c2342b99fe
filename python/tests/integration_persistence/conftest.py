"""Fixtures of the integration suite (marker ``integration_persistence``).

The suite runs in every test run, against whichever target the environment names:

``MONGODB_URI`` set
    The tests run against that server, ``explain`` tests included.
``MONGODB_URI`` unset (the default ``pytest`` run)
    Each test runs twice against the in-process engine, so the suite cannot rot while no server is
    at hand: ``[engine]`` drives the engine directly
    (``agent_framework_mongodb.testing.InMemoryMongoClient``); ``[wire]`` drives it through a real
    ``pymongo.AsyncMongoClient`` connected to the engine's wire-protocol front
    (``agent_framework_mongodb.testing.WireProtocolServer``), so pymongo's own command building,
    batching, retries and reply parsing are exercised too. The ``explain`` tests skip on both,
    since the engine has no query planner.
``AFM_INTEGRATION_ENGINE=1``
    Forces the engine (both ways) even when ``MONGODB_URI`` is set.
``MONGODB_DATABASE``
    The database holding the throw-away collections; ``agent_framework_test`` by default.

Each test gets its own collection ``test-checkpoint-<uuid4 hex>``, dropped in the fixture's
teardown even when the test fails; the client is closed afterwards. A passing engine run says the
suite's logic holds; only a run against a server says MongoDB agrees.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator

import pytest
from pymongo import AsyncMongoClient, ReadPreference

from agent_framework_mongodb.testing import InMemoryMongoClient, WireProtocolServer

from ._support import DEFAULT_DATABASE, IntegrationCollection, MongoTarget

ENGINE_VARIABLE = "AFM_INTEGRATION_ENGINE"
SERVER_SELECTION_TIMEOUT_MS = 10_000


def _targets() -> list[str]:
    """``server`` when MONGODB_URI names one (and the engine is not forced), else both engine routes."""
    if os.environ.get("MONGODB_URI") and os.environ.get(ENGINE_VARIABLE) != "1":
        return ["server"]
    return ["engine", "wire"]


@pytest.fixture(params=_targets())
async def target(request: pytest.FixtureRequest) -> AsyncIterator[MongoTarget]:
    """A fresh, uniquely named collection on the server (or the engine), dropped afterwards."""
    route: str = request.param
    database_name = os.environ.get("MONGODB_DATABASE") or DEFAULT_DATABASE
    collection_name = f"test-checkpoint-{uuid.uuid4().hex}"
    async with contextlib.AsyncExitStack() as stack:
        client: AsyncMongoClient[dict[str, object]] | InMemoryMongoClient
        if route == "engine":
            client = InMemoryMongoClient()
        else:
            uri = os.environ.get("MONGODB_URI", "")
            if route == "wire":
                uri = (await stack.enter_async_context(WireProtocolServer())).uri
            # Fail within seconds, not pymongo's default 30, when the server cannot be reached.
            client = AsyncMongoClient(uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS)
        stack.push_async_callback(client.close)
        database = client[database_name]
        # The suite's own raw reads check what the storage wrote: from the primary, as the storage
        # reads, whatever read preference MONGODB_URI names.
        collection: IntegrationCollection = database[collection_name].with_options(
            read_preference=ReadPreference.PRIMARY
        )
        try:
            yield MongoTarget(
                collection=collection,
                real_server=route == "server",
                database_name=database_name,
                collection_name=collection_name,
            )
        finally:
            await database.drop_collection(collection_name)


@pytest.fixture
def server(target: MongoTarget) -> MongoTarget:
    """The target, for tests that need a real server's query planner (``explain``)."""
    if not target.real_server:
        pytest.skip(
            "explain needs a real MongoDB server's query planner; this run uses the in-process "
            f"engine (set MONGODB_URI, and leave {ENGINE_VARIABLE} unset, to run it)."
        )
    return target
