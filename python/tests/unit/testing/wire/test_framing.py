"""Framing: OP_MSG sections and flags, the CRC-32C trailer, the OP_QUERY handshake, the size limits.

These talk to the front over a raw socket, so each byte is the test's own.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import bson
import pytest

from agent_framework_mongodb.testing import WireProtocolServer
from agent_framework_mongodb.testing._wire._crc32c import crc32c

OP_REPLY, OP_QUERY, OP_MSG = 1, 2004, 2013
MORE_TO_COME = 1 << 1
CHECKSUM_PRESENT = 1 << 0


def op_msg(
    request_id: int,
    body: dict[str, Any],
    *,
    sequences: dict[str, list[dict[str, Any]]] | None = None,
    flags: int = 0,
    checksum: bool = False,
) -> bytes:
    payload = struct.pack("<I", flags | (CHECKSUM_PRESENT if checksum else 0)) + b"\x00" + bson.encode(body)
    for identifier, documents in (sequences or {}).items():
        section = identifier.encode() + b"\x00" + b"".join(bson.encode(document) for document in documents)
        payload += b"\x01" + struct.pack("<i", len(section) + 4) + section
    length = 16 + len(payload) + (4 if checksum else 0)
    message = struct.pack("<iiii", length, request_id, 0, OP_MSG) + payload
    return message + struct.pack("<I", crc32c(message)) if checksum else message


def op_query(request_id: int, command: dict[str, Any]) -> bytes:
    body = struct.pack("<i", 0) + b"admin.$cmd\x00" + struct.pack("<ii", 0, -1) + bson.encode(command)
    return struct.pack("<iiii", 16 + len(body), request_id, 0, OP_QUERY) + body


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, message: bytes) -> None:
        self.writer.write(message)
        await self.writer.drain()

    async def reply(self) -> tuple[int, int, dict[str, Any]]:
        """(responseTo, opCode, document) of the next reply."""
        length, _, response_to, op_code = struct.unpack("<iiii", await self.reader.readexactly(16))
        body = await self.reader.readexactly(length - 16)
        if op_code == OP_REPLY:
            return response_to, op_code, bson.decode(body[20:])
        assert body[:5] == b"\x00\x00\x00\x00\x00"  # no flags, one kind-0 section
        return response_to, op_code, bson.decode(body[5:])

    async def closed(self) -> bool:
        """Whether the server closed the connection without a reply (bounded: a hang fails the test)."""
        return await asyncio.wait_for(self.reader.read(), timeout=10) == b""


@pytest.fixture
async def raw(wire_server: WireProtocolServer) -> Any:
    reader, writer = await asyncio.open_connection("127.0.0.1", wire_server.port)
    yield Connection(reader, writer)
    writer.close()


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C


async def test_the_handshake_over_op_query_is_answered_with_op_reply(raw: Connection) -> None:
    await raw.send(op_query(7, {"isMaster": 1, "helloOk": True}))
    response_to, op_code, reply = await raw.reply()
    assert (response_to, op_code) == (7, OP_REPLY)
    assert reply["ismaster"] is True
    assert reply["helloOk"] is True
    assert "isWritablePrimary" not in reply
    assert "compression" not in reply


async def test_kind_1_sequences_and_a_checksum_are_read(
    raw: Connection, wire_server: WireProtocolServer
) -> None:
    documents = [{"_id": 1}, {"_id": 2}]
    await raw.send(op_msg(1, {"insert": "c", "$db": "d"}, sequences={"documents": documents}, checksum=True))
    assert await raw.reply() == (1, OP_MSG, {"n": 2, "ok": 1.0})
    assert await wire_server.engine["d"]["c"].find({}).to_list() == documents


async def test_a_wrong_checksum_closes_the_connection(raw: Connection) -> None:
    message = bytearray(op_msg(1, {"ping": 1, "$db": "admin"}, checksum=True))
    message[-1] ^= 0xFF
    await raw.send(bytes(message))
    assert await raw.closed()


async def test_more_to_come_gets_no_reply_and_the_write_is_applied(
    raw: Connection, wire_server: WireProtocolServer
) -> None:
    unacknowledged = {"insert": "c", "$db": "d", "writeConcern": {"w": 0}}
    await raw.send(op_msg(1, unacknowledged, sequences={"documents": [{"_id": 1}]}, flags=MORE_TO_COME))
    await raw.send(op_msg(2, {"ping": 1, "$db": "admin"}))
    response_to, _, reply = await raw.reply()
    assert response_to == 2  # the first reply is the ping's: the insert got none
    assert reply == {"ok": 1.0}
    assert await wire_server.engine["d"]["c"].count_documents({}) == 1


@pytest.mark.parametrize("bit", [2, 15])
async def test_an_unknown_required_flag_bit_closes_the_connection(raw: Connection, bit: int) -> None:
    await raw.send(op_msg(1, {"ping": 1, "$db": "admin"}, flags=1 << bit))
    assert await raw.closed()


async def test_an_unknown_optional_flag_bit_is_ignored(raw: Connection) -> None:
    await raw.send(op_msg(1, {"ping": 1, "$db": "admin"}, flags=1 << 20))
    assert (await raw.reply())[2] == {"ok": 1.0}


async def test_a_message_over_max_message_size_closes_the_connection(raw: Connection) -> None:
    await raw.send(struct.pack("<iiii", 48_000_001, 1, 0, OP_MSG))
    assert await raw.closed()


async def test_a_field_both_in_the_body_and_a_sequence_closes_the_connection(raw: Connection) -> None:
    body = {"insert": "c", "$db": "d", "documents": [{"_id": 1}]}
    await raw.send(op_msg(1, body, sequences={"documents": [{"_id": 2}]}))
    assert await raw.closed()


async def test_a_write_over_max_write_batch_size_is_refused_before_anything_runs(
    raw: Connection, wire_server: WireProtocolServer
) -> None:
    documents = [{"_id": index} for index in range(100_001)]
    await raw.send(op_msg(1, {"insert": "c", "$db": "d"}, sequences={"documents": documents}))
    _, _, reply = await raw.reply()
    assert (reply["ok"], reply["code"], reply["codeName"]) == (0.0, 16, "InvalidLength")
    assert await wire_server.engine["d"]["c"].count_documents({}) == 0


async def test_a_command_without_db_is_refused(raw: Connection) -> None:
    await raw.send(op_msg(1, {"ping": 1}))
    assert (await raw.reply())[2]["code"] == 40571


async def test_a_document_over_the_internal_bson_limit_closes_the_connection(raw: Connection) -> None:
    too_big = {"ping": 1, "$db": "admin", "pad": "x" * (16 * 1024 * 1024 + 16 * 1024)}
    await raw.send(op_msg(1, too_big))
    assert await raw.closed()
