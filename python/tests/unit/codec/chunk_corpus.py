"""Hostile chunked checkpoints (issue 13), planted straight into the engine, and the chunk fuzz.

An attacker with write access to the collection can compute any chunk address of any run: the
context (``RunScope.chunk_context``) derives from public scope fields. So every entry here forges
leaves with *correct* addresses unless it attacks the address check itself, and the load must
still refuse them with a package error, or restore a checkpoint a save accepts again, and change
nothing (``hostile_corpus.Guard``).

The base every entry starts from is a real chunked checkpoint (``BASE_ID``, after a small
``GOOD_ID``), saved once per signing setting into a scratch engine and copied. An entry is a
function of a :class:`Forge`: it may rewrite the base's root (its payload, ``payload_format``,
``nested_chunks``), add chunk documents of any shape, and drop real ones.

``test_hostile_chunks.py`` runs every entry through the storage's four decoding reads, without
and with signing keys; ``benchmarks/fuzz_chunks.py`` and the hypothesis test there run
:func:`mutations` against the same base.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import hashlib
import pickle
import struct
import zlib
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final, Literal

from agent_framework import WorkflowCheckpoint
from bson.binary import Binary
from hypothesis import strategies as st

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.codec import (
    CHUNKED_PAYLOAD_FORMAT,
    PAYLOAD_FORMAT,
    CheckpointCodec,
    canonical_hash,
    payload_checksum,
)
from agent_framework_mongodb.checkpoints.scope import CHUNK_KIND, RunScope
from agent_framework_mongodb.errors import (
    MongoDBCheckpointNotFoundError,
    MongoDBConcurrencyError,
    MongoDBMappingError,
)
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient
from tests.unit.codec import hostile_corpus as corpus
from tests.unit.codec.hostile_corpus import BASE_ID

_FUZZ_MARKER: Final = "marker-fuzz"

__all__ = [
    "CAP",
    "CHUNK_CORPUS",
    "KEY",
    "Base",
    "ChunkEntry",
    "Forge",
    "apply_plant",
    "base_checkpoint",
    "judge_fork",
    "judge_mutation",
    "load_base",
    "mutations",
    "options",
]

CAP: Final = 1 << 20
"""``max_checkpoint_bytes`` of every storage here (the smallest allowed): bombs and budgets are
reached in milliseconds, and the base checkpoint fits it."""
KEY: Final = b"hostile-chunks-signing-key-32byt"
U32: Final = struct.Struct(">I")
ADDRESS_BYTES: Final = 32
MISSING: Final[Any] = object()
"""A chunk document field given this value is left out."""


def options(*, signed: bool, session_id: str = "session-chunks", tenant_id: str = "tenant-alpha") -> Any:
    base = corpus.storage_options(
        signing_keys=[KEY] if signed else [], session_id=session_id, tenant_id=tenant_id
    )
    replaced: MongoDBCheckpointStorageOptions = dataclasses.replace(base, max_checkpoint_bytes=CAP)
    return replaced


def base_state() -> dict[str, Any]:
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    history = [
        {
            "role": "user" if n % 2 else "assistant",
            "text": " ".join(words[(n + k) % 8] for k in range(30)),
            "n": n,
        }
        for n in range(220)
    ]
    return {
        "history": history,
        # A large list inside a split list: its leaves are referenced only from other leaves, so
        # the root carries a nested_chunks hint.
        "nested": [[f"inner item {m}" for m in range(2500)], *(f"outer item {n}" for n in range(1500))],
        "blob": bytes(range(256)) * 90,
        "text": "long text é " * 2500,
        "step": 1,
    }


def base_checkpoint() -> Any:
    return corpus.base_checkpoint(base_state())


def pk(value: object) -> bytes:
    return pickle.dumps(value, protocol=5)


def frame(pickles: Sequence[bytes]) -> bytes:
    """A list or dict leaf's body: one pickle of the list of these elements, each element's opcodes
    spliced as written between MARK and APPENDS (its PROTO and one leading FRAME dropped, and its
    final STOP), so a hostile element reaches the unpickler exactly as crafted."""
    return b"".join([b"\x80\x05](", *(_opcodes(encoded) for encoded in pickles), b"e."])


def _opcodes(encoded: bytes) -> bytes:
    if encoded[:1] == b"\x80":
        encoded = encoded[2:]
    if encoded[:1] == b"\x95":  # FRAME and its 8-byte length
        encoded = encoded[9:]
    return encoded[:-1] if encoded.endswith(b".") else encoded


def ref(kind: str, addresses: list[bytes]) -> tuple[str, str, list[bytes]]:
    return ("@", kind, addresses)


@dataclasses.dataclass(frozen=True)
class Base:
    """The planted run: its scope, the real root document and chunk documents."""

    scope: RunScope
    documents: tuple[dict[str, Any], ...]

    @property
    def context(self) -> bytes:
        return self.scope.chunk_context(CHUNKED_PAYLOAD_FORMAT)

    @property
    def root_document(self) -> dict[str, Any]:
        return next(doc for doc in self.documents if doc.get("checkpoint_id") == BASE_ID)

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [doc for doc in self.documents if doc.get("_kind") == CHUNK_KIND]

    def root_tree(self) -> dict[str, Any]:
        tree: dict[str, Any] = pickle.loads(bytes(self.root_document["checkpoint"]))
        return tree

    def address(self, data: bytes) -> bytes:
        context = self.context
        return hashlib.sha256(U32.pack(len(context)) + context + data).digest()


@dataclasses.dataclass
class Plant:
    """What an entry changes in the planted run."""

    root: bytes | None = None
    set_fields: dict[str, Any] = dataclasses.field(default_factory=dict)
    unset: list[str] = dataclasses.field(default_factory=list)
    chunks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    drop: list[Any] = dataclasses.field(default_factory=list)

    @property
    def touches_root(self) -> bool:
        return self.root is not None or bool(self.set_fields) or bool(self.unset)


class Forge:
    """Builds one entry's plant: leaves with correct addresses, a new root around a state."""

    def __init__(self, base: Base) -> None:
        self.base = base
        self.plant = Plant()
        self.forged: list[bytes] = []

    def chunk_document(self, address: object, data: object, **fields: Any) -> dict[str, Any]:
        document: dict[str, Any] = {
            "_id": address,
            "_kind": CHUNK_KIND,
            **self.base.scope.fields(),
            "data": data,
            "touched_at": datetime(2025, 1, 1, tzinfo=timezone.utc),
            "expires_at": datetime(9999, 12, 31, tzinfo=timezone.utc),
        }
        document.update(fields)
        return {key: value for key, value in document.items() if value is not MISSING}

    def data(self, data: bytes, **fields: Any) -> bytes:
        """Store ``data`` (already compressed) as a chunk at its correct address."""
        address = self.base.address(data)
        self.plant.chunks.append(self.chunk_document(address, data, **fields))
        self.forged.append(address)
        return address

    def leaf(self, kind: str | bytes, body: bytes, **fields: Any) -> bytes:
        prefix = kind.encode("ascii") if isinstance(kind, str) else kind
        return self.data(zlib.compress(prefix + body), **fields)

    def elements(self, pickles: Sequence[bytes], kind: str = "l") -> bytes:
        return self.leaf(kind, frame(pickles))

    def state(self, state: object, *, hint: bool = True) -> None:
        """Make the root the base's tree with ``state`` (which may reference forged leaves);
        with ``hint``, every forged leaf the root does not name directly is in nested_chunks."""
        tree = self.base.root_tree()
        tree["state"] = state
        self.root(pk(tree), hint=hint)

    def root(
        self, payload: bytes, *, hint: bool = True, payload_format: str = CHUNKED_PAYLOAD_FORMAT
    ) -> None:
        self.plant.root = payload
        self.plant.set_fields["payload_format"] = payload_format
        direct = payload
        nested = [address for address in dict.fromkeys(self.forged) if address not in direct]
        if hint and nested:
            self.plant.set_fields["nested_chunks"] = b"".join(nested)
        elif "nested_chunks" in self.base.root_document:
            self.plant.unset.append("nested_chunks")


