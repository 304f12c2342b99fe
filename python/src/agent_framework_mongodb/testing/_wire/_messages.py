"""Wire messages: reading OP_MSG and the legacy OP_QUERY handshake, writing OP_MSG and OP_REPLY.

Formats from mongodb/specifications source/message/OP_MSG.rst and MongoDB's "Legacy Opcodes"
reference (https://www.mongodb.com/docs/manual/reference/mongodb-wire-protocol/). A message is a
16-byte header (length, requestID, responseTo, opCode, little-endian int32s) and a body. An
OP_MSG body is flagBits, then sections: kind 0 carries the command document, kind 1 a named
sequence of documents (pymongo sends an insert's ``documents``, an update's ``updates`` and a
delete's ``deletes`` that way), then a CRC-32C of everything before it when checksumPresent is set.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import bson
from bson.codec_options import CodecOptions
from bson.errors import BSONError

from ._crc32c import crc32c

OP_REPLY: Final = 1
OP_QUERY: Final = 2004
OP_COMPRESSED: Final = 2012
OP_MSG: Final = 2013

HEADER: Final = struct.Struct("<iiii")
MAX_MESSAGE_SIZE: Final = 48_000_000
"""maxMessageSizeBytes, as the server reports it in ``hello``."""
MAX_BSON_OBJECT_SIZE: Final = 16 * 1024 * 1024
"""maxBsonObjectSize: the largest document a collection stores."""
MAX_INTERNAL_BSON_SIZE: Final = MAX_BSON_OBJECT_SIZE + 16 * 1024
"""The server accepts a command document up to 16 KiB over maxBsonObjectSize, so that a
16 MiB document fits in a command with its framing (BSONObjMaxInternalSize in
src/mongo/bson/util/builder.h)."""

CHECKSUM_PRESENT: Final = 1 << 0
MORE_TO_COME: Final = 1 << 1
EXHAUST_ALLOWED: Final = 1 << 16
_REQUIRED_BITS: Final = 0xFFFF
"""Bits 0-15 must be understood by the receiver: a set bit it does not know is an error (OP_MSG.rst,
"flagBits"); only checksumPresent and moreToCome are defined among them."""

_INT32: Final = struct.Struct("<i")
_UINT32: Final = struct.Struct("<I")
_REPLY_FIXED: Final = struct.Struct("<iqii")
_MIN_DOCUMENT: Final = 5
"""The smallest BSON document: its int32 length and the terminating NUL."""

REQUEST_OPTIONS: Final[CodecOptions[dict[str, Any]]] = CodecOptions(tz_aware=False)
"""How requests are decoded: datetimes as naive UTC as the server keeps them; binary subtypes kept as
``Binary`` (no UUID representation), so every value goes back out exactly as it came in."""


_bson_decode: Callable[..., dict[str, Any]] = getattr(bson, "decode")  # noqa: B009 - bson's overloads are partly untyped


class MalformedMessage(Exception):
    """A message the front cannot read; the connection is closed without a reply (DIVERGENCES.md)."""


@dataclass(frozen=True)
class Header:
    length: int
    request_id: int
    response_to: int
    op_code: int


@dataclass(frozen=True)
class Request:
    """One request: its command document with any document sequences merged in as arrays."""

    request_id: int
    op_code: int
    command: dict[str, Any]
    more_to_come: bool = False
    exhaust_allowed: bool = False

    @property
    def name(self) -> str:
        return next(iter(self.command), "")


def read_header(data: bytes) -> Header:
    length, request_id, response_to, op_code = HEADER.unpack(data)
    if length <= HEADER.size or length > MAX_MESSAGE_SIZE:
        # The server ends the session on a message over maxMessageSizeBytes or too short to hold
        # a header (src/mongo/transport/asio/asio_session_impl.cpp, "recv(): message msgLen ...").
        raise MalformedMessage(
            f"message length {length} is not between {HEADER.size + 1} and {MAX_MESSAGE_SIZE}"
        )
    return Header(length, request_id, response_to, op_code)


def _decode(data: bytes | memoryview) -> dict[str, Any]:
    if len(data) > MAX_INTERNAL_BSON_SIZE:
        raise MalformedMessage(f"a document of {len(data)} bytes is over the {MAX_INTERNAL_BSON_SIZE} limit")
    try:
        decoded = _bson_decode(bytes(data), codec_options=REQUEST_OPTIONS)
    except (BSONError, ValueError, IndexError) as error:
        raise MalformedMessage(f"invalid BSON: {error}") from error
    return decoded


def _document_at(body: memoryview, offset: int) -> tuple[dict[str, Any], int]:
    if offset + _INT32.size > len(body):
        raise MalformedMessage("truncated document")
    (size,) = _INT32.unpack_from(body, offset)
    if size < _MIN_DOCUMENT or offset + size > len(body):
        raise MalformedMessage("document runs past its section")
    return _decode(body[offset : offset + size]), offset + size


def _cstring_at(body: memoryview, offset: int) -> tuple[str, int]:
    end = bytes(body[offset:]).find(b"\x00")
    if end < 0:
        raise MalformedMessage("unterminated string")
    return bytes(body[offset : offset + end]).decode("utf-8"), offset + end + 1


def parse_request(header: Header, body: bytes) -> Request:
    """The request in ``body`` (the message after its header)."""
    if header.op_code == OP_MSG:
        return _parse_msg(header, body)
    if header.op_code == OP_QUERY:
        return _parse_query(header, body)
    # OP_COMPRESSED is never negotiated (the front advertises no compressors); the legacy CRUD
    # opcodes were removed in MongoDB 6.0 (https://www.mongodb.com/docs/manual/legacy-opcodes/).
    raise MalformedMessage(f"unsupported opCode {header.op_code}")


def _parse_msg(header: Header, body: bytes) -> Request:
    if len(body) < _UINT32.size:
        raise MalformedMessage("OP_MSG without flagBits")
    (flags,) = _UINT32.unpack_from(body, 0)
    unknown = flags & _REQUIRED_BITS & ~(CHECKSUM_PRESENT | MORE_TO_COME)
    if unknown:
        raise MalformedMessage(f"OP_MSG has unknown required flag bits {unknown:#x}")
    end = _checked_end(header, body) if flags & CHECKSUM_PRESENT else len(body)
    command, sequences = _sections(memoryview(body)[_UINT32.size : end])
    for identifier, documents in sequences.items():
        if identifier in command:
            raise MalformedMessage(f"{identifier!r} is both in the body and a document sequence")
        command[identifier] = documents
    return Request(
        header.request_id,
        OP_MSG,
        command,
        more_to_come=bool(flags & MORE_TO_COME),
        exhaust_allowed=bool(flags & EXHAUST_ALLOWED),
    )


def _checked_end(header: Header, body: bytes) -> int:
    """Where the sections end, once the CRC-32C trailer is verified."""
    end = len(body) - _UINT32.size
    if end < _UINT32.size:
        raise MalformedMessage("OP_MSG too short for its checksum")
    (given,) = _UINT32.unpack_from(body, end)
    whole = HEADER.pack(header.length, header.request_id, header.response_to, header.op_code) + body[:end]
    if crc32c(whole) != given:
        raise MalformedMessage("OP_MSG checksum mismatch")
    return end


def _sections(view: memoryview) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The kind-0 body (exactly one) and the kind-1 sequences by identifier."""
    offset = 0
    command: dict[str, Any] | None = None
    sequences: dict[str, list[dict[str, Any]]] = {}
    while offset < len(view):
        kind = view[offset]
        offset += 1
        if kind == 0:
            if command is not None:
                raise MalformedMessage("OP_MSG with more than one kind-0 section")
            command, offset = _document_at(view, offset)
        elif kind == 1:
            identifier, documents, offset = _sequence_at(view, offset)
            if identifier in sequences:
                raise MalformedMessage(f"duplicate document sequence {identifier!r}")
            sequences[identifier] = documents
        else:
            raise MalformedMessage(f"unknown OP_MSG section kind {kind}")
    if command is None:
        raise MalformedMessage("OP_MSG without a kind-0 section")
    return command, sequences


