"""Equality lookups through a collection's indexes: which stored documents a query can match.

mongomock_ng answers every query by matching the filter against every stored document, so each
save into a run of n checkpoints cost O(n) and clearing a run O(n²) (5,000 saves took 130 s, the
last 500 eight times the first; ``clear_run`` of 5,000 took 116 s). This is no query planner: for
each index of the catalog the engine keeps a map, write by write as it keeps unique keys
(``_unique.py``), from the documents' values of the index's fields, in key order, to the documents
holding them. A filter that fixes leading fields of an index by equality takes its candidates from
that map; mongomock_ng's own matcher then runs on the candidates only, and sort, skip and limit
follow as mongomock_ng applies them. Anything the map cannot answer exactly falls back to the scan.
Measured after (specs/performance.md, "Engine scale"): 5,000 saves into one run 19 s, flat per 500;
``clear_run`` of 5,000 1.1 s.

The candidates are a superset of what mongomock_ng's matcher accepts, so the result is the scan's,
quirks included (``{"a": 1}`` matches ``true`` there, as Python's ``==`` does):

* the map holds the values mongomock_ng's matcher compares against (its ``iter_key_candidates``,
  each element of an array as well), filed by Python's hash and ``==``, which is the equality its
  matcher uses; values that cannot be hashed are filed under one key no lookup asks for;
* lookups take only values whose hash agrees with ``==`` across the types that may equal them:
  strings, numbers (not NaN), booleans, ObjectIds and dates. An ObjectId also looks up its hex
  string, as mongomock_ng matches it against that string inside an array. None (which also
  matches a missing field), arrays, documents, regular expressions and NaN fall back to the scan;
* a partial index holds only documents matching its filter, so it serves a query only when the
  query repeats each of the filter's conditions as the same plain equality; a sparse index is
  mapped over every document (a superset of what the server indexes);
* paths with a numeric component (``a.0``) fall back: mongomock_ng reads those as array positions.

A sorted query with a limit whose sort is the index field right after the fixed prefix (the
storage's greatest-sequence read, its pages and ``get_latest``) walks that field's values in order
(``_sorting.SortedKeys``, kept for each (index, prefix) asked for) and stops after skip + limit
matches, instead of sorting every candidate.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import mongomock_ng.filtering as _filtering
from bson.int64 import Int64
from bson.objectid import ObjectId

from ._codec import as_list, as_mapping
from ._indexes import matches
from ._sorting import SortedKeys
from ._stored import store_key

__all__ = ["EqualityLookup"]

_iter_key_candidates: Any = getattr(_filtering, "iter_key_candidates")  # noqa: B009 - untyped module

Spec = Mapping[str, Any]
Document = Mapping[str, Any]
Trie = dict[Hashable, Any]
"""Nested maps, one level per index field; the last level maps to the set of store keys."""

_OPAQUE = object()
"""The key of a value no lookup can equal (a document, an array, anything unhashable)."""
_LOOKUP_TYPES = (str, int, bool, float, Int64, ObjectId, datetime, bytes)
"""Exact types only: a ``bson.Binary`` of another subtype hashes (and compares) apart from the
``bytes`` of subtype 0, as the server tells binary subtypes apart; the ``_id`` of a chunk is bytes."""
_MAX_COMBINATIONS = 1024
"""More ``$in`` combinations than this over an index's fields use a shorter prefix of them."""


def _lookup_value(value: Any) -> bool:
    """Whether ``value`` may be looked up: its hash agrees with ``==`` for every equal value."""
    if type(value) not in _LOOKUP_TYPES:
        return False
    return not (isinstance(value, float) and math.isnan(value))


def _key(value: Any) -> Hashable:
    if isinstance(value, str):
        return str(value)  # a str subclass (bson's Code) is filed under its text: a superset
    try:
        hash(value)
    except TypeError:
        return _OPAQUE
    return value  # type: ignore[no-any-return]