Expect = Literal["refused", "either"]


@dataclasses.dataclass(frozen=True)
class ChunkEntry:
    """One hostile chunked checkpoint and what a load of it must do.

    Attributes:
        expect: ``"refused"`` (a mapping error on every read) or ``"either"`` (also a checkpoint a
            save accepts again).
        match: A fragment the refusal's message must contain (the right refusal, not any).
        executes: The entry tries to run code (os.system, exec, exit, imports): the isolated
            child runs these too.
        isolate: Would end the test process if it ran (os._exit): only the child loads it.
        markers: Files the payload tries to create.
        state: The state a correct load restores, when known.
        needs_chunks: The entry uses the base's real chunk documents (others are planted without
            them: an engine scan of a hundred large documents per read is most of a test's time).
        reads: The reads tried (the emulator scans a 200k-address ``$in`` slowly: ``load`` only).
    """

    name: str
    build: Callable[[Forge], None]
    expect: Expect = "refused"
    match: str | None = None
    executes: bool = False
    isolate: bool = False
    markers: tuple[str, ...] = ()
    state: Any = corpus.NO_STATE
    needs_chunks: bool = False
    reads: tuple[str, ...] = corpus.DECODING_OPERATIONS


# -- templates and planting ------------------------------------------------------------------

_TEMPLATES: dict[tuple[object, ...], tuple[dict[str, Any], ...]] = {}


async def _template(opts: Any) -> tuple[dict[str, Any], ...]:
    key = (opts.tenant_id, opts.session_id, opts.signing_keys)
    documents = _TEMPLATES.get(key)
    if documents is None:
        engine = InMemoryMongoClient()
        scratch = engine["templates"]["checkpoints"]
        writer = MongoDBCheckpointStorage(scratch, options=opts)
        await writer.save(corpus.good_checkpoint())
        await writer.save(base_checkpoint())
        documents = _TEMPLATES[key] = tuple(await scratch.find({}).to_list(None))
        await engine.close()
        root = next(doc for doc in documents if doc.get("checkpoint_id") == BASE_ID)
        if root["payload_format"] != CHUNKED_PAYLOAD_FORMAT or "nested_chunks" not in root:
            raise AssertionError("the base checkpoint must be chunked with a nested hint")
    return documents


async def load_base(collection: InMemoryCollection, opts: Any, *, with_chunks: bool = True) -> Base:
    """Copy the template run into ``collection`` (its chunks only ``with_chunks``); return it."""
    documents = await _template(opts)
    planted = [doc for doc in documents if with_chunks or doc.get("_kind") != CHUNK_KIND]
    await collection.insert_many([copy.deepcopy(document) for document in planted])
    return Base(RunScope.from_options(opts), tuple(copy.deepcopy(document) for document in documents))


async def apply_plant(collection: InMemoryCollection, base: Base, plant: Plant) -> None:
    if plant.touches_root:
        update: dict[str, Any] = {}
        fields = dict(plant.set_fields)
        if plant.root is not None:
            fields.update(checkpoint=plant.root, payload_checksum=payload_checksum(plant.root))
        if fields:
            update["$set"] = fields
        if plant.unset:
            update["$unset"] = dict.fromkeys(plant.unset, "")
        result = await collection.update_one({"_id": base.root_document["_id"]}, update)
        if result.matched_count != 1:
            raise AssertionError("the base root was not found")
    for address in plant.drop:
        await collection.delete_one({"_id": address, "_kind": CHUNK_KIND})
    unique: dict[object, dict[str, Any]] = {}
    for document in plant.chunks:
        key = document["_id"]
        unique[(type(key).__name__, repr(key))] = document
    for document in unique.values():
        await collection.delete_one({"_id": document["_id"]})
    if unique:
        await collection.insert_many(list(unique.values()))


# -- the corpus ------------------------------------------------------------------------------


def _ops(payload: bytes) -> bytes:
    """A whole program's opcodes without PROTO and STOP, to embed inside another pickle."""
    body = payload[2:] if payload[:1] == pickle.PROTO else payload
    return body[:-1] if body.endswith(pickle.STOP) else body


def _in_list(ops: bytes) -> bytes:
    """An element pickle: a list holding what ``ops`` push (a reference-like list entry)."""
    return corpus.PROTO + corpus.EMPTY_LIST + corpus.MARK + ops + corpus.APPENDS + corpus.STOP


def _dict_entry(ops: bytes) -> bytes:
    """A dict leaf's entry pickle ``["x", <what ops push>]``."""
    return (
        corpus.PROTO + corpus.EMPTY_LIST + corpus.MARK + corpus.text("x") + ops + corpus.APPENDS + corpus.STOP
    )


def _element(payload: bytes, *, kind: str = "l", wrap: bool = False) -> Callable[[Forge], None]:
    def build(forge: Forge) -> None:
        if kind == "d":
            element = _dict_entry(_ops(payload))
        elif wrap:
            element = _in_list(_ops(payload))
        else:
            element = payload
        good = pk({"role": "user", "text": "fine"})
        address = forge.elements([good, element, good], kind)
        forge.state({"x": ref(kind, [address])})

    return build


def _whole_leaf(body: bytes) -> Callable[[Forge], None]:
    def build(forge: Forge) -> None:
        address = forge.leaf("l", body)
        forge.state({"x": ref("l", [address])})

    return build


_EXEC_TARGETS: Final = (
    ("os-system", "os", "system", "touch marker-chunk-os-system; echo PWNED-os-system"),
    ("posix-system", "posix", "system", "touch marker-chunk-posix-system"),
    (
        "exec",
        "builtins",
        "exec",
        "print('PWNED-exec'); import tabnanny; open('marker-chunk-exec', 'w').close()",
    ),
    ("import", "importlib", "import_module", "tests.unit.codec.marker_import"),
    ("sys-exit", "sys", "exit", "PWNED-sys-exit"),
)


