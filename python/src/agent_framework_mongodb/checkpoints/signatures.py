"""What a checkpoint document's signature binds, and how a stored one is checked.

With ``signing_keys``, a checkpoint document's ``payload_signature`` is an HMAC-SHA256
(``codec/signing.py``) over a message that names the run (the verifier's *own* scope
discriminator, never the document's) and every envelope field the storage decides anything with:
:data:`SIGNED_FIELDS`. The payload itself is bound through ``payload_checksum``, its SHA-256, which
every load compares with the payload's bytes before any of them is parsed; a chunked checkpoint's
leaves are bound through the addresses in its payload (each the SHA-256 of the leaf's bytes) and
its ``nested_chunks`` hint. So a signature over a few hundred bytes covers every byte a load
reads, costs the same for a 1 KB and a 100 MB checkpoint, and can be computed after the sequence
is allocated, which is what lets it bind the order of the run's history.

**The message.** ``"AFM-SIGNATURE/2\\n"``, then the discriminator, then each signed field as its
name and its value, every part typed and length-prefixed (:func:`signed_message`), so no two
different envelopes share a message. A field a save never writes that way (a bool where a count
belongs, a subtype-4 binary, a date out of range) makes no message at all: such a document
verifies under no key.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Final, cast

from .codec.signing import PayloadSigner

__all__ = [
    "EPOCH_BYTES",
    "EPOCH_FIELD",
    "SIGNATURE_FIELD",
    "SIGNATURE_HEADER",
    "SIGNED_FIELDS",
    "sign_envelope",
    "signed_message",
    "verify_envelope",
]

SIGNATURE_HEADER: Final = b"AFM-SIGNATURE/2\n"
"""Prefix of every signed message; the first release's signatures (``AFM-SIGNATURE/1``, over the
payload and its place only) never verify as these."""
SIGNATURE_FIELD: Final = "payload_signature"
EPOCH_FIELD: Final = "run_epoch"
"""The run's lifetime, copied from its counter at allocation: a new counter, as after
``clear_run``, draws a new one (``ledger.py``)."""
EPOCH_BYTES: Final = 16

SIGNED_FIELDS: Final = (
    "checkpoint_id",
    "sequence",
    EPOCH_FIELD,
    "parent_checkpoint_id",
    "created_at",
    "expires_at",
    "schema_version",
    "framework_version",
    "payload_version",
    "payload_format",
    "idempotency_hash_version",
    "payload_hash",
    "payload_checksum",
    "payload_bytes",
    "nested_chunks",
)
"""Every envelope field a signature binds, in message order. A missing field and ``None`` are the
same value (a permanent checkpoint has no ``expires_at``, a small one no ``nested_chunks``)."""

_U32: Final = struct.Struct(">I").pack
_I64: Final = struct.Struct(">q").pack
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MILLISECOND: Final = timedelta(milliseconds=1)
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def signed_message(discriminator: str, envelope: Mapping[str, object]) -> bytes | None:
    """The bytes a signature of ``envelope`` in the run ``discriminator`` covers, or ``None`` when
    a field holds a value of a type no save writes there."""
    parts = [SIGNATURE_HEADER, _text(discriminator)]
    get = envelope.get
    for name, encoded_name in _ENCODED_NAMES:
        encoded = _value(get(name))
        if encoded is None:
            return None
        parts.append(encoded_name)
        parts.append(encoded)
    return b"".join(parts)


def sign_envelope(signer: PayloadSigner, discriminator: str, envelope: Mapping[str, object]) -> bytes:
    """The signature of an envelope the storage built.

    Raises:
        ValueError: A field holds a value a save does not write (a bug of the caller).
    """
    message = signed_message(discriminator, envelope)
    if message is None:
        raise ValueError("a checkpoint envelope holds a value that cannot be signed")
    return signer.sign(message)


def verify_envelope(
    signer: PayloadSigner, discriminator: str, envelope: Mapping[str, object], signature: object
) -> bool:
    """Whether ``signature`` is a signature of ``envelope`` in the run ``discriminator``."""
    message = signed_message(discriminator, envelope)
    return message is not None and signer.verify(message, signature)


def _text(text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    return _U32(len(data)) + data


_ENCODED_NAMES: Final = tuple((name, _text(name)) for name in SIGNED_FIELDS)


def _value(value: object) -> bytes | None:
    """One typed value: ``N`` none, ``s`` text, ``i`` int64, ``b`` bytes, ``d`` UTC milliseconds.

    Exact types only: bson decodes what a save wrote as exactly these (``Int64`` is an ``int``
    subclass and counts as an int; a bool does not), and anything else cannot be a field a save
    signed.
    """
    if value is None:
        return b"N"
    cls = type(value)
    if cls is str:
        return b"s" + _text(cast(str, value))
    if cls is bytes:
        data = cast(bytes, value)
        return b"b" + _U32(len(data)) + data
    if cls is datetime:
        return _date(cast(datetime, value))
    if isinstance(value, int) and cls is not bool and _INT64_MIN <= value <= _INT64_MAX:
        return b"i" + _I64(value)
    return None


def _date(moment: datetime) -> bytes | None:
    # A client without tz_aware reads BSON dates back as naive UTC; both spellings are one instant.
    aware = moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment
    milliseconds, remainder = divmod(aware - _EPOCH, _MILLISECOND)
    if remainder:
        return None  # BSON keeps milliseconds: a finer date is not one that was stored
    return b"d" + _I64(milliseconds)
