"""Content-addressed chunks of a checkpoint's tree, and joining them back (proposed chunked format).

A long run's checkpoints repeat their history: every checkpoint holds the whole conversation so far.
Splitting the walked tree (``walk.py``) into chunks that earlier checkpoints of the run already stored
lets a save send only what is new (``docs/adr/draft-chunked-payloads.md``).

**Splitting follows the structure.** Bottom-up, a list or a plain ``str``-keyed dict whose estimated
pickled size exceeds ``split_above`` is replaced by a reference record ``("@", kind, [address, ...])``,
and its elements (a dict's ``[key, value]`` entries, in insertion order) go into *leaves*; a ``str``
or ``bytes`` above the threshold is cut into pieces of ``leaf_bytes``. Leaf boundaries are prefix-stable,
so appending to a list never changes an earlier leaf:

* *closed* leaves are cut greedily from the start, each as soon as its elements reach ``leaf_bytes``;
* the rest (the open tail, under ``leaf_bytes``) is cut after every element whose digest's first byte
  is a multiple of ``tail_modulus`` (content-defined: about ``tail_modulus`` elements per tail leaf),
  so a save re-sends only the last few elements, not the whole tail.

**A leaf** is ``kind byte + body``, zlib-compressed: for lists and dicts the body is a sequence of
length-prefixed element pickles (each loads through the restricted loader on its own); for strings
and bytes, the raw piece. Its address is the SHA-256 of the caller's context (the run's scope and the
format) and the stored bytes, so a leaf proves its own integrity and cannot be moved to another run.

**Joining** verifies each address, decompresses under a byte budget shared by the whole checkpoint
(a reference repeated many times is paid for each time), loads every element through the same
restricted unpickler as a whole payload, and splices. A reference whose leaf is missing, of another
kind, or malformed is a ``MongoDBMappingError``; the joined tree then goes through the codec's usual
validation and rebuild.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import pickle
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, cast

from ...errors import MongoDBMappingError
from .rebuild import load_tree

# type() spelled so the type checkers see type[Any], as in walk.py.
_type_of: Callable[[object], type[Any]] = type

__all__ = [
    "CHUNK_FORMAT",
    "DEFAULT_LEAF_BYTES",
    "DEFAULT_SPLIT_ABOVE",
    "DEFAULT_TAIL_MODULUS",
    "REFERENCE_TAG",
    "Chunk",
    "ChunkReader",
    "Chunker",
    "SplitTree",
    "prove_chunk",
    "references",
]

CHUNK_FORMAT: Final = "tree-chunks/v1"
REFERENCE_TAG: Final = "@"
"""First item of a reference record; no record of codec v2 uses it, so an unjoined reference is
refused by the rebuild like any unknown record."""

DEFAULT_SPLIT_ABOVE: Final = 16 * 1024
DEFAULT_LEAF_BYTES: Final = 32 * 1024
DEFAULT_TAIL_MODULUS: Final = 4
_COMPRESSION_LEVEL: Final = 1
"""zlib level 1: 253 MB/s and 7.6x on a 243 KiB conversation here, against 70 MB/s and 10.5x at
level 6 (docs/adr/draft-chunked-payloads.md)."""

_LIST: Final = "l"
_DICT: Final = "d"
_STR: Final = "s"
_BYTES: Final = "b"
_KINDS: Final = frozenset({_LIST, _DICT, _STR, _BYTES})
_ADDRESS_BYTES: Final = 32
_U32: Final = struct.Struct(">I")
_REFERENCE_COST: Final = 64
"""Budget charged per reference joined, besides its bytes, so that many references to one tiny leaf
still exhaust the budget."""
_MAX_LEVELS: Final = 8
_RECORD_ARITY: Final = 3
_CONTAINERS: Final = frozenset({tuple, list, dict})
_PAIR: Final = 2
_MAX_UTF8_BYTES: Final = 4
_MAX_LEAF_RATIO: Final = 16
_MAX_TAIL_MODULUS: Final = 256
"""A digest's first byte decides a tail cut, so the modulus cannot usefully exceed 256."""


