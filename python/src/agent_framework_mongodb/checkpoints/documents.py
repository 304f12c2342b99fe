"""The stored envelope of a checkpoint: building it without I/O, and gating it on load.

A checkpoint document is immutable once inserted. Its versions are independent gates: the
envelope layout (``schema_version``), the source of the payload (``framework_version``), the
checkpoint's own public ``version`` (``payload_version``), the codec's format
(``payload_format``) and the identity hash (``idempotency_hash_version``). A value this build does
not know fails closed with migration guidance instead of being loaded on a best guess. With
signing keys, a document's payload also carries an HMAC over its bytes and these gates
(``codec/signing.py``), checked before the payload reaches the codec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Final

import bson
from agent_framework import WorkflowCheckpoint
from bson.int64 import Int64

from ..errors import MongoDBIntegrityError, MongoDBMappingError, MongoDBSerializationError
from .codec import (
    CANONICAL_HASH_VERSION,
    CHUNKED_PAYLOAD_FORMAT,
    PAYLOAD_FORMAT,
    SUPPORTED_PAYLOAD_VERSIONS,
    EncodedCheckpoint,
)
from .codec.chunks import Chunk
from .codec.signing import PayloadSigner, signing_context
from .driver import Document
from .scope import CHECKPOINT_KIND, RunScope

__all__ = [
    "FIRST_PAYLOAD_FORMAT",
    "FRAMEWORK_VERSION",
    "MAX_DOCUMENT_BYTES",
    "MAX_SEQUENCE",
    "NESTED_CHUNKS_FIELD",
    "PAYLOAD_BYTES_FIELD",
    "PAYLOAD_PROJECTION",
    "SCHEMA_VERSION",
    "SUPPORTED_PAYLOAD_VERSIONS",
    "PreparedCheckpoint",
    "StoredPayload",
    "prepare_checkpoint",
    "stored_payload",
    "utc_now",
]

SCHEMA_VERSION: Final = 1
FRAMEWORK_VERSION: Final = "agent-framework-core/1:WorkflowCheckpoint.to_dict/v1"
FIRST_PAYLOAD_FORMAT: Final = "pickle-5/v1"
"""The first codec's format. Its loader let a crafted payload run code, so this build refuses
to read it (``docs/adr/0009-codec-v2.md``)."""

MAX_DOCUMENT_BYTES: Final = 16 * 1024 * 1024
"""MongoDB's BSON document size limit (https://www.mongodb.com/docs/manual/reference/limits/)."""

PAYLOAD_FIELD: Final = "checkpoint"
SIGNATURE_FIELD: Final = "payload_signature"
PAYLOAD_BYTES_FIELD: Final = "payload_bytes"
"""The checkpoint's encoded size (its whole tree's pickle, chunked or not), recorded at save so a
listing can report it without fetching anything. Informational: neither the checksum nor a
signature covers it, and no load reads it."""
NESTED_CHUNKS_FIELD: Final = "nested_chunks"
"""On a chunked checkpoint whose leaves reference further leaves: those addresses, 32 bytes each,
concatenated, so that a load fetches every chunk in one round trip. A fetch hint only: a wrong
hint makes the join fail (a chunk missing), never a different checkpoint."""
_READABLE_FORMATS: Final = frozenset({PAYLOAD_FORMAT, CHUNKED_PAYLOAD_FORMAT})
_ADDRESS_BYTES: Final = 32

PAYLOAD_PROJECTION: Final[Mapping[str, int]] = {
    "_id": 0,
    "checkpoint_id": 1,
    "sequence": 1,
    "schema_version": 1,
    "framework_version": 1,
    "payload_version": 1,
    "payload_format": 1,
    "idempotency_hash_version": 1,
    PAYLOAD_FIELD: 1,
    "payload_checksum": 1,
    SIGNATURE_FIELD: 1,
    NESTED_CHUNKS_FIELD: 1,
}
"""What ``load``, ``get_latest`` and pages read: the gates, the payload and its checksum."""

