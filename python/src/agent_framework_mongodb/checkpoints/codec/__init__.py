"""``CheckpointCodec``: a ``WorkflowCheckpoint`` to and from the bytes stored in MongoDB.

A converter, then bytes, in layers (``specs/codec.md``, ``docs/adr/0009-codec-v2.md``):

* :mod:`.walk` turns ``WorkflowCheckpoint.to_dict()`` into a tree of plain values and tagged
  records, and in the same pass its canonical identity (hash version 3);
* the tree is pickled (protocol 5): only built-in containers and scalars, so no global, reducer
  or extension code is ever written or needed;
* :mod:`.rebuild` unpickles with an unpickler that resolves nothing, validates the whole tree,
  and only then rebuilds objects by the codec's own rules;
* :mod:`.signing` adds an HMAC over the bytes and the document's identity, when keys are set;
* with :class:`ChunkSettings`, :mod:`.chunks` splits a large tree into content-addressed leaves
  the run stores once (format :data:`CHUNKED_PAYLOAD_FORMAT`, ``docs/adr/0018-chunked-payloads.md``).

``encode`` proves, before the storage does any I/O, that the exact bytes it returns load back
through ``decode``'s unpickler to the tree the walk made, and that the rebuild will accept that
tree: the walk enforced the rebuild's rules as it went, so only what depends on the bytes is
checked again (``docs/adr/0027-proof-by-the-walk.md``).
"""

from __future__ import annotations

import hashlib
import hmac
import pickle
from collections.abc import Container, Generator, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, cast

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from ...errors import MongoDBConfigurationError, MongoDBMappingError, MongoDBSerializationError
from .checkpoint_fields import SUPPORTED_PAYLOAD_VERSIONS, shape_problem
from .chunks import (
    CHUNK_FORMAT,
    DEFAULT_SPLIT_ABOVE,
    Chunk,
    Chunker,
    ChunkReader,
    join_cost,
    prove_chunk,
    references,
)
from .framework_modules import import_framework_modules
from .rebuild import COPY_ALLOWANCE, COPY_FACTOR, load_tree, rebuild_tree
from .rules import TypeRefusal, TypeResolver, type_key
from .walk import CANONICAL_HASH_VERSION, CANONICAL_HEADER, Walked, walk_value

__all__ = [
    "CANONICAL_HASH_VERSION",
    "CANONICAL_HEADER",
    "CHECKSUM_ALGORITHM",
    "CHUNKED_PAYLOAD_FORMAT",
    "DEFAULT_MAX_CHECKPOINT_BYTES",
    "PAYLOAD_FORMAT",
    "PICKLE_PROTOCOL",
    "SUPPORTED_PAYLOAD_VERSIONS",
    "CheckpointCodec",
    "ChunkSettings",
    "EncodedCheckpoint",
    "canonical_form",
    "canonical_hash",
    "payload_checksum",
]

PAYLOAD_FORMAT: Final[str] = "tree-pickle-5/v2"
"""Format of the stored payload: a protocol-5 pickle of the plain tree of
``WorkflowCheckpoint.to_dict()`` (``specs/codec.md``). A reader refuses any other value;
``"pickle-5/v1"`` documents were written by the first codec, whose loader is not safe."""

CHUNKED_PAYLOAD_FORMAT: Final[str] = CHUNK_FORMAT
"""Format of a chunked checkpoint's payload: a protocol-5 pickle of the tree with its large parts
replaced by references to content-addressed leaves stored as chunk documents of the same run
(``codec/chunks.py``). Written only for a checkpoint whose tree pickles to more than
:data:`~.chunks.DEFAULT_SPLIT_ABOVE` bytes; smaller ones stay :data:`PAYLOAD_FORMAT`."""

DEFAULT_MAX_CHECKPOINT_BYTES: Final = 256 * 1024 * 1024
"""Largest checkpoint (its whole tree's pickle) a chunking storage saves or loads by default."""

PICKLE_PROTOCOL: Final = 5

CHECKSUM_ALGORITHM: Final[str] = "sha256"
"""Algorithm of :attr:`EncodedCheckpoint.payload_checksum`; part of :data:`PAYLOAD_FORMAT`."""


