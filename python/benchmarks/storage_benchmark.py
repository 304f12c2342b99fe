"""Storage benchmark: run ``cd python && uv run python -m benchmarks.storage_benchmark``.

Options: ``--repeat N`` (timed repetitions per cell, default 5), ``--quick`` (a CI-speed smoke:
10- and 200-message checkpoints, 3 repetitions, fewer throughput saves) and ``--output PATH``
(default ``benchmarks/results/storage_benchmark.md``). ``--profile`` prints cProfile output for
save and load even when the targets pass.

In one run, on the same checkpoints (``benchmarks.checkpoints.build_checkpoint`` with 10, 200 and
2000 messages), it measures medians (milliseconds) of ``save``, ``load``, ``get_latest`` and a
100-checkpoint page for:

* mongo-client: ``MongoDBCheckpointStorage`` over ``InstantCollection`` (``benchmarks._doubles``),
  a collection that answers at once: the storage's client-side cost, including the BSON encoding
  of requests and decoding of replies that pymongo does, but no network, server or driver pool;
* mongo-signed: the same over ``InstantCollection`` with ``signing_keys`` set (a 32-byte key), so
  every save signs and every read verifies an HMAC-SHA256;
* mongo-engine: the same storage over the in-process engine (``InMemoryMongoClient``, built on
  mongomock: a functional double that copies documents on every query, not a model of a server);
* file: Agent Framework's ``FileCheckpointStorage`` on a temporary directory;
* memory: Agent Framework's ``InMemoryCheckpointStorage``;
* codec: ``CheckpointCodec.encode`` / ``decode`` alone, the share of save and load the codec takes.

Each read storage holds the same 100 checkpoints; ``load`` reads the 50th. The page is
``list_checkpoint_page(limit=100)`` for the MongoDB storage and ``list_checkpoints`` for the
baselines (their nearest equivalent, which has no limit). ``get_latest`` of ``FileCheckpointStorage``
decodes every file of the run (it is ``list_checkpoints`` plus ``max``), so it grows with the run.
Contenders are interleaved per repetition, ``gc.collect()`` runs before every timed call and GC
stays enabled. It also counts round trips per operation (over the engine), measures the save
throughput of 50 concurrent runs sharing one instant collection, and the engine's scale
(``benchmarks.engine_scale``: a save into 500, 5,000 and 50,000 stored checkpoints, in one run and
over 1,000 runs, and ``clear_run`` of 5,000 and 50,000; ``--quick`` uses 200 and 2,000 for both),
and a page of 100 runs of 100, 1,000 and 10,000 checkpoints each (``--quick``: 10 and 100).
It ends with the long-run section of ``benchmarks.long_runs`` (issue 13; its own docstring).

Targets (issue 8): mongo-client and mongo-signed ``save`` <= 0.9x and ``load`` <= 0.5x
``FileCheckpointStorage`` on the 200- and 2000-message checkpoints. Issue 10: over the engine, a
save into 50,000 checkpoints <= 1.5x a save into 500, and ``clear_run`` linear in the run's size.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import gc
import io
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agent_framework import FileCheckpointStorage, InMemoryCheckpointStorage, WorkflowCheckpoint

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.codec import CheckpointCodec
from agent_framework_mongodb.testing import InMemoryMongoClient
from benchmarks._doubles import CountingCollection, InstantCollection, waves_text
from benchmarks._report import machine_facts, markdown_table, write_report
from benchmarks.checkpoints import CONVERSATION_SIZES, build_checkpoint
from benchmarks.engine_scale import ScaleSettings, engine_scale_section
from benchmarks.long_runs import FULL, QUICK, long_run_section

__all__ = ["main"]

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "storage_benchmark.md"
PAGE_ITEMS = 100
RUNS = 50
TARGET_SIZES = (200, 2000)
CONTENDERS = ("mongo-client", "mongo-signed", "mongo-engine", "file", "memory", "codec")
TARGETS = {"save": 0.5, "load": 0.35}
"""Largest ratio to ``FileCheckpointStorage`` each client-side operation may take: issue 22's
(issue 8's were 0.9 and 0.5)."""
SIGNED_CONTENDERS = ("mongo-client", "mongo-signed")
SIGNING_KEY = bytes(range(32))
"""A fixed benchmark key: what is measured is the HMAC's cost, not its secrecy."""
OPERATIONS = ("save", "load", "get_latest", "page")
BASELINE = "file"
FULL_SCALE = ScaleSettings(
    save_sizes=(500, 5_000, 50_000),
    clear_sizes=(5_000, 50_000),
    saves=50,
    page_run_sizes=(100, 1_000, 10_000),
)
QUICK_SCALE = ScaleSettings(
    save_sizes=(200, 2_000), clear_sizes=(200, 2_000), saves=20, page_run_sizes=(10, 100)
)

Operation = Callable[[], Awaitable[object]]


@dataclasses.dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]
    repeat: int
    saves_per_run: int
    throughput_sizes: tuple[int, ...]
    quick: bool
    scale: ScaleSettings


