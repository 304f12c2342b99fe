"""Long-run fuzz of the chunked load path (issue 13), with the mutations of the normal-suite test.

Run from ``python/``::

    uv run python -m benchmarks.fuzz_chunks --seconds 300
    uv run python -m benchmarks.fuzz_chunks --seconds 300 --fork

A worker process plants a real chunked checkpoint in the in-process engine, then, example after
example, mutates its root or one of its chunks (bit flips, byte writes, insertions, deletions,
splices of other chunks' bytes, truncations; of the stored bytes or of the decompressed body) and,
for half of the examples, gives every changed chunk its correct new address and rewrites the
leaves and root that name it, so that the mutation passes the address check and reaches the
parser (``tests/unit/codec/chunk_corpus.py``). ``storage.load`` must then raise a package mapping
error, or return the saved checkpoint, or (re-addressed only) another checkpoint that a save
accepts again, and change nothing (``Guard``).

With ``--fork`` every example also forks the mutated run (``fork_run(keep="chain")`` into a new
session: ADR 0040's transplant, or its decode-and-save fallback), after the load on even examples
and before it on odd ones, under the same Guard (``chunk_corpus.judge_fork``). Three examples in
four fork into an emptied session under whose context the intact run transplants (under most, its
nested list is cut otherwise and the fork re-encodes it), the fourth into a fresh one. The fork must raise
a package error (mapping, integrity, concurrency, not found), or return, and then the copy's load
of each copied id must end as the source's load of it does: the same checkpoint (equal
``to_dict()`` identity hash) or a package mapping error on both; the source run's documents stay
as they were. An outcome then reads ``<load outcome>; fork <fork outcome>``. Without the flag the
fuzz is the load-only one it always was.

The worker runs under an address-space limit and writes each plan to ``current.json`` before
loading it, so when it dies or hangs the parent keeps that plan as a reproducer and starts a new
worker. Findings are saved beside it; the parent prints the statistics at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

# Imported lazily by the codec the first time a payload names an unlisted loaded class (BUG-2 in
# tests/unit/codec/test_hostile_payloads.py); imported here so the Guard's import check is exact.
import agent_framework._workflows._checkpoint_encoding  # noqa: F401
from hypothesis import HealthCheck, Phase, given, settings
from tests.unit.codec import chunk_corpus as chunks

from agent_framework_mongodb.testing import InMemoryMongoClient

__all__ = ["main"]

HANG_SECONDS: Final = 60.0
STATS_EVERY: Final = 2.0


def _kind(outcome: str, problems: Sequence[str]) -> str:
    return (outcome + " " + "; ".join(problems))[:160]


class _Worker:
    def __init__(self, until: float, state: Path, *, fork: bool = False) -> None:
        self.until = until
        self.fork = fork
        self.count = 0
        self.state = state
        self.cwd = state / "cwd"
        self.cwd.mkdir(exist_ok=True)
        self.examples: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.findings: Counter[str] = Counter()
        self.slowest = 0.0
        self.current = state / "current.json"
        self.stats_file = state / f"stats-{os.getpid()}.json"
        self.last_write = time.monotonic()
        self.loop = asyncio.new_event_loop()
        self.client = InMemoryMongoClient()
        self.collection = self.client["fuzz"]["chunks"]
        self.base = self.loop.run_until_complete(
            chunks.load_base(self.collection, chunks.options(signed=False))
        )

    def run(self) -> None:
        os.chdir(self.cwd)
        run_settings = settings(
            max_examples=500,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        draw = run_settings(given(plan=chunks.mutations())(self.examine))
        while time.time() < self.until:
            draw()
        self.flush()
        self.current.unlink(missing_ok=True)

    def examine(self, plan: Any) -> None:
        if time.time() >= self.until:
            return
        target, index, readdress, steps = plan
        self.count += 1
        fork_first = self.count % 2 == 1
        written: list[Any] = [target, index, readdress, [[*s[:3], s[3].hex()] for s in steps]]
        if self.fork:
            written.append({"fork_first": fork_first})
        self.current.write_text(json.dumps(written))
        started = time.perf_counter()
        mutation = chunks.mutate(self.base, plan)
        if self.fork:
            outcome, problems = chunks.judge_fork(
                self.loop,
                self.collection,
                self.base,
                mutation,
                self.cwd,
                # Three in four into the empty session the intact run transplants into.
                to_session_id=None if self.count % 4 else f"fork-{os.getpid()}-{self.count}",
                fork_first=fork_first,
            )
        else:
            outcome, problems = chunks.judge_mutation(
                self.loop, self.collection, self.base, mutation, self.cwd
            )
        self.slowest = max(self.slowest, time.perf_counter() - started)
        self.examples[mutation.description] += 1
        self.outcomes[f"{mutation.description}: {outcome}"] += 1
        if problems:
            kind = _kind(outcome, problems)
            if self.findings[kind] == 0:
                name = f"finding-{len(self.findings):03d}-{os.getpid()}.json"
                (self.state / name).write_text(
                    json.dumps(
                        {
                            "plan": json.loads(self.current.read_text()),
                            "outcome": outcome,
                            "problems": problems,
                        }
                    )
                )
            self.findings[kind] += 1
        if time.monotonic() - self.last_write > STATS_EVERY:
            self.flush()

    def flush(self) -> None:
        data = {
            "examples": dict(self.examples),
            "outcomes": dict(self.outcomes),
            "findings": dict(self.findings),
            "slowest": self.slowest,
        }
        self.stats_file.write_text(json.dumps(data))
        self.last_write = time.monotonic()


def _report(state: Path, crashes: list[str], seconds: float, *, fork: bool = False) -> str:
    examples: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    findings: Counter[str] = Counter()
    slowest = 0.0
    for stats_file in sorted(state.glob("stats-*.json")):
        data = json.loads(stats_file.read_text())
        examples.update(data["examples"])
        outcomes.update(data["outcomes"])
        findings.update(data["findings"])
        slowest = max(slowest, data["slowest"])
    total = sum(examples.values())
    return "\n".join(
        [
            f"chunk fuzz{' with fork_run' if fork else ''}: {total:,} examples in {seconds:.0f} s "
            f"({total / max(seconds, 1):.0f}/s); "
            f"slowest example {slowest:.2f} s",
            "examples by mutation: "
            + ", ".join(f"{name} {count:,}" for name, count in sorted(examples.items())),
            "outcomes:",
            *(f"  {count:>9,}  {outcome}" for outcome, count in outcomes.most_common()),
            f"findings: {sum(findings.values())} ({len(findings)} kinds)",
            *(f"  {count:>9,}  {kind}" for kind, count in findings.most_common()),
            f"crashes and hangs: {len(crashes)}",
            *(f"  {crash}" for crash in crashes),
            f"reproducers and findings: {state}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (default 60)")
    parser.add_argument("--memory-limit", type=int, default=2 << 30, help="worker address space in bytes")
    parser.add_argument("--state", type=Path, default=None, help="directory for reproducers")
    parser.add_argument(
        "--fork", action="store_true", help="also fork every mutated run and load the copy (judge_fork)"
    )
    parser.add_argument("--worker", type=float, default=None, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    state: Path = arguments.state or Path(tempfile.mkdtemp(prefix="afm-chunk-fuzz-"))
    state.mkdir(parents=True, exist_ok=True)
    if arguments.worker is not None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_AS, (arguments.memory_limit, arguments.memory_limit))
        _Worker(arguments.worker, state, fork=arguments.fork).run()
        return 0
    started = time.time()
    until = started + arguments.seconds
    crashes: list[str] = []
    python_dir = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(python_dir), os.environ.get("PYTHONPATH", "")])}
    while time.time() < until - 1:
        command = [
            sys.executable,
            "-m",
            "benchmarks.fuzz_chunks",
            "--worker",
            str(until),
            "--state",
            str(state),
            "--memory-limit",
            str(arguments.memory_limit),
            *(["--fork"] if arguments.fork else []),
        ]
        with (state / "worker-stderr.log").open("ab") as stderr:
            worker = subprocess.Popen(command, cwd=python_dir, env=env, stderr=stderr)  # noqa: S603 - fixed arguments
        current = state / "current.json"
        hung = False
        while worker.poll() is None:
            time.sleep(1.0)
            if current.exists() and time.time() - current.stat().st_mtime > HANG_SECONDS:
                worker.kill()
                hung = True
        code = worker.wait()
        if code > 0 and not current.exists():
            print(f"the worker failed (exit code {code}) outside any example; stopping", file=sys.stderr)
            break
        if code != 0 or hung:
            reproducer = state / f"crash-{len(crashes):03d}.json"
            if current.exists():
                current.replace(reproducer)
            crashes.append(f"{'hang' if hung else f'exit {code}'}: {reproducer}")
    print(_report(state, crashes, time.time() - started, fork=arguments.fork))
    return 1 if crashes or any(state.glob("finding-*.json")) else 0


if __name__ == "__main__":
    raise SystemExit(main())
