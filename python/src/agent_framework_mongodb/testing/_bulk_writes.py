"""Writes of many documents in one request: ``update_many`` and ``bulk_write``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import bson
from pymongo import DeleteMany, DeleteOne, InsertOne, ReplaceOne, UpdateMany, UpdateOne
from pymongo.common import validate_list  # pyright: ignore[reportUnknownVariableType] - untyped return in pymongo 4.13
from pymongo.errors import BulkWriteError, ConfigurationError, InvalidOperation, OperationFailure
from pymongo.results import BulkWriteResult, UpdateResult

from ._bulk import COMMANDS, DELETE, INSERT, UPDATE, BulkTally, RequestCollector, Statement, in_sending_order
from ._codec import to_storage_sized
from ._codec import wire_value as wire
from ._collection_base import CollationArg, CollectionBase, Filter, Hint, Update, unsupported
from ._keywords import check_keywords
from ._limits import check_batched, check_command, insert_error
from ._updates import validate_update

WriteRequest = (
    InsertOne[dict[str, Any]] | DeleteOne | DeleteMany | ReplaceOne[dict[str, Any]] | UpdateOne | UpdateMany
)
"""The requests ``AsyncCollection.bulk_write`` takes (its ``_WriteOp``)."""

_Stored = dict[int, tuple[dict[str, Any], int]]  # a bulk's insert documents by index: (stored form, size)


class BulkWrites(CollectionBase):
    """``update_many`` and ``bulk_write``; atomic but for their upserts' waits (DIVERGENCES.md)."""

    async def update_many(
        self,
        filter: Filter,
        update: Update,
        upsert: bool = False,
        *,
        collation: CollationArg = None,
        hint: Hint = None,
        array_filters: Any = None,
        let: Any = None,
        session: object = None,
        **extra: Any,
    ) -> UpdateResult:
        check_keywords("update_many", extra)
        self._check_write_collation(collation)
        unsupported(array_filters=array_filters, let=let)
        async with self._round_trip("update_many", session, write=self._attempts("update_many")):
            validate_update(update)
            statement = {"q": filter, "u": update, "multi": True, "upsert": upsert}
            command = {"update": self._name, "ordered": True, "updates": [statement]}
            check_command(self._database.name, command, acknowledged=self._acknowledged)
            self._check_default_collation(collation)
            missed = await self._upsert_missed(filter, None, upsert=upsert)
            raw = self._write(
                lambda: self._update_many_reply(filter, update, upsert=upsert, hint=hint, missed=missed)
            )
        if raw is None:
            return UpdateResult(None, acknowledged=False)
        return UpdateResult(raw, acknowledged=True)

    def _update_many_reply(
        self, filter_: Filter, update: Update, *, upsert: bool, hint: Hint, missed: bool
    ) -> dict[str, Any]:
        """The reply as pymongo's ``_update`` leaves it: ``upserted`` is the id, not a list."""
        n, modified, upserted_id = self._update_all(filter_, update, upsert=upsert, hint=hint, missed=missed)
        raw: dict[str, Any] = {
            "n": n,
            "nModified": modified,
            "ok": 1.0,
            "updatedExisting": n > 0 and upserted_id is None,
        }
        if upserted_id is not None:
            raw["upserted"] = upserted_id
        return raw

    def _update_all(
        self, filter_: Filter, update: Update, *, upsert: bool, hint: Hint, missed: bool
    ) -> tuple[int, int, Any]:
        """One multi-document update statement: (matched or upserted, modified, upserted id).

        Each match is updated in turn, its post-image checked as a single update's is; a write
        error stops the statement and leaves the documents updated before it so, as on the server.
        """
        self._check_hint(hint)
        validate_update(update)
        found = [] if missed else self._query(filter_)
        if not found:
            if not upsert:
                return 0, 0, None
            pre, post, upserted_id, changed = self._upsert_or_update(
                filter_, update, upsert=True, sort=None, command=False, missed=missed
            )
            return (0 if post is None else 1), int(changed and pre is not None), upserted_id
        server_filter = wire(dict(filter_))
        modified = sum(self._put_post_image(pre, update, server_filter, command=False)[1] for pre in found)
        return len(found), modified, None

    async def bulk_write(
        self,
        requests: Sequence[WriteRequest],
        ordered: bool = True,
        *,
        bypass_document_validation: bool | None = None,
        session: object = None,
        comment: object = None,
        let: Mapping[str, Any] | None = None,
    ) -> BulkWriteResult:
        """Run ``requests`` as pymongo's ``bulk_write`` does, in one round trip (``_bulk.py``)."""
        statements = _collect(requests)
        unsupported(let=let)
        if not self._acknowledged:
            # pymongo's guards before an unacknowledged bulk (_AsyncBulk.execute_no_results).
            if any("collation" in statement.op for statement in statements):
                raise ConfigurationError("Collation is unsupported for unacknowledged writes.")
            if bypass_document_validation:
                raise OperationFailure(
                    "Cannot set bypass_document_validation with unacknowledged write concern"
                )
        multi = any(
            (statement.kind == UPDATE and statement.op["multi"])
            or (statement.kind == DELETE and not statement.op["limit"])
            for statement in statements
        )
        async with self._round_trip("bulk_write", session, write=self._attempts("bulk_write", multi=multi)):
            stored = self._prepare_bulk(statements)
            order = in_sending_order(statements, ordered=ordered)
            raw = await self._run_bulk(order, stored, ordered=ordered)
        if raw is None:
            return BulkWriteResult({}, acknowledged=False)
        return BulkWriteResult(raw, acknowledged=True)

    def _prepare_bulk(self, statements: list[Statement]) -> _Stored:
        """Encode the inserts and check every statement's size and collation before any runs."""
        stored: _Stored = {}
        sizes: dict[int, list[int]] = {}
        for statement in statements:
            if statement.kind == INSERT:
                stored[statement.index] = to_storage_sized(dict(statement.op))
                size = stored[statement.index][1]
            else:
                size = len(bson.encode(statement.op))
                self._check_default_collation(statement.op.get("collation"))
            sizes.setdefault(statement.kind, []).append(size)
        for kind, kind_sizes in sizes.items():
            check_batched(
                self._database.name, COMMANDS[kind], self._name, kind_sizes, acknowledged=self._acknowledged
            )
        return stored

    async def _run_bulk(
        self, order: list[Statement], stored: _Stored, *, ordered: bool
    ) -> dict[str, Any] | None:
        """Run the statements; ordered, the first write error ends the bulk; then raise them all.

        The server runs a command's statements one at a time, and an upsert among them queries,
        then inserts, as a single upsert does. Under scheduling such an upsert whose query finds
        nothing waits there, as ``update_one``'s does (DIVERGENCES.md entries 2 and 26), while
        other operations run; the statements between two such waits run atomically, each run in
        one journal append. Without scheduling nothing waits, and the bulk is one atomic run.
        Unacknowledged, the result and every write error are lost (None).
        """
        tally = BulkTally()
        resume: int | None = 0
        missed = False
        while resume is not None:
            with self._database.client.journal.batch():
                resume = self._run_until_wait(order, resume, stored, tally, ordered=ordered, missed=missed)
            if resume is not None:
                await self._pause_before_insert()
                missed = True
        if not self._acknowledged:
            return None
        raw = tally.raw()
        if raw["writeErrors"]:
            raise BulkWriteError(raw)
        return raw

    def _run_until_wait(
        self,
        order: list[Statement],
        start: int,
        stored: _Stored,
        tally: BulkTally,
        *,
        ordered: bool,
        missed: bool,
    ) -> int | None:
        """Run ``order[start:]`` until an upsert must wait before inserting: its position, or None
        once the bulk is done. ``missed``: ``order[start]`` already queried, found nothing and waited."""
        for position in range(start, len(order)):
            statement = order[position]
            resumed = missed and position == start
            if not resumed and self._must_wait(statement):
                return position
            error = self._try_statement(statement, stored, tally, missed=resumed)
            if error is not None:
                tally.failed(statement, error)
                if ordered:
                    return None
        return None

    def _must_wait(self, statement: Statement) -> bool:
        """Whether this upsert statement's query finds nothing now, under scheduling."""
        if statement.kind != UPDATE or not statement.op.get("upsert"):
            return False
        try:
            return self._upsert_would_insert(statement.op["q"], None)
        except OperationFailure:
            return False  # a filter the server refuses: the statement reports it when it runs

    def _try_statement(
        self, statement: Statement, stored: _Stored, tally: BulkTally, *, missed: bool
    ) -> OperationFailure | None:
        try:
            self._run_statement(statement, stored, tally, missed=missed)
        except OperationFailure as error:  # the statement's write error (E11000 included)
            return error
        return None

    def _run_statement(
        self, statement: Statement, stored: _Stored, tally: BulkTally, *, missed: bool
    ) -> None:
        op = statement.op
        if statement.kind == INSERT:
            document, size = stored[statement.index]
            error = insert_error(size, index=statement.index)
            if error is not None:
                raise error
            self._insert_stored(document, index=statement.index)
            tally.inserted += 1
            return
        self._check_hint(op.get("hint"))
        if statement.kind == DELETE:
            found = self._query(op["q"], limit=1) if op["limit"] == 1 else None
            if found is None:
                tally.removed += self.delete_matching(op["q"])
                return
            for document in found:
                self._delete_stored(document)
            tally.removed += len(found)
            return
        upsert = bool(op.get("upsert", False))
        if op["multi"]:
            n, modified, upserted_id = self._update_all(
                op["q"], op["u"], upsert=upsert, hint=None, missed=missed
            )
        else:
            pre, post, upserted_id, changed = self._upsert_or_update(
                op["q"], op["u"], upsert=upsert, sort=None, command=False, missed=missed
            )
            n, modified = (0 if post is None else 1), int(changed and pre is not None)
        tally.updated(statement, n, modified, upserted_id)


def _collect(requests: Sequence[WriteRequest]) -> list[Statement]:
    """The statements pymongo would send for ``requests``, with its checks and errors."""
    validate_list("requests", requests)
    collector = RequestCollector()
    for request in requests:
        add = getattr(request, "_add_to_bulk", None)  # what AsyncCollection.bulk_write calls
        if add is None:
            raise TypeError(f"{request!r} is not a valid request")
        add(collector)
    if not collector.statements:
        raise InvalidOperation("No operations to execute")
    return collector.statements