def _variant(
    base: WorkflowCheckpoint, checkpoint_id: str, previous: str | None, second: int
) -> WorkflowCheckpoint:
    """The same content under another id (shallow: the state objects are shared)."""
    return dataclasses.replace(
        base,
        checkpoint_id=checkpoint_id,
        previous_checkpoint_id=previous,
        timestamp=f"2025-01-02T03:{second // 60 % 60:02d}:{second % 60:02d}.000000+00:00",
    )


def _options(workflow_name: str, session_id: str, *, signed: bool = False) -> MongoDBCheckpointStorageOptions:
    return MongoDBCheckpointStorageOptions(
        tenant_id="bench",
        workflow_name=workflow_name,
        session_id=session_id,
        signing_keys=(SIGNING_KEY,) if signed else (),
    )


async def _timed(operation: Operation) -> float:
    # Let the loop run what earlier calls left in its queue (an executor future still holding
    # a FileCheckpointStorage result is freed there), so no contender pays for another's garbage.
    for _ in range(3):
        await asyncio.sleep(0)
    gc.collect()
    started = time.perf_counter()
    result = await operation()
    elapsed = time.perf_counter() - started
    del result  # freeing the result (100 checkpoints for a page) is not the call's cost
    return elapsed


class Contender:
    """One storage under test: a store to save into and a store holding the read set."""

    def __init__(self, name: str, save_store: Any, read_store: Any, *, settle: Callable[[], None]) -> None:
        self.name = name
        self.save_store = save_store
        self.read_store = read_store
        self.settle = settle

    def operations(self, checkpoint: WorkflowCheckpoint, load_id: str) -> dict[str, Operation]:
        workflow = checkpoint.workflow_name
        read = self.read_store
        if isinstance(read, MongoDBCheckpointStorage):
            page: Operation = lambda: read.list_checkpoint_page(workflow_name=workflow, limit=PAGE_ITEMS)  # noqa: E731
        else:
            page = lambda: read.list_checkpoints(workflow_name=workflow)  # noqa: E731
        return {
            "save": lambda: self.save_store.save(checkpoint),
            "load": lambda: read.load(load_id),
            "get_latest": lambda: read.get_latest(workflow_name=workflow),
            "page": page,
        }

    async def after_save(self, checkpoint_id: str) -> None:
        """Undo a timed save outside the timing, so every save meets the same store."""
        self.settle()
        if not isinstance(self.save_store, MongoDBCheckpointStorage):
            await self.save_store.delete(checkpoint_id)


