"""Content-addressed chunks of a checkpoint's tree, and joining them back (proposed chunked format).

A long run's checkpoints repeat their history: every checkpoint holds the whole conversation so far.
Splitting the walked tree (``walk.py``) into chunks that earlier checkpoints of the run already stored
lets a save send only what is new (``docs/adr/0018-chunked-payloads.md``).

**Splitting follows the structure.** Bottom-up, a list or a plain ``str``-keyed dict whose estimated
pickled size (below) exceeds ``split_above`` is replaced by a reference record
``("@", kind, [address, ...])``, and its elements (a dict's ``[key, value]`` entries, in insertion
order) go into *leaves*; a ``str`` or ``bytes`` above the threshold is cut into pieces of ``leaf_bytes``.
Leaf boundaries are prefix-stable, so appending to a list never changes an earlier leaf:

* *closed* leaves are cut greedily from the start, each as soon as its elements reach ``leaf_bytes``;
* the rest (the open tail, under ``leaf_bytes``) is cut after every element whose digest's first byte
  is a multiple of ``tail_modulus`` (content-defined: about ``tail_modulus`` elements per tail leaf),
  so a save re-sends only the last few elements, not the whole tail.

**Sizes** are found without pickling a subtree on the way down to its large lists: a container of at
most 16 items is descended and its size is the sum of its items' (a string counts its characters, or
its UTF-8 bytes once it might exceed the threshold; bytes their length; other scalars 1); the items of
a longer one are pickled one by one, its size the sum of those pickles, and only an item whose pickle
exceeds ``split_above`` is descended. After 64 small containers below one known to be large, the next
is pickled whole first and kept as it is if it fits, so a tree of many small dicts is not walked node
by node. How a size was found is itself a function of the tree's value, so the output is too.

**A leaf** is ``kind byte + body``, zlib-compressed: for lists and dicts the body is one protocol-5
pickle of the list of its elements (a dict's ``[key, value]`` entries), in which equal strings and
bytes are one object, so each repeated field name is written once; for strings and bytes, the raw
piece. Its address is the SHA-256 of the caller's context (the run's scope and the format) and the
stored bytes, so a leaf proves its own integrity and cannot be moved to another run. (Sizes and cuts
come from the elements' pickles written without the memo; a leaf stored as those pickles was 820 KB
uncompressed for a 249 KB tree and took 13 ms to load at superstep 300, against 4 ms as one pickle.)

**Deterministic.** Cuts are made on pickles written without pickle's memo, and a leaf's pickle shares
strings and bytes by value, not by identity, so a split's root and leaves (addresses and bytes) depend
only on the tree's value: its structure, dict insertion order and each scalar's exact type and value,
never on which objects are shared or on their identities. With identity-based sharing, a string that is
one object in two places is written once and then referred to, so equal content held differently (a
restored run, say) would give other bytes and re-store every leaf it touches
(``tests/unit/codec/test_chunks.py`` pins both). Equal under ``==`` is not enough: ``1``, ``1.0`` and
``True`` are different leaves.

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
import io
import pickle
import struct
import sys
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from typing import Any, Final, cast

from ...errors import MongoDBMappingError, MongoDBSerializationError
from .rebuild import load_tree
from .walk import MAX_NESTING

# type() spelled so the type checkers see type[Any], as in walk.py.
_type_of: Callable[[object], type[Any]] = type

__all__ = [
    "CHUNK_FORMAT",
    "DEFAULT_LEAF_BYTES",
    "DEFAULT_SPLIT_ABOVE",
    "DEFAULT_TAIL_MODULUS",
    "MAX_LEVELS",
    "REFERENCE_COST",
    "REFERENCE_TAG",
    "Chunk",
    "ChunkReader",
    "Chunker",
    "LeafContent",
    "MissingChunkError",
    "SplitTree",
    "join_cost",
    "leaf_address",
    "load_leaf",
    "prove_chunk",
    "reference_addresses",
    "references",
]

CHUNK_FORMAT: Final = "tree-chunks/v1"
REFERENCE_TAG: Final = "@"
"""First item of a reference record; no record of codec v2 uses it, so an unjoined reference is
refused by the rebuild like any unknown record."""

DEFAULT_SPLIT_ABOVE: Final = 16 * 1024
DEFAULT_LEAF_BYTES: Final = 64 * 1024
DEFAULT_TAIL_MODULUS: Final = 8
_COMPRESSION_LEVEL: Final = 1
"""zlib level 1: 253 MB/s and 7.6x on a 243 KiB conversation here, against 70 MB/s and 10.5x at
level 6 (docs/adr/0018-chunked-payloads.md)."""

_LIST: Final = "l"
_DICT: Final = "d"
_STR: Final = "s"
_BYTES: Final = "b"
_KINDS: Final = frozenset({_LIST, _DICT, _STR, _BYTES})
_KIND_BYTES: Final = {kind: kind.encode("ascii") for kind in _KINDS}
_PICKLE_PROTOCOL: Final = 5
_FEW: Final = 16
"""A list, dict or tuple of at most this many items is descended in Python; the items of a
longer one are pickled one by one."""
_DESCENTS: Final = 64
"""Small containers descended in Python, below one known to be large, before the next is first
pickled whole to see whether it fits."""
_ADDRESS_BYTES: Final = 32
_U32: Final = struct.Struct(">I")
REFERENCE_COST: Final = 64
"""Budget charged per reference joined, besides its bytes, so that many references to one tiny leaf
still exhaust the budget."""
MAX_LEVELS: Final = MAX_NESTING
"""Leaves referencing leaves: a split nests references no deeper than the tree's containers, which
the walk bounds by ``MAX_NESTING``, so a load accepts as many levels as a save can write."""
_RECORD_ARITY: Final = 3
_CONTAINERS: Final = frozenset({tuple, list, dict})
_PAIR: Final = 2
_MAX_UTF8_BYTES: Final = 4
_MAX_LEAF_RATIO: Final = 16
_MAX_TAIL_MODULUS: Final = 256
"""A digest's first byte decides a tail cut, so the modulus cannot usefully exceed 256."""


