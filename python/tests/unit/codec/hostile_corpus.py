"""Hostile checkpoint payloads built opcode by opcode, and the generators the decoder fuzz uses.

Nothing here loads a payload. ``test_hostile_payloads.py`` feeds every :class:`Entry` of
:data:`CORPUS` to the codec alone and to a storage (in the document of a really saved
checkpoint), ``test_decoder_fuzz.py`` and ``benchmarks/fuzz_decoder.py`` feed the hypothesis
strategies at the end; all of them watch with :class:`Guard` that a load changed nothing:

* no file or directory appears in the working directory (payloads aim at relative paths);
* no module is imported that was not imported before;
* no attribute of an Agent Framework class, enum member or of the victim classes below changes;
* no hook of the victim classes runs, and :func:`trip` is never called;
* ``sys.path`` and ``os.environ`` stay as they were.

Families (``Entry.family``):

``classics``  every global-resolving opcode aimed at ``os.system``, ``subprocess`` and friends,
    ``getattr``/``partial``/``_reconstructor`` chains, persistent ids, extension codes, memo
    tricks, truncated and garbage streams, huge declared lengths, trailing bytes, other protocols.
``v1``        what broke the first codec: BUILD on framework classes and enum members, REDUCE
    of framework classes and TypedDicts, memoryviews, names that would import framework modules.
``v2``        valid pickles of plain trees whose records are hostile (``rebuild.py`` tags).
``shape``     trees that are not a checkpoint: top level, fields, types, versions.
``resources`` crash- and memory-prone payloads; ``Entry.isolate`` runs them in a subprocess
    under an address-space limit (:func:`isolated_entry`).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import copy
import dataclasses
import enum
import functools
import gc
import json
import math
import os
import pickle
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple

# The abstract-class entries name a class of this module, the attribute entries one of the agent
# executor's; a workflow process has both loaded.
import agent_framework._workflows._agent_executor
import agent_framework._workflows._edge_runner
from agent_framework import Content, Message, WorkflowCheckpoint
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, PrivateAttr

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, payload_checksum
from agent_framework_mongodb.checkpoints.codec.walk import MAX_NESTING
from agent_framework_mongodb.checkpoints.scope import RunScope
from agent_framework_mongodb.errors import MongoDBIntegrationError, MongoDBMappingError
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

__all__ = [
    "BASE_ID",
    "CORPUS",
    "DECODING_OPERATIONS",
    "GOOD_ID",
    "OPERATIONS",
    "WORKFLOW",
    "Entry",
    "Guard",
    "Outcome",
    "UnpickleRecorder",
    "Verdict",
    "fuzz_codec",
    "isolated_child",
    "isolated_entry",
    "judge",
    "mutated_payloads",
    "opcode_streams",
    "plant",
    "run_operation",
    "tree_payloads",
]

MODULE: Final = __name__
WORKFLOW: Final = "approval-flow"
GOOD_ID: Final = "cp-good"
BASE_ID: Final = "cp-hostile"
OPERATIONS: Final = ("load", "get_latest", "list_checkpoints", "list_checkpoint_ids", "list_checkpoint_page")
DECODING_OPERATIONS: Final = tuple(name for name in OPERATIONS if name != "list_checkpoint_ids")
NEVER_IMPORTED: Final = ("benchmarks.fuzz_decoder", "tests.unit.codec.marker_import", "tabnanny", "this")
"""Modules the payloads try to import; none may be imported by a load."""

# -- victims: what a payload would reach if the codec ran code --------------------------------

TRIPPED: list[str] = []
"""Every call of :func:`trip` appends here; a load that appends has executed code."""
HOOK_CALLS: list[str] = []
"""Every hook of the victim classes appends here."""


def trip(reason: str = "called") -> str:
    TRIPPED.append(reason)
    return reason


class HookedVictim:
    """An application class whose every hook the unpickler or a naive rebuild could run."""

    def __new__(cls, *args: object, **kwargs: object) -> HookedVictim:
        HOOK_CALLS.append("HookedVictim.__new__")
        return super().__new__(cls)

    def __init__(self, *args: object, **kwargs: object) -> None:
        HOOK_CALLS.append("HookedVictim.__init__")

    def __setstate__(self, state: object) -> None:
        HOOK_CALLS.append("HookedVictim.__setstate__")

    def __reduce_ex__(self, protocol: Any) -> Any:
        HOOK_CALLS.append("HookedVictim.__reduce_ex__")
        return (HookedVictim, ())

    def __getattr__(self, name: str) -> Any:
        HOOK_CALLS.append(f"HookedVictim.__getattr__({name})")
        raise AttributeError(name)

    def __setattr__(self, name: str, value: object) -> None:
        HOOK_CALLS.append(f"HookedVictim.__setattr__({name})")
        object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        HOOK_CALLS.append("HookedVictim.__eq__")
        return self is other

    def __hash__(self) -> int:
        HOOK_CALLS.append("HookedVictim.__hash__")
        return 0


class HookedMeta(type):
    """A metaclass whose attribute and call hooks record; the codec must never touch them."""

    def __getattribute__(cls, name: str) -> Any:
        HOOK_CALLS.append(f"HookedMeta.__getattribute__({name})")
        return super().__getattribute__(name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        HOOK_CALLS.append("HookedMeta.__call__")
        return super().__call__(*args, **kwargs)

    def __instancecheck__(cls, instance: Any) -> bool:
        HOOK_CALLS.append("HookedMeta.__instancecheck__")
        return False

    def __subclasscheck__(cls, subclass: Any) -> bool:
        HOOK_CALLS.append("HookedMeta.__subclasscheck__")
        return False


class MetaVictim(metaclass=HookedMeta):
    pass


class ListVictim(list[int]):
    """A built-in base keeps state the codec cannot see."""


class MappingVictim(dict[str, int]):
    pass


class MappingHookProbe:
    """A plain allowed class asked about only by its own entry: deciding whether it is a mapping
    must not call :class:`ApplicationMapping`'s hook (issue 30)."""

    def __init__(self) -> None:
        self.value = 1


class ApplicationMapping(Mapping[str, int]):
    """An application's Mapping ABC with a structural ``__subclasshook__``.

    ``issubclass(cls, Mapping)`` asks every ABC deriving from Mapping, so this hook would run with
    whatever class a payload named. It records a question about a corpus class (by identity: the
    victims' own hooks must not run here either).
    """

    @classmethod
    def __subclasshook__(cls, other: type) -> Any:
        if any(other is watched for watched in (*VICTIM_CLASSES, MappingHookProbe)):
            HOOK_CALLS.append("ApplicationMapping.__subclasshook__")
        return NotImplemented


class DictPropertyVictim:
    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        HOOK_CALLS.append("DictPropertyVictim.__dict__")
        return {}


class AbstractVictim(abc.ABC):
    @abc.abstractmethod
    def run(self) -> None: ...


_KNOWN_PAIRS: set[int] = set()
"""Ids of live TrackedPairs that test code made or a load returned (see :func:`register_result`)."""


class TrackedPair(NamedTuple):
    """A named tuple whose finalizer reports an instance a load built and threw away.

    Pairs made by their constructor, or returned by a load, are registered and die silently; a
    pair the codec built for itself (``tuple.__new__``) and dropped before returning is reported.
    """

    left: int
    right: int

    def __del__(self) -> None:
        # Module globals are gone at interpreter exit.
        known, calls = globals().get("_KNOWN_PAIRS"), globals().get("HOOK_CALLS")
        if isinstance(known, set) and id(self) in known:
            known.discard(id(self))
        elif isinstance(calls, list):
            calls.append("TrackedPair.__del__")


_new_pair = TrackedPair.__new__


def _registered_pair(cls: type[TrackedPair], *args: Any, **kwargs: Any) -> TrackedPair:
    pair = _new_pair(cls, *args, **kwargs)
    _KNOWN_PAIRS.add(id(pair))
    return pair


TrackedPair.__new__ = staticmethod(_registered_pair)  # type: ignore[assignment, method-assign]


def register_result(value: object) -> None:
    """Register every TrackedPair a load returned, so that its later death is not reported."""
    stack, seen = [value], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if type(item) is TrackedPair:
            _KNOWN_PAIRS.add(id(item))
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif hasattr(type(item), "__dataclass_fields__") and hasattr(type(item), "__slots__"):
            # WorkflowCheckpoint and pages: slotted dataclasses, whose slots a crafted load may leave unset.
            for name in dataclasses.fields(item):  # type: ignore[arg-type]
                with contextlib.suppress(AttributeError):
                    stack.append(object.__getattribute__(item, name.name))
        elif not isinstance(item, (type, str, bytes, int, float)) and type(item) is not DictPropertyVictim:
            with contextlib.suppress(AttributeError):
                stack.append(object.__getattribute__(item, "__dict__"))


class HookedColor(enum.Enum):
    RED = "red"
    ALIAS = "red"

    @classmethod
    def _missing_(cls, value: object) -> Any:
        HOOK_CALLS.append("HookedColor._missing_")
        return None


class ModelVictim(BaseModel):
    """A pydantic model whose machinery a stored instance would reach: extras, private, handlers."""

    model_config = ConfigDict(extra="allow")

    name: str
    _note: str = PrivateAttr(default="n")


def _key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


VICTIM_CLASSES: Final = (
    HookedVictim,
    HookedMeta,
    MetaVictim,
    ListVictim,
    MappingVictim,
    DictPropertyVictim,
    AbstractVictim,
    TrackedPair,
    HookedColor,
)
ALLOWED_VICTIMS: Final = tuple(_key(cls) for cls in VICTIM_CLASSES)
"""The victims, as an application would list them in ``allowed_checkpoint_types``."""

# -- opcodes ----------------------------------------------------------------------------------

PROTO: Final = pickle.PROTO + b"\x05"
MARK: Final = pickle.MARK
STOP: Final = pickle.STOP
NONE: Final = pickle.NONE
REDUCE: Final = pickle.REDUCE
BUILD: Final = pickle.BUILD
TUPLE: Final = pickle.TUPLE
EMPTY_TUPLE: Final = pickle.EMPTY_TUPLE
EMPTY_LIST: Final = pickle.EMPTY_LIST
EMPTY_DICT: Final = pickle.EMPTY_DICT
EMPTY_SET: Final = pickle.EMPTY_SET
APPEND: Final = pickle.APPEND
APPENDS: Final = pickle.APPENDS
SETITEM: Final = pickle.SETITEM
SETITEMS: Final = pickle.SETITEMS
ADDITEMS: Final = pickle.ADDITEMS
FROZENSET: Final = pickle.FROZENSET
TUPLE1: Final = pickle.TUPLE1
MEMOIZE: Final = pickle.MEMOIZE
POP: Final = pickle.POP
NEWOBJ: Final = pickle.NEWOBJ
NEWOBJ_EX: Final = pickle.NEWOBJ_EX
STACK_GLOBAL: Final = pickle.STACK_GLOBAL
_MERSENNE: Final = 2**61 - 1
"""``hash(n) == n % (2**61 - 1)`` for positive ints: congruent ints all collide."""


def utf8(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def text(value: str) -> bytes:
    """SHORT_BINUNICODE or BINUNICODE."""
    data = utf8(value)
    if len(data) < 256:
        return pickle.SHORT_BINUNICODE + bytes([len(data)]) + data
    return pickle.BINUNICODE + struct.pack("<I", len(data)) + data


def raw_bytes(value: bytes) -> bytes:
    if len(value) < 256:
        return pickle.SHORT_BINBYTES + bytes([len(value)]) + value
    return pickle.BINBYTES + struct.pack("<I", len(value)) + value


def integer(value: int) -> bytes:
    if 0 <= value < 256:
        return pickle.BININT1 + bytes([value])
    if -(2**31) <= value < 2**31:
        return pickle.BININT + struct.pack("<i", value)
    data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    if len(data) < 256:
        return pickle.LONG1 + bytes([len(data)]) + data
    return pickle.LONG4 + struct.pack("<i", len(data)) + data


def val(value: object) -> bytes:  # noqa: PLR0911 - one branch per built-in type
    """Opcodes pushing ``value`` (built-in scalars and containers only, no memo)."""
    if value is None:
        return NONE
    if value is True:
        return pickle.NEWTRUE
    if value is False:
        return pickle.NEWFALSE
    if type(value) is int:
        return integer(value)
    if type(value) is float:
        return pickle.BINFLOAT + struct.pack(">d", value)
    if type(value) is str:
        return text(value)
    if type(value) is bytes:
        return raw_bytes(value)
    if type(value) is list:
        return EMPTY_LIST + (MARK + b"".join(val(item) for item in value) + APPENDS if value else b"")
    if type(value) is tuple:
        return MARK + b"".join(val(item) for item in value) + TUPLE
    if type(value) is dict:
        return dct([(val(key), val(item)) for key, item in value.items()])
    raise TypeError(f"val() does not encode {type(value).__name__}")


def dct(pairs: Sequence[tuple[bytes, bytes]]) -> bytes:
    if not pairs:
        return EMPTY_DICT
    return EMPTY_DICT + MARK + b"".join(key + item for key, item in pairs) + SETITEMS


def tup(*items: bytes) -> bytes:
    return MARK + b"".join(items) + TUPLE


def glob(module: str, name: str) -> bytes:
    """GLOBAL (protocol 0 text form)."""
    return pickle.GLOBAL + utf8(module) + b"\n" + utf8(name) + b"\n"


def stack_glob(module: str, name: str) -> bytes:
    return text(module) + text(name) + STACK_GLOBAL


def call(function: bytes, *arguments: bytes) -> bytes:
    return function + tup(*arguments) + REDUCE


def program(*ops: bytes) -> bytes:
    return PROTO + b"".join(ops) + STOP


# -- the checkpoint every payload is planted in ----------------------------------------------

FIXED_TIMESTAMP: Final = "2025-01-02T03:04:05.678000+00:00"


def base_checkpoint(state: dict[str, Any] | None = None) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=WORKFLOW,
        graph_signature_hash="graph-hash-1",
        checkpoint_id=BASE_ID,
        previous_checkpoint_id=GOOD_ID,
        timestamp=FIXED_TIMESTAMP,
        state={"step": 1} if state is None else state,
        messages={"executor-a": []},
    )


