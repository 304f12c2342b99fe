"""Engine scale: what one save and one ``clear_run`` cost as the in-process engine's collection grows.

Each cell seeds a fresh ``InMemoryMongoClient`` collection (indexes from ``ensure_indexes``) with
n checkpoints, either in one run or spread over 1,000 runs, then times real saves through
``MongoDBCheckpointStorage`` into a run of that collection. Seeding clones one stored checkpoint
document and inserts the clones with the engine's ``insert_many`` (it keeps its index entries
write by write, so the clones are indexed as saves would be); only the timed saves and clears go
through the storage. ``clear_run`` is timed on the one-run collection after its timed saves (the run
then holds n checkpoints plus those saves, and the collection nothing else).

Targets (issue 10): a save into 50,000 checkpoints costs at most 1.5x a save into 500, and
``clear_run`` costs the same per checkpoint at 5,000 and 50,000 (linear in the run's size).

A page of runs (issue 29): ``list_runs(limit=100)`` over 100 runs of n checkpoints each (up to
10,000), seeded the same way. It prints the engine's time beside what a server reads for the page,
from the pipeline's bounds: every counted checkpoint's index key (each count stops at
``RUN_COUNT_LIMIT + 1``), and documents only before MongoDB 7.0 (``queries.RUN_COUNT_MATCH``; the
integration suite pins both with ``explain`` on a real server).
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import sys
import time
from typing import Any

from agent_framework import WorkflowCheckpoint
from bson.int64 import Int64

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.results import RUN_COUNT_LIMIT
from agent_framework_mongodb.checkpoints.scope import CHECKPOINT_KIND, COUNTER_KIND, RunScope
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient
from benchmarks._report import markdown_table

__all__ = ["ScaleSettings", "engine_scale_section"]

WORKFLOW = "engine-scale"
RUNS = 1000
PAGE_RUNS = 100
"""Runs in a run page's collection, all listed on one page."""
SAVE_TARGET = 1.5
CLEAR_TARGET = 1.5
"""Largest growth of the per-checkpoint ``clear_run`` cost from the smallest to the largest run."""


@dataclasses.dataclass(frozen=True)
class ScaleSettings:
    save_sizes: tuple[int, ...]
    clear_sizes: tuple[int, ...]
    """Among ``save_sizes``: each such one-run collection is cleared after its timed saves."""
    saves: int
    """Timed saves per cell (their median is the cell's cost)."""
    page_run_sizes: tuple[int, ...] = ()
    """Checkpoints in each of ``PAGE_RUNS`` runs, one cell each, for the run page's table."""


def _options(session_id: str) -> MongoDBCheckpointStorageOptions:
    return MongoDBCheckpointStorageOptions(tenant_id="bench", workflow_name=WORKFLOW, session_id=session_id)


def _checkpoint(checkpoint_id: str) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=WORKFLOW,
        graph_signature_hash="graph",
        checkpoint_id=checkpoint_id,
        state={"step": checkpoint_id, "messages": ["hello"] * 10},
        timestamp="2025-01-02T03:04:05.000000+00:00",
    )


async def _templates(coll: InMemoryCollection) -> tuple[dict[str, Any], dict[str, Any]]:
    """One stored checkpoint and one counter, saved through the storage, then removed."""
    storage = MongoDBCheckpointStorage(coll, options=_options("template"))
    await storage.ensure_indexes()
    await storage.save(_checkpoint("template"))
    documents = coll.stored_documents()
    checkpoint = next(d for d in documents if d["_kind"] == CHECKPOINT_KIND)
    counter = next(d for d in documents if d["_kind"] == COUNTER_KIND)
    await storage.clear_run()
    return checkpoint, counter


