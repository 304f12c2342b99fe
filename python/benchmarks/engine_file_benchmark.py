"""File-backed engine benchmark: run ``cd python && uv run python -m benchmarks.engine_file_benchmark``.

It prints medians (milliseconds) behind docs/adr/0014-file-backed-engine.md:

* ``insert_one`` on a memory-only engine and on a file-backed one (``InMemoryMongoClient(path=...)``),
  for three document sizes, in a collection kept small: what the journal's append and sync add;
* with ``--documents`` documents of ``--size`` bytes stored, one more journaled ``insert_one`` against
  what a per-write atomic snapshot of the same data would cost (encode every document, write a
  temporary file, sync, rename, sync the directory), and the time to reopen the file.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import bson

from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

__all__ = ["main"]

_SIZES = (1_000, 75_000, 750_000)
_INSERTS = 100


async def _insert_ms(collection: InMemoryCollection, payload: int) -> float:
    """Median ``insert_one`` of a ``payload``-byte document, the collection kept at ten documents."""
    times: list[float] = []
    for number in range(_INSERTS):
        document = {"_id": f"doc-{number}", "blob": b"x" * payload}
        started = time.perf_counter()
        await collection.insert_one(document)
        times.append(time.perf_counter() - started)
        await collection.delete_one({"_id": f"doc-{number - 10}"})
    return statistics.median(times) * 1000


def _snapshot_ms(collection: InMemoryCollection, target: Path) -> float:
    """One atomic snapshot of ``collection``'s documents, as a per-write snapshot design would take."""
    started = time.perf_counter()
    temporary = target.with_name(target.name + ".tmp")
    with temporary.open("wb") as out:
        for document in collection.stored_documents():
            out.write(bson.encode(document))
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, target)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return (time.perf_counter() - started) * 1000


async def _run(directory: Path, documents: int, size: int) -> None:
    print(f"{'document':>10} {'memory':>9} {'file':>9} {'added':>9}")
    for payload in _SIZES:
        memory = InMemoryMongoClient()
        on_file = InMemoryMongoClient(path=directory / f"sizes-{payload}.journal")
        in_memory = await _insert_ms(memory["bench"]["docs"], payload)
        journaled = await _insert_ms(on_file["bench"]["docs"], payload)
        await memory.close()
        await on_file.close()
        print(f"{payload:>8} B {in_memory:>9.2f} {journaled:>9.2f} {journaled - in_memory:>9.2f}")

    path = directory / "stored.journal"
    client = InMemoryMongoClient(path=path)
    collection = client["bench"]["docs"]
    for start in range(0, documents, 100):  # seeded in batches: one sync per hundred documents
        await collection.insert_many([{"_id": n, "blob": b"y" * size} for n in range(start, start + 100)])
    appends: list[float] = []
    for number in range(5):
        started = time.perf_counter()
        await collection.insert_one({"_id": f"extra-{number}", "blob": b"z" * size})
        appends.append((time.perf_counter() - started) * 1000)
    snapshot = statistics.median(_snapshot_ms(collection, directory / "snapshot.bson") for _ in range(3))
    await client.close()
    started = time.perf_counter()
    reopened = InMemoryMongoClient(path=path)
    reopen = (time.perf_counter() - started) * 1000
    await reopened.close()
    megabytes = path.stat().st_size / 1e6
    print(
        f"\nwith {documents:,} documents of {size:,} B stored ({megabytes:.1f} MB journal):"
        f" one journaled insert_one {statistics.median(appends):.2f} ms,"
        f" one per-write snapshot {snapshot:.1f} ms, reopen {reopen:.0f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--documents", type=int, default=1000, help="documents stored for the snapshot")
    parser.add_argument("--size", type=int, default=75_000, help="bytes per stored document")
    parser.add_argument("--directory", type=Path, default=None, help="parent of the temporary folder")
    arguments = parser.parse_args(argv)
    print(f"Python {platform.python_version()} on {platform.machine()}; medians, milliseconds")
    with tempfile.TemporaryDirectory(dir=arguments.directory) as directory:
        asyncio.run(_run(Path(directory), arguments.documents, arguments.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
