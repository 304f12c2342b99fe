"""Moving a chunked checkpoint's stored form into another run's chunk context, without decoding it.

A chunk's address binds its run (``chunks.py``), so a fork cannot reference the source's leaves:
the copy's leaves must be addressed under the target's context, and a leaf or root that references
them changes with them. Decoding each checkpoint and saving it again re-walks, re-hashes and
re-splits the whole state per checkpoint (``docs/adr/0036-fork-a-run.md``); a transplant rewrites
only the stored bytes (``docs/adr/0040-fork-transplants-stored-leaves.md``):

* a leaf that references no other leaf (a piece of a string or bytes value, or a list or dict leaf
  whose body lacks the reference tag) keeps its exact bytes, and only its address is computed
  again under the target's context;
* the leaves of a list or dict whose elements reference further leaves are cut again by the
  splitter's own :meth:`~.chunks.Chunker.regroup` from their elements, with the nested references
  rewritten first (bottom-up): an element's pickle, and so where a content-defined tail is cut,
  depends on the addresses it holds;
* the root's reference records name the new addresses, and its pickle is written again.

**The invariant** (``tests/unit/codec/test_transplant.py``, property-tested): the transplant of
``split(tree)`` under context A is, byte for byte, ``split(tree)`` under context B, root and every
leaf, so a later save in the target stores only what is new. It holds because the splitter's output
depends on the context only through the addresses in the records and where a tail is cut, and the
number of addresses of each record then decides everything above it (a record's pickle's length,
and the estimated size of its container). So a record whose leaves are cut into another *number*
of leaves under the target, or a root whose pickle does not come back as stored (its sharing is
by identity), is :class:`NotTransplantable`: the caller decodes and saves that checkpoint instead.
Nothing else is a matter of bytes: the identity hash (``payload_hash``) is a hash of the
canonical state, which a transplant leaves as it is.

**Parsing.** Nothing is parsed before it is verified: the root against its checksum (which, with
keys, the envelope's signature binds), each leaf against the source address a verified root or
leaf named. Leaves are decompressed under the loader's budget and parsed by the loader's restricted
unpickler (``rebuild.load_tree``: no global, no extension code), reference records located in the
parsed structure, never by searching bytes. A reference whose leaf is missing, malformed or of
another kind, a record that is malformed, leaves that nest too deeply or join beyond the budget,
raise ``MongoDBMappingError`` (``MissingChunkError`` for a missing leaf) before anything of the
checkpoint is returned. What a transplant does not check is whether the state is one the codec
would rebuild (classes allowed, records well formed): it copies, byte for byte, a checkpoint whose
bytes verified, and the copy loads, or is refused, as the source does.
"""

from __future__ import annotations

import dataclasses
import hmac
import pickle
from collections.abc import Iterable, Mapping
from typing import Any, Final, cast

from ...errors import MongoDBMappingError
from . import CHUNKED_PAYLOAD_FORMAT, PICKLE_PROTOCOL, EncodedCheckpoint, payload_checksum
from .checkpoint_fields import SUPPORTED_PAYLOAD_VERSIONS
from .chunks import (
    MAX_LEVELS,
    REFERENCE_TAG,
    Chunk,
    Chunker,
    MissingChunkError,
    join_cost,
    leaf_address,
    load_leaf,
    prove_chunk,
    reference_addresses,
    references,
)
from .rebuild import load_tree

__all__ = ["NotTransplantable", "RootHeading", "Transplanter", "root_heading"]

_PIECES: Final = frozenset({"s", "b"})
"""Kinds of leaf that hold a piece of one string or bytes value: never a reference."""


class NotTransplantable(Exception):
    """The checkpoint's stored form cannot be moved byte-exactly; decode and save it instead."""


@dataclasses.dataclass(frozen=True, slots=True)
class RootHeading:
    """What a save's envelope records of a checkpoint, read from its root's top level."""

    checkpoint_id: str
    previous_checkpoint_id: str | None
    workflow_name: str
    version: str
    waiting_for_input: bool
    """Whether it holds pending requests (the run's counter records it for ``list_runs``)."""


