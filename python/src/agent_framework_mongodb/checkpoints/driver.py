"""The slice of pymongo's asynchronous API that the storage uses, as structural types.

The storage duck-types its client and collection: pymongo's ``AsyncMongoClient`` and
``AsyncCollection`` satisfy these protocols, and so do the in-process engine
(:mod:`agent_framework_mongodb.testing`), wrappers and instrumentation proxies. Nothing in the
package checks ``isinstance`` against a pymongo class.

Each method states exactly the call the storage makes (leading arguments positionally, options
by keyword), so a wrapper need implement no more than that; pymongo's wider signatures accept
these calls too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

from pymongo import IndexModel, UpdateMany, UpdateOne
from pymongo.read_preferences import Primary

__all__ = [
    "BulkOutcome",
    "CheckpointClient",
    "CheckpointCollection",
    "CheckpointCursor",
    "CheckpointDatabase",
    "CheckpointIndexCursor",
    "DeleteOutcome",
    "Document",
    "WriteConcernView",
]

Document = dict[str, Any]
"""A BSON document as pymongo decodes it by default."""

Filter = Mapping[str, Any]
Projection = Mapping[str, int]
Sort = Sequence[tuple[str, int]]
Collation = Mapping[str, Any]


class CheckpointCursor(Protocol):
    """A query cursor; the storage drains it with ``to_list``."""

    def __aiter__(self) -> AsyncIterator[Document]: ...

    async def to_list(self, length: int | None = None) -> list[Document]: ...


class CheckpointIndexCursor(Protocol):
    """The cursor ``list_indexes`` returns."""

    async def to_list(self, length: int | None = None) -> Sequence[Mapping[str, Any]]: ...


class DeleteOutcome(Protocol):
    """What ``delete_one`` and ``delete_many`` return (pymongo's ``DeleteResult``)."""

    @property
    def acknowledged(self) -> bool: ...

    @property
    def deleted_count(self) -> int: ...


class BulkOutcome(Protocol):
    """What ``bulk_write`` returns (pymongo's ``BulkWriteResult``); ``upserted_ids`` maps a
    request's index to the ``_id`` its upsert inserted."""

    @property
    def acknowledged(self) -> bool: ...

    @property
    def matched_count(self) -> int: ...

    @property
    def modified_count(self) -> int: ...

    @property
    def upserted_count(self) -> int: ...

    @property
    def upserted_ids(self) -> Mapping[int, Any] | None: ...


class WriteConcernView(Protocol):
    """A write concern (pymongo's ``WriteConcern``); the storage reads only whether it is acknowledged."""

    @property
    def acknowledged(self) -> bool: ...


class CheckpointDatabase(Protocol):
    """The database a collection lives in; used to ping the server."""

    async def command(self, command: str, /) -> Mapping[str, Any]: ...


class CheckpointCollection(Protocol):
    """The collection operations the storage issues, exactly as it issues them."""

    @property
    def name(self) -> str: ...

    @property
    def database(self) -> CheckpointDatabase: ...

    @property
    def write_concern(self) -> WriteConcernView: ...

    def with_options(self, *, read_preference: Primary) -> CheckpointCollection: ...

    async def find_one(
        self,
        filter: Filter,
        projection: Projection,
        /,
        *,
        sort: Sort | None,
        collation: Collation,
        skip: int = 0,
    ) -> Document | None: ...

    def find(
        self, filter: Filter, projection: Projection, /, *, sort: Sort, limit: int, collation: Collation
    ) -> CheckpointCursor: ...

    async def aggregate(
        self, pipeline: Sequence[Mapping[str, Any]], /, *, collation: Collation
    ) -> CheckpointCursor: ...

    async def find_one_and_update(
        self,
        filter: Filter,
        update: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        projection: Projection,
        /,
        *,
        upsert: bool,
        return_document: bool,
        collation: Collation,
    ) -> Document | None: ...

    async def delete_one(self, filter: Filter, /, *, collation: Collation) -> DeleteOutcome: ...

    async def delete_many(self, filter: Filter, /, *, collation: Collation) -> DeleteOutcome: ...

    async def create_indexes(self, indexes: Sequence[IndexModel], /) -> list[str]: ...

    async def list_indexes(self) -> CheckpointIndexCursor: ...

    async def bulk_write(
        self, requests: Sequence[UpdateOne | UpdateMany], /, *, ordered: bool
    ) -> BulkOutcome: ...


class _DatabaseWithCollections(Protocol):
    def __getitem__(self, name: str, /) -> CheckpointCollection: ...


class CheckpointClient(Protocol):
    """A client: ``client[database][collection]``, and ``close()`` for an owned one."""

    def __getitem__(self, name: str, /) -> _DatabaseWithCollections: ...

    async def close(self) -> None: ...