@dataclasses.dataclass(frozen=True, slots=True)
class Chunk:
    """A stored leaf: its address and its exact stored bytes."""

    address: bytes
    data: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class SplitTree:
    """A tree with its large parts replaced by references, and the leaves they name.

    Attributes:
        root: The tree to store as the checkpoint's own payload.
        chunks: Every leaf the root references (directly or through other leaves), each once,
            in the order they are first referenced.
    """

    root: object
    chunks: tuple[Chunk, ...]


def _address(context: bytes, data: bytes) -> bytes:
    return hashlib.sha256(_U32.pack(len(context)) + context + data).digest()


def _dumps(node: object) -> bytes:
    return pickle.dumps(node, protocol=5)


class Chunker:
    """Splits walked trees into leaves addressed within ``context`` (the run's scope and format).

    Args:
        context: Bytes that every address covers; chunks of another context never match.
        split_above: A container or scalar whose estimated pickled size exceeds this is split.
        leaf_bytes: Size at which a closed leaf is cut, and of string and bytes pieces.
        tail_modulus: About this many elements per leaf of a list's open tail.
    """

    __slots__ = ("_chunks", "_context", "_leaf_bytes", "_split_above", "_tail_modulus")

    def __init__(
        self,
        context: bytes,
        *,
        split_above: int = DEFAULT_SPLIT_ABOVE,
        leaf_bytes: int = DEFAULT_LEAF_BYTES,
        tail_modulus: int = DEFAULT_TAIL_MODULUS,
    ) -> None:
        if split_above <= 0 or not 0 < leaf_bytes <= split_above * _MAX_LEAF_RATIO:
            raise ValueError(
                f"chunk sizes must be positive, leaf_bytes at most {_MAX_LEAF_RATIO} x split_above"
            )
        if not 1 <= tail_modulus <= _MAX_TAIL_MODULUS:
            raise ValueError(f"tail_modulus must be from 1 to {_MAX_TAIL_MODULUS}")
        self._context = context
        self._split_above = split_above
        self._leaf_bytes = leaf_bytes
        self._tail_modulus = tail_modulus
        self._chunks: dict[bytes, Chunk] = {}

    def split(self, tree: object) -> SplitTree:
        """Return ``tree`` with every part above ``split_above`` replaced by references."""
        self._chunks = {}
        root = self._split(tree)
        chunks, self._chunks = tuple(self._chunks.values()), {}
        return SplitTree(root, chunks)

    def _split(self, node: object) -> object:
        """The node with its large parts split; nothing is modified in place (the walk's tree may
        hold the application's own lists and dicts).

        A container whose pickle fits ``split_above`` holds nothing larger, so it is returned as it
        is without being descended: one C-level pickle instead of a Python pass over its nodes
        (a 243 KiB conversation split in 40 ms walking every node). A list or dict is cut into
        leaves when its parts, once split, still pickle to more than ``split_above``.
        """
        cls = _type_of(node)
        if cls is str:
            return self._split_text(cast("str", node))
        if cls is bytes:
            return self._split_bytes(cast("bytes", node))
        if cls not in _CONTAINERS or len(_dumps(node)) <= self._split_above:
            return node
        return self._split_container(cls, node)

    def _split_container(self, cls: type[Any], node: object) -> object:
        if cls is tuple:
            return tuple(self._split(item) for item in cast("tuple[Any, ...]", node))
        if cls is list:
            parts, pickles = self._split_pickled(cast("list[Any]", node))
            return self._runs(_LIST, pickles) if _total(pickles) > self._split_above else parts
        mapping = cast("dict[str, Any]", node)
        values, pickles = self._split_pickled(list(mapping.values()))
        entries = [[key, value] for key, value in zip(mapping, values, strict=True)]
        if _total(pickles) > self._split_above:
            return self._runs(_DICT, [_dumps(entry) for entry in entries])
        return {key: value for key, value in entries}  # noqa: C416 - entries are lists, typed

    def _split_pickled(self, items: list[Any]) -> tuple[list[Any], list[bytes]]:
        """Each item split, and each part's pickle: an item that fits is pickled only once."""
        parts: list[Any] = []
        pickles: list[bytes] = []
        for item in items:
            encoded = _dumps(item)
            if len(encoded) > self._split_above:
                item = self._split(item)  # noqa: PLW2901 - the part replaces the item
                encoded = _dumps(item)
            parts.append(item)
            pickles.append(encoded)
        return parts, pickles

    def _split_text(self, text: str) -> object:
        if len(text) * _MAX_UTF8_BYTES <= self._split_above:  # cannot exceed it: skip encoding
            return text
        encoded = text.encode("utf-8", "surrogatepass")
        return self._pieces(_STR, encoded) if len(encoded) > self._split_above else text

    def _split_bytes(self, data: bytes) -> object:
        return self._pieces(_BYTES, data) if len(data) > self._split_above else data

    def _pieces(self, kind: str, data: bytes) -> tuple[str, str, list[bytes]]:
        step = self._leaf_bytes
        return (
            REFERENCE_TAG,
            kind,
            [self._store(kind, data[start : start + step]) for start in range(0, len(data), step)],
        )

    def _runs(self, kind: str, pickles: list[bytes]) -> tuple[str, str, list[bytes]]:
        addresses: list[bytes] = []
        start = size = 0
        for position, encoded in enumerate(pickles):
            size += len(encoded)
            if size >= self._leaf_bytes:
                addresses.append(self._store(kind, _frame(pickles[start : position + 1])))
                start, size = position + 1, 0
        tail_start = start
        for position in range(tail_start, len(pickles)):
            if (
                hashlib.sha256(pickles[position]).digest()[0] % self._tail_modulus == 0
                or position == len(pickles) - 1
            ):
                addresses.append(self._store(kind, _frame(pickles[start : position + 1])))
                start = position + 1
        return (REFERENCE_TAG, kind, addresses)

    def _store(self, kind: str, body: bytes) -> bytes:
        data = zlib.compress(kind.encode("ascii") + body, _COMPRESSION_LEVEL)
        address = _address(self._context, data)
        self._chunks.setdefault(address, Chunk(address, data))
        return address