def root_heading(root: object) -> RootHeading:
    """The envelope's fields from a parsed root's top level (the walked ``to_dict()``).

    Raises:
        MongoDBMappingError: The top level is not a checkpoint's, or its version is unknown.
    """
    fields = cast("dict[str, Any]", root) if type(root) is dict else {}
    checkpoint_id = fields.get("checkpoint_id")
    previous = fields.get("previous_checkpoint_id")
    workflow = fields.get("workflow_name")
    version = fields.get("version")
    pending = fields.get("pending_request_info_events")
    if (
        type(checkpoint_id) is not str
        or (previous is not None and type(previous) is not str)
        or type(workflow) is not str
        or type(version) is not str
        or type(pending) not in {dict, tuple}
    ):
        raise MongoDBMappingError("Checkpoint payload is not a checkpoint this codec writes.")
    if version not in SUPPORTED_PAYLOAD_VERSIONS:
        raise MongoDBMappingError(
            f"Checkpoint payload's version {version[:20]!r} is not one this build restores."
        )
    # A dict of pending requests, a record of one with other keys ("m", key, value, ...), or a
    # reference to a split one (never empty: only what exceeds the threshold is split).
    waiting = len(cast("dict[str, object] | tuple[object, ...]", pending)) > (
        0 if type(pending) is dict else 1
    )
    return RootHeading(checkpoint_id, previous, workflow, version, waiting)


@dataclasses.dataclass(frozen=True, slots=True)
class _Moved:
    """A source leaf, verified and parsed once per fork."""

    kind: str
    as_is: Chunk
    """The leaf's exact bytes under the target's address: its copy, unless it ``nests``."""
    nests: bool
    """Whether it references further leaves (then its bytes change, and its list is cut again)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Regrouped:
    addresses: list[bytes]
    chunks: tuple[Chunk, ...]
    """The record's new leaves and every leaf they reference, bottom-up."""