# Size of the payload's BSON element beyond its bytes: type byte, key and its NUL, int32 length,
# subtype byte (https://bsonspec.org/spec.html).
_BINARY_ELEMENT_OVERHEAD: Final = 1 + len(PAYLOAD_FIELD) + 1 + 4 + 1
MAX_SEQUENCE: Final = 2**63 - 1
"""Sequences are stored as BSON int64 whatever their size, so a document's size never depends
on its sequence and the size measured before allocation is exact."""


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedCheckpoint:
    """A checkpoint's complete document except its sequence, which is allocated last."""

    checkpoint_id: str
    document_id: str
    payload_hash: str
    expires_at: datetime | None
    size: int
    _fields: Mapping[str, Any]
    chunks: tuple[Chunk, ...] = ()
    """The leaves a chunked checkpoint references; stored before the checkpoint itself."""
    created_at: datetime | None = None

    def document(self, sequence: int) -> Document:
        """The document to insert, with its allocated ``sequence``."""
        return {**self._fields, "sequence": Int64(sequence)}


@dataclasses.dataclass(frozen=True, slots=True)
class StoredPayload:
    """What a stored document gives the codec to decode, after its gates passed."""

    checkpoint_id: str
    payload: bytes
    checksum: str
    chunked: bool = False
    nested: tuple[bytes, ...] = ()


def prepare_checkpoint(
    scope: RunScope,
    checkpoint: WorkflowCheckpoint,
    encoded: EncodedCheckpoint,
    *,
    created_at: datetime,
    ttl: timedelta | None,
    signer: PayloadSigner | None = None,
) -> PreparedCheckpoint:
    """Build the envelope and prove it fits MongoDB's document limit, before any I/O.

    Raises:
        MongoDBSerializationError: The document would exceed 16 MiB (a checkpoint stored whole,
            or a chunked root with millions of references).
        MongoDBMappingError: The checkpoint's public version is unknown to this build.
    """
    if checkpoint.version not in SUPPORTED_PAYLOAD_VERSIONS:
        raise MongoDBMappingError(
            f"WorkflowCheckpoint version {checkpoint.version!r} is not one this storage can restore "
            f"({', '.join(sorted(SUPPORTED_PAYLOAD_VERSIONS))}); upgrade agent-framework-mongodb."
        )
    expires_at = None if ttl is None else created_at + ttl
    document_id = scope.checkpoint_document_id(checkpoint.checkpoint_id)
    envelope: dict[str, Any] = {
        "_id": document_id,
        "_kind": CHECKPOINT_KIND,
        "schema_version": SCHEMA_VERSION,
        "framework_version": FRAMEWORK_VERSION,
        "payload_version": checkpoint.version,
        "payload_format": encoded.payload_format,
        "idempotency_hash_version": CANONICAL_HASH_VERSION,
        **scope.fields(),
        "checkpoint_id": checkpoint.checkpoint_id,
        "parent_checkpoint_id": checkpoint.previous_checkpoint_id,
        "created_at": created_at,
        "payload_hash": encoded.payload_hash,
        "payload_checksum": encoded.payload_checksum,
        PAYLOAD_BYTES_FIELD: Int64(encoded.logical_bytes or len(encoded.payload)),
    }
    if expires_at is not None:
        envelope["expires_at"] = expires_at
    if encoded.nested:
        envelope[NESTED_CHUNKS_FIELD] = b"".join(encoded.nested)
    if signer is not None:
        context = _signature_context(
            scope, checkpoint.checkpoint_id, checkpoint.version, encoded.payload_format
        )
        envelope[SIGNATURE_FIELD] = signer.sign(context, encoded.payload)
    # Measuring the envelope without the payload, then adding the payload's exact element size,
    # avoids copying a payload of up to 16 MiB just to learn its encoded length.
    envelope_size = len(bson.encode({**envelope, "sequence": Int64(0)}))
    size = envelope_size + _BINARY_ELEMENT_OVERHEAD + len(encoded.payload)
    if size > MAX_DOCUMENT_BYTES:
        raise MongoDBSerializationError(
            f"The checkpoint's document would be {size:,} bytes; MongoDB stores at most "
            f"{MAX_DOCUMENT_BYTES:,} bytes per document. Keep large artefacts outside the "
            "workflow state and store references to them instead."
        )
    envelope[PAYLOAD_FIELD] = encoded.payload
    return PreparedCheckpoint(
        checkpoint_id=checkpoint.checkpoint_id,
        document_id=document_id,
        payload_hash=encoded.payload_hash,
        expires_at=expires_at,
        size=size,
        _fields=envelope,
        chunks=encoded.chunks,
        created_at=created_at,
    )


