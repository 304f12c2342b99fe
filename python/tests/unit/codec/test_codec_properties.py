"""Property-based checks: lossless round trips and a stable, order-free, type-tagged identity."""

from __future__ import annotations

import pickle
import random
from typing import Any, cast

from agent_framework import Content, Message, WorkflowCheckpoint
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, canonical_hash
from agent_framework_mongodb.checkpoints.codec.rebuild import load_tree, rebuild_tree
from agent_framework_mongodb.checkpoints.codec.rules import TypeResolver, type_key
from agent_framework_mongodb.checkpoints.codec.walk import walk_value
from tests.unit.codec.app_types import OrderState, Point
from tests.unit.codec.state_types import ALLOWED_FOR_RICH, rich_value

_ALLOWED = ("tests.unit.codec.app_types:OrderState", "tests.unit.codec.app_types:Point")
_CODEC = CheckpointCodec(_ALLOWED)

_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
_keys = st.text(max_size=8) | st.integers()
_json_like = st.recursive(
    _scalars | st.binary(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(_keys, children, max_size=4)
        | st.frozensets(_scalars.filter(lambda value: value is not None), max_size=4)
    ),
    max_leaves=25,
)
_objects = st.builds(OrderState, st.text(max_size=6), st.lists(st.text(max_size=4), max_size=3)) | st.builds(
    Point, st.integers(), st.integers()
)
_state_values = st.recursive(
    _json_like | _objects,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=15,
)
_states = st.dictionaries(st.text(max_size=10), _state_values, max_size=6)


def _checkpoint(state: dict[str, Any]) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf", graph_signature_hash="h", checkpoint_id="c", timestamp="t", state=state
    )


def _shuffled(value: Any, rng: random.Random) -> Any:
    if type(value) is dict:
        items = [(key, _shuffled(item, rng)) for key, item in value.items()]
        rng.shuffle(items)
        return dict(items)
    if type(value) is list:
        return [_shuffled(item, rng) for item in value]
    return value


@settings(max_examples=150, deadline=None)
@given(_states)
def test_encode_decode_is_lossless_and_hash_stable(state: dict[str, Any]) -> None:
    encoded = _CODEC.encode(_checkpoint(state))
    restored = _CODEC.decode(encoded.payload, checksum=encoded.payload_checksum)
    assert restored.state == state
    assert _CODEC.encode(restored).payload_hash == encoded.payload_hash
    assert canonical_hash(_checkpoint(state).to_dict(), _ALLOWED) == encoded.payload_hash


@settings(max_examples=150, deadline=None)
@given(_states, st.randoms(use_true_random=False))
def test_insertion_order_does_not_change_the_hash(state: dict[str, Any], rng: random.Random) -> None:
    reordered = _shuffled(state, rng)
    assert reordered == state
    assert canonical_hash(reordered, _ALLOWED) == canonical_hash(state, _ALLOWED)


@given(st.integers(min_value=-(2**64), max_value=2**64))
def test_int_float_and_bool_are_distinct(number: int) -> None:
    tagged = {canonical_hash(number), canonical_hash(float(number)), canonical_hash(str(number))}
    assert len(tagged) == 3
    if number in (0, 1):
        assert canonical_hash(bool(number)) not in tagged


@given(st.lists(_scalars, max_size=5))
def test_list_and_tuple_are_distinct(items: list[Any]) -> None:
    assert canonical_hash(items) != canonical_hash(tuple(items))


def _walk_of(value: object, allowed: tuple[str, ...]) -> object:
    return walk_value(value, TypeResolver(allowed)).tree


def test_walk_of_a_rebuilt_value_is_the_stored_tree_for_every_kind() -> None:
    """The save proof compares trees, not values; this is the property that makes that enough.

    ``rich_value`` holds every kind of value the codec stores (objects, slots, pydantic models,
    named tuples, enums, zones, paths, framework messages, sets, tuples, class objects).
    """
    allowed = tuple(type_key(cls) for cls in ALLOWED_FOR_RICH)
    conversation = [
        Message(role="user", contents=[Content.from_text("Where is order 7?")], author_name="ada"),
        Message(
            role="assistant",
            contents=[Content.from_function_call(call_id="c", name="find", arguments={"id": 7})],
        ),
        Message(role="tool", contents=[Content.from_function_result(call_id="c", result={"status": "sent"})]),
    ]
    value = {"rich": rich_value(), "conversation": conversation}
    tree = _walk_of(value, allowed)
    resolver = TypeResolver(allowed)
    rebuilt = rebuild_tree(
        load_tree(pickle.dumps({"value": tree}, protocol=5)),
        resolver,
        check_root=lambda root: None,
        payload_size=1 << 30,
    )
    assert _walk_of(cast("dict[str, Any]", rebuilt)["value"], allowed) == tree


@settings(max_examples=100, deadline=None)
@given(_states)
def test_walk_of_a_rebuilt_state_is_the_stored_tree(state: dict[str, Any]) -> None:
    tree = _walk_of(state, _ALLOWED)
    rebuilt = rebuild_tree(
        load_tree(pickle.dumps(tree, protocol=5)),
        TypeResolver(_ALLOWED),
        check_root=lambda root: None,
        payload_size=1 << 30,
    )
    assert _walk_of(rebuilt, _ALLOWED) == tree
