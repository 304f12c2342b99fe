"""A class of the script Python was started with is named ``__main__:...`` and loads nowhere else:
the codec says so when it saves one and when a load cannot resolve one (issue 21)."""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, EncodedCheckpoint
from agent_framework_mongodb.errors import MongoDBMappingError

_ADVICE = "Move the class into a module both import"


@dataclasses.dataclass
class MainClaim:
    amount: float


def _checkpoint(state: dict[str, Any]) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="g" * 64,
        checkpoint_id="cp-1",
        timestamp="2025-01-01T00:00:00+00:00",
        state=state,
    )


def _saved(cls: type[MainClaim]) -> EncodedCheckpoint:
    return CheckpointCodec(allowed_checkpoint_types=[cls]).encode(_checkpoint({"c": cls(1.0)}))


@pytest.fixture
def main_class(monkeypatch: pytest.MonkeyPatch) -> type[MainClaim]:
    """``MainClaim`` as if defined in the running script."""
    monkeypatch.setattr(MainClaim, "__module__", "__main__")
    monkeypatch.setattr(sys.modules["__main__"], "MainClaim", MainClaim, raising=False)
    return MainClaim


def test_saving_a_class_of_the_running_script_warns_once(
    main_class: type[MainClaim], caplog: pytest.LogCaptureFixture
) -> None:
    codec = CheckpointCodec(allowed_checkpoint_types=[main_class])
    with caplog.at_level(logging.WARNING, logger="agent_framework_mongodb"):
        codec.encode(_checkpoint({"claim": main_class(12.5)}))
        codec.encode(_checkpoint({"claim": main_class(13.5)}))
    warnings = [record for record in caplog.records if "__main__:MainClaim" in record.getMessage()]
    assert len(warnings) == 1
    assert _ADVICE in warnings[0].getMessage()


def test_a_load_of_an_unlisted_main_class_explains_the_entry_point(main_class: type[MainClaim]) -> None:
    encoded = _saved(main_class)
    with pytest.raises(MongoDBMappingError, match=_ADVICE) as raised:
        CheckpointCodec().decode(encoded.payload, checksum=encoded.payload_checksum)
    assert "Add it to" not in str(raised.value)


def test_a_listed_main_class_missing_from_this_script_explains_the_entry_point(
    main_class: type[MainClaim], monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded = _saved(main_class)
    monkeypatch.delattr(sys.modules["__main__"], "MainClaim")  # another entry point: no such class
    reader = CheckpointCodec(allowed_checkpoint_types=["__main__:MainClaim"])
    with pytest.raises(MongoDBMappingError, match="does not name a class") as raised:
        reader.decode(encoded.payload, checksum=encoded.payload_checksum)
    assert _ADVICE in str(raised.value)


def test_classes_of_other_modules_get_the_usual_advice() -> None:
    encoded = _saved(MainClaim)
    with pytest.raises(MongoDBMappingError, match="Add it to") as raised:
        CheckpointCodec().decode(encoded.payload, checksum=encoded.payload_checksum)
    assert _ADVICE not in str(raised.value)