def _as_items(value: object) -> list[Any] | None:
    """``value``'s elements when it is an array (mongomock_ng also takes a tuple for one)."""
    if isinstance(value, tuple):
        return [*cast("tuple[Any, ...]", value)]  # type: ignore[redundant-cast]  # pyright wants it
    return as_list(value)


def _field_keys(document: Document, path: str) -> set[Hashable]:
    """Every key under which ``{path: v}`` can match ``document`` for a looked-up ``v``."""
    keys: set[Hashable] = set()
    for value in _iter_key_candidates(path, document):
        items = _as_items(value)
        if items is None:
            keys.add(_key(value))
        else:
            keys.add(_OPAQUE)  # the array as a whole, which equals no looked-up value
            keys.update(_key(item) for item in items)
    return keys or {_OPAQUE}


def _path_supported(path: str) -> bool:
    if path.startswith("$"):
        return False
    for part in path.split("."):
        if not part:
            return False
        try:
            int(part)
        except ValueError:
            continue
        return False  # mongomock_ng reads a numeric component as an array position
    return True


def _condition_values(path: str, condition: Any) -> tuple[Hashable, ...] | None:  # noqa: PLR0911 - one return per condition form
    """The values ``{path: condition}`` requires one of, or None when no lookup answers it."""
    if not _path_supported(path):
        return None
    if _lookup_value(condition):
        if isinstance(condition, ObjectId):
            return (condition, str(condition))
        return (condition,)
    operators = as_mapping(condition)
    if operators is None or not operators or not all(name.startswith("$") for name in operators):
        return None
    if "$eq" in operators:
        value = operators["$eq"]
        return (value,) if _lookup_value(value) else None
    if "$in" in operators:
        values = as_list(operators["$in"])
        if values is not None and all(_lookup_value(value) for value in values):
            return tuple(values)
    return None


def _repeats(partial: Any, filter_: Mapping[str, Any]) -> bool:
    """Whether every document matching ``filter_`` matches the partial filter ``partial``."""
    if partial is None:
        return True
    conditions = as_mapping(partial)
    if conditions is None:
        return False
    for name, value in conditions.items():
        if name.startswith("$") or not _lookup_value(value) or name not in filter_:
            return False
        given = filter_[name]
        if type(given) is not type(value) or given != value:
            return False
    return True


