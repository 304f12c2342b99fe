"""Concurrency scenarios that check the storage's guarantees, for any engine scheduling.

Each scenario runs a concurrent workload on a fresh in-process engine and returns the guarantees it
saw broken, as sentences (empty when all held). ``test_interleavings.py`` runs them under each
engine seed and asserts nothing broke; ``interleaving_census.py`` runs them under hundreds of seeds
and under the first-in, first-out engine and counts, which is how docs/adr/0013 was measured.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Awaitable, Callable

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBConcurrencyError
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient, Scheduling

from ._support import (
    WORKFLOW,
    end_counter_grace,
    make_checkpoint,
    make_storage,
    raw_checkpoints,
    save_chain,
    scope_of,
)

Scenario = Callable[[InMemoryCollection], Awaitable[list[str]]]


@dataclasses.dataclass
class _Timed:
    """One save: when it started and returned on a shared logical clock, and what it saved."""

    checkpoint_id: str
    started: int
    returned: int


class _Recorder:
    """Stamps saves with a logical clock, so "returned before the other started" is exact."""

    def __init__(self) -> None:
        self._clock = itertools.count()
        self.saves: list[_Timed] = []

    async def save(self, storage: MongoDBCheckpointStorage, checkpoint_id: str) -> None:
        started = next(self._clock)
        await storage.save(make_checkpoint(checkpoint_id))
        self.saves.append(_Timed(checkpoint_id, started, next(self._clock)))


async def _sequences(collection: InMemoryCollection) -> dict[str, int]:
    return {document["checkpoint_id"]: document["sequence"] for document in await raw_checkpoints(collection)}


async def _order_violations(
    collection: InMemoryCollection, storage: MongoDBCheckpointStorage, saves: list[_Timed]
) -> list[str]:
    """A save that returned before another started must have a lower sequence, and the latest
    checkpoint must be the stored one with the greatest sequence."""
    stored = await _sequences(collection)
    broken: list[str] = []
    values = list(stored.values())
    if len(values) != len(set(values)):
        broken.append("uniqueness: two stored checkpoints share a sequence")
    for earlier, later in itertools.permutations(saves, 2):
        if earlier.returned < later.started and stored[earlier.checkpoint_id] >= stored[later.checkpoint_id]:
            broken.append(
                f"ordering: {later.checkpoint_id} started after {earlier.checkpoint_id} returned "
                f"but sorts before it ({stored[later.checkpoint_id]} <= {stored[earlier.checkpoint_id]})"
            )
            break
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    newest = max(stored, key=stored.__getitem__)
    if latest is None or latest.checkpoint_id != newest:
        broken.append("ordering: get_latest is not the stored checkpoint with the greatest sequence")
    return broken


async def writers_in_a_new_run(collection: InMemoryCollection) -> list[str]:
    """Four writers, each saving five checkpoints one after the other, in a new run's grace."""
    await make_storage(collection).ensure_indexes()
    recorder = _Recorder()
    writers = [make_storage(collection) for _ in range(4)]

    async def write(index: int) -> None:
        for step in range(5):
            await recorder.save(writers[index], f"w{index}-s{step}")

    await asyncio.gather(*(write(index) for index in range(len(writers))))
    return await _order_violations(collection, writers[0], recorder.saves)


async def writers_across_a_lost_counter(collection: InMemoryCollection) -> list[str]:
    """Writers of a checked run while an operator deletes the run's counter twice."""
    await make_storage(collection).ensure_indexes()
    first = make_storage(collection)
    await save_chain(first, 3, prefix="warm")
    end_counter_grace(collection)
    await first.save(make_checkpoint("marks-checked"))
    recorder = _Recorder()
    writers = [make_storage(collection) for _ in range(3)]
    counter_id = scope_of(first).counter_document_id

    async def write(index: int) -> None:
        for step in range(5):
            await recorder.save(writers[index], f"w{index}-s{step}")

    async def lose_the_counter() -> None:
        for _ in range(2):
            for _ in range(15):
                await asyncio.sleep(0)
            await collection.delete_one({"_id": counter_id})

    await asyncio.gather(lose_the_counter(), *(write(index) for index in range(len(writers))))
    await recorder.save(first, "after-all")
    return await _order_violations(collection, first, recorder.saves)


