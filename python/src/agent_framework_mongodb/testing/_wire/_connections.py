"""One member's listener and its connections: read a message, run it, write the reply.

Each connection is served by its own task, started in a fresh ``contextvars.Context``: the
engine reads pymongo's client-side deadline from context variables, and a listener started inside
a client's ``pymongo.timeout`` block would otherwise hand that block's deadline to every command.

A member can misbehave on demand, as the test-side controls of ``WireProtocolServer`` ask:
``Behaviour.HANG`` reads each request and answers nothing, handshake included (a silent
listener); ``HANG_OPERATIONS`` still answers ``hello`` (a monitor sees a healthy server) but no
other command; a hung request runs once the member answers again, as a stalled server's queue
does. ``DROP`` closes each connection as a request arrives. A member that stops listening closes
its listener and every connection (unreachable).
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import itertools
from collections.abc import Callable

from ._execution import ConnectionInfo, MemberState, SharedState, execute
from ._handshake import HELLO_COMMANDS
from ._messages import HEADER, MalformedMessage, encode_reply, parse_request, read_header

HOST = "127.0.0.1"


class Behaviour(enum.Enum):
    NORMAL = "normal"
    HANG = "hang"
    HANG_OPERATIONS = "hang-operations"
    DROP = "drop"


class Member:
    """One member of the set: its port, its own state, and its connections."""

    def __init__(self, index: int, shared: Callable[[], SharedState], port: int = 0) -> None:
        self.index = index
        self.state = MemberState(index)
        self.port = port
        self._shared = shared
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._behaviour = Behaviour.NORMAL
        self._answering = asyncio.Event()
        self._answering.set()
        self._ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        self.connections_accepted = 0

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def behaviour(self) -> Behaviour:
        return self._behaviour

    def behave(self, behaviour: Behaviour) -> None:
        self._behaviour = behaviour
        if behaviour in (Behaviour.HANG, Behaviour.HANG_OPERATIONS):
            self._answering.clear()
        else:
            self._answering.set()

    async def listen(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._accepted, HOST, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop_listening(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        loop = asyncio.get_running_loop()
        task = contextvars.Context().run(loop.create_task, self._serve(reader, writer))
        self._tasks.add(task)
        self._writers.add(writer)

        def _done(finished: asyncio.Task[None]) -> None:
            self._tasks.discard(finished)
            self._writers.discard(writer)

        task.add_done_callback(_done)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = ConnectionInfo(next(self._ids))
        try:
            while await self._serve_one(reader, writer, connection):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, MalformedMessage):
            pass  # the client went away, or sent what the server would end the session for
        finally:
            writer.close()

    async def _serve_one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: ConnectionInfo
    ) -> bool:
        header = read_header(await reader.readexactly(HEADER.size))
        body = await reader.readexactly(header.length - HEADER.size)
        if self._behaviour is Behaviour.DROP:
            return False
        request = parse_request(header, body)
        hello = request.name in HELLO_COMMANDS
        if self._behaviour is Behaviour.HANG or (self._behaviour is Behaviour.HANG_OPERATIONS and not hello):
            await self._answering.wait()
        outcome = await execute(request, self._shared(), self.state, connection)
        if outcome.close:
            return False
        if outcome.reply is not None and not request.more_to_come:
            writer.write(encode_reply(request, outcome.reply, next(self._request_ids)))
            await writer.drain()
        return True