class CodecContender(Contender):
    """The codec alone: encode as save's share, decode of the same bytes as load's share."""

    def __init__(self) -> None:
        super().__init__("codec", None, None, settle=lambda: None)
        self.codec = CheckpointCodec()

    def operations(self, checkpoint: WorkflowCheckpoint, load_id: str) -> dict[str, Operation]:
        encoded = self.codec.encode(checkpoint)

        async def encode() -> object:
            return self.codec.encode(checkpoint)

        async def decode() -> object:
            return self.codec.decode(encoded.payload, checksum=encoded.payload_checksum)

        return {"save": encode, "load": decode}

    async def after_save(self, checkpoint_id: str) -> None:
        return None


async def _contenders(size: int, workflow: str, directory: Path) -> list[Contender]:
    instant = InstantCollection()
    client_base = MongoDBCheckpointStorage(instant, options=_options(workflow, f"save-{size}"))
    signed_instant = InstantCollection()
    signed_base = MongoDBCheckpointStorage(
        signed_instant, options=_options(workflow, f"save-{size}", signed=True)
    )
    engine = InMemoryMongoClient()
    engine_base = MongoDBCheckpointStorage(
        engine["bench"]["checkpoints"], options=_options(workflow, f"save-{size}")
    )
    return [
        Contender(
            "mongo-client", client_base, client_base.for_session(f"read-{size}"), settle=instant.settle
        ),
        Contender(
            "mongo-signed",
            signed_base,
            signed_base.for_session(f"read-{size}"),
            settle=signed_instant.settle,
        ),
        Contender("mongo-engine", engine_base, engine_base.for_session(f"read-{size}"), settle=lambda: None),
        Contender(
            "file",
            FileCheckpointStorage(directory / f"save-{size}"),
            FileCheckpointStorage(directory / f"read-{size}"),
            settle=lambda: None,
        ),
        Contender("memory", InMemoryCheckpointStorage(), InMemoryCheckpointStorage(), settle=lambda: None),
        CodecContender(),
    ]


