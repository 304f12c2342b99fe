"""The save's proof leans on the walk (ADR 0027): what it accepts, the load's full rebuild accepts.

A save proves its bytes by unpickling them with the load's unpickler and comparing the tree with
the walked one, then checks only what depends on the bytes (the loaded top level and the copy
budget); the rebuild's other checks are the walk's own. These tests hold the shortcut to the
full load path: every state a save accepts decodes, to an equal state with the same identity,
for every kind of value, shared in several places, nested up to the bound; and the one check
that needs the payload's size refuses what the load would refuse.
"""

from __future__ import annotations

import pathlib
from decimal import Decimal
from typing import Any

import pytest
from agent_framework import Content, Message, WorkflowCheckpoint
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, ChunkSettings, EncodedCheckpoint
from agent_framework_mongodb.checkpoints.codec.chunks import DEFAULT_SPLIT_ABOVE, ChunkReader
from agent_framework_mongodb.checkpoints.codec.rebuild import COPY_ALLOWANCE, COPY_FACTOR
from agent_framework_mongodb.checkpoints.codec.rules import TypeResolver, type_key
from agent_framework_mongodb.checkpoints.codec.walk import MAX_NESTING, walk_value
from agent_framework_mongodb.errors import MongoDBMappingError, MongoDBSerializationError
from tests.unit.codec.state_types import ALLOWED_FOR_RICH, Pair, Plain, rich_value

_ALLOWED = tuple(type_key(cls) for cls in ALLOWED_FOR_RICH)
_CODEC = CheckpointCodec(_ALLOWED)


def _checkpoint(state: dict[str, Any]) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf", graph_signature_hash="h", checkpoint_id="c", timestamp="t", state=state
    )


def _conversation() -> list[Message]:
    return [
        Message(role="user", contents=[Content.from_text("Where is order 7?")], author_name="ada"),
        Message(
            role="assistant",
            contents=[Content.from_function_call(call_id="c", name="find", arguments={"id": 7})],
        ),
        Message(role="tool", contents=[Content.from_function_result(call_id="c", result={"status": "sent"})]),
    ]


# One pool of live values, every kind the codec stores; sampled_from hands out the same objects,
# so a drawn state shares them among several places as real state does.
_POOL: list[Any] = [*rich_value().values(), *_conversation(), Decimal("1.50"), bytearray(b"ab")]


def _wrap(kind: str, value: Any) -> Any:
    if kind == "list":
        return [value]
    if kind == "tuple":
        return (value,)
    if kind == "dict":
        return {"k": value}
    if kind == "int-key dict":
        return {1: value}
    return Plain(inner=value)  # an object: its record and its attribute dict


_values = st.recursive(
    st.sampled_from(_POOL) | st.integers() | st.text(max_size=4) | st.none(),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=4), children, max_size=3)
        | st.builds(
            lambda pairs: Plain(**pairs), st.dictionaries(st.sampled_from("abc"), children, max_size=2)
        )
    ),
    max_leaves=12,
)
_states = st.dictionaries(st.text(max_size=6), _values, min_size=1, max_size=4)


_CONTEXT = b"proof-tests/tree-chunks/v1"
_BUDGET = 1 << 28


def _chunked_decode(encoded: EncodedCheckpoint) -> WorkflowCheckpoint:
    """The storage's chunked load path: open the root, add every leaf it reaches, join, rebuild."""
    root = _CODEC.open_chunked(encoded.payload, checksum=encoded.payload_checksum)
    reader = ChunkReader(_CONTEXT, root, budget=_BUDGET)
    leaves = {chunk.address: chunk.data for chunk in encoded.chunks}
    while wanted := sorted(address for address in reader.wanted() if address in leaves):
        for address in wanted:
            reader.add(address, leaves[address])
    return _CODEC.decode_chunked(reader, root_bytes=len(encoded.payload))


def _assert_chunked_loads_as_saved(state: dict[str, Any]) -> None:
    try:
        encoded = _CODEC.encode(
            _checkpoint(state), chunking=ChunkSettings(_CONTEXT, max_checkpoint_bytes=_BUDGET)
        )
    except (MongoDBSerializationError, MongoDBMappingError):
        return
    assert encoded.chunks, "the state was meant to be chunked"
    restored = (
        _chunked_decode(encoded)
        if encoded.chunks
        else _CODEC.decode(encoded.payload, checksum=encoded.payload_checksum)
    )
    assert _CODEC.encode(restored).payload_hash == encoded.payload_hash


