"""The engine's simple-update fast path: what a chunk touch costs a document with and without it.

Run with ``cd python && uv run python -m benchmarks.update_fast_path``. It prints, per document:

* the post-image alone: ``simple_post_image`` against ``compute_post_image`` (the mongomock_ng
  scratch round trip) for the storage's chunk touch, a ``$max`` of ``touched_at`` and
  ``expires_at`` that raises nothing, on chunk documents of 2 KiB and 30 KiB;
* the whole statement as a save sends it: one ``update_many`` over 40 chunk documents (``_id`` in a
  list, the run's scope fields), with the fast path and with it switched off, the figure divided
  by 40. The engine's index maps find the 40 by ``_id``, so the rest is the post-image, the
  ``same_bson`` check and the statement's own overhead.

Each figure is the median of several timed repetitions after ``gc.collect()``; nothing here is
asserted (a timing test would be flaky on a shared machine).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import statistics
import time
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

import mongomock_ng

import agent_framework_mongodb.testing._collection_base as collection_base
from agent_framework_mongodb.testing import InMemoryMongoClient
from agent_framework_mongodb.testing._codec import to_storage, wire_value
from agent_framework_mongodb.testing._simple_updates import simple_post_image
from agent_framework_mongodb.testing._updates import compute_post_image

CHUNKS = 40
REPEATS = 7
_NOW = datetime(2026, 1, 1, 12, 0, 0)


def _chunk(number: int, size: int) -> dict[str, Any]:
    return {
        "_id": number.to_bytes(32, "big"),
        "_kind": "chunk",
        "workflow": "w",
        "run": "r",
        "data": bytes(size),
        "touched_at": _NOW,
        "expires_at": _NOW + timedelta(days=30),
    }


_TOUCH = {"$max": {"touched_at": _NOW - timedelta(seconds=10), "expires_at": _NOW}}


def _median_seconds(action: Callable[[], object], *, repeats: int = REPEATS) -> float:
    samples = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _post_image_figures(size: int) -> tuple[float, float]:
    """(slow, fast) seconds per document for the touch's post-image alone."""
    stored = to_storage(_chunk(1, size))
    update, filter_ = wire_value(_TOUCH), {"_id": stored["_id"]}
    scratch: Any = mongomock_ng.MongoClient()["scratch"]["post_image"]
    rounds = 200

    def slow() -> None:
        for _ in range(rounds):
            compute_post_image(scratch, stored, update, filter_, now=_NOW)

    def fast() -> None:
        for _ in range(rounds):
            simple_post_image(stored, update, filter_)

    return _median_seconds(slow) / rounds, _median_seconds(fast) / rounds


async def _statement_seconds(size: int) -> float:
    """Seconds per document of one ``update_many`` touching ``CHUNKS`` chunk documents."""
    coll = InMemoryMongoClient()["db"]["chunks"]
    await coll.insert_many([_chunk(number, size) for number in range(CHUNKS)])
    filter_ = {
        "_id": {"$in": [number.to_bytes(32, "big") for number in range(CHUNKS)]},
        "_kind": "chunk",
        "run": "r",
    }
    samples = []
    for _ in range(REPEATS):
        gc.collect()
        start = time.perf_counter()
        result = await coll.update_many(filter_, _TOUCH)
        samples.append(time.perf_counter() - start)
        assert (result.matched_count, result.modified_count) == (CHUNKS, 0)
    return statistics.median(samples) / CHUNKS


def _without_fast_path(run: Callable[[], Coroutine[Any, Any, float]]) -> float:
    with mock.patch.object(collection_base, "simple_post_image", return_value=None):
        return asyncio.run(run())


def main() -> None:
    header = ("chunk", "post-image: slow", "fast", "touch of 40, per doc: slow", "fast")
    print(" | ".join(f"{name:>{width}}" for name, width in zip(header, (7, 16, 9, 26, 9), strict=True)))
    for size in (2 * 1024, 30 * 1024):
        slow_image, fast_image = _post_image_figures(size)
        slow_touch = _without_fast_path(functools.partial(_statement_seconds, size))
        fast_touch = asyncio.run(_statement_seconds(size))
        print(
            f"{size // 1024:>5}KiB | {slow_image * 1e6:>13.1f} µs | {fast_image * 1e6:>6.1f} µs |"
            f" {slow_touch * 1e6:>23.1f} µs | {fast_touch * 1e6:>6.1f} µs"
        )


if __name__ == "__main__":
    main()
