"""``WireProtocolServer``: the engine behind MongoDB's wire protocol, as a replica set of one or more members.

A real ``pymongo.AsyncMongoClient(server.uri)`` connects to it: each member listens on its own
port of 127.0.0.1, answers the handshake as a replica-set member, and runs commands on the
engine. While replication runs, the members share one engine. Test-side controls model what a
real set does: a step-down and an election, a member that stops answering, connections dropped,
a member that stops listening, replication paused and a failover that loses the ``w: 1`` writes
made since (``_replication.py``), and replies dropped after their write was applied.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from .._client import InMemoryMongoClient
from ._connections import Behaviour, Member
from ._execution import CommandRecord, SharedState
from ._members import ReplicaSetState

_LOSSY_SET_SIZE = 2
"""A set needs a second member to lose writes in a failover."""


class WireProtocolServer:
    """MongoDB's wire protocol in front of an :class:`InMemoryMongoClient` engine.

    ``async with WireProtocolServer(engine) as server:`` starts every member; ``server.uri`` is
    the connection string (``mongodb://127.0.0.1:PORT/?replicaSet=rs0``). ``engine`` defaults to a
    new memory-only engine; the server never closes an engine it was given, except the one a
    lossy failover (:meth:`fail_over` while replication is paused) leaves behind.

    ``members`` is the size of the set; ``port`` the first member's port (0: any free port), and
    ``ports`` every member's. Member 0 starts as the primary.
    """

    def __init__(
        self,
        engine: InMemoryMongoClient | None = None,
        *,
        port: int = 0,
        replica_set: str = "rs0",
        members: int = 1,
        ports: Sequence[int] | None = None,
    ) -> None:
        if members < 1:
            raise ValueError("a replica set has at least one member")
        chosen = list(ports) if ports is not None else [port] + [0] * (members - 1)
        if len(chosen) != members:
            raise ValueError(f"{members} members need {members} ports, not {len(chosen)}")
        self._owns_engine = engine is None
        self._shared = SharedState(
            ReplicaSetState(replica_set), engine if engine is not None else InMemoryMongoClient()
        )
        self._members = [Member(index, self._get_shared, chosen[index]) for index in range(members)]
        self._snapshots = 0
        self._last_primary: int | None = 0
        """The primary when replication was paused: the only member holding the writes since."""

    def _get_shared(self) -> SharedState:
        return self._shared

    # -- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        for member in self._members:
            await member.listen()
        self._shared.state.addresses = [member.address for member in self._members]

    async def stop(self) -> None:
        for member in self._members:
            await member.stop_listening()
        self._shared.replication.resume()
        if self._owns_engine:
            await self._shared.engine.close()

    async def __aenter__(self) -> WireProtocolServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- where it is --------------------------------------------------------------------------------
    @property
    def engine(self) -> InMemoryMongoClient:
        """The engine holding the primary's data (a new one after a lossy failover)."""
        return self._shared.engine

    @property
    def replica_set(self) -> str:
        return self._shared.state.name

    @property
    def addresses(self) -> list[str]:
        return [member.address for member in self._members]

    @property
    def ports(self) -> list[int]:
        return [member.port for member in self._members]

    @property
    def port(self) -> int:
        return self._members[0].port

    @property
    def uri(self) -> str:
        return f"mongodb://{','.join(self.addresses)}/?replicaSet={self.replica_set}"

    @property
    def primary(self) -> int | None:
        """The index of the primary member, or None while the set has none."""
        return self._shared.state.primary

    @property
    def commands(self) -> list[CommandRecord]:
        """Every command the members received, in order (hello and fail point commands included)."""
        return list(self._shared.log.records)

    def command_names(self, *, member: int | None = None) -> list[str]:
        return [record.name for record in self._shared.log.records if member in (None, record.member)]

    async def received(self, command: str, *, count: int = 1, member: int | None = None) -> None:
        """Wait until ``count`` commands named ``command`` have arrived (at ``member``, or any):
        the event a test waits for before changing the set under an operation in flight."""
        await self._shared.log.wait_for(command, count, member)

    def open_cursors(self, member: int = 0) -> int:
        return len(self._members[member].state.cursors)

    def connections_accepted(self, member: int = 0) -> int:
        return self._members[member].connections_accepted

    # -- replica-set events -------------------------------------------------------------------------
    def step_down(self) -> None:
        """The primary steps down: every member reports itself secondary until :meth:`elect`.

        Writes then fail with NotWritablePrimary (10107), labelled RetryableWriteError for a
        retryable write, and reads without secondaryOk with NotPrimaryNoSecondaryOk (13435).
        """
        self._shared.state.step_down()

    async def elect(self, member: int = 0) -> None:
        """``member`` becomes primary with a higher electionId (its term is the set's next).

        While replication is paused, a member other than the old primary has the data as of the
        pause: the engine is reopened from the snapshot, and the writes since are lost.
        """
        state = self._shared.state
        replication = self._shared.replication
        if replication.paused and replication.snapshot is not None and member != self._last_primary:
            lost = self._shared.engine
            self._shared.engine = InMemoryMongoClient(
                path=replication.snapshot, tz_aware=lost.tz_aware, scheduling=lost.scheduler.scheduling
            )
            await lost.close()
            self._owns_engine = True
            replication.resume()
        state.elect(member)
        self._last_primary = member

    async def fail_over(self, to: int | None = None) -> None:
        """Step down and elect ``to`` (by default the next member, or the same one in a set of one)."""
        current = self._shared.state.primary
        if to is None:
            to = 0 if current is None else (current + 1) % len(self._members)
        self.step_down()
        await self.elect(to)

    # -- replication --------------------------------------------------------------------------------
    def pause_replication(self) -> None:
        """The secondaries stop receiving writes: their data stays as it is now.

        Needs a file-backed engine (``InMemoryMongoClient(path=...)``) and at least two members:
        the secondaries' data is a copy of the engine's file taken now.
        """
        path = self._shared.engine.path
        if path is None:
            raise ValueError("pause_replication needs a file-backed engine (InMemoryMongoClient(path=...))")
        if len(self._members) < _LOSSY_SET_SIZE:
            raise ValueError("pause_replication needs a set of at least two members")
        if self._shared.replication.paused:
            return
        self._snapshots += 1
        snapshot = Path(f"{path}.secondary-{self._snapshots}")
        shutil.copyfile(path, snapshot)
        self._last_primary = self._shared.state.primary
        self._shared.replication.pause(snapshot)

    def resume_replication(self) -> None:
        """The secondaries catch up: writes waiting for ``w: "majority"`` are acknowledged."""
        self._shared.replication.resume()

    @property
    def replication_paused(self) -> bool:
        return self._shared.replication.paused

    # -- misbehaviour -------------------------------------------------------------------------------
    def _targets(self, member: int | None) -> list[Member]:
        return list(self._members) if member is None else [self._members[member]]

    def stop_answering(self, member: int | None = None, *, handshake: bool = True) -> None:
        """Accept connections and read requests, but answer nothing until :meth:`answer_again`.

        ``handshake=True``: not even ``hello`` (a silent listener: pymongo's monitor times out).
        ``handshake=False``: ``hello`` is answered, every other command hangs (a server that stops
        answering mid-operation while its monitor still sees it healthy).
        """
        behaviour = Behaviour.HANG if handshake else Behaviour.HANG_OPERATIONS
        for target in self._targets(member):
            target.behave(behaviour)

    def drop_connections(self, member: int | None = None) -> None:
        """Close each connection as a request arrives on it, until :meth:`answer_again`."""
        for target in self._targets(member):
            target.behave(Behaviour.DROP)

    def answer_again(self, member: int | None = None) -> None:
        """Back to normal; requests hung by :meth:`stop_answering` run now."""
        for target in self._targets(member):
            target.behave(Behaviour.NORMAL)

    async def stop_listening(self, member: int | None = None) -> None:
        """The member becomes unreachable: its listener and every connection are closed."""
        for target in self._targets(member):
            await target.stop_listening()

    async def listen_again(self, member: int | None = None) -> None:
        """Listen again on the same port."""
        for target in self._targets(member):
            await target.listen()

    def drop_reply_after_apply(self, command: str, *, times: int = 1, member: int | None = None) -> None:
        """Run the next ``times`` ``command`` commands, then close the connection instead of replying."""
        for target in self._targets(member):
            target.state.dropped_replies[command] = times
