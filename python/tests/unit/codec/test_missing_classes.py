"""A save and a load name every class they cannot use in one error, not one per attempt (issue 21)."""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, EncodedCheckpoint
from agent_framework_mongodb.errors import MongoDBMappingError, MongoDBSerializationError
from tests.unit.codec.app_types import Color, OrderState, Pair, Point

_KEYS = {cls: f"tests.unit.codec.app_types:{cls.__qualname__}" for cls in (OrderState, Point, Color, Pair)}


def _checkpoint(state: dict[str, Any]) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="g" * 64,
        checkpoint_id="cp-1",
        timestamp="2025-01-01T00:00:00+00:00",
        state=state,
    )


def _saved(state: dict[str, Any]) -> EncodedCheckpoint:
    return CheckpointCodec(allowed_checkpoint_types=list(_KEYS)).encode(_checkpoint(state))


_EVERY_KIND = {
    "order": OrderState("o-1", ["a"], 2.0),
    "points": [Point(1, 2), Point(3, 4)],
    "by_color": {"c": Color.RED},
    "pairs": [Pair(1, "x")],
    "response_type": Point,  # a class object, stored by name
}


def _load(encoded: EncodedCheckpoint, allowed: list[type]) -> None:
    codec = CheckpointCodec(allowed_checkpoint_types=allowed)
    codec.decode(encoded.payload, checksum=encoded.payload_checksum)


def test_every_missing_class_is_named_in_one_error() -> None:
    encoded = _saved(_EVERY_KIND)
    with pytest.raises(MongoDBMappingError) as raised:
        _load(encoded, [])
    _assert_names_every_class(raised.value)


def test_a_save_names_every_unlisted_class_in_one_error() -> None:
    with pytest.raises(MongoDBSerializationError) as raised:
        CheckpointCodec().encode(_checkpoint(_EVERY_KIND))
    _assert_names_every_class(raised.value)


def _assert_names_every_class(error: MongoDBMappingError | MongoDBSerializationError) -> None:
    """One refusal names the four classes of ``_EVERY_KIND``, each once (Point is met three times:
    two instances and the class object)."""
    message = str(error)
    assert message.count("classes it names are not available here") == 1
    for key in _KEYS.values():
        assert repr(key) in message
    assert "4 classes" in message
    assert sorted(error.class_names) == sorted(_KEYS.values())


def test_a_save_missing_one_class_keeps_its_own_advice() -> None:
    with pytest.raises(MongoDBSerializationError, match="Add it to") as raised:
        CheckpointCodec(allowed_checkpoint_types=[OrderState]).encode(
            _checkpoint({"order": OrderState("o-1"), "points": [Point(0, 0), Point(1, 1)]})
        )
    assert raised.value.class_names == (_KEYS[Point],)
    assert "classes it names" not in str(raised.value)


def test_a_refusal_of_another_kind_still_stops_the_walk_and_keeps_the_names_met() -> None:
    class Local:  # defined in a function: refused for its place, not for its listing
        pass

    with pytest.raises(MongoDBSerializationError, match="inside a function") as raised:
        CheckpointCodec().encode(_checkpoint({"a": Point(0, 0), "b": Local()}))
    assert raised.value.class_names == (_KEYS[Point],)


def test_one_missing_class_keeps_its_own_advice() -> None:
    encoded = _saved({"order": OrderState("o-1"), "point": Point(0, 0)})
    with pytest.raises(MongoDBMappingError, match="Add it to") as raised:
        _load(encoded, [OrderState])
    assert repr(_KEYS[Point]) in str(raised.value)
    assert "classes it names" not in str(raised.value)


def test_a_listed_set_of_classes_loads() -> None:
    encoded = _saved({"order": OrderState("o-1"), "point": Point(0, 0)})
    _load(encoded, [OrderState, Point])
