"""``InMemoryCollection``: the awaited read and write API of pymongo's ``AsyncCollection``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bson.codec_options import CodecOptions
from bson.objectid import ObjectId
from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError, ConfigurationError, WriteError
from pymongo.read_concern import ReadConcern
from pymongo.results import DeleteResult, InsertManyResult, InsertOneResult, UpdateResult
from pymongo.write_concern import WriteConcern

from ._aggregate import Find, Source, run_pipeline
from ._bulk_writes import BulkWrites
from ._codec import as_mapping, to_storage_sized
from ._collation import check_collation, collation_document
from ._collection_base import CollationArg, Filter, Hint, Update, projection_spec, unsupported
from ._cursor import InMemoryCommandCursor, InMemoryCursor, SortSpec, normalize_sort
from ._errors import command_error
from ._keywords import check_keywords
from ._limits import check_command, check_insert_many, check_query, insert_error
from ._options import ReadPreferenceMode
from ._updates import validate_update


@dataclass(frozen=True)
class Modified:
    """What one ``findAndModify`` did: the document it returns and its ``lastErrorObject``."""

    value: dict[str, Any] | None
    """The pre- or post-image, projected, as ``find_one_and_update`` returns it."""
    matched: bool
    """Whether a document was updated or upserted (``lastErrorObject.n`` is 1)."""
    updated_existing: bool
    upserted_id: Any
    """The inserted document's ``_id`` when the upsert inserted; None otherwise."""