@dataclass(frozen=True, slots=True)
class EncodedCheckpoint:
    """A checkpoint ready to store.

    Attributes:
        payload: The exact bytes to store as BSON binary (for a chunked checkpoint, its root).
        payload_hash: Hex SHA-256 of the canonical form (hash version 3): the checkpoint's
            identity for idempotent retries and conflict detection.
        payload_checksum: Hex SHA-256 of ``payload``; verified on every load before unpickling.
        payload_format: :data:`PAYLOAD_FORMAT`, or :data:`CHUNKED_PAYLOAD_FORMAT` when
            ``chunks`` holds the leaves ``payload`` references.
        chunks: Every leaf the checkpoint references, directly or through other leaves, each once.
        nested: The addresses that only leaves reference (a load fetches them with the root's).
        logical_bytes: The size of the whole tree's pickle: what the checkpoint would store as one
            document, and what :data:`DEFAULT_MAX_CHECKPOINT_BYTES` bounds.
    """

    payload: bytes
    payload_hash: str
    payload_checksum: str
    payload_format: str = PAYLOAD_FORMAT
    chunks: tuple[Chunk, ...] = field(default=(), repr=False)
    nested: tuple[bytes, ...] = field(default=(), repr=False)
    logical_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ChunkSettings:
    """How a save may split a large checkpoint into chunks.

    Attributes:
        context: Bytes every chunk address covers (the run's scope and the format), so a chunk
            of another run never matches.
        max_checkpoint_bytes: Largest whole-tree pickle accepted; above it a save is refused.
        proven: Addresses of chunks this run already stored after proving them; their bytes
            are not proven again (the storage remembers what it wrote).
        chunker: The run's :class:`~.chunks.Chunker` for ``context``, which compresses only the
            leaves its last split did not hold; a new one per save when ``None``.
    """

    context: bytes
    max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES
    proven: Container[bytes] = frozenset[bytes]()
    chunker: Chunker | None = None


def payload_checksum(payload: bytes) -> str:
    """Return the integrity checksum of stored payload bytes."""
    return hashlib.sha256(payload).hexdigest()


