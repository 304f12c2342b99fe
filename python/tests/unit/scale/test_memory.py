"""Memory at scale: listing ids never holds payloads; listing checkpoints holds bounded pages.

The in-process engine keeps every document in this process. Only the storage's own allocations
are of interest, so ``tracemalloc`` starts after the documents are loaded: what the engine already
holds is not traced, and the traced peak is what one listing allocates (the storage's pages and
results, plus the engine's transient work to answer the queries, which only adds to the peak, so a
bound that holds with it holds for the storage alone).
"""

from __future__ import annotations

import gc
import os
import tracemalloc
import weakref
from collections.abc import Mapping
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.documents import PAYLOAD_FIELD
from agent_framework_mongodb.checkpoints.options import ABSOLUTE_MAX_PAGE_SIZE
from agent_framework_mongodb.checkpoints.scope import CHECKPOINT_KIND, RunScope
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryCursor, InMemoryMongoClient

from ._recording import RecordingCollection

WORKFLOW = "memory-at-scale"

RUN_SIZE = 10_000
PAYLOAD_BYTES = 8 * 1024
"""Each document's payload: 10,000 of them are 80 MiB, so payloads dominate everything else."""

ID_BUDGET_BYTES = 1024
"""Allowed peak growth per checkpoint while listing ids. An id result costs about 8 B (list slot)
+ 57 B (a 8-character str), and each projected document ``{checkpoint_id, sequence}`` alive in a
page about 330 B (a two-key dict, its str and int); the engine's transient copies of those small
documents while answering add a few hundred bytes more. 1 KiB per checkpoint bounds all of that,
yet is an eighth of one payload: holding payloads even once would take 10,000 x 8 KiB = 80 MiB
against the 10,000 x 1 KiB = 10 MiB bound."""


def _checkpoint(checkpoint_id: str, *, previous: str | None = None) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=WORKFLOW,
        graph_signature_hash="graph",
        checkpoint_id=checkpoint_id,
        previous_checkpoint_id=previous,
        state={"step": checkpoint_id},
        timestamp="2025-01-02T03:04:05.000000+00:00",
    )


def _payload_excluded(projection: Mapping[str, Any] | None) -> bool:
    if projection is None:
        return False
    included = {key for key, value in projection.items() if key != "_id" and value}
    if included:
        return PAYLOAD_FIELD not in included
    return PAYLOAD_FIELD in projection and not projection[PAYLOAD_FIELD]


async def test_list_checkpoint_ids_over_ten_thousand_never_holds_payloads() -> None:
    client = InMemoryMongoClient()
    engine = client["scale"]["checkpoints"]
    proxy = RecordingCollection(engine)
    # One page for the whole run keeps the engine's per-query scans (it has no indexes) few;
    # a page of ids is small whatever its length, which is what this test shows.
    options = MongoDBCheckpointStorageOptions(
        tenant_id="tenant", workflow_name=WORKFLOW, session_id="big-run", max_page_size=ABSOLUTE_MAX_PAGE_SIZE
    )
    storage = MongoDBCheckpointStorage(proxy, options=options)
    await storage.save(_checkpoint("cp-00000"))
    (template,) = [document for document in engine.stored_documents() if document["_kind"] == CHECKPOINT_KIND]
    scope = RunScope.from_options(options)
    clones = [
        {
            **template,
            "_id": scope.checkpoint_document_id(f"cp-{index:05d}"),
            "checkpoint_id": f"cp-{index:05d}",
            "parent_checkpoint_id": f"cp-{index - 1:05d}",
            "sequence": template["sequence"] + index,
            PAYLOAD_FIELD: os.urandom(PAYLOAD_BYTES),
        }
        for index in range(1, RUN_SIZE)
    ]
    await engine.insert_many(clones)  # through the engine, which keeps its index entries write by write
    del clones
    proxy.shapes.clear()
    gc.collect()

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert ids == [f"cp-{index:05d}" for index in range(RUN_SIZE)]
    growth = peak - before
    assert growth < RUN_SIZE * ID_BUDGET_BYTES, f"peak grew {growth:,} B while listing ids"
    assert growth * 8 < RUN_SIZE * PAYLOAD_BYTES
    assert proxy.shapes, "list_checkpoint_ids issued no find"
    for shape in proxy.shapes:
        assert shape.method == "find"
        assert _payload_excluded(shape.projection), f"a find fetched payloads: {shape.projection}"
    await client.close()


# -- list_checkpoints: one bounded page at a time --------------------------------------------------