class EqualityLookup:
    """Per index of the catalog, its fields' values mapped to the store keys of the documents."""

    def __init__(self, stored: Callable[[], Iterable[Document]]) -> None:
        self._stored = stored
        self._maps: dict[str, Trie] | None = None
        self._positions: dict[Hashable, int] = {}
        self._next = 0
        self._orders: dict[tuple[str, tuple[Hashable, ...]], SortedKeys] = {}

    def invalidate(self) -> None:
        """Forget the maps; the next lookup rebuilds them (after index changes or a drop)."""
        self._maps = None
        self._positions = {}
        self._orders = {}

    def forget_orders(self) -> None:
        """Drop the sorted values kept for ordered walks; they are rebuilt when next walked.

        Before a bulk delete: removing each value from a sorted list moves the list's tail, so
        removing a run's n values one by one would cost O(n²).
        """
        self._orders = {}

    def apply(self, specs: Sequence[Spec], before: Document | None, after: Document | None) -> None:
        """Record a write that happened: ``before`` left the collection, ``after`` entered it.

        A replacement (same ``_id``) keeps the document's natural position, as the store does.
        """
        if self._maps is None:
            return
        if any(spec["name"] not in self._maps for spec in specs):
            self.invalidate()  # an index the maps do not know: rebuild them on the next lookup
            return
        before_key = None if before is None else store_key(before["_id"])
        after_key = None if after is None else store_key(after["_id"])
        for spec in specs:
            name = str(spec["name"])
            trie = self._maps[name]
            if before is not None:
                for entry in _entries(spec, before):
                    for depth in _remove(trie, entry, before_key):
                        self._reorder(name, entry, depth, added=False)
            if after is not None:
                for entry in _entries(spec, after):
                    for depth in _add(trie, entry, after_key):
                        self._reorder(name, entry, depth, added=True)
        if before_key is not None and before_key != after_key:
            del self._positions[before_key]
        if after_key is not None and after_key not in self._positions:
            self._positions[after_key] = self._next
            self._next += 1

    def candidates(self, specs: Sequence[Spec], filter_: Mapping[str, Any]) -> list[Hashable] | None:
        """Store keys, in natural order, of a superset of the documents ``filter_`` matches;
        None when no index answers the filter's equalities (the caller scans)."""
        conditions: dict[str, tuple[Hashable, ...]] = {}
        for path, condition in filter_.items():
            values = _condition_values(path, condition)
            if values is not None:
                conditions[path] = values
        if not conditions:
            return None
        maps = self._current(specs)
        eligible: list[tuple[list[Any], int]] = []  # (prefix nodes, levels below)
        for spec in specs:
            if not _repeats(spec.get("partialFilterExpression"), filter_):
                continue
            fields = list(spec["key"])
            fixed = _fixed_prefix(fields, conditions)
            if not fixed:
                continue
            nodes = [
                node
                for c in itertools.product(*fixed)
                if (node := _descend(maps[spec["name"]], c)) is not None
            ]
            eligible.append((nodes, len(fields) - len(fixed)))
        # The documents under each prefix, counted exactly but only up to the best so far, fully
        # fixed indexes first: counting the distinct next values instead chose a run's prefix
        # whose next field holds one value for all its documents over an _id lookup of a few.
        best: tuple[int, list[Any], int] | None = None
        for nodes, levels in sorted(eligible, key=lambda item: item[1]):
            bound = None if best is None else best[0]
            estimate = _count(nodes, levels, bound)
            if best is None or estimate < best[0]:
                best = (estimate, nodes, levels)
        if best is None:
            return None
        found: set[Hashable] = set()
        for node in best[1]:
            _gather(node, best[2], found)
        return sorted(found, key=self._positions.__getitem__)

    def ordered(
        self, specs: Sequence[Spec], filter_: Mapping[str, Any], sort: Sequence[tuple[str, int]]
    ) -> Iterator[tuple[Hashable, int, Any]] | None:
        """Store keys of a superset of the documents ``filter_`` matches, in the order
        mongomock_ng's ``find`` sorts them by ``sort``, each with the (rank, value) it is filed
        under; None when no index walk gives that order. The caller checks each document with
        :func:`holds` and sorts the candidates instead at the first that fails.
        """
        if len(sort) != 1 or "." in sort[0][0]:
            return None
        field, direction = sort[0]
        for spec in specs:
            fields = list(spec["key"])
            if field not in fields or not _repeats(spec.get("partialFilterExpression"), filter_):
                continue
            position = fields.index(field)
            prefix: list[Hashable] = []
            for path in fields[:position]:
                values = _condition_values(path, filter_[path]) if path in filter_ else None
                if values is None or len(values) != 1:
                    break
                prefix.append(values[0])
            if len(prefix) == position:
                name = str(spec["name"])
                return self._walk(name, tuple(prefix), len(fields) - position - 1, direction, specs)
        return None

    def _walk(
        self,
        name: str,
        prefix: tuple[Hashable, ...],
        below: int,
        direction: int,
        specs: Sequence[Spec],
    ) -> Iterator[tuple[Hashable, int, Any]] | None:
        node = _descend(self._current(specs)[name], prefix)
        if node is None:
            return iter(())
        order = self._orders.get((name, prefix))
        if order is None:
            order = self._orders[(name, prefix)] = SortedKeys(node)
        if order.irregular:
            return None
        # Lazily, from the end the sort starts at: a copy of the list would cost the run's size.
        keys = iter(order.sorted) if direction > 0 else reversed(order.sorted)
        return self._walk_keys(node, keys, below)

    def _walk_keys(
        self, node: Trie, keys: Iterator[tuple[int, Any]], below: int
    ) -> Iterator[tuple[Hashable, int, Any]]:
        for rank, key in keys:
            found: set[Hashable] = set()
            _gather(node[key], below, found)
            for store in sorted(found, key=self._positions.__getitem__):
                yield store, rank, key

    def _reorder(self, name: str, entry: tuple[Hashable, ...], depth: int, *, added: bool) -> None:
        order = self._orders.get((name, entry[:depth]))
        if order is None:
            return
        if added:
            order.add(entry[depth])
        else:
            order.remove(entry[depth])

    def _current(self, specs: Sequence[Spec]) -> dict[str, Trie]:
        if self._maps is None or any(spec["name"] not in self._maps for spec in specs):
            maps: dict[str, Trie] = {str(spec["name"]): {} for spec in specs}
            self._positions = {}
            for position, document in enumerate(self._stored()):
                key = store_key(document["_id"])
                self._positions[key] = position
                for spec in specs:
                    for entry in _entries(spec, document):
                        _add(maps[spec["name"]], entry, key)
            self._next = len(self._positions)
            self._maps = maps
            self._orders = {}
        return self._maps