def _exec_entries() -> list[ChunkEntry]:
    """Every global-resolving (and calling) opcode in a leaf element, aimed at visible effects."""
    entries: list[ChunkEntry] = []
    for label, module, name, argument in _EXEC_TARGETS:
        arg = corpus.val(argument)
        shapes = {
            "global-reduce": corpus.program(corpus.call(corpus.glob(module, name), arg)),
            "stack-global-reduce": corpus.program(corpus.call(corpus.stack_glob(module, name), arg)),
            "inst": corpus.program(corpus.MARK + arg + pickle.INST + f"{module}\n{name}\n".encode()),
            "obj": corpus.program(corpus.MARK + corpus.glob(module, name) + arg + pickle.OBJ),
            "newobj": corpus.program(corpus.glob(module, name) + corpus.tup(arg) + corpus.NEWOBJ),
            "newobj-ex": corpus.program(
                corpus.glob(module, name) + corpus.tup(arg) + corpus.EMPTY_DICT + corpus.NEWOBJ_EX
            ),
        }
        marker = f"marker-chunk-{label}"
        entries += [
            ChunkEntry(
                f"exec-{label}-{shape}-{kind}-leaf",
                _element(payload, kind=kind),
                executes=True,
                markers=(marker,),
            )
            for shape, payload in shapes.items()
            for kind in ("l", "d")
        ]
    victim = corpus.glob(corpus.MODULE, "trip")
    others = {
        "build-on-function": corpus.program(
            victim + corpus.dct([(corpus.text("__defaults__"), corpus.val(("pwned",)))]) + corpus.BUILD
        ),
        "build-on-class": corpus.program(
            corpus.glob(corpus.MODULE, "HookedVictim")
            + corpus.dct([(corpus.text("run"), corpus.val(1))])
            + corpus.BUILD
        ),
        "persid": corpus.program(pickle.PERSID + b"os.system\n"),
        "binpersid": corpus.program(corpus.text("os:system") + pickle.BINPERSID),
        "ext1": corpus.program(pickle.EXT1 + b"\x5a" + corpus.tup(corpus.val("x")) + corpus.REDUCE),
        "ext2": corpus.program(
            pickle.EXT2 + b"\x42\x42" + corpus.tup(corpus.val("touch marker-chunk-ext")) + corpus.REDUCE
        ),
        "ext4": corpus.program(
            pickle.EXT4 + b"\x01\x02\x03\x04" + corpus.tup(corpus.val("x")) + corpus.REDUCE
        ),
        "getattr-chain": corpus.program(
            corpus.call(
                corpus.call(
                    corpus.glob("builtins", "getattr"),
                    corpus.call(corpus.glob("builtins", "__import__"), corpus.val("os")),
                    corpus.val("system"),
                ),
                corpus.val("touch marker-chunk-chain"),
            )
        ),
    }
    entries += [
        ChunkEntry(
            f"exec-{label}-{kind}-leaf",
            _element(payload, kind=kind),
            executes=True,
            markers=("marker-chunk-ext", "marker-chunk-chain"),
        )
        for label, payload in others.items()
        for kind in ("l", "d")
    ]
    # Inside a list element that also carries the reference mark, so the joiner descends it.
    marked = corpus.text("@") + corpus.call(
        corpus.glob("os", "system"), corpus.val("touch marker-chunk-marked")
    )
    entries.append(
        ChunkEntry(
            "exec-os-system-beside-reference-mark",
            _element(corpus.program(corpus.tup(marked)), wrap=True),
            executes=True,
            markers=("marker-chunk-marked",),
        )
    )
    exit_now = corpus.program(corpus.call(corpus.glob("os", "_exit"), corpus.val(7)))
    entries += [
        ChunkEntry("exec-os-exit-l-leaf", _element(exit_now), executes=True, isolate=True),
        ChunkEntry("exec-os-exit-d-leaf", _element(exit_now, kind="d"), executes=True, isolate=True),
    ]
    return entries


def _bomb(kind: str, size: int) -> Callable[[Forge], None]:
    def build(forge: Forge) -> None:
        address = forge.data(zlib.compress(kind.encode() + b"\x00" * size, 9))
        forge.state({"x": ref(kind, [address])})

    return build


def _stream(transform: Callable[[bytes], bytes], kind: str = "l") -> Callable[[Forge], None]:
    def build(forge: Forge) -> None:
        data = zlib.compress(kind.encode() + frame([pk("fine")]))
        address = forge.data(transform(data))
        forge.state({"x": ref(kind, [address])})

    return build


def _raw_leaf(kind: bytes, body: bytes, reference_kind: str = "l") -> Callable[[Forge], None]:
    def build(forge: Forge) -> None:
        address = forge.leaf(kind, body)
        forge.state({"x": ref(reference_kind, [address])})

    return build


def _chain(levels: int, *, hint: bool = True, fan: int = 1) -> Callable[[Forge], None]:
    """Leaves referencing leaves ``levels`` deep (each ``fan`` times), the root the top one."""

    def build(forge: Forge) -> None:
        address = forge.elements([pk("end")])
        for _ in range(levels):
            address = forge.elements([pk(ref("l", [address] * fan))])
        forge.state({"x": ref("l", [address])}, hint=hint)

    return build


def _nested_value(depth: int) -> list[Any]:
    value: list[Any] = ["end"]
    for _ in range(depth - 1):
        value = [value]
    return value


def _deep_root(depth: int) -> Callable[[Forge], None]:
    def build(forge: Forge) -> None:
        forge.root(corpus.checkpoint_program(corpus.deep_lists(depth)))

    return build


def _deep_element(depth: int) -> Callable[[Forge], None]:
    """An element nested ``depth`` lists deep with a reference at the bottom (it has the mark)."""

    def build(forge: Forge) -> None:
        inner = forge.elements([pk("end")])
        bottom = corpus.tup(corpus.text("@"), corpus.text("l"), corpus.val([inner]))
        element = corpus.program(_deep_lists_around(depth, bottom))
        address = forge.elements([element])
        forge.state({"x": ref("l", [address])})

    return build


def _deep_lists_around(depth: int, ops: bytes) -> bytes:
    return (corpus.EMPTY_LIST + corpus.MARK) * depth + ops + corpus.APPENDS * depth


def shared_lists(depth: int, mark: bool = False) -> bytes:
    """Opcodes of ``L(depth-1)`` where ``L0 = []`` and ``L(i) = [L(i-1), L(i-1)]`` through the memo:
    a few hundred bytes that a walk visiting every occurrence takes 2**depth steps over."""
    ops = corpus.EMPTY_LIST + pickle.BINPUT + b"\x00"
    for level in range(1, depth):
        previous = pickle.BINGET + bytes([level - 1])
        ops += pickle.POP + corpus.EMPTY_LIST + corpus.MARK + previous + previous
        ops += (corpus.text("@") if mark else b"") + corpus.APPENDS + pickle.BINPUT + bytes([level])
    return ops


def self_holding(mark: bool = False) -> bytes:
    """Opcodes of a list that holds itself."""
    extra = corpus.text("@") if mark else b""
    return (
        corpus.EMPTY_LIST
        + pickle.BINPUT
        + b"\x00"
        + corpus.MARK
        + extra
        + pickle.BINGET
        + b"\x00"
        + corpus.APPENDS
    )


def _state(make: Callable[[Forge], object], *, hint: bool = True) -> Callable[[Forge], None]:
    def build(forge: Forge) -> None:
        forge.state(make(forge), hint=hint)

    return build


def _one_leaf(forge: Forge, kind: str = "l") -> bytes:
    if kind == "d":
        return forge.elements([pk(["k", 1])], "d")
    if kind in ("s", "b"):
        return forge.leaf(kind, b"piece")
    return forge.elements([pk("fine")])


def _wrong_kind(reference_kind: str, leaf_kind: str, forge: Forge) -> object:
    return {"x": ref(reference_kind, [_one_leaf(forge, leaf_kind)])}


def _dict_leaf(pickles: list[bytes], forge: Forge) -> object:
    return {"x": ref("d", [forge.elements(pickles, "d")])}