def _total(pickles: list[bytes]) -> int:
    return sum(len(encoded) for encoded in pickles)


def _frame(pickles: list[bytes]) -> bytes:
    return b"".join(_U32.pack(len(encoded)) + encoded for encoded in pickles)


def references(node: object) -> Iterator[bytes]:
    """Every address a tree (a root or an element) references, depth first, repeats included.

    Raises:
        MongoDBMappingError: A reference record is malformed, or a container is reached twice.
    """
    stack: list[object] = [node]
    seen: dict[int, object] = {}
    while stack:
        current = stack.pop()
        cls = type(current)
        if cls in _CONTAINERS:
            _visit(seen, current)
        if cls is tuple:
            items = cast("tuple[Any, ...]", current)
            if items and items[0] == REFERENCE_TAG:
                yield from _reference_addresses(items)
                continue
            stack.extend(reversed(items))
        elif cls is list:
            stack.extend(reversed(cast("list[Any]", current)))
        elif cls is dict:
            stack.extend(reversed(list(cast("dict[str, Any]", current).values())))


def _visit(seen: dict[int, object], container: object) -> None:
    # A stored tree whose pickle shares a container (memo) or holds itself would make a walk of
    # it exponential or endless; no save writes one (the rebuild refuses a container seen twice).
    # ``seen`` holds the containers, not only their ids: a reference record the join replaced
    # would be freed, and its id reused by a new container.
    marker = id(container)
    if marker in seen:
        raise MongoDBMappingError("Checkpoint payload holds a container more than once.")
    seen[marker] = container


def _reference_addresses(record: tuple[Any, ...]) -> list[bytes]:
    if len(record) != _RECORD_ARITY or record[1] not in _KINDS or type(record[2]) is not list:
        raise MongoDBMappingError("Checkpoint payload holds a malformed chunk reference.")
    addresses = cast("list[object]", record[2])
    if not addresses or any(
        type(address) is not bytes or len(address) != _ADDRESS_BYTES for address in addresses
    ):
        raise MongoDBMappingError("Checkpoint payload holds a malformed chunk reference.")
    return cast("list[bytes]", addresses)


