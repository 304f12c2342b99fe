"""Count broken guarantees per concurrency scenario across engine seeds, and under first in, first out.

Run from ``python/``: ``.venv/bin/python -m tests.unit.storage.interleaving_census 300``. For each
scenario of ``_interleavings.py`` it prints how many seeds broke a guarantee (with the first broken
sentence) and whether the first-in, first-out engine did; then how many seeds gave twenty gathered
saves of a new run non-contiguous sequences. docs/adr/0015-seeded-engine-scheduling.md records
the figures.
"""

from __future__ import annotations

import asyncio
import sys

from agent_framework_mongodb.testing import InMemoryMongoClient, Scheduling

from ._interleavings import SCENARIOS, gathered_new_run_sequences, run_scenario


async def _census(seeds: int) -> None:
    for name, scenario in SCENARIOS.items():
        fifo = await run_scenario(scenario, None)
        failing: list[int] = []
        first: str | None = None
        for seed in range(seeds):
            broken = await run_scenario(scenario, Scheduling(seed=seed))
            if broken:
                failing.append(seed)
                first = first or broken[0]
        print(
            f"{name}: {len(failing)}/{seeds} seeds broke a guarantee; first in, first out: {fifo or 'held'}"
        )
        if failing:
            print(f"    seeds {failing[:10]}...: {first}")
    gapped = 0
    for seed in [None, *range(seeds)]:
        client = InMemoryMongoClient(scheduling=None if seed is None else Scheduling(seed=seed))
        values = await gathered_new_run_sequences(client["db"]["coll"])
        contiguous = values == list(range(1, 21))
        if seed is None:
            print(f"twenty gathered saves of a new run, first in, first out: contiguous={contiguous}")
        elif not contiguous:
            gapped += 1
    print(f"twenty gathered saves of a new run: non-contiguous under {gapped}/{seeds} seeds")


if __name__ == "__main__":
    asyncio.run(_census(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