class InMemoryCollection(BulkWrites):
    """A collection of an :class:`InMemoryDatabase`; duck-types ``AsyncCollection``."""

    def with_options(
        self,
        codec_options: CodecOptions[Any] | None = None,
        read_preference: ReadPreferenceMode | None = None,
        write_concern: WriteConcern | None = None,
        read_concern: ReadConcern | None = None,
    ) -> InMemoryCollection:
        """A new view of this collection (same documents and indexes) with the given settings.

        Settings not given are this view's, as ``AsyncCollection.with_options`` takes them.
        """
        return InMemoryCollection(
            self._database,
            self._name,
            codec_options=codec_options or self.codec_options,
            read_preference=read_preference or self.read_preference,
            write_concern=write_concern or self.write_concern,
            read_concern=read_concern or self.read_concern,
        )

    # -- reads ------------------------------------------------------------------------------------
    def find(
        self,
        filter: Filter | None = None,
        projection: Mapping[str, Any] | Sequence[str] | None = None,
        *,
        sort: SortSpec | None = None,
        limit: int = 0,
        skip: int = 0,
        collation: CollationArg = None,
        hint: Hint = None,
        batch_size: int = 0,
        session: object = None,
        **extra: Any,
    ) -> InMemoryCursor:
        """A cursor (not awaited), as ``AsyncCollection.find`` returns."""
        check_keywords("find", extra)
        check_collation(collation)
        unsupported(session=session)
        cursor = InMemoryCursor(
            self._run_cursor,
            dict(filter or {}),
            projection_spec(projection),
            sort=normalize_sort(sort),
            limit=limit,
            skip=skip,
            collation=collation,
            hint=None,
        )
        return cursor.hint(hint).batch_size(batch_size)

    async def _run_cursor(self, cursor: InMemoryCursor) -> list[dict[str, Any]]:
        async with self._round_trip("find"):
            self._check_find(
                cursor.filter,
                cursor.projection,
                sort=cursor.sort_spec,
                skip=cursor.skip_value,
                limit=cursor.limit_value,
                batch_size=cursor.batch_size_value,
                hint=cursor.hint_value,
                collation=cursor.collation_value,
            )
            self._check_default_collation(cursor.collation_value)
            self._check_hint(cursor.hint_value)
            documents = self._query(
                cursor.filter,
                sort=cursor.sort_spec,
                skip=cursor.skip_value,
                limit=abs(cursor.limit_value),
                projection=projection_spec(cursor.projection),
            )
            return [self._out(document) for document in documents]

    async def find_one(
        self,
        filter: Any = None,
        projection: Mapping[str, Any] | Sequence[str] | None = None,
        *,
        sort: SortSpec | None = None,
        skip: int = 0,
        collation: CollationArg = None,
        hint: Hint = None,
        session: object = None,
        **extra: Any,
    ) -> dict[str, Any] | None:
        check_keywords("find_one", extra)
        check_collation(collation)
        mapping = as_mapping(filter)
        query = mapping if mapping is not None or filter is None else {"_id": filter}  # a bare _id
        async with self._round_trip("find_one", session):
            # pymongo's find_one is find(...).limit(-1): one batch, closed at once.
            self._check_find(
                query,
                projection,
                sort=normalize_sort(sort),
                skip=skip,
                limit=-1,
                hint=hint,
                collation=collation,
            )
            self._check_default_collation(collation)
            self._check_hint(hint)
            found = self._query(
                query, sort=normalize_sort(sort), skip=skip, limit=1, projection=projection_spec(projection)
            )
            return self._out(found[0]) if found else None

    async def aggregate(
        self,
        pipeline: Sequence[Mapping[str, Any]],
        *,
        collation: CollationArg = None,
        let: Any = None,
        session: object = None,
        **_ignored: Any,
    ) -> InMemoryCommandCursor:
        """Run ``pipeline`` (the stages ``_aggregate.py`` lists) and return its cursor, as
        ``AsyncCollection.aggregate`` does once awaited: the command runs then, atomically."""
        check_collation(collation)
        unsupported(let=let)
        async with self._round_trip("aggregate", session):
            command: dict[str, Any] = {"aggregate": self._name, "pipeline": list(pipeline), "cursor": {}}
            if collation is not None:
                command["collation"] = collation_document(collation)
            self._check_command(command)
            self._check_default_collation(collation)
            documents = run_pipeline(pipeline, Source(self._finder(), self._finder_in))
            return InMemoryCommandCursor([self._out(document) for document in documents])

    def _finder(self) -> Find:
        def find(filter_: Mapping[str, Any], sort: list[tuple[str, int]], skip: int, limit: int) -> list[Any]:
            return self._query(filter_, sort=sort or None, skip=skip, limit=limit)

        return find

    def _finder_in(self, name: str) -> Find:
        """The find of a collection of this database, for a ``$lookup``'s ``from``."""
        other = self if name == self._name else self._database.get_collection(name)
        return other._finder()

    async def count_documents(
        self,
        filter: Filter,
        *,
        collation: CollationArg = None,
        limit: int | None = None,
        skip: int | None = None,
        hint: Hint = None,
        session: object = None,
        **_ignored: Any,
    ) -> int:
        check_collation(collation)
        async with self._round_trip("count_documents", session):
            self._check_command(_count_command(self._name, filter, skip=skip, limit=limit, hint=hint))
            self._check_default_collation(collation)
            self._check_hint(hint)
            count = len(self._matching(filter))
            if skip is not None:
                if skip < 0:
                    raise command_error(15956, "Argument to $skip cannot be negative")
                count = max(count - skip, 0)
            if limit is not None:
                if limit <= 0:
                    raise command_error(15958, "the limit must be positive")
                count = min(count, limit)
            return count

    async def estimated_document_count(self, *, session: object = None, **_ignored: Any) -> int:
        async with self._round_trip("estimated_document_count", session):
            return len(self._state.store)

    # -- writes -----------------------------------------------------------------------------------
    async def insert_one(
        self, document: dict[str, Any], *, session: object = None, **extra: Any
    ) -> InsertOneResult:
        check_keywords("insert_one", extra)
        if as_mapping(document) is None:
            raise TypeError("document must be an instance of dict, bson.son.SON, or another MutableMapping")
        if "_id" not in document:
            document["_id"] = ObjectId()  # pymongo sets the _id on the caller's document
        async with self._round_trip("insert_one", session, write=self._attempts("insert_one")):
            stored, size = to_storage_sized(document)
            self._check_command({"insert": self._name, "ordered": True}, sequence_sizes=[size])
            self._write(lambda: self._insert_sized(stored, size))
        return InsertOneResult(document["_id"], acknowledged=self._acknowledged)

    async def insert_many(
        self,
        documents: Sequence[dict[str, Any]],
        ordered: bool = True,
        *,
        session: object = None,
        **extra: Any,
    ) -> InsertManyResult:
        check_keywords("insert_many", extra)
        if isinstance(documents, Mapping) or not documents:
            raise TypeError("documents must be a non-empty list")
        for document in documents:
            if "_id" not in document:
                document["_id"] = ObjectId()
        async with self._round_trip("insert_many", session, write=self._attempts("insert_many")):
            stored = [to_storage_sized(document) for document in documents]
            sizes = [size for _, size in stored]
            check_insert_many(self._database.name, self._name, sizes, acknowledged=self._acknowledged)
            self._write(lambda: self._insert_all(documents, stored, ordered=ordered))
        return InsertManyResult([document["_id"] for document in documents], acknowledged=self._acknowledged)

    def _check_find(
        self,
        filter_: Mapping[str, Any] | None,
        projection: Any,
        *,
        sort: list[tuple[str, int]],
        skip: int,
        limit: int,
        hint: Hint | Mapping[str, Any],
        collation: CollationArg,
        batch_size: int = 0,
    ) -> None:
        """Refuse a ``find`` whose command pymongo would not send (``check_query``).

        The command is built as ``_gen_find_command`` in pymongo/message.py builds it.
        """
        command: dict[str, Any] = {"find": self._name, "filter": dict(filter_ or {})}
        if sort:
            command["sort"] = dict(sort)
        if hint is not None:
            command["hint"] = hint if isinstance(hint, str) else dict(normalize_sort(hint))
        if projection:
            command["projection"] = projection_spec(projection)
        if skip:
            command["skip"] = skip
        if limit:
            command["limit"] = abs(limit)
            if limit < 0:
                command["singleBatch"] = True
        if batch_size:
            command["batchSize"] = batch_size + 1 if batch_size == limit else batch_size
        if self.read_concern.level:
            command["readConcern"] = self.read_concern.document
        if collation is not None:
            command["collation"] = collation_document(collation)
        mode = self.read_preference
        check_query(self._database.name, command, read_preference=mode.document if mode.mode else None)

    def _check_command(self, command: Mapping[str, Any], *, sequence_sizes: list[int] | None = None) -> None:
        check_command(
            self._database.name, command, acknowledged=self._acknowledged, sequence_sizes=sequence_sizes
        )

    def _insert_sized(self, stored: dict[str, Any], size: int, *, index: int = 0) -> None:
        """Insert as the server does: a document over 16 MiB is a write error, code 2."""
        error = insert_error(size, index=index)
        if error is not None:
            raise error
        self._insert_stored(stored, index=index)

    def _insert_all(
        self, documents: Sequence[dict[str, Any]], stored: list[tuple[dict[str, Any], int]], *, ordered: bool
    ) -> None:
        errors: list[dict[str, Any]] = []
        inserted = 0
        for index, (item, size) in enumerate(stored):
            error = self._try_insert(item, size, index)
            if error is None:
                inserted += 1
                continue
            errors.append(dict(error.details or {}, op=documents[index]))
            if ordered:
                break
        if errors:
            raise BulkWriteError(
                {
                    "writeErrors": errors,
                    "writeConcernErrors": [],
                    "nInserted": inserted,
                    "nUpserted": 0,
                    "nMatched": 0,
                    "nModified": 0,
                    "nRemoved": 0,
                    "upserted": [],
                }
            )

    def _try_insert(self, stored: dict[str, Any], size: int, index: int) -> WriteError | None:
        try:
            self._insert_sized(stored, size, index=index)
        except WriteError as exc:  # DuplicateKeyError included
            return exc
        return None

    async def update_one(
        self,
        filter: Filter,
        update: Update,
        upsert: bool = False,
        *,
        collation: CollationArg = None,
        hint: Hint = None,
        sort: SortSpec | None = None,
        array_filters: Any = None,
        let: Any = None,
        session: object = None,
        **extra: Any,
    ) -> UpdateResult:
        check_keywords("update_one", extra)
        self._check_write_collation(collation)
        unsupported(array_filters=array_filters, let=let)
        if sort is not None and not self._acknowledged:
            # pymongo checks the server's wire version; the engine reports 7.0 (AsyncCollection._update).
            raise ConfigurationError(
                "Must be connected to MongoDB 8.0+ to use sort on unacknowledged update commands."
            )
        async with self._round_trip("update_one", session, write=self._attempts("update_one")):
            validate_update(update)
            statement = {"q": filter, "u": update, "multi": False, "upsert": upsert}
            self._check_command({"update": self._name, "ordered": True, "updates": [statement]})
            self._check_default_collation(collation)
            missed = await self._upsert_missed(filter, sort, upsert=upsert)
            outcome = self._write(
                lambda: self._update_one(filter, update, upsert=upsert, hint=hint, sort=sort, missed=missed)
            )
        if outcome is None:
            return UpdateResult(None, acknowledged=False)
        return UpdateResult(outcome, acknowledged=True)

    def _update_one(
        self,
        filter_: Filter,
        update: Update,
        *,
        upsert: bool,
        hint: Hint,
        sort: SortSpec | None,
        missed: bool,
    ) -> dict[str, Any]:
        self._check_hint(hint)
        pre, post, upserted_id, modified = self._upsert_or_update(
            filter_, update, upsert=upsert, sort=sort, command=False, missed=missed
        )
        raw: dict[str, Any] = {
            "n": 0 if post is None else 1,
            "nModified": int(modified and pre is not None),
            "ok": 1.0,
            "updatedExisting": pre is not None,
        }
        if upserted_id is not None:
            raw["upserted"] = upserted_id
        return raw

    async def find_one_and_update(
        self,
        filter: Filter,
        update: Update,
        projection: Mapping[str, Any] | Sequence[str] | None = None,
        *,
        sort: SortSpec | None = None,
        upsert: bool = False,
        return_document: bool = ReturnDocument.BEFORE,
        collation: CollationArg = None,
        hint: Hint = None,
        array_filters: Any = None,
        let: Any = None,
        session: object = None,
        **_ignored: Any,
    ) -> dict[str, Any] | None:
        modified = await self.find_and_modify(
            filter,
            update,
            projection,
            sort=sort,
            upsert=upsert,
            return_document=return_document,
            collation=collation,
            hint=hint,
            array_filters=array_filters,
            let=let,
            session=session,
        )
        # Unacknowledged, pymongo reads no reply and returns None (its fake reply has no "value").
        return None if modified is None else modified.value

    async def find_and_modify(
        self,
        filter: Filter,
        update: Update,
        projection: Mapping[str, Any] | Sequence[str] | None = None,
        *,
        sort: SortSpec | None = None,
        upsert: bool = False,
        return_document: bool = ReturnDocument.BEFORE,
        collation: CollationArg = None,
        hint: Hint = None,
        array_filters: Any = None,
        let: Any = None,
        session: object = None,
    ) -> Modified | None:
        """``find_one_and_update`` with the whole ``findAndModify`` outcome (the wire front's
        ``lastErrorObject``); None when unacknowledged."""
        self._check_write_collation(collation)
        unsupported(array_filters=array_filters, let=let)

        def run(missed: bool) -> Modified:
            self._check_hint(hint)
            pre, post, upserted_id, _ = self._upsert_or_update(
                filter, update, upsert=upsert, sort=sort, command=True, missed=missed
            )
            chosen = post if return_document == ReturnDocument.AFTER else pre
            return Modified(self._project(chosen, projection), post is not None, pre is not None, upserted_id)

        async with self._round_trip(
            "find_one_and_update", session, write=self._attempts("find_one_and_update")
        ):
            validate_update(update)
            command = {"findAndModify": self._name, "query": filter, "update": update, "upsert": upsert}
            self._check_command(command)
            self._check_default_collation(collation)
            missed = await self._upsert_missed(filter, sort, upsert=upsert)
            return self._write(lambda: run(missed))

    async def delete_one(
        self,
        filter: Filter,
        *,
        collation: CollationArg = None,
        hint: Hint = None,
        session: object = None,
        **extra: Any,
    ) -> DeleteResult:
        check_keywords("delete_one", extra)
        self._check_write_collation(collation)

        def run() -> int:
            self._check_hint(hint)
            found = self._query(filter, limit=1)
            for document in found:
                self._delete_stored(document)
            return len(found)

        async with self._round_trip("delete_one", session, write=self._attempts("delete_one")):
            deletes = [{"q": filter, "limit": 1}]
            self._check_command({"delete": self._name, "ordered": True, "deletes": deletes})
            self._check_default_collation(collation)
            return self._delete_result(self._write(run))

    async def delete_many(
        self,
        filter: Filter,
        *,
        collation: CollationArg = None,
        hint: Hint = None,
        session: object = None,
        **extra: Any,
    ) -> DeleteResult:
        check_keywords("delete_many", extra)
        self._check_write_collation(collation)

        def run() -> int:
            self._check_hint(hint)
            return self.delete_matching(filter)

        async with self._round_trip("delete_many", session, write=self._attempts("delete_many")):
            deletes = [{"q": filter, "limit": 0}]
            self._check_command({"delete": self._name, "ordered": True, "deletes": deletes})
            self._check_default_collation(collation)
            return self._delete_result(self._write(run))

    def _delete_result(self, deleted: int | None) -> DeleteResult:
        if deleted is None:
            # pymongo builds the result from the reply it fakes for w=0 (command_runner.py).
            return DeleteResult({"ok": 1}, acknowledged=False)
        return DeleteResult({"n": deleted, "ok": 1.0}, acknowledged=True)


def _count_command(
    name: str, filter_: Filter, *, skip: int | None, limit: int | None, hint: Hint
) -> dict[str, Any]:
    """The ``aggregate`` command pymongo's ``count_documents`` sends (pymongo/asynchronous/collection.py)."""
    pipeline: list[dict[str, Any]] = [{"$match": dict(filter_)}]
    if skip is not None:
        pipeline.append({"$skip": skip})
    if limit is not None:
        pipeline.append({"$limit": limit})
    pipeline.append({"$group": {"_id": 1, "n": {"$sum": 1}}})
    command: dict[str, Any] = {"aggregate": name, "pipeline": pipeline, "cursor": {}}
    if hint is not None:
        command["hint"] = hint if isinstance(hint, str) else dict(normalize_sort(hint))
    return command
