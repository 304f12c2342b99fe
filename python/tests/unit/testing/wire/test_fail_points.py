"""``configureFailPoint: "failCommand"`` with each mode and data option, as drivers' tests use it."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import AutoReconnect, NetworkTimeout, NotPrimaryError, OperationFailure, WriteConcernError

from agent_framework_mongodb.testing import WireProtocolServer

from .conftest import Driver, connect


async def fail(driver: Driver, mode: Any, **data: Any) -> dict[str, Any]:
    return await driver["admin"].command({"configureFailPoint": "failCommand", "mode": mode, "data": data})


async def finds(driver: Driver) -> list[str]:
    """Run three finds: the outcome of each ("ok" or the error code)."""
    return [await _find(driver) for _ in range(3)]


async def _find(driver: Driver) -> str:
    try:
        await driver["d"]["c"].find_one({})
    except OperationFailure as error:
        return str(error.code)
    return "ok"


async def test_error_code_fails_times_then_turns_off(driver: Driver) -> None:
    await fail(driver, {"times": 2}, failCommands=["find"], errorCode=2)
    assert await finds(driver) == ["2", "2", "ok"]


async def test_skip_lets_the_first_activations_pass(driver: Driver) -> None:
    await fail(driver, {"skip": 1}, failCommands=["find"], errorCode=2)
    assert await finds(driver) == ["ok", "2", "2"]


async def test_always_on_until_off(driver: Driver) -> None:
    await fail(driver, "alwaysOn", failCommands=["find"], errorCode=2)
    assert await finds(driver) == ["2", "2", "2"]
    answer = await driver["admin"].command({"configureFailPoint": "failCommand", "mode": "off"})
    assert answer == {"count": 3, "ok": 1.0}
    assert await finds(driver) == ["ok", "ok", "ok"]


async def test_the_failure_is_the_servers_message_before_the_command_runs(driver: Driver) -> None:
    await fail(driver, {"times": 1}, failCommands=["insert"], errorCode=2)
    with pytest.raises(OperationFailure) as raised:
        await driver["d"]["c"].insert_one({"_id": 1})
    assert (raised.value.details or {})["errmsg"] == "Failing command due to 'failCommand' failpoint"
    assert await driver["d"]["c"].count_documents({}) == 0


async def test_a_retryable_code_gets_the_retryable_write_label_and_pymongo_retries(
    driver: Driver, wire_server: WireProtocolServer
) -> None:
    await fail(driver, {"times": 1}, failCommands=["insert"], errorCode=10107)
    await driver["d"]["c"].insert_one({"_id": 1})
    assert wire_server.command_names().count("insert") == 2
    assert await driver["d"]["c"].count_documents({}) == 1


async def test_error_labels_replace_the_servers_labels(driver: Driver) -> None:
    await fail(driver, {"times": 1}, failCommands=["insert"], errorCode=10107, errorLabels=[])
    with pytest.raises(NotPrimaryError) as raised:
        await driver["d"]["c"].insert_one({"_id": 1})
    assert not raised.value.has_error_label("RetryableWriteError")


async def test_close_connection_closes_without_a_reply_and_the_retry_runs_once(
    driver: Driver, wire_server: WireProtocolServer
) -> None:
    await fail(driver, {"times": 1}, failCommands=["insert"], closeConnection=True)
    await driver["d"]["c"].insert_one({"_id": 1})
    assert wire_server.command_names().count("insert") == 2
    assert await driver["d"]["c"].count_documents({}) == 1


async def test_close_connection_without_retries_is_a_network_error(wire_server: WireProtocolServer) -> None:
    client = connect(wire_server, retryWrites=False)
    try:
        await fail(client, {"times": 1}, failCommands=["insert"], closeConnection=True)
        with pytest.raises(AutoReconnect):
            await client["d"]["c"].insert_one({"_id": 1})
        assert await client["d"]["c"].count_documents({}) == 0  # failed before it ran
    finally:
        await client.close()


async def test_block_connection_outlasts_the_clients_timeout(wire_server: WireProtocolServer) -> None:
    client = connect(wire_server, timeoutMS=100)
    try:
        await fail(client, {"times": 1}, failCommands=["find"], blockConnection=True, blockTimeMS=400)
        with pytest.raises(NetworkTimeout):
            await client["d"]["c"].find_one({})
    finally:
        await client.close()


async def test_a_write_concern_error_comes_after_the_write_is_applied(driver: Driver) -> None:
    concern_error = {
        "code": 64,
        "codeName": "WriteConcernFailed",
        "errmsg": "waiting for replication timed out",
    }
    await fail(driver, {"times": 1}, failCommands=["insert"], writeConcernError=concern_error)
    with pytest.raises(WriteConcernError) as raised:
        await driver["d"]["c"].insert_one({"_id": 1})
    assert raised.value.code == 64
    assert await driver["d"]["c"].count_documents({}) == 1


async def test_a_retryable_write_concern_error_is_retried_and_answered_from_the_record(
    driver: Driver, wire_server: WireProtocolServer
) -> None:
    concern_error = {"code": 91, "errmsg": "Replication is being shut down"}
    await fail(driver, {"times": 1}, failCommands=["insert"], writeConcernError=concern_error)
    await driver["d"]["c"].insert_one({"_id": 1})
    assert wire_server.command_names().count("insert") == 2
    assert await driver["d"]["c"].count_documents({}) == 1


async def test_app_name_limits_the_fail_point_to_that_client(wire_server: WireProtocolServer) -> None:
    mine = connect(wire_server, appname="mine")
    other = connect(wire_server, appname="other")
    try:
        await fail(mine, "alwaysOn", failCommands=["find"], errorCode=2, appName="mine")
        assert await finds(other) == ["ok", "ok", "ok"]
        assert await finds(mine) == ["2", "2", "2"]
    finally:
        await mine.close()
        await other.close()


async def test_hello_is_not_failed_unless_listed(wire_server: WireProtocolServer, driver: Driver) -> None:
    await fail(driver, "alwaysOn", failCommands=["ping"], errorCode=2)
    client = connect(wire_server)  # a new client's handshakes still succeed
    try:
        assert (await client["admin"].command("hello"))["isWritablePrimary"] is True
        with pytest.raises(OperationFailure):
            await client["admin"].command("ping")
    finally:
        await client.close()


async def test_configure_fail_point_only_on_admin(driver: Driver) -> None:
    with pytest.raises(OperationFailure) as raised:
        await driver["d"].command({"configureFailPoint": "failCommand", "mode": "off"})
    assert raised.value.code == 13
