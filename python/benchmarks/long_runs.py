"""Long runs (issue 13): what a run of many supersteps stores and what each save costs.

Run alone with ``cd python && uv run python -m benchmarks.long_runs`` (``--quick``, ``--output PATH``,
default ``benchmarks/results/long_runs.md``); ``benchmarks.storage_benchmark`` includes the same
section, and its ``--quick`` smoke the quick one.

An agent conversation as an ``AgentExecutor`` checkpoints it: each superstep appends two messages
(``benchmarks.checkpoints.build_conversation``) to a history held twice, as ``on_checkpoint_save``
returns it: ``full_conversation`` as ``Message`` objects and ``agent_session`` as
``AgentSession.to_dict()`` makes it, the session's history kept by an ``InMemoryHistoryProvider``
(so in ``state["in_memory"]["messages"]``). Every superstep saves one checkpoint, chained by
``previous_checkpoint_id``, through ``MongoDBCheckpointStorage`` over the in-process engine (indexes
created, as a deployment has them). The engine's server clock moves 10 s per superstep (a model call
per superstep), so the counter's re-check grace (ADR 0006) is over after a few supersteps and the
measured saves are steady-state ones.

What it measures, for each run length, in one process:

* **stored**: the BSON size of every document in the engine that carries the run's scope fields
  (checkpoints, the counter, and whatever else a storage writes for the run, in any collection),
  read raw from the engine after the run; ÷ the newest checkpoint's **logical payload**, defined as
  ``len(CheckpointCodec().encode(newest).payload)`` (the v2 codec's whole payload), so that the
  figure is comparable before and after a chunked format. Documents without the scope fields are
  reported apart (a storage should write none);
* **save time**, early and at the end: the median of the run's own saves over a window of
  supersteps (centred on the early superstep, and the last ones of the run), each timed after
  ``gc.collect()``. The window measures the real saves, each with the content its superstep added,
  which repeating a save cannot: a content-addressed store would find a repeated checkpoint's chunks
  already stored in the same run and none of them in a sibling run. The same checkpoints are saved,
  interleaved, to Agent Framework's ``FileCheckpointStorage``, and a fixed checkpoint is encoded as
  a probe of the machine's speed (the early and last windows are minutes apart). The client-side
  part is the save's time less the time spent awaiting the engine (``benchmarks._metered``);
* **bytes sent** by a save (``MeteredCollection.sent_bytes``) ÷ what its superstep **added**: the
  growth of the logical payload from the previous superstep;
* **round trips** of the last save and of a load of the newest checkpoint; **load time** of the
  newest (median of repeated loads, interleaved with the file storage's), and whether it loads equal
  (the codec's identity hash of the loaded checkpoint is the saved one's);
* a **40 MiB checkpoint** (a list of message-like records of random hex text): whether it saves and
  loads equal; a storage that refuses it (``MongoDBSerializationError``, as the whole-checkpoint
  storage did at MongoDB's 16 MiB) is reported as "refused", not as a failure of the benchmark.

The targets are issue 13's; each is printed with the measured value and held or missed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import bson
from agent_framework import (
    AgentSession,
    FileCheckpointStorage,
    InMemoryHistoryProvider,
    Message,
    WorkflowCheckpoint,
)

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.codec import CheckpointCodec
from agent_framework_mongodb.errors import MongoDBSerializationError
from agent_framework_mongodb.testing import InMemoryMongoClient
from benchmarks._doubles import waves_text
from benchmarks._metered import MeteredCollection
from benchmarks._report import machine_facts, markdown_table, write_report
from benchmarks.checkpoints import build_checkpoint, build_conversation

__all__ = ["FULL", "QUICK", "LongRunSettings", "long_run_section", "main"]

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "long_runs.md"
WORKFLOW = "support-workflow"
EXECUTOR_ID = "support-agent"
SUPERSTEP = timedelta(seconds=10)
"""How far the engine's server clock moves per superstep."""
MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class LongRunSettings:
    supersteps: tuple[int, ...]
    """The run lengths, each a run of its own."""
    early: int
    """The early superstep whose save the last one is compared with."""
    window: int
    """Saves per timed window (odd: the early one is centred)."""
    load_repeats: int
    big_bytes: int
    big_record_bytes: int
    quick: bool


