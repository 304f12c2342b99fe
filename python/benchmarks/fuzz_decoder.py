"""Long-run fuzz of the checkpoint decoder, with the generators of the normal-suite fuzz.

Run from ``python/``::

    uv run python -m benchmarks.fuzz_decoder --seconds 300

A worker process draws payloads from ``tests/unit/codec/hostile_corpus.py`` (opcode streams
from a pickle grammar, trees with hostile records, mutated real payloads) and judges each one:
decode must return a checkpoint that a save accepts again, or raise a ``MongoDBMappingError``,
and change nothing. The worker runs under an address-space limit and writes every payload to
``current.bin`` before decoding it, so when it dies (a signal) or hangs, the parent keeps that
payload as a reproducer, counts the crash, and starts a new worker. Findings (an escaped
exception, a side effect, a checkpoint a save refuses) are saved beside it, deduplicated by
kind; the ones the documented residual explains (``hostile_corpus.known_bug``) are counted.

The parent prints the statistics at the end: examples per generator, outcomes by exception
type, distinct error messages, documented residuals, findings, crashes and hangs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

# The codec imports this module lazily the first time a payload names an unlisted loaded class
# (see tests/unit/codec/test_hostile_payloads.py); importing it here keeps the import checks exact.
import agent_framework._workflows._checkpoint_encoding  # noqa: F401
from hypothesis import HealthCheck, Phase, given, settings
from tests.unit.codec import hostile_corpus as corpus

__all__ = ["FuzzStats", "main"]

GENERATORS: Final = ("opcode_streams", "tree_payloads", "mutated_payloads")
HANG_SECONDS: Final = 60.0
STATS_EVERY: Final = 2.0


class FuzzStats:
    """Counters one worker accumulates and the parent merges."""

    def __init__(self) -> None:
        self.examples: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.messages: Counter[str] = Counter()
        self.known: Counter[str] = Counter()
        self.findings: Counter[str] = Counter()
        self.slowest = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "examples": dict(self.examples),
            "outcomes": dict(self.outcomes),
            "messages": dict(self.messages),
            "known": dict(self.known),
            "findings": dict(self.findings),
            "slowest": self.slowest,
        }

    def merge(self, data: dict[str, Any]) -> None:
        self.examples.update(data["examples"])
        self.outcomes.update(data["outcomes"])
        self.messages.update(data["messages"])
        self.known.update(data["known"])
        self.findings.update(data["findings"])
        self.slowest = max(self.slowest, data["slowest"])


def _template(message: str) -> str:
    """A message with its quoted names and numbers blanked, to count kinds of refusal."""
    message = re.sub(r"'[^']*'", "'…'", message)
    return re.sub(r"\d+", "N", message)[:160]


class _Worker:
    """One worker process: draws from every generator in turn until ``until`` and judges each."""

    def __init__(self, until: float, state: Path, memo_limit: int) -> None:
        self.until = until
        self.state = state
        self.cwd = state / "cwd"
        self.cwd.mkdir(exist_ok=True)
        self.codec = corpus.fuzz_codec()
        self.stats = FuzzStats()
        self.current = state / "current.bin"
        self.stats_file = state / f"stats-{os.getpid()}.json"
        self.last_write = time.monotonic()
        self.strategies = {
            "opcode_streams": corpus.opcode_streams(memo_limit=memo_limit),
            "tree_payloads": corpus.tree_payloads(),
            "mutated_payloads": corpus.mutated_payloads(memo_limit=memo_limit),
        }

    def run(self) -> None:
        os.chdir(self.cwd)
        run_settings = settings(
            max_examples=2_000,
            deadline=None,
            database=None,
            phases=[Phase.generate],  # findings are kept as they are, not shrunk
            suppress_health_check=list(HealthCheck),
        )
        runners = [
            run_settings(given(payload=strategy)(self._examiner(name)))
            for name, strategy in self.strategies.items()
        ]
        while time.time() < self.until:
            for draw in runners:
                if time.time() < self.until:
                    draw()
        self.flush()
        self.current.unlink(missing_ok=True)

    def _examiner(self, generator: str) -> Any:
        def examine(payload: bytes) -> None:
            self.examine(generator, payload)

        return examine

    def flush(self) -> None:
        self.stats_file.write_text(json.dumps(self.stats.to_json()))
        self.last_write = time.monotonic()

    def examine(self, generator: str, payload: bytes) -> None:
        if time.time() >= self.until:
            return
        self.current.write_bytes(payload)
        (self.state / "current.generator").write_text(generator)
        started = time.perf_counter()
        verdict = corpus.judge(payload, self.codec, self.cwd)
        stats = self.stats
        stats.slowest = max(stats.slowest, time.perf_counter() - started)
        stats.examples[generator] += 1
        stats.outcomes[verdict.outcome] += 1
        if verdict.message:
            stats.messages[_template(verdict.message)] += 1
        if corpus.failed(verdict):
            bug = corpus.known_bug(verdict)
            if bug is not None:
                stats.known[bug] += 1
            else:
                self.keep(generator, payload, verdict)
        if time.monotonic() - self.last_write > STATS_EVERY:
            self.flush()

    def keep(self, generator: str, payload: bytes, verdict: corpus.Verdict) -> None:
        """Save the first payload of each kind of finding."""
        kind = _template(verdict.outcome + " " + "; ".join(verdict.problems))[:120]
        if self.stats.findings[kind] == 0:
            name = f"finding-{len(self.stats.findings):03d}-{os.getpid()}"
            (self.state / f"{name}.bin").write_bytes(payload)
            found = {
                "outcome": verdict.outcome,
                "message": verdict.message,
                "problems": list(verdict.problems),
                "generator": generator,
            }
            (self.state / f"{name}.json").write_text(json.dumps(found, indent=2))
        self.stats.findings[kind] += 1


def _report(stats: FuzzStats, crashes: list[dict[str, Any]], seconds: float, state: Path) -> str:
    log = state / "worker-stderr.log"
    stderr_lines = len(log.read_text(errors="replace").splitlines()) if log.exists() else 0
    total = sum(stats.examples.values())
    lines = [
        f"decoder fuzz: {total:,} examples in {seconds:.0f} s ({total / max(seconds, 1):.0f}/s); "
        f"slowest example {stats.slowest:.2f} s",
        "examples by generator: "
        + ", ".join(f"{name} {count:,}" for name, count in sorted(stats.examples.items())),
        "outcomes:",
        *(f"  {count:>9,}  {outcome}" for outcome, count in stats.outcomes.most_common()),
        f"distinct error messages (names and numbers blanked): {len(stats.messages)}",
        *(f"  {count:>9,}  {message}" for message, count in stats.messages.most_common(25)),
        "documented residuals reproduced: "
        + (", ".join(f"{bug} x{count:,}" for bug, count in sorted(stats.known.items())) or "none"),
        f"new findings: {sum(stats.findings.values())} ({len(stats.findings)} kinds)",
        *(f"  {count:>9,}  {kind}" for kind, count in stats.findings.most_common()),
        f"worker stderr lines: {stderr_lines} (CPython prints some C-level errors itself, e.g. "
        "'SystemError: deallocated bytearray object has exported buffers' after a failed BYTEARRAY8)",
        f"crashes and hangs: {len(crashes)}",
        *(
            f"  {crash['kind']} ({crash['detail']}) in {crash['generator']}: {crash['payload']}"
            for crash in crashes
        ),
        f"reproducers and findings: {state}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (default 60)")
    parser.add_argument("--memory-limit", type=int, default=2 << 30, help="worker address space in bytes")
    parser.add_argument(
        "--memo-limit", type=int, default=1 << 20, help="largest memo index the grammar writes"
    )
    parser.add_argument(
        "--state", type=Path, default=None, help="directory for reproducers (default: a temp dir)"
    )
    parser.add_argument("--worker", type=float, default=None, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    state: Path = arguments.state or Path(tempfile.mkdtemp(prefix="afm-fuzz-"))
    state.mkdir(parents=True, exist_ok=True)
    if arguments.worker is not None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_AS, (arguments.memory_limit, arguments.memory_limit))
        _Worker(arguments.worker, state, arguments.memo_limit).run()
        return 0

    started = time.time()
    until = started + arguments.seconds
    crashes: list[dict[str, Any]] = []
    python_dir = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(python_dir), os.environ.get("PYTHONPATH", "")])}
    while time.time() < until - 1:
        command = [
            sys.executable,
            "-m",
            "benchmarks.fuzz_decoder",
            "--worker",
            str(until),
            "--state",
            str(state),
            "--memory-limit",
            str(arguments.memory_limit),
            "--memo-limit",
            str(arguments.memo_limit),
        ]
        with (state / "worker-stderr.log").open("ab") as stderr:
            worker = subprocess.Popen(command, cwd=python_dir, env=env, stderr=stderr)  # noqa: S603 - fixed arguments
        current = state / "current.bin"
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
            generator_file = state / "current.generator"
            reproducer = state / f"crash-{len(crashes):03d}.bin"
            if current.exists():
                shutil.copy(current, reproducer)
                current.unlink()
            detail = (
                "no progress for 60 s"
                if hung
                else (signal.Signals(-code).name if code < 0 else f"exit code {code}")
            )
            crashes.append(
                {
                    "kind": "hang" if hung else "crash",
                    "detail": detail,
                    "generator": generator_file.read_text() if generator_file.exists() else "?",
                    "payload": str(reproducer),
                }
            )
    stats = FuzzStats()
    for stats_file in sorted(state.glob("stats-*.json")):
        stats.merge(json.loads(stats_file.read_text()))
    print(_report(stats, crashes, time.time() - started, state))
    return 1 if crashes or stats.findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
