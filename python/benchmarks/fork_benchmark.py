"""Forking a run (issue 31, ADR 0036): what ``fork_run`` costs on a long chunked run.

Run with ``cd python && uv run python -m benchmarks.fork_benchmark`` (``--quick``: 100 supersteps;
``--output PATH``, default ``benchmarks/results/fork_benchmark.md``).

The run is the long-run benchmark's shape: an agent conversation growing two messages per superstep,
one checkpoint per superstep chained by ``previous_checkpoint_id``, saved through the storage over the
in-process engine (``w: "majority"``, indexes created, the server clock moving 10 s a superstep). Then,
in the same process, it is forked into new sessions three ways (the latest checkpoint only, the last
10, the whole chain), a repeated whole-chain fork, and the same three forks of the same run signed.
For each: the roots copied, the bytes the fork **sent** to the collection
(``benchmarks._metered.MeteredCollection``: every filter, update and document written, chunk data
included), its round trips and wall time; set side by side with the **newest logical payload** (the
newest checkpoint's whole tree pickled, as ``payload_bytes`` records it) and the bytes the **source
run stores** (every document of its scope, BSON).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import secrets
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import bson
from agent_framework import Message, WorkflowCheckpoint

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.forking import ForkKeep
from agent_framework_mongodb.testing import InMemoryMongoClient

from ._metered import MeteredCollection
from ._report import machine_facts, markdown_table, write_report
from .checkpoints import build_conversation

DEFAULT_OUTPUT = Path(__file__).parent / "results" / "fork_benchmark.md"
WORKFLOW = "support-workflow"
EXECUTOR_ID = "support-agent"
SUPERSTEP = timedelta(seconds=10)
KEY = secrets.token_bytes(32)


@dataclasses.dataclass(frozen=True)
class _Fork:
    label: str
    signed: bool
    roots: int
    already: int
    transplanted: int
    """Of ``roots``, those moved as stored (ADR 0040); the rest were decoded and saved."""
    sent_bytes: int
    trips: int
    seconds: float
    state_bytes: int
    """The copied checkpoints' ``payload_bytes``, summed: what a copy without shared chunks sends."""


@dataclasses.dataclass(frozen=True)
class _Run:
    supersteps: int
    newest_payload: int
    stored_bytes: int
    build_seconds: float
    forks: list[_Fork]


def _checkpoint(step: int, history: list[Message], previous: str | None, now: datetime) -> WorkflowCheckpoint:
    executor_state: dict[str, object] = {"cache": [], "full_conversation": list(history)}
    return WorkflowCheckpoint(
        workflow_name=WORKFLOW,
        graph_signature_hash="6f1c0a9e" * 8,
        checkpoint_id=f"step-{step:05d}",
        previous_checkpoint_id=previous,
        timestamp=now.isoformat(),
        state={"_executor_state": {EXECUTOR_ID: executor_state}, "superstep": step},
        iteration_count=step,
    )


async def _stored_bytes(engine: InMemoryMongoClient, session_id: str) -> int:
    collection = engine["bench"]["checkpoints"]
    return sum([len(bson.encode(document)) async for document in collection.find({"session_id": session_id})])