class MissingChunkError(MongoDBMappingError):
    """A reference names a leaf the load did not find. The storage tells a checkpoint removed
    while it was read (not found) from one whose chunk is gone while it stays (corrupt)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Chunk:
    """A stored leaf: its address, its exact stored bytes, and the tree nodes it holds.

    ``parts`` are what the split placed in the leaf: a list leaf's elements, a dict leaf's
    ``[key, value]`` entries, or a string or bytes leaf's one piece (``bytes``: a text's pieces are
    cut from its UTF-8 form, possibly inside a character). They may hold references to nested
    leaves. :func:`prove_chunk` checks that ``data`` loads back to them; a chunk read from the
    store has none.
    """

    address: bytes
    data: bytes
    parts: tuple[object, ...] = dataclasses.field(default=(), compare=False, repr=False)
    body_bytes: int = dataclasses.field(default=0, compare=False, repr=False)
    """The leaf's decompressed body: what a join charges to its budget for each reference."""
    nests: bool = dataclasses.field(default=False, compare=False, repr=False)
    """Whether ``parts`` hold references to further leaves."""


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


def leaf_address(context: bytes, data: bytes) -> bytes:
    """The address of a leaf's stored bytes ``data`` within ``context``."""
    return hashlib.sha256(_U32.pack(len(context)) + context + data).digest()