_REFERENCE_MARK: Final = b"\x8c\x01" + REFERENCE_TAG.encode("ascii")
"""How the tag's text appears in a pickle this codec writes (``SHORT_BINUNICODE``); an element
whose bytes lack it holds no reference and is neither scanned nor copied. One written otherwise
keeps its reference unresolved, and the rebuild refuses it."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Element:
    tree: object
    may_reference: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _Leaf:
    kind: str
    body: bytes
    elements: tuple[_Element, ...]


class ChunkReader:
    """Collects stored leaves for one checkpoint and joins its root with them.

    Args:
        context: The context the leaves were addressed in (this run's scope and format).
        budget: Most bytes the joined checkpoint may decompress, over every reference.

    Leaves are verified and parsed as they are added, so :meth:`wanted` can name the addresses
    that the added leaves reference in turn (at most 8 levels). A reader joins one root, once:
    the join splices the parsed leaves into it in place.
    """

    __slots__ = ("_budget", "_context", "_leaves", "_levels", "_referenced", "joined_bytes")

    def __init__(self, context: bytes, *, budget: int) -> None:
        self._context = context
        self._budget = budget
        self._leaves: dict[bytes, _Leaf] = {}
        self._levels = 0
        # What the added leaves reference, gathered once as each is added.
        self._referenced: set[bytes] = set()
        self.joined_bytes = 0
        """Decompressed bytes of the leaves added so far (each once)."""

    def add(self, address: object, data: object) -> None:
        """Verify a fetched leaf against its address and parse it.

        Raises:
            MongoDBMappingError: The bytes do not match the address, do not decompress within
                the budget, or do not hold a leaf this codec writes.
        """
        if type(address) is not bytes or type(data) is not bytes:
            raise MongoDBMappingError("A stored checkpoint chunk lacks its address or data.")
        if not hmac.compare_digest(_address(self._context, data), address):
            raise MongoDBMappingError(
                "A stored checkpoint chunk does not match its address; it is corrupt, was modified, or "
                "belongs to another run."
            )
        raw = self._decompress(data)
        kind, body = raw[:1].decode("ascii", "replace"), raw[1:]
        if kind not in _KINDS:
            raise MongoDBMappingError("A stored checkpoint chunk is of an unknown kind.")
        elements = tuple(_parse(body)) if kind in {_LIST, _DICT} else ()
        if address not in self._leaves:
            self.joined_bytes += len(body)
        self._leaves[address] = _Leaf(kind, body, elements)
        for element in elements:
            if element.may_reference:
                self._referenced.update(references(element.tree))

    def wanted(self, root: object) -> set[bytes]:
        """Addresses that ``root`` or the added leaves reference and that were not added yet.

        Raises:
            MongoDBMappingError: Leaves reference leaves more than 8 levels deep.
        """
        self._levels += 1
        if self._levels > _MAX_LEVELS:
            raise MongoDBMappingError("A stored checkpoint's chunks nest too deeply.")
        return (set(references(root)) | self._referenced) - self._leaves.keys()

    def join(self, root: object) -> object:
        """``root`` with every reference replaced by its leaves' content, spliced in place.

        Raises:
            MongoDBMappingError: A referenced leaf is missing or of another kind, an entry or
                piece is malformed, the joined content exceeds the budget, or the tree nests
                too deeply to splice.
        """
        # The splice recurses through the root's and the elements' containers; a stored tree
        # deeper than the interpreter's stack (the rebuild would refuse it past MAX_NESTING
        # anyway) must end as the rebuild's does, not as a RecursionError.
        try:
            return _Joiner(self._leaves, self._budget).splice(root)
        except RecursionError:
            raise MongoDBMappingError("A stored checkpoint's chunked tree is nested too deeply.") from None

    def _decompress(self, data: bytes) -> bytes:
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(data, self._budget + 1)
        except zlib.error as error:
            raise MongoDBMappingError("A stored checkpoint chunk does not decompress.") from error
        if len(raw) > self._budget or inflater.unconsumed_tail or not inflater.eof or inflater.unused_data:
            raise MongoDBMappingError(
                "A stored checkpoint chunk is larger than the checkpoint size limit, truncated, or followed "
                "by other bytes."
            )
        if not raw:
            raise MongoDBMappingError("A stored checkpoint chunk is empty.")
        return raw


def prove_chunk(context: bytes, chunk: Chunk, *, budget: int) -> None:
    """Raise unless ``chunk``'s bytes pass the load path's verification and parsing.

    Raises:
        MongoDBMappingError: What :meth:`ChunkReader.add` raises for these bytes.
    """
    ChunkReader(context, budget=budget).add(chunk.address, chunk.data)


def _parse(body: bytes) -> Iterator[_Element]:
    position, end = 0, len(body)
    while position < end:
        if end - position < _U32.size:
            raise MongoDBMappingError("A stored checkpoint chunk's entries are truncated.")
        (length,) = _U32.unpack_from(body, position)
        position += _U32.size
        if length == 0 or position + length > end:
            raise MongoDBMappingError("A stored checkpoint chunk's entries are truncated.")
        encoded = body[position : position + length]
        yield _Element(load_tree(encoded), _REFERENCE_MARK in encoded)
        position += length


class _Joiner:
    """One join: splices leaves into the root, charging every reference to the budget."""

    __slots__ = ("_leaves", "_remaining", "_seen", "_used")

    def __init__(self, leaves: Mapping[bytes, _Leaf], budget: int) -> None:
        self._leaves = leaves
        self._remaining = budget
        self._used: set[bytes] = set()
        self._seen: dict[int, object] = {}

    def splice(self, node: object) -> object:
        """``node`` with its references resolved: containers are updated in place (tuples,
        being immutable, are rebuilt), and a reference record is replaced by its content."""
        cls = type(node)
        if cls in _CONTAINERS:
            _visit(self._seen, node)
        if cls is tuple:
            items = cast("tuple[Any, ...]", node)
            if items and items[0] == REFERENCE_TAG:
                return self._resolve(items)
            return tuple(self.splice(item) if type(item) in _CONTAINERS else item for item in items)
        if cls is list:
            sequence = cast("list[Any]", node)
            for position, item in enumerate(sequence):
                if type(item) in _CONTAINERS:
                    sequence[position] = self.splice(item)
        elif cls is dict:
            mapping = cast("dict[str, Any]", node)
            for key, item in mapping.items():
                if type(item) in _CONTAINERS:
                    mapping[key] = self.splice(item)
        return node

    def _resolve(self, record: tuple[Any, ...]) -> object:
        kind = record[1] if len(record) == _RECORD_ARITY else None
        addresses = _reference_addresses(record)
        leaves = [self._leaf(address, kind) for address in addresses]
        if kind in {_STR, _BYTES}:
            data = b"".join(leaf.body for leaf in leaves)
            if kind == _BYTES:
                return data
            try:
                return data.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError as error:
                raise MongoDBMappingError("A stored checkpoint chunk holds invalid text.") from error
        elements = [
            self.splice(element.tree) if element.may_reference else element.tree
            for address, leaf in zip(addresses, leaves, strict=True)
            for element in self._elements(address, leaf)
        ]
        if kind == _LIST:
            return elements
        mapping: dict[str, object] = {}
        for entry in elements:
            pair = cast("list[object]", entry) if type(entry) is list else None
            key = pair[0] if pair is not None and len(pair) == _PAIR else None
            if pair is None or type(key) is not str or key in mapping:
                raise MongoDBMappingError("A stored checkpoint chunk holds a malformed or repeated key.")
            mapping[key] = pair[1]
        return mapping

    def _elements(self, address: bytes, leaf: _Leaf) -> tuple[_Element, ...]:
        # The first reference takes the elements parsed when the leaf was added; a leaf named
        # again is parsed again, because the rebuild refuses a container that appears twice.
        if address in self._used:
            return tuple(_parse(leaf.body))
        self._used.add(address)
        return leaf.elements

    def _leaf(self, address: bytes, kind: object) -> _Leaf:
        leaf = self._leaves.get(address)
        if leaf is None:
            raise MongoDBMappingError(
                "A chunk of the stored checkpoint is missing; it was removed or never written, so the "
                "checkpoint cannot be loaded."
            )
        if leaf.kind != kind:
            raise MongoDBMappingError("A stored checkpoint chunk is not of the kind its reference names.")
        self._remaining -= len(leaf.body) + _REFERENCE_COST
        if self._remaining < 0:
            raise MongoDBMappingError("The stored checkpoint's chunks exceed the checkpoint size limit.")
        return leaf
