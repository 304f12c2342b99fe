"""Server-side cursors: results held by id and handed out in batches across ``getMore``.

The engine computes a query's whole result at once (DIVERGENCES.md entry 7); the front keeps it
under a cursor id and returns it the way a server batches: the first batch holds at most
``batchSize`` documents (101 when none is given), a ``getMore`` at most its ``batchSize`` (no count
limit when none is given), and every batch stops before the reply would pass 16 MiB, always
holding at least one document (https://www.mongodb.com/docs/manual/tutorial/iterate-a-cursor/#cursor-batches).
A cursor whose results are all handed out is closed and reported with id 0.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Final

import bson

from ._replies import CommandError

DEFAULT_FIRST_BATCH: Final = 101
_BATCH_BYTES: Final = 16 * 1024 * 1024
_CURSOR_NOT_FOUND: Final = 43


@dataclass
class _Cursor:
    namespace: str
    documents: list[dict[str, Any]]
    position: int = 0
    sizes: list[int] = field(default_factory=list[int])


@dataclass(frozen=True)
class Batch:
    cursor_id: int
    documents: list[dict[str, Any]]


class Cursors:
    """The open cursors of one server (shared by its connections, as a server's are)."""

    def __init__(self) -> None:
        self._open: dict[int, _Cursor] = {}

    def __len__(self) -> int:
        return len(self._open)

    def first_batch(
        self,
        namespace: str,
        documents: list[dict[str, Any]],
        *,
        batch_size: int | None,
        single_batch: bool = False,
    ) -> dict[str, Any]:
        """The ``cursor`` field of a find/aggregate/listIndexes reply over ``documents``."""
        cursor = _Cursor(namespace, documents)
        limit = DEFAULT_FIRST_BATCH if batch_size is None else batch_size
        batch = _take(cursor, limit)
        cursor_id = 0
        if not single_batch and cursor.position < len(documents):
            cursor_id = self._new_id()
            self._open[cursor_id] = cursor
        return {"firstBatch": batch, "id": bson.Int64(cursor_id), "ns": namespace}

    def get_more(self, cursor_id: int, namespace: str, batch_size: int | None) -> dict[str, Any]:
        cursor = self._open.get(cursor_id)
        if cursor is None:
            raise CommandError(_CURSOR_NOT_FOUND, f"cursor id {cursor_id} not found")
        if cursor.namespace != namespace:
            raise CommandError(
                13,
                f"Requested getMore on namespace '{namespace}', but cursor belongs to a different"
                f" namespace {cursor.namespace}",
            )
        batch = _take(cursor, batch_size or 0)
        if cursor.position >= len(cursor.documents):
            del self._open[cursor_id]
            cursor_id = 0
        return {"nextBatch": batch, "id": bson.Int64(cursor_id), "ns": namespace}

    def kill(self, namespace: str, cursor_ids: list[int]) -> dict[str, Any]:
        killed: list[bson.Int64] = []
        missing: list[bson.Int64] = []
        for cursor_id in cursor_ids:
            cursor = self._open.get(cursor_id)
            if cursor is not None and cursor.namespace == namespace:
                del self._open[cursor_id]
                killed.append(bson.Int64(cursor_id))
            else:
                missing.append(bson.Int64(cursor_id))
        return {"cursorsKilled": killed, "cursorsNotFound": missing, "cursorsAlive": [], "cursorsUnknown": []}

    def _new_id(self) -> int:
        while True:
            cursor_id = secrets.randbits(63)
            if cursor_id and cursor_id not in self._open:
                return cursor_id


def _take(cursor: _Cursor, limit: int) -> list[dict[str, Any]]:
    """The next batch: at most ``limit`` documents (0: no count limit) within 16 MiB, at least one."""
    batch: list[dict[str, Any]] = []
    size = 0
    while cursor.position < len(cursor.documents):
        if limit and len(batch) >= limit:
            break
        document = cursor.documents[cursor.position]
        document_size = len(bson.encode(document))
        if batch and size + document_size > _BATCH_BYTES:
            break
        batch.append(document)
        size += document_size
        cursor.position += 1
    return batch
