"""A fast post-image for update documents simple enough to apply without mongomock_ng.

``compute_post_image`` runs every update on a scratch mongomock_ng collection, which costs about
half a millisecond a document, dominated by copying it in and out. The storage's chunk writes are
``$setOnInsert`` plus a ``$max`` of two dates over tens of documents per save, most of which change
nothing; this module applies such updates directly to a copy of the document.

It takes only updates whose every operator is ``$set``, ``$setOnInsert``, ``$max``, ``$min`` or
``$unset``, each with a non-empty operand of top-level field names (no dots, no ``$`` prefix, not
``_id``), no field named by two operators, and ``$max``/``$min`` comparing two naive datetimes or two
numbers that are neither bools nor NaN (or setting a missing field). Everything else returns
``None`` and goes the slow path, so anything this module returns is what the slow path returns:
``tests/unit/testing/test_simple_updates.py`` pins that with a property over both paths.

What the slow path does, and so this module too (operator semantics:
https://www.mongodb.com/docs/manual/reference/operator/update/max/, .../min/, .../set/,
.../unset/, .../setOnInsert/): operators apply in the update document's order and each operator's
fields in its operand's order; a field that exists keeps its position, a new one is appended; a
``$max`` that does not raise the value (or a ``$min`` that does not lower it) leaves the field's
value object untouched, so an update that changes nothing gives a byte-identical document and
reports nothing modified. An upsert starts from :func:`upsert_seed` and applies ``$setOnInsert``;
an update of a found document ignores it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ._codec import as_list, as_mapping
from ._updates import id_first, upsert_seed

_OPERATORS = frozenset({"$set", "$setOnInsert", "$max", "$min", "$unset"})
_COMPARING = frozenset({"$max", "$min"})


def simple_post_image(
    pre_image: Mapping[str, Any] | None,
    update: Mapping[str, Any] | list[Mapping[str, Any]],
    filter_: Mapping[str, Any],
) -> dict[str, Any] | None:
    """The post-image of ``update`` on ``pre_image`` (None: the upsert's new document seeded from
    ``filter_``), or None when the update is not one this module takes (see the module)."""
    operands = _simple_operands(update)
    if operands is None:
        return None
    upserting = pre_image is None
    start = upsert_seed(filter_) if pre_image is None else pre_image
    post = {name: _copied(value) for name, value in start.items()}
    for operator, fields in operands:
        if operator == "$setOnInsert" and not upserting:
            continue
        for name, value in fields.items():
            if operator == "$unset":
                post.pop(name, None)
            elif operator in _COMPARING:
                if name not in post:
                    post[name] = _copied(value)
                    continue
                current = _comparable(post[name], value)
                if current is None:
                    return None  # types whose BSON order this module does not model
                if (value > current) if operator == "$max" else (value < current):
                    post[name] = value
            else:
                post[name] = _copied(value)
    return id_first(post) if upserting else post


def _simple_operands(
    update: Mapping[str, Any] | list[Mapping[str, Any]],
) -> list[tuple[str, Mapping[str, Any]]] | None:
    """The update's (operator, operand) pairs when every one qualifies, else None."""
    if isinstance(update, list):
        return None
    seen: set[str] = set()
    operands: list[tuple[str, Mapping[str, Any]]] = []
    for operator, operand in update.items():
        fields = as_mapping(operand)
        if operator not in _OPERATORS or not fields:
            return None
        for name, value in fields.items():
            # A field named twice conflicts; the slow path decides what that does.
            if not _plain_name(name) or name in seen:
                return None
            seen.add(name)
            if operator in _COMPARING and _orderable(value) is None:
                return None
            if operator != "$unset" and not _plain_value(value):
                return None
        operands.append((operator, fields))
    return operands


def _plain_name(name: str) -> bool:
    return bool(name) and name != "_id" and "." not in name and not name.startswith("$")


def _plain_value(value: Any) -> bool:
    """Whether ``value`` holds nothing the slow path rewrites or mongomock_ng may treat specially:
    no ``"$$NOW"`` (``normalize_expressions``), no ``$``-prefixed or dotted embedded field names."""
    if isinstance(value, str):
        return value != "$$NOW"
    document = as_mapping(value)
    if document is not None:
        return all(
            not key.startswith("$") and "." not in key and _plain_value(item)
            for key, item in document.items()
        )
    items = as_list(value)
    if items is not None:
        return all(_plain_value(item) for item in items)
    return True


def _orderable(value: Any) -> type | None:
    """The class a ``$max``/``$min`` operand compares within: naive datetimes, or numbers that are
    not bools and not NaN (NaN sorts below every number in BSON but compares false in Python)."""
    if isinstance(value, datetime):
        return datetime if value.tzinfo is None else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return float


def _comparable(current: Any, operand: Any) -> Any:
    """``current`` when it compares with ``operand`` in the same class, else None."""
    kind = _orderable(current)
    return current if kind is not None and kind is _orderable(operand) else None


def _copied(value: Any) -> Any:
    """A stored document owns its embedded documents and arrays, as the slow path's copies do."""
    if as_mapping(value) is None and as_list(value) is None:
        return value
    return copy.deepcopy(value)
