"""CheckpointCodec v2: round trips, allowlists, hooks never called, global pickle state, the proof."""

from __future__ import annotations

import copyreg
import datetime as dt
import pathlib
import pickle
import pickletools
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import agent_framework
import pytest
from agent_framework import Content, Message, WorkflowCheckpoint, WorkflowCheckpointException

from agent_framework_mongodb.checkpoints.codec import (
    CANONICAL_HASH_VERSION,
    CHECKSUM_ALGORITHM,
    PAYLOAD_FORMAT,
    CheckpointCodec,
    EncodedCheckpoint,
    canonical_form,
    canonical_hash,
    payload_checksum,
)
from agent_framework_mongodb.errors import MongoDBMappingError, MongoDBSerializationError
from tests.unit.codec import app_types
from tests.unit.codec.app_types import Color, HookedState, OrderState, Point, SlottedPoint

_ORDER_KEY = "tests.unit.codec.app_types:OrderState"
_PROJECT = Path(__file__).resolve().parents[3]


def _checkpoint(state: dict[Any, Any] | None = None, **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="g" * 64,
        checkpoint_id="cp-1",
        timestamp="2025-01-01T00:00:00+00:00",
        state=state or {},
        **fields,
    )


def _round_trip(codec: CheckpointCodec, checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    encoded = codec.encode(checkpoint)
    return codec.decode(encoded.payload, checksum=encoded.payload_checksum)


def test_constants() -> None:
    assert PAYLOAD_FORMAT == "tree-pickle-5/v2"
    assert CHECKSUM_ALGORITHM == "sha256"
    assert CANONICAL_HASH_VERSION == 3


def test_encoded_checkpoint_fields() -> None:
    checkpoint = _checkpoint({"k": 1})
    encoded = CheckpointCodec().encode(checkpoint)
    assert isinstance(encoded, EncodedCheckpoint)
    assert encoded.payload[:2] == b"\x80\x05"
    assert encoded.payload_hash == canonical_hash(checkpoint.to_dict())
    # The payload is a pickle of plain values only: it names no global at all.
    opcodes = {opcode.name for opcode, _, _ in pickletools.genops(encoded.payload)}
    assert not opcodes & {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX"}
    assert encoded.payload_checksum == payload_checksum(encoded.payload)
    with pytest.raises(AttributeError):
        encoded.payload = b""  # type: ignore[misc]


def test_json_like_and_standard_values_round_trip() -> None:
    state: dict[Any, Any] = {
        "text": "h\u00e9llo \ud83d\ude00",
        "numbers": [0, -1, 2**80, 1.5, -0.0, True, None],
        "nested": {"t": (1, "2", b"3"), "s": {1, 2}, "f": frozenset({"x"}), "ba": bytearray(b"q")},
        "when": dt.datetime(2025, 5, 6, 7, 8, 9, 10, tzinfo=dt.timezone(dt.timedelta(hours=2), "X")),
        "day": dt.date(2020, 2, 29),
        "at": dt.time(1, 2, 3),
        "span": dt.timedelta(days=3),
        "amount": Decimal("12.3400"),
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        7: "int key",
        ("tuple", "key"): "tuple key",
    }
    codec = CheckpointCodec()
    restored = _round_trip(codec, _checkpoint(state, iteration_count=3, metadata={"m": 1}))
    assert restored.state == state
    assert restored.iteration_count == 3
    assert (
        canonical_hash(restored.to_dict())
        == codec.encode(_checkpoint(state, iteration_count=3, metadata={"m": 1})).payload_hash
    )


def test_messages_round_trip() -> None:
    conversation = [
        Message(role="user", contents=[Content.from_text("What is my order status?")]),
        Message(
            role="assistant",
            contents=[Content.from_function_call(call_id="c1", name="lookup", arguments={"id": 1})],
        ),
        Message(role="tool", contents=[Content.from_function_result(call_id="c1", result={"ok": True})]),
    ]
    checkpoint = _checkpoint({"_executor_state": {"agent": {"messages": conversation}}})
    restored = _round_trip(CheckpointCodec(), checkpoint)
    messages = restored.state["_executor_state"]["agent"]["messages"]
    assert [type(message) for message in messages] == [Message, Message, Message]
    assert [message.role for message in messages] == ["user", "assistant", "tool"]
    assert messages[0].text == "What is my order status?"
    assert messages[1].contents[0].call_id == "c1"
    assert canonical_hash(restored.to_dict()) == canonical_hash(checkpoint.to_dict())


def test_identical_checkpoints_hash_identically_and_changes_do_not() -> None:
    codec = CheckpointCodec()
    first = codec.encode(_checkpoint({"a": 1, "b": 2}))
    second = codec.encode(_checkpoint({"b": 2, "a": 1}))
    third = codec.encode(_checkpoint({"a": 1, "b": 3}))
    assert first.payload_hash == second.payload_hash
    assert first.payload_hash != third.payload_hash


def test_application_dataclass_needs_the_allowlist() -> None:
    checkpoint = _checkpoint({"order": OrderState("o-1", ["a"], 2.5)})
    with pytest.raises(MongoDBSerializationError, match="allowed_checkpoint_types"):
        CheckpointCodec().encode(checkpoint)

    allowed = CheckpointCodec((_ORDER_KEY,))
    encoded = allowed.encode(checkpoint)
    assert allowed.decode(encoded.payload, checksum=encoded.payload_checksum).state == checkpoint.state

    with pytest.raises(MongoDBMappingError, match=_ORDER_KEY) as raised:
        CheckpointCodec().decode(encoded.payload, checksum=encoded.payload_checksum)
    assert "allowed_checkpoint_types" in str(raised.value)
    assert isinstance(raised.value, WorkflowCheckpointException)


def test_slotted_and_frozen_application_classes_round_trip() -> None:
    keys = (
        "tests.unit.codec.app_types:Point",
        "tests.unit.codec.app_types:SlottedPoint",
        "tests.unit.codec.app_types:Color",
    )
    state = {"point": Point(1, 2), "slotted": SlottedPoint(3, "s"), "color": Color.BLUE}
    assert _round_trip(CheckpointCodec(keys), _checkpoint(state)).state == state


def test_pickle_hooks_are_never_called_in_either_direction() -> None:
    codec = CheckpointCodec(
        ("tests.unit.codec.app_types:HookedState", "tests.unit.codec.app_types:HookedEnum")
    )
    state = {"hooked": HookedState(1), "enum": app_types.HookedEnum.A}
    restored = _round_trip(codec, _checkpoint(state))
    assert type(restored.state["hooked"]) is HookedState
    assert vars(restored.state["hooked"]) == {"value": 1}
    assert restored.state["enum"] is app_types.HookedEnum.A
    assert app_types.HOOK_CALLS == []


def test_mapping_subclass_is_rejected_even_when_allowlisted() -> None:
    codec = CheckpointCodec(("tests.unit.codec.app_types:Mapped",))
    with pytest.raises(MongoDBSerializationError, match="only exact dict"):
        codec.encode(_checkpoint({"bad": app_types.Mapped(a=1)}))


def test_global_dispatch_table_reducer_is_ignored() -> None:
    checkpoint = _checkpoint({"order": OrderState("o-1"), "when": dt.date(2020, 1, 1)})
    codec = CheckpointCodec((_ORDER_KEY,))
    before = codec.encode(checkpoint)
    calls: list[object] = []

    def divergent(value: object) -> tuple[Any, tuple[Any, ...]]:
        calls.append(value)
        return (str, ("diverged",))

    copyreg.pickle(OrderState, divergent)
    copyreg.pickle(dt.date, divergent)
    try:
        assert pickle.dumps(OrderState("x"), protocol=5) != before.payload  # the reducer is live
        calls.clear()
        after = codec.encode(checkpoint)
    finally:
        del copyreg.dispatch_table[OrderState]
        del copyreg.dispatch_table[dt.date]
    assert calls == []
    assert after == before


def test_copyreg_extension_registrations_change_nothing() -> None:
    # The tree names no class, so an extension code can never stand in for one.
    codec = CheckpointCodec((_ORDER_KEY,))
    checkpoint = _checkpoint({"deep": [{"order": OrderState("o-1")}]})
    before = codec.encode(checkpoint)
    copyreg.add_extension("tests.unit.codec.app_types", "OrderState", 0x7AB1)
    try:
        assert codec.encode(checkpoint) == before
        assert codec.decode(before.payload, checksum=before.payload_checksum).state == checkpoint.state
    finally:
        copyreg.remove_extension("tests.unit.codec.app_types", "OrderState", 0x7AB1)


def test_framework_enum_and_unrelated_extension_registrations_leave_encoding_alone() -> None:
    codec = CheckpointCodec()
    checkpoint = _checkpoint({"a": [1, "b"]})
    before = codec.encode(checkpoint)
    copyreg.add_extension("tests.unit.codec.marker", "Tripwire", 0x7AB2)
    try:
        assert codec.encode(checkpoint) == before
        assert codec.decode(before.payload, checksum=before.payload_checksum).state == checkpoint.state
    finally:
        copyreg.remove_extension("tests.unit.codec.marker", "Tripwire", 0x7AB2)


def test_checksum_is_verified_before_unpickling() -> None:
    encoded = CheckpointCodec().encode(_checkpoint({"a": 1}))
    with pytest.raises(MongoDBMappingError, match="checksum"):
        CheckpointCodec().decode(encoded.payload, checksum="0" * 64)
    tampered = encoded.payload.replace(b"\x8c\x01a", b"\x8c\x01b")
    with pytest.raises(MongoDBMappingError, match="checksum"):
        CheckpointCodec().decode(tampered, checksum=encoded.payload_checksum)


def _payload(value: object) -> bytes:
    return pickle.dumps(value, protocol=5)


def test_decode_requires_a_checkpoint_dictionary() -> None:
    codec = CheckpointCodec()
    for value in ([1, 2], {"not": "fields"}, "text"):
        payload = _payload(value)
        with pytest.raises(MongoDBMappingError):
            codec.decode(payload, checksum=payload_checksum(payload))


def test_decode_refuses_the_first_codecs_pickles_and_any_global() -> None:
    # A v1 payload pickled the public dict itself, naming framework classes: never resolved now.
    payload = pickle.dumps(_checkpoint({"m": Message(role="user", contents=[])}).to_dict(), protocol=5)
    with pytest.raises(MongoDBMappingError, match="could not be unpickled") as raised:
        CheckpointCodec().decode(payload, checksum=payload_checksum(payload))
    assert "no globals" in str(raised.value.__cause__)


def test_decode_refuses_trailing_bytes() -> None:
    encoded = CheckpointCodec().encode(_checkpoint({"a": 1}))
    payload = encoded.payload + b"."
    with pytest.raises(MongoDBMappingError, match="bytes follow the end"):
        CheckpointCodec().decode(payload, checksum=payload_checksum(payload))


def test_unsupported_values_fail_before_pickling() -> None:
    with pytest.raises(MongoDBMappingError):
        CheckpointCodec().encode(_checkpoint({"f": print}))
    with pytest.raises(MongoDBMappingError, match="NaN"):
        CheckpointCodec().encode(_checkpoint({"f": float("nan")}))


def test_encode_rejects_non_checkpoints() -> None:
    with pytest.raises(MongoDBSerializationError):
        CheckpointCodec().encode({"workflow_name": "x"})  # type: ignore[arg-type]


def test_round_trip_proof_rejects_bytes_that_restore_differently(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_framework_mongodb.checkpoints import codec as codec_module
    from agent_framework_mongodb.checkpoints.codec.rebuild import load_tree as real

    def drifting(payload: bytes) -> object:
        value = real(payload)
        assert isinstance(value, dict)
        value["state"] = {"a": 2}
        return value

    monkeypatch.setattr(codec_module, "load_tree", drifting)
    with pytest.raises(MongoDBSerializationError, match="decode to another tree"):
        CheckpointCodec().encode(_checkpoint({"a": 1}))


def test_round_trip_proof_rejects_bytes_that_do_not_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_framework_mongodb.checkpoints import codec as codec_module

    def refusing(payload: bytes) -> object:
        raise MongoDBMappingError("blocked for the test")

    monkeypatch.setattr(codec_module, "load_tree", refusing)
    with pytest.raises(MongoDBSerializationError, match="would not load again"):
        CheckpointCodec().encode(_checkpoint({"a": 1}))


def test_application_code_raising_during_a_save_becomes_a_serialization_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def exploding(self: object) -> object:
        raise KeyError("from application code")

    monkeypatch.setattr(Message, "__getstate__", exploding, raising=False)
    with pytest.raises(MongoDBSerializationError, match="raised KeyError"):
        CheckpointCodec().encode(_checkpoint({"m": Message(role="user", contents=[])}))


@pytest.mark.skipif(
    not hasattr(agent_framework, "register_checkpoint_type"),
    reason="agent_framework.register_checkpoint_type first appears after agent-framework-core 1.13",
)
def test_types_registered_with_agent_framework_are_honoured() -> None:
    from tests.unit.codec.registered_types import RegisteredState

    checkpoint = _checkpoint({"r": RegisteredState(1)})
    with pytest.raises(MongoDBSerializationError):
        CheckpointCodec().encode(checkpoint)
    register = agent_framework.register_checkpoint_type  # pyright: ignore[reportUnknownMemberType]
    register(RegisteredState)
    restored = _round_trip(CheckpointCodec(), checkpoint)
    assert restored.state == checkpoint.state


def test_types_registered_before_this_package_was_imported_are_honoured() -> None:
    if not hasattr(agent_framework, "register_checkpoint_type"):
        pytest.skip("agent_framework.register_checkpoint_type first appears after agent-framework-core 1.13")
    script = (
        "import agent_framework\n"
        "from tests.unit.codec.registered_types import RegisteredState\n"
        "agent_framework.register_checkpoint_type(RegisteredState)\n"
        "from agent_framework_mongodb.checkpoints.codec import CheckpointCodec\n"
        "from agent_framework import WorkflowCheckpoint\n"
        "state = {'r': RegisteredState(4)}\n"
        "cp = WorkflowCheckpoint(workflow_name='wf', graph_signature_hash='g', state=state)\n"
        "codec = CheckpointCodec()\n"
        "encoded = codec.encode(cp)\n"
        "print(codec.decode(encoded.payload, checksum=encoded.payload_checksum).state['r'].value)\n"
    )
    result = subprocess.run(  # noqa: S603 - the test's own interpreter and script
        [sys.executable, "-c", script], cwd=_PROJECT, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "4"


# -- class objects (a paused request's response type) --------------------------------------------


@pytest.mark.parametrize("cls", [str, int, float, bool, bytes, bytearray, list, tuple, dict, set, frozenset])
def test_builtin_value_classes_round_trip_as_references(cls: type) -> None:
    restored = _round_trip(CheckpointCodec(), _checkpoint({"response_type": cls}))
    assert restored.state["response_type"] is cls


def test_framework_and_standard_classes_round_trip_as_references() -> None:
    state = {"types": [Message, Content, dt.datetime, Decimal, uuid.UUID]}
    restored = _round_trip(CheckpointCodec(), _checkpoint(state))
    assert restored.state["types"] == state["types"]


def test_application_class_reference_needs_the_allowlist() -> None:
    checkpoint = _checkpoint({"response_type": OrderState})
    with pytest.raises(MongoDBSerializationError, match="allowed_checkpoint_types") as raised:
        CheckpointCodec().encode(checkpoint)
    assert _ORDER_KEY in str(raised.value)
    restored = _round_trip(CheckpointCodec((_ORDER_KEY,)), checkpoint)
    assert restored.state["response_type"] is OrderState


@pytest.mark.parametrize("cls", [type, type(None), object, complex, Exception, pickle.Pickler])
def test_class_references_the_loader_would_block_fail_at_save(cls: type) -> None:
    with pytest.raises(MongoDBSerializationError, match="cannot be stored"):
        CheckpointCodec().encode(_checkpoint({"response_type": cls}))


def test_class_reference_differs_from_instance_in_identity() -> None:
    codec = CheckpointCodec((_ORDER_KEY,))
    as_class = codec.encode(_checkpoint({"v": OrderState}))
    as_instance = codec.encode(_checkpoint({"v": OrderState(order_id="o")}))
    assert as_class.payload_hash != as_instance.payload_hash


# -- attributes that would hide methods ---------------------------------------------------------


def test_an_instance_attribute_hiding_a_method_is_refused_at_save() -> None:
    message = Message(role="user", contents=[Content.from_text("hi")])
    vars(message)["to_dict"] = "not a method"
    with pytest.raises(MongoDBSerializationError, match="hides the class attribute"):
        CheckpointCodec().encode(_checkpoint({"m": message}))


def test_a_stored_attribute_hiding_a_method_is_refused_at_load() -> None:
    # A crafted tree: a framework Message whose instance dict puts a class object where its
    # to_dict method would be found, so a later message.to_dict() would call that class.
    codec = CheckpointCodec()
    encoded = codec.encode(_checkpoint({"m": Message(role="user", contents=[Content.from_text("hi")])}))
    tree = cast("dict[str, Any]", pickle.loads(encoded.payload))
    record = tree["state"]["m"]
    assert record[0] == "o"
    storage_class = agent_framework.FileCheckpointStorage
    record[2]["to_dict"] = ("c", f"{storage_class.__module__}:{storage_class.__qualname__}")
    payload = pickle.dumps(tree, protocol=5)
    with pytest.raises(MongoDBMappingError, match="hides the class attribute"):
        codec.decode(payload, checksum=payload_checksum(payload))


def test_cached_properties_may_live_in_the_instance_dict() -> None:
    codec = CheckpointCodec(("tests.unit.codec.app_types:Cached",))
    value = app_types.Cached(3)
    assert value.doubled == 6  # cached into the instance dict
    restored = _round_trip(codec, _checkpoint({"c": value})).state["c"]
    assert vars(restored) == {"base": 3, "doubled": 6}


def test_pathlib_classes_are_named_by_their_public_module() -> None:
    # pathlib's classes live in pathlib._local from Python 3.13 on; a reference stored by one
    # Python version must load in another, and hash alike.
    form = canonical_form({"t": pathlib.PurePosixPath})
    assert b"pathlib:PurePosixPath" in form
    assert b"_local" not in form
    restored = _round_trip(CheckpointCodec(), _checkpoint({"t": pathlib.PosixPath}))
    assert restored.state["t"] is pathlib.PosixPath


# -- bounds a load shares with a save -----------------------------------------------------------


def _nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _payload_of(tree: object) -> bytes:
    return pickle.dumps(tree, protocol=5)


def test_nesting_is_bounded_alike_on_save_and_load() -> None:
    codec = CheckpointCodec()
    # The state dict is level 1, "deep" the second: 98 more lists reach exactly 100.
    assert _round_trip(codec, _checkpoint({"deep": _nested(98)})).state["deep"] == _nested(98)
    with pytest.raises(MongoDBMappingError, match="more than 100 levels"):
        codec.encode(_checkpoint({"deep": _nested(99)}))
    tree = cast("dict[str, Any]", pickle.loads(codec.encode(_checkpoint({"deep": 1})).payload))
    tree["state"]["deep"] = _nested(99)
    payload = _payload_of(tree)
    with pytest.raises(MongoDBMappingError, match="more than 100 levels"):
        codec.decode(payload, checksum=payload_checksum(payload))


def test_records_may_not_copy_far_more_than_the_payload_holds() -> None:
    codec = CheckpointCodec()
    tree = cast("dict[str, Any]", pickle.loads(codec.encode(_checkpoint({"a": 1})).payload))
    shared = b"x" * 100_000
    # One memoized bytes object behind 200 bytearray records: 20 MB from a 100 kB payload.
    tree["state"]["copies"] = [("a", shared) for _ in range(200)]
    payload = _payload_of(tree)
    assert len(payload) < 110_000
    with pytest.raises(MongoDBMappingError, match="copy far more data"):
        codec.decode(payload, checksum=payload_checksum(payload))
    # The same number of bytearrays written inline loads.
    many = {"copies": [bytearray(b"x" * 1000) for _ in range(200)]}
    assert _round_trip(codec, _checkpoint(many)).state == many


def test_an_abstract_class_is_refused_in_phase_one() -> None:
    codec = CheckpointCodec(("tests.unit.codec.app_types:AbstractState",))
    tree = cast("dict[str, Any]", pickle.loads(codec.encode(_checkpoint({"a": 1})).payload))
    tree["state"]["a"] = ("o", "tests.unit.codec.app_types:AbstractState", {}, None)
    payload = _payload_of(tree)
    with pytest.raises(MongoDBMappingError, match="abstract"):
        codec.decode(payload, checksum=payload_checksum(payload))