class _Framed:
    """Element pickles written back to back into one buffer, so that a leaf's pickles are one
    slice of it.

    The pickler runs in fast mode: no memo, so an element's bytes depend on its value only, never
    on which of its strings or bytes happen to be one shared object (the memo writes a shared one
    once and refers back to it: equal content, other bytes, another address). Fast mode needs a
    tree without cycles, and the walk's tree has none and never shares a container (``walk.py``).
    One pickler serves every element; each ``dump`` is a whole pickle that loads on its own.
    """

    __slots__ = ("_buffer", "_pickler", "_view", "ends")

    def __init__(self) -> None:
        self._buffer = io.BytesIO()
        self._view: memoryview | None = None
        self._pickler = pickle.Pickler(self._buffer, protocol=_PICKLE_PROTOCOL)
        self._pickler.fast = True
        self.ends: list[int] = []
        """Where each element's pickle ends in the buffer."""

    def extend(self, elements: Sequence[object], start: int, limit: int) -> int:
        """Write the pickles of ``elements[start:]`` until one is longer than ``limit``; return
        that one's position (it is written), or the number of elements."""
        dump, tell, ends = self._pickler.dump, self._buffer.tell, self.ends
        previous = ends[-1] if ends else 0
        for position in range(start, len(elements)):
            dump(elements[position])
            end = tell()
            ends.append(end)
            if end - previous > limit:
                return position
            previous = end
        return len(elements)

    def replace_last(self, element: object) -> None:
        """Write ``element``'s pickle in place of the last element's."""
        self.ends.pop()
        self._buffer.seek(self.ends[-1] if self.ends else 0)
        self._buffer.truncate()
        self._pickler.dump(element)
        self.ends.append(self._buffer.tell())

    def total(self) -> int:
        """The sum of the element pickles' lengths."""
        return self.ends[-1] if self.ends else 0

    def pickle_of(self, position: int) -> memoryview:
        """The pickle of element ``position``; call once every element is written."""
        return self._written()[self._start(position) : self.ends[position]]

    def body(self, start: int, stop: int) -> bytes:
        """A leaf's body for elements ``start`` to ``stop``: their count, each pickle's length
        (4 bytes, big-endian), then the pickles."""
        ends = self.ends
        lengths = [ends[position] - self._start(position) for position in range(start, stop)]
        table = struct.pack(f">{len(lengths) + 1}I", len(lengths), *lengths)
        return table + self._written()[self._start(start) : ends[stop - 1]]

    def _start(self, position: int) -> int:
        return self.ends[position - 1] if position else 0

    def _written(self) -> memoryview:
        if self._view is None:
            self._view = self._buffer.getbuffer()
        return self._view


def _leaf_pickle(parts: Sequence[object]) -> bytes:
    """One pickle of a leaf's elements in which equal strings and bytes are one object, so that
    the bytes depend on the elements' value alone (see the module's docstring)."""
    # One table per type: "a" and b"a" hash alike, and comparing them warns (raises, under -bb).
    # Exact types only, so equal entries of a table are the same value.
    texts: dict[str, str] = {}
    data: dict[bytes, bytes] = {}

    def canonical(node: object) -> object:
        cls = _type_of(node)
        if cls is str:
            return texts.setdefault(cast("str", node), cast("str", node))
        if cls is bytes:
            return data.setdefault(cast("bytes", node), cast("bytes", node))
        if cls is list:
            return [canonical(item) for item in cast("list[Any]", node)]
        if cls is tuple:
            return tuple(canonical(item) for item in cast("tuple[Any, ...]", node))
        if cls is dict:
            return {
                texts.setdefault(key, key): canonical(item)
                for key, item in cast("dict[str, Any]", node).items()
            }
        return node

    return pickle.dumps([canonical(part) for part in parts], protocol=_PICKLE_PROTOCOL)


def _pickled_size(node: object) -> int:
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=_PICKLE_PROTOCOL)
    pickler.fast = True  # as _Framed: the size of the value, whatever is shared
    pickler.dump(node)
    return buffer.tell()


