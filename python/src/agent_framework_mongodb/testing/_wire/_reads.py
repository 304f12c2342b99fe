"""Read commands: ``find``, ``aggregate``, ``count``, and the cursor commands ``getMore`` and ``killCursors``.

Each runs on the engine's collection API (``find``, ``aggregate``, ``count_documents``), whose
whole result the server-side cursor then hands out in batches (``_cursors.py``). Command fields:
https://www.mongodb.com/docs/manual/reference/command/find/, .../aggregate/, .../count/,
.../getMore/, .../killCursors/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._codec import as_list, as_mapping
from ._invocation import Invocation
from ._replies import CommandError, not_implemented

_NEGATIVE = 51024
_COUNT_GROUP = {"$group": {"_id": 1, "n": {"$sum": 1}}}


def _sort(invocation: Invocation, name: str = "sort") -> list[tuple[str, int]] | None:
    sort = invocation.document(name)
    return None if not sort else [(field, int(direction)) for field, direction in sort.items()]


def _non_negative(invocation: Invocation, name: str) -> int:
    value = invocation.option(name, 0) or 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandError(14, f"BSON field 'FindCommandRequest.{name}' is the wrong type, expected a number")
    if value < 0:
        raise CommandError(_NEGATIVE, f"BSON field '{name}' value must be >= 0, actual value '{value}'")
    return int(value)


def _hint(invocation: Invocation) -> str | Mapping[str, Any] | None:
    hint = invocation.option("hint")
    if hint is None or isinstance(hint, str):
        return hint
    if isinstance(hint, Mapping):
        return {str(field): int(direction) for field, direction in hint.items()}  # pyright: ignore[reportUnknownVariableType,reportUnknownArgumentType]
    raise CommandError(2, "hint must be a string or an object")


async def find(invocation: Invocation) -> dict[str, Any]:
    invocation.refuse("let", "min", "max", "returnKey", "showRecordId", "tailable", "awaitData", "readOnce")
    cursor = invocation.collection().find(
        invocation.document("filter") or {},
        invocation.document("projection"),
        sort=_sort(invocation),
        skip=_non_negative(invocation, "skip"),
        limit=_non_negative(invocation, "limit"),
        collation=invocation.document("collation"),
        hint=_hint(invocation),
    )
    documents = await cursor.to_list()
    first = invocation.cursors.first_batch(
        invocation.namespace,
        documents,
        batch_size=invocation.batch_size(),
        single_batch=bool(invocation.option("singleBatch")),
    )
    return {"cursor": first, "ok": 1.0}


async def explain(_invocation: Invocation) -> dict[str, Any]:
    """Refused: the engine has no query planner, so no plan to explain (DIVERGENCES.md entry 3)."""
    raise not_implemented("explain: the engine has no query planner")


async def aggregate(invocation: Invocation) -> dict[str, Any]:
    if not isinstance(invocation.command[invocation.name], str):
        raise not_implemented("database-level aggregate (aggregate: 1)")
    if invocation.option("explain"):
        # The engine has no query planner and no explain (DIVERGENCES.md entry 3).
        raise not_implemented("explain: the engine has no query planner")
    cursor_options = invocation.document("cursor")
    if cursor_options is None:
        raise CommandError(
            9, "The 'cursor' option is required, except for aggregate with the explain argument"
        )
    pipeline = as_list(invocation.option("pipeline"))
    if pipeline is None:
        raise CommandError(14, "'pipeline' option must be specified as an array")
    counted = _count_pipeline(pipeline)
    if counted is not None:
        documents = await _count_documents(invocation, counted)
        first = invocation.cursors.first_batch(
            invocation.namespace, documents, batch_size=invocation.batch_size(cursor_options)
        )
        return {"cursor": first, "ok": 1.0}
    options: dict[str, Any] = {"collation": invocation.document("collation")}
    if "let" in invocation.command:
        options["let"] = invocation.option("let")
    result = await invocation.collection().aggregate(pipeline, **options)  # pyright: ignore[reportUnknownArgumentType]
    documents = await result.to_list()
    first = invocation.cursors.first_batch(
        invocation.namespace, documents, batch_size=invocation.batch_size(cursor_options)
    )
    return {"cursor": first, "ok": 1.0}


@dataclass(frozen=True)
class _Counted:
    """The pipeline pymongo's ``count_documents`` sends: ``$match``, then ``$skip``/``$limit``, then
    ``$group: {_id: 1, n: {$sum: 1}}`` (``AsyncCollection.count_documents``)."""

    filter: dict[str, Any]
    skip: int | None
    limit: int | None


def _count_pipeline(pipeline: list[Any]) -> _Counted | None:
    """The count ``pipeline`` asks for, when it is exactly that shape; the engine's aggregate has no
    ``$group`` (DIVERGENCES.md entry 31), and its ``count_documents`` counts the same documents."""
    if len(pipeline) < len(("$match", "$group")) or pipeline[-1] != _COUNT_GROUP:
        return None
    first = as_mapping(pipeline[0]) or {}
    match = as_mapping(first.get("$match"))
    if list(first) != ["$match"] or match is None:
        return None
    stages: dict[str, int] = {}
    for given in pipeline[1:-1]:
        stage = as_mapping(given) or {}
        if len(stage) != 1:
            return None
        ((name, value),) = stage.items()
        if (
            name not in ("$skip", "$limit")
            or name in stages
            or isinstance(value, bool)
            or not isinstance(value, int)
        ):
            return None
        stages[name] = value
    return _Counted(dict(match), stages.get("$skip"), stages.get("$limit"))


async def _count_documents(invocation: Invocation, counted: _Counted) -> list[dict[str, Any]]:
    n = await invocation.collection().count_documents(
        counted.filter,
        skip=counted.skip,
        limit=counted.limit,
        hint=_hint(invocation),
        collation=invocation.document("collation"),
    )
    # $group over no documents produces none: pymongo reads a missing result as 0.
    return [{"_id": 1, "n": n}] if n else []


async def count(invocation: Invocation) -> dict[str, Any]:
    query = invocation.document("query") or {}
    skip = _non_negative(invocation, "skip")
    limit = invocation.option("limit", 0) or 0
    collection = invocation.collection()
    hint = _hint(invocation)
    collation = invocation.document("collation")
    if not query and not skip and not limit and hint is None and collation is None:
        n = await collection.estimated_document_count()
    else:
        # A negative limit counts as its absolute value (https://www.mongodb.com/docs/manual/reference/command/count/).
        n = await collection.count_documents(
            query, skip=skip or None, limit=abs(int(limit)) or None, hint=hint, collation=collation
        )
    return {"n": n, "ok": 1.0}


async def get_more(invocation: Invocation) -> dict[str, Any]:
    cursor_id = invocation.command["getMore"]
    if isinstance(cursor_id, bool) or not isinstance(cursor_id, int):
        raise CommandError(14, "BSON field 'getMore.getMore' is the wrong type, expected type 'long'")
    collection = invocation.option("collection")
    if not isinstance(collection, str):
        raise CommandError(40414, "BSON field 'getMore.collection' is missing but a required field")
    namespace = f"{invocation.database}.{collection}"
    batch = invocation.cursors.get_more(int(cursor_id), namespace, invocation.batch_size())
    return {"cursor": batch, "ok": 1.0}


async def kill_cursors(invocation: Invocation) -> dict[str, Any]:
    ids = invocation.option("cursors")
    if not isinstance(ids, list):
        raise CommandError(40414, "BSON field 'killCursors.cursors' is missing but a required field")
    return {**invocation.cursors.kill(invocation.namespace, [int(i) for i in ids]), "ok": 1.0}  # pyright: ignore[reportUnknownArgumentType,reportUnknownVariableType]
