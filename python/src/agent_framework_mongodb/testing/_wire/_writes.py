"""Write commands: ``insert``, ``update``, ``delete`` and ``findAndModify``, on the engine's ``bulk_write``
and ``find_and_modify``.

A write command's statements become requests of the engine's ``bulk_write``, which reads them
through the same ``_add_to_bulk`` hook pymongo's request classes use (``../_bulk.py``), so each
statement runs with the engine's checks and write errors. The reply has the server's shape
(https://www.mongodb.com/docs/manual/reference/command/insert/#output, .../update/#output,
.../delete/#output, .../findAndModify/#output): ``n``, ``nModified``, ``upserted`` as
``[{index, _id}]``, ``writeErrors`` as ``[{index, code, errmsg, ...}]`` (pymongo adds ``op``
itself from its own batch, so the server never sends it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError

from .._bulk import DELETE, INSERT, UPDATE, RequestCollector
from .._bulk_writes import WriteRequest
from .._codec import as_mapping
from ._invocation import Invocation
from ._replies import CommandError, not_implemented

MAX_WRITE_BATCH_SIZE: Final = 100_000
"""maxWriteBatchSize, as the server reports it in ``hello`` and enforces per command."""

_SEQUENCES: Final = {
    "insert": ("documents", INSERT),
    "update": ("updates", UPDATE),
    "delete": ("deletes", DELETE),
}


@dataclass(frozen=True)
class _Statement:
    """One statement of a write command, offered to the engine's bulk as a pymongo request is."""

    kind: int
    op: Mapping[str, Any]

    def _add_to_bulk(self, bulk: RequestCollector) -> None:
        op = self.op
        if self.kind == INSERT:
            bulk.add_insert(dict(op))
            return
        if self.kind == DELETE:
            bulk.add_delete(op.get("q", {}), int(op.get("limit", 0)), op.get("collation"), op.get("hint"))
            return
        for option in ("c", "sort"):
            if option in op:
                raise not_implemented(f"an update statement's {option!r}")
        update = op.get("u")
        if _is_replacement(update):
            bulk.add_replace(op.get("q", {}), update)
            return
        bulk.add_update(
            op.get("q", {}),
            update,
            bool(op.get("multi", False)),
            op.get("upsert"),
            collation=op.get("collation"),
            array_filters=op.get("arrayFilters"),
            hint=op.get("hint"),
        )


def _is_replacement(update: Any) -> bool:
    """A document without update operators replaces the matched one (a pipeline is a list)."""
    document = as_mapping(update)
    return document is not None and not any(key.startswith("$") for key in document)


def _statements(invocation: Invocation) -> list[_Statement]:
    field, kind = _SEQUENCES[invocation.name]
    given = invocation.option(field)
    if not isinstance(given, list):
        raise CommandError(40414, f"BSON field '{invocation.name}.{field}' is missing but a required field")
    items = cast("list[Any]", given)  # type: ignore[redundant-cast]
    if not 1 <= len(items) <= MAX_WRITE_BATCH_SIZE:
        # write_ops_parsers.cpp checks the count against maxWriteBatchSize before running anything.
        raise CommandError(
            16,
            f"Write batch sizes must be between 1 and {MAX_WRITE_BATCH_SIZE}. Got {len(items)} operations.",
        )
    for item in items:
        if not isinstance(item, Mapping):
            raise CommandError(14, f"BSON field '{invocation.name}.{field}' must hold documents")
    return [_Statement(kind, cast("Mapping[str, Any]", item)) for item in items]


async def write(invocation: Invocation) -> dict[str, Any]:
    """``insert``, ``update`` or ``delete``."""
    invocation.refuse("let")
    statements = _statements(invocation)
    ordered = bool(invocation.option("ordered", True))
    collection = invocation.collection()
    requests = cast("list[WriteRequest]", statements)
    try:
        result = await collection.bulk_write(requests, ordered=ordered)
        raw: dict[str, Any] = result.bulk_api_result
    except BulkWriteError as error:
        raw = dict(error.details)
    return _reply(statements[0].kind, raw)


def _reply(kind: int, raw: Mapping[str, Any]) -> dict[str, Any]:
    reply: dict[str, Any]
    if kind == INSERT:
        reply = {"n": raw["nInserted"]}
    elif kind == DELETE:
        reply = {"n": raw["nRemoved"]}
    else:
        reply = {"n": raw["nMatched"] + raw["nUpserted"], "nModified": raw["nModified"]}
        if raw["upserted"]:
            reply["upserted"] = [{"index": item["index"], "_id": item["_id"]} for item in raw["upserted"]]
    if raw["writeErrors"]:
        reply["writeErrors"] = [
            {key: value for key, value in error.items() if key != "op"} for error in raw["writeErrors"]
        ]
    reply["ok"] = 1.0
    return reply


async def find_and_modify(invocation: Invocation) -> dict[str, Any]:
    if invocation.option("remove"):
        raise not_implemented("findAndModify's 'remove' (the engine has no find_one_and_delete)")
    update = invocation.option("update")
    if update is None:
        raise CommandError(9, "Either an update or remove=true must be specified")
    if _is_replacement(update):
        raise not_implemented("a replacement document in findAndModify (the engine has no replace)")
    sort = invocation.document("sort")
    hint = invocation.option("hint")
    options: dict[str, Any] = {}
    for name, keyword in (("arrayFilters", "array_filters"), ("let", "let")):
        if name in invocation.command:
            options[keyword] = invocation.option(name)
    modified = await invocation.collection().find_and_modify(
        invocation.document("query") or {},
        update,
        invocation.document("fields"),
        sort=None if not sort else [(field, int(direction)) for field, direction in sort.items()],
        upsert=bool(invocation.option("upsert", False)),
        return_document=ReturnDocument.AFTER if invocation.option("new") else ReturnDocument.BEFORE,
        collation=invocation.document("collation"),
        hint=hint,
        **options,
    )
    if modified is None:
        return {"ok": 1.0}
    last: dict[str, Any] = {"n": int(modified.matched), "updatedExisting": modified.updated_existing}
    if modified.upserted_id is not None:
        last["upserted"] = modified.upserted_id
    return {"lastErrorObject": last, "value": modified.value, "ok": 1.0}