class Chunker:
    """Splits walked trees into leaves addressed within ``context`` (the run's scope and format).

    Args:
        context: Bytes that every address covers; chunks of another context never match.
        split_above: A container or scalar whose estimated pickled size exceeds this is split.
        leaf_bytes: Size at which a closed leaf is cut, and of string and bytes pieces.
        tail_modulus: About this many elements per leaf of a list's open tail.

    A chunker remembers the leaves of its last split: a leaf whose content comes again (every
    closed leaf, from one save of a run to the next) is not compressed again. Keep one chunker
    per run to benefit; the output is the same either way. It splits one tree at a time, so it is
    not to be shared between threads.
    """

    __slots__ = (
        "_chunks",
        "_context",
        "_descents",
        "_known",
        "_leaf_bytes",
        "_seen",
        "_split_above",
        "_tail_modulus",
    )

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
        # Uncompressed leaf (kind + body) -> (address, data, body bytes), of the last split and of
        # this one.
        self._known: dict[bytes, tuple[bytes, bytes, int]] = {}
        self._seen: dict[bytes, tuple[bytes, bytes, int]] = {}
        self._descents = _DESCENTS

    def split(self, tree: object) -> SplitTree:
        """Return ``tree`` with every part above ``split_above`` replaced by references.

        Nothing is modified in place (the walk's tree may hold the application's own lists and
        dicts): a container with a split part is copied, one without is returned as it is.
        """
        self._chunks, self._seen, self._descents = {}, {}, _DESCENTS
        try:
            root, _ = self._split(tree)
            return SplitTree(root, tuple(self._chunks.values()))
        finally:
            self._known, self._seen, self._chunks = self._seen, {}, {}

    def regroup(self, kind: str, parts: Sequence[object]) -> tuple[list[bytes], tuple[Chunk, ...]]:
        """Cut a list's elements (``kind`` ``"l"``) or a dict's ``[key, value]`` entries (``"d"``)
        into leaves exactly as :meth:`split` cuts a container it splits: the addresses of the
        reference record, and the leaves, in order.

        For the transplant (``transplant.py``), whose parts are already split: their nested
        references decide where a tail is cut, and name another run's leaves until rewritten. The
        leaves are remembered as a split's are, until :meth:`settle`.
        """
        framed = _Framed()
        framed.extend(parts, 0, sys.maxsize)
        self._chunks = {}
        try:
            record, _ = self._runs(kind, parts, framed)
            addresses = cast("tuple[str, str, list[bytes]]", record)[2]
            return addresses, tuple(self._chunks.values())
        finally:
            self._chunks = {}

    def settle(self) -> None:
        """End one checkpoint's :meth:`regroup` calls: the next checkpoint's reuse its leaves, as
        one split's reuse the last split's."""
        if self._seen:
            self._known, self._seen = self._seen, {}

    def _split(self, node: object) -> tuple[object, int]:
        """The node with its large parts split, and the part's estimated pickled size.

        A container of at most ``_FEW`` items is descended in Python, its size the sum of its
        items' (so a chain of small containers above a long list is never pickled whole, once
        per level, on the way down); the items of a longer one are pickled one by one, in C, and
        only an item whose pickle exceeds ``split_above`` is descended. Descending costs a Python
        step per node, so after ``_DESCENTS`` small containers not known to be large, the next
        is first pickled whole, in C, and returned as it is if it fits (a tree of many small
        dicts and no long list would otherwise be walked node by node).
        """
        cls = _type_of(node)
        if cls is str:
            return self._split_text(cast("str", node))
        if cls is bytes:
            return self._split_bytes(cast("bytes", node))
        if cls is list or cls is tuple or cls is dict:
            return self._split_container(cls, node)
        return node, 1

    def _split_container(self, cls: type[Any], node: object) -> tuple[object, int]:
        if len(cast("Sized", node)) > _FEW:
            if cls is dict:
                return self._split_long_dict(cast("dict[str, Any]", node))
            return self._split_long_sequence(cls, cast("list[Any] | tuple[Any, ...]", node))
        if self._descents <= 0:
            size = _pickled_size(node)
            if size <= self._split_above:
                return node, size
            self._descents = _DESCENTS
        self._descents -= 1
        if cls is dict:
            return self._split_few_dict(cast("dict[str, Any]", node))
        return self._split_few_sequence(cls, cast("list[Any] | tuple[Any, ...]", node))

    def _split_large(self, node: object) -> tuple[object, int]:
        """``_split`` of a node whose pickle is known to exceed ``split_above``."""
        self._descents = _DESCENTS
        return self._split(node)

    def _split_few_sequence(self, cls: type[Any], items: list[Any] | tuple[Any, ...]) -> tuple[object, int]:
        parts: list[Any] = []
        size, changed = 0, False
        for item in items:
            part, part_size = self._split(item)
            changed |= part is not item
            parts.append(part)
            size += part_size + 1
        if cls is list and size > self._split_above:
            framed = _Framed()
            framed.extend(parts, 0, sys.maxsize)
            return self._runs(_LIST, parts, framed)
        if not changed:
            return items, size
        return (parts if cls is list else tuple(parts)), size

    def _split_long_sequence(self, cls: type[Any], items: list[Any] | tuple[Any, ...]) -> tuple[object, int]:
        framed = _Framed()
        parts: list[Any] | None = None
        position = framed.extend(items, 0, self._split_above)
        while position < len(items):
            item = items[position]
            part, _ = self._split_large(item)
            if part is not item:
                framed.replace_last(part)
                parts = list(items) if parts is None else parts
                parts[position] = part
            position = framed.extend(items, position + 1, self._split_above)
        size = framed.total()
        if cls is list and size > self._split_above:
            return self._runs(_LIST, items if parts is None else parts, framed)
        if parts is None:
            return items, size
        return (parts if cls is list else tuple(parts)), size

    def _split_few_dict(self, mapping: dict[str, Any]) -> tuple[object, int]:
        entries: list[list[Any]] = []
        size, changed = 0, False
        for key, value in mapping.items():
            part, part_size = self._split(value)
            changed |= part is not value
            entries.append([key, part])
            size += part_size + len(key) + 2
        if size > self._split_above:
            framed = _Framed()
            framed.extend(entries, 0, sys.maxsize)
            return self._runs(_DICT, entries, framed)
        if not changed:
            return mapping, size
        return {key: value for key, value in entries}, size  # noqa: C416 - entries are lists, typed

    def _split_long_dict(self, mapping: dict[str, Any]) -> tuple[object, int]:
        entries = [[key, value] for key, value in mapping.items()]
        framed = _Framed()
        changed = False
        position = framed.extend(entries, 0, self._split_above)
        while position < len(entries):
            key, value = entries[position]
            part, _ = self._split_large(value)
            if part is not value:
                entries[position] = [key, part]
                framed.replace_last(entries[position])
                changed = True
            position = framed.extend(entries, position + 1, self._split_above)
        size = framed.total()
        if size > self._split_above:
            return self._runs(_DICT, entries, framed)
        if not changed:
            return mapping, size
        return {key: value for key, value in entries}, size  # noqa: C416 - entries are lists, typed

    def _split_text(self, text: str) -> tuple[object, int]:
        if len(text) * _MAX_UTF8_BYTES <= self._split_above:  # cannot exceed it: skip encoding
            return text, len(text)
        encoded = text.encode("utf-8", "surrogatepass")
        if len(encoded) > self._split_above:
            return self._pieces(_STR, encoded)
        return text, len(encoded)

    def _split_bytes(self, data: bytes) -> tuple[object, int]:
        return self._pieces(_BYTES, data) if len(data) > self._split_above else (data, len(data))

    def _pieces(self, kind: str, data: bytes) -> tuple[object, int]:
        step = self._leaf_bytes
        addresses = [
            self._store(kind, (piece,), piece)
            for piece in (data[start : start + step] for start in range(0, len(data), step))
        ]
        return (REFERENCE_TAG, kind, addresses), _ADDRESS_BYTES * len(addresses)

    def _runs(self, kind: str, parts: Sequence[Any], framed: _Framed) -> tuple[object, int]:
        """Cut a list's or dict's elements into leaves: closed ones greedily at ``leaf_bytes``,
        then the open tail after each element whose digest's first byte is a multiple of
        ``tail_modulus`` (the module's docstring)."""
        ends = framed.ends
        addresses: list[bytes] = []
        start = 0
        for position, end in enumerate(ends):
            if end - (ends[start - 1] if start else 0) >= self._leaf_bytes:
                addresses.append(
                    self._store(kind, parts[start : position + 1], framed.body(start, position + 1))
                )
                start = position + 1
        last = len(ends) - 1
        for position in range(start, len(ends)):
            if (
                position == last
                or hashlib.sha256(framed.pickle_of(position)).digest()[0] % self._tail_modulus == 0
            ):
                addresses.append(
                    self._store(kind, parts[start : position + 1], framed.body(start, position + 1))
                )
                start = position + 1
        return (REFERENCE_TAG, kind, addresses), _ADDRESS_BYTES * len(addresses)

    def _store(self, kind: str, parts: Sequence[object], body: bytes | memoryview) -> bytes:
        # ``body`` (the memo-less element pickles, or the piece) is a function of the value: the
        # key under which the chunker remembers the leaf, so a known one is not pickled again.
        raw = _KIND_BYTES[kind] + body
        known = self._seen.get(raw) or self._known.get(raw)
        if known is None:
            stored = raw if kind in {_STR, _BYTES} else _KIND_BYTES[kind] + _leaf_pickle(parts)
            data = zlib.compress(stored, _COMPRESSION_LEVEL)
            known = (leaf_address(self._context, data), data, len(stored) - 1)
        self._seen[raw] = known
        address, data, body_bytes = known
        if address not in self._chunks:
            nests = kind in {_LIST, _DICT} and _REFERENCE_MARK in raw
            self._chunks[address] = Chunk(address, data, tuple(parts), body_bytes, nests)
        return address


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
                yield from reference_addresses(items)
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