async def _measure_size(
    size: int, settings: Settings, directory: Path, timings: dict[tuple[int, str, str], list[float]]
) -> int:
    """Time every operation of every contender at one size; return the stored payload size."""
    base = build_checkpoint(size)
    reads: list[WorkflowCheckpoint] = []
    previous: str | None = None
    for index in range(PAGE_ITEMS):
        reads.append(_variant(base, f"read-{size}-{index:03d}", previous, index))
        previous = reads[-1].checkpoint_id
    load_id = reads[PAGE_ITEMS // 2].checkpoint_id
    contenders = await _contenders(size, base.workflow_name, directory)
    for contender in contenders:
        if contender.read_store is not None:
            for checkpoint in reads:
                await contender.read_store.save(checkpoint)
            contender.settle()
    saves = [_variant(base, f"save-{size}-{rep}", None, rep) for rep in range(-1, settings.repeat)]
    for rep, checkpoint in enumerate(saves, start=-1):
        calls = [contender.operations(checkpoint, load_id) for contender in contenders]
        for operation in OPERATIONS:
            for contender, operations in zip(
                contenders, calls, strict=True
            ):  # interleaved: A, B, C, D, A, ...
                call = operations.get(operation)
                if call is None:
                    continue
                elapsed = await _timed(call)
                if operation == "save":
                    await contender.after_save(checkpoint.checkpoint_id)
                if rep >= 0:  # rep -1 warms caches, imports and the run's sequence counter
                    timings.setdefault((size, operation, contender.name), []).append(elapsed)
    return len(CheckpointCodec().encode(base).payload)


async def _round_trips() -> list[tuple[str, str]]:
    """Round trips per operation, counted over the in-process engine."""
    engine = InMemoryMongoClient()
    counting = CountingCollection(engine["bench"]["checkpoints"])
    checkpoint = build_checkpoint(10)
    workflow = checkpoint.workflow_name
    storage = MongoDBCheckpointStorage(counting, options=_options(workflow, "round-trips"))
    chain = [_variant(checkpoint, f"rt-{index}", None, index) for index in range(5)]
    # The same run with keep_last=2: its prune period is 1, so every save prunes.
    pruning = MongoDBCheckpointStorage(counting, options=dataclasses.replace(storage.options, keep_last=2))
    for provisioned in (storage, pruning):  # as deployed: a first save then does not look at the indexes
        await provisioned.ensure_indexes()
    counting.take()

    def end_grace() -> Awaitable[None]:
        # The server's clock moves past the new counter's re-check grace (ADR 0006).
        later = datetime.now(timezone.utc) + storage.options.counter_recheck_grace * 2
        engine.clock = lambda: later
        return asyncio.sleep(0)

    measured: list[tuple[str, Operation]] = [
        ("save, first of a run", lambda: storage.save(chain[0])),
        ("save, within the new counter's grace", lambda: storage.save(chain[1])),
        ("(the server's clock passes the grace)", end_grace),
        ("save, first after the grace", lambda: storage.save(chain[2])),
        ("save, steady state", lambda: storage.save(chain[3])),
        ("save, idempotent retry", lambda: storage.save(chain[3])),
        ("load", lambda: storage.load(chain[0].checkpoint_id)),
        ("get_latest", lambda: storage.get_latest(workflow_name=workflow)),
        (
            "list_checkpoint_page",
            lambda: storage.list_checkpoint_page(workflow_name=workflow, limit=PAGE_ITEMS),
        ),
        ("list_checkpoint_ids", lambda: storage.list_checkpoint_ids(workflow_name=workflow)),
        (
            "list_checkpoint_summaries",
            lambda: storage.list_checkpoint_summaries(workflow_name=workflow, limit=PAGE_ITEMS),
        ),
        ("list_runs", lambda: storage.list_runs(limit=PAGE_ITEMS)),
        ("delete", lambda: storage.delete(chain[0].checkpoint_id)),
        ("save, keep_last=2 (prunes on every number)", lambda: pruning.save(chain[4])),
        ("clear_run", storage.clear_run),
    ]
    rows: list[tuple[str, str]] = []
    for name, operation in measured:
        counting.take()
        await operation()
        waves = counting.take_waves()
        if waves or not name.startswith("("):
            rows.append((name, waves_text(waves)))
    return rows


async def _throughput(size: int, saves_per_run: int) -> tuple[float, float]:
    """Saves per second of RUNS concurrent runs through one instant collection; and elapsed s."""
    collection = InstantCollection()
    base = build_checkpoint(size)
    owner = MongoDBCheckpointStorage(collection, options=_options(base.workflow_name, "owner"))
    storages = [owner.for_session(f"run-{index:02d}") for index in range(RUNS)]
    checkpoints = [_variant(base, f"tp-{index}", None, index) for index in range(saves_per_run)]

    async def run(storage: MongoDBCheckpointStorage) -> None:
        for checkpoint in checkpoints:
            await storage.save(checkpoint)

    gc.collect()
    started = time.perf_counter()
    await asyncio.gather(*(run(storage) for storage in storages))
    elapsed = time.perf_counter() - started
    total = RUNS * saves_per_run
    assert collection.document_count == total
    for storage in (storages[0], storages[-1]):  # each run holds its saves, in order
        ids = await storage.list_checkpoint_ids(workflow_name=base.workflow_name)
        assert ids == [checkpoint.checkpoint_id for checkpoint in checkpoints]
    return total / elapsed, elapsed


async def _profile(size: int, calls: int) -> str:
    """cProfile of save and load over the instant collection: where client-side time goes."""
    collection = InstantCollection()
    base = build_checkpoint(size)
    storage = MongoDBCheckpointStorage(collection, options=_options(base.workflow_name, "profile"))
    checkpoints = [_variant(base, f"pf-{index}", None, index) for index in range(calls + 1)]
    await storage.save(checkpoints[-1])
    collection.settle()
    sections: list[str] = []
    for name, make_call in (
        ("save", lambda index: storage.save(checkpoints[index])),
        ("load", lambda _index: storage.load(checkpoints[-1].checkpoint_id)),
    ):
        profiler = cProfile.Profile()
        for index in range(calls):
            profiler.enable()
            await make_call(index)
            profiler.disable()
            collection.settle()
        stream = io.StringIO()
        stats = pstats.Stats(profiler, stream=stream)
        stats.strip_dirs().sort_stats("tottime").print_stats(12)
        body = stream.getvalue().strip().splitlines()
        start = next((i for i, line in enumerate(body) if "ncalls" in line), 0)
        sections.append(f"{name}, {size} messages, {calls} calls, by own time:\n" + "\n".join(body[start:]))
    return "\n\n".join(sections)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}" if seconds < 10 else f"{seconds * 1000:.0f}"