FULL = LongRunSettings(
    supersteps=(300, 1000),
    early=30,
    window=7,
    load_repeats=7,
    big_bytes=40 * MIB,
    big_record_bytes=1024,
    quick=False,
)
QUICK = LongRunSettings(
    supersteps=(30, 60),
    early=10,
    window=3,
    load_repeats=3,
    big_bytes=40 * MIB,
    big_record_bytes=64 * 1024,  # the same 40 MiB in fewer records: the same limit, seconds less
    quick=True,
)


@dataclasses.dataclass(frozen=True)
class _Goal:
    name: str
    bound: float
    most: float | None = None
    """A looser bound that still holds (round trips: 2, 3 at most)."""

    def verdict(self, value: float | None) -> str:
        if value is None:
            return "not measured"
        if value <= self.bound:
            return "held"
        if self.most is not None and value <= self.most:
            return "held (at most)"
        return "missed"


# -- the conversation ------------------------------------------------------------------------------


class _Conversation:
    """An agent's history growing two messages per superstep, checkpointed as AgentExecutor does."""

    def __init__(self, supersteps: int, clock: Callable[[], datetime]) -> None:
        self._messages = build_conversation(2 * supersteps)
        self._history: list[Message] = []
        self._session = AgentSession(session_id="long-run-session")
        self._provider = InMemoryHistoryProvider()
        self._clock = clock
        self.superstep = 0
        self._previous: str | None = None

    async def advance(self, run: str) -> WorkflowCheckpoint:
        """The next superstep's checkpoint."""
        start = 2 * self.superstep
        added = self._messages[start : start + 2]
        self.superstep += 1
        self._history = [*self._history, *added]
        # What the agent does after a run: the provider keeps its state under its source id.
        await self._provider.save_messages(
            self._session.session_id,
            added,
            state=self._session.state.setdefault(self._provider.source_id, {}),
        )
        executor_state: dict[str, object] = {  # AgentExecutor.on_checkpoint_save's keys
            "cache": [],
            "full_conversation": list(self._history),
            "agent_session": self._session.to_dict(),
            "pending_agent_requests": {},
            "pending_responses_to_agent": [],
            "pending_request_order": [],
        }
        checkpoint = WorkflowCheckpoint(
            workflow_name=WORKFLOW,
            graph_signature_hash="6f1c0a9e" * 8,
            checkpoint_id=f"{run}-{self.superstep:05d}",
            previous_checkpoint_id=self._previous,
            timestamp=self._clock().isoformat(),
            state={"_executor_state": {EXECUTOR_ID: executor_state}, "superstep": self.superstep},
            iteration_count=self.superstep,
            metadata={"superstep": self.superstep, "source": "benchmark"},
        )
        self._previous = checkpoint.checkpoint_id
        return checkpoint


# -- measuring ----------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Save:
    seconds: float
    inner_seconds: float
    sent_bytes: int
    trips: list[list[str]]
    file_seconds: float
    probe_seconds: float
    payload: int
    added: int


@dataclasses.dataclass
class _RunResult:
    supersteps: int
    early: int
    saves: dict[int, _Save]
    early_window: list[int]
    last_window: list[int]
    newest_payload: int
    stored_bytes: int
    stored_documents: int
    unscoped_bytes: int
    load_seconds: float
    load_inner_seconds: float
    file_load_seconds: float
    load_trips: list[list[str]]
    loads_equal: bool
    unstated_sent_bytes: int
    elapsed: float


async def _timed(operation: Callable[[], Awaitable[object]]) -> float:
    for _ in range(3):  # let the loop finish what earlier calls left queued
        await asyncio.sleep(0)
    gc.collect()
    started = time.perf_counter()
    await operation()
    return time.perf_counter() - started


