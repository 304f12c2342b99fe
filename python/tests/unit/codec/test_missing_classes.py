"""A load names every class it cannot use in one error, not one per attempt (issue 21)."""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, EncodedCheckpoint
from agent_framework_mongodb.errors import MongoDBMappingError
from tests.unit.codec.app_types import Color, OrderState, Pair, Point

_KEYS = {cls: f"tests.unit.codec.app_types:{cls.__qualname__}" for cls in (OrderState, Point, Color, Pair)}


def _saved(state: dict[str, Any]) -> EncodedCheckpoint:
    checkpoint = WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="g" * 64,
        checkpoint_id="cp-1",
        timestamp="2025-01-01T00:00:00+00:00",
        state=state,
    )
    return CheckpointCodec(allowed_checkpoint_types=list(_KEYS)).encode(checkpoint)


def _load(encoded: EncodedCheckpoint, allowed: list[type]) -> None:
    codec = CheckpointCodec(allowed_checkpoint_types=allowed)
    codec.decode(encoded.payload, checksum=encoded.payload_checksum)


def test_every_missing_class_is_named_in_one_error() -> None:
    encoded = _saved(
        {
            "order": OrderState("o-1", ["a"], 2.0),
            "points": [Point(1, 2), Point(3, 4)],
            "by_color": {"c": Color.RED},
            "pairs": [Pair(1, "x")],
        }
    )
    with pytest.raises(MongoDBMappingError) as raised:
        _load(encoded, [])
    message = str(raised.value)
    assert message.count("classes it names are not available here") == 1
    for key in _KEYS.values():
        assert repr(key) in message
    assert "4 classes" in message


def test_one_missing_class_keeps_its_own_advice() -> None:
    encoded = _saved({"order": OrderState("o-1"), "point": Point(0, 0)})
    with pytest.raises(MongoDBMappingError, match="Add it to") as raised:
        _load(encoded, [OrderState])
    assert repr(_KEYS[Point]) in str(raised.value)
    assert "classes it names" not in str(raised.value)


def test_a_listed_set_of_classes_loads() -> None:
    encoded = _saved({"order": OrderState("o-1"), "point": Point(0, 0)})
    _load(encoded, [OrderState, Point])
