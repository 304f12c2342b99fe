"""Hand-built hostile payloads: each must fail with MongoDBMappingError and execute nothing.

Every payload aims at a side effect the test can observe (a file, a module attribute, an
import); the assertions after each failure prove the side effect did not happen.
"""

from __future__ import annotations

import copyreg
import pickle
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, payload_checksum
from agent_framework_mongodb.errors import MongoDBMappingError
from tests.unit.codec import marker

_HEADER = b"\x80\x05"


def _text(value: str) -> bytes:
    data = value.encode()
    return (
        b"\x8c" + bytes([len(data)]) + data if len(data) < 256 else b"X" + struct.pack("<I", len(data)) + data
    )


def _global(module: str, name: str) -> bytes:
    return _text(module) + _text(name) + b"\x93"  # STACK_GLOBAL


def _call(module: str, name: str, *arguments: str) -> bytes:
    """Payload calling module.name(*arguments) through REDUCE."""
    packed = b"(" + b"".join(_text(argument) for argument in arguments) + b"t"
    return _HEADER + _global(module, name) + packed + b"R."


@pytest.fixture(autouse=True)
def _clean_marker() -> Iterator[None]:
    marker.TRIPPED.clear()
    sys.modules.pop("tests.unit.codec.marker_import", None)
    yield
    marker.TRIPPED.clear()


def _assert_rejected(payload: bytes, codec: CheckpointCodec | None = None) -> MongoDBMappingError:
    with pytest.raises(MongoDBMappingError) as raised:
        (codec or CheckpointCodec()).decode(payload, checksum=payload_checksum(payload))
    assert isinstance(raised.value, WorkflowCheckpointException)
    assert marker.TRIPPED == []
    assert "tests.unit.codec.marker_import" not in sys.modules
    return raised.value