def _payload(checkpoint: WorkflowCheckpoint) -> int:
    return len(CheckpointCodec().encode(checkpoint).payload)


def _windows(supersteps: int, early: int, window: int) -> tuple[list[int], list[int]]:
    half = window // 2
    early_window = [step for step in range(early - half, early + half + 1) if 1 <= step <= supersteps]
    last_window = list(range(max(1, supersteps - window + 1), supersteps + 1))
    return early_window, last_window


async def _stored(client: InMemoryMongoClient, scope: dict[str, Any]) -> tuple[int, int, int]:
    """(bytes, documents) of every document carrying the run's scope fields, in every collection
    of every database, and the bytes of any documents without them."""
    scoped_bytes = scoped_documents = all_bytes = 0
    for database_name in await client.list_database_names():
        database = client[database_name]
        for collection_name in await database.list_collection_names():
            collection = database[collection_name]
            async for document in collection.find({}):
                size = len(bson.encode(document))
                all_bytes += size
                if all(document.get(field) == value for field, value in scope.items()):
                    scoped_bytes += size
                    scoped_documents += 1
    return scoped_bytes, scoped_documents, all_bytes - scoped_bytes


@dataclasses.dataclass
class _Stores:
    """The run's two storages and the meter around the engine."""

    storage: MongoDBCheckpointStorage
    metered: MeteredCollection
    files: FileCheckpointStorage
    reference: WorkflowCheckpoint = dataclasses.field(default_factory=lambda: build_checkpoint(200))

    async def probe(self) -> None:
        """The machine's speed at this moment: encoding a fixed checkpoint. Early and last saves
        are minutes apart on a shared machine; the probe shows how much of their ratio is drift."""
        CheckpointCodec().encode(self.reference)


async def _timed_save(
    stores: _Stores, checkpoint: WorkflowCheckpoint, step: int, payloads: dict[int, int]
) -> _Save:
    metered = stores.metered
    metered.reset()
    mongo_first = step % 2 == 0  # interleaved: neither storage always runs first
    file_seconds = 0.0 if mongo_first else await _timed(lambda: stores.files.save(checkpoint))
    metered.reset()
    seconds = await _timed(lambda: stores.storage.save(checkpoint))
    sent, inner, trips = metered.sent_bytes, metered.inner_seconds, metered.take_waves()
    if mongo_first:
        file_seconds = await _timed(lambda: stores.files.save(checkpoint))
    probe_seconds = await _timed(stores.probe)
    return _Save(
        seconds=seconds,
        inner_seconds=inner,
        sent_bytes=sent,
        trips=trips,
        file_seconds=file_seconds,
        probe_seconds=probe_seconds,
        payload=payloads[step],
        added=payloads[step] - payloads.get(step - 1, 0),
    )


@dataclasses.dataclass
class _Loads:
    seconds: float
    inner_seconds: float
    file_seconds: float
    trips: list[list[str]]
    equal: bool


async def _timed_loads(stores: _Stores, newest: WorkflowCheckpoint, repeats: int) -> _Loads:
    seconds: list[float] = []
    inner: list[float] = []
    file_seconds: list[float] = []
    trips: list[list[str]] = []
    loaded: list[WorkflowCheckpoint] = []
    newest_id = newest.checkpoint_id

    async def load() -> None:
        loaded.append(await stores.storage.load(newest_id))

    for repeat in range(repeats):
        if repeat % 2:
            file_seconds.append(await _timed(lambda: stores.files.load(newest_id)))
        stores.metered.reset()
        seconds.append(await _timed(load))
        inner.append(stores.metered.inner_seconds)
        trips = stores.metered.take_waves()
        if not repeat % 2:
            file_seconds.append(await _timed(lambda: stores.files.load(newest_id)))
    codec = CheckpointCodec()
    return _Loads(
        seconds=statistics.median(seconds),
        inner_seconds=statistics.median(inner),
        file_seconds=statistics.median(file_seconds),
        trips=trips,
        equal=codec.encode(loaded[-1]).payload_hash == codec.encode(newest).payload_hash,
    )


