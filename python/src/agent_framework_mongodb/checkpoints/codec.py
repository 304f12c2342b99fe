"""``CheckpointCodec``: a ``WorkflowCheckpoint`` to and from the bytes stored in MongoDB.

The payload is a protocol-5 pickle of ``WorkflowCheckpoint.to_dict()``; pickle keeps framework
messages and application state lossless, which JSON cannot. Because pickle can run code, both
directions are controlled:

* :meth:`CheckpointCodec.encode` canonicalizes the state (the idempotency hash), pickles it with
  a pickler that ignores process-global reducers and vets every class first, then proves the
  exact bytes restore through the restricted load path to the same canonical value.
* :meth:`CheckpointCodec.decode` checks the integrity checksum, refuses extension codes, and
  unpickles resolving only standard value types, Agent Framework classes and allowed classes.

Everything here is CPU-only; the storage calls it before any I/O. See ``specs/codec.md``.
"""

from __future__ import annotations

import hashlib
import hmac
import pickle
from dataclasses import dataclass
from typing import Final, cast

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from ..errors import MongoDBMappingError, MongoDBSerializationError
from ._pickling import PICKLE_PROTOCOL, controlled_dumps, reject_extension_types
from ._unpickling import (
    TypePolicy,
    has_extension_registrations,
    reject_extension_opcodes,
    restricted_loads,
)
from .canonical import CANONICAL_HASH_VERSION, CanonicalWriter

__all__ = [
    "CANONICAL_HASH_VERSION",
    "CHECKSUM_ALGORITHM",
    "PAYLOAD_FORMAT",
    "CheckpointCodec",
    "EncodedCheckpoint",
    "payload_checksum",
]

PAYLOAD_FORMAT: Final[str] = "pickle-5/v1"
"""Format of the stored payload: pickle protocol 5 of ``WorkflowCheckpoint.to_dict()``, with a
SHA-256 checksum. Stored in every document; a reader must refuse any other value."""

CHECKSUM_ALGORITHM: Final[str] = "sha256"
"""Algorithm of :attr:`EncodedCheckpoint.payload_checksum`; part of :data:`PAYLOAD_FORMAT`."""

_PROTOCOL_PREFIX: Final = bytes((pickle.PROTO[0], PICKLE_PROTOCOL))


