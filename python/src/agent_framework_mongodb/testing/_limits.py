"""Size limits: what pymongo refuses before sending a command, and what the server refuses.

pymongo checks a command's encoded size before sending it (``run_command`` in
pymongo/asynchronous/command_runner.py, pymongo 4.20): with an unacknowledged write any document
of the command's document sequence over ``maxBsonObjectSize``, and always a command larger than
``maxBsonObjectSize`` plus ``message._COMMAND_OVERHEAD`` (16,382 bytes), raise ``DocumentTooLarge``.
An acknowledged insert that passes is left to the server, which refuses a document over 16 MiB
with a write error, code 2 (BadValue) "object to insert too large" (``fixDocumentForInsert`` in
src/mongo/db/ops/insert.cpp; jstests/core/max_doc_size.js). ``insert_many`` batches its documents
itself (``_batched_op_msg_impl`` in pymongo/message.py): acknowledged, only a document that alone
exceeds ``maxMessageSizeBytes`` is refused client-side, and the server cannot parse a document over
its internal limit (16 MiB + 16 KiB), which fails the whole command with code 10334
(BSONObjectTooLarge), as the server's OP_MSG limit tests show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

import bson
from bson.binary import Binary
from pymongo.errors import DocumentTooLarge, WriteError

from ._codec import MAX_BSON_SIZE
from ._errors import command_error, write_error

COMMAND_OVERHEAD: Final = 16382
"""pymongo's ``message._COMMAND_OVERHEAD``: how far a command may exceed ``maxBsonObjectSize``."""

MAX_INTERNAL_SIZE: Final = MAX_BSON_SIZE + 16 * 1024
"""The server's ``BSONObjMaxInternalSize``: no BSON object it receives may be larger."""

MAX_MESSAGE_SIZE: Final = 48_000_000
"""``maxMessageSizeBytes`` as the engine's ``hello`` reports it."""

# The fields pymongo adds to every command sent to a standalone server: the implicit session's id
# and the database. A replica set also gets $clusterTime and, for retryable writes, txnNumber, about
# 150 bytes the engine does not count (DIVERGENCES.md).
_SESSION: Final = {"id": Binary(bytes(16), 4)}

# The document sequence a write command's documents travel in (pymongo's message._FIELD_MAP).
_SEQUENCES: Final = {"insert": "documents", "update": "updates", "delete": "deletes"}


# What an OP_MSG write holds beside the command and the first document: the message header, the
# flags, the two section kinds and the sequence's size (its identifier comes on top).
_MESSAGE_FRAMING: Final = 16 + 4 + 1 + 1 + 4


def check_command(
    database: str,
    command: Mapping[str, Any],
    *,
    acknowledged: bool,
    sequence_sizes: Sequence[int] | None = None,
) -> None:
    """Raise ``DocumentTooLarge`` where pymongo would before sending ``command``.

    ``sequence_sizes`` are the encoded sizes of the documents of the command's document sequence
    (``documents``, ``updates`` or ``deletes``); without them, that field of ``command`` is encoded.
    """
    name = next(iter(command))
    identifier = _SEQUENCES.get(name)
    body = dict(command)
    documents: list[Mapping[str, Any]] = body.pop(identifier, []) if identifier is not None else []
    if sequence_sizes is None:
        sequence_sizes = [len(bson.encode(document)) for document in documents]
    size = len(bson.encode({**body, "lsid": _SESSION, "$db": database}))
    if identifier is not None:
        size += len(identifier) + 1 + 4 + sum(sequence_sizes)  # the OP_MSG kind-1 section
    if not acknowledged and sequence_sizes and max(sequence_sizes) > MAX_BSON_SIZE:
        _too_large(name, size, MAX_BSON_SIZE)
    if size > MAX_BSON_SIZE + COMMAND_OVERHEAD:
        _too_large(name, size, MAX_BSON_SIZE + COMMAND_OVERHEAD)


def check_query(
    database: str, command: Mapping[str, Any], *, read_preference: Mapping[str, Any] | None
) -> None:
    """Raise ``DocumentTooLarge`` where pymongo refuses to send a ``find`` command.

    A cursor's first batch is not sent through ``run_command``: ``_Query.get_message`` returns the
    encoded command's total size in the place of the largest document's, and
    ``AsyncConnection.send_message`` refuses it when it exceeds ``maxBsonObjectSize`` itself, with
    no ``_COMMAND_OVERHEAD`` allowance and the insert-style text (pymongo/message.py,
    pymongo/asynchronous/cursor_base.py ``_run_with_conn``, pymongo/asynchronous/pool.py; pymongo
    4.20). So a ``find`` or ``find_one`` whose filter, projection and sort pass 16 MiB never reaches
    the server, while ``count_documents``, an ``aggregate`` command, gets the allowance. The
    command carries the session and the database as :func:`check_command`'s do, and a read
    preference other than primary (``_op_msg``).
    """
    body = {**command, "lsid": _SESSION, "$db": database}
    if read_preference is not None:
        body["$readPreference"] = read_preference
    size = len(bson.encode(body))
    if size > MAX_BSON_SIZE:
        raise DocumentTooLarge(
            f"BSON document too large ({size} bytes) - the connected server supports BSON document"
            f" sizes up to {MAX_BSON_SIZE} bytes."
        )


def insert_error(size: int, *, index: int = 0) -> WriteError | None:
    """The server's write error for a document of ``size`` bytes to insert, if it is too large."""
    if size <= MAX_BSON_SIZE:
        return None
    return write_error(
        2, f"object to insert too large. size in bytes: {size}, max size: {MAX_BSON_SIZE}", index=index
    )


def check_insert_many(database: str, collection: str, sizes: Sequence[int], *, acknowledged: bool) -> None:
    """Refuse an ``insert_many`` that pymongo or the server's message parsing refuses as a whole."""
    check_batched(database, "insert", collection, sizes, acknowledged=acknowledged)


def check_batched(
    database: str, name: str, collection: str, sizes: Sequence[int], *, acknowledged: bool
) -> None:
    """Refuse a write that pymongo splits into batches itself (``insert_many``, a ``bulk_write``'s
    inserts, updates or deletes; ``name`` is the command) as pymongo or the server's message
    parsing refuses it as a whole; ``sizes`` are its statements' encoded sizes."""
    command = {name: collection, "ordered": True}
    identifier = len(_SEQUENCES[name]) + 1
    overhead = (
        _MESSAGE_FRAMING + identifier + len(bson.encode({**command, "lsid": _SESSION, "$db": database}))
    )
    for size in sizes:
        if size + overhead > MAX_MESSAGE_SIZE or (not acknowledged and size > MAX_BSON_SIZE):
            _too_large(name, size, MAX_BSON_SIZE)
    for size in sizes:
        if size > MAX_INTERNAL_SIZE:
            raise command_error(
                10334,
                f"BSONObj size: {size} (0x{size:X}) is invalid. Size must be between 0 and"
                f" {MAX_INTERNAL_SIZE}(16MB)",
            )


def _too_large(name: str, size: int, limit: int) -> NoReturn:
    """pymongo's ``DocumentTooLarge``: its text names sizes for an insert only."""
    if name == "insert":
        raise DocumentTooLarge(
            f"BSON document too large ({size} bytes) - the connected server supports BSON document"
            f" sizes up to {limit} bytes."
        )
    raise DocumentTooLarge(f"{name} command document too large")
