"""The collection a storage or catalog talks to: each request ends by its operation's deadline.

:class:`BoundedCollection` wraps the collection a storage was given (pymongo's, the in-process
engine's or a wrapper) and sends every call of :class:`~.driver.CheckpointCollection` through
:func:`~.deadlines.bounded`, cursors' fetches included, so no step of the package awaits the driver
directly and nothing the package does cancels a task inside it (``deadlines.py`` says why).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from pymongo import IndexModel, UpdateMany, UpdateOne
from pymongo.read_preferences import Primary

from .deadlines import bounded
from .driver import (
    BulkOutcome,
    CheckpointCollection,
    CheckpointCursor,
    CheckpointDatabase,
    CheckpointIndexCursor,
    DeleteOutcome,
    Document,
    WriteConcernView,
)

__all__ = ["BoundedCollection"]


class BoundedCollection:
    """``collection``, with every request run by :func:`~.deadlines.bounded`.

    Equal to, and hashed as, the collection it wraps, so per-collection memory (which indexes this
    process looked at) treats two storages of one collection as one. ``database`` is the wrapped
    collection's own; the few commands sent through it go through ``bounded`` where they are sent.
    """

    __slots__ = ("__weakref__", "_inner")  # weakly referable: provisioning remembers collections

    def __init__(self, collection: CheckpointCollection) -> None:
        self._inner = collection

    @property
    def unbounded(self) -> CheckpointCollection:
        """The wrapped collection, for inspection (its settings); never for requests."""
        return self._inner

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def database(self) -> CheckpointDatabase:
        return self._inner.database

    @property
    def write_concern(self) -> WriteConcernView:
        return self._inner.write_concern

    def __eq__(self, other: object) -> bool:
        inner = other._inner if isinstance(other, BoundedCollection) else other
        return bool(self._inner == inner)

    def __hash__(self) -> int:
        return hash(self._inner)

    def __repr__(self) -> str:
        return f"BoundedCollection({self._inner!r})"

    def with_options(self, *, read_preference: Primary) -> BoundedCollection:
        return BoundedCollection(self._inner.with_options(read_preference=read_preference))

    async def find_one(
        self,
        filter: Mapping[str, Any],
        projection: Mapping[str, int],
        /,
        *,
        sort: Sequence[tuple[str, int]] | None,
        collation: Mapping[str, Any],
        skip: int = 0,
    ) -> Document | None:
        return await bounded(
            self._inner.find_one(filter, projection, sort=sort, collation=collation, skip=skip)
        )

    def find(
        self,
        filter: Mapping[str, Any],
        projection: Mapping[str, int],
        /,
        *,
        sort: Sequence[tuple[str, int]],
        limit: int,
        collation: Mapping[str, Any],
    ) -> CheckpointCursor:
        # Building a cursor sends nothing; its fetches are bounded.
        return _BoundedCursor(
            self._inner.find(filter, projection, sort=sort, limit=limit, collation=collation)
        )

    async def aggregate(
        self, pipeline: Sequence[Mapping[str, Any]], /, *, collation: Mapping[str, Any]
    ) -> CheckpointCursor:
        return _BoundedCursor(await bounded(self._inner.aggregate(pipeline, collation=collation)))

    async def find_one_and_update(
        self,
        filter: Mapping[str, Any],
        update: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        projection: Mapping[str, int],
        /,
        *,
        upsert: bool,
        return_document: bool,
        collation: Mapping[str, Any],
    ) -> Document | None:
        return await bounded(
            self._inner.find_one_and_update(
                filter,
                update,
                projection,
                upsert=upsert,
                return_document=return_document,
                collation=collation,
            )
        )

    async def delete_one(
        self, filter: Mapping[str, Any], /, *, collation: Mapping[str, Any]
    ) -> DeleteOutcome:
        return await bounded(self._inner.delete_one(filter, collation=collation))

    async def delete_many(
        self, filter: Mapping[str, Any], /, *, collation: Mapping[str, Any]
    ) -> DeleteOutcome:
        return await bounded(self._inner.delete_many(filter, collation=collation))

    async def create_indexes(self, indexes: Sequence[IndexModel], /) -> list[str]:
        return await bounded(self._inner.create_indexes(indexes))

    async def list_indexes(self) -> CheckpointIndexCursor:
        return _BoundedIndexCursor(await bounded(self._inner.list_indexes()))

    async def bulk_write(
        self, requests: Sequence[UpdateOne | UpdateMany], /, *, ordered: bool
    ) -> BulkOutcome:
        return await bounded(self._inner.bulk_write(requests, ordered=ordered))


class _BoundedCursor:
    """A query cursor whose every fetch is bounded."""

    __slots__ = ("_inner",)

    def __init__(self, cursor: CheckpointCursor) -> None:
        self._inner = cursor

    def __aiter__(self) -> AsyncIterator[Document]:
        return self._documents()

    async def _documents(self) -> AsyncIterator[Document]:
        documents = self._inner.__aiter__()
        while True:
            try:
                document = await bounded(documents.__anext__())
            except StopAsyncIteration:
                return
            yield document

    async def to_list(self, length: int | None = None) -> list[Document]:
        return await bounded(self._inner.to_list(length))


class _BoundedIndexCursor:
    """The ``list_indexes`` cursor, its fetch bounded."""

    __slots__ = ("_inner",)

    def __init__(self, cursor: CheckpointIndexCursor) -> None:
        self._inner = cursor

    async def to_list(self, length: int | None = None) -> Sequence[Mapping[str, Any]]:
        return await bounded(self._inner.to_list(length))
