"""Signed payloads: an HMAC-SHA256 over a payload and the identity of the document it is in.

The checksum detects corruption; whoever can rewrite a payload can rewrite its checksum too.
With ``signing_keys`` set, every stored payload also carries a signature that only holders of a
key can compute, over its bytes *and* the document's identity (scope discriminator, checkpoint
id, format versions), so an edited payload, an unsigned one, or a signed one moved to another
run or tenant is refused before a single byte is unpickled. The first key signs and every key
verifies, so keys rotate by putting the new key first and dropping the old one once no stored
checkpoint needs it.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

__all__ = ["MIN_KEY_BYTES", "SIGNATURE_ALGORITHM", "PayloadSigner", "signing_context"]

SIGNATURE_ALGORITHM: Final = "hmac-sha256"
MIN_KEY_BYTES: Final = 32
"""Shortest key accepted: the output size of SHA-256, as RFC 2104 recommends for HMAC keys."""

_CONTEXT_HEADER: Final = b"AFM-SIGNATURE/1\n"


def signing_context(*parts: str | int) -> bytes:
    """Encode the document identity a signature covers; each part is length-prefixed."""
    out = bytearray(_CONTEXT_HEADER)
    for part in parts:
        data = str(part).encode("utf-8", "surrogatepass")
        out += len(data).to_bytes(4, "big")
        out += data
    return bytes(out)


class PayloadSigner:
    """Signs with the first key and verifies with any; keys never leave this object.

    Args:
        keys: At least one key of at least :data:`MIN_KEY_BYTES` bytes (checked by the options).
    """

    __slots__ = ("_keys",)

    def __init__(self, keys: tuple[bytes, ...]) -> None:
        if not keys:
            raise ValueError("PayloadSigner needs at least one key.")
        self._keys = keys

    def __repr__(self) -> str:
        return f"PayloadSigner(<{len(self._keys)} key(s)>)"

    def sign(self, context: bytes, payload: bytes) -> bytes:
        """Return the signature of ``payload`` in ``context`` with the signing (first) key."""
        return _mac(self._keys[0], context, payload)

    def verify(self, context: bytes, payload: bytes, signature: object) -> bool:
        """Whether ``signature`` is a signature of ``payload`` in ``context`` by any key."""
        if type(signature) is not bytes or len(signature) != hashlib.sha256().digest_size:
            return False
        # Every key is tried, so the time taken says nothing about which key matched.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(_mac(key, context, payload), signature)
        return matched


def _mac(key: bytes, context: bytes, payload: bytes) -> bytes:
    mac = hmac.new(key, context, hashlib.sha256)
    mac.update(payload)
    return mac.digest()