async def _seed(coll: InMemoryCollection, total: int, runs: int) -> list[RunScope]:
    """``total`` checkpoints over ``runs`` runs (round robin), each run with its counter."""
    checkpoint, counter = await _templates(coll)
    scopes = [RunScope.from_options(_options(f"run-{run:04d}")) for run in range(runs)]
    per_run = [0] * runs
    batch: list[dict[str, Any]] = []
    for index in range(total):
        run = index % runs
        scope = scopes[run]
        per_run[run] += 1
        checkpoint_id = f"seed-{index:06d}"
        batch.append(
            {
                **checkpoint,
                **scope.fields(),
                "_id": scope.checkpoint_document_id(checkpoint_id),
                "checkpoint_id": checkpoint_id,
                "sequence": Int64(per_run[run]),
            }
        )
        if len(batch) == 5000:
            await coll.insert_many(batch)
            batch = []
    if batch:
        await coll.insert_many(batch)
    counters = [
        {
            **counter,
            **scope.fields(),
            "_id": scope.counter_document_id,
            "sequence": Int64(per_run[run]),
        }
        for run, scope in enumerate(scopes)
    ]
    await coll.insert_many(counters)
    return scopes


async def _timed_saves(coll: InMemoryCollection, saves: int) -> float:
    """Median seconds of one save into run 0 of ``coll``."""
    storage = MongoDBCheckpointStorage(coll, options=_options("run-0000"))
    timings: list[float] = []
    for index in range(saves):
        checkpoint = _checkpoint(f"timed-{index:04d}")
        gc.collect()
        started = time.perf_counter()
        await storage.save(checkpoint)
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


async def _timed_clear(coll: InMemoryCollection) -> tuple[float, int]:
    """Seconds of ``clear_run`` of run 0 of ``coll``, and how many checkpoints it deleted."""
    storage = MongoDBCheckpointStorage(coll, options=_options("run-0000"))
    gc.collect()
    started = time.perf_counter()
    result = await storage.clear_run()
    return time.perf_counter() - started, result.checkpoints_deleted


async def _cell(total: int, runs: int, saves: int, *, clear: bool) -> tuple[float, tuple[float, int] | None]:
    """Seed ``total`` checkpoints over ``runs`` runs; time saves into run 0, then maybe clear it."""
    coll = InMemoryMongoClient()["bench"]["checkpoints"]
    await _seed(coll, total, runs)
    save = await _timed_saves(coll, saves)
    return save, (await _timed_clear(coll) if clear else None)


async def _timed_run_page(per_run: int) -> tuple[float, int]:
    """Seconds of one ``list_runs`` page over ``PAGE_RUNS`` runs of ``per_run`` checkpoints, and the
    checkpoints it counted."""
    coll = InMemoryMongoClient()["bench"]["checkpoints"]
    await _seed(coll, per_run * PAGE_RUNS, PAGE_RUNS)
    storage = MongoDBCheckpointStorage(coll, options=_options("run-0000"))
    gc.collect()
    started = time.perf_counter()
    page = await storage.list_runs(limit=PAGE_RUNS)
    elapsed = time.perf_counter() - started
    assert len(page.runs) == PAGE_RUNS
    assert {run.checkpoint_count for run in page.runs} == {min(per_run, RUN_COUNT_LIMIT)}
    return elapsed, sum(run.checkpoint_count for run in page.runs)


async def _run_page_table(sizes: tuple[int, ...]) -> str:
    rows: list[list[str]] = []
    for per_run in sizes:
        print(f"engine scale: a page of {PAGE_RUNS} runs of {per_run:,} ...", file=sys.stderr, flush=True)
        seconds, counted = await _timed_run_page(per_run)
        keys = PAGE_RUNS * min(per_run + 1, RUN_COUNT_LIMIT + 1)
        rows.append(
            [
                f"{PAGE_RUNS} x {per_run:,}",
                f"{counted:,}",
                f"{seconds:.2f}",
                f"{keys:,}",
                "0",
                f"{counted:,}",
                f"{counted:,}",
            ]
        )
    header = [
        "runs x checkpoints",
        "counted",
        "engine s",
        "server: index keys read",
        "documents read, 7.0+",
        "documents read, 5.0/6.0",
        "documents read, before issue 29",
    ]
    return markdown_table(header, rows, right=1)


def _verdict(ratio: float, bound: float) -> str:
    return "PASS" if ratio <= bound else "MISS"


