"""What happens to one command between its arrival and its reply, in the server's order.

``failCommand`` first (src/mongo/db/commands.cpp evaluates it before the command runs), then the
member's state (a secondary refuses writes with NotWritablePrimary and reads without secondaryOk
with NotPrimaryNoSecondaryOk, src/mongo/db/service_entry_point_common.cpp), then the
retryable-write table, then the command on the engine under its ``maxTimeMS``, then its write
concern, and last the labels a 4.4+ server adds (``RetryableWriteError``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pymongo

from .._client import InMemoryMongoClient
from .._codec import as_mapping
from ._commands import HANDLERS, SERVER_COMMANDS, WAITS_FOR_WRITE_CONCERN, WRITES
from ._cursors import Cursors
from ._fail_points import FAIL_MESSAGE, FailCommand, FailPoints
from ._handshake import HELLO_COMMANDS, hello_reply
from ._invocation import Invocation
from ._members import ReplicaSetState
from ._messages import Request
from ._replication import Replication, write_concern
from ._replies import RETRYABLE_WRITE_CODES, CommandError, add_label, error_reply, not_implemented, reply_for
from ._retryable import TransactionTable, TxnKey, txn_key

_RETRYABLE_WRITE_ERROR = "RetryableWriteError"


@dataclass(frozen=True)
class CommandRecord:
    """One command a member received: for tests and for finding out what a client sends."""

    member: int
    database: str
    name: str
    options: tuple[str, ...]


class CommandLog:
    """The commands a set's members received, in order, with waiters for the next ones."""

    def __init__(self) -> None:
        self.records: list[CommandRecord] = []
        self._changed = asyncio.Event()

    def append(self, record: CommandRecord) -> None:
        self.records.append(record)
        self._changed.set()

    def count(self, name: str, member: int | None = None) -> int:
        return sum(1 for record in self.records if record.name == name and member in (None, record.member))

    async def wait_for(self, name: str, count: int, member: int | None = None) -> None:
        """Until ``count`` commands named ``name`` have arrived (at ``member``, or any)."""
        while self.count(name, member) < count:
            self._changed.clear()
            await self._changed.wait()


@dataclass
class SharedState:
    """What the members of one set share."""

    state: ReplicaSetState
    engine: InMemoryMongoClient
    transactions: TransactionTable = field(default_factory=TransactionTable)
    replication: Replication = field(default_factory=Replication)
    log: CommandLog = field(default_factory=CommandLog)


@dataclass
class MemberState:
    """What one member keeps for itself."""

    index: int
    fail_points: FailPoints = field(default_factory=FailPoints)
    cursors: Cursors = field(default_factory=Cursors)
    dropped_replies: dict[str, int] = field(default_factory=dict[str, int])
    """Per command name, how many more replies to drop after running the command (the front's
    control for "applied, then the connection was lost")."""


@dataclass
class ConnectionInfo:
    connection_id: int
    app_name: str | None = None


@dataclass(frozen=True)
class Outcome:
    reply: dict[str, Any] | None
    close: bool = False


async def execute(
    request: Request, shared: SharedState, member: MemberState, connection: ConnectionInfo
) -> Outcome:
    command = request.command
    name = request.name
    database = command.get("$db")
    if not isinstance(database, str):
        return Outcome(error_reply(40571, "OP_MSG requests require a $db argument"))
    options = tuple(key for key in command if key != name)
    shared.log.append(CommandRecord(member.index, database, name, options))
    if name in HELLO_COMMANDS:
        _remember_app_name(command, connection)
    fail = member.fail_points.take(name, connection.app_name)
    if fail is not None:
        if fail.block_ms:
            await asyncio.sleep(fail.block_ms / 1000)  # the server's own wait, not a test's
        if fail.close_connection:
            return Outcome(None, close=True)
        if fail.error_code is not None:
            reply = error_reply(fail.error_code, FAIL_MESSAGE)
            _label(reply, command, fail)
            return Outcome(reply)
    reply = await _run(request, database, shared, member, connection)
    if fail is not None and fail.write_concern_error is not None and reply.get("ok") == 1.0:
        reply["writeConcernError"] = dict(fail.write_concern_error)
    _label(reply, command, fail)
    remaining = member.dropped_replies.get(name, 0)
    if remaining:
        member.dropped_replies[name] = remaining - 1
        return Outcome(None, close=True)
    return Outcome(reply)


def _remember_app_name(command: Mapping[str, Any], connection: ConnectionInfo) -> None:
    """The handshake's ``client.application.name``: what ``failCommand``'s ``appName`` matches."""
    client = as_mapping(command.get("client")) or {}
    application = as_mapping(client.get("application")) or {}
    name = application.get("name")
    if isinstance(name, str):
        connection.app_name = name