async def _measure_run(supersteps: int, settings: LongRunSettings, directory: Path) -> _RunResult:
    started = time.perf_counter()
    # w: "majority", as docs/deployment.md asks: the only write concern under which a save leaves
    # out the touches of chunks it stored in the same window (ADR 0029, amended for issue 29).
    engine = InMemoryMongoClient(w="majority")
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    engine.clock = lambda: now
    metered = MeteredCollection(engine["bench"]["checkpoints"])
    # The same run through a storage whose write concern states no w (the server's default, which
    # may be w: 1): it touches every chunk it remembers; only what its last save sends is read.
    unstated_engine = InMemoryMongoClient()
    unstated_engine.clock = lambda: now
    unstated = MeteredCollection(unstated_engine["bench"]["checkpoints"])
    options = MongoDBCheckpointStorageOptions(
        tenant_id="bench", workflow_name=WORKFLOW, session_id=f"long-run-{supersteps}"
    )
    unstated_storage = MongoDBCheckpointStorage(unstated, options=options)
    stores = _Stores(
        MongoDBCheckpointStorage(metered, options=options),
        metered,
        FileCheckpointStorage(directory / f"run-{supersteps}"),
    )
    await stores.storage.ensure_indexes()
    await unstated_storage.ensure_indexes()
    conversation = _Conversation(supersteps, lambda: now)
    early_window, last_window = _windows(supersteps, settings.early, settings.window)
    timed = set(early_window) | set(last_window)
    payloads: dict[int, int] = {}
    saves: dict[int, _Save] = {}
    for step in range(1, supersteps + 1):
        now += SUPERSTEP
        checkpoint = await conversation.advance(f"run{supersteps}")
        if step + 1 in timed or step in timed:
            payloads[step] = _payload(checkpoint)
        if step in timed:
            saves[step] = await _timed_save(stores, checkpoint, step, payloads)
        else:
            await stores.storage.save(checkpoint)
        unstated.reset()
        await unstated_storage.save(checkpoint)
    unstated_sent = unstated.sent_bytes
    loads = await _timed_loads(stores, checkpoint, settings.load_repeats)
    scope = {
        "tenant_id": options.tenant_id,
        "application_id": options.application_id,
        "workflow_name": options.workflow_name,
        "session_id": options.session_id,
    }
    stored_bytes, stored_documents, unscoped = await _stored(engine, scope)
    return _RunResult(
        supersteps=supersteps,
        early=settings.early,
        saves=saves,
        early_window=early_window,
        last_window=last_window,
        newest_payload=payloads[supersteps],
        stored_bytes=stored_bytes,
        stored_documents=stored_documents,
        unscoped_bytes=unscoped,
        load_seconds=loads.seconds,
        load_inner_seconds=loads.inner_seconds,
        file_load_seconds=loads.file_seconds,
        load_trips=loads.trips,
        loads_equal=loads.equal,
        unstated_sent_bytes=unstated_sent,
        elapsed=time.perf_counter() - started,
    )


@dataclasses.dataclass
class _BigResult:
    state_bytes: int
    records: int
    outcome: str
    equal: bool | None
    save_seconds: float
    load_seconds: float | None


