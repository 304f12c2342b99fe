"""The stored envelope of a checkpoint: building it without I/O, and gating it on load.

A checkpoint document is immutable once inserted. Its versions are independent gates: the
envelope layout (``schema_version``), the source of the payload (``framework_version``), the
checkpoint's own public ``version`` (``payload_version``), the codec's format
(``payload_format``) and the identity hash (``idempotency_hash_version``). A value this build does
not know fails closed with migration guidance instead of being loaded on a best guess.

Every load also checks the document's *place*: it holds the checkpoint asked for, under the
``_id`` that checkpoint has in this run. With signing keys, a document carries an HMAC over its
envelope (``signatures.py``: identity, sequence, run epoch, parent, dates, gates, checksum, hint),
computed after the sequence is allocated and checked before the payload reaches the codec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Final, Protocol, cast

import bson
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
from .codec.signing import SIGNATURE_BYTES, PayloadSigner
from .driver import Document
from .scope import CHECKPOINT_KIND, RunScope
from .signatures import (
    EPOCH_BYTES,
    EPOCH_FIELD,
    SIGNATURE_FIELD,
    SIGNED_FIELDS,
    sign_envelope,
    verify_envelope,
)

__all__ = [
    "ENVELOPE_PROJECTION",
    "FIRST_PAYLOAD_FORMAT",
    "FRAMEWORK_VERSION",
    "MAX_DOCUMENT_BYTES",
    "MAX_SEQUENCE",
    "NESTED_CHUNKS_FIELD",
    "PAYLOAD_BYTES_FIELD",
    "PAYLOAD_PROJECTION",
    "SCHEMA_VERSION",
    "SUPPORTED_PAYLOAD_VERSIONS",
    "UNSIGNED",
    "CheckpointHeading",
    "PreparedCheckpoint",
    "SignaturePolicy",
    "StoredPayload",
    "as_utc",
    "prepare_checkpoint",
    "stored_payload",
    "utc_now",
    "verified_epoch",
]

SCHEMA_VERSION: Final = 1
FRAMEWORK_VERSION: Final = "agent-framework-core/1:WorkflowCheckpoint.to_dict/v1"
FIRST_PAYLOAD_FORMAT: Final = "pickle-5/v1"
"""The first codec's format. Its loader let a crafted payload run code, so this build refuses
to read it (``docs/adr/0009-codec-v2.md``)."""

MAX_DOCUMENT_BYTES: Final = 16 * 1024 * 1024
"""MongoDB's BSON document size limit (https://www.mongodb.com/docs/manual/reference/limits/)."""

PAYLOAD_FIELD: Final = "checkpoint"
PAYLOAD_BYTES_FIELD: Final = "payload_bytes"
"""The checkpoint's encoded size (its whole tree's pickle, chunked or not), recorded at save so a
listing can report it without fetching anything. No load reads it; a signature binds it, so a
signed storage's summaries report what the save wrote."""
NESTED_CHUNKS_FIELD: Final = "nested_chunks"
"""On a chunked checkpoint whose leaves reference further leaves: those addresses, 32 bytes each,
concatenated, so that a load fetches every chunk in one round trip. A fetch hint only: a load
parses only leaves its root reaches through references, so a wrong hint makes the join fail (a
chunk missing), never a different checkpoint, and never puts a leaf before the parser. A signature
binds it, so a signed load fetches nothing the save did not name."""
_READABLE_FORMATS: Final = frozenset({PAYLOAD_FORMAT, CHUNKED_PAYLOAD_FORMAT})
_ADDRESS_BYTES: Final = 32

ENVELOPE_PROJECTION: Final[Mapping[str, int]] = {
    "_id": 1,
    **dict.fromkeys(SIGNED_FIELDS, 1),
    SIGNATURE_FIELD: 1,
}
"""Everything a signature binds and the document's place, without the payload: what a signed
storage's summaries and id listings read to verify each document."""
PAYLOAD_PROJECTION: Final[Mapping[str, int]] = {**ENVELOPE_PROJECTION, PAYLOAD_FIELD: 1}
"""What ``load``, ``get_latest`` and pages read: the envelope and the payload."""

# Size of the payload's BSON element beyond its bytes: type byte, key and its NUL, int32 length,
# subtype byte (https://bsonspec.org/spec.html).
_BINARY_ELEMENT_OVERHEAD: Final = 1 + len(PAYLOAD_FIELD) + 1 + 4 + 1
MAX_SEQUENCE: Final = 2**63 - 1
"""Sequences are stored as BSON int64 whatever their size, so a document's size never depends
on its sequence and the size measured before allocation is exact."""


@dataclasses.dataclass(frozen=True, slots=True)
class SignaturePolicy:
    """How a storage signs and checks stored checkpoints.

    Attributes:
        signer: The storage's keys, or ``None`` for a storage without ``signing_keys``.
        accept_unsigned_before: With keys, also load a checkpoint that carries no current
            signature (unsigned, or signed by the first release's format) if its ``created_at``
            is before this time: the transition of a run onto signing (``docs/adr/0020``).
    """

    signer: PayloadSigner | None = None
    accept_unsigned_before: datetime | None = None


