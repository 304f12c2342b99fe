"""``aggregate``: the pipeline stages a checkpoint storage sends, run as the server runs them.

The engine runs ``$match``, ``$sort``, ``$skip``, ``$limit``, ``$project`` (top-level inclusion or
exclusion), ``$count`` and ``$lookup`` from a collection of the same database (``localField`` and
``foreignField``, a ``pipeline`` of these stages, or both; no ``let``), and refuses every other stage
with ``NotImplementedError`` rather than answer on a guess (DIVERGENCES.md entry 31).

A pipeline's leading ``$match``, ``$sort``, ``$skip`` and ``$limit`` are one find, as the server
pushes them into its query layer: they go through the collection's index maps (entry 24), so a
``$lookup`` per document costs a map lookup, not a scan. ``$lookup`` with ``localField`` matches
as the server's concise form does, by prepending ``{foreignField: {$eq: value}}`` (``$in`` of the
elements for an array, ``null`` for a missing field) to the lookup's own pipeline; its matches may
total at most 100 MiB (code 4568, the server's ``internalLookupStageIntermediateDocumentMaxSizeBytes``),
and every document the pipeline returns at most 16 MiB (code 10334). ``$count`` emits nothing for
no input, as the server's (a ``$group`` on ``null`` of nothing) does; mongomock_ng emitted ``0``.
The whole pipeline runs atomically, its lookups included (entry 31).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ._codec import MAX_BSON_SIZE, as_list, as_mapping, bson_size
from ._errors import command_error
from ._limits import MAX_INTERNAL_SIZE
from ._sorting import sort_documents

__all__ = ["Find", "Source", "run_pipeline"]

Document = dict[str, Any]
Find = Callable[[Mapping[str, Any], list[tuple[str, int]], int, int], list[Document]]
"""A collection's find: (filter, sort, skip, limit) to copies of its matching stored documents."""

MAX_LOOKUP_BYTES: Final = 100 * 1024 * 1024
"""The server's ``internalLookupStageIntermediateDocumentMaxSizeBytes`` (104,857,600)."""

_FIND_STAGES: Final = ("$match", "$sort", "$skip", "$limit")
_LOOKUP_FIELDS: Final = frozenset({"from", "as", "localField", "foreignField", "pipeline", "let"})


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """The collections a pipeline reads: its own, and by name those its ``$lookup`` stages join."""

    find: Find
    find_in: Callable[[str], Find]


def run_pipeline(pipeline: Sequence[Mapping[str, Any]], source: Source) -> list[Document]:
    """The documents ``pipeline`` returns over ``source.find``'s collection (stored form)."""
    stages = _parsed(pipeline)
    documents, rest = _leading_find(stages, source.find, extra=None)
    documents = _run_stages(rest, documents, source)
    for document in documents:
        size = bson_size(document)
        if size > MAX_BSON_SIZE:
            raise command_error(
                10334,
                f"BSONObj size: {size} (0x{size:X}) is invalid. Size must be between 0 and"
                f" {MAX_INTERNAL_SIZE}(16MB)",
            )
    return documents


def _parsed(pipeline: object) -> list[tuple[str, Any]]:
    """Each stage as (name, specification); the server's errors for a malformed one."""
    stages = as_list(pipeline)
    if stages is None:
        raise command_error(14, "'pipeline' option must be specified as an array")
    parsed: list[tuple[str, Any]] = []
    for stage in stages:
        mapping = as_mapping(stage)
        if mapping is None:
            raise command_error(14, "Each element of the 'pipeline' array must be an object")
        if len(mapping) != 1:
            raise command_error(
                40323, "A pipeline stage specification object must contain exactly one field."
            )
        ((name, spec),) = mapping.items()
        parsed.append((str(name), spec))
    return parsed


def _leading_find(
    stages: list[tuple[str, Any]], find: Find, *, extra: Mapping[str, Any] | None
) -> tuple[list[Document], list[tuple[str, Any]]]:
    """Run the pipeline's leading ``$match``, ``$sort``, ``$skip``, ``$limit`` (in that order, each
    at most once) as one find, with ``extra`` (a lookup's join condition) before the ``$match``."""
    taken: dict[str, Any] = {}
    position = 0
    order = list(_FIND_STAGES)
    while position < len(stages):
        name, spec = stages[position]
        if name not in order:
            break
        order = order[order.index(name) + 1 :]
        taken[name] = spec
        position += 1
    query = _joined(extra, _match_spec(taken["$match"]) if "$match" in taken else None)
    sort = _sort_spec(taken["$sort"]) if "$sort" in taken else []
    skip = _skip_spec(taken["$skip"]) if "$skip" in taken else 0
    limit = _limit_spec(taken["$limit"]) if "$limit" in taken else 0
    return find(query, sort, skip, limit), stages[position:]


def _joined(extra: Mapping[str, Any] | None, match: Mapping[str, Any] | None) -> dict[str, Any]:
    if extra is None:
        return dict(match or {})
    if match is None:
        return dict(extra)
    if set(extra).isdisjoint(match):
        return {**extra, **match}
    return {"$and": [dict(extra), dict(match)]}


def _run_stages(stages: list[tuple[str, Any]], documents: list[Document], source: Source) -> list[Document]:
    for name, spec in stages:
        documents = _run_stage(name, spec, documents, source)
    return documents