def _fixed_prefix(
    fields: list[str], conditions: Mapping[str, tuple[Hashable, ...]]
) -> list[tuple[Hashable, ...]]:
    fixed: list[tuple[Hashable, ...]] = []
    combinations = 1
    for field in fields:
        values = conditions.get(field)
        if values is None or combinations * max(len(values), 1) > _MAX_COMBINATIONS:
            break
        combinations *= max(len(values), 1)
        fixed.append(values)
    return fixed


def _entries(spec: Spec, document: Document) -> Iterable[tuple[Hashable, ...]]:
    partial = spec.get("partialFilterExpression")
    if partial is not None and not matches(partial, document):
        return ()
    return itertools.product(*(_field_keys(document, field) for field in spec["key"]))


def _add(trie: Trie, entry: tuple[Hashable, ...], key: Hashable) -> list[int]:
    """File ``key`` under ``entry``; returns the depths at which a new child key appeared."""
    created: list[int] = []
    node = trie
    for depth, part in enumerate(entry[:-1]):
        if part not in node:
            node[part] = {}
            created.append(depth)
        node = node[part]
    if entry[-1] not in node:
        node[entry[-1]] = set()
        created.append(len(entry) - 1)
    node[entry[-1]].add(key)
    return created


def _remove(trie: Trie, entry: tuple[Hashable, ...], key: Hashable) -> list[int]:
    """Unfile ``key`` from ``entry``; returns the depths at which a child key went (emptied)."""
    path: list[Trie] = []
    node = trie
    for part in entry[:-1]:
        child = node.get(part)
        if child is None:
            return []
        path.append(node)
        node = child
    path.append(node)
    leaf = node.get(entry[-1])
    if leaf is None:
        return []
    leaf.discard(key)
    removed: list[int] = []
    for depth in range(len(entry) - 1, -1, -1):  # prune maps left empty, so lookups never walk them
        if path[depth][entry[depth]]:
            break
        del path[depth][entry[depth]]
        removed.append(depth)
    return removed


def _descend(trie: Trie, combination: tuple[Hashable, ...]) -> Any:
    node: Any = trie
    for part in combination:
        node = node.get(part)
        if node is None:
            return None
    return node


def _count(nodes: list[Any], levels: int, bound: int | None) -> int:
    """How many store keys lie under ``nodes``, ``levels`` below; stops once above ``bound``, so
    a prefix over a whole run costs about ``bound`` steps, not one per document (a save into a run
    of 50,000 checkpoints would otherwise visit every one of them)."""
    total = 0
    for node in nodes:
        total += _count_below(node, levels, None if bound is None else bound - total)
        if bound is not None and total > bound:
            break
    return total


def _count_below(node: Any, levels: int, bound: int | None) -> int:
    if levels == 0:
        return len(node)
    total = 0
    for child in node.values():
        total += _count_below(child, levels - 1, None if bound is None else bound - total)
        if bound is not None and total > bound:
            break
    return total


def _gather(node: Any, levels: int, found: set[Hashable]) -> None:
    if levels == 0:
        found.update(node)
        return
    for child in node.values():
        _gather(child, levels - 1, found)