@dataclass(frozen=True, slots=True)
class EncodedCheckpoint:
    """A checkpoint ready to store.

    Attributes:
        payload: The exact bytes to store as BSON binary.
        payload_hash: Hex SHA-256 of the canonical form (hash version 2): the checkpoint's
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
        allowed_checkpoint_types: Application classes (``"module:qualname"``) that checkpoints
            may contain besides standard values and Agent Framework types. Listing a class lets
            the loader resolve it; it never permits custom pickle hooks.
    """

    __slots__ = ("_policy",)

    def __init__(self, allowed_checkpoint_types: tuple[str, ...] = ()) -> None:
        self._policy = TypePolicy(allowed_checkpoint_types)

    def encode(self, checkpoint: WorkflowCheckpoint) -> EncodedCheckpoint:
        """Return the payload, canonical hash and checksum of ``checkpoint``.

        Raises:
            MongoDBSerializationError: The checkpoint cannot be stored losslessly: an unsupported
                mapping, a class with pickle hooks or not allowed, a copyreg extension type, or
                bytes that do not restore to the same canonical value.
            MongoDBMappingError: A cycle, a non-finite number or a value of unsupported type.
        """
        state = _public_dict(checkpoint)
        if has_extension_registrations():
            reject_extension_types(state)
        writer = CanonicalWriter()  # shared by both walks of this save
        canonical = writer.form(state)
        try:
            payload = controlled_dumps(state, self._policy)
        except MongoDBMappingError:
            raise
        except RecursionError:
            raise MongoDBMappingError("Checkpoint state is nested too deeply to pickle.") from None
        except Exception as error:
            raise MongoDBSerializationError(
                f"Checkpoint state could not be pickled ({type(error).__name__})."
            ) from error
        self._prove_round_trip(payload, canonical, writer)
        return EncodedCheckpoint(
            payload=payload,
            payload_hash=hashlib.sha256(canonical).hexdigest(),
            payload_checksum=payload_checksum(payload),
        )

    def decode(self, payload: bytes, *, checksum: str) -> WorkflowCheckpoint:
        """Verify, unpickle (restricted) and rebuild a stored checkpoint.

        Raises:
            MongoDBMappingError: Checksum mismatch, a blocked or unknown class, extension codes,
                malformed or truncated bytes, or a value that is not a checkpoint dictionary.
        """
        if not hmac.compare_digest(payload_checksum(payload), checksum):
            raise MongoDBMappingError(
                "Checkpoint payload does not match its checksum; the stored document is corrupt or "
                "was modified outside this storage."
            )
        return _rebuild(self._load_dict(payload))

    def load_restricted(self, payload: bytes) -> object:
        """Unpickle ``payload`` through the restricted loader alone (no checksum, no checks).

        This is the benchmark baseline for :meth:`decode`; storage code must call ``decode``.
        """
        return restricted_loads(payload, self._policy)

    def _load_dict(self, payload: bytes) -> dict[str, object]:
        if payload[:2] != _PROTOCOL_PREFIX:
            raise MongoDBMappingError(
                f"Checkpoint payload is not a protocol-{PICKLE_PROTOCOL} pickle; it was not written "
                f"by this codec ({PAYLOAD_FORMAT})."
            )
        # With no extension registered or cached, EXT opcodes can only fail ("unregistered
        # extension code"), so the opcode scan is needed only when the registry is in use.
        scanned = has_extension_registrations()
        if scanned:
            reject_extension_opcodes(payload)
        try:
            value = restricted_loads(payload, self._policy)
        except MongoDBMappingError:
            raise
        except RecursionError:
            raise MongoDBMappingError("Checkpoint payload is nested too deeply to load.") from None
        except Exception as error:
            raise MongoDBMappingError(
                f"Checkpoint payload could not be unpickled ({type(error).__name__}); it is truncated, "
                "corrupt, or not a checkpoint written by this codec."
            ) from error
        if not scanned and has_extension_registrations():
            # A registration appeared while loading: vet the bytes before returning anything.
            reject_extension_opcodes(payload)
        if type(value) is not dict:
            raise MongoDBMappingError(
                f"Checkpoint payload holds a {type(value).__name__}, not a checkpoint dictionary."
            )
        return cast("dict[str, object]", value)

    def _prove_round_trip(self, payload: bytes, canonical: bytes, writer: CanonicalWriter) -> None:
        """Raise unless ``payload`` restores, via the load path, to ``state``'s canonical value."""
        try:
            restored = _rebuild(self._load_dict(payload)).to_dict()
        except MongoDBMappingError as error:
            raise MongoDBSerializationError(
                f"Checkpoint would not load again, so it was not stored: {error}"
            ) from error
        try:
            same = writer.form(restored) == canonical
        except MongoDBMappingError as error:
            raise MongoDBSerializationError(
                f"Checkpoint does not restore to an equivalent value, so it was not stored: {error}"
            ) from error
        if not same:
            raise MongoDBSerializationError(
                "Checkpoint does not restore to an equal value (a class pickles state its canonical "
                "form does not see, or vice versa), so it was not stored."
            )


def _public_dict(checkpoint: WorkflowCheckpoint) -> dict[str, object]:
    if not isinstance(checkpoint, WorkflowCheckpoint):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise MongoDBSerializationError(
            f"Expected a WorkflowCheckpoint, got {type(checkpoint).__name__}."  # pyright: ignore[reportUnreachable]
        )
    state = checkpoint.to_dict()
    if type(state) is not dict:
        raise MongoDBSerializationError("WorkflowCheckpoint.to_dict() did not return a plain dict.")
    return cast("dict[str, object]", state)


def _rebuild(state: dict[str, object]) -> WorkflowCheckpoint:
    try:
        return WorkflowCheckpoint.from_dict(state)
    except MongoDBMappingError:
        raise
    except (WorkflowCheckpointException, TypeError) as error:
        raise MongoDBMappingError(
            "Checkpoint payload does not hold the fields of a WorkflowCheckpoint; it was not written "
            "by this codec or by a compatible Agent Framework release."
        ) from error