def _references() -> list[ChunkEntry]:
    def malformed(record: Callable[[bytes], object]) -> Callable[[Forge], None]:
        return _state(lambda forge: {"x": record(_one_leaf(forge))})

    shapes: dict[str, Callable[[bytes], object]] = {
        "arity-1": lambda a: ("@",),
        "arity-2": lambda a: ("@", "l"),
        "arity-4": lambda a: ("@", "l", [a], "extra"),
        "kind-int": lambda a: ("@", 1, [a]),
        "kind-none": lambda a: ("@", None, [a]),
        "kind-unknown": lambda a: ("@", "x", [a]),
        "kind-bytes": lambda a: ("@", b"l", [a]),
        "addresses-tuple": lambda a: ("@", "l", (a,)),
        "addresses-bytes": lambda a: ("@", "l", a),
        "addresses-none": lambda a: ("@", "l", None),
        "addresses-dict": lambda a: ("@", "l", {"a": a}),
        "addresses-empty": lambda a: ("@", "l", []),
        "address-none": lambda a: ("@", "l", [None]),
        "address-hex-str": lambda a: ("@", "l", [a.hex()]),
        "address-bytearray": lambda a: ("@", "l", [bytearray(a)]),
        "address-31-bytes": lambda a: ("@", "l", [a[:31]]),
        "address-33-bytes": lambda a: ("@", "l", [a + b"\x00"]),
        "address-good-then-31": lambda a: ("@", "l", [a, a[:31]]),
        "address-int": lambda a: ("@", "l", [int.from_bytes(a, "big")]),
        "address-nested-list": lambda a: ("@", "l", [[a]]),
    }
    entries = [
        ChunkEntry(f"reference-{name}", malformed(shape), match="malformed chunk reference")
        for name, shape in shapes.items()
    ]
    entries[-1] = dataclasses.replace(entries[-1], match=None)  # a list inside is refused too, by type
    for reference_kind, leaf_kind in (
        ("d", "l"),
        ("l", "d"),
        ("s", "l"),
        ("l", "s"),
        ("s", "b"),
        ("b", "s"),
        ("b", "l"),
    ):
        entries.append(
            ChunkEntry(
                f"wrong-kind-{reference_kind}-names-{leaf_kind}-leaf",
                _state(functools.partial(_wrong_kind, reference_kind, leaf_kind)),
                match="not of the kind",
            )
        )
    random_addresses = [hashlib.sha256(b"%d" % n).digest() for n in range(200_000)]
    entries += [
        ChunkEntry(
            "root-names-200k-absent-addresses",
            _state(lambda forge: {"x": ref("l", random_addresses)}),
            match="missing",
            reads=("load",),
        ),
        ChunkEntry(
            "root-names-one-leaf-200k-times",
            _state(lambda forge: {"x": ref("l", [_one_leaf(forge)] * 200_000)}),
            match="exceed the checkpoint size limit",
        ),
        ChunkEntry(
            "leaf-fans-out-to-one-leaf",
            _state(
                lambda forge: {
                    "x": ref(
                        "l",
                        [forge.elements([pk(ref("l", [_one_leaf(forge)] * 60))] * 400)],
                    )
                }
            ),
            match="exceed the checkpoint size limit",
        ),
        ChunkEntry("chain-doubling-40-levels", _chain(40, fan=2), match="exceed the checkpoint size limit"),
        ChunkEntry("chain-9-levels-hinted", _chain(9), expect="either", state={"x": _nested_value(10)}),
        ChunkEntry("chain-9-levels-unhinted", _chain(9, hint=False), match="missing"),
        ChunkEntry("chain-150-levels-hinted", _chain(150), match="nest too deeply"),
        # Refused level by level, past MAX_NESTING, before the join or the rebuild recurse.
        ChunkEntry("chain-400-levels-hinted", _chain(400), match="nest too deeply"),
        ChunkEntry("root-5000-lists-deep-no-reference", _deep_root(5000), match="nested too deeply"),
        ChunkEntry(
            "root-holds-itself",
            lambda forge: forge.root(corpus.checkpoint_program(self_holding())),
            match="more than once",
        ),
        ChunkEntry(
            "root-shares-a-list-40-levels",
            lambda forge: forge.root(corpus.checkpoint_program(shared_lists(40))),
            match="more than once",
        ),
        ChunkEntry(
            "element-holds-itself-beside-the-mark",
            _state(
                lambda forge: {"x": ref("l", [forge.elements([corpus.program(self_holding(mark=True))])])}
            ),
            match="more than once",
        ),
        ChunkEntry(
            "element-shares-a-list-40-levels-beside-the-mark",
            _state(
                lambda forge: {"x": ref("l", [forge.elements([corpus.program(shared_lists(40, mark=True))])])}
            ),
            match="more than once",
        ),
        ChunkEntry(
            "element-3000-lists-deep-over-a-reference", _deep_element(3000), match="nested too deeply"
        ),
        ChunkEntry(
            "reference-hidden-from-the-mark",
            _state(
                lambda forge: {
                    "x": ref(
                        "l",
                        [
                            forge.elements(
                                [
                                    corpus.program(
                                        corpus.tup(
                                            pickle.BINUNICODE + U32.pack(1)[::-1] + b"@",
                                            corpus.text("l"),
                                            corpus.val([_one_leaf(forge)]),
                                        )
                                    )
                                ]
                            )
                        ],
                    )
                }
            ),
        ),
        ChunkEntry(
            "reference-as-mapping-key",
            _state(lambda forge: {"x": ("m", ref("l", [_one_leaf(forge)]), 1)}),
        ),
        ChunkEntry(
            "reference-as-set-member", _state(lambda forge: {"x": ("S", ref("l", [_one_leaf(forge)]))})
        ),
        ChunkEntry(
            "reference-as-frozenset-member", _state(lambda forge: {"x": ("Z", ref("l", [_one_leaf(forge)]))})
        ),
        ChunkEntry(
            "reference-as-record-tag",
            _state(lambda forge: {"x": (ref("s", [forge.leaf("s", b"t")]), 1, 2)}),
            expect="either",
        ),
        ChunkEntry(
            "reference-as-class-name",
            _state(lambda forge: {"x": ("c", ref("s", [forge.leaf("s", b"os:system")]))}),
        ),
        ChunkEntry(
            "reference-as-dict-key-of-root",
            _state(lambda forge: {("@", "s", (forge.leaf("s", b"k"),)): 1}),
        ),
        ChunkEntry(
            "reference-replaces-the-top-level",
            lambda forge: forge.root(
                pk(ref("d", [forge.elements([pk([k, v]) for k, v in forge.base.root_tree().items()], "d")]))
            ),
            expect="either",
        ),
        ChunkEntry(
            "reference-to-the-root-document-id",
            _state(lambda forge: {"x": ref("l", [bytes.fromhex(forge.base.root_document["_id"])])}),
            match="missing",
        ),
        ChunkEntry(
            "leaf-holding-the-root-itself",
            _state(
                lambda forge: {
                    "x": ref("l", [forge.elements([bytes(forge.base.root_document["checkpoint"])])])
                }
            ),
            expect="either",
            needs_chunks=True,
        ),
    ]
    return entries


def _deflate(data: bytes, wbits: int) -> bytes:
    """``data`` compressed in another container than zlib's (raw deflate, gzip)."""
    compressor = zlib.compressobj(wbits=wbits)
    return compressor.compress(data) + compressor.flush()


