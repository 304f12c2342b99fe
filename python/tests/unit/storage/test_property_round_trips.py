"""Property: any plain state round-trips exactly, and an identical re-save is idempotent."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_framework_mongodb.testing import InMemoryMongoClient

from ._support import checkpoint_dict, make_checkpoint, make_storage

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=12,
)
states = st.dictionaries(st.text(min_size=1, max_size=8), values, max_size=5)


def typed(value: Any) -> Any:
    """A structure whose equality also compares types and float signs."""
    if isinstance(value, dict):
        return ("dict", sorted((repr(k), typed(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    if isinstance(value, float):
        return ("float", value.hex())
    return (type(value).__name__, value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states)
def test_any_plain_state_round_trips_exactly(state: dict[str, Any]) -> None:
    async def scenario() -> None:
        client = InMemoryMongoClient()
        storage = make_storage(client["db"]["coll"])
        checkpoint = make_checkpoint("cp-prop", state=state)
        await storage.save(checkpoint)
        loaded = await storage.load("cp-prop")
        assert typed(loaded.state) == typed(state)
        assert checkpoint_dict(loaded) == checkpoint_dict(checkpoint)
        assert await storage.save(make_checkpoint("cp-prop", state=state)) == "cp-prop"
        assert await client["db"]["coll"].count_documents({"_kind": "workflow_checkpoint"}) == 1

    asyncio.run(scenario())
