"""``CheckpointCodec``: a ``WorkflowCheckpoint`` to and from the bytes stored in MongoDB.

A converter, then bytes, in layers (``specs/codec.md``, ``docs/adr/0009-codec-v2.md``):

* :mod:`.walk` turns ``WorkflowCheckpoint.to_dict()`` into a tree of plain values and tagged
  records, and in the same pass its canonical identity (hash version 3);
* the tree is pickled (protocol 5): only built-in containers and scalars, so no global, reducer
  or extension code is ever written or needed;
* :mod:`.rebuild` unpickles with an unpickler that resolves nothing, validates the whole tree,
  and only then rebuilds objects by the codec's own rules;
* :mod:`.signing` adds an HMAC over the bytes and the document's identity, when keys are set.

``encode`` proves, before the storage does any I/O, that the exact bytes it returns load back
through ``decode``'s path to the same tree and rebuild to an equal checkpoint.
"""

from __future__ import annotations

import hashlib
import hmac
import pickle
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, cast

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from ...errors import MongoDBConfigurationError, MongoDBMappingError, MongoDBSerializationError
from .checkpoint_fields import SUPPORTED_PAYLOAD_VERSIONS, shape_problem
from .rebuild import load_tree, rebuild_tree
from .rules import TypeRefusal, TypeResolver, type_key
from .walk import CANONICAL_HASH_VERSION, CANONICAL_HEADER, walk_value

__all__ = [
    "CANONICAL_HASH_VERSION",
    "CANONICAL_HEADER",
    "CHECKSUM_ALGORITHM",
    "PAYLOAD_FORMAT",
    "PICKLE_PROTOCOL",
    "SUPPORTED_PAYLOAD_VERSIONS",
    "CheckpointCodec",
    "EncodedCheckpoint",
    "canonical_form",
    "canonical_hash",
    "payload_checksum",
]

PAYLOAD_FORMAT: Final[str] = "tree-pickle-5/v2"
"""Format of the stored payload: a protocol-5 pickle of the plain tree of
``WorkflowCheckpoint.to_dict()`` (``specs/codec.md``). A reader refuses any other value;
``"pickle-5/v1"`` documents were written by the first codec, whose loader is not safe."""

PICKLE_PROTOCOL: Final = 5

CHECKSUM_ALGORITHM: Final[str] = "sha256"
"""Algorithm of :attr:`EncodedCheckpoint.payload_checksum`; part of :data:`PAYLOAD_FORMAT`."""


@dataclass(frozen=True, slots=True)
class EncodedCheckpoint:
    """A checkpoint ready to store.

    Attributes:
        payload: The exact bytes to store as BSON binary.
        payload_hash: Hex SHA-256 of the canonical form (hash version 3): the checkpoint's
            identity for idempotent retries and conflict detection.
        payload_checksum: Hex SHA-256 of ``payload``; verified on every load before unpickling.
    """

    payload: bytes
    payload_hash: str
    payload_checksum: str


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

    def encode(self, checkpoint: WorkflowCheckpoint) -> EncodedCheckpoint:
        """Return the payload, canonical hash and checksum of ``checkpoint``.

        Raises:
            MongoDBSerializationError: The checkpoint cannot be stored losslessly or loaded
                again: a class not allowed, state the codec cannot read, an exception raised by
                application code while reading state, or bytes that do not restore equal.
            MongoDBMappingError: A cycle, a non-finite number, a value of unsupported type or
                nesting deeper than the interpreter allows.
        """
        public = _public_dict(checkpoint)
        walked = walk_value(public, self._resolver)
        try:
            payload = pickle.dumps(walked.tree, protocol=PICKLE_PROTOCOL)
        except RecursionError:
            raise MongoDBMappingError("Checkpoint state is nested too deeply to pickle.") from None
        self._prove_round_trip(payload, walked.tree)
        return EncodedCheckpoint(
            payload=payload,
            payload_hash=hashlib.sha256(walked.canonical).hexdigest(),
            payload_checksum=payload_checksum(payload),
        )

    def decode(self, payload: bytes, *, checksum: str) -> WorkflowCheckpoint:
        """Verify, unpickle (no globals), validate and rebuild a stored checkpoint.

        Raises:
            MongoDBMappingError: Checksum mismatch, bytes this codec did not write, a class not
                allowed, or a value a save would have refused.
        """
        # compare_digest refuses non-ASCII text with a TypeError; such a checksum is simply wrong.
        if not checksum.isascii() or not hmac.compare_digest(payload_checksum(payload), checksum):
            raise MongoDBMappingError(
                "Checkpoint payload does not match its checksum; the stored document is corrupt or "
                "was modified outside this storage."
            )
        return self._rebuild(load_tree(payload), len(payload))

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

    def _prove_round_trip(self, payload: bytes, tree: object) -> None:
        """Raise unless ``payload`` decodes, through the load path, to ``tree`` and rebuilds.

        The walk and the rebuild read and write state through the same descriptors, so a tree
        that comes back equal rebuilds to a checkpoint whose walk is that tree again
        (``tests/unit/codec/test_codec_properties.py`` checks this for every kind of value).
        """
        try:
            loaded = load_tree(payload)
            same = loaded == tree
            if same:
                self._rebuild(loaded, len(payload))
        except MongoDBMappingError as error:
            raise MongoDBSerializationError(
                f"Checkpoint would not load again, so it was not stored: {error}"
            ) from error
        if not same:
            raise MongoDBSerializationError(
                "Checkpoint would not load again, so it was not stored: the bytes decode to another tree."
            )


def canonical_form(value: object, allowed_checkpoint_types: Iterable[str | type] = ()) -> bytes:
    """Return the canonical encoding (hash version 3) of ``value``, header included."""
    return walk_value(value, _resolver(allowed_checkpoint_types)).canonical


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