class CheckpointCodec:
    """Encodes and decodes checkpoints; one instance per storage, safe to share across tasks.

    Args:
        allowed_checkpoint_types: Application classes, or their ``"module:qualname"`` names,
            that checkpoints may contain besides standard values and Agent Framework's families.
    """

    __slots__ = ("_resolver",)

    def __init__(self, allowed_checkpoint_types: Iterable[str | type] = ()) -> None:
        # Before any payload: the framework's lazily imported modules, so its classes resolve in a
        # process that only reads checkpoints (framework_modules.py).
        import_framework_modules()
        self._resolver = _resolver(allowed_checkpoint_types)

    def check_allowed_types(self) -> None:
        """Import every listed class's module and check that each name leads to a class.

        Raises:
            MongoDBConfigurationError: An entry's module is not found or fails to import, or
                the name leads to no class; the entry and the reason are named.
        """
        try:
            self._resolver.check_allowed()
        except TypeRefusal as refusal:
            raise MongoDBConfigurationError(str(refusal)) from refusal

    def encode(
        self, checkpoint: WorkflowCheckpoint, *, chunking: ChunkSettings | None = None
    ) -> EncodedCheckpoint:
        """Return the payload, canonical hash and checksum of ``checkpoint``.

        With ``chunking``, a checkpoint whose tree pickles to more than
        :data:`~.chunks.DEFAULT_SPLIT_ABOVE` bytes is split into chunks, and one larger than
        ``max_checkpoint_bytes`` is refused.

        Raises:
            MongoDBSerializationError: The checkpoint cannot be stored losslessly or loaded
                again: a class not allowed, state the codec cannot read, an exception raised by
                application code while reading state, or bytes that do not restore equal.
            MongoDBMappingError: A cycle, a non-finite number, a value of unsupported type or
                nesting deeper than the interpreter allows.
        """
        public = _public_dict(checkpoint)
        walked = walk_value(public, self._resolver)
        payload_hash = hashlib.sha256(walked.canonical).hexdigest()
        # Only hashed: released before the pickle and the proof, so it never adds to their peak.
        walked.canonical = b""
        payload = _pickled(walked.tree)
        if chunking is not None and len(payload) > chunking.max_checkpoint_bytes:
            raise MongoDBSerializationError(
                f"The checkpoint is {len(payload):,} bytes encoded, more than this storage's "
                f"max_checkpoint_bytes ({chunking.max_checkpoint_bytes:,}); nothing was written. Keep "
                "large artefacts outside the workflow state and store references to them instead."
            )
        if chunking is not None and len(payload) > DEFAULT_SPLIT_ABOVE:
            chunker = chunking.chunker or Chunker(chunking.context)
            split = chunker.split(walked.tree)
            if split.chunks:
                # Stored as a root and leaves, which _chunked proves load back to the parts the
                # split made; their join is the walked tree (test_chunks.py), so the whole pickle
                # is not loaded again: it only measures the checkpoint.
                return _chunked(
                    walked,
                    split.root,
                    split.chunks,
                    payload_hash=payload_hash,
                    logical_bytes=len(payload),
                    chunking=chunking,
                )
        self._prove_round_trip(payload, walked)
        return EncodedCheckpoint(
            payload=payload,
            payload_hash=payload_hash,
            payload_checksum=payload_checksum(payload),
            logical_bytes=len(payload),
        )

    def decode(self, payload: bytes, *, checksum: str) -> WorkflowCheckpoint:
        """Verify, unpickle (no globals), validate and rebuild a stored checkpoint.

        Raises:
            MongoDBMappingError: Checksum mismatch, bytes this codec did not write, a class not
                allowed, or a value a save would have refused.
        """
        _require_checksum(payload, checksum)
        return self._rebuild(load_tree(payload), len(payload))

    def open_chunked(self, payload: bytes, *, checksum: str) -> object:
        """Verify and unpickle (no globals) a chunked checkpoint's root; its references are left
        for :meth:`decode_chunked` to resolve with the fetched chunks.

        Raises:
            MongoDBMappingError: Checksum mismatch, or bytes this codec did not write.
        """
        _require_checksum(payload, checksum)
        return load_tree(payload)

    def decode_chunked(self, reader: ChunkReader, *, root_bytes: int) -> WorkflowCheckpoint:
        """Join a chunked root (from :meth:`open_chunked`) with the verified leaves its reader
        holds, then validate and rebuild the whole tree as :meth:`decode` does.

        Raises:
            MongoDBMappingError: A leaf is missing, malformed or over the reader's budget, or the
                joined tree is not one a save would have written.
        """
        tree = reader.join()
        return self._rebuild(tree, root_bytes + reader.joined_bytes)

    def _rebuild(self, tree: object, payload_size: int) -> WorkflowCheckpoint:
        public = cast(
            "dict[str, Any]",
            rebuild_tree(tree, self._resolver, check_root=_check_loaded_shape, payload_size=payload_size),
        )
        try:
            return WorkflowCheckpoint.from_dict(public)
        except (WorkflowCheckpointException, TypeError) as error:
            raise MongoDBMappingError(
                "Checkpoint payload does not hold the fields of a WorkflowCheckpoint; it was not written "
                "by this codec or by a compatible Agent Framework release."
            ) from error

    def _prove_round_trip(self, payload: bytes, walked: Walked) -> None:
        """Raise unless ``payload`` decodes, through the load path, to the tree the walk made, and
        the load's rebuild would accept it.

        The load path's own unpickler reads the exact bytes, and C-level equality holds them to
        the walked tree. What the rebuild's validation checks of such a tree the walk already
        enforced by the same rules (``docs/adr/0027-proof-by-the-walk.md``): plain types and
        tagged records of the codec's forms only, finite numbers, no container or record placed
        twice, the same nesting bound, hash-safe and distinct keys and members, classes resolved
        by the same resolver, attribute names and pydantic slots by the same checks. Left for
        this proof are the two things that depend on the bytes: the top level's shape as loaded
        and the copy budget, which the payload's size sets.
        """
        with _refused_unless_it_loads():
            loaded = load_tree(payload)
            _require_same(loaded, walked.tree, "the bytes decode to another tree")
            _require_loadable(loaded, walked.copied, len(payload))


_NOT_STORED: Final = "Checkpoint would not load again, so it was not stored"


@contextmanager
def _refused_unless_it_loads() -> Generator[None]:
    """A save's proof: what the load path refuses becomes the save's refusal."""
    try:
        yield
    except MongoDBMappingError as error:
        raise MongoDBSerializationError(f"{_NOT_STORED}: {error}") from error


def _require_loadable(tree: object, copied: int, payload_size: int) -> None:
    """What of the load's rebuild the walk cannot vouch for: the top level's shape as stored, and
    the copy budget, which the payload's size sets (``rebuild.COPY_FACTOR``)."""
    _check_loaded_shape(cast("dict[str, Any]", tree))
    if copied > COPY_FACTOR * payload_size + COPY_ALLOWANCE:
        raise MongoDBMappingError(
            "Checkpoint payload cannot be loaded: its records would copy far more data than the payload "
            "holds (one large bytearray, Decimal or path shared by many places); store it once and "
            "refer to it."
        )


