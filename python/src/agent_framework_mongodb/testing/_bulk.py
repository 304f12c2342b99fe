"""``bulk_write``'s requests as pymongo reads them, the order it sends them in, and its merged result.

pymongo builds a bulk by calling each request's ``_add_to_bulk`` with its private bulk object, whose
``add_insert``/``add_update``/``add_replace``/``add_delete`` receive the statements as the server
gets them: the document for an insert, ``{"q", "u", "multi", "upsert", ...}`` for an update,
``{"q", "limit", ...}`` for a delete (``_AgnosticBulkBase`` in pymongo/bulk_shared.py, pymongo
4.20; the request classes in pymongo/operations.py). The engine hands the requests a collector with
the same methods, so it reads exactly what pymongo would send, after the request classes' own
checks, and a write error's ``op`` is the statement pymongo puts there (``_merge_command``).

pymongo sends an ordered bulk as one command per run of consecutive requests of one kind, stopping
after the first command with a write error; an unordered bulk as at most three commands, all its
inserts, then all its updates, then all its deletes, each going on past its errors
(``gen_ordered``/``gen_unordered`` in bulk_shared.py, ``_AsyncBulk.execute_command`` in
pymongo/asynchronous/bulk.py). An unordered bulk of update requests is therefore one ``update``
command.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final

from bson.objectid import ObjectId
from pymongo.common import validate_is_document_type
from pymongo.errors import OperationFailure

from ._collation import check_collation
from ._updates import validate_update

INSERT: Final = 0
UPDATE: Final = 1
DELETE: Final = 2
"""pymongo's run kinds (``_INSERT``, ``_UPDATE``, ``_DELETE`` in pymongo/bulk_shared.py), in the
order an unordered bulk sends them."""

COMMANDS: Final = ("insert", "update", "delete")


@dataclass(frozen=True)
class Statement:
    """One request of a bulk: its kind, its place in the caller's list and what pymongo sends."""

    kind: int
    index: int
    op: Mapping[str, Any]


class RequestCollector:
    """Stands in for pymongo's bulk object while each request adds itself (``_add_to_bulk``)."""

    def __init__(self) -> None:
        self.statements: list[Statement] = []

    def add_insert(self, document: MutableMapping[str, Any]) -> None:
        validate_is_document_type("document", document)
        if "_id" not in document:
            document["_id"] = ObjectId()  # pymongo sets it on the caller's document, as insert_one does
        self._add(INSERT, document)  # the caller's document itself, as pymongo sends it

    def add_update(
        self,
        selector: Mapping[str, Any],
        update: Any,
        multi: bool,
        upsert: bool | None,
        *,
        collation: Mapping[str, Any] | None = None,
        array_filters: Any = None,
        hint: Any = None,
        sort: Any = None,
    ) -> None:
        validate_update(update)
        _refuse(array_filters=array_filters, sort=sort)
        statement: dict[str, Any] = {"q": selector, "u": update, "multi": multi}
        if upsert is not None:
            statement["upsert"] = upsert
        self._options(statement, collation, hint)
        self._add(UPDATE, statement)

    def add_replace(self, *_args: Any, **_options: Any) -> None:
        raise NotImplementedError(
            "InMemoryCollection.bulk_write does not simulate ReplaceOne (the engine has no replace;"
            " DIVERGENCES.md)"
        )

    def add_delete(
        self,
        selector: Mapping[str, Any],
        limit: int,
        collation: Mapping[str, Any] | None = None,
        hint: Any = None,
    ) -> None:
        statement: dict[str, Any] = {"q": selector, "limit": limit}
        self._options(statement, collation, hint)
        self._add(DELETE, statement)

    def _options(self, statement: dict[str, Any], collation: Mapping[str, Any] | None, hint: Any) -> None:
        if collation is not None:
            check_collation(collation)
            statement["collation"] = collation
        if hint is not None:
            statement["hint"] = hint

    def _add(self, kind: int, op: Mapping[str, Any]) -> None:
        self.statements.append(Statement(kind, len(self.statements), op))


def _refuse(**options: Any) -> None:
    for option, value in options.items():
        if value is not None:
            raise NotImplementedError(
                f"InMemoryCollection.bulk_write does not simulate {option!r} in a request (DIVERGENCES.md)"
            )


def in_sending_order(statements: list[Statement], *, ordered: bool) -> list[Statement]:
    """The statements in the order the server runs them: as given, or unordered by kind."""
    if ordered:
        return list(statements)
    return sorted(statements, key=lambda statement: statement.kind)  # stable: each kind keeps its order


@dataclass
class BulkTally:
    """The result pymongo merges from the commands' replies (``_merge_command``)."""

    inserted: int = 0
    upserted_count: int = 0
    matched: int = 0
    modified: int = 0
    removed: int = 0
    upserted: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    write_errors: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])

    def updated(self, statement: Statement, n: int, modified: int, upserted_id: Any) -> None:
        if upserted_id is not None:
            self.upserted_count += 1
            self.upserted.append({"index": statement.index, "_id": upserted_id})
        else:
            self.matched += n
        self.modified += modified

    def failed(self, statement: Statement, error: OperationFailure) -> None:
        """A statement's write error as pymongo reports it: the server's fields, its index, its op."""
        details = error.details or {}
        entry: dict[str, Any] = {
            "index": statement.index,
            "code": error.code,
            "errmsg": details.get("errmsg", str(error)),
        }
        for name in ("keyPattern", "keyValue", "errInfo"):
            if name in details:
                entry[name] = details[name]
        entry["op"] = statement.op
        self.write_errors.append(entry)

    def raw(self) -> dict[str, Any]:
        """``bulk_api_result`` with pymongo's keys; write errors by index, as pymongo sorts them."""
        return {
            "writeErrors": sorted(self.write_errors, key=lambda error: int(error["index"])),
            "writeConcernErrors": [],
            "nInserted": self.inserted,
            "nUpserted": self.upserted_count,
            "nMatched": self.matched,
            "nModified": self.modified,
            "nRemoved": self.removed,
            "upserted": list(self.upserted),
        }