async def engine_scale_section(settings: ScaleSettings) -> str:
    """The report's engine scale section (markdown)."""
    smallest, largest = settings.save_sizes[0], settings.save_sizes[-1]
    save_rows: list[list[str]] = []
    costs: dict[tuple[str, int], float] = {}
    clears: dict[int, tuple[float, int]] = {}
    for layout, runs in (("one run", 1), (f"{RUNS:,} runs", RUNS)):
        for total in settings.save_sizes:
            print(
                f"engine scale: save into {total:,} checkpoints in {layout} ...", file=sys.stderr, flush=True
            )
            clear = runs == 1 and total in settings.clear_sizes
            costs[(layout, total)], cleared = await _cell(total, runs, settings.saves, clear=clear)
            if cleared is not None:
                clears[total] = cleared
        base = costs[(layout, smallest)]
        save_rows.append(
            [
                layout,
                *[f"{costs[(layout, total)] * 1000:.2f}" for total in settings.save_sizes],
                *[f"{costs[(layout, total)] / base:.2f}x" for total in settings.save_sizes[1:]],
            ]
        )
    save_header = [
        "checkpoints held",
        *[f"save ms at {total:,}" for total in settings.save_sizes],
        *[f"{total:,}/{smallest:,}" for total in settings.save_sizes[1:]],
    ]

    clear_rows: list[list[str]] = []
    per_checkpoint: dict[int, float] = {}
    for total in settings.clear_sizes:
        seconds, deleted = clears[total]
        per_checkpoint[total] = seconds / deleted
        clear_rows.append([f"{deleted:,}", f"{seconds:.2f}", f"{seconds / deleted * 1e6:.1f}"])
    clear_growth = per_checkpoint[settings.clear_sizes[-1]] / per_checkpoint[settings.clear_sizes[0]]

    verdicts = [
        [
            f"save at {largest:,} <= {SAVE_TARGET}x save at {smallest:,} ({layout})",
            f"{costs[(layout, largest)] / costs[(layout, smallest)]:.2f}x",
            _verdict(costs[(layout, largest)] / costs[(layout, smallest)], SAVE_TARGET),
        ]
        for layout in ("one run", f"{RUNS:,} runs")
    ]
    verdicts.append(
        [
            f"clear_run per checkpoint at {settings.clear_sizes[-1]:,} <= {CLEAR_TARGET}x at"
            f" {settings.clear_sizes[0]:,} (linear)",
            f"{clear_growth:.2f}x",
            _verdict(clear_growth, CLEAR_TARGET),
        ]
    )
    run_pages = await _run_page_table(settings.page_run_sizes) if settings.page_run_sizes else ""
    return f"""## Engine scale (in-process engine)

`MongoDBCheckpointStorage` over `InMemoryMongoClient` with the storage's indexes
(`ensure_indexes`). Save: median of {settings.saves} real saves into run 0 of a collection
seeded with n checkpoints, all in that run or spread over {RUNS:,} runs (each with its
counter). `clear_run`: that one run afterwards (n checkpoints plus the timed saves; nothing else is
stored). Seeding clones a
stored checkpoint through the engine's `insert_many`, so the clones are indexed as saves are.

{markdown_table(save_header, save_rows, right=1)}

{markdown_table(["checkpoints cleared", "clear_run s", "us per checkpoint"], clear_rows, right=1)}

{markdown_table(["target", "ratio", "verdict"], verdicts, right=1)}

### A page of runs

`list_runs(limit={PAGE_RUNS})` over {PAGE_RUNS} runs, each seeded as above with its counter and n
checkpoints: one `aggregate` that counts each run's checkpoints, up to {RUN_COUNT_LIMIT:,} (issue 29).
The engine matches every counted document in Python, so its time grows with them; a server reads
the index keys shown (each run's keys, and one past its last) and, from MongoDB 7.0, no document
(the count names only `checkpoint_scope_sequence`'s first key and partial filter). On 5.0 and 6.0
it checks each counted document's kind; before issue 29 the count also named the tenant and the
application, which are not keys, so every version read every counted document.

{run_pages}
"""
