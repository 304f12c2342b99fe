"""``doctor``'s deployment checks through a real ``AsyncMongoClient`` on the front: what a replica-set
primary answers (``buildInfo``, ``hello``, ``getParameter``, ``getDefaultRWConcern``) is read as a
server's, and the URI's ``retryWrites=false`` is flagged."""

from __future__ import annotations

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.checkpoints.diagnostics import Status, check_deployment
from agent_framework_mongodb.testing import WireProtocolServer

from ..storage._support import make_options
from .conftest import Connect, Driver


async def statuses(client: Driver) -> dict[str, Status]:
    checks = await check_deployment(
        client, database_name="db", collection_name="c", operation_timeout=5, server_selection_timeout=5
    )
    return {check.name: check.status for check in checks}


async def test_a_provisioned_replica_set_passes_every_deployment_check(
    wire_server: WireProtocolServer, connect: Connect
) -> None:
    client = connect(wire_server)
    await MongoDBCheckpointStorage(client["db"]["c"], options=make_options()).ensure_indexes()
    assert await statuses(client) == {
        "connection": Status.OK,
        "server version": Status.OK,
        "feature compatibility": Status.OK,
        "topology": Status.OK,
        "indexes": Status.OK,
        "collation": Status.OK,
        "write concern": Status.OK,  # the set's implicit default, stated as majority
        "retryable writes": Status.OK,
        "read preference": Status.OK,
    }


async def test_retry_writes_off_in_the_uri_is_a_warning(
    wire_server: WireProtocolServer, connect: Connect
) -> None:
    found = await statuses(connect(wire_server, retryWrites=False))
    assert found["retryable writes"] is Status.WARN
    assert found["connection"] is Status.OK
