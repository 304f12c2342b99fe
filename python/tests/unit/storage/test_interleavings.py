"""The storage's guarantees hold in server-like interleavings: each scenario under each engine seed.

The scenarios live in ``_interleavings.py``; ``interleaving_census.py`` runs them under hundreds of
seeds (docs/adr/0015-seeded-engine-scheduling.md records what that found).
"""

from __future__ import annotations

import pytest

from agent_framework_mongodb.testing import InMemoryCollection

from ._interleavings import SCENARIOS, Scenario

pytestmark = pytest.mark.seeded_engine  # run under each engine scheduling seed (tests/conftest.py)


@pytest.mark.parametrize("scenario", list(SCENARIOS.values()), ids=list(SCENARIOS))
async def test_guarantees_hold(collection: InMemoryCollection, scenario: Scenario) -> None:
    assert await scenario(collection) == []