def _leaves() -> list[ChunkEntry]:
    budget_plus = CAP + 1
    entries = [
        ChunkEntry(
            "bomb-list-leaf",
            _bomb("l", budget_plus),
            match="decompress to more than the checkpoint size limit",
        ),
        ChunkEntry(
            "bomb-bytes-leaf",
            _bomb("b", budget_plus),
            match="decompress to more than the checkpoint size limit",
        ),
        ChunkEntry(
            "bomb-str-leaf",
            _bomb("s", 64 * budget_plus),
            match="decompress to more than the checkpoint size limit",
        ),
        ChunkEntry(
            "bomb-under-the-limit-repeated",
            _state(
                lambda forge: {"x": ref("b", [forge.data(zlib.compress(b"b" + b"\x00" * (CAP // 2), 9))] * 3)}
            ),
            match="exceed the checkpoint size limit",
        ),
        ChunkEntry("zlib-truncated", _stream(lambda d: d[:-3]), match="truncated"),
        ChunkEntry("zlib-cut-in-half", _stream(lambda d: d[: len(d) // 2]), match="truncated"),
        ChunkEntry("zlib-extra-byte", _stream(lambda d: d + b"\x00"), match="followed by other bytes"),
        ChunkEntry("zlib-two-streams", _stream(lambda d: d + d), match="followed by other bytes"),
        ChunkEntry("zlib-garbage", _stream(lambda d: b"not zlib at all"), match="does not decompress"),
        ChunkEntry("zlib-empty-data", _stream(lambda d: b""), match="truncated"),
        ChunkEntry(
            "zlib-raw-deflate",
            _stream(lambda d: _deflate(b"l" + frame([pk("x")]), -15)),
            match="does not decompress",
        ),
        ChunkEntry(
            "zlib-gzip-wrapper",
            _stream(lambda d: _deflate(b"l" + frame([pk("x")]), 31)),
            match="does not decompress",
        ),
        ChunkEntry("leaf-empty", _raw_leaf(b"", b""), match="empty"),
        ChunkEntry("leaf-unknown-kind", _raw_leaf(b"x", frame([pk(1)])), match="unknown kind"),
        ChunkEntry("leaf-non-ascii-kind", _raw_leaf(b"\xff", frame([pk(1)])), match="unknown kind"),
        ChunkEntry("leaf-kind-only", _raw_leaf(b"l", b""), expect="either", state={"x": []}),
        ChunkEntry("frame-length-zero", _raw_leaf(b"l", U32.pack(0)), match="truncated"),
        ChunkEntry("frame-length-beyond", _raw_leaf(b"l", U32.pack(99) + pk(1)), match="truncated"),
        ChunkEntry(
            "frame-trailing-bytes", _raw_leaf(b"l", frame([pk(1)]) + b"\x00\x00"), match="bytes follow"
        ),
        ChunkEntry("frame-huge-length", _raw_leaf(b"l", U32.pack(2**32 - 1) + pk(1)), match="truncated"),
        ChunkEntry("element-not-a-pickle", _raw_leaf(b"l", frame([b"not a pickle"]))),
        ChunkEntry("element-bytes-after-stop", _raw_leaf(b"l", frame([pk(1) + b"\x00"]))),
        ChunkEntry("element-two-pickles-in-one-frame", _raw_leaf(b"l", frame([pk(1) + pk(2)]))),
        ChunkEntry("str-piece-invalid-utf8", _raw_leaf(b"s", b"\xff\xfe", "s"), match="invalid text"),
        ChunkEntry("str-piece-overlong-utf8", _raw_leaf(b"s", b"\xc0\xaf", "s"), match="invalid text"),
        ChunkEntry(
            "str-pieces-cut-inside-a-character",
            _state(
                lambda forge: {
                    "x": ref("s", [forge.leaf("s", "é".encode()[:1]), forge.leaf("s", "é".encode()[1:])])
                }
            ),
            expect="either",
            state={"x": "é"},
        ),
        ChunkEntry(
            "str-piece-lone-surrogate",
            _state(
                lambda forge: {"x": ref("s", [forge.leaf("s", "\ud800".encode("utf-8", "surrogatepass"))])}
            ),
            expect="either",
        ),
        ChunkEntry(
            "str-pieces-truncated-character",
            _state(
                lambda forge: {"x": ref("s", [forge.leaf("s", b"ok"), forge.leaf("s", "é".encode()[:1])])}
            ),
            match="invalid text",
        ),
        ChunkEntry(
            "element-count-bomb",
            _raw_leaf(b"l", frame([b"N."]) * ((CAP - 64) // 6)),
            expect="either",
        ),
    ]
    dict_entries: dict[str, list[bytes]] = {
        "repeated-key": [pk(["k", 1]), pk(["k", 2])],
        "int-key": [pk([1, 1])],
        "bytes-key": [pk([b"k", 1])],
        "none-key": [pk([None, 1])],
        "tuple-key": [pk([("t", 1), 1])],
        "entry-triple": [pk(["k", 1, 2])],
        "entry-single": [pk(["k"])],
        "entry-tuple": [pk(("k", 1))],
        "entry-str": [pk("k")],
        "entry-dict": [pk({"k": 1})],
        "entry-reference-key": [pk([ref("s", [b"\x00" * 32]), 1])],
    }
    for label, pickles in dict_entries.items():
        entries.append(
            ChunkEntry(
                f"dict-leaf-{label}",
                _state(functools.partial(_dict_leaf, pickles)),
                match="malformed or repeated key" if label != "entry-reference-key" else None,
            )
        )
    entries.append(
        ChunkEntry(
            "dict-leaf-key-repeated-across-leaves",
            _state(
                lambda forge: {
                    "x": ref("d", [forge.elements([pk(["k", 1])], "d"), forge.elements([pk(["k", 2])], "d")])
                }
            ),
            match="malformed or repeated key",
        )
    )
    entries.append(
        ChunkEntry(
            "dict-leaf-referenced-twice",
            _state(lambda forge: {"x": ref("d", [forge.elements([pk(["k", 1])], "d")] * 2)}),
            match="malformed or repeated key",
        )
    )
    entries.append(
        ChunkEntry(
            "list-leaf-referenced-twice-shares-nothing",
            _state(lambda forge: {"x": ref("l", [forge.elements([pk(["k", [1]])])] * 2)}),
            expect="either",
            state={"x": [["k", [1]], ["k", [1]]]},
        )
    )
    return entries


def _first_chunk(forge: Forge) -> dict[str, Any]:
    """The real chunk the root names first: dropping or replacing it must fail the load."""
    root = bytes(forge.base.root_document["checkpoint"])
    chunks = forge.base.chunks
    return min(
        (chunk for chunk in chunks if bytes(chunk["_id"]) in root),
        key=lambda chunk: root.index(bytes(chunk["_id"])),
    )


def _replace_chunk(**fields: Callable[[dict[str, Any]], object]) -> Callable[[Forge], None]:
    def build(forge: Forge) -> None:
        chunk = _first_chunk(forge)
        forge.plant.drop.append(chunk["_id"])
        replaced = {**chunk, **{name: make(chunk) for name, make in fields.items()}}
        forge.plant.chunks.append({key: value for key, value in replaced.items() if value is not MISSING})

    return build


def _documents() -> list[ChunkEntry]:
    """Chunk documents of the real checkpoint with the wrong BSON types, shapes or owners."""
    ids: dict[str, Callable[[dict[str, Any]], object]] = {
        "str": lambda chunk: bytes(chunk["_id"]).hex(),
        "int": lambda chunk: int.from_bytes(bytes(chunk["_id"])[:7], "big"),
        "document": lambda chunk: {"a": chunk["_id"]},
        # No array: MongoDB refuses an array _id outright (the engine's emulator raises TypeError).
        "binary-subtype-4": lambda chunk: Binary(bytes(chunk["_id"])[:16], 4),
        "binary-subtype-4-32-bytes": lambda chunk: Binary(bytes(chunk["_id"]), 4),
        "binary-subtype-5": lambda chunk: Binary(bytes(chunk["_id"]), 5),
    }
    data: dict[str, Callable[[dict[str, Any]], object]] = {
        "str": lambda chunk: bytes(chunk["data"]).hex(),
        "int": lambda chunk: 7,
        "document": lambda chunk: {"data": chunk["data"]},
        "array": lambda chunk: [chunk["data"]],
        "binary-subtype-4": lambda chunk: Binary(bytes(chunk["data"]), 4),
        "none": lambda chunk: None,
        "missing": lambda chunk: MISSING,
    }
    entries = [
        ChunkEntry(f"chunk-id-{name}", _replace_chunk(_id=make), match="missing")
        for name, make in ids.items()
    ]
    entries = [dataclasses.replace(entry, needs_chunks=True) for entry in entries]
    entries += [
        ChunkEntry(f"chunk-data-{name}", _replace_chunk(data=make), match="lacks its address or data")
        for name, make in data.items()
    ]
    entries += [
        ChunkEntry(
            "chunk-data-binary-subtype-0",
            _replace_chunk(data=lambda c: Binary(bytes(c["data"]), 0)),
            expect="either",
        ),
        ChunkEntry(
            "chunk-dropped",
            lambda forge: forge.plant.drop.append(_first_chunk(forge)["_id"]),
            match="missing",
        ),
        # Posing as a checkpoint of the run: the listings read it, and refuse its missing gates.
        ChunkEntry("chunk-other-kind", _replace_chunk(_kind=lambda c: "workflow_checkpoint")),
        ChunkEntry(
            "chunk-scope-field-missing", _replace_chunk(session_id=lambda c: MISSING), match="missing"
        ),
        ChunkEntry(
            "chunk-other-session-fields",
            _replace_chunk(session_id=lambda c: "session-other"),
            match="missing",
        ),
        ChunkEntry(
            "chunk-data-bit-flipped",
            _replace_chunk(data=lambda c: bytes([c["data"][0] ^ 1]) + bytes(c["data"][1:])),
            match="does not match its address",
        ),
        ChunkEntry(
            "chunk-data-of-another-chunk",
            _swap_data,
            match="does not match its address",
        ),
        ChunkEntry(
            "chunk-duplicated-as-binary-subtype-4",
            lambda forge: forge.plant.chunks.append(
                {
                    **_first_chunk(forge),
                    "_id": Binary(bytes(_first_chunk(forge)["_id"]), 4),
                    "data": b"garbage",
                }
            ),
            expect="either",
        ),
    ]
    return [dataclasses.replace(entry, needs_chunks=True) for entry in entries]


def _swap_data(forge: Forge) -> None:
    first = _first_chunk(forge)
    other = next(chunk for chunk in forge.base.chunks if chunk["_id"] != first["_id"])
    forge.plant.drop.append(first["_id"])
    forge.plant.chunks.append({**first, "data": other["data"]})


def _formats() -> list[ChunkEntry]:
    def plain_as_chunked(forge: Forge) -> None:
        forge.root(corpus.base_payload())

    def chunked_as_plain(forge: Forge) -> None:
        forge.plant.set_fields["payload_format"] = PAYLOAD_FORMAT

    def nested(value: Callable[[Forge], object]) -> Callable[[Forge], None]:
        def build(forge: Forge) -> None:
            forge.plant.set_fields["nested_chunks"] = value(forge)

        return build

    def first(forge: Forge) -> bytes:
        return bytes(_first_chunk(forge)["_id"])

    entries = [
        ChunkEntry("plain-tree-labelled-chunked", plain_as_chunked, expect="either", state={"step": 1}),
        ChunkEntry("chunked-root-labelled-plain", chunked_as_plain, match="not a tree this codec writes"),
        ChunkEntry("first-format-label", _format("pickle-5/v1"), match="first payload format"),
        ChunkEntry("unknown-format-label", _format("tree-chunks/v2"), match="cannot read"),
        ChunkEntry("format-label-int", _format(1), match="cannot read"),
        ChunkEntry(
            "nested-odd-length", nested(lambda f: first(f) + b"\x00"), match="nested_chunks is malformed"
        ),
        ChunkEntry("nested-31-bytes", nested(lambda f: first(f)[:31]), match="nested_chunks is malformed"),
        ChunkEntry("nested-empty", nested(lambda f: b""), match="nested_chunks is malformed"),
        ChunkEntry("nested-str", nested(lambda f: first(f).hex()), match="nested_chunks is malformed"),
        ChunkEntry("nested-int", nested(lambda f: 5), match="nested_chunks is malformed"),
        ChunkEntry("nested-array", nested(lambda f: [first(f)]), match="nested_chunks is malformed"),
        ChunkEntry("nested-document", nested(lambda f: {"a": first(f)}), match="nested_chunks is malformed"),
        ChunkEntry("nested-bool", nested(lambda f: True), match="nested_chunks is malformed"),
        ChunkEntry("nested-binary-subtype-4", nested(lambda f: Binary(first(f) * 2, 4)), expect="either"),
        ChunkEntry("nested-removed", lambda f: f.plant.unset.append("nested_chunks"), match="missing"),
        ChunkEntry(
            "nested-100k-absent-addresses",
            _hint_only(100_000),
            expect="either",
            state={"x": 1},
            reads=("load",),
        ),
        ChunkEntry(
            "root-checksum-wrong",
            lambda f: f.plant.set_fields.update(payload_checksum="0" * 64),
            match="checksum",
        ),
    ]
    return [
        dataclasses.replace(entry, needs_chunks=entry.name != "nested-100k-absent-addresses")
        for entry in entries
    ]


def _hint_only(count: int) -> Callable[[Forge], None]:
    """A root naming no leaf, with a valid hint of ``count`` absent addresses (only a hint)."""

    def build(forge: Forge) -> None:
        forge.state({"x": 1})
        forge.plant.set_fields["nested_chunks"] = b"".join(
            hashlib.sha256(b"n%d" % n).digest() for n in range(count)
        )

    return build


def _format(value: object) -> Callable[[Forge], None]:
    def build(forge: Forge) -> None:
        forge.plant.set_fields["payload_format"] = value

    return build


def _foreign() -> list[ChunkEntry]:
    """Chunks of another run or tenant, copied in with this run's scope fields."""

    def copied(session_id: str, tenant_id: str) -> Callable[[Forge], None]:
        def build(forge: Forge) -> None:
            theirs = _FOREIGN[(session_id, tenant_id)]
            root = next(doc for doc in theirs if doc.get("checkpoint_id") == BASE_ID)
            forge.plant.root = bytes(root["checkpoint"])
            forge.plant.set_fields["nested_chunks"] = root["nested_chunks"]
            for chunk in theirs:
                if chunk.get("_kind") == CHUNK_KIND:
                    forge.plant.chunks.append({**chunk, **forge.base.scope.fields()})

        return build

    return [
        ChunkEntry(
            "chunks-of-another-session-moved-in",
            copied("session-other", "tenant-alpha"),
            match="does not match its address",
        ),
        ChunkEntry(
            "chunks-of-another-tenant-moved-in",
            copied("session-chunks", "tenant-beta"),
            match="does not match its address",
        ),
    ]


_FOREIGN: dict[tuple[str, str], tuple[dict[str, Any], ...]] = {}


async def prepare_foreign() -> None:
    """Save the base checkpoint in another run and another tenant (differently addressed chunks)."""
    for session_id, tenant_id in (("session-other", "tenant-alpha"), ("session-chunks", "tenant-beta")):
        if (session_id, tenant_id) not in _FOREIGN:
            _FOREIGN[(session_id, tenant_id)] = await _template(
                options(signed=False, session_id=session_id, tenant_id=tenant_id)
            )


def beside_intact_root(body: bytes, kind: str = "l") -> Callable[[Forge], None]:
    """A well-addressed leaf holding ``body``, named only by the checkpoint's ``nested_chunks``
    hint, its signed root left as it is (issue 19: the hint was unsigned, so this leaf reached
    the unpickler of a signed storage). The root never reaches it: no load may parse it."""

    def build(forge: Forge) -> None:
        address = forge.leaf(kind, body)
        hint = bytes(forge.base.root_document.get("nested_chunks") or b"")
        forge.plant.set_fields["nested_chunks"] = hint + address

    return build


def _beside_intact_root() -> list[ChunkEntry]:
    classics = [entry for entry in corpus.CORPUS if entry.family == "classics" and not entry.isolate]
    return [
        ChunkEntry(
            f"hint-beside-intact-root-{entry.name}",
            beside_intact_root(entry.payload),
            expect="either",
            state=base_state(),
            needs_chunks=True,
        )
        for entry in classics[:: max(1, len(classics) // 12)]
    ]


def build_chunk_corpus() -> list[ChunkEntry]:
    entries = [
        *_exec_entries(),
        *_references(),
        *_leaves(),
        *_documents(),
        *_formats(),
        *_foreign(),
        *_beside_intact_root(),
    ]
    names = [entry.name for entry in entries]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise AssertionError(f"chunk corpus names repeat: {repeated}")
    return entries


CHUNK_CORPUS: Final = build_chunk_corpus()
BY_NAME: Final = {entry.name: entry for entry in CHUNK_CORPUS}


# -- the fuzz: mutations of the base that keep (or break) its addresses ------------------------


@dataclasses.dataclass(frozen=True)
class Mutation:
    """A mutated run: the new root payload and the chunk documents replacing the real ones."""

    root: bytes
    nested: bytes
    chunks: tuple[tuple[bytes, bytes], ...]
    readdressed: bool
    description: str


def _mutate_bytes(data: bytes, steps: Sequence[tuple[int, int, int, bytes]], pool: Sequence[bytes]) -> bytes:
    out = bytearray(data)
    for kind, position, size, insert in steps:
        if not out:
            out = bytearray(insert)
            continue
        at = position % len(out)
        if kind == 0:
            out[at] ^= 1 << (size % 8)
        elif kind == 1:
            out[at] = size % 256
        elif kind == 2:
            out[at:at] = insert
        elif kind == 3:
            del out[at : at + 1 + size % 16]
        elif kind == 4:
            other = pool[size % len(pool)]
            out = out[:at] + other[position % max(len(other), 1) :]
        else:
            del out[at:]
    return bytes(out)


def mutate(base: Base, choice: tuple[int, int, bool, list[tuple[int, int, int, bytes]]]) -> Mutation:
    """Apply one mutation plan to the base's root or one chunk (its stored bytes or its
    decompressed body); with ``readdress``, a changed chunk gets its correct new address and
    every leaf and root naming it is rewritten (their addresses too), so the mutation passes the
    address check and reaches the parser."""
    target, index, readdress, steps = choice
    chunks = {bytes(chunk["_id"]): bytes(chunk["data"]) for chunk in base.chunks}
    addresses = sorted(chunks)
    bodies = [zlib.decompress(data) for data in chunks.values()]
    root = bytes(base.root_document["checkpoint"])
    nested = bytes(base.root_document["nested_chunks"])
    if target == 0:
        mutated_root = _mutate_bytes(root, steps, bodies)
        return Mutation(mutated_root, nested, tuple(chunks.items()), True, "root bytes")
    victim = addresses[index % len(addresses)]
    if target == 1:
        new_data = _mutate_bytes(chunks[victim], steps, list(chunks.values()))
        what = "chunk data"
    else:
        new_data = zlib.compress(_mutate_bytes(zlib.decompress(chunks[victim]), steps, bodies), 1)
        what = "chunk body"
    if not readdress:
        chunks[victim] = new_data
        return Mutation(root, nested, tuple(chunks.items()), False, what)
    renamed = {victim: base.address(new_data)}
    del chunks[victim]
    chunks[renamed[victim]] = new_data
    # Rewrite every leaf that names a renamed address, up to the root, renaming as it goes.
    changed = True
    while changed:
        changed = False
        for address, data in list(chunks.items()):
            try:
                body = zlib.decompress(data)
            except zlib.error:
                continue
            rewritten = body
            for old, new in renamed.items():
                rewritten = rewritten.replace(old, new)
            if rewritten != body:
                replacement = zlib.compress(rewritten, 1)
                del chunks[address]
                renamed[address] = base.address(replacement)
                chunks[renamed[address]] = replacement
                changed = True
    for old, new in renamed.items():
        root = root.replace(old, new)
        nested = nested.replace(old, new)
    return Mutation(root, nested, tuple(chunks.items()), True, what + " (re-addressed)")


def mutations() -> st.SearchStrategy[tuple[int, int, bool, list[tuple[int, int, int, bytes]]]]:
    step = st.tuples(
        st.integers(0, 5),
        st.integers(0, 2**20),
        st.integers(0, 255),
        st.binary(max_size=6)
        | st.sampled_from([pickle.GLOBAL + b"os\nsystem\n", b"\x8c\x01@", pickle.REDUCE]),
    )
    return st.tuples(
        st.integers(0, 2), st.integers(0, 10_000), st.booleans(), st.lists(step, min_size=1, max_size=3)
    )


async def plant_mutation(collection: InMemoryCollection, base: Base, mutation: Mutation) -> None:
    await collection.delete_many({"_kind": CHUNK_KIND})
    await collection.update_one(
        {"_id": base.root_document["_id"]},
        {
            "$set": {
                "checkpoint": mutation.root,
                "payload_checksum": payload_checksum(mutation.root),
                "nested_chunks": mutation.nested,
            }
        },
    )
    forge = Forge(base)
    if mutation.chunks:
        await collection.insert_many(
            [forge.chunk_document(address, data) for address, data in mutation.chunks]
        )


_EXPECTED: list[str] = []


def judge_mutation(
    loop: asyncio.AbstractEventLoop,
    collection: InMemoryCollection,
    base: Base,
    mutation: Mutation,
    root: Path,
) -> tuple[str, list[str]]:
    """Plant a mutation and load it under a Guard: the outcome (a package error's class, ``equal``
    or ``other``) and what is wrong with it. Only a package mapping error, the saved checkpoint,
    or (for a re-addressed mutation) another checkpoint that a save accepts again may come out."""
    if not _EXPECTED:
        _EXPECTED.append(canonical_hash(base_checkpoint().to_dict()))
    loop.run_until_complete(plant_mutation(collection, base, mutation))
    storage = MongoDBCheckpointStorage(collection, options=options(signed=False))
    with corpus.Guard(root, (_FUZZ_MARKER,)) as guard:
        value, outcome = _attempt(loop, storage.load(BASE_ID))
    return _judge_loaded(value, outcome, mutation, list(guard.problems))


def _judge_loaded(
    value: object, outcome: str, mutation: Mutation, problems: list[str]
) -> tuple[str, list[str]]:
    """A load's outcome and what is wrong with it (``problems``: the Guard's, extended)."""
    if outcome.startswith("escape:"):
        problems.append(outcome)
    if outcome != "checkpoint":
        return outcome, problems
    if not isinstance(value, WorkflowCheckpoint) or value.checkpoint_id != BASE_ID:
        return "checkpoint", [*problems, f"load returned {value!r:.80}"]
    if canonical_hash(value.to_dict()) == _EXPECTED[0]:
        return "equal", problems
    if not mutation.readdressed:
        problems.append("an unaddressed mutation loaded another checkpoint: the address check failed")
    try:
        CheckpointCodec().encode(value)
    except BaseException as error:
        problems.append(f"accepted, but a save of the result raises {type(error).__name__}: {error}")
    return "other", problems


# -- the fork fuzz: fork_run of a mutated run (ADR 0040's transplant and its re-encoding fallback) --

FORK_ERRORS: Final = (MongoDBMappingError, MongoDBConcurrencyError, MongoDBCheckpointNotFoundError)
"""What a fork of a damaged run may raise (``MongoDBIntegrityError`` is a mapping error)."""
_TRANSPLANTING: list[str] = []
"""The session the intact base transplants into (found once per process by :func:`_warm_fork`)."""


def _escape(error: BaseException) -> str:
    return f"escape:{type(error).__module__}.{type(error).__qualname__}: {str(error)[:200]}"


def _attempt(loop: asyncio.AbstractEventLoop, awaitable: Any) -> tuple[object, str]:
    """A load's value and outcome: ``checkpoint``, a package mapping error's class, or an escape."""
    try:
        return loop.run_until_complete(awaitable), "checkpoint"
    except MongoDBMappingError as error:
        return None, type(error).__name__
    except BaseException as error:
        return None, _escape(error)


def _category(value: object, outcome: str) -> str:
    """What a load's outcome must agree on between a run and its copy: the checkpoint's identity
    (its ``to_dict()``'s canonical hash), or ``refused`` (any package mapping error)."""
    if outcome != "checkpoint":
        return outcome if outcome.startswith("escape:") else "refused"
    if not isinstance(value, WorkflowCheckpoint):
        return f"not a checkpoint: {value!r:.60}"
    try:
        return "checkpoint " + canonical_hash(value.to_dict())
    except BaseException as error:
        return f"checkpoint without identity ({_escape(error)})"


async def _run_documents(collection: InMemoryCollection, scope: RunScope) -> list[dict[str, Any]]:
    documents = await collection.find(scope.fields()).to_list(None)
    return sorted(documents, key=lambda document: repr(document["_id"]))


async def _drop_run(collection: InMemoryCollection, scope: RunScope) -> None:
    await collection.delete_many(scope.fields())
    if await collection.count_documents({"session_id": scope.session_id}):
        raise AssertionError(f"the fork target {scope.session_id!r} was not dropped")


def _unmutated(base: Base) -> Mutation:
    chunks = tuple((bytes(chunk["_id"]), bytes(chunk["data"])) for chunk in base.chunks)
    root = base.root_document
    return Mutation(bytes(root["checkpoint"]), bytes(root["nested_chunks"]), chunks, False, "none")


def _warm_fork(loop: asyncio.AbstractEventLoop, collection: InMemoryCollection, base: Base) -> str:
    """The session the intact base run forks into by transplant (``transplanted == 1``).

    Under most target contexts the base's nested list is cut into another number of leaves, and
    the fork declines the transplant and re-encodes (``NotTransplantable``); so a fork fuzz that
    only used fresh sessions would mostly test the fallback. The search forks the intact run,
    outside any Guard, so what a fork and a copy's load import or initialize lazily on first use
    is not blamed on the first mutation."""
    if _TRANSPLANTING:
        return _TRANSPLANTING[0]
    loop.run_until_complete(plant_mutation(collection, base, _unmutated(base)))
    storage = MongoDBCheckpointStorage(collection, options=options(signed=False))
    for n in range(200):
        copy = storage.for_session(f"fork-transplanting-{n}")
        try:
            result = loop.run_until_complete(
                storage.fork_run(to_session_id=copy.options.session_id, keep="chain")
            )
            for checkpoint_id in result.checkpoint_ids:
                loop.run_until_complete(copy.load(checkpoint_id))
        finally:
            loop.run_until_complete(_drop_run(collection, RunScope.from_options(copy.options)))
        if result.transplanted == 1:
            _TRANSPLANTING.append(copy.options.session_id)
            return _TRANSPLANTING[0]
    raise AssertionError("no target session of 200 transplants the intact base")


def judge_fork(
    loop: asyncio.AbstractEventLoop,
    collection: InMemoryCollection,
    base: Base,
    mutation: Mutation,
    root: Path,
    *,
    to_session_id: str | None,
    fork_first: bool,
) -> tuple[str, list[str]]:
    """Plant a mutation, then load it and fork its run (``fork_run(keep="chain")``) into the new
    session ``to_session_id`` (``None``: the empty session the intact base transplants into, so
    that the transplant, not its fallback, meets the mutation), in that order or
    (``fork_first``) the fork first, under one Guard.

    The load is judged as :func:`judge_mutation` judges it. The fork must raise a package error
    (:data:`FORK_ERRORS`), or return the chain forked at the mutated checkpoint, and then the
    copy's load of each copied id must end as the source's load of it does: the same checkpoint
    (equal ``to_dict()`` identity hash), or a package mapping error on both. The fork and the
    copy's loads change nothing (the Guard), nor any document of the source run. The outcome is
    the load's, then the fork's (``forked t<transplanted> r<re-encoded>`` or its error's class).
    """
    transplanting = _warm_fork(loop, collection, base)
    to_session_id = transplanting if to_session_id is None else to_session_id
    if not _EXPECTED:
        _EXPECTED.append(canonical_hash(base_checkpoint().to_dict()))
    loop.run_until_complete(plant_mutation(collection, base, mutation))
    storage = MongoDBCheckpointStorage(collection, options=options(signed=False))
    copy = storage.for_session(to_session_id)
    copy_scope = RunScope.from_options(copy.options)
    before = loop.run_until_complete(_run_documents(collection, base.scope))
    fork_problems: list[str] = []
    try:
        with corpus.Guard(root, (_FUZZ_MARKER,)) as guard:
            if fork_first:
                forked, fork_outcome = _fork(loop, storage, to_session_id)
            value, outcome = _attempt(loop, storage.load(BASE_ID))
            if not fork_first:
                forked, fork_outcome = _fork(loop, storage, to_session_id)
            if forked is not None:
                fork_problems += _compare_copies(loop, storage, copy, forked, (value, outcome))
        after = loop.run_until_complete(_run_documents(collection, base.scope))
    finally:
        loop.run_until_complete(_drop_run(collection, copy_scope))
    if fork_outcome.startswith("escape:"):
        fork_problems.append(f"fork_run {fork_outcome}")
    if after != before:
        fork_problems.append("fork_run (or a load) changed the source run's documents")
    load_outcome, problems = _judge_loaded(value, outcome, mutation, list(guard.problems))
    return f"{load_outcome}; fork {fork_outcome}", [*problems, *fork_problems]


def _fork(loop: asyncio.AbstractEventLoop, storage: MongoDBCheckpointStorage, to: str) -> tuple[Any, str]:
    try:
        result = loop.run_until_complete(storage.fork_run(to_session_id=to, keep="chain"))
    except FORK_ERRORS as error:
        return None, type(error).__name__
    except BaseException as error:
        return None, _escape(error)
    return result, f"forked t{result.transplanted} r{result.reencoded}"


def _compare_copies(
    loop: asyncio.AbstractEventLoop,
    storage: MongoDBCheckpointStorage,
    copy: MongoDBCheckpointStorage,
    result: Any,
    loaded: tuple[object, str],
) -> list[str]:
    problems: list[str] = []
    ids = tuple(result.checkpoint_ids)
    if not ids or ids[-1] != BASE_ID or result.already_copied or result.copied != len(ids):
        problems.append(f"fork_run returned {result.to_dict()} for the chain of {BASE_ID}")
    for checkpoint_id in ids:
        source = loaded if checkpoint_id == BASE_ID else _attempt(loop, storage.load(checkpoint_id))
        copied = _attempt(loop, copy.load(checkpoint_id))
        expected, found = _category(*source), _category(*copied)
        if found != expected or found.startswith(("escape:", "not a checkpoint", "checkpoint without")):
            problems.append(
                f"the copy of {checkpoint_id} loads as {found[:120]}, the source as {expected[:120]}"
            )
    return problems