def _sequence_at(view: memoryview, offset: int) -> tuple[str, list[dict[str, Any]], int]:
    if offset + _INT32.size > len(view):
        raise MalformedMessage("truncated document sequence")
    (size,) = _INT32.unpack_from(view, offset)
    end = offset + size
    if size < _MIN_DOCUMENT or end > len(view):
        raise MalformedMessage("document sequence runs past the message")
    identifier, position = _cstring_at(view, offset + _INT32.size)
    documents: list[dict[str, Any]] = []
    while position < end:
        document, position = _document_at(view[:end], position)
        documents.append(document)
    return identifier, documents, end


def _parse_query(header: Header, body: bytes) -> Request:
    """An OP_QUERY: only commands (``<db>.$cmd``) are read, as drivers send the handshake."""
    view = memoryview(body)
    if len(view) < _INT32.size:
        raise MalformedMessage("OP_QUERY without flags")
    namespace, offset = _cstring_at(view, _INT32.size)
    offset += 8  # numberToSkip, numberToReturn
    query, _ = _document_at(view, offset)
    database, _, collection = namespace.partition(".")
    if collection != "$cmd":
        raise MalformedMessage(f"OP_QUERY on {namespace!r}: only commands are served")
    # A command sent through OP_QUERY may wrap itself as {$query: {...}, $readPreference: ...}.
    command = dict(query["$query"]) if isinstance(query.get("$query"), dict) else query
    command.setdefault("$db", database)
    return Request(header.request_id, OP_QUERY, command)


def encode_reply(request: Request, reply: dict[str, Any], request_id: int) -> bytes:
    """The reply to ``request`` in the opcode it came in: OP_REPLY for OP_QUERY, OP_MSG otherwise."""
    document = bson.encode(reply)
    if request.op_code == OP_QUERY:
        payload = _REPLY_FIXED.pack(8, 0, 0, 1) + document  # flags: AwaitCapable, as servers set
        op_code = OP_REPLY
    else:
        payload = _UINT32.pack(0) + b"\x00" + document
        op_code = OP_MSG
    header = HEADER.pack(HEADER.size + len(payload), request_id, request.request_id, op_code)
    return header + payload
