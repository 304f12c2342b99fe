"""mongomock_ng's sort order, reproduced over a query's candidates and kept for index walks.

``sort_documents`` sorts candidates as mongomock_ng's ``find`` does (one stable sort per key, with its
own ``resolve_sort_key``). ``SortedKeys`` keeps one index-map node's values sorted for the walk of
``_lookup.py``: by mongomock_ng's BSON order, its type rank then Python's ``<`` within a type. The
walk is used only when the values under the prefix are all plain scalars of one sortable kind each
(no array, no missing field, no NaN); each document it yields is checked to hold the value it was
filed under (so a ``true`` filed with ``1`` is caught), and any doubt makes the caller sort the
candidates instead.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import mongomock_ng.filtering as _filtering
from bson.int64 import Int64
from bson.objectid import ObjectId

from ._codec import as_mapping

__all__ = ["SortedKeys", "answerable", "holds", "sort_documents"]

_resolve_sort_key: Any = getattr(_filtering, "resolve_sort_key")  # noqa: B009 - untyped module

_SORT_RANKS: dict[type, int] = {int: 10, Int64: 10, float: 10, str: 15, ObjectId: 35, bool: 40, datetime: 45}
"""mongomock_ng's comparison rank (``filtering._get_compare_type``) of the types the walk orders;
within a rank it compares with Python's operators, as ``bson_compare`` does for these types."""


def _sort_rank(value: Any) -> int | None:
    kind: type = type(cast("object", value))
    rank = _SORT_RANKS.get(kind)
    if rank is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return rank


class SortedKeys:
    """One trie node's child keys in sort order, and how many child keys no walk can order."""

    def __init__(self, keys: Iterable[Hashable]) -> None:
        self.sorted: list[tuple[int, Any]] = []
        self.irregular = 0
        # The rank each child key was filed with: a removal may name it by an equal value of
        # another rank (true for the key 1), which must find the entry that is there.
        self._ranks: dict[Hashable, int | None] = {}
        for key in keys:
            self.add(key, insort=False)
        self.sorted.sort()

    def add(self, key: Hashable, *, insort: bool = True) -> None:
        rank = self._ranks[key] = _sort_rank(key)
        if rank is None:
            self.irregular += 1
        elif insort:
            bisect.insort(self.sorted, (rank, key))
        else:
            self.sorted.append((rank, key))

    def remove(self, key: Hashable) -> None:
        rank = self._ranks.pop(key)
        if rank is None:
            self.irregular -= 1
            return
        del self.sorted[bisect.bisect_left(self.sorted, (rank, key))]


def answerable(sort: Sequence[tuple[str, int]] | None, projection: Mapping[str, Any] | None) -> bool:
    """Whether candidates can be sorted and projected here as mongomock_ng would: plain field
    sorts, and a projection of plain inclusions or exclusions (operators and computed fields,
    which can drop documents before skip and limit apply, go through mongomock_ng's ``find``)."""
    if any(field.startswith("$") for field, _ in sort or ()):
        return False
    if projection is None:
        return True
    return not any(
        as_mapping(value) is not None or (isinstance(value, str) and value.startswith("$"))
        for value in projection.values()
    )


def sort_documents(documents: list[dict[str, Any]], sort: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    """``documents`` ordered as mongomock_ng's ``find`` orders them: one stable sort per key, the
    last key first, with its BSON comparison of each key's value."""
    for field, direction in reversed(sort):
        documents = sorted(
            documents, key=lambda document: _resolve_sort_key(field, document), reverse=direction < 0
        )
    return documents


def holds(document: Mapping[str, Any], field: str, rank: int, key: Any) -> bool:
    """Whether ``document`` holds, at ``field``, a plain scalar of ``rank`` equal to ``key``: the
    value the walk filed it under, so mongomock_ng's sort would place it there too."""
    if field not in document:
        return False
    value = document[field]
    return _sort_rank(value) == rank and bool(value == key)