def _label(reply: dict[str, Any], command: Mapping[str, Any], fail: FailCommand | None) -> None:
    """``RetryableWriteError`` on a retryable write's retryable error, or the fail point's own labels."""
    if (
        fail is not None
        and fail.error_labels is not None
        and (reply.get("ok") != 1.0 or "writeConcernError" in reply)
    ):
        if fail.error_labels:
            reply["errorLabels"] = list(fail.error_labels)
        return
    if txn_key(command) is None:
        return
    failed = reply.get("ok") != 1.0 and reply.get("code") in RETRYABLE_WRITE_CODES
    concern: Any = reply.get("writeConcernError")
    concern_failed = isinstance(concern, Mapping) and concern.get("code") in RETRYABLE_WRITE_CODES  # pyright: ignore[reportUnknownMemberType]
    if failed or concern_failed:
        add_label(reply, _RETRYABLE_WRITE_ERROR)


async def _run(
    request: Request, database: str, shared: SharedState, member: MemberState, connection: ConnectionInfo
) -> dict[str, Any]:
    command = request.command
    name = request.name
    if name in HELLO_COMMANDS:
        now = (
            shared.engine.server_now().replace(tzinfo=timezone.utc)
            if shared.engine
            else datetime.now(timezone.utc)
        )
        return hello_reply(
            command, shared.state, member.index, connection_id=connection.connection_id, now=now
        )
    try:
        reply = await _dispatch(request, database, shared, member)
    except CommandError as error:
        return error.reply()
    if name in WAITS_FOR_WRITE_CONCERN and reply.get("ok") == 1.0:
        concern_error = await shared.replication.wait(
            write_concern(command), len(shared.state.addresses), _max_time_ms(command)
        )
        if concern_error is not None:
            reply["writeConcernError"] = concern_error
    return reply


async def _dispatch(
    request: Request, database: str, shared: SharedState, member: MemberState
) -> dict[str, Any]:
    command = request.command
    name = request.name
    if name == "configureFailPoint":
        if database != "admin":
            raise CommandError(13, "configureFailPoint may only be run against the admin database.")
        return member.fail_points.configure(command)
    if name not in HANDLERS:
        raise CommandError(59, f"no such command: '{name}'")
    if "startTransaction" in command or "autocommit" in command:
        raise not_implemented("transactions (the engine has none; DIVERGENCES.md entry 4)")
    _check_member_state(command, name, shared, member)
    key = txn_key(command)
    reply = shared.transactions.recorded(key) if key is not None else None
    if reply is None:
        reply = await _handle(Invocation(shared.engine, member.cursors, database, command), key, shared)
    return reply


async def _handle(invocation: Invocation, key: TxnKey | None, shared: SharedState) -> dict[str, Any]:
    handler = HANDLERS[invocation.name]
    try:
        with _deadline(_max_time_ms(invocation.command)):
            reply = await handler(invocation)
    except Exception as error:
        reply = _reply_for(error)
    if key is not None and reply.get("ok") == 1.0:
        shared.transactions.record(key, reply)
    return reply


def _reply_for(error: Exception) -> dict[str, Any]:
    try:
        return reply_for(error)
    except Exception as unexpected:
        return error_reply(1, f"InternalError in the wire front: {type(unexpected).__name__}: {unexpected}")


def _check_member_state(
    command: Mapping[str, Any], name: str, shared: SharedState, member: MemberState
) -> None:
    if shared.state.is_primary(member.index) or name in SERVER_COMMANDS:
        return
    if name in WRITES:
        raise CommandError(10107, "not primary")
    preference: Any = command.get("$readPreference")
    mode = preference.get("mode") if isinstance(preference, Mapping) else None  # pyright: ignore[reportUnknownMemberType,reportUnknownVariableType]
    if mode in (None, "primary"):
        raise CommandError(13435, "not primary and secondaryOk=false")


def _max_time_ms(command: Mapping[str, Any]) -> int | None:
    value = command.get("maxTimeMS")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return int(value)


@contextlib.contextmanager
def _deadline(max_time_ms: int | None) -> Generator[None]:
    """The command's ``maxTimeMS`` as the engine's deadline.

    The engine reads the deadline pymongo keeps for ``pymongo.timeout`` (``../_timeouts.py``);
    each connection's task runs in a fresh context (``_connections.py``), so the only deadline it
    sees is the one set here from the command.
    """
    if max_time_ms is None:
        yield
        return
    with pymongo.timeout(max_time_ms / 1000):
        yield
