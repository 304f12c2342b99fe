"""Async cursors shaped like pymongo's ``AsyncCursor`` and ``AsyncCommandCursor``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from pymongo.collation import Collation
from pymongo.errors import InvalidOperation

from ._collation import check_collation

SortSpec = str | Sequence[str | tuple[str, int]] | Mapping[str, int]


def normalize_sort(key_or_list: SortSpec | None, direction: int | None = None) -> list[tuple[str, int]]:
    """The ``(field, direction)`` pairs pymongo would send for a sort argument."""
    if key_or_list is None:
        return []
    if isinstance(key_or_list, str):
        return [(key_or_list, 1 if direction is None else direction)]
    pairs = list(key_or_list.items()) if isinstance(key_or_list, Mapping) else list(key_or_list)
    out: list[tuple[str, int]] = []
    for item in pairs:
        field, value = (item, 1) if isinstance(item, str) else item
        if value not in (1, -1):
            raise ValueError(f"bad sort specification {value!r}: only 1 and -1 are simulated")
        out.append((field, value))
    return out


class InMemoryCommandCursor:
    """A cursor over results computed by one command (``list_indexes``)."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self._documents = documents
        self._position = 0

    def __aiter__(self) -> InMemoryCommandCursor:
        return self

    async def __anext__(self) -> dict[str, Any]:
        await asyncio.sleep(0)
        if self._position >= len(self._documents):
            raise StopAsyncIteration
        self._position += 1
        return self._documents[self._position - 1]

    async def next(self) -> dict[str, Any]:
        return await self.__anext__()

    async def to_list(self, length: int | None = None) -> list[dict[str, Any]]:
        await asyncio.sleep(0)
        end = len(self._documents) if length is None else min(len(self._documents), self._position + length)
        batch = self._documents[self._position : end]
        self._position = end
        return batch

    async def close(self) -> None:
        self._position = len(self._documents)

    @property
    def alive(self) -> bool:
        return self._position < len(self._documents)


Runner = Callable[["InMemoryCursor"], Awaitable[list[dict[str, Any]]]]


class InMemoryCursor:
    """The cursor ``InMemoryCollection.find`` returns; options chain until the first fetch.

    The whole result is computed atomically on the first fetch (like one server batch holding
    everything); each step of ``async for`` still yields to the event loop.
    """

    def __init__(
        self,
        runner: Runner,
        filter_: Mapping[str, Any],
        projection: Mapping[str, Any] | None,
        *,
        sort: list[tuple[str, int]],
        limit: int,
        skip: int,
        collation: Collation | Mapping[str, Any] | None,
        hint: str | Mapping[str, Any] | None,
    ) -> None:
        self._runner = runner
        self.filter = filter_
        self.projection = projection
        self.sort_spec = sort
        self.limit_value = limit
        self.skip_value = skip
        self.collation_value = collation
        self.hint_value = hint
        self.batch_size_value = 0
        self._results: list[dict[str, Any]] | None = None
        self._position = 0
        self._killed = False

    def _check_okay_to_chain(self) -> None:
        if self._results is not None or self._killed:
            raise InvalidOperation("cannot set options after executing query")

    def sort(self, key_or_list: SortSpec, direction: int | None = None) -> InMemoryCursor:
        self._check_okay_to_chain()
        self.sort_spec = normalize_sort(key_or_list, direction)
        return self

    def limit(self, limit: int) -> InMemoryCursor:
        given = cast("object", limit)
        if isinstance(given, bool) or not isinstance(given, int):
            raise TypeError("limit must be an integer")
        self._check_okay_to_chain()
        self.limit_value = limit
        return self

    def skip(self, skip: int) -> InMemoryCursor:
        given = cast("object", skip)
        if isinstance(given, bool) or not isinstance(given, int):
            raise TypeError("skip must be an integer")
        if skip < 0:
            raise ValueError("skip must be >= 0")
        self._check_okay_to_chain()
        self.skip_value = skip
        return self

    def collation(self, collation: Collation | Mapping[str, Any] | None) -> InMemoryCursor:
        self._check_okay_to_chain()
        check_collation(collation)
        self.collation_value = collation
        return self

    def hint(self, index: str | Sequence[tuple[str, int]] | Mapping[str, int] | None) -> InMemoryCursor:
        self._check_okay_to_chain()
        self.hint_value = index if index is None or isinstance(index, str) else dict(normalize_sort(index))
        return self

    def batch_size(self, batch_size: int) -> InMemoryCursor:
        if batch_size < 0:
            raise ValueError("batch_size must be >= 0")
        self._check_okay_to_chain()
        self.batch_size_value = batch_size  # sent, so counted in the command's size; else unused
        return self

    async def _fetch(self) -> list[dict[str, Any]]:
        if self._results is None:
            self._results = await self._runner(self)
        return self._results

    def __aiter__(self) -> InMemoryCursor:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._killed:
            raise StopAsyncIteration
        results = await self._fetch()
        await asyncio.sleep(0)
        if self._position >= len(results):
            raise StopAsyncIteration
        self._position += 1
        return results[self._position - 1]

    async def next(self) -> dict[str, Any]:
        return await self.__anext__()

    async def to_list(self, length: int | None = None) -> list[dict[str, Any]]:
        if length is not None and length < 0:
            raise ValueError("to_list() length must be greater than or equal to 0")
        if self._killed:
            return []
        results = await self._fetch()
        end = len(results) if length is None else min(len(results), self._position + length)
        batch = results[self._position : end]
        self._position = end
        return batch

    async def close(self) -> None:
        self._killed = True

    @property
    def alive(self) -> bool:
        return not self._killed and (self._results is None or self._position < len(self._results))