def _run_stage(name: str, spec: Any, documents: list[Document], source: Source) -> list[Document]:
    if name == "$sort":
        return sort_documents(documents, _sort_spec(spec))
    if name == "$skip":
        return documents[_skip_spec(spec) :]
    if name == "$limit":
        return documents[: _limit_spec(spec)]
    if name == "$count":
        field = _count_field(spec)
        return [{field: len(documents)}] if documents else []
    if name == "$project":
        projection = _projection(spec)
        return [projection(document) for document in documents]
    if name == "$lookup":
        join = _lookup(spec, source)
        for document in documents:
            join(document)
        return documents
    raise NotImplementedError(
        f"InMemoryCollection does not simulate the {name} stage here (only a find's leading $match, and"
        " $sort, $skip, $limit, $project, $count, $lookup; DIVERGENCES.md entry 31)"
    )


def _match_spec(spec: Any) -> Mapping[str, Any]:
    mapping = as_mapping(spec)
    if mapping is None:
        raise command_error(15959, "the match filter must be an expression in an object")
    return mapping


def _sort_spec(spec: Any) -> list[tuple[str, int]]:
    mapping = as_mapping(spec)
    if mapping is None or not mapping:
        raise command_error(15976, "$sort stage must have at least one sort key")
    keys: list[tuple[str, int]] = []
    for field, direction in mapping.items():
        if isinstance(direction, bool) or direction not in (1, -1):
            raise command_error(15975, "$sort key ordering must be 1 (for ascending) or -1 (for descending)")
        keys.append((str(field), int(direction)))
    return keys


def _number(spec: Any) -> int | None:
    if isinstance(spec, bool) or not isinstance(spec, (int, float)) or spec != int(spec):
        return None
    return int(spec)


def _skip_spec(spec: Any) -> int:
    skip = _number(spec)
    if skip is None:
        raise command_error(15972, "Argument to $skip must be a number")
    if skip < 0:
        raise command_error(15956, "Argument to $skip cannot be negative")
    return skip


def _limit_spec(spec: Any) -> int:
    limit = _number(spec)
    if limit is None:
        raise command_error(15957, "the limit must be specified as a number")
    if limit <= 0:
        raise command_error(15958, "the limit must be positive")
    return limit


def _count_field(spec: Any) -> str:
    if not isinstance(spec, str):
        raise command_error(40156, "the count field must be a non-empty string")
    if not spec:
        raise command_error(40157, "the count field must be a non-empty string")
    if spec.startswith("$"):
        raise command_error(40158, "the count field cannot be a $-prefixed path")
    if "." in spec:
        raise command_error(40160, "the count field cannot contain '.'")
    return spec


def _projection(spec: Any) -> Callable[[Document], Document]:
    """A top-level inclusion or exclusion projection (``_id`` included unless excluded)."""
    mapping = as_mapping(spec)
    if mapping is None or not mapping:
        raise command_error(40177, "$project specification must have at least one field")
    fields: dict[str, bool] = {}
    for field, value in mapping.items():
        if "." in field or field.startswith("$") or isinstance(value, (Mapping, str, list)):
            raise NotImplementedError(
                "InMemoryCollection projects top-level fields by 1/0 only (DIVERGENCES.md entry 31)"
            )
        fields[str(field)] = bool(value)
    include_id = fields.pop("_id", True)
    inclusive = any(fields.values())
    if inclusive and not all(fields.values()):
        raise command_error(
            31254, "Invalid $project :: caused by :: Cannot do exclusion in inclusion projection"
        )

    def project(document: Document) -> Document:
        if inclusive:
            kept = {key: value for key, value in document.items() if fields.get(key, False)}
        else:
            kept = {key: value for key, value in document.items() if key not in fields and key != "_id"}
        return {"_id": document["_id"], **kept} if include_id and "_id" in document else kept

    return project


def _lookup(spec: Any, source: Source) -> Callable[[Document], None]:
    """The join a ``$lookup`` adds to each document, in place: its ``as`` field, an array."""
    options = as_mapping(spec)
    if options is None:
        raise command_error(9, "the $lookup stage specification must be an object")
    unknown = set(options) - _LOOKUP_FIELDS
    if unknown:
        raise command_error(9, f"unknown argument to $lookup: {sorted(unknown)[0]}")
    if "let" in options:
        raise NotImplementedError(
            "InMemoryCollection does not simulate $lookup's 'let' (DIVERGENCES.md entry 31)"
        )
    local, foreign = options.get("localField"), options.get("foreignField")
    if (local is None) != (foreign is None) or (local is None and "pipeline" not in options):
        raise command_error(
            9, "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified"
        )
    for name in ("from", "as", "localField", "foreignField"):
        value = options.get(name)
        if name in options and not isinstance(value, str):
            raise command_error(9, f"$lookup argument '{name}' must be a string")
    target = source.find_in(str(options["from"]))
    inner = _parsed(options.get("pipeline", []))
    if any(name == "$lookup" for name, _ in inner):
        raise NotImplementedError(
            "InMemoryCollection does not simulate nested $lookup (DIVERGENCES.md entry 31)"
        )
    into = str(options["as"])
    nested = Source(target, source.find_in)

    def join(document: Document) -> None:
        condition = None if local is None else {str(foreign): _join_condition(document, str(local))}
        matched, rest = _leading_find(inner, target, extra=condition)
        matched = _run_stages(rest, matched, nested)
        if sum(bson_size(item) for item in matched) > MAX_LOOKUP_BYTES:
            raise command_error(
                4568,
                f"Total size of documents in {options['from']} matching pipeline's $lookup stage exceeds"
                f" {MAX_LOOKUP_BYTES} bytes",
            )
        document[into] = matched

    return join


def _join_condition(document: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The concise form's condition on the foreign field: ``$eq`` of the local value (``null`` when
    missing), or ``$in`` of an array's elements."""
    value: Any = document
    for part in path.split("."):
        mapping = as_mapping(value)
        value = None if mapping is None else mapping.get(part)
    elements = as_list(value)
    if elements is not None:
        return {"$in": list(elements)}
    return {"$eq": value}