def reference_addresses(record: tuple[Any, ...]) -> list[bytes]:
    """The addresses of a reference record, which must be ``("@", kind, [address, ...])``."""
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
class LeafContent:
    """A stored leaf verified, decompressed and (a list or dict leaf) parsed."""

    kind: str
    body: bytes
    elements: tuple[object, ...]
    """A list or dict leaf's entries, as unpickled (a dict leaf's are ``[key, value]`` pairs)."""
    may_reference: bool
    """Whether the body holds the reference tag's bytes; a leaf without them is never scanned.
    Kept once per leaf, not per entry: a frozen object per entry cost 2.9 ms of a 29 ms load at
    2,000 messages (10,000 entries)."""


class ChunkReader:
    """Collects stored leaves for one checkpoint's root and joins them into it.

    Args:
        context: The context the leaves were addressed in (this run's scope and format).
        root: The checkpoint's root, as :meth:`CheckpointCodec.open_chunked` returned it.
        budget: Most bytes the checkpoint's leaves may decompress to, all of them together; the
            join charges every reference against the same amount again.

    Only a leaf the root *reaches* is accepted: one it references, or one a leaf accepted before
    references. So whatever else a fetch returned (a hint names addresses; a collection writer can
    plant documents at addresses computed from public inputs) never reaches zlib or the
    unpickler: a leaf is verified against an address the root's own bytes named, then
    decompressed, then parsed. Leaves nest at most ``MAX_NESTING`` levels. A reader joins its root once: the
    join splices the parsed leaves into it in place.
    """

    __slots__ = (
        "_budget",
        "_context",
        "_inflated",
        "_leaves",
        "_levels",
        "_reachable",
        "_root",
        "joined_bytes",
    )

    def __init__(self, context: bytes, root: object, *, budget: int) -> None:
        self._context = context
        self._root = root
        self._budget = budget
        self._leaves: dict[bytes, LeafContent] = {}
        self._levels = 0
        self._reachable: set[bytes] = set(references(root))
        self._inflated = 0
        self.joined_bytes = 0
        """Decompressed bytes of the leaves added so far (each once)."""

    def add(self, address: object, data: object) -> None:
        """Verify a fetched leaf against its address, decompress it within what is left of the
        budget, and parse it.

        Raises:
            MongoDBMappingError: The root reaches no leaf at this address (yet), or the bytes do
                not match the address, do not decompress within the budget, or do not hold a leaf
                this codec writes.
        """
        if type(address) is not bytes or type(data) is not bytes:
            raise MongoDBMappingError("A stored checkpoint chunk lacks its address or data.")
        if address in self._leaves:
            return
        if address not in self._reachable:
            raise MongoDBMappingError("A stored checkpoint chunk is not one its checkpoint references.")
        leaf = load_leaf(self._context, self._budget - self._inflated, address, data)
        self._inflated += len(leaf.body) + 1
        self.joined_bytes += len(leaf.body)
        self._leaves[address] = leaf
        if leaf.may_reference:
            for element in leaf.elements:
                self._reachable.update(references(element))

    def wanted(self) -> set[bytes]:
        """Addresses the root reaches, directly or through the added leaves, not added yet.

        Raises:
            MongoDBMappingError: Leaves reference leaves more than ``MAX_NESTING`` levels deep.
        """
        wanted = self._reachable - self._leaves.keys()
        if wanted:
            # Each call that names leaves is one level deeper than the leaves added before it.
            self._levels += 1
            if self._levels > MAX_LEVELS:
                raise MongoDBMappingError("A stored checkpoint's chunks nest too deeply.")
        return wanted

    def join(self) -> object:
        """The root with every reference replaced by its leaves' content, spliced in place.

        Raises:
            MongoDBMappingError: A referenced leaf is missing or of another kind, an entry or
                piece is malformed, the joined content exceeds the budget, or the tree nests
                too deeply to splice.
        """
        # The splice recurses through the root's and the elements' containers; a stored tree
        # deeper than the interpreter's stack (the rebuild would refuse it past MAX_NESTING
        # anyway) must end as the rebuild's does, not as a RecursionError.
        try:
            return _Joiner(self._leaves, self._budget).splice(self._root)
        except RecursionError:
            raise MongoDBMappingError("A stored checkpoint's chunked tree is nested too deeply.") from None


