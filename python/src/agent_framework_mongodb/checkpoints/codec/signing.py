"""The keyed MAC behind signed checkpoints: HMAC-SHA256 with the first key, verified with any.

The checksum detects corruption; whoever can rewrite a payload can rewrite its checksum too. With
``signing_keys`` set, every stored checkpoint also carries a signature that only holders of a key
can compute. What the signature covers (the envelope fields, among them the payload's checksum)
is decided by ``checkpoints/signatures.py``; this module only holds the keys and computes and
compares MACs. The first key signs and every key verifies, so keys rotate by putting the new key
first and dropping the old one once no stored checkpoint needs it.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

__all__ = ["MIN_KEY_BYTES", "SIGNATURE_ALGORITHM", "SIGNATURE_BYTES", "PayloadSigner"]

SIGNATURE_ALGORITHM: Final = "hmac-sha256"
SIGNATURE_BYTES: Final = hashlib.sha256().digest_size
MIN_KEY_BYTES: Final = 32
"""Shortest key accepted: the output size of SHA-256, as RFC 2104 recommends for HMAC keys."""


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

    def sign(self, message: bytes) -> bytes:
        """Return the signature of ``message`` with the signing (first) key."""
        return _mac(self._keys[0], message)

    def verify(self, message: bytes, signature: object) -> bool:
        """Whether ``signature`` is a signature of ``message`` by any key."""
        if type(signature) is not bytes or len(signature) != SIGNATURE_BYTES:
            return False
        # Every key is tried, so the time taken says nothing about which key matched.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(_mac(key, message), signature)
        return matched


def _mac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()