class Transplanter:
    """Moves one fork's chunked checkpoints from the source's chunk context to the target's.

    Args:
        source: The source run's chunk context, which its leaves' addresses cover.
        target: The target run's chunk context.
        max_checkpoint_bytes: Each checkpoint's budget, as its load has it: what its leaves
            decompress to and what its references join to.
        chunker: Cuts the lists whose elements reference leaves; the target's split settings.

    Each distinct source leaf is verified and parsed once per fork, however many checkpoints
    reference it; the whole fork's leaves are held, as their stored bytes, until it ends.
    """

    __slots__ = (
        "_budget",
        "_chunker",
        "_fetched",
        "_moved",
        "_records",
        "_remaining",
        "_source",
        "_target",
    )

    def __init__(
        self, source: bytes, target: bytes, *, max_checkpoint_bytes: int, chunker: Chunker | None = None
    ) -> None:
        self._source = source
        self._target = target
        self._budget = max_checkpoint_bytes
        self._chunker = Chunker(target) if chunker is None else chunker
        self._moved: dict[bytes, _Moved] = {}
        self._records: dict[tuple[str, tuple[bytes, ...]], _Regrouped] = {}
        self._fetched: Mapping[bytes, object] = {}
        self._remaining = max_checkpoint_bytes
        """What the checkpoint being moved may still decompress: its leaves not moved before."""

    def open(self, payload: bytes, checksum: str) -> object:
        """A root's stored bytes, verified against ``checksum`` and then parsed (restricted).

        Raises:
            MongoDBMappingError: The bytes do not match the checksum, or are not a pickle of
                plain values.
        """
        if not checksum.isascii() or not hmac.compare_digest(payload_checksum(payload), checksum):
            raise MongoDBMappingError(
                "Checkpoint payload does not match its checksum; the stored document is corrupt or "
                "was modified outside this storage."
            )
        return load_tree(payload)

    def wanted(self, root: object, nested: Iterable[bytes]) -> set[bytes]:
        """The leaves a parsed root names (its references and its document's nested hint) that
        this fork has not moved yet: what to fetch before :meth:`transplant`."""
        return (set(references(root)) | set(nested)) - self._moved.keys()

    def offer(self, leaves: Mapping[bytes, object]) -> None:
        """Fetched leaves (unverified: each is verified against the address that names it when a
        transplant reaches it), for the transplants until the next offer."""
        self._fetched = leaves

    def transplant(
        self, payload: bytes, root: object, *, payload_hash: str, logical_bytes: int
    ) -> EncodedCheckpoint:
        """The checkpoint stored as ``payload`` (parsed by :meth:`open` as ``root``), as a save
        into the target would have encoded it.

        Raises:
            NotTransplantable: The stored form cannot be moved byte-exactly.
            MissingChunkError: A referenced leaf was neither moved nor offered.
            MongoDBMappingError: A leaf or record is malformed, of another kind, nests too deeply,
                or the checkpoint's leaves exceed its budget.
        """
        if pickle.dumps(root, protocol=PICKLE_PROTOCOL) != payload:
            # The root's pickle shares strings by identity; a root that does not come back as
            # stored would be written with other sharing than a save of its tree.
            raise NotTransplantable("the root does not pickle back to its stored bytes")
        chunks: dict[bytes, Chunk] = {}
        self._remaining = self._budget
        try:
            moved = self._map(root, chunks, 0)
        except RecursionError:
            raise MongoDBMappingError("A stored checkpoint's chunked tree is nested too deeply.") from None
        self._chunker.settle()
        written = pickle.dumps(moved, protocol=PICKLE_PROTOCOL)
        if len(written) != len(payload):
            raise NotTransplantable("the root's references are shared otherwise than stored")
        leaves = tuple(chunks.values())
        if join_cost(moved, leaves) > self._budget:
            raise MongoDBMappingError("The stored checkpoint's chunks exceed the checkpoint size limit.")
        direct = set(references(moved))
        return EncodedCheckpoint(
            payload=written,
            payload_hash=payload_hash,
            payload_checksum=payload_checksum(written),
            payload_format=CHUNKED_PAYLOAD_FORMAT,
            chunks=leaves,
            nested=tuple(chunk.address for chunk in leaves if chunk.address not in direct),
            logical_bytes=logical_bytes,
        )

    def _map(self, node: object, chunks: dict[bytes, Chunk], level: int) -> object:
        """``node`` with every reference record naming the target's leaves (containers copied,
        scalars kept: the root's pickle shares them by identity, and so must its copy's)."""
        cls = type(node)
        if cls is tuple:
            items = cast("tuple[Any, ...]", node)
            if items and items[0] == REFERENCE_TAG:
                return (items[0], items[1], self._record(items, chunks, level))
            return tuple(self._map(item, chunks, level) for item in items)
        if cls is list:
            return [self._map(item, chunks, level) for item in cast("list[Any]", node)]
        if cls is dict:
            return {key: self._map(item, chunks, level) for key, item in cast("dict[str, Any]", node).items()}
        return node

    def _record(self, record: tuple[Any, ...], chunks: dict[bytes, Chunk], level: int) -> list[bytes]:
        if level >= MAX_LEVELS:
            raise MongoDBMappingError("A stored checkpoint's chunks nest too deeply.")
        addresses = reference_addresses(record)
        kind = cast("str", record[1])
        leaves = [self._leaf(address, kind) for address in addresses]
        if not any(leaf.nests for leaf in leaves):
            for leaf in leaves:
                chunks.setdefault(leaf.as_is.address, leaf.as_is)
            return [leaf.as_is.address for leaf in leaves]
        regrouped = self._regrouped(kind, addresses, leaves, level)
        for chunk in regrouped.chunks:
            chunks.setdefault(chunk.address, chunk)
        return list(regrouped.addresses)

    def _leaf(self, address: bytes, kind: str) -> _Moved:
        """The source leaf at ``address``, verified, decompressed within the budget and parsed
        on first use."""
        moved = self._moved.get(address)
        if moved is None:
            data = self._fetched.get(address)
            if data is None:
                raise MissingChunkError(
                    "A chunk of the stored checkpoint is missing; it was removed or never written."
                )
            leaf = load_leaf(self._source, self._remaining, address, data)
            self._remaining -= len(leaf.body) + 1
            stored = cast("bytes", data)
            moved = _Moved(
                leaf.kind,
                Chunk(leaf_address(self._target, stored), stored, body_bytes=len(leaf.body)),
                leaf.may_reference,
            )
            self._moved[address] = moved
        if moved.kind != kind:
            raise MongoDBMappingError("A stored checkpoint chunk is not of the kind its reference names.")
        return moved

    def _regrouped(self, kind: str, addresses: list[bytes], leaves: list[_Moved], level: int) -> _Regrouped:
        """A list's or dict's leaves of which some reference further leaves: their elements with
        those references moved, cut again as the splitter cuts them (once per fork per record)."""
        key = (kind, tuple(addresses))
        known = self._records.get(key)
        if known is not None:
            return known
        nested: dict[bytes, Chunk] = {}
        parts: list[object] = []
        for address, leaf in zip(addresses, leaves, strict=True):
            # Verified and parsed before; parsed again here, so no fork holds the parsed state.
            elements = load_leaf(self._source, self._budget, address, leaf.as_is.data).elements
            if leaf.nests:
                parts.extend(self._map(element, nested, level + 1) for element in elements)
            else:
                parts.extend(elements)
        cut, leaves_of_record = self._chunker.regroup(kind, parts)
        if len(cut) != len(addresses):
            raise NotTransplantable(
                "a list whose elements reference leaves is cut into another number of leaves"
            )
        for chunk in leaves_of_record:
            prove_chunk(self._target, chunk, budget=self._budget)
        known = _Regrouped(cut, (*nested.values(), *leaves_of_record))
        self._records[key] = known
        return known
