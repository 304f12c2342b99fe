"""``hello`` (and the legacy ``isMaster``/``ismaster``): how a member introduces itself.

Fields from https://www.mongodb.com/docs/manual/reference/command/hello/ and the handshake
rules of mongodb/specifications source/mongodb-handshake/handshake.md. The reply to the legacy
command names the writable flag ``ismaster``; ``hello`` names it ``isWritablePrimary``. A client that
sends ``helloOk: true`` gets ``helloOk: true`` back and may use ``hello`` from then on.

Monitoring is polling: the reply carries no ``topologyVersion``, so pymongo never starts
streaming (awaitable) ``hello`` checks (server-monitoring.md, "Streaming protocol": a driver
streams only when the server reports a topologyVersion) and learns of a step-down from an error
or its next heartbeat. That keeps each monitor to one request at a time, and the front needs no
exhaust replies (DIVERGENCES.md, wire entries).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from ._members import ReplicaSetState
from ._messages import MAX_BSON_OBJECT_SIZE, MAX_MESSAGE_SIZE
from ._writes import MAX_WRITE_BATCH_SIZE

HELLO_COMMANDS: Final = frozenset({"hello", "isMaster", "ismaster"})
MIN_WIRE_VERSION: Final = 0
MAX_WIRE_VERSION: Final = 21
"""MongoDB 7.0, the version the engine reports."""
LOGICAL_SESSION_TIMEOUT_MINUTES: Final = 30


def hello_reply(
    command: Mapping[str, Any],
    state: ReplicaSetState,
    member: int,
    *,
    connection_id: int,
    now: datetime,
) -> dict[str, Any]:
    name = next(iter(command))
    primary = state.is_primary(member)
    reply: dict[str, Any] = {
        "hosts": list(state.addresses),
        "setName": state.name,
        "setVersion": state.set_version,
    }
    reply["isWritablePrimary" if name == "hello" else "ismaster"] = primary
    reply["secondary"] = not primary
    if state.primary_address is not None:
        reply["primary"] = state.primary_address
    reply["me"] = state.addresses[member]
    if primary:
        reply["electionId"] = state.election_id
    if command.get("helloOk"):
        reply["helloOk"] = True
    reply.update(
        maxBsonObjectSize=MAX_BSON_OBJECT_SIZE,
        maxMessageSizeBytes=MAX_MESSAGE_SIZE,
        maxWriteBatchSize=MAX_WRITE_BATCH_SIZE,
        localTime=now,
        logicalSessionTimeoutMinutes=LOGICAL_SESSION_TIMEOUT_MINUTES,
        connectionId=connection_id,
        minWireVersion=MIN_WIRE_VERSION,
        maxWireVersion=MAX_WIRE_VERSION,
        readOnly=False,
        ok=1.0,
    )
    return reply
