"""The slice of pymongo's asynchronous API that the storage uses, as structural types.

The storage duck-types its client and collection: pymongo's ``AsyncMongoClient`` and
``AsyncCollection`` satisfy these protocols, and so do the in-process engine
(:mod:`agent_framework_mongodb.testing`), wrappers and instrumentation proxies. Nothing in the
package checks ``isinstance`` against a pymongo class.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "CheckpointClient",
    "CheckpointCollection",
    "CheckpointCursor",
    "CheckpointDatabase",
    "CheckpointIndexCursor",
    "Document",
]

Document = dict[str, Any]
"""A BSON document as pymongo decodes it by default."""


class CheckpointCursor(Protocol):
    """A query cursor: iterated with ``async for`` or drained with ``to_list``."""

    def __aiter__(self) -> AsyncIterator[Document]: ...

    async def to_list(self, length: int | None = None) -> list[Document]: ...


class CheckpointIndexCursor(Protocol):
    """The cursor ``list_indexes`` returns."""

    async def to_list(self, length: int | None = None) -> Sequence[Mapping[str, Any]]: ...


class CheckpointDatabase(Protocol):
    """The database a collection lives in; used to ping the server."""

    async def command(self, command: str, *args: Any, **kwargs: Any) -> Mapping[str, Any]: ...


class CheckpointCollection(Protocol):
    """The collection operations the storage issues."""

    @property
    def database(self) -> CheckpointDatabase: ...

    async def find_one(self, filter: Any | None = None, *args: Any, **kwargs: Any) -> Document | None: ...

    def find(self, *args: Any, **kwargs: Any) -> CheckpointCursor: ...

    async def insert_one(self, document: Any, *args: Any, **kwargs: Any) -> Any: ...

    async def find_one_and_update(
        self,
        filter: Mapping[str, Any],
        update: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *args: Any,
        **kwargs: Any,
    ) -> Document | None: ...

    async def delete_one(self, filter: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any: ...

    async def delete_many(self, filter: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any: ...

    async def create_indexes(self, indexes: Sequence[Any], *args: Any, **kwargs: Any) -> list[str]: ...

    async def list_indexes(self, *args: Any, **kwargs: Any) -> CheckpointIndexCursor: ...


class _DatabaseWithCollections(Protocol):
    def __getitem__(self, name: str) -> CheckpointCollection: ...


class CheckpointClient(Protocol):
    """A client: ``client[database][collection]``, and ``close()`` for an owned one."""

    def __getitem__(self, name: str) -> _DatabaseWithCollections: ...

    async def close(self) -> None: ...