def good_checkpoint() -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=WORKFLOW,
        graph_signature_hash="graph-hash-1",
        checkpoint_id=GOOD_ID,
        timestamp=FIXED_TIMESTAMP,
        state={"step": 0},
    )


_BASE_PAYLOAD: Final = CheckpointCodec().encode(base_checkpoint()).payload


def base_payload() -> bytes:
    return _BASE_PAYLOAD


def base_tree() -> dict[str, Any]:
    """A fresh copy of the base checkpoint's stored tree (the codec's own bytes, safe to load)."""
    tree: dict[str, Any] = pickle.loads(_BASE_PAYLOAD)
    return tree


def tree_payload(tree: object) -> bytes:
    return pickle.dumps(tree, protocol=5)


def with_state(state: object, **fields: object) -> bytes:
    tree = base_tree()
    tree["state"] = state
    tree.update(fields)
    return tree_payload(tree)


def in_state(value: object) -> bytes:
    return with_state({"x": value})


def checkpoint_program(value: bytes) -> bytes:
    """Opcodes of a whole checkpoint tree whose state is ``{"x": <what value pushes>}``."""
    fields: list[tuple[bytes, bytes]] = []
    for name, item in base_tree().items():
        fields.append((text(name), dct([(text("x"), value)]) if name == "state" else val(item)))
    return program(dct(fields))


# -- entries ----------------------------------------------------------------------------------

Expect = Literal["refused", "checkpoint", "either"]
NO_STATE: Final[Any] = object()


@dataclasses.dataclass(frozen=True)
class Entry:
    """One named hostile payload and what a load of it must do.

    Attributes:
        expect: ``"refused"`` (a MongoDBMappingError), ``"checkpoint"`` (a correct checkpoint)
            or ``"either"``.
        allowed: ``allowed_checkpoint_types`` of the codec and storage that load it.
        markers: Relative paths the payload tries to create.
        isolate: Crash- or memory-prone: loaded only in a subprocess under an RLIMIT_AS.
        residual: Behaviour without signing keys the project documents as residual risk.
        bug: A known bug this entry reproduces (the report's id and summary); tests xfail.
        resaves: Whether a save of the restored checkpoint succeeds (False only for a documented
            residual: the save must then raise MongoDBSerializationError).
        state: The state a correct load restores, when known.
        operations: Storage operations an isolated run tries without keys (slow entries repeat
            their cost once per decoding operation, so they try ``load`` only).
    """

    name: str
    family: str
    payload: bytes
    expect: Expect = "refused"
    allowed: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()
    isolate: bool = False
    residual: str | None = None
    bug: str | None = None
    resaves: bool = True
    state: Any = NO_STATE
    operations: tuple[str, ...] = OPERATIONS


RESIDUAL_STATE_HOOK: Final = (
    "documented residual (specs/codec.md): a framework class with its own __getstate__ loads with any "
    "__dict__ an 'o' record gives it, and the next save of the checkpoint raises MongoDBSerializationError"
)


def _classic_targets(marker: str) -> list[tuple[str, str, str, tuple[bytes, ...]]]:
    """(label, module, name, argument opcodes) of callables a payload would call."""
    return [
        ("os-system", "os", "system", (val(f"touch {marker}"),)),
        ("posix-system", "posix", "system", (val(f"touch {marker}"),)),
        ("subprocess-popen", "subprocess", "Popen", (val(["touch", marker]),)),
        ("subprocess-check-call", "subprocess", "check_call", (val(["touch", marker]),)),
        (
            "builtins-eval",
            "builtins",
            "eval",
            (val(f"__import__('{MODULE}', fromlist=['trip']).trip('eval')"),),
        ),
        (
            "builtins-exec",
            "builtins",
            "exec",
            (val(f"import {MODULE} as h; h.trip('exec'); open('{marker}', 'w')"),),
        ),
        ("builtins-open", "builtins", "open", (val(marker), val("w"))),
        ("builtins-import", "builtins", "__import__", (val("benchmarks.fuzz_decoder"),)),
        ("importlib-import", "importlib", "import_module", (val("tests.unit.codec.marker_import"),)),
        ("corpus-trip", MODULE, "trip", (val("direct"),)),
        ("sys-exit", "sys", "exit", (val(3),)),
    ]


def _call_shapes(module: str, name: str, arguments: tuple[bytes, ...]) -> dict[str, bytes]:
    """The same call through every opcode that resolves a global and can call it."""
    joined = b"".join(arguments)
    return {
        "global-reduce": program(call(glob(module, name), *arguments)),
        "stack-global-reduce": program(call(stack_glob(module, name), *arguments)),
        "inst": program(MARK + joined + pickle.INST + utf8(module) + b"\n" + utf8(name) + b"\n"),
        "obj": program(MARK + glob(module, name) + joined + pickle.OBJ),
        "in-state": checkpoint_program(call(stack_glob(module, name), *arguments)),
    }