def load_leaf(context: bytes, budget: int, address: object, data: object) -> LeafContent:
    """A stored leaf verified against its address, decompressed within ``budget`` and parsed:
    the load path, shared by :meth:`ChunkReader.add`, :func:`prove_chunk` and the transplant."""
    if type(address) is not bytes or type(data) is not bytes:
        raise MongoDBMappingError("A stored checkpoint chunk lacks its address or data.")
    if not hmac.compare_digest(leaf_address(context, data), address):
        raise MongoDBMappingError(
            "A stored checkpoint chunk does not match its address; it is corrupt, was modified, or "
            "belongs to another run."
        )
    raw = _decompress(data, budget)
    kind, body = raw[:1].decode("ascii", "replace"), raw[1:]
    if kind not in _KINDS:
        raise MongoDBMappingError("A stored checkpoint chunk is of an unknown kind.")
    if kind in {_LIST, _DICT}:
        return LeafContent(kind, body, _parse(body), _REFERENCE_MARK in body)
    return LeafContent(kind, body, (), False)


def _decompress(data: bytes, budget: int) -> bytes:
    # zlib reads a max_length of 0 as "no limit", so an exhausted budget is refused first.
    if budget < 1:
        raise MongoDBMappingError(
            "A stored checkpoint's chunks decompress to more than the checkpoint size limit."
        )
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(data, budget + 1)
    except zlib.error as error:
        raise MongoDBMappingError("A stored checkpoint chunk does not decompress.") from error
    if len(raw) > budget or inflater.unconsumed_tail or not inflater.eof or inflater.unused_data:
        raise MongoDBMappingError(
            "A stored checkpoint's chunks decompress to more than the checkpoint size limit, or a chunk "
            "is truncated or followed by other bytes."
        )
    if not raw:
        raise MongoDBMappingError("A stored checkpoint chunk is empty.")
    return raw