def _big_checkpoint(total: int, record_bytes: int) -> tuple[WorkflowCheckpoint, int]:
    rng = random.Random(13)  # noqa: S311 - reproducible filler text, not security
    count = total // record_bytes
    records = [
        {
            "role": "user" if index % 2 else "assistant",
            "text": rng.randbytes(record_bytes // 2).hex(),  # random hex: no compressor shrinks it below half
            "index": index,
        }
        for index in range(count)
    ]
    checkpoint = WorkflowCheckpoint(
        workflow_name=WORKFLOW,
        graph_signature_hash="6f1c0a9e" * 8,
        checkpoint_id="big-40mib",
        state={"records": records},
    )
    return checkpoint, count


async def _measure_big(settings: LongRunSettings) -> _BigResult:
    checkpoint, records = _big_checkpoint(settings.big_bytes, settings.big_record_bytes)
    engine = InMemoryMongoClient()
    options = MongoDBCheckpointStorageOptions(tenant_id="bench", workflow_name=WORKFLOW, session_id="big")
    storage = MongoDBCheckpointStorage(engine["bench"]["checkpoints"], options=options)
    await storage.ensure_indexes()
    started = time.perf_counter()
    try:
        await storage.save(checkpoint)
    except MongoDBSerializationError as error:
        reason = str(error).split(";")[0]
        return _BigResult(
            settings.big_bytes, records, f"refused ({reason})", None, time.perf_counter() - started, None
        )
    save_seconds = time.perf_counter() - started
    started = time.perf_counter()
    loaded = await storage.load(checkpoint.checkpoint_id)
    load_seconds = time.perf_counter() - started
    codec = CheckpointCodec()
    equal = codec.encode(loaded).payload_hash == codec.encode(checkpoint).payload_hash
    return _BigResult(
        settings.big_bytes,
        records,
        "saved and loaded equal" if equal else "saved, but loaded different",
        equal,
        save_seconds,
        load_seconds,
    )


# -- reporting ------------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


@dataclasses.dataclass
class _Figures:
    """The figures of one run that the report and the targets read."""

    run: _RunResult
    save_early: float
    save_last: float
    client_early: float
    client_last: float
    file_last: float
    probe_early: float
    probe_last: float
    last: _Save

    @classmethod
    def of(cls, run: _RunResult) -> _Figures:
        def median(steps: list[int], value: Callable[[_Save], float]) -> float:
            return _median([value(run.saves[step]) for step in steps])

        return cls(
            run=run,
            save_early=median(run.early_window, lambda save: save.seconds),
            save_last=median(run.last_window, lambda save: save.seconds),
            client_early=median(run.early_window, lambda save: save.seconds - save.inner_seconds),
            client_last=median(run.last_window, lambda save: save.seconds - save.inner_seconds),
            file_last=median(run.last_window, lambda save: save.file_seconds),
            probe_early=median(run.early_window, lambda save: save.probe_seconds),
            probe_last=median(run.last_window, lambda save: save.probe_seconds),
            last=run.saves[run.supersteps],
        )

    @property
    def stored_ratio(self) -> float:
        return self.run.stored_bytes / self.run.newest_payload

    @property
    def sent_ratio(self) -> float | None:
        return None if self.last.added <= 0 else self.last.sent_bytes / self.last.added

    @property
    def unstated_sent_ratio(self) -> float | None:
        return None if self.last.added <= 0 else self.run.unstated_sent_bytes / self.last.added

    @property
    def window_sent_ratio(self) -> float | None:
        saves = [self.run.saves[step] for step in self.run.last_window]
        added = sum(save.added for save in saves)
        return None if added <= 0 else sum(save.sent_bytes for save in saves) / added


def _steps(steps: list[int]) -> str:
    return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])


