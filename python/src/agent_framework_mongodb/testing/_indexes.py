"""Index catalog of one collection: validation as createIndexes does, listing, and unique keys."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

import mongomock_ng.filtering as _filtering
from bson.binary import Binary
from bson.decimal128 import Decimal128
from bson.objectid import ObjectId

from ._codec import as_list, as_mapping, wire_value
from ._collation import expand_collation
from ._errors import DuplicateKey, command_error

_filter_applies: Any = getattr(_filtering, "filter_applies")  # noqa: B009 - untyped module

_MISSING = object()
_ALLOWED_OPTIONS = frozenset(
    {"key", "name", "v", "unique", "sparse", "partialFilterExpression", "expireAfterSeconds"}
    | {"collation", "hidden", "background"}
)
_PARTIAL_OPERATORS = frozenset(
    {"$eq", "$exists", "$gt", "$gte", "$lt", "$lte", "$type", "$and", "$or", "$in"}
)
_MAX_TTL = 2147483647
ID_INDEX: dict[str, Any] = {"key": {"_id": 1}, "name": "_id_"}


def matches(filter_: Mapping[str, Any], document: Mapping[str, Any]) -> bool:
    """mongomock_ng's query matcher, applied to one stored document."""
    return bool(_filter_applies(filter_, document))