def join_cost(root: object, chunks: Sequence[Chunk]) -> int:
    """What joining ``root`` with ``chunks`` charges to a :class:`ChunkReader`'s budget: each
    reference, however often it is named and however deep, its leaf's body and
    ``REFERENCE_COST``. A save refuses a checkpoint whose join would exceed the budget its load
    will have, so every stored checkpoint loads again (a tree sharing one large string in many
    places pickles small, and joins large)."""
    by_address = {chunk.address: chunk for chunk in chunks}
    costs: dict[bytes, int] = {}

    def cost(address: bytes) -> int:
        known = costs.get(address)
        if known is None:
            chunk = by_address[address]
            known = chunk.body_bytes + REFERENCE_COST
            if chunk.nests:
                known += sum(cost(child) for part in chunk.parts for child in references(part))
            costs[address] = known
        return known

    return sum(cost(address) for address in references(root))


def prove_chunk(context: bytes, chunk: Chunk, *, budget: int) -> None:
    """Raise unless ``chunk.data`` loads back, through the load path, to exactly ``chunk.parts``.

    The save-time proof for a leaf the store does not hold yet: the same verification against
    the address, decompression under ``budget`` and restricted unpickling as
    :meth:`ChunkReader.add`, then a comparison with what the split placed in the leaf. It costs
    one decompression and one unpickling of the leaf. A chunk read from the store has no parts,
    so it never passes.

    Raises:
        MongoDBSerializationError: The chunk would not load, or would load to other parts.
    """
    try:
        leaf = load_leaf(context, budget, chunk.address, chunk.data)
    except MongoDBMappingError as error:
        raise MongoDBSerializationError(
            f"A checkpoint chunk would not load again, so it was not stored: {error}"
        ) from error
    loaded = (leaf.body,) if leaf.kind in {_STR, _BYTES} else leaf.elements
    # ==, as the codec's own round-trip proof: the loader keeps every scalar's exact type, and the
    # walk admits no NaN, so equal is the same tree.
    if loaded != chunk.parts:
        raise MongoDBSerializationError(
            "A checkpoint chunk would not load again, so it was not stored: its bytes load to other content."
        )