UNSIGNED: Final = SignaturePolicy()


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedCheckpoint:
    """A checkpoint's complete document except its sequence and run epoch, which the allocation
    gives last; with keys, it is signed then, so the signature binds its place in the run."""

    checkpoint_id: str
    document_id: str
    payload_hash: str
    expires_at: datetime | None
    size: int
    _fields: Mapping[str, Any]
    chunks: tuple[Chunk, ...] = ()
    """The leaves a chunked checkpoint references; stored before the checkpoint itself."""
    created_at: datetime | None = None
    _discriminator: str = ""
    _signer: PayloadSigner | None = None

    def document(self, sequence: int, epoch: bytes) -> Document:
        """The document to insert, numbered ``sequence`` in the run's lifetime ``epoch``."""
        document: dict[str, Any] = {**self._fields, "sequence": Int64(sequence), EPOCH_FIELD: epoch}
        if self._signer is not None:
            document[SIGNATURE_FIELD] = sign_envelope(self._signer, self._discriminator, document)
        return document


@dataclasses.dataclass(frozen=True, slots=True)
class StoredPayload:
    """What a stored document gives the codec to decode, after its gates passed.

    Attributes:
        epoch: The run epoch its signature binds; ``None`` when it was read without keys, or
            accepted unsigned during a transition (no lifetime can be checked then).
    """

    checkpoint_id: str
    payload: bytes
    checksum: str
    sequence: int = 0
    chunked: bool = False
    nested: tuple[bytes, ...] = ()
    epoch: bytes | None = None
    payload_hash: str | None = None
    """The identity hash its envelope records (with keys, signed), if it is a string."""


class CheckpointHeading(Protocol):
    """What an envelope records of a checkpoint besides its encoding: a ``WorkflowCheckpoint``, or
    a transplanted root's heading (``codec/transplant.py``), which has no checkpoint object."""

    @property
    def checkpoint_id(self) -> str: ...
    @property
    def previous_checkpoint_id(self) -> str | None: ...
    @property
    def version(self) -> str: ...


def prepare_checkpoint(
    scope: RunScope,
    checkpoint: CheckpointHeading,
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
    # Dates are signed as BSON stores them, to the millisecond.
    expires_at = None if ttl is None else _to_millisecond(created_at + ttl)
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
        "created_at": _to_millisecond(created_at),
        "payload_hash": encoded.payload_hash,
        "payload_checksum": encoded.payload_checksum,
        PAYLOAD_BYTES_FIELD: Int64(encoded.logical_bytes or len(encoded.payload)),
    }
    if expires_at is not None:
        envelope["expires_at"] = expires_at
    if encoded.nested:
        envelope[NESTED_CHUNKS_FIELD] = b"".join(encoded.nested)
    # Measuring the envelope without the payload, with the fields the allocation adds at their
    # exact sizes, then adding the payload's element size, avoids copying a payload of up to
    # 16 MiB just to learn its encoded length.
    placeholders: dict[str, Any] = {"sequence": Int64(0), EPOCH_FIELD: bytes(EPOCH_BYTES)}
    if signer is not None:
        placeholders[SIGNATURE_FIELD] = bytes(SIGNATURE_BYTES)
    envelope_size = len(bson.encode({**envelope, **placeholders}))
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
        _discriminator=scope.discriminator,
        _signer=signer,
    )


def stored_payload(
    document: Mapping[str, Any],
    scope: RunScope,
    policy: SignaturePolicy = UNSIGNED,
    *,
    checkpoint_id: str | None = None,
) -> StoredPayload:
    """Check a stored document's version gates, place and signature, and return its payload.

    Args:
        checkpoint_id: The id the caller asked for (``load``); the document must hold that
            checkpoint. Without it, the document's own id, which must match its ``_id``.

    Raises:
        MongoDBIntegrityError: Signing keys are set and the document is unsigned (and not accepted
            by ``accept_unsigned_before``), its signature does not match its fields in this run, or
            it holds another checkpoint than asked for or than its ``_id`` names.
        MongoDBMappingError: A version is unknown, a required field is missing or mistyped, or
            (without keys) the document holds another checkpoint than asked for or than its
            ``_id`` names.
    """
    # With keys the signature comes first: it binds the version gates too, so a forged gate is
    # tampering, never advice to upgrade (or to fall back to the release that wrote it).
    signed_first = policy.signer is not None
    epoch = verified_epoch(document, scope, policy, checkpoint_id=checkpoint_id) if signed_first else None
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
    stored_id = document.get("checkpoint_id")
    payload = document.get(PAYLOAD_FIELD)
    checksum = document.get("payload_checksum")
    if not isinstance(stored_id, str) or not isinstance(payload, bytes) or not isinstance(checksum, str):
        raise MongoDBMappingError(
            "A stored checkpoint document lacks its checkpoint_id, payload or payload_checksum."
        )
    if not signed_first:
        verified_epoch(document, scope, policy, checkpoint_id=checkpoint_id)  # the place, after the gates
    chunked = document["payload_format"] == CHUNKED_PAYLOAD_FORMAT
    return StoredPayload(
        checkpoint_id=stored_id,
        payload=bytes(payload),
        checksum=checksum,
        sequence=_sequence(document),
        chunked=chunked,
        nested=_nested_addresses(document.get(NESTED_CHUNKS_FIELD)) if chunked else (),
        epoch=epoch,
        payload_hash=payload_hash if isinstance(payload_hash := document.get("payload_hash"), str) else None,
    )


