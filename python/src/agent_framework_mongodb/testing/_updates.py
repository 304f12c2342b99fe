"""Computing the post-image of an update, with the shims mongomock_ng needs.

The update runs on a private scratch collection holding only the one document, so the real
collection is touched only once the new document has passed every check.

Shims:
* ``"$$REMOVE"`` as a field value of ``$set``/``$addFields``/``$project``/``$replaceWith``, also when
  a ``$cond``/``$switch``/``$ifNull`` branch yields it, removes the field (mongomock_ng keeps the old
  value). It is swapped for a unique marker and the marker is stripped after each stage.
* An upsert seeds the new document from every equality in the filter, including those inside a
  top-level ``$and`` and ``{"$eq": ...}`` (mongomock_ng drops them), before the update runs.
* ``{"$not": [expression]}``, the server's documented form, is evaluated as ``{"$not":
  expression}``: mongomock_ng takes the one-element list itself as the operand and so always
  yields false (https://www.mongodb.com/docs/manual/reference/operator/aggregation/not/).
* Arithmetic keeps the server's integer widths: a sum, difference or product with a 64-bit integer
  operand is a 64-bit integer (a double past its range), whatever its value, in ``$add``,
  ``$subtract``, ``$multiply`` and ``$inc`` alike; 32-bit operands give a 32-bit result unless it
  overflows (``ExpressionAdd`` and ``Value``'s numeric promotion in src/mongo/db/pipeline/;
  https://www.mongodb.com/docs/manual/reference/operator/update/inc/#behavior). mongomock_ng
  computes with Python integers, so ``Int64(5) + 1`` came back as ``6``, stored as int32. The
  update runs on ``_Long`` stand-ins for every ``Int64``, whose arithmetic stays ``Int64``.
* ``"$$NOW"`` (mongomock_ng does not know it) is replaced by the client's clock reading, one value
  for the whole update as on the server, where it "returns the same value for all members of the
  deployment and remains the same throughout all stages of the aggregation pipeline"
  (https://www.mongodb.com/docs/manual/reference/aggregation-variables/#mongodb-variable-variable.NOW).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.regex import Regex
from pymongo.errors import WriteError

from ._codec import as_list, as_mapping
from ._errors import write_error

REMOVE_MARKER = f"__in_memory_mongo_remove_{uuid.uuid4().hex}__"
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_COND_ARITY = 3
_BRANCHING = frozenset({"$cond", "$switch", "$ifNull"})


def _long_or_double(value: Any) -> Any:
    """A 64-bit integer result, or the double the server promotes one past the range to."""
    if value is NotImplemented or not isinstance(value, int):
        return value
    return _Long(value) if _INT64_MIN <= value <= _INT64_MAX else float(value)


class _Long(Int64):
    """An ``Int64`` whose sums, differences and products stay 64-bit (see the module's shims)."""

    __slots__ = ()

    def __add__(self, other: Any) -> Any:
        return _long_or_double(int.__add__(self, other))

    def __radd__(self, other: Any) -> Any:
        return _long_or_double(int.__radd__(self, other))

    def __sub__(self, other: Any) -> Any:
        return _long_or_double(int.__sub__(self, other))

    def __rsub__(self, other: Any) -> Any:
        return _long_or_double(int.__rsub__(self, other))

    def __mul__(self, other: Any) -> Any:
        return _long_or_double(int.__mul__(self, other))

    def __rmul__(self, other: Any) -> Any:
        return _long_or_double(int.__rmul__(self, other))

    def __neg__(self) -> Any:
        return _long_or_double(int.__neg__(self))

    def __abs__(self) -> Any:
        return _long_or_double(int.__abs__(self))


def _with_longs(value: Any, *, to_stand_in: bool) -> Any:
    """``value`` with every ``Int64`` made a ``_Long``; or back: every ``_Long``, and every ``int``
    past int32 (which BSON stores as int64, as the server promotes an overflowing int32 sum), an
    ``Int64``, as decoding the stored document would give."""
    if isinstance(value, Int64):
        return _Long(value) if to_stand_in else Int64(value)
    if not to_stand_in and type(value) is int and not _INT32_MIN <= value <= _INT32_MAX:
        return Int64(value)
    document = as_mapping(value)
    if document is not None:
        return {k: _with_longs(v, to_stand_in=to_stand_in) for k, v in document.items()}
    items = as_list(value)
    if items is not None:
        return [_with_longs(v, to_stand_in=to_stand_in) for v in items]
    return value


def validate_update(update: Any) -> None:
    """The client-side checks pymongo makes before sending an update."""
    document = as_mapping(update)
    if document is not None:
        if not document:
            raise ValueError("update cannot be empty")
        if not next(iter(document)).startswith("$"):
            raise ValueError("update only works with $ operators")
    elif isinstance(update, list):
        if not update:
            raise ValueError("update cannot be empty")
    else:
        raise TypeError("update must be an instance of dict, bson.son.SON, or list")


def upsert_seed(filter_: Mapping[str, Any]) -> dict[str, Any]:
    """The document an upsert starts from: the filter's equality conditions, ``_id`` first."""
    seed: dict[str, Any] = {}
    _collect_equalities(filter_, seed)
    if "_id" in seed:
        seed = {"_id": seed.pop("_id"), **seed}
    return seed


def _is_operator_document(value: Any) -> bool:
    document = as_mapping(value)
    return document is not None and any(key.startswith("$") for key in document)


def _collect_equalities(filter_: Mapping[str, Any], seed: dict[str, Any]) -> None:
    for name, condition in filter_.items():
        if name == "$and":
            for clause in as_list(condition) or []:
                _collect_equalities(as_mapping(clause) or {}, seed)
        elif name.startswith("$") or isinstance(condition, (Regex, re.Pattern)):
            continue  # other logical operators and regular expressions seed nothing
        elif _is_operator_document(condition):
            operators = as_mapping(condition) or {}
            if "$eq" in operators:
                _set_path(seed, name, operators["$eq"])
        else:
            _set_path(seed, name, condition)


def _set_path(document: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = document
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            return
        node = cast("dict[str, Any]", child)
    node[last] = value


def _rewrite_value(expression: Any) -> Any:
    """Replace ``$$REMOVE`` in every position whose value becomes a field's value."""
    if expression == "$$REMOVE":
        return {"$literal": REMOVE_MARKER}
    document = as_mapping(expression)
    if document is None:
        return expression
    if len(document) == 1 and next(iter(document)) in _BRANCHING:
        ((operator, arguments),) = document.items()
        return {operator: _rewrite_branches(operator, arguments)}
    if _is_operator_document(document):
        return expression
    return {key: _rewrite_value(value) for key, value in document.items()}


def _rewrite_branches(operator: str, arguments: Any) -> Any:
    positional = as_list(arguments)
    named = as_mapping(arguments)
    if operator == "$cond" and positional is not None and len(positional) == _COND_ARITY:
        return [positional[0], _rewrite_value(positional[1]), _rewrite_value(positional[2])]
    if operator == "$cond" and named is not None:
        return {k: v if k == "if" else _rewrite_value(v) for k, v in named.items()}
    if operator == "$ifNull" and positional:
        return [*positional[:-1], _rewrite_value(positional[-1])]
    if operator == "$switch" and named is not None:
        branches = [as_mapping(branch) or {} for branch in as_list(named.get("branches")) or []]
        out: dict[str, Any] = {
            "branches": [{"case": b.get("case"), "then": _rewrite_value(b.get("then"))} for b in branches]
        }
        if "default" in named:
            out["default"] = _rewrite_value(named["default"])
        return out
    return arguments


def rewrite_stage(stage: Mapping[str, Any]) -> dict[str, Any]:
    """One update-pipeline stage with ``$$REMOVE`` results replaced by the removal marker."""
    ((name, body),) = stage.items()
    fields = as_mapping(body)
    if name in ("$set", "$addFields", "$project") and fields is not None:
        return {name: {k: _rewrite_value(v) for k, v in fields.items()}}
    if name in ("$replaceWith", "$replaceRoot"):
        return {name: _rewrite_value(body)}
    return dict(stage)


def strip_marker(value: Any) -> Any:
    """Drop fields holding the removal marker; in arrays it becomes null, as missing does."""
    document = as_mapping(value)
    if document is not None:
        return {k: strip_marker(v) for k, v in document.items() if v != REMOVE_MARKER}
    items = as_list(value)
    if items is not None:
        return [None if v == REMOVE_MARKER else strip_marker(v) for v in items]
    return value


def id_first(document: Mapping[str, Any]) -> dict[str, Any]:
    """The server stores ``_id`` as the first field, generating one when it is absent."""
    rest = {k: v for k, v in document.items() if k != "_id"}
    return {"_id": document.get("_id", ObjectId()), **rest}


def _restore_id(value: Any, stand_in: str, original: Any) -> Any:
    """Put a document-valued ``_id`` back wherever its stand-in string ended up."""
    if value == stand_in:
        return original
    document = as_mapping(value)
    if document is not None:
        return {k: _restore_id(v, stand_in, original) for k, v in document.items()}
    items = as_list(value)
    if items is not None:
        return [_restore_id(v, stand_in, original) for v in items]
    return value


def normalize_expressions(expression: Any, now: datetime) -> Any:
    """``expression`` with every ``"$$NOW"`` outside a ``$literal`` replaced by ``now``, and each
    one-element ``$not`` list unwrapped (see the module's shims)."""
    if expression == "$$NOW":
        return now
    document = as_mapping(expression)
    if document is not None:
        return {key: _normalize_operand(key, value, now) for key, value in document.items()}
    items = as_list(expression)
    if items is not None:
        return [normalize_expressions(item, now) for item in items]
    return expression


def normalize_filter(filter_: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """A query filter with its aggregation expressions (``$expr``, also inside ``$and``, ``$or``
    and ``$nor``) normalised as an update's are: ``$$NOW`` is ``now``, one value for the whole
    operation as the manual defines it, and ``$not`` takes its one-element list. Outside ``$expr``
    a filter holds no expressions, so ``"$$NOW"`` there stays the string it is, as on the server.
    """
    out: dict[str, Any] = {}
    for name, condition in filter_.items():
        if name == "$expr":
            out[name] = normalize_expressions(condition, now)
        elif name in ("$and", "$or", "$nor") and (clauses := as_list(condition)) is not None:
            out[name] = [
                normalize_filter(clause, now) if (clause := as_mapping(item)) is not None else item
                for item in clauses
            ]
        else:
            out[name] = condition
    return out


def _normalize_operand(operator: str, operand: Any, now: datetime) -> Any:
    if operator == "$literal":
        return operand
    if operator == "$not":
        items = as_list(operand)
        if items is not None and len(items) == 1:
            return normalize_expressions(items[0], now)
    return normalize_expressions(operand, now)


def compute_post_image(
    scratch: Any,
    pre_image: Mapping[str, Any] | None,
    update: Mapping[str, Any] | list[Mapping[str, Any]],
    filter_: Mapping[str, Any],
    *,
    now: datetime,
) -> dict[str, Any]:
    """Apply ``update`` to ``pre_image`` (or, for an upsert, to the seed from ``filter_``).

    ``now`` is the value of ``$$NOW`` (naive UTC, as stored). mongomock_ng cannot update a document
    whose ``_id`` is itself a document, so such an ``_id`` is replaced by a unique string while the
    update runs and restored afterwards.
    """
    update = _with_longs(normalize_expressions(update, now), to_stand_in=True)
    filter_ = _with_longs(filter_, to_stand_in=True)  # an upsert seeds from it
    start = _with_longs(dict(pre_image), to_stand_in=True) if pre_image is not None else None
    if isinstance(update, list) and start is None:
        start = upsert_seed(filter_)
    original = None if start is None else start.get("_id", ObjectId())
    stand_in = f"__in_memory_mongo_id_{uuid.uuid4().hex}__"
    if start is not None:
        start = id_first({**start, "_id": stand_in if as_mapping(original) is not None else original})
    scratch.delete_many({})
    try:
        if isinstance(update, list):
            post = _run_pipeline(scratch, start or {}, update)
        elif start is None:
            scratch.update_one(upsert_seed(filter_), dict(update), upsert=True)
            post = id_first(scratch.find_one({}))
        else:
            scratch.insert_one(start)
            scratch.update_one({"_id": start["_id"]}, dict(update))
            post = id_first(scratch.find_one({}))
    except WriteError as exc:
        if "_id" in str(exc):
            raise write_error(
                66, "Performing an update on the path '_id' would modify the immutable field '_id'"
            ) from exc
        raise
    finally:
        scratch.delete_many({})
    if as_mapping(original) is not None:
        post = _restore_id(post, stand_in, original)
    return cast("dict[str, Any]", _with_longs(post, to_stand_in=False))


def _run_pipeline(
    scratch: Any, document: dict[str, Any], pipeline: list[Mapping[str, Any]]
) -> dict[str, Any]:
    doc_id = document["_id"]
    scratch.insert_one(document)
    for stage in pipeline:
        scratch.update_one({"_id": doc_id}, [rewrite_stage(stage)])
        current = scratch.find_one({})
        if current is None or current.get("_id", doc_id) != doc_id:
            raise write_error(
                66, "Performing an update on the path '_id' would modify the immutable field '_id'"
            )
        cleaned = id_first({**strip_marker(current), "_id": doc_id})
        scratch.replace_one({"_id": doc_id}, cleaned)
    return id_first(scratch.find_one({}))