def _classics() -> list[Entry]:
    entries: list[Entry] = []
    for label, module, name, _ in _classic_targets("m"):
        for shape in ("global-reduce", "stack-global-reduce", "inst", "obj", "in-state"):
            entry_name = f"classic-{label}-{shape}"
            marker = f"marker-{entry_name}"
            arguments = {target[0]: target[3] for target in _classic_targets(marker)}[label]
            payload = _call_shapes(module, name, arguments)[shape]
            entries.append(Entry(entry_name, "classics", payload, markers=(marker,)))
    # A regression here would end the test process, so these run isolated.
    entries.append(
        Entry("classic-os-exit", "classics", program(call(glob("os", "_exit"), val(7))), isolate=True)
    )
    entries.append(
        Entry(
            "classic-os-exit-in-state",
            "classics",
            checkpoint_program(call(stack_glob("os", "_exit"), val(7))),
            isolate=True,
        )
    )
    victim = (MODULE, "HookedVictim")
    for label, (module, name) in {
        "victim": victim,
        "popen": ("subprocess", "Popen"),
        "ordered-dict": ("collections", "OrderedDict"),
        "message": ("agent_framework._types", "Message"),
    }.items():
        entries += [
            Entry(f"classic-newobj-{label}", "classics", program(glob(module, name) + tup() + NEWOBJ)),
            Entry(
                f"classic-stack-newobj-{label}",
                "classics",
                program(stack_glob(module, name) + tup() + NEWOBJ),
            ),
            Entry(
                f"classic-newobj-ex-{label}",
                "classics",
                program(glob(module, name) + tup() + EMPTY_DICT + NEWOBJ_EX),
            ),
            Entry(
                f"classic-newobj-build-{label}",
                "classics",
                program(glob(module, name) + tup() + NEWOBJ + dct([(text("a"), val(1))]) + BUILD),
            ),
        ]
    touch = val("touch marker-classic-chain")
    chain_marker = ("marker-classic-chain",)
    os_module = call(glob("builtins", "__import__"), val("os"))
    entries += [
        Entry(
            "classic-getattr-chain",
            "classics",
            program(call(call(glob("builtins", "getattr"), os_module, val("system")), touch)),
            markers=chain_marker,
        ),
        Entry(
            "classic-partial-chain",
            "classics",
            program(call(glob("functools", "partial"), glob("os", "system"), touch) + EMPTY_TUPLE + REDUCE),
            markers=chain_marker,
        ),
        Entry(
            "classic-methodcaller-chain",
            "classics",
            program(call(call(glob("operator", "methodcaller"), val("system"), touch), os_module)),
            markers=chain_marker,
        ),
        Entry(
            "classic-reconstructor",
            "classics",
            program(call(glob("copyreg", "_reconstructor"), glob(*victim), glob("builtins", "object"), NONE)),
        ),
        Entry(
            "classic-reconstructor-list",
            "classics",
            program(
                call(
                    glob("copyreg", "_reconstructor"),
                    glob(MODULE, "ListVictim"),
                    glob("builtins", "list"),
                    val([1]),
                )
            ),
        ),
        Entry(
            "classic-codecs-encode",
            "classics",
            program(call(glob("_codecs", "encode"), val("x"), val("latin1"))),
        ),
        Entry(
            "classic-build-on-function",
            "classics",
            program(glob(MODULE, "trip") + dct([(text("__defaults__"), val(("pwned",)))]) + BUILD),
        ),
        Entry("classic-persid", "classics", program(pickle.PERSID + b"os.system\n")),
        Entry("classic-binpersid", "classics", program(text("os:system") + pickle.BINPERSID)),
        Entry("classic-persid-in-state", "classics", checkpoint_program(pickle.PERSID + b"x\n")),
        Entry("classic-binpersid-in-state", "classics", checkpoint_program(val("x") + pickle.BINPERSID)),
        Entry("classic-ext1-unregistered", "classics", program(pickle.EXT1 + b"\x05" + EMPTY_TUPLE + REDUCE)),
        Entry(
            "classic-ext2-unregistered", "classics", program(pickle.EXT2 + b"\x05\x01" + EMPTY_TUPLE + REDUCE)
        ),
        Entry(
            "classic-ext4-unregistered",
            "classics",
            program(pickle.EXT4 + b"\x05\x01\x00\x00" + EMPTY_TUPLE + REDUCE),
        ),
        Entry("classic-ext-in-state", "classics", checkpoint_program(pickle.EXT2 + b"\x05\x01")),
    ]
    # Memo tricks.
    entries += [
        Entry("memo-get-unset", "classics", program(NONE + pickle.BINGET + b"\x05")),
        Entry("memo-long-binget-huge", "classics", program(NONE + pickle.LONG_BINGET + b"\xff\xff\xff\xff")),
        Entry("memo-get-text-huge", "classics", program(NONE + pickle.GET + b"99999999999999999999999\n")),
        Entry(
            "memo-get-after-pop",
            "classics",
            program(EMPTY_LIST + pickle.BINPUT + b"\x00" + POP + pickle.BINGET + b"\x01"),
        ),
        Entry("memo-get-negative", "classics", program(NONE + pickle.GET + b"-1\n")),
        Entry(
            "memo-dag-in-state",
            "classics",
            checkpoint_program(
                EMPTY_LIST
                + MEMOIZE
                + POP
                + EMPTY_LIST
                + MARK
                + pickle.BINGET
                + b"\x00"
                + pickle.BINGET
                + b"\x00"
                + APPENDS
            ),
        ),
        Entry(
            "memo-self-append",
            "classics",
            checkpoint_program(EMPTY_LIST + pickle.BINPUT + b"\x00" + pickle.BINGET + b"\x00" + APPEND),
        ),
        Entry(
            "memo-long-binput-huge",
            "classics",
            program(NONE + pickle.LONG_BINPUT + b"\xff\xff\xff\xff"),
            isolate=True,
        ),
        Entry(
            "memo-long-binput-2gib",
            "classics",
            program(NONE + pickle.LONG_BINPUT + struct.pack("<I", 2**27)),
            isolate=True,
            residual="the C unpickler grows its memo to 2**28 entries: 2 GiB resident from 9 bytes",
        ),
        Entry("memo-put-text-huge", "classics", program(NONE + pickle.PUT + b"4294967295\n"), isolate=True),
    ]
    # Truncated, garbage and misframed streams.
    real = _BASE_PAYLOAD
    entries += [
        Entry("stream-empty", "classics", b""),
        Entry("stream-proto-only", "classics", pickle.PROTO),
        Entry("stream-header-only", "classics", PROTO),
        Entry("stream-no-stop", "classics", PROTO + EMPTY_DICT),
        Entry("stream-short-string", "classics", PROTO + pickle.SHORT_BINUNICODE + b"\x10abc"),
        Entry("stream-garbage", "classics", PROTO + b"\xff\xff\xff"),
        Entry("stream-text", "classics", b"not a pickle at all"),
        Entry("stream-json", "classics", json.dumps({"checkpoint_id": BASE_ID}).encode()),
        Entry("stream-pop-empty", "classics", PROTO + POP + STOP),
        Entry("stream-marks", "classics", PROTO + MARK * 10_000 + STOP),
        Entry(
            "stream-frame-overdeclared",
            "classics",
            PROTO + pickle.FRAME + struct.pack("<Q", 1000) + EMPTY_DICT + STOP,
        ),
        Entry("stream-stop-inside-string", "classics", PROTO + pickle.SHORT_BINUNICODE + b"\x05ab." + STOP),
        Entry("stream-bad-utf8", "classics", program(pickle.SHORT_BINUNICODE + b"\x02\xff\xfe")),
        Entry("stream-binstring-undecodable", "classics", program(pickle.SHORT_BINSTRING + b"\x02\xff\xfe")),
        Entry("stream-int-too-many-digits", "classics", program(pickle.INT + b"9" * 5000 + b"\n")),
        Entry("stream-long-text-too-many-digits", "classics", program(pickle.LONG + b"9" * 5000 + b"L\n")),
        *(
            Entry(f"stream-truncated-at-{cut}", "classics", real[:cut])
            for cut in (1, 2, 3, 10, len(real) // 2, len(real) - 2, len(real) - 1)
        ),
        Entry("stream-trailing-nul", "classics", real + b"\x00"),
        Entry("stream-trailing-stop", "classics", real + STOP),
        Entry("stream-trailing-pickle", "classics", real + real),
        Entry("stream-proto-6", "classics", b"\x80\x06" + real[2:]),
        *(
            Entry(
                f"stream-protocol-{protocol}",
                "classics",
                tree_payload_protocol(protocol),
                expect="either",
                state={"step": 1},
            )
            for protocol in range(5)
        ),
    ]
    return entries


def tree_payload_protocol(protocol: int) -> bytes:
    return pickle.dumps(base_tree(), protocol=protocol)


def _v1() -> list[Entry]:
    message = ("agent_framework._types", "Message")
    run_state = ("agent_framework._workflows._events", "WorkflowRunState")
    idle = call(glob("builtins", "getattr"), glob(*run_state), val("IDLE"))
    writable = pickle.BYTEARRAY8 + struct.pack("<Q", 6) + b"secret"
    return [
        Entry(
            "v1-build-annotations-on-framework-class",
            "v1",
            checkpoint_program(
                glob(*message) + tup(NONE, dct([(text("__annotations__"), EMPTY_DICT)])) + BUILD
            ),
        ),
        Entry(
            "v1-build-method-swap-on-framework-class",
            "v1",
            checkpoint_program(
                glob(*message) + tup(NONE, dct([(text("to_dict"), glob("os", "system"))])) + BUILD
            ),
        ),
        Entry(
            "v1-reduce-framework-class",
            "v1",
            checkpoint_program(call(stack_glob(*message), val("user"), val(["hi"]))),
        ),
        Entry("v1-newobj-framework-class", "v1", checkpoint_program(stack_glob(*message) + tup() + NEWOBJ)),
        Entry(
            "v1-build-enum-member",
            "v1",
            checkpoint_program(idle + tup(NONE, dct([(text("_value_"), val("pwned"))])) + BUILD),
        ),
        Entry("v1-reduce-enum-by-value", "v1", checkpoint_program(call(glob(*run_state), val("idle")))),
        Entry(
            "v1-typeddict-reduce",
            "v1",
            checkpoint_program(call(glob("agent_framework._types", "UsageDetails"), dct([]))),
        ),
        Entry("v1-typeddict-record", "v1", in_state(("o", "agent_framework._types:UsageDetails", {}, None))),
        Entry("v1-typeddict-class-record", "v1", in_state(("c", "agent_framework._types:UsageDetails"))),
        Entry("v1-next-buffer", "v1", checkpoint_program(pickle.NEXT_BUFFER)),
        # READONLY_BUFFER leaves read-only bytes as they are, and turns anything else into a memoryview.
        Entry(
            "v1-readonly-buffer-on-bytes",
            "v1",
            checkpoint_program(raw_bytes(b"secret") + pickle.READONLY_BUFFER),
            expect="checkpoint",
            state={"x": b"secret"},
        ),
        Entry("v1-readonly-buffer", "v1", checkpoint_program(writable + pickle.READONLY_BUFFER)),
        Entry(
            "v1-readonly-buffer-in-bytearray-record",
            "v1",
            checkpoint_program(tup(text("a"), writable + pickle.READONLY_BUFFER)),
        ),
        Entry(
            "v1-readonly-buffer-in-uuid-record",
            "v1",
            checkpoint_program(
                tup(text("U"), pickle.BYTEARRAY8 + struct.pack("<Q", 16) + b"x" * 16 + pickle.READONLY_BUFFER)
            ),
        ),
        Entry(
            "v1-readonly-buffer-set-member",
            "v1",
            checkpoint_program(tup(text("S"), writable + pickle.READONLY_BUFFER)),
        ),
        Entry(
            "v1-readonly-buffer-mapping-key",
            "v1",
            checkpoint_program(tup(text("m"), writable + pickle.READONLY_BUFFER, val(1))),
        ),
        Entry(
            "v1-bytearray8-in-state",
            "v1",
            checkpoint_program(pickle.BYTEARRAY8 + struct.pack("<Q", 1) + b"x"),
        ),
        Entry(
            "v1-global-framework-submodule",
            "v1",
            checkpoint_program(glob("agent_framework._workflows._viz", "WorkflowViz") + tup() + NEWOBJ),
        ),
        Entry(
            "v1-global-framework-no-such-class",
            "v1",
            checkpoint_program(stack_glob("agent_framework.lab", "NoSuchClass")),
        ),
    ]


_HOSTILE_NAMES: Final[dict[str, str]] = {
    "os-system": "os:system",
    "posix-system": "posix:system",
    "subprocess-popen": "subprocess:Popen",
    "builtins-eval": "builtins:eval",
    "builtins-exec": "builtins:exec",
    "builtins-type": "builtins:type",
    "builtins-object": "builtins:object",
    "builtins-complex": "builtins:complex",
    "ordered-dict": "collections:OrderedDict",
    "abc-meta": "abc:ABCMeta",
    "enum-meta": "enum:EnumMeta",
    "import-module": "importlib:import_module",
    "pickle-loads": "pickle:loads",
    "bson-object-id": "bson.objectid:ObjectId",
    "framework-decoder": "agent_framework._workflows._checkpoint_encoding:decode_checkpoint_value",
    "framework-alias-datetime": "agent_framework._workflows._checkpoint:datetime",
    "framework-reexport": "agent_framework:Message",
    "framework-method": "agent_framework._types:Message.__init__",
    "framework-dunder-dict": "agent_framework._types:Message.__dict__",
    "framework-dunder-class": "agent_framework._types:Message.__class__",
    "unlisted-app-class": f"{MODULE}:HookedVictim",
    "unimported-app-module": "benchmarks.fuzz_decoder:FuzzStats",
    "unimported-marker-module": "tests.unit.codec.marker_import:Anything",
    "unimported-stdlib": "tabnanny:NannyNag",
    "unimported-framework-viz": "agent_framework._workflows._viz:WorkflowViz",
    "unimported-framework-lab": "agent_framework.lab:NoSuchClass",
    "unimported-framework-openai": "agent_framework.openai:OpenAIChatClient",
    "unimported-framework-evaluation": "agent_framework._evaluation:NoSuchClass",
    "unimported-orchestrations": "agent_framework_orchestrations:MagenticBuilder",
    "unimported-openai-types": "openai.types.chat:ChatCompletion",
    "framework-no-such-class": "agent_framework._types:NoSuchClass",
    "malformed-empty": "",
    "malformed-no-colon": "os.system",
    "malformed-two-colons": "os:path:join",
    "malformed-dotted-function": "os.path:join",
    "malformed-traversal": "../../etc:passwd",
    "malformed-space": "agent_framework._types:Message ",
    "malformed-non-ascii": "agent_framework._types:Méssage",
    "malformed-nul": "os\x00:system",
    "malformed-leading-dot": ".os:system",
}


def _record_kinds(name: str) -> dict[str, tuple[Any, ...]]:
    return {
        "object": ("o", name, {}, None),
        "class": ("c", name),
        "enum": ("e", name, "RED"),
        "named-tuple": ("n", name, 1, 2),
    }


RUN_STATE: Final = "agent_framework._workflows._events:WorkflowRunState"
MESSAGE: Final = "agent_framework._types:Message"
CONTENT: Final = "agent_framework._types:Content"
PARSED_URI: Final = "agent_framework._types:_ParsedDataUri"
_BACKGROUND_MODULES: Final = ("multiprocessing.", "concurrent.")
_HAS_PARSED_URI: Final = hasattr(sys.modules["agent_framework._types"], "_ParsedDataUri")
_CONTENT_HAS_STATE_HOOK: Final = "__getstate__" in vars(sys.modules["agent_framework._types"].Content)
CHECKPOINT_CLASS: Final = "agent_framework._workflows._checkpoint:WorkflowCheckpoint"
EXCEPTION: Final = "agent_framework.exceptions:WorkflowCheckpointException"


def _v2_names() -> list[Entry]:
    entries: list[Entry] = []
    for label, name in _HOSTILE_NAMES.items():
        for kind, record in _record_kinds(name).items():
            entries.append(Entry(f"v2-{kind}-{label}", "v2", in_state(record)))
        entries.append(
            Entry(f"v2-set-member-{label}", "v2", in_state(("S", ("e", name, "RED"), ("c", name))))
        )
        entries.append(Entry(f"v2-mapping-key-{label}", "v2", in_state(("m", ("n", name, 1), "v"))))
    return entries


def _v2_victims() -> list[Entry]:
    victim, meta = _key(HookedVictim), _key(MetaVictim)
    color, pair = _key(HookedColor), _key(TrackedPair)
    allowed = ALLOWED_VICTIMS
    return [
        Entry(
            "v2-victim-object-allowed",
            "v2",
            in_state(("o", victim, {"a": 1}, None)),
            expect="checkpoint",
            allowed=allowed,
        ),
        Entry(
            "v2-victim-class-allowed",
            "v2",
            in_state(("c", victim)),
            expect="checkpoint",
            allowed=allowed,
            state={"x": HookedVictim},
        ),
        Entry("v2-victim-as-enum", "v2", in_state(("e", victim, "RED")), allowed=allowed),
        Entry("v2-victim-as-named-tuple", "v2", in_state(("n", victim, 1)), allowed=allowed),
        Entry("v2-victim-unknown-slot", "v2", in_state(("o", victim, {}, {"nope": 1})), allowed=allowed),
        Entry("v2-victim-without-dict", "v2", in_state(("o", victim, None, None)), allowed=allowed),
        Entry("v2-victim-dict-not-dict", "v2", in_state(("o", victim, [], None)), allowed=allowed),
        Entry("v2-victim-dict-int-keys", "v2", in_state(("o", victim, {1: 2}, None)), allowed=allowed),
        Entry("v2-victim-set-member", "v2", in_state(("S", ("o", victim, {}, None))), allowed=allowed),
        Entry("v2-victim-mapping-key", "v2", in_state(("m", ("o", victim, {}, None), 1)), allowed=allowed),
        Entry("v2-metaclass-victim-object", "v2", in_state(("o", meta, {}, None)), allowed=allowed),
        Entry("v2-metaclass-victim-class", "v2", in_state(("c", meta)), allowed=allowed),
        Entry("v2-metaclass-reference", "v2", in_state(("c", _key(HookedMeta))), allowed=allowed),
        Entry("v2-builtin-base-victim", "v2", in_state(("o", _key(ListVictim), {}, None)), allowed=allowed),
        Entry("v2-mapping-victim", "v2", in_state(("o", _key(MappingVictim), {}, None)), allowed=allowed),
        Entry(
            "v2-mapping-hook-probe",
            "v2",
            in_state(("o", _key(MappingHookProbe), {"value": 1}, None)),
            expect="checkpoint",
            allowed=(*allowed, _key(MappingHookProbe)),
        ),
        Entry(
            "v2-dict-property-victim",
            "v2",
            in_state(("o", _key(DictPropertyVictim), {}, None)),
            allowed=allowed,
        ),
        Entry(
            "v2-abstract-victim",
            "v2",
            in_state(("o", _key(AbstractVictim), {}, None)),
            allowed=allowed,
        ),
        Entry(
            "v2-abstract-framework-class",
            "v2",
            in_state(("o", "agent_framework._workflows._edge_runner:EdgeRunner", {}, None)),
        ),
        Entry(
            "v2-abstract-class-after-built-objects",
            "v2",
            with_state({"a": ("o", victim, {}, None), "b": ("o", _key(AbstractVictim), {}, None)}),
            allowed=allowed,
        ),
        Entry(
            "v2-app-named-tuple-set-then-refused",
            "v2",
            with_state({"a": ("S", ("n", pair, 1, 2)), "b": ("o", "os:system", {}, None)}),
            allowed=allowed,
        ),
        Entry(
            "v2-app-named-tuple-mapping-key",
            "v2",
            in_state(("m", ("n", pair, 1, 2), "v")),
            allowed=allowed,
            expect="checkpoint",
        ),
        Entry(
            "v2-app-named-tuple",
            "v2",
            in_state(("n", pair, 1, 2)),
            allowed=allowed,
            expect="checkpoint",
            state={"x": TrackedPair(1, 2)},
        ),
        Entry("v2-app-named-tuple-wrong-arity", "v2", in_state(("n", pair, 1)), allowed=allowed),
        Entry(
            "v2-app-enum-member",
            "v2",
            in_state(("e", color, "RED")),
            allowed=allowed,
            expect="checkpoint",
            state={"x": HookedColor.RED},
        ),
        Entry(
            "v2-app-enum-alias",
            "v2",
            in_state(("e", color, "ALIAS")),
            allowed=allowed,
            expect="checkpoint",
            state={"x": HookedColor.RED},
        ),
        Entry(
            "v2-app-enum-in-set",
            "v2",
            in_state(("S", ("e", color, "RED"))),
            allowed=allowed,
            expect="checkpoint",
            state={"x": {HookedColor.RED}},
        ),
        Entry("v2-app-enum-by-value", "v2", in_state(("e", color, "red")), allowed=allowed),
        Entry("v2-app-enum-dunder", "v2", in_state(("e", color, "__class__")), allowed=allowed),
        Entry("v2-app-enum-private", "v2", in_state(("e", color, "_value_")), allowed=allowed),
        Entry("v2-app-enum-not-listed", "v2", in_state(("e", color, "RED"))),
    ]


def _v2_framework() -> list[Entry]:
    return [
        Entry("v2-framework-enum-member", "v2", in_state(("e", RUN_STATE, "IDLE")), expect="checkpoint"),
        Entry("v2-framework-enum-no-such-member", "v2", in_state(("e", RUN_STATE, "NOPE"))),
        Entry("v2-framework-enum-members-attribute", "v2", in_state(("e", RUN_STATE, "__members__"))),
        Entry("v2-framework-enum-int-name", "v2", in_state(("e", RUN_STATE, 1))),
        Entry("v2-framework-enum-extra-field", "v2", in_state(("e", RUN_STATE, "IDLE", "x"))),
        Entry("v2-framework-enum-as-object", "v2", in_state(("o", RUN_STATE, {}, None))),
        Entry("v2-framework-class-as-enum", "v2", in_state(("e", MESSAGE, "IDLE"))),
        Entry(
            "v2-framework-named-tuple",
            "v2",
            in_state(("n", PARSED_URI, "text/plain", True, "eA==")),
            # The named tuple is new in agent-framework-core 1.23; older releases refuse the name.
            expect="checkpoint" if _HAS_PARSED_URI else "refused",
        ),
        Entry("v2-framework-named-tuple-wrong-arity", "v2", in_state(("n", PARSED_URI, "a"))),
        Entry(
            "v2-framework-object-odd-state",
            "v2",
            in_state(("o", MESSAGE, {"role": 5, "contents": "x"}, None)),
            expect="either",
        ),
        Entry("v2-framework-object-unknown-slot", "v2", in_state(("o", MESSAGE, {}, {"x": 1}))),
        Entry("v2-framework-object-no-dict", "v2", in_state(("o", MESSAGE, None, None))),
        Entry("v2-framework-object-arity", "v2", in_state(("o", MESSAGE, {}))),
        Entry("v2-framework-slots-class-with-dict", "v2", in_state(("o", CHECKPOINT_CLASS, {}, None))),
        Entry(
            "v2-framework-slots-class-unknown-slot",
            "v2",
            in_state(("o", CHECKPOINT_CLASS, None, {"nope": 1})),
        ),
        Entry(
            "v2-framework-slots-class",
            "v2",
            in_state(("o", CHECKPOINT_CLASS, None, {"workflow_name": "w"})),
            expect="either",
        ),
        Entry(
            "v2-framework-getstate-class-empty-state",
            "v2",
            in_state(("o", CONTENT, {}, None)),
            expect="checkpoint",
            # Only releases whose Content defines __getstate__ (1.23, not 1.13) refuse the resave.
            resaves=not _CONTENT_HAS_STATE_HOOK,
            residual=RESIDUAL_STATE_HOOK if _CONTENT_HAS_STATE_HOOK else None,
        ),
        Entry(
            "v2-framework-class-reference",
            "v2",
            in_state(("c", MESSAGE)),
            expect="checkpoint",
            state={"x": Message},
        ),
        Entry(
            "v2-standard-class-reference",
            "v2",
            in_state(("c", "builtins:int")),
            expect="checkpoint",
            state={"x": int},
        ),
        Entry("v2-framework-exception-object", "v2", in_state(("o", EXCEPTION, {}, None))),
        Entry(
            "v2-framework-exception-class-reference", "v2", in_state(("c", EXCEPTION)), expect="checkpoint"
        ),
    ]


EXECUTOR_REQUEST: Final = _key(agent_framework._workflows._agent_executor.AgentExecutorRequest)


def _v2_attribute_names() -> list[Entry]:
    """Instance state naming what Python or a library looks up on the object (issue 19).

    Nothing runs during these loads; a load that accepted them would hand the workflow objects
    whose ``copy.deepcopy``, ``model_dump()``, attribute assignment or configuration lookups
    call the class the payload names (:class:`HookedVictim`, which records its construction).
    """
    model = _key(ModelVictim)
    allowed = (*ALLOWED_VICTIMS, model)

    def victim() -> tuple[str, str]:
        # A fresh record each time: one reached twice in a tree is refused for that alone.
        return ("c", _key(HookedVictim))

    def saved(value: object, **attributes: object) -> tuple[Any, ...]:
        """The record a save writes for ``value``, with ``attributes`` added to its instance dict."""
        record: tuple[Any, ...] = pickle.loads(
            CheckpointCodec(allowed).encode(base_checkpoint({"x": value})).payload
        )["state"]["x"]
        record[2].update(attributes)
        return record

    def message(**attributes: object) -> tuple[Any, ...]:
        return saved(Message(role="user", contents=[Content.from_text("hi")]), **attributes)

    def request(**attributes: object) -> tuple[Any, ...]:
        executor_request = agent_framework._workflows._agent_executor.AgentExecutorRequest
        return saved(executor_request(messages=[Message(role="user", contents=["hi"])]), **attributes)

    def content(**attributes: object) -> tuple[Any, ...]:
        return saved(Content.from_text("hi"), **attributes)

    def victim_model(state: dict[str, object] | None = None, **slots: object) -> tuple[Any, ...]:
        stored: dict[str, object] = {
            "__pydantic_extra__": {},
            "__pydantic_fields_set__": ("S", "name"),
            "__pydantic_private__": {"_note": "n"},
            **slots,
        }
        return ("o", model, {"name": "m", **(state or {})}, stored)

    refused: dict[str, tuple[Any, ...]] = {
        # copy.deepcopy(message) in Executor.execute finds __deepcopy__ through the instance; the
        # executor request's class defines none, so the old method rule let this one through.
        "executor-request-deepcopy": request(__deepcopy__=victim()),
        "executor-request-copy": request(__copy__=victim()),
        "executor-request-reduce-ex": request(__reduce_ex__=victim()),
        "executor-request-class-attribute": request(__class__=victim()),
        "executor-request-sunder": request(_repr_html_=victim()),
        "message-deepcopy": message(__deepcopy__=victim()),
        "message-getattr": message(__getattr__=victim()),
        # Read through self by the framework's __getstate__ and to_dict (Agent Framework Core
        # 1.13's Message has no _PICKLE_OMIT_FIELDS, so there the name shadows nothing).
        **(
            {"message-pickle-omit-fields": message(_PICKLE_OMIT_FIELDS=("S", "role"))}
            if hasattr(Message, "_PICKLE_OMIT_FIELDS")
            else {}
        ),
        "message-default-exclude": message(DEFAULT_EXCLUDE=victim()),
        "message-property": message(text=victim()),
        "content-deepcopy": content(__deepcopy__=victim()),
        "content-shallow-copy-fields": content(_SHALLOW_COPY_FIELDS=("S",)),
        # BaseModel.model_dump calls self.__pydantic_serializer__.to_python(self, ...).
        "model-serializer": victim_model({"__pydantic_serializer__": victim()}),
        # BaseModel.__setattr__ calls self.__pydantic_setattr_handlers__[name](self, name, value).
        "model-setattr-handlers": victim_model({"__pydantic_setattr_handlers__": {"name": victim()}}),
        "model-config": victim_model({"model_config": {"extra": "forbid"}}),
        "model-method": victim_model({"model_dump": victim()}),
        # BaseModel.__getattr__ serves any name the class lacks from __pydantic_extra__.
        "model-extra-dunder": victim_model(__pydantic_extra__={"__html__": victim()}),
        "model-extra-sunder": victim_model(__pydantic_extra__={"_repr_html_": victim()}),
        "model-extra-int-key": victim_model(__pydantic_extra__=("m", 1, victim())),
        "model-extra-not-dict": victim_model(__pydantic_extra__=[victim()]),
        "model-private-undeclared": victim_model(__pydantic_private__={"_note": "n", "_other": victim()}),
        "model-private-dunder": victim_model(__pydantic_private__={"__deepcopy__": victim()}),
        "model-private-not-dict": victim_model(__pydantic_private__=("t", "_note")),
        "model-fields-set-object": victim_model(__pydantic_fields_set__=("o", _key(HookedVictim), {}, None)),
        "model-fields-set-list": victim_model(__pydantic_fields_set__=["name"]),
        "model-fields-set-ints": victim_model(__pydantic_fields_set__=("S", 1, 2)),
        "model-fields-set-none": victim_model(__pydantic_fields_set__=None),
        # Names the class lacks that Agent Framework calls by duck typing (issue 30): make_json_safe
        # calls a model_dump, to_dict or dict it finds; pydantic serves an extra for any such name.
        "victim-duck-typed-to-dict": ("o", _key(HookedVictim), {"to_dict": victim()}, None),
        "message-duck-typed-model-dump": message(model_dump=victim()),
        "executor-request-duck-typed-to-dict": request(to_dict=victim()),
        "model-extra-duck-typed": victim_model(__pydantic_extra__={"to_dict": victim()}),
        "victim-dunder": ("o", _key(HookedVictim), {"__deepcopy__": victim()}, None),
        "victim-hook-shadow": ("o", _key(HookedVictim), {"__setattr__": victim()}, None),
    }
    accepted: dict[str, tuple[Any, ...]] = {
        # Declared fields with class-level defaults, and extras named like BaseModel methods
        # (the class answers those names, never __getattr__), are state.
        "executor-request": request(should_respond=False),
        "model": victim_model(__pydantic_extra__={"copy": 1, "json": victim(), "_id": "x"}),
        "model-extra-duck-typed-data": victim_model(__pydantic_extra__={"to_dict": "text", "tolist": [1]}),
        "model-fields-set-frozen": victim_model(__pydantic_fields_set__=("Z", "name")),
        "model-private-none": victim_model(__pydantic_private__=None),
    }
    return [
        *(
            Entry(f"v2-attribute-{label}", "v2", in_state(record), allowed=allowed)
            for label, record in refused.items()
        ),
        *(
            Entry(
                f"v2-attribute-{label}-allowed", "v2", in_state(record), expect="checkpoint", allowed=allowed
            )
            for label, record in accepted.items()
        ),
    ]


def _v2_records() -> list[Entry]:
    records: dict[str, tuple[object, Expect]] = {
        "empty-tuple": ((), "refused"),
        "untagged-tuple": ((1, 2), "refused"),
        "empty-tag": (("",), "refused"),
        "unknown-tag": (("?", 1), "refused"),
        "tag-not-str": ((b"t", 1), "refused"),
        "empty-tuple-record": (("t",), "checkpoint"),
        "mapping-empty": (("m",), "refused"),
        "mapping-only-str-keys": (("m", "a", 1), "refused"),
        "mapping-odd": (("m", 1), "refused"),
        "mapping-list-key": (("m", [1], 1), "refused"),
        "mapping-dict-key": (("m", {}, 1), "refused"),
        "mapping-repeated-key": (("m", 1, "a", 1, "b"), "refused"),
        "mapping-equal-keys": (("m", 1, "a", True, "b"), "refused"),
        "mapping-equal-float-key": (("m", 1, "a", 1.0, "b"), "refused"),
        "mapping-nan-key": (("m", math.nan, 1), "refused"),
        "mapping-bytearray-key": (("m", ("a", b"x"), 1), "refused"),
        "mapping-set-key": (("m", ("S", 1), 1), "refused"),
        "mapping-frozenset-key": (("m", ("Z", 1), "v"), "checkpoint"),
        "set-list-member": (("S", [1]), "refused"),
        "set-dict-member": (("S", {}), "refused"),
        "set-bytearray-member": (("S", ("a", b"x")), "refused"),
        "set-of-sets": (("Z", ("S", 1)), "refused"),
        "set-nan-member": (("S", math.nan), "refused"),
        "set-duplicate-members": (("S", 1, 1, True, 1.0), "either"),
        "bytearray-str": (("a", "x"), "refused"),
        "bytearray-missing": (("a",), "refused"),
        "bytearray-extra": (("a", b"x", b"y"), "refused"),
        "date-month-13": (("D", 2020, 13, 1), "refused"),
        "date-str-year": (("D", "2020", 1, 1), "refused"),
        "date-bool-day": (("D", 2020, 1, True), "refused"),
        "date-short": (("D", 2020, 1), "refused"),
        "date-huge-year": (("D", 10**30, 1, 1), "refused"),
        "time-fold-2": (("H", 1, 2, 3, 4, 2, None), "refused"),
        "time-zone-not-record": (("H", 1, 2, 3, 4, 0, "UTC"), "refused"),
        "time-zone-object": (("H", 1, 2, 3, 4, 0, ("o", MESSAGE, {}, None)), "refused"),
        "datetime-zone-tuple": (("W", 2020, 1, 1, 0, 0, 0, 0, 0, ("t",)), "refused"),
        "datetime-hour-25": (("W", 2020, 1, 1, 25, 0, 0, 0, 0, None), "refused"),
        "datetime-short": (("W", 2020, 1, 1), "refused"),
        "timedelta-overflow": (("R", 10**20, 0, 0), "refused"),
        "timedelta-float": (("R", 1.5, 0, 0), "refused"),
        "timezone-day-offset": (("z", 1, 0, 0, None), "refused"),
        "timezone-int-name": (("z", 0, 0, 0, 5), "refused"),
        "timezone-utc": (("z", 0, 0, 0, None), "checkpoint"),
        "decimal-nan": (("M", "NaN"), "refused"),
        "decimal-snan": (("M", "sNaN"), "refused"),
        "decimal-infinity": (("M", "Infinity"), "refused"),
        "decimal-minus-inf": (("M", "-inf"), "refused"),
        "decimal-garbage": (("M", "1.2.3"), "refused"),
        "decimal-float": (("M", 1.5), "refused"),
        "decimal-exponent-overflow": (("M", "1e999999999999999999999"), "refused"),
        "decimal-padded": (("M", " 1.5 "), "either"),
        "uuid-15-bytes": (("U", b"x" * 15), "refused"),
        "uuid-17-bytes": (("U", b"x" * 17), "refused"),
        "uuid-str": (("U", "x" * 16), "refused"),
        "path-nul": (("p", "PosixPath", "/srv/a\x00b"), "refused"),
        "path-windows-on-posix": (("p", "WindowsPath", "C:\\x"), "either"),
        "path-unknown-class": (("p", "Path", "/x"), "refused"),
        "path-int-text": (("p", "PurePosixPath", 5), "refused"),
        "path-unhashable-class": (("p", ["PosixPath"], "x"), "refused"),
        "path-absolute": (("p", "PosixPath", "/etc/passwd"), "checkpoint"),
        "path-traversal": (("p", "PurePosixPath", "../../../../etc/shadow"), "checkpoint"),
        "class-int-name": (("c", 5), "refused"),
        "class-extra-field": (("c", "builtins:int", "x"), "refused"),
        "named-tuple-no-name": (("n",), "refused"),
        "object-int-name": (("o", 5, {}, None), "refused"),
        "enum-no-name": (("e",), "refused"),
    }
    entries = [
        Entry(f"v2-record-{label}", "v2", in_state(record), expect=expect)
        for label, (record, expect) in records.items()
    ]
    zones: dict[str, tuple[str, Expect]] = {
        "dotdot": ("../../../../etc/passwd", "refused"),
        "absolute": ("/etc/passwd", "refused"),
        "nested-dotdot": ("Europe/../../../etc/passwd", "refused"),
        "nul": ("Europe/Paris\x00", "refused"),
        "empty": ("", "refused"),
        "too-long": ("A" * 65, "refused"),
        "double-slash": ("Europe//Paris", "refused"),
        "trailing-slash": ("Europe/Paris/", "refused"),
        "backslash": ("..\\..\\etc\\passwd", "refused"),
        "directory": ("America", "refused"),
        "not-tzif": ("leapseconds", "refused"),
        "unknown": ("Nowhere/Land", "refused"),
        "valid": ("Europe/Paris", "checkpoint"),
        "valid-plus": ("Etc/GMT+5", "checkpoint"),
    }
    entries += [
        Entry(f"v2-zoneinfo-{label}", "v2", in_state(("k", key)), expect=expect)
        for label, (key, expect) in zones.items()
    ]
    entries.append(Entry("v2-zoneinfo-int-key", "v2", in_state(("k", 5))))
    entries.append(
        Entry(
            "v2-zoneinfo-in-datetime",
            "v2",
            in_state(("W", 2020, 1, 1, 0, 0, 0, 0, 0, ("k", "../../etc/passwd"))),
        )
    )
    # Values a save never writes.
    raw: dict[str, object] = {
        "nan": math.nan,
        "inf": math.inf,
        "minus-inf": -math.inf,
        "nan-in-list": [1, math.nan],
        "nan-in-tuple": ("t", math.inf),
        "nan-in-object-state": ("o", MESSAGE, {"role": math.nan}, None),
        "set": {1, 2},
        "frozenset": frozenset({1}),
        "bytearray": bytearray(b"x"),
        "complex": complex(1, 2),
        "int-key-dict": {1: "x"},
        "bytes-key-dict": {b"k": 1},
        "none-key-dict": {None: 1},
        "bool-key-dict": {True: 1},
        "tuple-key-dict": {("t", 1): 2},
        "record-in-set": ("S", ("S",)),
    }
    entries += [Entry(f"v2-raw-{label}", "v2", in_state(value)) for label, value in raw.items()]
    entries.append(Entry("v2-raw-int-key-in-state", "v2", with_state({1: 2})))
    entries.append(Entry("v2-raw-int-key-at-top", "v2", _top_with_extra_key(1)))
    # Shared containers and cycles, through the pickle memo.
    shared: list[object] = [1]
    laughs: list[object] = ["lol"]
    laughs_records: tuple[object, ...] = ("t", "lol")
    for _ in range(60):
        laughs = [laughs, laughs]
        laughs_records = ("t", laughs_records, laughs_records)
    shared_record = ("t", 1)
    cyclic_list: list[object] = []
    cyclic_list.append(cyclic_list)
    cyclic_dict: dict[str, object] = {}
    cyclic_dict["self"] = cyclic_dict
    holder: list[object] = []
    record_cycle = ("t", holder)
    holder.append(record_cycle)
    state_cycle: dict[str, object] = {}
    state_cycle["me"] = ("o", MESSAGE, state_cycle, None)
    entries += [
        Entry("v2-shared-list", "v2", with_state({"a": shared, "b": shared})),
        # Isolated: a load that walked shared containers again would take 2**60 steps.
        Entry("v2-billion-laughs-lists", "v2", in_state(laughs), isolate=True),
        Entry("v2-billion-laughs-records", "v2", in_state(laughs_records), isolate=True),
        Entry("v2-shared-record", "v2", with_state({"a": shared_record, "b": shared_record})),
        Entry(
            "v2-shared-object-state",
            "v2",
            with_state({"a": ("o", MESSAGE, cyclic_dict, None), "b": cyclic_dict}),
        ),
        Entry("v2-cycle-list", "v2", in_state(cyclic_list)),
        Entry("v2-cycle-dict", "v2", in_state(cyclic_dict)),
        Entry("v2-cycle-through-record", "v2", in_state(record_cycle)),
        Entry("v2-cycle-through-object-state", "v2", with_state(state_cycle)),
        Entry("v2-state-is-top-level", "v2", _state_is_top()),
    ]
    # Nesting the interpreter survives in-process; deeper levels are in the resources family.
    entries += [
        Entry("v2-deep-lists-100k", "v2", checkpoint_program(deep_lists(100_000))),
        Entry("v2-deep-dicts-100k", "v2", checkpoint_program(deep_dicts(100_000))),
        Entry("v2-deep-records-100k", "v2", checkpoint_program(deep_records(100_000))),
        Entry("v2-deep-objects-10k", "v2", checkpoint_program(deep_objects(10_000))),
        Entry("v2-deep-records-in-set-10k", "v2", checkpoint_program(tup(text("S"), deep_records(10_000)))),
        # The top level and the state dict are the first two of MAX_NESTING levels.
        Entry(
            "v2-nested-lists-at-bound",
            "v2",
            checkpoint_program(deep_lists(MAX_NESTING - 2)),
            expect="checkpoint",
        ),
        Entry("v2-nested-lists-over-bound", "v2", checkpoint_program(deep_lists(MAX_NESTING - 1))),
        Entry(
            "v2-nested-records-at-bound",
            "v2",
            checkpoint_program(deep_records(MAX_NESTING - 2)),
            expect="checkpoint",
        ),
        Entry("v2-nested-records-over-bound", "v2", checkpoint_program(deep_records(MAX_NESTING - 1))),
        Entry("v2-nested-dicts-over-bound", "v2", checkpoint_program(deep_dicts(MAX_NESTING - 1))),
        Entry("v2-nested-objects-over-bound", "v2", checkpoint_program(deep_objects(MAX_NESTING // 2))),
        Entry("v2-nested-900", "v2", checkpoint_program(deep_lists(900))),
        # 33 members sharing one hash are 32 collisions: the bound itself.
        Entry(
            "v2-collisions-at-bound",
            "v2",
            checkpoint_program(tup(text("S"), colliding_ints(33))),
            expect="either",
        ),
        Entry("v2-collisions-1000", "v2", checkpoint_program(tup(text("S"), colliding_ints(1000)))),
        Entry(
            "v2-collisions-1000-mapping",
            "v2",
            checkpoint_program(
                MARK + text("m") + b"".join(integer(k * _MERSENNE + 7) + NONE for k in range(1, 1001)) + TUPLE
            ),
        ),
    ]
    return entries


def _top_with_extra_key(key: object) -> bytes:
    tree: dict[object, Any] = {}
    tree.update(base_tree())
    tree[key] = 1
    return tree_payload(tree)


def _state_is_top() -> bytes:
    tree = base_tree()
    tree["state"] = tree
    return tree_payload(tree)


def deep_lists(depth: int) -> bytes:
    return EMPTY_LIST * depth + APPEND * (depth - 1)


def deep_dicts(depth: int) -> bytes:
    return (EMPTY_DICT + text("k")) * (depth - 1) + EMPTY_DICT + SETITEM * (depth - 1)


def deep_records(depth: int, tag: str = "t") -> bytes:
    """``("t", ("t", ... ("t",)))``: the tag memoized once, then MARK+GET per level."""
    return text(tag) + MEMOIZE + POP + (MARK + pickle.BINGET + b"\x00") * depth + TUPLE * depth


def deep_objects(depth: int) -> bytes:
    """Message objects nested through their state dicts."""
    level = MARK + text("o") + text(MESSAGE) + EMPTY_DICT + text("inner")
    return level * depth + NONE + (SETITEM + NONE + TUPLE) * depth


def deep_tuple(depth: int) -> bytes:
    """``((((),),),)``: a raw tuple nested ``depth`` deep."""
    return EMPTY_TUPLE + TUPLE1 * depth


def colliding_ints(count: int, residue: int = 7) -> bytes:
    return b"".join(integer(k * _MERSENNE + residue) for k in range(1, count + 1))


def _shape() -> list[Entry]:
    entries: list[Entry] = []
    tops: dict[str, object] = {
        "list": [],
        "none": None,
        "int": 1,
        "str": "checkpoint",
        "tuple-record": ("t", 1),
        "mapping-record": ("m", 1, "a"),
        "object": ("o", CHECKPOINT_CLASS, None, {}),
    }
    for label, top in tops.items():
        entries.append(Entry(f"shape-top-{label}", "shape", tree_payload(top)))
    tree = base_tree()
    for name in sorted(tree):
        missing = dict(tree)
        del missing[name]
        entries.append(Entry(f"shape-missing-{name}", "shape", tree_payload(missing)))
    entries.append(Entry("shape-extra-field", "shape", tree_payload({**tree, "evil": 1})))
    entries.append(Entry("shape-empty-dict", "shape", tree_payload({})))
    wrong: dict[str, dict[str, object]] = {
        "state-list": {"state": []},
        "state-none": {"state": None},
        "state-str": {"state": "x"},
        "state-object": {"state": ("o", MESSAGE, {}, None)},
        "state-tuple-record": {"state": ("t",)},
        "state-set-record": {"state": ("S",)},
        "state-mapping-record": {"state": ("m", 1, "a")},
        "messages-list": {"messages": []},
        "metadata-mapping-record": {"metadata": ("m", 1, "a")},
        "pending-none": {"pending_request_info_events": None},
        "iteration-str": {"iteration_count": "1"},
        "iteration-bool": {"iteration_count": True},
        "iteration-float": {"iteration_count": 1.5},
        "iteration-huge": {"iteration_count": 10**300},
        "checkpoint-id-int": {"checkpoint_id": 5},
        "checkpoint-id-other": {"checkpoint_id": "cp-other"},
        "workflow-none": {"workflow_name": None},
        "workflow-other": {"workflow_name": "other-workflow"},
        "timestamp-bytes": {"timestamp": b"t"},
        "previous-int": {"previous_checkpoint_id": 1},
        "version-2": {"version": "2.0"},
        "version-padded": {"version": "1.0 "},
        "version-empty": {"version": ""},
        "version-none": {"version": None},
        "version-float": {"version": 1.0},
        "version-decimal": {"version": ("M", "1.0")},
    }
    either = {
        "state-mapping-record",
        "metadata-mapping-record",
        "iteration-huge",
        "checkpoint-id-other",
        "workflow-other",
    }
    for label, fields in wrong.items():
        entries.append(
            Entry(
                f"shape-{label}",
                "shape",
                tree_payload({**tree, **fields}),
                expect="either" if label in either else "refused",
            )
        )
    return entries


def _resources() -> list[Entry]:
    def huge(opcode: bytes, size: int, width: str = "<Q") -> bytes:
        return PROTO + opcode + struct.pack(width, size) + b"x" + STOP

    sigsegv = "the C unpickler hashes the key recursively without a depth limit: SIGSEGV"
    big = raw_bytes(b"x" * (1 << 20)) + MEMOIZE
    digits = text("9" * (1 << 20)) + MEMOIZE
    long_path = text("/".join(f"{i % 100:02d}" for i in range(300_000))) + MEMOIZE
    shared_decimal = (
        EMPTY_LIST
        + digits
        + POP
        + MARK
        + (MARK + text("M") + pickle.BINGET + b"\x00" + TUPLE) * 200
        + APPENDS
    )
    shared_path = (
        EMPTY_LIST
        + long_path
        + POP
        + MARK
        + (MARK + text("p") + text("PurePosixPath") + pickle.BINGET + b"\x00" + TUPLE) * 200
        + APPENDS
    )
    amplified = (
        EMPTY_LIST + big + POP + MARK + (MARK + text("a") + pickle.BINGET + b"\x00" + TUPLE) * 2000 + APPENDS
    )
    entries = [
        Entry("huge-binunicode8", "resources", huge(pickle.BINUNICODE8, 2**62)),
        Entry("huge-binbytes8", "resources", huge(pickle.BINBYTES8, 2**62)),
        Entry("huge-bytearray8", "resources", huge(pickle.BYTEARRAY8, 2**62)),
        Entry("huge-binbytes8-8gib", "resources", huge(pickle.BINBYTES8, 2**33)),
        Entry("huge-bytearray8-8gib", "resources", huge(pickle.BYTEARRAY8, 2**33)),
        Entry("huge-binunicode", "resources", huge(pickle.BINUNICODE, 2**32 - 1, "<I")),
        Entry("huge-binbytes", "resources", huge(pickle.BINBYTES, 2**32 - 1, "<I")),
        Entry(
            "huge-binstring",
            "resources",
            b"\x80\x02" + pickle.BINSTRING + struct.pack("<i", 2**31 - 1) + b"x.",
        ),
        Entry("huge-long4", "resources", huge(pickle.LONG4, 2**31 - 1, "<i")),
        Entry("huge-frame", "resources", huge(pickle.FRAME, 2**62)),
        Entry("deep-lists-1m", "resources", checkpoint_program(deep_lists(1_000_000))),
        Entry("deep-dicts-1m", "resources", checkpoint_program(deep_dicts(1_000_000))),
        Entry("deep-records-1m", "resources", checkpoint_program(deep_records(1_000_000))),
        Entry(
            "deep-tuple-dict-key-200k",
            "resources",
            checkpoint_program(EMPTY_DICT + deep_tuple(200_000) + NONE + SETITEM),
            residual=sigsegv,
        ),
        Entry(
            "deep-tuple-set-member-200k",
            "resources",
            checkpoint_program(EMPTY_SET + MARK + deep_tuple(200_000) + ADDITEMS),
            residual=sigsegv,
        ),
        Entry(
            "deep-tuple-frozenset-member-200k",
            "resources",
            checkpoint_program(MARK + deep_tuple(200_000) + FROZENSET),
            residual=sigsegv,
        ),
        Entry(
            "deep-record-mapping-key-200k",
            "resources",
            checkpoint_program(tup(text("m"), deep_records(200_000), NONE)),
        ),
        Entry(
            "colliding-raw-set-20k",
            "resources",
            checkpoint_program(EMPTY_SET + MARK + colliding_ints(20_000) + ADDITEMS),
            residual="quadratic set insertion inside the C unpickler (about 3 s for 20k, 11 s for 40k)",
        ),
        Entry(
            "colliding-raw-dict-20k",
            "resources",
            checkpoint_program(
                EMPTY_DICT
                + MARK
                + b"".join(integer(k * _MERSENNE + 7) + NONE for k in range(1, 20_001))
                + SETITEMS
            ),
            residual="quadratic dict insertion inside the C unpickler",
        ),
        Entry(
            "colliding-set-record-20k",
            "resources",
            checkpoint_program(tup(text("S"), colliding_ints(20_000))),
        ),
        Entry(
            "colliding-frozenset-record-20k",
            "resources",
            checkpoint_program(tup(text("Z"), colliding_ints(20_000))),
        ),
        Entry(
            "colliding-mapping-record-20k",
            "resources",
            checkpoint_program(
                MARK
                + text("m")
                + b"".join(integer(k * _MERSENNE + 7) + NONE for k in range(1, 20_001))
                + TUPLE
            ),
        ),
        Entry("amplified-shared-bytes", "resources", checkpoint_program(amplified)),
        Entry("amplified-shared-decimal-digits", "resources", checkpoint_program(shared_decimal)),
        Entry("amplified-shared-path-text", "resources", checkpoint_program(shared_path)),
    ]
    slow = (
        "deep-lists-1m",
        "deep-dicts-1m",
        "deep-records-1m",
        "colliding-raw-set-20k",
        "colliding-raw-dict-20k",
        "amplified-shared-bytes",
    )
    return [
        dataclasses.replace(
            entry,
            isolate=True,
            operations=("load", "list_checkpoint_ids") if entry.name in slow else OPERATIONS,
        )
        for entry in entries
    ]


def build_corpus() -> list[Entry]:
    entries = [
        *_classics(),
        *_v1(),
        *_v2_names(),
        *_v2_victims(),
        *_v2_framework(),
        *_v2_attribute_names(),
        *_v2_records(),
        *_shape(),
        *_resources(),
    ]
    names = [entry.name for entry in entries]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise AssertionError(f"corpus names repeat: {duplicates}")
    return entries


CORPUS: Final = build_corpus()
BY_NAME: Final = {entry.name: entry for entry in CORPUS}

# -- side effects -----------------------------------------------------------------------------


def _watched_modules() -> list[tuple[str, Any]]:
    return [
        (name, module)
        for name, module in list(sys.modules.items())
        if module is not None
        and (
            (name.startswith("agent_framework") and not name.startswith("agent_framework_mongodb"))
            or name == MODULE
        )
    ]


_WATCHED: list[tuple[str, object]] = []
_WATCHED_FOR: list[int] = [-1]


def _watched_objects() -> list[tuple[str, object]]:
    """Every framework (and victim) class and enum member; recomputed when modules change."""
    if _WATCHED_FOR[0] != len(sys.modules):
        _WATCHED.clear()
        for name, module in _watched_modules():
            for value in list(vars(module).values()):
                # MetaVictim's metaclass records every attribute read, so it is never inspected.
                if type(value) is HookedMeta or not isinstance(value, type) or value.__module__ != name:
                    continue
                _WATCHED.append((f"{name}:{value.__qualname__}", value))
                if isinstance(value, enum.EnumMeta):
                    members: Mapping[str, object] = value.__members__
                    for member_name, member in members.items():
                        _WATCHED.append((f"{name}:{value.__qualname__}.{member_name}", member))
        _WATCHED_FOR[0] = len(sys.modules)
    return _WATCHED


def _class_state() -> list[tuple[str, object, dict[str, object]]]:
    """The watched objects with their attributes, compared by identity after a load."""
    return [(key, obj, vars(obj).copy()) for key, obj in _watched_objects()]


_AUDITED: Final = (
    "pickle.find_class",
    "os.system",
    "os.exec",
    "os.spawn",
    "os.posix_spawn",
    "os.fork",
    "os.kill",
    "os.remove",
    "os.rename",
    "os.mkdir",
    "os.rmdir",
    "os.chmod",
    "subprocess.Popen",
    "exec",
    "compile",
    "ctypes.",
    "socket.",
    "shutil.",
    "code.__new__",
    "builtins.input",
    "marshal.loads",
    "pickle.",
)
_WRITE_MODES: Final = frozenset("wax+")
_AUDIT: list[tuple[int, list[str]]] = []
"""(thread, events) of the active guards; the innermost one of the event's thread records."""


def _audit(event: str, arguments: tuple[Any, ...]) -> None:
    if not _AUDIT:
        return
    thread = threading.get_ident()
    events = next((events for owner, events in reversed(_AUDIT) if owner == thread), None)
    if events is None:
        return
    if event == "open":
        mode = arguments[1] if len(arguments) > 1 else "r"
        if isinstance(mode, str) and _WRITE_MODES & set(mode):
            events.append(f"open({arguments[0]!r}, {mode!r})")
        return
    if event.startswith(_AUDITED):
        events.append(event)


sys.addaudithook(_audit)


def _files(root: Path) -> frozenset[str]:
    return frozenset(str(path.relative_to(root)) for path in root.rglob("*"))


class Guard:
    """Snapshots before a load and lists what changed after it (``problems``)."""

    def __init__(self, root: Path, markers: Sequence[str] = ()) -> None:
        self.root = root
        self.markers = tuple(markers)
        self.problems: list[str] = []

    def __enter__(self) -> Guard:
        # No cyclic garbage collection inside the window: garbage of an earlier load (an xfailed
        # test's traceback, say) must not run a victim's finalizer and be blamed on this one.
        self._gc = gc.isenabled()
        gc.disable()
        TRIPPED.clear()
        HOOK_CALLS.clear()
        # A probe module an earlier (failing) load imported must be importable, and detected, again.
        for name in NEVER_IMPORTED:
            sys.modules.pop(name, None)
        self.audited: list[str] = []
        self._audit_entry = (threading.get_ident(), self.audited)
        _AUDIT.append(self._audit_entry)
        self._modules = frozenset(sys.modules)
        self._files = _files(self.root)
        self._classes = _class_state()
        self._path = list(sys.path)
        self._environ = dict(os.environ)
        return self

    def __exit__(self, *exc_info: object) -> None:
        _AUDIT.remove(self._audit_entry)
        try:
            self._check()
        finally:
            # Only now: a collection inside the checks would finalize garbage made before them.
            if self._gc:
                gc.enable()

    def _check(self) -> None:
        problems = self.problems
        if self.audited:
            problems.append(f"audited events: {sorted(set(self.audited))}")
        # The isolated runs start processes from background threads while in-process entries
        # run, and multiprocessing imports its own submodules lazily; a payload cannot name
        # them (find_class refuses everything), so they are not the load's doing.
        imported = sorted(
            name for name in set(sys.modules) - self._modules if not name.startswith(_BACKGROUND_MODULES)
        )
        if imported:
            problems.append(f"imported modules: {imported}")
        created = sorted(_files(self.root) - self._files)
        if created:
            problems.append(f"created files: {created}")
        problems += [f"created marker: {marker}" for marker in self.markers if (self.root / marker).exists()]
        if TRIPPED:
            problems.append(f"trip() ran: {list(TRIPPED)}")
        if HOOK_CALLS:
            problems.append(f"victim hooks ran: {list(HOOK_CALLS)}")
        for key, obj, attributes in self._classes:
            now = vars(obj)
            changed = sorted(
                name
                for name in attributes.keys() | now.keys()
                if now.get(name, _GONE) is not attributes.get(name, _GONE)
            )
            if changed:
                problems.append(f"{key} attributes changed: {changed}")
        if sys.path != self._path:
            problems.append("sys.path changed")
        if dict(os.environ) != self._environ:
            problems.append("os.environ changed")

    def assert_clean(self) -> None:
        assert not self.problems, "; ".join(self.problems)


_GONE: Final = object()

# -- outcomes ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one load did: returned ``value``, or raised a package ``error``."""

    value: object = None
    error: MongoDBMappingError | None = None

    @property
    def refused(self) -> bool:
        return self.error is not None


class EscapedError(AssertionError):
    """A load raised something other than the package's mapping errors."""


def _escaped(error: BaseException, what: str) -> EscapedError:
    kind = f"{type(error).__module__}.{type(error).__qualname__}"
    if isinstance(error, MongoDBIntegrationError):
        return EscapedError(f"{what} raised {kind}, a package error outside the mapping family: {error}")
    return EscapedError(f"{what} raised {kind} instead of a package error: {str(error)[:300]}")


def attempt(load: Callable[[], object], what: str = "a load") -> Outcome:
    """Run ``load``: its value, or its package mapping error; anything else (SystemExit and
    KeyboardInterrupt included) fails the test as an :class:`EscapedError`."""
    try:
        value = load()
    except MongoDBMappingError as error:
        return Outcome(error=error)
    except BaseException as error:
        raise _escaped(error, what) from error
    register_result(value)
    return Outcome(value=value)


async def attempt_async(load: Callable[[], Any], what: str = "a load") -> Outcome:
    try:
        value = await load()
    except MongoDBMappingError as error:
        return Outcome(error=error)
    except BaseException as error:
        raise _escaped(error, what) from error
    register_result(value)
    return Outcome(value=value)


# -- storages ---------------------------------------------------------------------------------


def storage_options(
    *,
    allowed: Sequence[str] = (),
    signing_keys: Sequence[bytes] = (),
    session_id: str = "session-hostile",
    tenant_id: str = "tenant-alpha",
) -> MongoDBCheckpointStorageOptions:
    return MongoDBCheckpointStorageOptions(
        tenant_id=tenant_id,
        workflow_name=WORKFLOW,
        session_id=session_id,
        application_id="app-main",
        allowed_checkpoint_types=tuple(allowed),
        signing_keys=tuple(signing_keys),
    )


_TEMPLATES: dict[tuple[object, ...], list[dict[str, Any]]] = {}


async def plant(
    collection: InMemoryCollection,
    options: MongoDBCheckpointStorageOptions,
    payload: bytes | None,
    *,
    drop_signature: bool = False,
) -> MongoDBCheckpointStorage:
    """Store a good checkpoint and the base one, then put ``payload`` into the base's document.

    The documents are those ``MongoDBCheckpointStorage.save`` wrote for the same scope and keys
    (saved once into a scratch engine, then copied). The checksum is recomputed for the new
    bytes; the signature (if any) is kept, or dropped.
    """
    key = (options.tenant_id, options.application_id, options.session_id, options.signing_keys)
    documents = _TEMPLATES.get(key)
    if documents is None:
        engine = InMemoryMongoClient()
        scratch = engine["templates"]["checkpoints"]
        writer = MongoDBCheckpointStorage(scratch, options=options)
        await writer.save(good_checkpoint())
        await writer.save(base_checkpoint())
        documents = _TEMPLATES[key] = await scratch.find({}).to_list(None)
        await engine.close()
    await collection.insert_many([copy.deepcopy(document) for document in documents])
    storage = MongoDBCheckpointStorage(collection, options=options)
    if payload is not None or drop_signature:
        document_id = RunScope.from_options(options).checkpoint_document_id(BASE_ID)
        update: dict[str, Any] = {}
        if payload is not None:
            update["$set"] = {"checkpoint": payload, "payload_checksum": payload_checksum(payload)}
        if drop_signature:
            update["$unset"] = {"payload_signature": ""}
        result = await collection.update_one({"_id": document_id}, update)
        if result.matched_count != 1:
            raise AssertionError("the planted document was not found")
    return storage


async def run_operation(storage: MongoDBCheckpointStorage, name: str) -> object:
    if name == "load":
        return await storage.load(BASE_ID)
    if name == "get_latest":
        return await storage.get_latest(workflow_name=WORKFLOW)
    if name == "list_checkpoints":
        return await storage.list_checkpoints(workflow_name=WORKFLOW)
    if name == "list_checkpoint_ids":
        return await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
    if name == "list_checkpoint_page":
        return await storage.list_checkpoint_page(workflow_name=WORKFLOW)
    raise ValueError(name)


def hostile_checkpoint(operation: str, value: object) -> WorkflowCheckpoint | None:
    """The planted checkpoint inside an operation's result (``None`` for id listings)."""
    if operation in ("load", "get_latest"):
        assert isinstance(value, WorkflowCheckpoint)
        return value
    if operation == "list_checkpoints":
        assert isinstance(value, list)
        assert [item.checkpoint_id for item in value] == [GOOD_ID, BASE_ID]
        return value[-1]  # type: ignore[no-any-return]
    if operation == "list_checkpoint_page":
        checkpoints = value.checkpoints  # type: ignore[attr-defined]
        assert [item.checkpoint_id for item in checkpoints] == [GOOD_ID, BASE_ID]
        return checkpoints[-1]  # type: ignore[no-any-return]
    assert value == [GOOD_ID, BASE_ID]
    return None


class UnpickleRecorder:
    """Records every entry into the load path (codec decode, tree loader, unpickler, pickle),
    with the bytes it was handed."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.payloads: list[bytes] = []
        self.inflated: list[bytes] = []
        """Every chunk's stored bytes handed to zlib (the chunk decompressor)."""

    def saw(self, payload: bytes) -> bool:
        return payload in self.payloads

    @contextlib.contextmanager
    def installed(self) -> Iterator[UnpickleRecorder]:
        from agent_framework_mongodb.checkpoints import codec as codec_module
        from agent_framework_mongodb.checkpoints.codec import rebuild as rebuild_module

        calls, payloads = self.calls, self.payloads
        originals: list[tuple[object, str, object]] = []

        def patch(owner: object, name: str, replacement: object) -> None:
            originals.append((owner, name, getattr(owner, name)))
            setattr(owner, name, replacement)

        real_load_tree = rebuild_module.load_tree

        def load_tree(payload: bytes) -> object:
            calls.append("load_tree")
            payloads.append(bytes(payload))
            return real_load_tree(payload)

        real_decode = CheckpointCodec.decode

        def decode(codec: CheckpointCodec, payload: bytes, *, checksum: str) -> WorkflowCheckpoint:
            calls.append("CheckpointCodec.decode")
            payloads.append(bytes(payload))
            return real_decode(codec, payload, checksum=checksum)

        def recording(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                calls.append(name)
                if args and isinstance(args[0], (bytes, bytearray, memoryview)):
                    payloads.append(bytes(args[0]))
                return function(*args, **kwargs)

            return wrapper

        try:
            patch(codec_module, "load_tree", load_tree)
            patch(rebuild_module, "load_tree", load_tree)
            from agent_framework_mongodb.checkpoints.codec import chunks as chunks_module

            patch(chunks_module, "load_tree", load_tree)
            real_decompress = chunks_module._decompress
            inflated = self.inflated

            def decompress(data: bytes, budget: int) -> bytes:
                calls.append("zlib")
                inflated.append(bytes(data))
                return real_decompress(data, budget)

            patch(chunks_module, "_decompress", decompress)
            patch(CheckpointCodec, "decode", decode)
            closed = getattr(rebuild_module, "_ClosedUnpickler", None)
            if isinstance(closed, type):

                class RecordingUnpickler(closed):  # type: ignore[misc, valid-type]
                    def __init__(self, *args: Any, **kwargs: Any) -> None:
                        calls.append("_ClosedUnpickler")
                        getvalue = getattr(args[0], "getvalue", None) if args else None
                        if callable(getvalue):
                            payloads.append(bytes(getvalue()))
                        super().__init__(*args, **kwargs)

                patch(rebuild_module, "_ClosedUnpickler", RecordingUnpickler)
            for name in ("loads", "load", "Unpickler"):
                patch(pickle, name, recording(f"pickle.{name}", getattr(pickle, name)))
            yield self
        finally:
            for owner, name, original in reversed(originals):
                setattr(owner, name, original)


# -- isolated runs ----------------------------------------------------------------------------

ISOLATED_MEMORY_LIMIT: Final = 1 << 30


def _maxrss_mb() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def isolated_entry(name: str, cwd: str, memory_limit: int, send: Callable[[dict[str, object]], None]) -> None:
    """Child process: load one corpus entry every way, reporting each step through ``send``.

    Steps: a signed storage with the edited payload (signature kept), then with the signature
    dropped; then the codec alone; then an unsigned storage, operation by operation
    (``Entry.operations``). A step that kills the process reports nothing, so the parent knows
    where it died. Core dumps are off and the address space is limited to ``memory_limit``.
    """
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_limit:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    os.chdir(cwd)
    entry = BY_NAME[name]
    asyncio.run(_isolated(entry, Path(cwd), send))


def isolated_child(name: str, cwd: str, memory_limit: int, connection: Any) -> None:
    """:func:`isolated_entry` as a multiprocessing target, reporting through a pipe."""
    isolated_entry(name, cwd, memory_limit, connection.send)
    connection.close()


def _record(
    step: str, started: float, outcome: Outcome, problems: list[str], **extra: object
) -> dict[str, object]:
    record: dict[str, object] = {
        "step": step,
        "seconds": round(time.perf_counter() - started, 3),
        "maxrss_mb": _maxrss_mb(),
        "problems": problems,
        **extra,
    }
    if outcome.error is not None:
        record["outcome"], record["message"] = type(outcome.error).__name__, str(outcome.error)[:300]
    elif isinstance(outcome.value, EscapedError):
        record["outcome"], record["message"] = "escape", str(outcome.value)[:300]
    elif isinstance(outcome.value, WorkflowCheckpoint):
        record["outcome"], record["message"] = "checkpoint", ""
    else:
        record["outcome"], record["message"] = type(outcome.value).__name__, ""
    return record


async def _isolated(entry: Entry, root: Path, send: Callable[[dict[str, object]], None]) -> None:
    payload, allowed = entry.payload, entry.allowed
    client = InMemoryMongoClient()
    collection = client["hostile"]["checkpoints"]
    for variant, drop in (("signed-edited", False), ("signed-unsigned", True)):
        options = storage_options(allowed=allowed, signing_keys=[os.urandom(32)], session_id=variant)
        storage = await plant(collection, options, payload, drop_signature=drop)
        recorder = UnpickleRecorder()
        for operation in DECODING_OPERATIONS:
            started = time.perf_counter()
            with recorder.installed(), Guard(root) as guard:
                outcome = await _safe(functools.partial(run_operation, storage, operation))
            send(
                _record(
                    f"{variant}:{operation}",
                    started,
                    outcome,
                    guard.problems,
                    unpickled=recorder.saw(payload),
                )
            )
    started = time.perf_counter()
    codec = CheckpointCodec(allowed)
    with Guard(root, entry.markers) as guard:
        outcome = await _safe(functools.partial(_decode_async, codec, payload))
    send(_record("codec", started, outcome, guard.problems))
    del outcome
    storage = await plant(collection, storage_options(allowed=allowed, session_id="unsigned"), payload)
    for operation in entry.operations:
        started = time.perf_counter()
        with Guard(root, entry.markers) as guard:
            outcome = await _safe(functools.partial(run_operation, storage, operation))
        send(_record(f"unsigned:{operation}", started, outcome, guard.problems))
        del outcome
    await client.close()


async def _decode_async(codec: CheckpointCodec, payload: bytes) -> object:
    return codec.decode(payload, checksum=payload_checksum(payload))


async def _safe(load: Callable[[], Any]) -> Outcome:
    try:
        return await attempt_async(load)
    except EscapedError as error:
        return Outcome(value=error)


# -- the fuzz: generators and the judge -------------------------------------------------------

CLASS_NAMES: Final = (
    MESSAGE,
    CONTENT,
    RUN_STATE,
    PARSED_URI,
    CHECKPOINT_CLASS,
    "agent_framework._types:UsageDetails",
    "agent_framework.exceptions:WorkflowCheckpointException",
    "builtins:int",
    "builtins:str",
    "datetime:datetime",
    "pathlib:PurePosixPath",
    "decimal:Decimal",
    "zoneinfo:ZoneInfo",
    "os:system",
    "subprocess:Popen",
    "builtins:eval",
    "builtins:type",
    "builtins:object",
    "collections:OrderedDict",
    "abc:ABCMeta",
    "bson.objectid:ObjectId",
    _key(HookedVictim),
    _key(HookedColor),
    _key(MetaVictim),
    _key(ListVictim),
    _key(HookedMeta),
    "benchmarks.fuzz_decoder:FuzzStats",
    "agent_framework._workflows._viz:WorkflowViz",
    "agent_framework:Message",
    "agent_framework._types:Message.__init__",
    "tabnanny:NannyNag",
    "",
    "os.path:join",
    "a:b:c",
)
TRICKY_CLASS_NAMES: Final = (
    CONTENT,
    "agent_framework._workflows._edge_runner:EdgeRunner",
    _key(AbstractVictim),
    _key(TrackedPair),
)
"""Names that reproduced bugs this corpus found (an abstract class, a named tuple with a finalizer)
or name the documented state-hook residual."""
GLOBALS: Final = (
    ("os", "system"),
    ("posix", "system"),
    ("subprocess", "Popen"),
    ("builtins", "eval"),
    ("builtins", "exec"),
    ("builtins", "getattr"),
    ("builtins", "open"),
    ("builtins", "__import__"),
    ("importlib", "import_module"),
    ("functools", "partial"),
    ("copyreg", "_reconstructor"),
    (MODULE, "trip"),
    (MODULE, "HookedVictim"),
    ("agent_framework._types", "Message"),
    ("agent_framework._workflows._events", "WorkflowRunState"),
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "object"),
    ("benchmarks.fuzz_decoder", "main"),
    ("sys", "exit"),
)
TAGS: Final = tuple("tmSZaDHWRzkMUpecno")
_FUZZ_MARKER: Final = "marker-fuzz"


def fuzz_codec() -> CheckpointCodec:
    return CheckpointCodec(ALLOWED_VICTIMS)


@contextlib.contextmanager
def address_space_headroom(headroom: int = 2 << 30) -> Iterator[None]:
    """Lower the soft RLIMIT_AS to this process's size plus ``headroom`` (Linux), restore it after.

    A mutated payload can declare a memo index or a length worth gigabytes; inside the limit the
    allocation fails with MemoryError instead of exhausting the machine.
    """
    import resource

    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pages = 0
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = pages * os.sysconf("SC_PAGE_SIZE") + headroom
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if pages:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        if pages:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _names() -> st.SearchStrategy[str]:
    return st.sampled_from(CLASS_NAMES + TRICKY_CLASS_NAMES) | st.text(max_size=12)


_SMALL_INTS: Final = st.integers(-3, 3000) | st.integers()


def _scalar_ops() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from([NONE, pickle.NEWTRUE, pickle.NEWFALSE, EMPTY_TUPLE, EMPTY_LIST, EMPTY_DICT]),
        st.integers().map(integer),
        st.integers(-(10**12), 10**12).map(lambda n: pickle.INT + str(n).encode() + b"\n"),
        st.floats().map(lambda f: pickle.BINFLOAT + struct.pack(">d", f)),
        st.text(max_size=12).map(text),
        st.sampled_from((*TAGS, "o", "?", "", "state", "x", MESSAGE, RUN_STATE, "IDLE", "os:system")).map(
            text
        ),
        st.binary(max_size=17).map(raw_bytes),
        st.binary(max_size=4).map(lambda b: pickle.BYTEARRAY8 + struct.pack("<Q", len(b)) + b),
        st.binary(max_size=4).map(lambda b: pickle.SHORT_BINSTRING + bytes([len(b)]) + b),
    )


def _atoms(limit: int) -> st.SearchStrategy[bytes]:
    """Single opcodes with valid (or nearly valid) argument encodings."""
    index = st.integers(0, 16) | st.integers(0, limit)
    return st.one_of(
        _scalar_ops(),
        st.sampled_from(
            [
                MARK,
                TUPLE,
                TUPLE1,
                pickle.TUPLE2,
                pickle.TUPLE3,
                pickle.LIST,
                pickle.DICT,
                APPEND,
                APPENDS,
                SETITEM,
                SETITEMS,
                ADDITEMS,
                FROZENSET,
                POP,
                pickle.POP_MARK,
                pickle.DUP,
                REDUCE,
                BUILD,
                NEWOBJ,
                NEWOBJ_EX,
                STACK_GLOBAL,
                MEMOIZE,
                pickle.NEXT_BUFFER,
                pickle.READONLY_BUFFER,
                pickle.OBJ,
                STOP,
                pickle.BINPERSID,
                EMPTY_SET,
            ]
        ),
        index.map(lambda i: pickle.BINPUT + bytes([i % 256])),
        index.map(lambda i: pickle.BINGET + bytes([i % 256])),
        index.map(lambda i: pickle.LONG_BINPUT + struct.pack("<I", i)),
        (index | st.integers(0, 2**32 - 1)).map(lambda i: pickle.LONG_BINGET + struct.pack("<I", i)),
        index.map(lambda i: pickle.PUT + str(i).encode() + b"\n"),
        index.map(lambda i: pickle.GET + str(i).encode() + b"\n"),
        st.sampled_from(GLOBALS).map(lambda g: glob(*g)),
        st.sampled_from(GLOBALS).map(lambda g: stack_glob(*g)),
        st.sampled_from(GLOBALS).map(lambda g: pickle.INST + utf8(g[0]) + b"\n" + utf8(g[1]) + b"\n"),
        st.text(max_size=6).map(lambda s: pickle.PERSID + s.encode("ascii", "replace") + b"\n"),
        st.integers(0, 255).map(lambda c: pickle.EXT1 + bytes([c])),
        st.integers(0, 2**16 - 1).map(lambda c: pickle.EXT2 + struct.pack("<H", c)),
        st.integers(0, 2**31 - 1).map(lambda c: pickle.EXT4 + struct.pack("<i", c)),
        (st.integers(0, 64) | st.just(2**62)).map(lambda n: pickle.FRAME + struct.pack("<Q", n)),
        st.integers(0, 6).map(lambda p: pickle.PROTO + bytes([p])),
        st.sampled_from([pickle.BINUNICODE8, pickle.BINBYTES8, pickle.BYTEARRAY8]).flatmap(
            lambda op: (st.integers(0, 64) | st.just(2**62)).map(lambda n: op + struct.pack("<Q", n))
        ),
    )


def _value_programs() -> st.SearchStrategy[bytes]:
    """Opcode programs that each push one value: containers, records, calls and BUILDs."""
    names = _names().map(text)

    def extend(children: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
        return st.one_of(
            st.lists(children, max_size=4).map(
                lambda xs: EMPTY_LIST + (MARK + b"".join(xs) + APPENDS if xs else b"")
            ),
            st.lists(children, max_size=4).map(lambda xs: MARK + b"".join(xs) + TUPLE),
            st.lists(st.tuples(st.text(max_size=4).map(text) | children, children), max_size=3).map(dct),
            st.lists(children, max_size=3).map(lambda xs: EMPTY_SET + MARK + b"".join(xs) + ADDITEMS),
            st.lists(children, max_size=3).map(lambda xs: MARK + b"".join(xs) + FROZENSET),
            st.tuples(st.sampled_from(GLOBALS), st.lists(children, max_size=2)).map(
                lambda gx: call(glob(*gx[0]), *gx[1])
            ),
            st.tuples(st.sampled_from(GLOBALS), children).map(lambda gx: stack_glob(*gx[0]) + gx[1] + BUILD),
            st.tuples(children, children).map(lambda xy: xy[0] + xy[1] + BUILD),
            children.map(lambda x: x + pickle.DUP + pickle.TUPLE2),
            children.map(
                lambda x: x + MEMOIZE + POP + MARK + pickle.GET + b"0\n" + pickle.GET + b"0\n" + TUPLE
            ),
            st.tuples(st.sampled_from(TAGS), st.lists(names | children, max_size=4)).map(
                lambda tx: MARK + text(tx[0]) + b"".join(tx[1]) + TUPLE
            ),
        )

    return st.recursive(_scalar_ops(), extend, max_leaves=16)


def opcode_streams(*, memo_limit: int = 4096) -> st.SearchStrategy[bytes]:
    """Random opcode streams from a grammar: free opcode sequences, and whole checkpoints whose
    state is a random value program (so payloads reach the rebuild)."""
    free = st.tuples(
        st.sampled_from([PROTO, PROTO, b"", b"\x80\x02", b"\x80\x04"]),
        st.lists(_atoms(memo_limit) | _value_programs(), max_size=24),
        st.sampled_from([STOP, STOP, STOP, b"", STOP + b"\x00"]),
    ).map(lambda parts: parts[0] + b"".join(parts[1]) + parts[2])
    shaped = _value_programs().map(checkpoint_program)
    return st.one_of(free, shaped, shaped)


def _records(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    names = _names()
    ints = _SMALL_INTS
    zones = st.tuples(st.just("z"), ints, ints, ints, st.none() | st.text(max_size=4)) | st.tuples(
        st.just("k"), st.sampled_from(["UTC", "Europe/Paris", "../x", "Nowhere/Land", "America", ""])
    )
    zone = st.none() | zones
    state = st.none() | st.dictionaries(st.text(max_size=6), children, max_size=3)
    return st.one_of(
        st.lists(children, max_size=3).map(lambda xs: ("t", *xs)),
        st.lists(st.tuples(children, children), max_size=3).map(
            lambda kv: ("m", *[x for pair in kv for x in pair])
        ),
        st.lists(children, max_size=3).map(lambda xs: ("S", *xs)),
        st.lists(children, max_size=3).map(lambda xs: ("Z", *xs)),
        st.tuples(st.just("a"), st.binary(max_size=4) | children),
        st.tuples(st.just("D"), ints, ints, ints),
        st.tuples(st.just("H"), ints, ints, ints, ints, ints, zone),
        st.tuples(st.just("W"), ints, ints, ints, ints, ints, ints, ints, ints, zone),
        st.tuples(st.just("R"), ints, ints, ints),
        zones,
        st.tuples(
            st.just("M"),
            st.sampled_from(["1.5", "NaN", "-0", "1e99999", " 2 ", "x", "1_0"]) | st.text(max_size=5),
        ),
        st.tuples(st.just("U"), st.binary(min_size=15, max_size=17)),
        st.tuples(
            st.just("p"),
            st.sampled_from(["PosixPath", "PurePosixPath", "PureWindowsPath", "WindowsPath", "Path"]),
            st.text(max_size=8),
        ),
        st.tuples(
            st.just("e"),
            names,
            st.sampled_from(["IDLE", "RED", "ALIAS", "NOPE", "__class__"]) | st.text(max_size=4),
        ),
        st.tuples(st.just("c"), names),
        st.tuples(st.just("n"), names, st.lists(children, max_size=3)).map(lambda t: ("n", t[1], *t[2])),
        st.tuples(st.just("o"), names, state, state),
        st.tuples(st.sampled_from(TAGS) | st.text(max_size=2), st.lists(children | names, max_size=4)).map(
            lambda t: (t[0], *t[1])
        ),
    )


def _leaves() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=8),
        st.binary(max_size=8),
        st.sampled_from([bytearray(b"x"), complex(1, 2), frozenset({1}), (), (1, 2), {3}]),
    )


def trees() -> st.SearchStrategy[Any]:
    keys = st.text(max_size=6) | st.integers() | st.none() | st.tuples(st.just("t"), st.integers())
    return st.recursive(
        _leaves(),
        lambda kids: st.one_of(
            st.lists(kids, max_size=3),
            st.dictionaries(st.text(max_size=6), kids, max_size=3),
            st.dictionaries(keys, kids, max_size=2),
            _records(kids),
        ),
        max_leaves=20,
    )


def _leaf_values() -> st.SearchStrategy[Any]:
    import datetime as dt
    import decimal
    import pathlib
    import zoneinfo

    from agent_framework._workflows._events import WorkflowRunState

    zones = (
        st.none() | st.just(dt.timezone.utc) | st.sampled_from(["UTC", "Europe/Paris"]).map(zoneinfo.ZoneInfo)
    )
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
        st.binary(max_size=6),
        st.dates(),
        st.times(),
        st.datetimes(timezones=zones),
        st.timedeltas(),
        st.decimals(allow_nan=False, allow_infinity=False).map(decimal.Decimal),
        st.uuids(),
        st.text(max_size=6).map(pathlib.PurePosixPath),
        st.sampled_from(list(WorkflowRunState)),
        st.sampled_from(list(HookedColor)),
        st.sampled_from([Message, HookedVictim, int, pathlib.PurePath]),
        st.builds(
            lambda role, text: Message(role=role, contents=[text]),
            st.sampled_from(["user", "assistant"]),
            st.text(max_size=6),
        ),
        st.builds(TrackedPair, st.integers(), st.integers()),
    )


def _victim(attributes: dict[str, Any]) -> HookedVictim:
    victim = object.__new__(HookedVictim)
    vars(victim).update(attributes)
    return victim


def _valid_values() -> st.SearchStrategy[Any]:
    hashable = st.integers() | st.text(max_size=4) | st.sampled_from(list(HookedColor))
    return st.recursive(
        _leaf_values(),
        lambda kids: st.one_of(
            st.lists(kids, max_size=3),
            st.lists(kids, max_size=3).map(tuple),
            st.dictionaries(st.text(max_size=4), kids, max_size=3),
            st.dictionaries(hashable, kids, min_size=1, max_size=3),
            st.frozensets(hashable, max_size=3),
            st.sets(hashable | st.builds(TrackedPair, st.integers(), st.integers()), max_size=3),
            st.dictionaries(st.text(min_size=1, max_size=4), kids, max_size=2).map(_victim),
        ),
        max_leaves=12,
    )


def _swap_names(node: Any, names: list[str]) -> Any:
    """The tree with the class names of its records replaced, in order, by ``names``."""
    if type(node) is list:
        return [_swap_names(item, names) for item in node]
    if type(node) is dict:
        return {key: _swap_names(item, names) for key, item in node.items()}
    if type(node) is tuple and node and node[0] in ("o", "e", "n", "c") and len(node) > 1:
        name = names.pop() if names else node[1]
        return (node[0], name, *(_swap_names(item, names) for item in node[2:]))
    if type(node) is tuple:
        return tuple(_swap_names(item, names) for item in node)
    return node


_ENCODER: Final[list[CheckpointCodec]] = []


def valid_tree_payloads() -> st.SearchStrategy[bytes]:
    """Trees a save really writes (values through the encoder), with some records' class names
    swapped for others from the pool: payloads that pass phase one and reach phase two."""
    if not _ENCODER:
        _ENCODER.append(fuzz_codec())

    def build(choice: tuple[Any, list[str]]) -> bytes:
        value, names = choice
        try:
            payload = _ENCODER[0].encode(base_checkpoint({"x": value})).payload
        except MongoDBMappingError:
            payload = _BASE_PAYLOAD
        HOOK_CALLS.clear()
        return tree_payload(_swap_names(pickle.loads(payload), list(names)))

    swaps = st.lists(
        st.sampled_from(CLASS_NAMES + TRICKY_CLASS_NAMES) | st.sampled_from(_SAFE_SWAPS), max_size=3
    )
    return st.tuples(_valid_values(), swaps).map(build)


_SAFE_SWAPS: Final = (MESSAGE, RUN_STATE, PARSED_URI, _key(HookedVictim), _key(HookedColor), "builtins:int")


def tree_payloads() -> st.SearchStrategy[bytes]:
    """Valid pickles of trees: random trees with random records, and trees a save writes with
    swapped class names."""
    return st.one_of(_random_tree_payloads(), valid_tree_payloads())


def _random_tree_payloads() -> st.SearchStrategy[bytes]:
    """Pickles of random trees with random (often hostile) records, mostly inside a checkpoint."""
    fields = st.sampled_from(sorted(base_tree()))

    def placed(choice: tuple[int, Any, str, Any]) -> bytes:
        where, tree, field_name, shared = choice
        if where == 0:
            return tree_payload(tree)
        if where == 1:
            return with_state({"x": tree, "y": shared, "z": shared})
        if where == 2:
            return with_state(tree)
        top = base_tree()
        top[field_name] = tree
        return tree_payload(top)

    tree = trees()
    return st.tuples(st.integers(0, 3), tree, fields, tree).map(placed)


def _pool() -> tuple[bytes, ...]:
    import datetime as dt
    import decimal
    import pathlib
    import uuid
    import zoneinfo

    from agent_framework._workflows._events import WorkflowRunState

    codec = fuzz_codec()
    states: list[dict[str, Any]] = [
        {"step": 1},
        {"greeting": Message(role="user", contents=["hi"]), "numbers": [1, 2, 3], "nested": {"ok": True}},
        {
            "t": (1, "a"),
            "s": {1, 2},
            "f": frozenset({"x"}),
            "m": {1: "x", (2, 3): "y"},
            "b": b"\x00",
            "ba": bytearray(b"z"),
        },
        {
            "when": dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
            "day": dt.date(2020, 2, 29),
            "at": dt.time(1, 2, fold=1),
            "dur": dt.timedelta(days=-1, seconds=5),
            "tz": dt.timezone(dt.timedelta(hours=2), "X"),
            "d": decimal.Decimal("-1.50"),
            "u": uuid.UUID(int=5),
            "p": pathlib.PurePosixPath("/a/b"),
        },
        {
            "state": WorkflowRunState.IDLE,
            "color": HookedColor.RED,
            "cls": Message,
            "victim": HookedVictim.__new__(HookedVictim),
        },
    ]
    HOOK_CALLS.clear()
    return tuple(codec.encode(base_checkpoint(state)).payload for state in states)


POOL: Final = _pool()


def _mutate(payload: bytes, steps: Sequence[tuple[int, int, int, bytes]]) -> bytes:
    data = bytearray(payload)
    for kind, position, size, insert in steps:
        if not data:
            data = bytearray(insert)
            continue
        at = position % len(data)
        if kind == 0:
            data[at] ^= 1 << (size % 8)
        elif kind == 1:
            data[at] = size % 256
        elif kind == 2:
            data[at:at] = insert
        elif kind == 3:
            del data[at : at + 1 + size % 16]
        elif kind == 4:
            data[at:at] = data[at : at + 1 + size % 32]
        elif kind == 5:
            other = POOL[size % len(POOL)]
            data = data[:at] + other[position % len(other) :]
        else:
            del data[at:]
    return bytes(data)


def mutated_payloads(*, memo_limit: int = 4096) -> st.SearchStrategy[bytes]:
    """Real encoded payloads with bit flips, byte writes, inserted opcodes, deletions,
    duplications, splices and truncations."""
    step = st.tuples(
        st.integers(0, 6),
        st.integers(0, 2**16),
        st.integers(0, 255),
        _atoms(memo_limit) | st.binary(max_size=4),
    )
    return st.tuples(st.sampled_from(POOL), st.lists(step, min_size=1, max_size=4)).map(
        lambda ps: _mutate(*ps)
    )


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A fuzz example's result: ``outcome`` is ``"checkpoint"``, a package error's class name,
    or ``"escape:<type>"``; ``problems`` lists side effects and contract breaks."""

    outcome: str
    message: str
    problems: tuple[str, ...]


def judge(payload: bytes, codec: CheckpointCodec, root: Path, *, reencode: bool = True) -> Verdict:
    """Decode ``payload`` under a :class:`Guard`; a restored checkpoint must save again."""
    result: object = None
    with Guard(root, (_FUZZ_MARKER,)) as guard:
        try:
            result = codec.decode(payload, checksum=payload_checksum(payload))
            register_result(result)
            outcome, message = "checkpoint", ""
        except MongoDBMappingError as error:
            outcome, message = type(error).__name__, str(error)
        except BaseException as error:
            outcome, message = f"escape:{type(error).__module__}.{type(error).__qualname__}", str(error)[:300]
    problems = list(guard.problems)
    if outcome == "checkpoint":
        if not isinstance(result, WorkflowCheckpoint):
            problems.append(f"decode returned a {type(result).__name__}")
        elif reencode:
            try:
                codec.encode(result)
            except MongoDBMappingError as error:
                problems.append(f"accepted, but a save of the result raises {type(error).__name__}: {error}")
            except BaseException as error:
                problems.append(f"accepted, but a save of the result raises {type(error).__name__}")
    HOOK_CALLS.clear()
    del result
    return Verdict(outcome, message, tuple(problems))


def known_bug(verdict: Verdict) -> str | None:
    """The documented residual a failing verdict reproduces, or ``None`` for a new finding.

    Only one: a framework object its own ``__getstate__`` rejects loads, and its next save fails
    (``specs/codec.md``). BUG-3 and BUG-4 (an abstract class; named tuples built in phase one),
    found by this corpus, are fixed, so what used to reproduce them is a finding again.
    """
    if verdict.problems and all(
        "a save of the result raises MongoDBSerializationError: Reading checkpoint state" in problem
        for problem in verdict.problems
    ):
        return "RESIDUAL-state-hook"
    return None


def failed(verdict: Verdict) -> bool:
    return verdict.outcome.startswith("escape:") or bool(verdict.problems)
