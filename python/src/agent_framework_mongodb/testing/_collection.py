"""``InMemoryCollection``: the awaited read and write API of pymongo's ``AsyncCollection``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bson.objectid import ObjectId
from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError, DuplicateKeyError
from pymongo.results import DeleteResult, InsertManyResult, InsertOneResult, UpdateResult

from ._codec import as_mapping, check_collation, to_storage_for_insert
from ._collection_base import CollationArg, CollectionBase, Filter, Hint, Update, projection_spec, unsupported
from ._cursor import InMemoryCursor, SortSpec, normalize_sort
from ._errors import command_error


class InMemoryCollection(CollectionBase):
    """A collection of an :class:`InMemoryDatabase`; duck-types ``AsyncCollection``."""

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
        **_ignored: Any,
    ) -> InMemoryCursor:
        """A cursor (not awaited), as ``AsyncCollection.find`` returns."""
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
        await self._enter("find")
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
        **_ignored: Any,
    ) -> dict[str, Any] | None:
        check_collation(collation)
        mapping = as_mapping(filter)
        query = mapping if mapping is not None or filter is None else {"_id": filter}  # a bare _id
        await self._enter("find_one", session)
        self._check_hint(hint)
        found = self._query(
            query, sort=normalize_sort(sort), skip=skip, limit=1, projection=projection_spec(projection)
        )
        return self._out(found[0]) if found else None

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
        await self._enter("count_documents", session)
        self._check_hint(hint)
        count = len(self._query(filter))
        if skip is not None:
            if skip < 0:
                raise command_error(15956, "Argument to $skip cannot be negative")
            count = max(count - skip, 0)
        if limit is not None:
            if limit <= 0:
                raise command_error(15958, "the limit must be positive")
            count = min(count, limit)
        return count

    async def estimated_document_count(self, **_ignored: Any) -> int:
        await self._enter("estimated_document_count")
        return len(self._query(None))

    # -- writes -----------------------------------------------------------------------------------
    async def insert_one(
        self, document: dict[str, Any], *, session: object = None, **_ignored: Any
    ) -> InsertOneResult:
        if as_mapping(document) is None:
            raise TypeError("document must be an instance of dict, bson.son.SON, or another MutableMapping")
        if "_id" not in document:
            document["_id"] = ObjectId()  # pymongo sets the _id on the caller's document
        await self._enter("insert_one", session)
        self._insert_stored(to_storage_for_insert(document))
        return InsertOneResult(document["_id"], acknowledged=True)

    async def insert_many(
        self,
        documents: Sequence[dict[str, Any]],
        ordered: bool = True,
        *,
        session: object = None,
        **_ignored: Any,
    ) -> InsertManyResult:
        if isinstance(documents, Mapping) or not documents:
            raise TypeError("documents must be a non-empty list")
        for document in documents:
            if "_id" not in document:
                document["_id"] = ObjectId()
        await self._enter("insert_many", session)
        stored = [to_storage_for_insert(document) for document in documents]
        errors: list[dict[str, Any]] = []
        inserted = 0
        for index, item in enumerate(stored):
            error = self._try_insert(item, index)
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
        return InsertManyResult([document["_id"] for document in documents], acknowledged=True)

    def _try_insert(self, stored: dict[str, Any], index: int) -> DuplicateKeyError | None:
        try:
            self._insert_stored(stored, index=index)
        except DuplicateKeyError as exc:
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
        **_ignored: Any,
    ) -> UpdateResult:
        check_collation(collation)
        unsupported(array_filters=array_filters, let=let)
        await self._enter("update_one", session)
        self._check_hint(hint)
        pre, post, upserted_id, modified = self._update(
            filter, update, upsert=upsert, sort=sort, command=False
        )
        raw: dict[str, Any] = {
            "n": 0 if post is None else 1,
            "nModified": int(modified and pre is not None),
            "ok": 1.0,
            "updatedExisting": pre is not None,
        }
        if upserted_id is not None:
            raw["upserted"] = upserted_id
        return UpdateResult(raw, acknowledged=True)

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
        check_collation(collation)
        unsupported(array_filters=array_filters, let=let)
        await self._enter("find_one_and_update", session)
        self._check_hint(hint)
        pre, post, _, _ = self._update(filter, update, upsert=upsert, sort=sort, command=True)
        chosen = post if return_document == ReturnDocument.AFTER else pre
        return self._project(chosen, projection)

    async def delete_one(
        self,
        filter: Filter,
        *,
        collation: CollationArg = None,
        hint: Hint = None,
        session: object = None,
        **_ignored: Any,
    ) -> DeleteResult:
        check_collation(collation)
        await self._enter("delete_one", session)
        self._check_hint(hint)
        found = self._query(filter, limit=1)
        for document in found:
            self._delete_stored(document)
        return DeleteResult({"n": len(found), "ok": 1.0}, acknowledged=True)

    async def delete_many(
        self,
        filter: Filter,
        *,
        collation: CollationArg = None,
        hint: Hint = None,
        session: object = None,
        **_ignored: Any,
    ) -> DeleteResult:
        check_collation(collation)
        await self._enter("delete_many", session)
        self._check_hint(hint)
        return DeleteResult({"n": self.delete_matching(filter), "ok": 1.0}, acknowledged=True)