def verified_epoch(
    document: Mapping[str, Any],
    scope: RunScope,
    policy: SignaturePolicy,
    *,
    checkpoint_id: str | None = None,
) -> bytes | None:
    """Check a document's place and, with keys, its signature; return the epoch it signs.

    The envelope alone is read (no payload is needed), so listings check summaries and ids this
    way. Returns ``None`` without keys, or for a document accepted unsigned.

    Raises:
        MongoDBIntegrityError: With keys: as :func:`stored_payload`.
        MongoDBMappingError: Without keys: the document holds another checkpoint than asked for, or
            than its ``_id`` names.
    """
    stored_id = document.get("checkpoint_id")
    if not isinstance(stored_id, str):
        raise MongoDBMappingError("A stored checkpoint document has no checkpoint_id.")
    expected = stored_id if checkpoint_id is None else checkpoint_id
    signer = policy.signer
    if signer is None:
        _require_place(document, scope, expected, MongoDBMappingError)
        return None
    signature = document.get(SIGNATURE_FIELD)
    epoch = document.get(EPOCH_FIELD)
    if signature is None or epoch is None:
        if _accepted_unsigned(document, policy):
            _require_place(document, scope, expected, MongoDBIntegrityError)
            return None
        raise MongoDBIntegrityError(_UNSIGNED_MESSAGE if signature is None else _FIRST_SIGNATURE_MESSAGE)
    envelope = document if expected == stored_id else {**document, "checkpoint_id": expected}
    if not verify_envelope(signer, scope.discriminator, envelope, signature):
        raise MongoDBIntegrityError(
            "A stored checkpoint's signature does not match its fields in this run: it was modified, "
            "moved, put in another checkpoint's place, or signed with a key this storage does not hold."
        )
    _require_place(document, scope, expected, MongoDBIntegrityError)
    return cast(bytes, epoch)


_UNSIGNED_MESSAGE: Final = (
    "A stored checkpoint is not signed, and this storage has signing keys; it was written without keys "
    "or outside this storage, so it is not loaded. To move existing runs onto signing, set "
    "accept_unsigned_before to when signing started, or re-sign them with "
    "`agent-framework-mongodb sign-run` (docs/adr/0020-signatures-bind-the-envelope.md)."
)
_FIRST_SIGNATURE_MESSAGE: Final = (
    "A stored checkpoint carries a signature of an earlier release, which does not bind its place in "
    "the run's history, so it is not loaded. Re-sign the run with `agent-framework-mongodb sign-run`, or "
    "set accept_unsigned_before while the transition lasts (docs/adr/0020-signatures-bind-the-envelope.md)."
)


def _accepted_unsigned(document: Mapping[str, Any], policy: SignaturePolicy) -> bool:
    cutoff = policy.accept_unsigned_before
    created_at = document.get("created_at")
    if cutoff is None or not isinstance(created_at, datetime):
        return False
    aware = created_at.replace(tzinfo=timezone.utc) if created_at.tzinfo is None else created_at
    return aware < cutoff


def _require_place(
    document: Mapping[str, Any], scope: RunScope, expected: str, error: type[MongoDBMappingError]
) -> None:
    """The document holds the checkpoint asked for, under the ``_id`` that checkpoint has here: a
    copy under another checkpoint's ``_id`` is neither returned for it nor listed twice."""
    stored_id = document.get("checkpoint_id")
    if stored_id != expected or (
        "_id" in document and document["_id"] != scope.checkpoint_document_id(expected)
    ):
        raise error("A stored checkpoint document holds another checkpoint than the one its place names.")


def _sequence(document: Mapping[str, Any]) -> int:
    sequence = document.get("sequence")
    if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0:
        raise MongoDBMappingError("A stored checkpoint document has no valid sequence.")
    return int(sequence)


def _to_millisecond(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond - moment.microsecond % 1000)


def _nested_addresses(value: object) -> tuple[bytes, ...]:
    if value is None:
        return ()
    if not isinstance(value, bytes) or not value or len(value) % _ADDRESS_BYTES:
        raise MongoDBMappingError(f"A stored checkpoint's {NESTED_CHUNKS_FIELD} is malformed.")
    data = bytes(value)
    return tuple(data[start : start + _ADDRESS_BYTES] for start in range(0, len(data), _ADDRESS_BYTES))


def as_utc(moment: datetime) -> datetime:
    """A date read from MongoDB as an aware UTC one: pymongo returns naive UTC dates unless the
    client is ``tz_aware``, and aware ones in the client's ``tzinfo`` if it is."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


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
