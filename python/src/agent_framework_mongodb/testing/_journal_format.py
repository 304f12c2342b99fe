"""The engine file's framing: a magic line, then length- and checksum-framed BSON records.

specs/engine-file-format.md is the normative description. A record is the payload's length (4
bytes, little-endian), a CRC-32 over those four length bytes and the payload (4 bytes,
little-endian), then the payload: one BSON document. Reading tells a *torn tail* (what a crash
during an append leaves: a record cut short, the last record failing its checksum, or zeros a
file system left after extending the file) from *corruption* (a record that fails its checksum
with another record after it, or a length no record can have followed by data), because only the
former can be the trace of a write that never returned.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO

import bson
from bson.errors import BSONError

from ._codec import MAX_BSON_SIZE, STORAGE_OPTIONS

__all__ = ["MAGIC", "MAX_PAYLOAD", "Corruption", "frame", "read_records"]

MAGIC = b"agent-framework-mongodb engine journal v1\n"
# A record holds one stored document (at most 16 MiB) and a few short names around it.
MAX_PAYLOAD = MAX_BSON_SIZE + 64 * 1024
_MIN_PAYLOAD = 5  # the smallest BSON document, {}
_HEADER = struct.Struct("<II")
_LENGTH = struct.Struct("<I")
_decode: Callable[..., dict[str, Any]] = getattr(bson, "decode")  # noqa: B009 - as in _codec.py


class Corruption(Exception):
    """A damaged record that is not a torn tail, at ``offset``."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} at byte {offset}")
        self.offset = offset


def _checksum(length: bytes, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(length))


def frame(record: Mapping[str, Any]) -> bytes:
    """``record`` as the bytes one append writes."""
    payload = bson.encode(record)
    length = _LENGTH.pack(len(payload))
    return length + _LENGTH.pack(_checksum(length, payload)) + payload


def read_records(stream: BinaryIO, size: int) -> Iterator[tuple[dict[str, Any], int, int]]:
    """Each whole record after the magic line, with the offsets where it starts and ends.

    ``stream`` is positioned just after the magic line and ``size`` is the file's size. A torn
    tail ends the iteration quietly: the offset last yielded (or ``len(MAGIC)``) is where the
    good part ends. Corruption raises :class:`Corruption`.
    """
    offset = len(MAGIC)
    while offset < size:
        header = stream.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # a header cut short
        length, checksum = _HEADER.unpack(header)
        if not _MIN_PAYLOAD <= length <= MAX_PAYLOAD:
            if not header.strip(b"\0") and not stream.read().strip(b"\0"):
                return  # zeros to the end: the file was extended, the record never written
            raise Corruption(offset, f"a record length of {length} bytes")
        end = offset + _HEADER.size + length
        if end > size:
            return  # a payload cut short
        payload = stream.read(length)
        if _checksum(header[:4], payload) != checksum:
            if end == size:
                return  # the last record, torn inside: its write never returned
            raise Corruption(offset, "a record whose checksum does not match, followed by other records")
        try:
            record = _decode(payload, codec_options=STORAGE_OPTIONS)
        except BSONError as error:  # the checksum matched, so the writer wrote this
            raise Corruption(offset, "a record that is not BSON") from error
        yield record, offset, end
        offset = end