def _normalize(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The index document as the server keeps it (defaulted options dropped)."""
    out: dict[str, Any] = {"key": dict(spec["key"]), "name": spec["name"]}
    for option, value in spec.items():
        if option in ("key", "name", "v", "background"):
            continue
        if option in ("unique", "sparse", "hidden") and not value:
            continue
        if option == "collation":
            expanded = expand_collation(value)
            if expanded is not None:  # the server stores no simple collation
                out[option] = expanded
            continue
        out[option] = wire_value(value)
    return out


# What identifies an index since featureCompatibilityVersion 4.9/5.0 (compareIndexOptions): the key
# pattern in its order, unique, sparse, the collation and the partial filter (wildcardProjection
# too, which the engine does not support). Everything else only decides identical or equivalent.
_SIGNATURE_FIELDS = frozenset({"key", "name", "unique", "sparse", "collation", "partialFilterExpression"})


def _signature(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two index definitions the same index. Key order matters (BSON comparison);
    ``_id_`` is unique whatever it says; collations compare expanded, field order aside. Partial
    filters compare structurally (the server compares them normalized; DIVERGENCES.md)."""
    key = tuple(spec["key"].items())
    return (
        key,
        key == (("_id", 1),) or bool(spec.get("unique")),
        bool(spec.get("sparse")),
        spec.get("collation"),
        spec.get("partialFilterExpression"),
    )


def _other_options(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The options outside the signature (``expireAfterSeconds``, ``hidden``, ...): they make a
    same-signature index identical or only equivalent (``background`` and ``v`` are never stored)."""
    return {k: v for k, v in spec.items() if k not in _SIGNATURE_FIELDS}


def _validate(spec: Mapping[str, Any]) -> None:
    for option in spec:
        if option not in _ALLOWED_OPTIONS:
            raise command_error(197, f"The field '{option}' is not valid for an index specification.")
    ttl = spec.get("expireAfterSeconds")
    if ttl is not None:
        if len(spec["key"]) != 1:
            raise command_error(
                67,
                "TTL indexes are single-field indexes, compound indexes do not support TTL."
                f" Index spec: {dict(spec)}",
            )
        if "_id" in spec["key"]:
            raise command_error(67, "The field is _id, which cannot be a TTL index")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 <= ttl <= _MAX_TTL:
            raise command_error(
                67, "TTL index 'expireAfterSeconds' option must be within an acceptable range"
            )
    partial = spec.get("partialFilterExpression")
    if partial is not None:
        if spec.get("sparse"):
            raise command_error(67, "cannot mix 'partialFilterExpression' and 'sparse' options")
        _validate_partial(partial)


def _validate_partial(expression: Any) -> None:
    if not isinstance(expression, Mapping):
        return
    for name, value in expression.items():  # pyright: ignore[reportUnknownVariableType]
        if isinstance(name, str) and name.startswith("$"):
            if name not in _PARTIAL_OPERATORS:
                raise command_error(67, f"Expression not supported in partial index: {name}")
            if name == "$exists" and not value:
                raise command_error(67, "Expression not supported in partial index: $exists: false")
        if isinstance(value, list):
            for item in value:  # pyright: ignore[reportUnknownVariableType]
                _validate_partial(item)
        else:
            _validate_partial(value)


def _equality_key(value: Any) -> Any:  # noqa: PLR0911 - one branch per BSON type
    """A hashable key that is equal exactly when MongoDB's index treats two values as equal."""
    if value is None or value is _MISSING:
        return (10,)
    if isinstance(value, bool):
        return (40, value)
    if isinstance(value, (int, float, Decimal)):
        return (20, value)
    if isinstance(value, Decimal128):
        return (20, value.to_decimal())
    if isinstance(value, str):
        return (30, value)
    document = as_mapping(value)
    if document is not None:
        return (31, tuple((k, _equality_key(v)) for k, v in document.items()))
    items = as_list(value)
    if items is not None:
        return (32, tuple(_equality_key(v) for v in items))
    if isinstance(value, Binary):
        return (33, value.subtype, bytes(value))
    if isinstance(value, bytes):
        return (33, 0, value)
    if isinstance(value, ObjectId):
        return (34, value)
    if isinstance(value, datetime):
        return (50, value)
    return (99, type(value).__name__, repr(value))


def resolve(node: Any, parts: list[str]) -> list[Any]:
    """Every value a dotted path reaches, descending through arrays; ``[_MISSING]`` when none."""
    if not parts:
        return [node]
    if isinstance(node, Mapping):
        if parts[0] in node:
            return resolve(node[parts[0]], parts[1:])
        return [_MISSING]
    if isinstance(node, list):
        found = [v for item in node for v in resolve(item, parts) if v is not _MISSING]  # pyright: ignore[reportUnknownVariableType]
        return found or [_MISSING]
    return [_MISSING]


def _field_keys(document: Mapping[str, Any], path: str) -> tuple[list[Any], bool]:
    keys: list[Any] = []
    present = False
    for value in resolve(document, path.split(".")):
        present = present or value is not _MISSING
        if isinstance(value, list):
            keys.extend([_equality_key(v) for v in value] or [(5,)])  # pyright: ignore[reportUnknownVariableType]
        else:
            keys.append(_equality_key(value))
    return keys, present


def _first(document: Mapping[str, Any], path: str) -> Any:
    value = resolve(document, path.split("."))[0]
    return None if value is _MISSING else value


class IndexCatalog:
    """The indexes of one collection, in creation order, with ``_id_`` always first.

    A collection created with a non-simple default collation gives it to ``_id_`` and to every
    index created without a collation (SERVER-23945; SERVER-89689 notes "the default _id index
    will use the collection's collation"); an index created with ``{locale: "simple"}`` keeps the
    simple collation and, as the server stores no simple collation, is listed without one
    (jstests/core/collation.js, jstests/libs/index_catalog_helpers.js, SERVER-119573). A v:1
    index does not inherit it (jstests/core/collation.js).
    """

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._default: dict[str, Any] | None = None
        self._specs: dict[str, dict[str, Any]] = {"_id_": self._id_index()}

    @property
    def default_collation(self) -> dict[str, Any] | None:
        """The collection's default collation, expanded; None for the simple collation."""
        return None if self._default is None else dict(self._default)

    def reset(self, default_collation: dict[str, Any] | None = None) -> None:
        """Only ``_id_``, for a collection (re)created with this default collation."""
        self._default = default_collation
        self._specs = {"_id_": self._id_index()}

    def _id_index(self) -> dict[str, Any]:
        spec = dict(ID_INDEX)
        if self._default is not None:
            spec["collation"] = dict(self._default)
        return spec

    def specs(self) -> list[dict[str, Any]]:
        return [dict(spec) for spec in self._specs.values()]

    def listing(self) -> list[dict[str, Any]]:
        """Index documents as listIndexes returns them."""
        return [{"v": 2, **wire_value(spec)} for spec in self._specs.values()]

    def resolve_hint(self, hint: str | Mapping[str, Any]) -> str | None:
        for spec in self._specs.values():
            if hint == spec["name"] or (isinstance(hint, Mapping) and dict(hint) == spec["key"]):
                return str(spec["name"])
        return None

    def prepare(self, raw_spec: Mapping[str, Any]) -> dict[str, Any] | None:
        """Validate a createIndexes spec; return it normalized, or None when it already exists.

        Conflicts follow ``IndexCatalogImpl::_doesSpecConflictWithExisting`` and
        ``IndexDescriptor::compareIndexOptions`` (src/mongo/db/catalog/index_catalog_impl.cpp,
        src/mongo/db/index/index_descriptor.cpp; jstests/core/index_signature.js): an index is
        identified by its signature, see :func:`_signature`. Under an existing name, another
        signature is 86 (IndexKeySpecsConflict) and the same signature with other options 85
        (IndexOptionsConflict); under another name, the same signature is 85 whatever the options,
        and another signature is a new index.
        """
        _validate(raw_spec)
        spec = _normalize(raw_spec)
        if self._default is not None and "collation" not in raw_spec and raw_spec.get("v") != 1:
            spec["collation"] = dict(self._default)
        existing = self._specs.get(spec["name"])
        if existing is not None:
            if _signature(existing) != _signature(spec):
                raise command_error(
                    86,
                    "An existing index has the same name as the requested index. When index names"
                    " are not specified, they are auto generated and can cause conflicts. Please"
                    f" refer to our documentation. Requested index: {spec}, existing index: {existing}",
                )
            if _other_options(existing) != _other_options(spec):
                raise command_error(
                    85,
                    "An equivalent index already exists with the same name but different options."
                    f" Requested index: {spec}, existing index: {existing}",
                )
            return None
        for other in self._specs.values():
            if _signature(other) != _signature(spec):
                continue
            if _other_options(other) == _other_options(spec):
                raise command_error(85, f"Index already exists with a different name: {other['name']}")
            raise command_error(
                85,
                "An equivalent index already exists with a different name and options."
                f" Requested index: {spec}, existing index: {other}",
            )
        return spec

    def add(self, spec: dict[str, Any]) -> None:
        self._specs[spec["name"]] = spec

    def drop(self, name: str) -> None:
        if name == "_id_":
            raise command_error(72, "cannot drop _id index")
        if name not in self._specs:
            raise command_error(27, f"index not found with name [{name}]")
        del self._specs[name]

    def drop_all(self) -> None:
        """Drop every index but ``_id_``; the collection keeps its default collation."""
        self._specs = {"_id_": self._id_index()}

    def unique_specs(self) -> list[dict[str, Any]]:
        """The unique indexes, ``_id_`` first."""
        return [spec for spec in self._specs.values() if _is_unique(spec)]

    def first_duplicate(
        self, spec: Mapping[str, Any], documents: Iterable[Mapping[str, Any]]
    ) -> DuplicateKey | None:
        """Building ``spec`` over ``documents`` (in order): the first that collides with an earlier
        one, if ``spec`` is unique. One pass over the entries, not a pairwise comparison."""
        if not _is_unique(spec):
            return None
        seen: set[tuple[Any, ...]] = set()
        for document in documents:
            entries = index_entries(spec, document)
            if entries & seen:
                return self.duplicate_key(spec, document)
            seen |= entries
        return None

    def duplicate_key(self, spec: Mapping[str, Any], candidate: Mapping[str, Any]) -> DuplicateKey:
        """The server's description of ``candidate`` colliding on ``spec``."""
        fields = list(spec["key"])
        return DuplicateKey(
            namespace=self.namespace,
            index_name=str(spec["name"]),
            key_pattern=dict(spec["key"]),
            key_value={field: _first(candidate, field) for field in fields},
        )


def _is_unique(spec: Mapping[str, Any]) -> bool:
    return spec["name"] == "_id_" or bool(spec.get("unique"))


def index_entries(spec: Mapping[str, Any], document: Mapping[str, Any]) -> set[tuple[Any, ...]]:
    """The index keys a document contributes; empty when the index leaves it out."""
    partial = spec.get("partialFilterExpression")
    if partial is not None and not matches(partial, document):
        return set()
    per_field: list[list[Any]] = []
    any_present = False
    for field in spec["key"]:
        keys, present = _field_keys(document, field)
        any_present = any_present or present
        per_field.append(keys)
    if spec.get("sparse") and not any_present:
        return set()
    return set(itertools.product(*per_field))