def test_os_system(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    error = _assert_rejected(_call("os", "system", f"touch {target}"))
    assert "'os:system'" in str(error)
    assert "allowed_checkpoint_types" in str(error)
    assert not target.exists()


def test_posix_system_alias(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    _assert_rejected(_call("posix", "system", f"touch {target}"))
    assert not target.exists()


def test_builtins_eval() -> None:
    _assert_rejected(
        _call("builtins", "eval", "__import__('tests.unit.codec.marker').unit.codec.marker.trip()")
    )


def test_builtins_exec_even_when_allowlisted() -> None:
    codec = CheckpointCodec(("builtins:exec",))
    _assert_rejected(_call("builtins", "exec", "import tests.unit.codec.marker as m; m.trip()"), codec)


def test_subprocess_popen(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    payload = (
        _HEADER + _global("subprocess", "Popen") + b"(" + _text("touch") + _text(str(target)) + b"l\x85R."
    )
    _assert_rejected(payload)
    assert not target.exists()


def test_importlib_import_module() -> None:
    _assert_rejected(_call("importlib", "import_module", "tests.unit.codec.marker_import"))


def test_unlisted_module_is_never_imported() -> None:
    _assert_rejected(_call("tests.unit.codec.marker_import", "anything"))


def test_functools_partial() -> None:
    payload = (
        _HEADER + _global("functools", "partial") + _global("tests.unit.codec.marker", "trip") + b"\x85R)R."
    )
    _assert_rejected(payload)


def test_application_function_even_when_allowlisted() -> None:
    codec = CheckpointCodec(("tests.unit.codec.marker:trip",))
    error = _assert_rejected(_call("tests.unit.codec.marker", "trip", "x"), codec)
    assert "not a class" in str(error)


def test_framework_module_level_function() -> None:
    error = _assert_rejected(_call("agent_framework", "normalize_messages", "hello"))
    assert "not a class" in str(error)


def test_framework_private_encoder_function() -> None:
    _assert_rejected(_call("agent_framework._workflows._checkpoint_encoding", "decode_checkpoint_value", "x"))


def test_framework_module_alias_of_foreign_class(tmp_path: Path) -> None:
    # The framework module imports pathlib.Path; the name must not launder a foreign class.
    error = _assert_rejected(_call("agent_framework._workflows._checkpoint", "Path", str(tmp_path / "x")))
    assert "alias" in str(error)


def test_framework_module_attribute_traversal(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    _assert_rejected(_call("agent_framework._workflows._checkpoint", "os.system", f"touch {target}"))
    assert not target.exists()


def test_dotted_name_to_a_method() -> None:
    _assert_rejected(_call("agent_framework", "Message.__init__", "x"))
    _assert_rejected(_call("agent_framework", "Message.from_dict", "x"))


def test_dunder_traversal_to_globals() -> None:
    _assert_rejected(_call("agent_framework", "Message.__init__.__globals__", "x"))
    _assert_rejected(_call("datetime", "datetime.__class__", "x"))


def test_builtins_getattr() -> None:
    payload = (
        _HEADER
        + _global("builtins", "getattr")
        + _global("os", "path")
        + _text("join")
        + b"\x86R."  # getattr(os.path, "join")
    )
    _assert_rejected(payload)


def test_copyreg_reconstructor() -> None:
    payload = _HEADER + _global("copyreg", "_reconstructor") + b"(" + _global("builtins", "object") + b"NtR."
    _assert_rejected(payload)


def test_persistent_id_is_refused() -> None:
    _assert_rejected(_HEADER + _text("x") + b"Q.")


def test_registered_extension_code_is_refused_even_when_cached() -> None:
    code = 0x7AC1
    payload = _HEADER + b"\x83" + struct.pack("<H", code) + b")R."  # EXT2, EMPTY_TUPLE, REDUCE
    copyreg.add_extension("tests.unit.codec.marker", "Tripwire", code)
    try:
        # An unrestricted unpickler elsewhere in the process resolves (and caches) the code...
        pickle.loads(payload)
        assert marker.TRIPPED == ["Tripwire"]
        marker.TRIPPED.clear()
        # ...after which CPython would hand the class to any unpickler without find_class.
        error = _assert_rejected(payload)
        assert "extension code" in str(error)
    finally:
        copyreg.remove_extension("tests.unit.codec.marker", "Tripwire", code)
        copyreg.clear_extension_cache()


@pytest.mark.parametrize(
    "opcode", [b"\x82\x05", b"\x83\x05\x01", b"\x84\x05\x01\x00\x00"], ids=["EXT1", "EXT2", "EXT4"]
)
def test_unregistered_extension_codes_fail(opcode: bytes) -> None:
    _assert_rejected(_HEADER + opcode + b")R.")


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x80",
        _HEADER,
        _HEADER + b"}",
        _HEADER + b"\xff\xff\xff",
        b"not a pickle at all",
        _HEADER + b"\x8c\xff" + b"a" * 10,
        _HEADER + b"(" * 10_000 + b".",
        _HEADER + b"0.",  # POP on an empty stack
    ],
    ids=[
        "empty",
        "proto-only",
        "header-only",
        "no-stop",
        "garbage",
        "text",
        "short-string",
        "marks",
        "pop-empty",
    ],
)
def test_truncated_and_garbage_bytes(payload: bytes) -> None:
    _assert_rejected(payload)


def test_truncated_real_checkpoint() -> None:
    codec = CheckpointCodec()
    checkpoint = WorkflowCheckpoint(
        workflow_name="wf", graph_signature_hash="h", state={"a": list(range(100))}
    )
    payload = codec.encode(checkpoint).payload
    for cut in (3, len(payload) // 2, len(payload) - 1):
        _assert_rejected(payload[:cut], codec)


def test_huge_nesting_is_not_a_crash() -> None:
    depth = 200_000
    nested = _HEADER + b"]" * depth + b"a" * (depth - 1) + b"."  # lists appended into lists
    _assert_rejected(nested)  # loads (iteratively), then is not a checkpoint dictionary
    deep_list = b"]" * 5_000 + b"a" * 4_999
    state_payload = (
        _HEADER
        + b"}("
        + _text("workflow_name")
        + _text("wf")
        + _text("graph_signature_hash")
        + _text("h")
        + _text("state")
        + b"}"
        + _text("deep")
        + deep_list
        + b"su."
    )
    restored = CheckpointCodec().decode(state_payload, checksum=payload_checksum(state_payload))
    assert restored.workflow_name == "wf"
    with pytest.raises(MongoDBMappingError, match="nested too deeply"):
        CheckpointCodec().encode(restored)


def test_hook_class_is_blocked_at_load_even_when_allowlisted() -> None:
    from tests.unit.codec.app_types import HOOK_CALLS

    codec = CheckpointCodec(("tests.unit.codec.app_types:HookedState",))
    payload = _HEADER + _global("tests.unit.codec.app_types", "HookedState") + b")\x81."
    error = _assert_rejected(payload, codec)
    assert "pickle hooks" in str(error)
    assert HOOK_CALLS == []


def test_mapping_class_is_blocked_at_load_even_when_allowlisted() -> None:
    codec = CheckpointCodec(("collections:OrderedDict",))
    _assert_rejected(_HEADER + _global("collections", "OrderedDict") + b")R.", codec)
