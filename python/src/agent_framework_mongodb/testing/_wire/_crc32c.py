"""CRC-32C (Castagnoli), the checksum an OP_MSG may carry after its sections.

The OP_MSG specification (mongodb/specifications, source/message/OP_MSG.md, "Checksum") names
CRC-32C over the whole message up to the checksum; the standard library has only CRC-32, so
this is the table-driven reflected form with polynomial 0x82F63B78.
"""

from __future__ import annotations

_POLYNOMIAL = 0x82F63B78


def _table() -> tuple[int, ...]:
    entries: list[int] = []
    for byte in range(256):
        value = byte
        for _ in range(8):
            value = (value >> 1) ^ _POLYNOMIAL if value & 1 else value >> 1
        entries.append(value)
    return tuple(entries)


_TABLE = _table()


def crc32c(data: bytes) -> int:
    """The CRC-32C of ``data`` (``crc32c(b"123456789") == 0xE3069283``)."""
    value = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        value = table[(value ^ byte) & 0xFF] ^ (value >> 8)
    return value ^ 0xFFFFFFFF