async def identical_retries(collection: InMemoryCollection) -> list[str]:
    """Three storages save the same checkpoint at once, twice each, beside other saves."""
    await make_storage(collection).ensure_indexes()
    storages = [make_storage(collection) for _ in range(3)]
    await storages[0].save(make_checkpoint("warm"))
    checkpoint = make_checkpoint("retried", state={"same": True})
    results = await asyncio.gather(
        *(storage.save(checkpoint) for storage in storages * 2),
        *(storage.save(make_checkpoint(f"other-{index}")) for index, storage in enumerate(storages)),
    )
    broken: list[str] = []
    if list(results[:6]) != ["retried"] * 6:
        broken.append("idempotency: an identical retry did not return the checkpoint's id")
    stored = [document["checkpoint_id"] for document in await raw_checkpoints(collection)]
    if stored.count("retried") != 1:
        broken.append(f"idempotency: identical retries stored {stored.count('retried')} documents")
    if sorted(stored) != sorted(["warm", "retried", "other-0", "other-1", "other-2"]):
        broken.append("idempotency: the stored checkpoints are not the ones saved")
    return broken


async def retry_after_a_cancelled_save(collection: InMemoryCollection) -> list[str]:
    """A save is cancelled part-way (its insert may have been applied while its reply travelled,
    as when a caller gives up on a server); the identical retry stores the checkpoint once."""
    storage = make_storage(collection)
    await save_chain(storage, 2, prefix="warm")
    checkpoint = make_checkpoint("retried")
    broken: list[str] = []
    for delay in (4, 12, 30):
        saving = asyncio.ensure_future(storage.save(checkpoint))
        for _ in range(delay):
            await asyncio.sleep(0)
        saving.cancel()
        await asyncio.gather(saving, return_exceptions=True)
        if await storage.save(checkpoint) != "retried":
            broken.append("idempotency: the retry after a cancelled save did not return its id")
    stored = [document["checkpoint_id"] for document in await raw_checkpoints(collection)]
    if stored != ["warm-000", "warm-001", "retried"]:
        broken.append(f"idempotency: after cancelled saves and retries the run holds {stored}")
    return broken


async def conflicting_saves(collection: InMemoryCollection) -> list[str]:
    """Three saves of one id with different content: exactly one wins and it is what loads."""
    await make_storage(collection).ensure_indexes()
    storages = [make_storage(collection) for _ in range(3)]
    results = await asyncio.gather(
        *(
            storage.save(make_checkpoint("contested", state={"v": index}))
            for index, storage in enumerate(storages)
        ),
        return_exceptions=True,
    )
    winners = [index for index, result in enumerate(results) if result == "contested"]
    losers = [result for result in results if isinstance(result, MongoDBConcurrencyError)]
    broken: list[str] = []
    if len(winners) != 1 or len(losers) != 2:
        broken.append(f"conflicts: {len(winners)} saves won and {len(losers)} conflicted, not 1 and 2")
        return broken
    if (await storages[0].load("contested")).state != {"v": winners[0]}:
        broken.append("conflicts: the stored content is not the winning save's")
    return broken


async def keep_last_writers(collection: InMemoryCollection) -> list[str]:
    """Four writers with ``keep_last=5`` (every number prunes), then one last save."""
    return await _keep_last_writers(collection, keep_last=5, saves=8)


async def keep_last_writers_pruning_every_other(collection: InMemoryCollection) -> list[str]:
    """As ``keep_last_writers`` with ``keep_last=20``, whose saves prune on every second number."""
    return await _keep_last_writers(collection, keep_last=20, saves=12)


async def _keep_last_writers(collection: InMemoryCollection, *, keep_last: int, saves: int) -> list[str]:
    writers = [make_storage(collection, keep_last=keep_last) for _ in range(4)]
    period = writers[0].options.prune_period

    async def write(writer: int) -> None:
        for index in range(saves):
            await writers[writer].save(make_checkpoint(f"cp-{writer}-{index}"))

    await asyncio.gather(*(write(writer) for writer in range(len(writers))))
    broken: list[str] = []
    held = await raw_checkpoints(collection)
    # ADR 0012: sequential saves leave at most keep_last + k - 1; each concurrent save in flight
    # one more. Once every writer has returned, at most the other writers' last saves remain.
    if len(held) > keep_last + period - 1 + len(writers) - 1:
        broken.append(f"keep_last: {len(held)} checkpoints left after concurrent saves returned")
    last = 0
    while not last or last % period:  # save until a number is due, no other save in flight
        await writers[0].save(make_checkpoint(f"cp-last-{last}"))
        last = (await raw_checkpoints(collection))[-1]["sequence"]
    after = [document["sequence"] for document in await raw_checkpoints(collection)]
    if len(after) != keep_last:
        broken.append(f"keep_last: {len(after)} checkpoints kept by a due save with no other in flight")
    everything = sorted({*(document["sequence"] for document in held), *after})
    if after != everything[-keep_last:]:
        broken.append("keep_last: what a due prune kept is not the newest")
    return broken