class TrackedDocument(dict[str, Any]):
    """A raw document handed to the storage, whose lifetime the probe observes."""

    __slots__ = ("__weakref__",)


class _ProbeCursor:
    def __init__(self, probe: PagingProbe, inner: InMemoryCursor, limit: int) -> None:
        self._probe = probe
        self._inner = inner
        self.limit = limit
        self.fetched = False

    async def to_list(self, length: int | None = None) -> list[dict[str, Any]]:
        probe = self._probe
        assert not self.fetched, "a page cursor was fetched twice"
        self.fetched = True
        probe.requested.append((self.limit, length))
        probe.alive_at_fetch.append(probe.alive)
        probe.in_flight += 1
        probe.max_in_flight = max(probe.max_in_flight, probe.in_flight)
        try:
            raw = await self._inner.to_list(length)
        finally:
            probe.in_flight -= 1
        page: list[dict[str, Any]] = []
        for document in raw:
            tracked = TrackedDocument(document)
            weakref.finalize(tracked, probe.release)
            probe.alive += 1
            page.append(tracked)
        probe.returned.append(len(page))
        probe.max_alive = max(probe.max_alive, probe.alive)
        return page


class PagingProbe:
    """Forwards to the engine; counts page requests and the raw documents still alive."""

    def __init__(self, inner: InMemoryCollection) -> None:
        self.inner = inner
        self.cursors: list[_ProbeCursor] = []
        self.requested: list[tuple[int, int | None]] = []
        self.returned: list[int] = []
        self.alive_at_fetch: list[int] = []
        self.alive = 0
        self.max_alive = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def release(self) -> None:
        self.alive -= 1

    @property
    def database(self) -> Any:
        return self.inner.database

    def with_options(self, **options: Any) -> PagingProbe:
        self.inner = self.inner.with_options(**options)
        return self

    def find(self, filter: Mapping[str, Any], projection: Any = None, **kwargs: Any) -> _ProbeCursor:
        assert all(cursor.fetched for cursor in self.cursors), "a page was requested before the last arrived"
        cursor = _ProbeCursor(self, self.inner.find(filter, projection, **kwargs), int(kwargs["limit"]))
        self.cursors.append(cursor)
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


PAGE_SIZE = 4
CHAIN = 25  # six full pages and one of a single checkpoint


@pytest.fixture
async def paged() -> tuple[PagingProbe, list[WorkflowCheckpoint]]:
    client = InMemoryMongoClient()
    probe = PagingProbe(client["scale"]["checkpoints"])
    options = MongoDBCheckpointStorageOptions(
        tenant_id="tenant", workflow_name=WORKFLOW, session_id="paged-run", page_size=PAGE_SIZE
    )
    storage = MongoDBCheckpointStorage(probe, options=options)  # type: ignore[arg-type]
    previous: str | None = None
    for index in range(CHAIN):
        await storage.save(_checkpoint(f"cp-{index:02d}", previous=previous))
        previous = f"cp-{index:02d}"
    gc.collect()
    listed = await storage.list_checkpoints(workflow_name=WORKFLOW)
    await client.close()
    return probe, listed


async def test_list_checkpoints_requests_bounded_pages_one_at_a_time(
    paged: tuple[PagingProbe, list[WorkflowCheckpoint]],
) -> None:
    probe, listed = paged
    assert [checkpoint.checkpoint_id for checkpoint in listed] == [
        f"cp-{index:02d}" for index in range(CHAIN)
    ]
    assert len(probe.requested) == CHAIN // PAGE_SIZE + 1
    for limit, length in probe.requested:
        assert limit == PAGE_SIZE
        assert length is not None
        assert length <= PAGE_SIZE
    assert all(count <= PAGE_SIZE for count in probe.returned)
    assert probe.max_in_flight == 1
    assert probe.alive == 0, "raw documents outlived the listing"


async def test_list_checkpoints_raw_documents_stay_bounded_by_the_page_size(
    paged: tuple[PagingProbe, list[WorkflowCheckpoint]],
) -> None:
    probe, _ = paged
    # Bounded by the page, not by the run (25 checkpoints): at most the page being returned and
    # the previous one, which the storage still references while it fetches the next.
    assert max(probe.alive_at_fetch) <= PAGE_SIZE
    assert probe.max_alive <= 2 * PAGE_SIZE


async def test_list_checkpoints_holds_one_page_of_raw_documents_at_a_time(
    paged: tuple[PagingProbe, list[WorkflowCheckpoint]],
) -> None:
    probe, _ = paged
    assert max(probe.alive_at_fetch) == 0
    assert probe.max_alive <= PAGE_SIZE