def _require_same(loaded: object, written: object, difference: str) -> None:
    if loaded != written:
        raise MongoDBSerializationError(f"{_NOT_STORED}: {difference}.")


def _pickled(tree: object) -> bytes:
    try:
        return pickle.dumps(tree, protocol=PICKLE_PROTOCOL)
    except RecursionError:
        raise MongoDBMappingError("Checkpoint state is nested too deeply to pickle.") from None


def _require_checksum(payload: bytes, checksum: str) -> None:
    # compare_digest refuses non-ASCII text with a TypeError; such a checksum is simply wrong.
    if not checksum.isascii() or not hmac.compare_digest(payload_checksum(payload), checksum):
        raise MongoDBMappingError(
            "Checkpoint payload does not match its checksum; the stored document is corrupt or "
            "was modified outside this storage."
        )


def _chunked(
    walked: Walked,
    root: object,
    chunks: tuple[Chunk, ...],
    *,
    payload_hash: str,
    logical_bytes: int,
    chunking: ChunkSettings,
) -> EncodedCheckpoint:
    """The chunked encoding of ``walked``, once its root and every leaf not yet proven load back
    as split (their join is the walked tree: test_chunks.py), so the whole tree's pickle, which
    only measures the checkpoint, is not loaded again."""
    joined = join_cost(root, chunks)
    if joined > chunking.max_checkpoint_bytes:
        raise MongoDBSerializationError(
            f"The checkpoint would join to {joined:,} bytes of chunks on load, more than this storage's "
            f"max_checkpoint_bytes ({chunking.max_checkpoint_bytes:,}), so it was not stored; it repeats "
            "large values, which each place counts in full."
        )
    payload = _pickled(root)
    with _refused_unless_it_loads():
        _require_same(load_tree(payload), root, "its root decodes to another tree")
        for chunk in chunks:
            if chunk.address not in chunking.proven:
                prove_chunk(chunking.context, chunk, budget=chunking.max_checkpoint_bytes)
        # A chunked load's copy budget follows the root and the leaves it joins; the smaller of
        # that and the whole pickle holds for either reading.
        stored = len(payload) + sum(chunk.body_bytes for chunk in chunks)
        _require_loadable(walked.tree, walked.copied, min(logical_bytes, stored))
    direct = set(references(root))
    return EncodedCheckpoint(
        payload=payload,
        payload_hash=payload_hash,
        payload_checksum=payload_checksum(payload),
        payload_format=CHUNKED_PAYLOAD_FORMAT,
        chunks=chunks,
        nested=tuple(chunk.address for chunk in chunks if chunk.address not in direct),
        logical_bytes=logical_bytes,
    )


def canonical_form(value: object, allowed_checkpoint_types: Iterable[str | type] = ()) -> bytes:
    """Return the canonical encoding (hash version 3) of ``value``, header included."""
    return bytes(walk_value(value, _resolver(allowed_checkpoint_types)).canonical)


def canonical_hash(value: object, allowed_checkpoint_types: Iterable[str | type] = ()) -> str:
    """Return the hex SHA-256 of :func:`canonical_form` of ``value``: the idempotency identity."""
    return hashlib.sha256(canonical_form(value, allowed_checkpoint_types)).hexdigest()


def _resolver(allowed: Iterable[str | type]) -> TypeResolver:
    return TypeResolver(tuple(entry if isinstance(entry, str) else type_key(entry) for entry in allowed))


def _public_dict(checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
    if not isinstance(checkpoint, WorkflowCheckpoint):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise MongoDBSerializationError(
            f"Expected a WorkflowCheckpoint, got {type(checkpoint).__name__}."  # pyright: ignore[reportUnreachable]
        )
    public = checkpoint.to_dict()
    if type(public) is not dict:
        raise MongoDBSerializationError("WorkflowCheckpoint.to_dict() did not return a plain dict.")
    problem = shape_problem(public)
    if problem is not None:
        raise MongoDBSerializationError(f"Checkpoint cannot be stored: {problem}.")
    return public


def _check_loaded_shape(public: dict[str, Any]) -> None:
    problem = shape_problem(public, tree=True)
    if problem is not None:
        raise MongoDBMappingError(f"Checkpoint payload is not a checkpoint this codec writes: {problem}.")