async def clear_run_beside_saves(collection: InMemoryCollection) -> list[str]:
    """``clear_run`` races saves (writers not quiesced); afterwards the run still orders and
    numbers uniquely, and a save after all of it is the latest."""
    await make_storage(collection).ensure_indexes()
    storage = make_storage(collection)
    await save_chain(storage, 4, prefix="old")
    await asyncio.gather(
        storage.clear_run(), *(storage.save(make_checkpoint(f"racing-{i}")) for i in range(3))
    )
    recorder = _Recorder()
    await recorder.save(storage, "after-clear")
    return await _order_violations(collection, storage, recorder.saves)


async def summaries_after_the_grace(collection: InMemoryCollection) -> list[str]:
    """The first saves after a counter's grace check and mark it; afterwards the run summary's
    latest checkpoint is the one stored at its latest sequence (no save failed or was a retry)."""
    await make_storage(collection).ensure_indexes()
    storages = [make_storage(collection) for _ in range(3)]
    await storages[0].save(make_checkpoint("first"))
    end_counter_grace(collection)
    await asyncio.gather(
        *(storage.save(make_checkpoint(f"concurrent-{i}")) for i, storage in enumerate(storages))
    )
    return await _summary_violations(collection, storages[0])


async def summaries_in_the_grace(collection: InMemoryCollection) -> list[str]:
    """As ``summaries_after_the_grace``, for concurrent saves of a new run (in its grace)."""
    await make_storage(collection).ensure_indexes()
    storages = [make_storage(collection) for _ in range(3)]
    await asyncio.gather(
        *(storage.save(make_checkpoint(f"concurrent-{i}")) for i, storage in enumerate(storages))
    )
    return await _summary_violations(collection, storages[0])


async def _summary_violations(collection: InMemoryCollection, storage: MongoDBCheckpointStorage) -> list[str]:
    (summary,) = (await storage.list_runs()).runs
    stored = await _sequences(collection)
    if (
        summary.latest_checkpoint_id is None
        or stored.get(summary.latest_checkpoint_id) != summary.latest_sequence
    ):
        return [
            f"list_runs: the summary names {summary.latest_checkpoint_id} at sequence "
            f"{summary.latest_sequence}, which is stored at {stored.get(summary.latest_checkpoint_id or '')}"
        ]
    return []


SCENARIOS: dict[str, Scenario] = {
    "writers_in_a_new_run": writers_in_a_new_run,
    "writers_across_a_lost_counter": writers_across_a_lost_counter,
    "identical_retries": identical_retries,
    "retry_after_a_cancelled_save": retry_after_a_cancelled_save,
    "conflicting_saves": conflicting_saves,
    "keep_last_writers": keep_last_writers,
    "keep_last_writers_pruning_every_other": keep_last_writers_pruning_every_other,
    "clear_run_beside_saves": clear_run_beside_saves,
    "summaries_after_the_grace": summaries_after_the_grace,
    "summaries_in_the_grace": summaries_in_the_grace,
}


async def run_scenario(scenario: Scenario, scheduling: Scheduling | None) -> list[str]:
    """Run one scenario on a fresh engine with this scheduling."""
    client = InMemoryMongoClient(scheduling=scheduling)
    try:
        return await scenario(client["checkpoint_db"]["checkpoint_coll"])
    finally:
        await client.close()


async def gathered_new_run_sequences(collection: InMemoryCollection) -> list[int]:
    """The sorted sequences of twenty gathered saves of a new run (for the census's contiguity count)."""
    storage = make_storage(collection)
    await asyncio.gather(*(storage.save(make_checkpoint(f"cp-{i:02d}")) for i in range(20)))
    return sorted((await _sequences(collection)).values())