def _assert_loads_as_saved(state: dict[str, Any]) -> None:
    try:
        encoded = _CODEC.encode(_checkpoint(state))
    except (MongoDBSerializationError, MongoDBMappingError):
        return  # refused on save: nothing is stored, nothing to load
    restored = _CODEC.decode(encoded.payload, checksum=encoded.payload_checksum)  # the full load path
    # The identity, not ==: framework messages and plain objects compare by identity.
    assert _CODEC.encode(restored).payload_hash == encoded.payload_hash


@settings(max_examples=300, deadline=None)
@given(_states)
def test_what_a_save_accepts_the_full_load_path_loads(state: dict[str, Any]) -> None:
    _assert_loads_as_saved(state)


@settings(max_examples=100, deadline=None)
@given(_states)
def test_what_a_chunked_save_accepts_the_chunked_load_path_loads(state: dict[str, Any]) -> None:
    # Padded past the split threshold, so the save is chunked and its whole pickle only measured.
    _assert_chunked_loads_as_saved(
        {**state, "padding": ["x" * 64 + str(n) for n in range(DEFAULT_SPLIT_ABOVE // 48)]}
    )


def test_every_kind_shared_everywhere_loads() -> None:
    shared = _POOL
    state = {"once": shared, "again": shared, "in_a_tuple": (shared, shared)}
    _assert_loads_as_saved(state)
    _assert_chunked_loads_as_saved({**state, "more": [list(shared) for _ in range(20)]})


@pytest.mark.parametrize("kind", ["list", "tuple", "dict", "int-key dict", "object"])
@pytest.mark.parametrize("extra", [-3, -2, -1, 0, 1, 2])
def test_nesting_at_the_bound_is_refused_on_save_exactly_where_the_load_refuses(
    kind: str, extra: int
) -> None:
    # An object counts twice (its record and its attribute dict), as in the rebuild.
    levels_per_wrap = 2 if kind in ("object", "int-key dict") else 1
    value: Any = 1
    for _ in range(MAX_NESTING // levels_per_wrap + extra):
        value = _wrap(kind, value)
    state = {"deep": value}
    stored = _stores(state)
    if extra <= -3:
        assert stored  # the bound is near: three wraps fewer are always stored
    if stored:
        _assert_loads_as_saved(state)


def _stores(state: dict[str, Any]) -> bool:
    try:
        _CODEC.encode(_checkpoint(state))
    except MongoDBMappingError as refusal:
        if "nested" not in str(refusal):
            raise
        return False
    return True


def _shared_path_state(count: int, length: int) -> dict[str, Any]:
    # A path caches its text, so every record of the same path object holds the same str, which
    # the pickle stores once: the load copies it once per record.
    path = pathlib.PurePosixPath("/" + "p" * (length - 1))
    return {"paths": [path] * count}


def test_the_walk_counts_what_the_rebuild_copies() -> None:
    state = {
        "path": pathlib.PurePosixPath("/srv/app"),
        "number": Decimal("12.500"),
        "blob": bytearray(b"12345"),
        "keys": {Decimal("1.0"): "a", pathlib.PurePosixPath("/k"): "b"},
        "pair": Pair(bytearray(b"xy"), pathlib.PureWindowsPath("C:/x")),
    }
    walked = walk_value(state, TypeResolver(_ALLOWED))
    assert walked.copied == len("/srv/app") + len("12.500") + 5 + len("1.0") + len("/k") + 2 + len("C:\\x")


@pytest.mark.parametrize("chunked", [False, True])
def test_records_copying_far_more_than_the_payload_are_refused_on_save(chunked: bool) -> None:
    length = 200
    count = 3 * COPY_ALLOWANCE // length  # 3 MiB copied out of a payload of about 60 kB
    state = _shared_path_state(count, length)
    chunking = ChunkSettings(_CONTEXT, max_checkpoint_bytes=_BUDGET) if chunked else None
    with pytest.raises(MongoDBSerializationError, match="copy far more"):
        _CODEC.encode(_checkpoint(state), chunking=chunking)


def test_a_shared_value_within_the_copy_budget_is_stored_and_loads() -> None:
    state = _shared_path_state(1_000, 200)  # 200 kB copied: within the allowance
    encoded = _CODEC.encode(_checkpoint(state))
    assert COPY_FACTOR * len(encoded.payload) + COPY_ALLOWANCE > 200_000
    restored = _CODEC.decode(encoded.payload, checksum=encoded.payload_checksum)
    assert restored.state == state
