"""A collection proxy for the long-run benchmark: round trips, bytes sent, time inside the engine.

``MeteredCollection`` extends ``CountingCollection`` (round trips by name) with two meters:

* ``sent_bytes``: the BSON size of every document the storage hands to a driver call (filters,
  updates and pipelines, inserted documents, projections, collations, and the filters and documents
  of pymongo's bulk write models), each measured with ``bson.encode``. It counts what the storage
  asks the driver to send, not the framing pymongo adds around it (command name, ``$db``, session
  ids: tens of bytes per command), so it is the same for any driver version and any server;
* ``inner_seconds``: the time with a request to the wrapped collection or its cursors in flight
  (requests sent together counted once), so that
  a save's time over the in-process engine can be split into the engine's share and the rest
  (the storage and codec, what a client pays whatever the server).

It meters calls by their arguments only, so it keeps working for query shapes the storage does not
issue yet (a chunk collection's inserts, a ``bulk_write``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import bson

from benchmarks._doubles import CountingCollection

__all__ = ["MeteredCollection", "sent_bytes"]

# pymongo's write models (InsertOne, UpdateOne, DeleteMany, ...) keep what they send in these
# slots; they have no public accessor. An attribute a model lacks is skipped.
_WRITE_MODEL_SLOTS = ("_filter", "_doc", "_array_filters")


def _documents(value: object) -> Iterator[Mapping[str, Any]]:
    if isinstance(value, Mapping):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _documents(item)
    else:
        for slot in _WRITE_MODEL_SLOTS:
            inner = getattr(value, slot, None)
            if isinstance(inner, (Mapping, list, tuple)):
                yield from _documents(inner)


def sent_bytes(args: tuple[object, ...], kwargs: Mapping[str, object]) -> int:
    """The BSON bytes of every document among a driver call's arguments (see the module)."""
    return sum(len(bson.encode(document)) for document in _documents((*args, *kwargs.values())))


class _MeteredCursor:
    """Meters what a (counting) cursor's ``find`` sent; the counting cursor times its fetches."""

    def __init__(self, owner: MeteredCollection, inner: Any) -> None:
        self._owner = owner
        self._inner = inner

    async def to_list(self, length: int | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._inner.to_list(length)
        return result

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._inner.__aiter__()  # type: ignore[no-any-return]


class MeteredCollection(CountingCollection):
    """Forwards to ``inner``; records round trips, bytes sent and time inside ``inner``."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.sent_bytes = 0

    @property
    def inner_seconds(self) -> float:
        """Time with at least one request in flight: requests sent together count once."""
        return self.busy_seconds

    def reset(self) -> None:
        """Start every meter afresh."""
        self.take()
        self.sent_bytes = 0
        self.busy_seconds = 0.0

    def find(self, *args: Any, **kwargs: Any) -> _MeteredCursor:  # type: ignore[override]
        self.sent_bytes += sent_bytes(args, kwargs)
        return _MeteredCursor(self, super().find(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        counted = super().__getattr__(name)

        async def metered(*args: Any, **kwargs: Any) -> Any:
            self.sent_bytes += sent_bytes(args, kwargs)
            return await counted(*args, **kwargs)

        return metered
