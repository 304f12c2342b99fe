"""A collection proxy that records the query shape of every call the storage makes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from pymongo.write_concern import WriteConcern

from agent_framework_mongodb.testing import InMemoryCollection, InMemoryCursor, InMemoryDatabase

QUERY_METHODS = frozenset(
    {
        "find",
        "find_one",
        "find_one_and_update",
        "delete_one",
        "delete_many",
        "count_documents",
        "bulk_write",
        "aggregate",
        "aggregate_lookup",
    }
)


@dataclasses.dataclass(frozen=True)
class Shape:
    """One query as the storage sent it, with the public operation that sent it."""

    operation: str
    method: str
    filter: Mapping[str, Any]
    sort: tuple[tuple[str, int], ...]
    projection: Mapping[str, Any] | None
    collation: Mapping[str, Any] | None

    def describe(self) -> str:
        fields = {key: (value if isinstance(value, Mapping) else "=") for key, value in self.filter.items()}
        return (
            f"{self.operation}: {self.method} filter={fields} sort={list(self.sort)} "
            f"collation={self.collation}"
        )


def _sort_pairs(sort: Any) -> tuple[tuple[str, int], ...]:
    if sort is None:
        return ()
    if isinstance(sort, Mapping):
        return tuple((str(key), int(value)) for key, value in sort.items())
    return tuple((str(key), int(value)) for key, value in sort)


def _collation(collation: Any) -> Mapping[str, Any] | None:
    if collation is None:
        return None
    document = getattr(collation, "document", collation)  # pymongo.collation.Collation
    return dict(document)


class RecordingCollection:
    """Forwards to the in-process engine; records every query call under ``operation``."""

    def __init__(self, inner: InMemoryCollection) -> None:
        self.inner = inner
        self.operation = "setup"
        self.shapes: list[Shape] = []
        self.methods: list[tuple[str, str]] = []

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def database(self) -> InMemoryDatabase:
        return self.inner.database

    @property
    def write_concern(self) -> WriteConcern:
        return self.inner.write_concern

    def with_options(self, **options: Any) -> RecordingCollection:
        """The storage binds its collection once; the proxy keeps wrapping the derived one."""
        self.inner = self.inner.with_options(**options)
        return self

    def _record(
        self,
        method: str,
        filter: Mapping[str, Any] | None,
        *,
        projection: Mapping[str, Any] | None = None,
        sort: Any = None,
        collation: Any = None,
    ) -> None:
        self.methods.append((self.operation, method))
        self.shapes.append(
            Shape(
                operation=self.operation,
                method=method,
                filter=dict(filter or {}),
                sort=_sort_pairs(sort),
                projection=None if projection is None else dict(projection),
                collation=_collation(collation),
            )
        )

    def find(
        self,
        filter: Mapping[str, Any] | None = None,
        projection: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> InMemoryCursor:
        self._record(
            "find", filter, projection=projection, sort=kwargs.get("sort"), collation=kwargs.get("collation")
        )
        return self.inner.find(filter, projection, **kwargs)

    async def aggregate(self, pipeline: Sequence[Mapping[str, Any]], **kwargs: Any) -> Any:
        """Records the pipeline's leading find (``$match`` and ``$sort``) as ``aggregate`` and each
        ``$lookup``'s query of the joined collection as ``aggregate_lookup``: its ``foreignField``
        stated by equality (a placeholder value) and its own leading ``$match``."""
        collation = kwargs.get("collation")
        stages = [next(iter(stage.items())) for stage in pipeline]
        match: Mapping[str, Any] = next((spec for name, spec in stages if name == "$match"), {})
        sort = next((spec for name, spec in stages if name == "$sort"), None)
        self._record("aggregate", match, sort=sort, collation=collation)
        for name, spec in stages:
            if name == "$lookup":
                inner = [next(iter(stage.items())) for stage in spec.get("pipeline", [])]
                joined = {spec["foreignField"]: "<joined>"} if "foreignField" in spec else {}
                inner_match: Mapping[str, Any] = next((s for n, s in inner if n == "$match"), {})
                self._record("aggregate_lookup", {**joined, **inner_match}, collation=collation)
        return await self.inner.aggregate(pipeline, **kwargs)

    async def find_one(
        self, filter: Any = None, projection: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> dict[str, Any] | None:
        self._record(
            "find_one",
            filter,
            projection=projection,
            sort=kwargs.get("sort"),
            collation=kwargs.get("collation"),
        )
        return await self.inner.find_one(filter, projection, **kwargs)

    async def find_one_and_update(
        self,
        filter: Mapping[str, Any],
        update: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        projection: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any] | None:
        self._record(
            "find_one_and_update",
            filter,
            projection=projection,
            sort=kwargs.get("sort"),
            collation=kwargs.get("collation"),
        )
        return await self.inner.find_one_and_update(filter, update, projection, **kwargs)

    async def delete_one(self, filter: Mapping[str, Any], **kwargs: Any) -> Any:
        self._record("delete_one", filter, collation=kwargs.get("collation"))
        return await self.inner.delete_one(filter, **kwargs)

    async def delete_many(self, filter: Mapping[str, Any], **kwargs: Any) -> Any:
        self._record("delete_many", filter, collation=kwargs.get("collation"))
        return await self.inner.delete_many(filter, **kwargs)

    async def bulk_write(self, requests: Sequence[Any], **kwargs: Any) -> Any:
        # Each request's filter is a query shape; pymongo's write models keep it in ``_filter``.
        for request in requests:
            self._record("bulk_write", request._filter, collation=request._collation)
        return await self.inner.bulk_write(requests, **kwargs)

    async def count_documents(self, filter: Mapping[str, Any], **kwargs: Any) -> int:
        self._record("count_documents", filter, collation=kwargs.get("collation"))
        return await self.inner.count_documents(filter, **kwargs)

    async def insert_one(self, document: Any, **kwargs: Any) -> Any:
        self.methods.append((self.operation, "insert_one"))  # a write by _id: no query shape
        return await self.inner.insert_one(document, **kwargs)

    async def create_indexes(self, indexes: Sequence[Any], **kwargs: Any) -> list[str]:
        self.methods.append((self.operation, "create_indexes"))
        return await self.inner.create_indexes(indexes, **kwargs)

    async def list_indexes(self, **kwargs: Any) -> Any:
        self.methods.append((self.operation, "list_indexes"))
        return await self.inner.list_indexes(**kwargs)
