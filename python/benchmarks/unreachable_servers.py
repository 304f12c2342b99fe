"""Workflow runs against servers that do not answer (issue 28): does every run end by its deadlines?

Run with ``cd python && uv run python -m benchmarks.unreachable_servers`` (``--runs N`` per cell,
``--quick`` for a CI smoke, ``--output PATH``, default ``benchmarks/results/unreachable_servers.md``).

Each run is an Agent Framework workflow of three supersteps (three checkpoint saves) checkpointed
through a ``MongoDBCheckpointStorage`` that owns a real ``pymongo.AsyncMongoClient`` built from a URI,
as a worker's is, with ``operation_timeout`` of one second. Runs go ``--at-once`` at a time (many
clients waiting on the same half-second beat is what made pymongo's lock hang before ADR 0030).
Each cell is one kind of server and one mode:

* servers: **refused** (a port nothing listens on), **silent** (a listener that accepts connections and
  never sends a byte), **dropping** (a listener that closes every connection as soon as it is made);
* modes: **lenient** (a failed save is logged and the run goes on, Agent Framework's default) and
  **strict** (``strict_saves=True``: the first failed save ends the run with
  ``MongoDBStrictSaveFailure``).

Every storage call is timed (a thin wrapper around the storage), as is ``close()``. A call is *on
time* when it ended within ``operation_timeout + DEADLINE_SLACK`` plus one second of scheduling noise;
a run is *on time* when every call it made and its ``close()`` were, and it *hung* when the watchdog
(ten times the run's own bound) had to give up on it. The target: every run on time, none hung.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agent_framework import (
    CheckpointID,
    CheckpointStorage,
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowCheckpoint,
    WorkflowContext,
    handler,
)

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageOptions,
    MongoDBStrictSaveFailure,
)
from agent_framework_mongodb.checkpoints.deadlines import DEADLINE_SLACK

DEFAULT_OUTPUT = Path(__file__).parent / "results" / "unreachable_servers.md"
OPERATION_TIMEOUT = 1.0
NOISE = 1.0
"""Seconds of scheduling delay a shared two-core machine may add to a call that ends on time."""
WORKFLOW = "unreachable-benchmark"


# -- servers that do not answer ------------------------------------------------------------------


@contextlib.asynccontextmanager
async def refused() -> AsyncIterator[str]:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    yield f"mongodb://127.0.0.1:{port}/"


@contextlib.asynccontextmanager
async def _listener(
    on_connect: Callable[[asyncio.StreamWriter, list[asyncio.StreamWriter]], None],
) -> AsyncIterator[str]:
    held: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        on_connect(writer, held)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    try:
        yield f"mongodb://127.0.0.1:{port}/"
    finally:
        server.close()
        for writer in held:
            writer.close()
        await server.wait_closed()


def silent() -> contextlib.AbstractAsyncContextManager[str]:
    """Accepts every connection and never sends a byte."""
    return _listener(lambda writer, held: held.append(writer))


def dropping() -> contextlib.AbstractAsyncContextManager[str]:
    """Closes every connection as soon as it is accepted."""
    return _listener(lambda writer, _held: writer.close())


SERVERS: dict[str, Callable[[], contextlib.AbstractAsyncContextManager[str]]] = {
    "refused": refused,
    "silent": silent,
    "dropping": dropping,
}


# -- the workflow ---------------------------------------------------------------------------------


class _Step(Executor):
    """Passes a counter on; three of them in a row make three supersteps."""

    def __init__(self, name: str, last: bool) -> None:
        super().__init__(id=name)
        self._last = last

    @handler
    async def step(self, count: int, ctx: WorkflowContext[int, int]) -> None:
        if self._last:
            await ctx.yield_output(count + 1)
        else:
            await ctx.send_message(count + 1)


def three_step_workflow(storage: CheckpointStorage, *, name: str = WORKFLOW) -> Workflow:
    """A workflow of three supersteps (three checkpoint saves) that outputs ``[3]`` from ``run(0)``."""
    steps = [_Step("first", last=False), _Step("second", last=False), _Step("third", last=True)]
    builder = WorkflowBuilder(name=name, start_executor=steps[0], checkpoint_storage=storage)
    return builder.add_edge(steps[0], steps[1]).add_edge(steps[1], steps[2]).build()


@dataclasses.dataclass(frozen=True)
class TimedCall:
    name: str
    seconds: float
    error: BaseException | None


class TimedStorage(CheckpointStorage):
    """Delegates to the storage and records each call: its name, how long it took, what it raised."""

    def __init__(self, inner: MongoDBCheckpointStorage) -> None:
        self._inner = inner
        self.calls: list[TimedCall] = []

    async def _timed(self, name: str, call: Awaitable[Any]) -> Any:
        started = time.monotonic()
        try:
            result = await call
        except BaseException as error:
            self.calls.append(TimedCall(name, time.monotonic() - started, error))
            raise
        self.calls.append(TimedCall(name, time.monotonic() - started, None))
        return result

    async def save(self, checkpoint: WorkflowCheckpoint) -> CheckpointID:
        result: CheckpointID = await self._timed("save", self._inner.save(checkpoint))
        return result

    async def load(self, checkpoint_id: CheckpointID) -> WorkflowCheckpoint:
        result: WorkflowCheckpoint = await self._timed("load", self._inner.load(checkpoint_id))
        return result

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        result: list[WorkflowCheckpoint] = await self._timed(
            "list_checkpoints", self._inner.list_checkpoints(workflow_name=workflow_name)
        )
        return result

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        result: bool = await self._timed("delete", self._inner.delete(checkpoint_id))
        return result

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        result: WorkflowCheckpoint | None = await self._timed(
            "get_latest", self._inner.get_latest(workflow_name=workflow_name)
        )
        return result

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        result: list[CheckpointID] = await self._timed(
            "list_checkpoint_ids", self._inner.list_checkpoint_ids(workflow_name=workflow_name)
        )
        return result


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    calls: tuple[float, ...]
    close: float
    ended: str
    """``output`` (lenient: the run finished despite failed saves), ``strict`` (the strict failure
    ended it), or the name of another exception."""


async def one_run(uri: str, index: int, *, strict: bool) -> RunOutcome:
    options = MongoDBCheckpointStorageOptions(
        tenant_id="benchmark",
        workflow_name=WORKFLOW,
        session_id=f"run-{index}",
        operation_timeout=OPERATION_TIMEOUT,
        strict_saves=strict,
    )
    storage = MongoDBCheckpointStorage(connection_string=uri, options=options)
    timed = TimedStorage(storage)
    workflow = three_step_workflow(timed)
    try:
        result = await workflow.run(0)
        ended = "output" if result.get_outputs() == [3] else "no output"
    except MongoDBStrictSaveFailure:
        ended = "strict"
    except Exception as error:
        ended = type(error).__name__
    started = time.monotonic()
    await storage.close()
    return RunOutcome(tuple(call.seconds for call in timed.calls), time.monotonic() - started, ended)


@dataclasses.dataclass
class CellResult:
    server: str
    mode: str
    runs: int = 0
    on_time: int = 0
    hung: int = 0
    calls: int = 0
    slowest_call: float = 0.0
    slowest_close: float = 0.0
    endings: dict[str, int] = dataclasses.field(default_factory=dict)


def call_bound() -> float:
    return OPERATION_TIMEOUT + DEADLINE_SLACK + NOISE


async def run_cell(
    server: str,
    factory: Callable[[], contextlib.AbstractAsyncContextManager[str]],
    *,
    strict: bool,
    runs: int,
    at_once: int,
) -> CellResult:
    cell = CellResult(server, "strict" if strict else "lenient")
    # The watchdog: far beyond a run's own bound, so it only catches runs that hang.
    watchdog = 10 * 5 * call_bound()
    async with factory() as uri:
        index = 0
        while index < runs:
            batch = range(index, min(runs, index + at_once))
            tasks = [asyncio.ensure_future(one_run(uri, i, strict=strict)) for i in batch]
            done, pending = await asyncio.wait(tasks, timeout=watchdog)
            for task in pending:
                task.cancel()
            cell.runs += len(tasks)
            cell.hung += len(pending)
            for task in done:
                outcome = task.result()
                cell.calls += len(outcome.calls)
                cell.slowest_call = max(cell.slowest_call, *outcome.calls, 0.0)
                cell.slowest_close = max(cell.slowest_close, outcome.close)
                cell.endings[outcome.ended] = cell.endings.get(outcome.ended, 0) + 1
                if all(took <= call_bound() for took in (*outcome.calls, outcome.close)):
                    cell.on_time += 1
            index += len(tasks)
    return cell


def report(cells: Sequence[CellResult], *, runs: int, at_once: int, started: datetime) -> str:
    lines = [
        "# Workflow runs against servers that do not answer (issue 28)",
        "",
        f"- date (UTC): {started:%Y-%m-%d %H:%M}",
        f"- Python {sys.version.split()[0]}; runs per cell: {runs}; at once: {at_once}; "
        f"operation_timeout: {OPERATION_TIMEOUT:g} s; a call is on time within {call_bound():g} s "
        f"(deadline + {DEADLINE_SLACK:g} s slack + {NOISE:g} s noise)",
        "",
        "## Runs",
        "",
        "| server | mode | runs | on time | hung | calls | slowest call (s) | slowest close (s) "
        "| how runs ended |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for cell in cells:
        endings = ", ".join(f"{name} {count}" for name, count in sorted(cell.endings.items()))
        lines.append(
            f"| {cell.server} | {cell.mode} | {cell.runs} | {cell.on_time} | {cell.hung} | {cell.calls} | "
            f"{cell.slowest_call:.2f} | {cell.slowest_close:.2f} | {endings} |"
        )
    total = sum(cell.runs for cell in cells)
    on_time = sum(cell.on_time for cell in cells)
    hung = sum(cell.hung for cell in cells)
    verdict = "held" if on_time == total and hung == 0 else "MISSED"
    lines += ["", "## Target", "", "| target | measured | verdict |", "| --- | ---: | ---: |"]
    lines.append(f"| every run on time, none hung | {on_time} / {total} on time, {hung} hung | {verdict} |")
    return "\n".join(lines) + "\n"


async def main_async(arguments: argparse.Namespace) -> tuple[str, int]:
    started = datetime.now(timezone.utc)
    cells: list[CellResult] = []
    for server, factory in SERVERS.items():
        for strict in (False, True):
            cells.append(
                await run_cell(server, factory, strict=strict, runs=arguments.runs, at_once=arguments.at_once)
            )
            print(f"{server} {'strict' if strict else 'lenient'}: done", file=sys.stderr)
    hung = sum(cell.hung for cell in cells)
    return report(cells, runs=arguments.runs, at_once=arguments.at_once, started=started), hung


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--runs", type=int, default=100, help="workflow runs per server and mode (default 100)"
    )
    parser.add_argument("--at-once", type=int, default=25, help="runs in flight together (default 25)")
    parser.add_argument("--quick", action="store_true", help="CI smoke: 4 runs per cell, 4 at once")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown report path")
    arguments = parser.parse_args(argv)
    if arguments.quick:
        arguments.runs, arguments.at_once = 4, 4
    # Every failed save is logged (WARNING by Agent Framework, ERROR by the storage): thousands here.
    logging.disable(logging.ERROR)
    text, hung = asyncio.run(main_async(arguments))
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(text, encoding="utf-8")
    print(text)
    if hung:
        # A late call may be the machine's noise; a hung run never is.
        sys.exit(f"{hung} workflow run(s) hung")


if __name__ == "__main__":
    main()