def _parse(body: bytes) -> tuple[object, ...]:
    """The elements of a list or dict leaf: one pickle of a non-empty list."""
    elements = load_tree(body)
    if type(elements) is not list or not elements:
        raise MongoDBMappingError("A stored checkpoint chunk's entries are truncated or malformed.")
    return tuple(cast("list[object]", elements))


class _Joiner:
    """One join: splices leaves into the root, charging every reference to the budget."""

    __slots__ = ("_leaves", "_remaining", "_seen", "_used")

    def __init__(self, leaves: Mapping[bytes, LeafContent], budget: int) -> None:
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
        addresses = reference_addresses(record)
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
            self.splice(element) if leaf.may_reference else element
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

    def _elements(self, address: bytes, leaf: LeafContent) -> tuple[object, ...]:
        # The first reference takes the elements parsed when the leaf was added; a leaf named
        # again is parsed again, because the rebuild refuses a container that appears twice.
        if address in self._used:
            return _parse(leaf.body)
        self._used.add(address)
        return leaf.elements

    def _leaf(self, address: bytes, kind: object) -> LeafContent:
        leaf = self._leaves.get(address)
        if leaf is None:
            raise MissingChunkError(
                "A chunk of the stored checkpoint is missing; it was removed or never written, so the "
                "checkpoint cannot be loaded."
            )
        if leaf.kind != kind:
            raise MongoDBMappingError("A stored checkpoint chunk is not of the kind its reference names.")
        self._remaining -= len(leaf.body) + REFERENCE_COST
        if self._remaining < 0:
            raise MongoDBMappingError("The stored checkpoint's chunks exceed the checkpoint size limit.")
        return leaf