def _x(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def _figures_table(figures: list[_Figures]) -> str:
    rows: list[tuple[str, Callable[[_Figures], str]]] = [
        ("messages in the history (held twice)", lambda f: f"{2 * f.run.supersteps:,}"),
        ("newest logical payload (v2 codec), bytes", lambda f: f"{f.run.newest_payload:,}"),
        ("stored for the run: documents", lambda f: f"{f.run.stored_documents:,}"),
        ("stored for the run: bytes", lambda f: f"{f.run.stored_bytes:,}"),
        ("stored / newest logical payload", lambda f: _x(f.stored_ratio)),
        ("bytes in the engine without the run's scope fields", lambda f: f"{f.run.unscoped_bytes:,}"),
        (
            "save ms, early (median of supersteps)",
            lambda f: f"{_ms(f.save_early)} ({_steps(f.run.early_window)})",
        ),
        (
            "save ms, last (median of supersteps)",
            lambda f: f"{_ms(f.save_last)} ({_steps(f.run.last_window)})",
        ),
        ("save last / early", lambda f: _x(f.save_last / f.save_early)),
        (
            "machine probe ms (encoding a fixed 200-message checkpoint), early / last",
            lambda f: f"{_ms(f.probe_early)} / {_ms(f.probe_last)}",
        ),
        (
            "save last / early, divided by the probe's last / early",
            lambda f: _x(f.save_last / f.save_early / (f.probe_last / f.probe_early)),
        ),
        (
            "client-side save ms (engine's time excluded), early / last",
            lambda f: f"{_ms(f.client_early)} / {_ms(f.client_last)}",
        ),
        ("client-side save last / early", lambda f: _x(f.client_last / f.client_early)),
        ("file save ms, last (same supersteps)", lambda f: _ms(f.file_last)),
        ("save last / file save", lambda f: _x(f.save_last / f.file_last)),
        ("client-side save last / file save", lambda f: _x(f.client_last / f.file_last)),
        ("last superstep added (logical payload growth), bytes", lambda f: f"{f.last.added:,}"),
        ("bytes sent by the last save", lambda f: f"{f.last.sent_bytes:,}"),
        ("sent / added, last save", lambda f: _x(f.sent_ratio)),
        ("sent / added, last window's saves together", lambda f: _x(f.window_sent_ratio)),
        (
            "bytes sent by the last save, no w stated (every chunk touched)",
            lambda f: f"{f.run.unstated_sent_bytes:,}",
        ),
        ("sent / added, last save, no w stated", lambda f: _x(f.unstated_sent_ratio)),
        ("round trips, last save", lambda f: waves_text(f.last.trips)),
        ("load ms, newest (median)", lambda f: _ms(f.run.load_seconds)),
        (
            "client-side load ms (engine's time excluded)",
            lambda f: _ms(f.run.load_seconds - f.run.load_inner_seconds),
        ),
        ("file load ms, newest", lambda f: _ms(f.run.file_load_seconds)),
        ("load / file load", lambda f: _x(f.run.load_seconds / f.run.file_load_seconds)),
        ("round trips, load", lambda f: waves_text(f.run.load_trips)),
        ("newest loads equal (identity hash)", lambda f: "yes" if f.run.loads_equal else "NO"),
        ("seconds for the run (all of it)", lambda f: f"{f.run.elapsed:.0f}"),
    ]
    header = ["figure", *[f"{f.run.supersteps} supersteps" for f in figures]]
    return markdown_table(header, [[name, *[cell(f) for f in figures]] for name, cell in rows], right=1)


def _targets_table(figures: list[_Figures], big: _BigResult) -> str:
    rows: list[list[str]] = []

    def row(goal: _Goal, run: str, value: float | None, shown: str) -> None:
        rows.append([goal.name, run, shown, goal.verdict(value)])

    for f in figures:
        run = f"{f.run.supersteps}"
        early = f.run.early
        stored = _Goal("stored for the run <= 3x the newest payload", 3.0)
        row(stored, run, f.stored_ratio, _x(f.stored_ratio))
        growth = _Goal(f"save(last) <= 2x save({early})", 2.0)
        row(growth, run, f.save_last / f.save_early, _x(f.save_last / f.save_early))
        client_growth = _Goal("the same, client-side (engine's time excluded)", 2.0)
        row(client_growth, run, f.client_last / f.client_early, _x(f.client_last / f.client_early))
        versus_file = _Goal("save(last) <= 0.3x file save", 0.3)
        row(versus_file, run, f.save_last / f.file_last, _x(f.save_last / f.file_last))
        client_file = _Goal("the same, client-side", 0.3)
        row(client_file, run, f.client_last / f.file_last, _x(f.client_last / f.file_last))
        sent = _Goal("bytes sent per save <= 2x what the superstep added", 2.0)
        row(sent, run, f.sent_ratio, f"{_x(f.sent_ratio)} ({f.last.sent_bytes:,} / {f.last.added:,})")
        save_trips = _Goal("save round trips 2 (3 at most)", 2, most=3)
        row(save_trips, run, len(f.last.trips), str(len(f.last.trips)))
        load_trips = _Goal("load round trips 1 (2 at most)", 1, most=2)
        row(load_trips, run, len(f.run.load_trips), str(len(f.run.load_trips)))
        load = _Goal("load <= 0.5x file load", 0.5)
        ratio = f.run.load_seconds / f.run.file_load_seconds
        row(load, run, ratio, _x(ratio))
    rows.append(
        [
            f"a {big.state_bytes // MIB} MiB checkpoint saves and loads equal",
            "-",
            big.outcome,
            "held" if big.equal else "missed",
        ]
    )
    return markdown_table(["target (issue 13)", "supersteps", "measured", "verdict"], rows)


async def long_run_section(settings: LongRunSettings) -> str:
    """Measure every run of ``settings`` and the large checkpoint; return the markdown section."""
    directory = Path(tempfile.mkdtemp(prefix="long-runs-"))
    started = time.perf_counter()
    try:
        runs: list[_RunResult] = []
        for supersteps in settings.supersteps:
            print(f"long run of {supersteps} supersteps ...", file=sys.stderr, flush=True)
            runs.append(await _measure_run(supersteps, settings, directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"a {settings.big_bytes // MIB} MiB checkpoint ...", file=sys.stderr, flush=True)
    big = await _measure_big(settings)
    figures = [_Figures.of(run) for run in runs]
    big_table = markdown_table(
        ["state", "records", "outcome", "save s", "load s"],
        [
            [
                f"{big.state_bytes // MIB} MiB: records of {settings.big_record_bytes:,} bytes of hex text",
                f"{big.records:,}",
                big.outcome,
                f"{big.save_seconds:.2f}",
                "" if big.load_seconds is None else f"{big.load_seconds:.2f}",
            ]
        ],
    )
    mode = "quick" if settings.quick else "full"
    seconds = time.perf_counter() - started
    return f"""## Long runs (issue 13)

The storage with chunked checkpoints (ADR 0018; {mode} settings, {seconds:.0f} s). An agent conversation
checkpointed every superstep: two messages per superstep, the history held as
`AgentExecutor.on_checkpoint_save` holds it (`full_conversation` and `agent_session`), saved through
`MongoDBCheckpointStorage` over the in-process engine, whose clock moves
{SUPERSTEP.total_seconds():.0f} s per superstep. **Logical payload** =
`len(CheckpointCodec().encode(cp).payload)`. **Stored** = BSON bytes of every engine document with
the run's scope fields. **Save** = median of the run's own saves over the supersteps named, each
after `gc.collect()`, interleaved with `FileCheckpointStorage` saving the same checkpoints and
with a probe of the machine's speed (encoding one fixed checkpoint), as early and last saves are
minutes apart on a shared machine.
**Client-side** = less the time spent awaiting the engine's calls (which includes the BSON
encoding pymongo would do, and the engine's scan of its documents on every query, which grows with
the run where a server's indexes do not). **Sent** = BSON bytes of every document the storage
passes to the driver. **Load** = median of {settings.load_repeats} loads of the newest checkpoint.
The collection's write concern is `w: "majority"`; **no w stated** is the same run saved beside it
through a collection whose write concern states none (the server's default, which may be `w: 1`),
where a save touches every chunk it remembers (ADR 0029, amended for issue 29).

{_figures_table(figures)}

{big_table}

### Targets

{_targets_table(figures, big)}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="CI-speed smoke: 30 and 60 supersteps")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown report path")
    arguments = parser.parse_args(argv)
    settings = QUICK if arguments.quick else FULL
    started = time.perf_counter()
    section = asyncio.run(long_run_section(settings))
    facts = "\n".join(f"- {name}: {value}" for name, value in machine_facts())
    report = f"""# Long-run benchmark

Command: `cd python && uv run python -m benchmarks.long_runs{" --quick" if settings.quick else ""}`
({time.perf_counter() - started:.0f} s in all). The storage with chunked checkpoints (issue 13,
docs/adr/0018-chunked-payloads.md); the whole-checkpoint baseline is in specs/performance.md.

{facts}

{section}"""
    output: Path = arguments.output
    write_report(report, output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