async def _measure(supersteps: int, *, signed: bool) -> _Run:
    engine = InMemoryMongoClient(w="majority")
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    engine.clock = lambda: now
    metered = MeteredCollection(engine["bench"]["checkpoints"])
    options = MongoDBCheckpointStorageOptions(
        tenant_id="bench",
        workflow_name=WORKFLOW,
        session_id="source",
        signing_keys=[KEY] if signed else [],
    )
    storage = MongoDBCheckpointStorage(metered, options=options)
    await storage.ensure_indexes()
    messages = build_conversation(2 * supersteps)
    started = time.perf_counter()
    previous: str | None = None
    for step in range(1, supersteps + 1):
        now += SUPERSTEP
        checkpoint = _checkpoint(step, messages[: 2 * step], previous, now)
        previous = await storage.save(checkpoint)
    build_seconds = time.perf_counter() - started
    stored = await _stored_bytes(engine, "source")
    last_bytes = await _newest_payload_bytes(engine)
    plans: list[tuple[str, str, ForkKeep]] = [
        ("latest", "fork-latest", "latest"),
        ("last 10", "fork-last-10", 10),
        ("whole chain", "fork-chain", "chain"),
        ("whole chain, repeated", "fork-chain", "chain"),
    ]
    forks: list[_Fork] = []
    for label, target, keep in plans:
        now += SUPERSTEP
        metered.reset()
        begun = time.perf_counter()
        result = await storage.fork_run(to_session_id=target, keep=keep)
        seconds = time.perf_counter() - begun
        forks.append(
            _Fork(
                label=label,
                signed=signed,
                roots=result.copied,
                already=result.already_copied,
                transplanted=result.transplanted,
                sent_bytes=metered.sent_bytes,
                trips=len(metered.take()),
                seconds=seconds,
                state_bytes=result.payload_bytes,
            )
        )
    return _Run(supersteps, last_bytes, stored, build_seconds, forks)


async def _newest_payload_bytes(engine: InMemoryMongoClient) -> int:
    collection = engine["bench"]["checkpoints"]
    newest: dict[str, Any] | None = await collection.find_one(
        {"_kind": "workflow_checkpoint", "session_id": "source"}, sort=[("sequence", -1)]
    )
    size = None if newest is None else newest.get("payload_bytes")
    return int(size) if isinstance(size, int) else 0


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _table(run: _Run) -> str:
    rows = [
        [
            fork.label,
            "yes" if fork.signed else "no",
            str(fork.roots),
            str(fork.already),
            str(fork.transplanted),
            f"{fork.sent_bytes:,}",
            _x(fork.sent_bytes / run.newest_payload),
            _x(fork.sent_bytes / run.stored_bytes),
            _x(fork.sent_bytes / fork.state_bytes) if fork.state_bytes else "-",
            str(fork.trips),
            f"{fork.seconds * 1000:,.0f}",
        ]
        for fork in run.forks
    ]
    header = [
        "fork",
        "signed",
        "roots copied",
        "already there",
        "moved as stored",
        "bytes sent",
        "sent / newest payload",
        "sent / source stored",
        "sent / copied state",
        "round trips",
        "ms",
    ]
    return markdown_table(header, rows, right=2)


async def fork_section(supersteps: int) -> str:
    unsigned = await _measure(supersteps, signed=False)
    signed = await _measure(supersteps, signed=True)
    return f"""## Fork a run ({supersteps} supersteps)

The source run: newest logical payload {unsigned.newest_payload:,} bytes; the run stores
{unsigned.stored_bytes:,} bytes ({_x(unsigned.stored_bytes / unsigned.newest_payload)} its newest payload),
built in {unsigned.build_seconds:.1f} s ({signed.build_seconds:.1f} s signed).

{_table(unsigned)}
{_table(signed).split(chr(10), 2)[2]}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="CI-speed smoke: 100 supersteps")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown report path")
    arguments = parser.parse_args(argv)
    supersteps = 100 if arguments.quick else 1_000
    started = time.perf_counter()
    section = asyncio.run(fork_section(supersteps))
    facts = "\n".join(f"- {name}: {value}" for name, value in machine_facts())
    report = f"""# Fork benchmark

Command: `cd python && uv run python -m benchmarks.fork_benchmark{" --quick" if arguments.quick else ""}`
({time.perf_counter() - started:.0f} s in all). What `fork_run` sends and how long it takes
(docs/adr/0036-fork-a-run.md, 0040): a chunked checkpoint's stored root and leaves are moved into the
target's chunk context without decoding (each distinct leaf once per fork; chunk addresses bind their
run, so the source's chunks cannot be referenced), the rest loaded and saved through the target's `save`.

{facts}

{section}"""
    write_report(report, arguments.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