def stored_payload(
    document: Mapping[str, Any], scope: RunScope, signer: PayloadSigner | None = None
) -> StoredPayload:
    """Check a stored document's version gates (and signature) and return its payload.

    Raises:
        MongoDBIntegrityError: Signing keys are set and the payload is unsigned, or its
            signature does not match its bytes and this document's place and versions.
        MongoDBMappingError: A version is unknown, or a required field is missing or mistyped.
    """
    if document.get("payload_format") == FIRST_PAYLOAD_FORMAT:
        raise MongoDBMappingError(
            f"A stored checkpoint was written in the first payload format ({FIRST_PAYLOAD_FORMAT!r}), "
            "whose loader could be made to run code; this build does not read it. Resume or finish "
            "such runs with the release that wrote them, or start them again (see "
            "docs/adr/0009-codec-v2.md for a migration in a trusted environment)."
        )
    _require_version(document, "schema_version", {SCHEMA_VERSION})
    _require_version(document, "framework_version", {FRAMEWORK_VERSION})
    _require_version(document, "payload_version", SUPPORTED_PAYLOAD_VERSIONS)
    _require_version(document, "payload_format", _READABLE_FORMATS)
    _require_version(document, "idempotency_hash_version", {CANONICAL_HASH_VERSION})
    checkpoint_id = document.get("checkpoint_id")
    payload = document.get(PAYLOAD_FIELD)
    checksum = document.get("payload_checksum")
    if not isinstance(checkpoint_id, str) or not isinstance(payload, bytes) or not isinstance(checksum, str):
        raise MongoDBMappingError(
            "A stored checkpoint document lacks its checkpoint_id, payload or payload_checksum."
        )
    if signer is not None:
        signature = document.get(SIGNATURE_FIELD)
        if signature is None:
            raise MongoDBIntegrityError(
                "A stored checkpoint is not signed, and this storage has signing keys; it was written "
                "without keys or outside this storage, so it is not loaded."
            )
        context = _signature_context(
            scope, checkpoint_id, document["payload_version"], document["payload_format"]
        )
        if not signer.verify(context, bytes(payload), signature):
            raise MongoDBIntegrityError(
                "A stored checkpoint's signature does not match its payload and place; it was modified "
                "or moved outside this storage, or signed with a key this storage does not hold."
            )
    chunked = document["payload_format"] == CHUNKED_PAYLOAD_FORMAT
    return StoredPayload(
        checkpoint_id=checkpoint_id,
        payload=bytes(payload),
        checksum=checksum,
        chunked=chunked,
        nested=_nested_addresses(document.get(NESTED_CHUNKS_FIELD)) if chunked else (),
    )


def _nested_addresses(value: object) -> tuple[bytes, ...]:
    if value is None:
        return ()
    if not isinstance(value, bytes) or not value or len(value) % _ADDRESS_BYTES:
        raise MongoDBMappingError(f"A stored checkpoint's {NESTED_CHUNKS_FIELD} is malformed.")
    data = bytes(value)
    return tuple(data[start : start + _ADDRESS_BYTES] for start in range(0, len(data), _ADDRESS_BYTES))


def _signature_context(
    scope: RunScope, checkpoint_id: str, payload_version: str, payload_format: str
) -> bytes:
    # The verifier uses its own bound scope, never the document's: a payload copied to another
    # run or tenant is signed for somewhere else and fails.
    return signing_context(
        scope.discriminator,
        checkpoint_id,
        SCHEMA_VERSION,
        FRAMEWORK_VERSION,
        payload_version,
        payload_format,
        CANONICAL_HASH_VERSION,
    )


def utc_now() -> datetime:
    """The current UTC time at BSON's millisecond precision, as MongoDB will store it."""
    now = datetime.now(timezone.utc)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


def _require_version(document: Mapping[str, Any], field: str, known: frozenset[Any] | set[Any]) -> None:
    value = document.get(field)
    # bool is an int; a stored True must not pass as version 1. A list or document is not
    # hashable, so it is refused before the membership test could raise.
    if type(value) not in (str, int) or value not in known:
        raise MongoDBMappingError(
            f"A stored checkpoint has {field} {value!r}, which this build cannot read "
            f"(it reads {', '.join(repr(v) for v in sorted(known))}). Upgrade agent-framework-mongodb, "
            "or migrate the stored checkpoints with the release that wrote them."
        )