def _ratio(value: float | None, baseline: float | None) -> str:
    return "" if value is None or not baseline else f"{value / baseline:.2f}x"


async def run(settings: Settings, *, force_profile: bool) -> str:
    timings: dict[tuple[int, str, str], list[float]] = {}
    payloads: dict[int, int] = {}
    directory = Path(tempfile.mkdtemp(prefix="storage-benchmark-"))
    started = time.perf_counter()
    try:
        for size in settings.sizes:
            print(f"measuring {size}-message checkpoints ...", file=sys.stderr, flush=True)
            payloads[size] = await _measure_size(size, settings, directory, timings)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    median = {key: statistics.median(values) for key, values in timings.items()}

    header = ["messages", "payload KiB", "operation", *[f"{name} ms" for name in CONTENDERS]]
    header += ["client/file", "signed/file", "engine/file", "memory/file", "codec share"]
    rows: list[list[str]] = []
    for size in settings.sizes:
        for operation in OPERATIONS:
            cell = {name: median.get((size, operation, name)) for name in CONTENDERS}
            client, codec, baseline = cell["mongo-client"], cell["codec"], cell[BASELINE]
            label = operation if operation != "page" else f"page of {PAGE_ITEMS}"
            rows.append(
                [
                    str(size),
                    f"{payloads[size] / 1024:.0f}",
                    label,
                    *[("" if cell[name] is None else _ms(cell[name])) for name in CONTENDERS],  # type: ignore[arg-type]
                    _ratio(client, baseline),
                    _ratio(cell["mongo-signed"], baseline),
                    _ratio(cell["mongo-engine"], baseline),
                    _ratio(cell["memory"], baseline),
                    "" if codec is None or not client else f"{codec / client:.0%}",
                ]
            )
    table = markdown_table(header, rows, right=3)

    verdicts: list[list[str]] = []
    missed: list[tuple[int, str]] = []
    for size in TARGET_SIZES:
        if size not in settings.sizes:
            continue
        for contender in SIGNED_CONTENDERS:
            for operation, bound in TARGETS.items():
                ratio = median[(size, operation, contender)] / median[(size, operation, BASELINE)]
                verdict = "PASS" if ratio <= bound else "MISS"
                if verdict == "MISS":
                    missed.append((size, operation))
                verdicts.append(
                    [
                        f"{contender} {operation} <= {bound}x file {operation}",
                        str(size),
                        f"{ratio:.2f}x",
                        verdict,
                    ]
                )
    verdict_table = markdown_table(["target", "messages", "ratio", "verdict"], verdicts, right=1)

    print("counting round trips ...", file=sys.stderr, flush=True)
    trips = markdown_table(["operation", "round trips (in order)"], await _round_trips())

    throughput_rows: list[list[str]] = []
    for size in settings.throughput_sizes:
        print(f"throughput, {size}-message checkpoints ...", file=sys.stderr, flush=True)
        per_second, elapsed = await _throughput(size, settings.saves_per_run)
        single = median.get((size, "save", "mongo-client"))
        throughput_rows.append(
            [
                str(size),
                f"{RUNS} x {settings.saves_per_run}",
                f"{elapsed:.2f}",
                f"{per_second:,.0f}",
                "" if single is None else f"{1 / single:,.0f}",
            ]
        )
    throughput = markdown_table(
        ["messages", "runs x saves", "seconds", "saves/s (50 concurrent runs)", "saves/s (1 / median save)"],
        throughput_rows,
        right=1,
    )

    scale = await engine_scale_section(settings.scale)

    profile = ""
    profile_sizes = sorted({size for size, _ in missed} or ({200} if force_profile else set()))
    for size in profile_sizes:
        print(f"profiling {size}-message save and load ...", file=sys.stderr, flush=True)
        profile += await _profile(size, calls=20 if size <= 200 else 5)

    facts = "\n".join(f"- {name}: {value}" for name, value in machine_facts())
    mode = "quick smoke (--quick)" if settings.quick else "full"
    report = f"""# Storage benchmark

Command: `cd python && uv run python -m benchmarks.storage_benchmark{" --quick" if settings.quick else ""}`
({mode}; medians of {settings.repeat} interleaved repetitions, milliseconds; GC enabled,
`gc.collect()` before each timed call; {time.perf_counter() - started:.0f} s in all).

{facts}

## Latency

Contenders: **mongo-client** = `MongoDBCheckpointStorage` over an instant collection double (its
client-side cost, with the BSON encoding of requests and decoding of replies pymongo would do; no
network, server or driver); **mongo-signed** = the same with `signing_keys` (every save signs, every
read verifies an HMAC-SHA256); **mongo-engine** = the same storage over the in-process engine
(mongomock-based, copies documents on every query: a functional double, not a server model);
**file** = Agent Framework `FileCheckpointStorage` (temporary directory); **memory** = Agent
Framework `InMemoryCheckpointStorage` (deep copies); **codec** = `CheckpointCodec.encode`/`decode`
alone (codec share = codec / mongo-client). Each read store holds the same {PAGE_ITEMS}
checkpoints. The page is `list_checkpoint_page(limit={PAGE_ITEMS})` for MongoDB and
`list_checkpoints` (no limit; nearest equivalent) for the baselines. File `get_latest` is
`list_checkpoints` + `max`, so it decodes all {PAGE_ITEMS} files. Payload = the stored pickle.

{table}

## Targets

{verdict_table}

## Round trips per operation (over the in-process engine)

`find` counts one batch fetch of a cursor.

{trips}

## Throughput

{RUNS} runs (`for_session`) saving concurrently through one instant collection, client-side; the
work is CPU-bound in one event loop, so concurrency adds no speed, only overlap.

{throughput}

{scale}"""
    report += "\n" + await long_run_section(QUICK if settings.quick else FULL)
    if profile:
        report += f"\n## Where the time goes (cProfile, client-side)\n\n```text\n{profile}\n```\n"
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--repeat", type=int, default=None, help="timed repetitions per cell (default 5, quick 3)"
    )
    parser.add_argument("--quick", action="store_true", help="CI-speed smoke: 10 and 200 messages only")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown report path")
    parser.add_argument("--profile", action="store_true", help="profile save and load even if targets pass")
    arguments = parser.parse_args(argv)
    quick = bool(arguments.quick)
    repeat = arguments.repeat if arguments.repeat is not None else (3 if quick else 5)
    if repeat < 1:
        parser.error("--repeat must be at least 1")
    settings = Settings(
        sizes=CONVERSATION_SIZES[:2] if quick else CONVERSATION_SIZES,
        repeat=repeat,
        saves_per_run=2 if quick else 10,
        throughput_sizes=CONVERSATION_SIZES[:2],
        quick=quick,
        scale=QUICK_SCALE if quick else FULL_SCALE,
    )
    report = asyncio.run(run(settings, force_profile=bool(arguments.profile)))
    output: Path = arguments.output
    write_report(report, output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
