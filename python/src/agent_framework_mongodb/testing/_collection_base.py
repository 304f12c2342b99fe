"""A view of one collection: settings, storage access, the atomic update core, indexes and lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from bson.codec_options import CodecOptions
from pymongo import IndexModel
from pymongo.collation import Collation
from pymongo.errors import ConfigurationError, DuplicateKeyError, OperationFailure
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from ._codec import MAX_BSON_SIZE, as_mapping, bson_size, same_bson, to_client
from ._codec import wire_value as wire
from ._collation import check_collation, collation_document
from ._cursor import InMemoryCommandCursor, normalize_sort
from ._errors import command_error, duplicate_command_error, duplicate_write_error, write_error
from ._faults import HeldOperation
from ._index_builds import abort_at_deadline, build_seconds, server_limit
from ._indexes import matches
from ._keywords import check_keywords
from ._options import ReadPreferenceMode, SettingsCarrier
from ._retries import WriteAttempts, write_attempts
from ._scheduling import pass_turns
from ._simple_updates import simple_post_image
from ._sorting import answerable, holds, sort_documents
from ._timeouts import current_deadline
from ._updates import compute_post_image, normalize_filter, validate_update
from ._upsert_race import server_retries

if TYPE_CHECKING:
    from ._client import InMemoryDatabase

Filter = Mapping[str, Any]
Update = Mapping[str, Any] | Sequence[Mapping[str, Any]]
CollationArg = Collation | Mapping[str, Any] | None
Hint = str | Sequence[tuple[str, int]] | Mapping[str, int] | None
_T = TypeVar("_T")


def projection_spec(projection: Mapping[str, Any] | Sequence[str] | None) -> dict[str, Any] | None:
    if projection is None:
        return None
    if isinstance(projection, Mapping):
        return cast("dict[str, Any]", wire(dict(projection)))
    return dict.fromkeys(projection, 1)


def unsupported(**options: Any) -> None:
    for option, value in options.items():
        if value is not None:
            raise NotImplementedError(f"InMemoryCollection does not simulate {option!r} (DIVERGENCES.md)")


class CollectionBase(SettingsCarrier):
    """A view of one collection: its own settings over the namespace's shared state."""

    def __init__(
        self,
        database: InMemoryDatabase,
        name: str,
        *,
        codec_options: CodecOptions[Any] | None = None,
        read_preference: ReadPreferenceMode | None = None,
        write_concern: WriteConcern | None = None,
        read_concern: ReadConcern | None = None,
    ) -> None:
        self._database = database
        self._name = name
        self._settings = database.settings.derive(codec_options, read_preference, write_concern, read_concern)
        self._state = database.client.collection_state(database.name, name)
        self._log = database.client.journal.namespace(database.name, name)  # file-backed mode's records

    @property
    def name(self) -> str:
        return self._name

    @property
    def full_name(self) -> str:
        return f"{self._database.name}.{self._name}"

    @property
    def database(self) -> InMemoryDatabase:
        return self._database

    def __repr__(self) -> str:
        return f"InMemoryCollection({self._database!r}, {self._name!r})"

    def __eq__(self, other: object) -> bool:
        """Views of the same collection are equal, as pymongo's collection objects are."""
        if isinstance(other, CollectionBase):
            return self._database == other.database and self._name == other.name
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._database, self._name))

    def fail_next(self, operation: str, error: BaseException, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``operation`` on this collection raise ``error``."""
        self._database.client.faults.fail_next(operation, error, collection=self.full_name, times=times)

    def hold(self, operation: str) -> HeldOperation:
        """Pause the next call of ``operation`` on this collection until the hold is released."""
        return self._database.client.faults.hold(operation, collection=self.full_name)

    # -- write concern ----------------------------------------------------------------------------
    @property
    def _acknowledged(self) -> bool:
        return self._settings.write_concern.acknowledged

    def _check_write_collation(self, collation: CollationArg) -> None:
        """As :func:`check_collation`, but first refuse any collation on an unacknowledged write.

        pymongo raises ``ConfigurationError("Collation is unsupported for unacknowledged
        writes.")`` before sending such an update, delete or findAndModify
        (``AsyncCollection._update``/``_delete``, ``AsyncConnection.command``).
        """
        if collation is not None and not self._acknowledged:
            collation_document(collation)  # pymongo checks the collation's type first
            raise ConfigurationError("Collation is unsupported for unacknowledged writes.")
        check_collation(collation)

    def _write(self, write: Callable[[], _T]) -> _T | None:
        """Run a write; unacknowledged (``w=0``), a failure the server reports is lost.

        With ``w=0`` pymongo sends the write and reads no reply, so the caller never learns of a
        duplicate key or a bad update; errors raised client-side (a document that BSON cannot
        encode, an injected network fault) still reach it.
        """
        with self._database.client.journal.batch():  # durable in the file before returning
            if self._acknowledged:
                return write()
            with contextlib.suppress(OperationFailure):
                write()
            return None

    def _check_default_collation(self, collation: CollationArg) -> None:
        """Refuse a query that would use the collection's non-simple default collation.

        Operations on a collection with a default collation use it unless they give another
        (https://www.mongodb.com/docs/manual/reference/method/db.createCollection/); the engine
        compares binary only, so it asks for the simple collation explicitly instead.
        """
        default = self._state.catalog.default_collation
        if default is not None and collation is None:
            raise NotImplementedError(
                f"{self.full_name} has the default collation {default!r} and InMemoryMongoClient"
                " compares strings binary only; pass collation={'locale': 'simple'} to query it"
                " (agent_framework_mongodb/testing/DIVERGENCES.md)."
            )

    # -- plumbing ---------------------------------------------------------------------------------
    @property
    def _backend(self) -> Any:
        return self._database.backend[self._name]

    @contextlib.asynccontextmanager
    async def _round_trip(
        self, operation: str, session: object = None, *, write: WriteAttempts | None = None
    ) -> AsyncGenerator[None, None]:
        """One operation sent to the server; the body runs there, atomically unless it awaits.

        ``write``: how pymongo sends it, if it is a write (``_attempts``), for network faults.
        """
        await asyncio.sleep(0)  # every operation lets other tasks run before it executes atomically
        unsupported(session=session)
        self._database.client.check_open()
        async with self._database.client.round_trip(operation, self.full_name, write):
            yield

    def _attempts(self, operation: str, *, multi: bool = False) -> WriteAttempts:
        """pymongo's retry rule for this write on this view (``_retries.py``)."""
        return write_attempts(
            operation,
            acknowledged=self._acknowledged,
            retry_writes=self._database.client.retry_writes,
            multi=multi,
        )

    def network_error_next(
        self, operation: str, *, applied: bool = False, timeout: bool = False, times: int = 1
    ) -> None:
        """Make the next ``times`` attempts of the write ``operation`` on this collection lose
        their connection (``FaultPlan.network_error_next``)."""
        self._database.client.faults.network_error_next(
            operation, applied=applied, timeout=timeout, collection=self.full_name, times=times
        )

    def _server_filter(self, filter_: Filter | None) -> dict[str, Any]:
        """``filter_`` as the server reads it: through BSON, its ``$expr`` seeing ``$$NOW``."""
        return normalize_filter(wire(dict(filter_ or {})), self._database.client.server_now())

    def _out(self, document: Mapping[str, Any]) -> dict[str, Any]:
        return to_client(document, self._settings.codec_options)

    def _query(
        self,
        filter_: Filter | None,
        *,
        sort: list[tuple[str, int]] | None = None,
        skip: int = 0,
        limit: int = 0,
        projection: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Copies of the stored documents matching ``filter_``, as mongomock_ng's ``find`` returns."""
        server_filter = self._server_filter(filter_)
        if not answerable(sort, projection):
            return self._scanned(server_filter, sort=sort, skip=skip, limit=limit, projection=projection)
        found = self._walked(server_filter, sort, skip + abs(limit)) if sort and limit else None
        if found is None:
            candidates = self._candidates(server_filter)
            if candidates is None:
                return self._scanned(server_filter, sort=sort, skip=skip, limit=limit, projection=projection)
            found = sort_documents([d for d in candidates if matches(server_filter, d)], sort or [])
        found = found[skip:][: abs(limit)] if limit else found[skip:]
        if projection is None:
            return [copy.deepcopy(document) for document in found]
        return self._projected(found, server_filter, projection)

    def _scanned(
        self,
        server_filter: dict[str, Any],
        *,
        sort: list[tuple[str, int]] | None,
        skip: int,
        limit: int,
        projection: dict[str, Any] | None,
    ) -> list[dict[str, Any]]:
        """mongomock_ng's own ``find``: every stored document matched against the filter."""
        cursor = self._backend.find(server_filter, projection, sort=sort or None, skip=skip, limit=limit)
        return list(cursor)

    def _walked(
        self, server_filter: Mapping[str, Any], sort: list[tuple[str, int]], wanted: int
    ) -> list[dict[str, Any]] | None:
        """The first ``wanted`` matches in sort order, by walking an index's values of the sort
        field in order; None when no index gives that order or a document breaks it."""
        walk = self._state.lookup.ordered(self._state.catalog.specs(), server_filter, sort)
        if walk is None:
            return None
        field = sort[0][0]
        found: list[dict[str, Any]] = []
        for key, rank, value in walk:
            document = self._state.store.get(key)
            if not holds(document, field, rank, value):
                return None
            if matches(server_filter, document):
                found.append(document)
                if len(found) == wanted:
                    break
        if not found:
            matches(server_filter, {})  # as mongomock_ng does on an empty collection: a bad filter raises
        return found

    def _candidates(self, server_filter: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The stored documents (not copies) an index lookup offers for ``server_filter``, in
        natural order; None when the filter must scan the collection."""
        keys = self._state.lookup.candidates(self._state.catalog.specs(), server_filter)
        if keys is None:
            return None
        if not keys:
            matches(server_filter, {})  # as mongomock_ng does on an empty collection: a bad filter raises
        return [self._state.store.get(key) for key in keys]

    def _matching(self, filter_: Filter | None) -> list[dict[str, Any]]:
        """The stored documents themselves matching ``filter_``, in natural order (for reading only)."""
        server_filter = self._server_filter(filter_)
        candidates = self._candidates(server_filter)
        if candidates is None:
            candidates = list(self._state.store)
            if not candidates:
                matches(server_filter, {})
        return [document for document in candidates if matches(server_filter, document)]

    def _projected(
        self, documents: list[dict[str, Any]], server_filter: Mapping[str, Any], projection: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """mongomock_ng's projection of ``documents`` (its positional ``$`` reads the filter)."""
        scratch = self._database.client.scratch
        scratch.delete_many({})
        try:
            if documents:
                scratch.insert_many([copy.deepcopy(document) for document in documents])
            return list(scratch.find(server_filter, projection))
        finally:
            scratch.delete_many({})

    def _check_hint(self, hint: Hint) -> None:
        if hint is None:
            return
        spec = hint if isinstance(hint, str) else dict(normalize_sort(hint))
        if self._state.catalog.resolve_hint(spec) is None:
            raise command_error(
                2,
                "error processing query: planner returned error :: caused by :: hint provided does"
                " not correspond to an existing index",
            )

    def _insert_stored(self, stored: dict[str, Any], *, index: int = 0) -> None:
        specs = self._state.catalog.unique_specs()
        spec = self._state.unique.collision(specs, None, stored)
        if spec is not None:
            raise duplicate_write_error(self._state.catalog.duplicate_key(spec, stored), index=index)
        self._state.store.insert(stored)
        self._log.put(stored)
        self._state.record(None, stored)
        self._state.created = True

    def _project(self, document: dict[str, Any] | None, projection: Any) -> dict[str, Any] | None:
        if document is None:
            return None
        if projection is not None:
            scratch = self._database.client.scratch
            scratch.insert_one(dict(document))
            document = scratch.find_one({}, projection_spec(projection))
            scratch.delete_many({})
        return None if document is None else self._out(document)

    async def _upsert_missed(self, filter_: Filter, sort: Any, *, upsert: bool) -> bool:
        """With scheduling, whether this upsert's query found nothing, after the server's pause
        between that query and its insert, in which other operations run (DIVERGENCES.md entry 2)."""
        if not upsert or not self._upsert_would_insert(filter_, sort):
            return False
        await self._pause_before_insert()
        return True

    def _upsert_would_insert(self, filter_: Filter, sort: Any) -> bool:
        """With scheduling, whether an upsert's query finds nothing now, so that it will insert
        after a pause; always False without scheduling, where upserts run atomically."""
        if self._database.client.scheduler.scheduling is None:
            return False
        return not self._query(wire(dict(filter_)), sort=normalize_sort(sort), limit=1)

    async def _pause_before_insert(self) -> None:
        """The server's window between an upsert's query and its insert, drawn as a request's wait."""
        await pass_turns(self._database.client.scheduler.draw().request)

    def _upsert_or_update(
        self, filter_: Filter, update: Update, *, upsert: bool, sort: Any, command: bool, missed: bool
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, Any, bool]:
        """:meth:`_update`, inserting when the query ``missed``; a lost insert race raises E11000
        unless the server would retry it as an update (``_upsert_race.py``)."""
        try:
            return self._update(filter_, update, upsert=upsert, sort=sort, command=command, missed=missed)
        except DuplicateKeyError as error:
            pattern = as_mapping((error.details or {}).get("keyPattern")) or {}
            if not missed or not server_retries(wire(dict(filter_)), pattern):
                raise
        return self._update(filter_, update, upsert=upsert, sort=sort, command=command)

    def _update(
        self, filter_: Filter, update: Update, *, upsert: bool, sort: Any, command: bool, missed: bool = False
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, Any, bool]:
        """Run one single-document update atomically: (pre-image, post-image, upserted id, modified).

        ``missed``: the server's query found nothing earlier, so it inserts whatever matches now.
        """
        validate_update(update)
        server_filter = wire(dict(filter_))
        found = [] if missed else self._query(server_filter, sort=normalize_sort(sort), limit=1)
        pre = found[0] if found else None
        if pre is None and not upsert:
            return None, None, None, False
        post, changed = self._put_post_image(pre, update, server_filter, command=command)
        return pre, post, post["_id"] if pre is None else None, changed

    def _put_post_image(
        self, pre: dict[str, Any] | None, update: Update, server_filter: Filter, *, command: bool
    ) -> tuple[dict[str, Any], bool]:
        """Apply ``update`` to ``pre`` (None: insert the upsert's new document), check the result as
        the server does and store it: (post-image, whether the stored document changed)."""
        client = self._database.client
        sent = wire(update)
        # The storage's chunk touches skip mongomock_ng (``_simple_updates``): same post-image.
        post = simple_post_image(pre, sent, server_filter)
        if post is None:
            post = compute_post_image(client.scratch, pre, sent, server_filter, now=client.server_now())
        if bson_size(post) > MAX_BSON_SIZE:
            # UpsertStage and UpdateStage refuse the new document with their own codes
            # (src/mongo/db/exec/upsert_stage.cpp, update_stage.cpp; jstests/core/max_doc_size.js).
            code, message = (
                (17420, f"Document to upsert is larger than {MAX_BSON_SIZE}")
                if pre is None
                else (17419, f"Resulting document after update is larger than {MAX_BSON_SIZE}")
            )
            raise command_error(code, message) if command else write_error(code, message)
        specs = self._state.catalog.unique_specs()
        spec = self._state.unique.collision(specs, pre, post)
        if spec is not None:
            dup = self._state.catalog.duplicate_key(spec, post)
            raise duplicate_command_error(dup) if command else duplicate_write_error(dup)
        if pre is None:
            self._state.store.insert(dict(post))
            self._log.put(post)
            self._state.record(None, post)
            self._state.created = True
            return post, True
        changed = not same_bson(pre, post)
        if changed:
            stored = dict(post)
            self._state.store.replace(stored)  # in place: a document keeps its natural position
            self._log.put(stored)
            self._state.record(pre, stored)
        return post, changed

    def delete_matching(self, filter_: Filter) -> int:
        """Synchronously delete every stored document matching ``filter_`` (used by the TTL helper).

        One pass: the matches are found once, then each is removed by its ``_id``.
        """
        found = self._matching(filter_)
        if len(found) > 1:
            self._state.lookup.forget_orders()
        for document in found:
            self._delete_stored(document)
        return len(found)

    def _delete_stored(self, document: Mapping[str, Any]) -> None:
        self._state.store.delete(document)
        self._log.delete(document["_id"])
        self._state.record(document, None)

    def stored_documents(self) -> list[dict[str, Any]]:
        """A copy of the stored documents, datetimes as naive UTC as the server keeps them."""
        return [copy.deepcopy(document) for document in self._state.store]

    def restore_documents(self, documents: Sequence[dict[str, Any]]) -> None:
        """Store ``documents`` as they are, in this order, without checks (the file-backed replay).

        Nothing is recorded; the caller restores the catalog and existence itself.
        """
        for document in documents:
            self._state.store.insert(document)
        self._state.indexes_changed()

    def index_specs(self) -> list[dict[str, Any]]:
        """The index definitions (without ``v``), ``_id_`` first; empty before the collection exists."""
        return self._state.catalog.specs() if self._state.created else []

    # -- indexes and lifecycle ----------------------------------------------------------------------
    async def create_index(
        self, keys: Any, *, session: object = None, comment: Any = None, **kwargs: Any
    ) -> str:
        max_time_ms = kwargs.pop("maxTimeMS", None)
        models = [IndexModel(keys, **kwargs)]
        return (await self._create_indexes(models, "create_index", session, max_time_ms))[0]

    async def create_indexes(
        self, indexes: Sequence[IndexModel], *, session: object = None, comment: Any = None, **options: Any
    ) -> list[str]:
        return await self._create_indexes(indexes, "create_indexes", session, options.get("maxTimeMS"))

    async def _create_indexes(
        self, indexes: Sequence[IndexModel], operation: str, session: object, max_time_ms: Any
    ) -> list[str]:
        for model in indexes:
            given = cast("object", model)
            if not isinstance(given, IndexModel):
                raise TypeError(f"{model!r} is not an instance of pymongo.operations.IndexModel")
        client = self._database.client
        async with self._round_trip(operation, session):
            deadline = current_deadline(client.timeout)
            builds = self._indexes_to_build(indexes)
            seconds = build_seconds(len(self._state.store), client.index_build_rate) if builds else 0.0
            limit = server_limit(deadline, max_time_ms)
            if limit is not None and seconds > limit:
                # The build outlives the command's maxTimeMS: the server aborts it (_index_builds.py).
                raise await abort_at_deadline(limit, deadline)
            return self._build_indexes(indexes)

    def _indexes_to_build(self, indexes: Sequence[IndexModel]) -> int:
        """How many of ``indexes`` are new, so that the server scans the collection for them."""
        return sum(1 for model in indexes if self._state.catalog.prepare(model.document) is not None)

    def _build_indexes(self, indexes: Sequence[IndexModel]) -> list[str]:
        names: list[str] = []
        for model in indexes:
            spec = self._state.catalog.prepare(model.document)
            if spec is not None:
                dup = self._state.catalog.first_duplicate(spec, self._state.store)
                if dup is not None:
                    raise duplicate_command_error(dup, prefix="Index build failed: ")
                self._state.catalog.add(spec)
                self._log.add_index(spec)
                self._state.indexes_changed()
            names.append(str(model.document["name"]))
        self._state.created = True
        self._log.exists()
        return names

    async def list_indexes(self, *, session: object = None, **extra: Any) -> InMemoryCommandCursor:
        check_keywords("list_indexes", extra)
        async with self._round_trip("list_indexes", session):
            return InMemoryCommandCursor(self._state.catalog.listing() if self._state.created else [])

    async def index_information(self, *, session: object = None, **extra: Any) -> dict[str, Any]:
        check_keywords("index_information", extra)
        async with self._round_trip("index_information", session):
            listing = self._state.catalog.listing() if self._state.created else []
        return {
            spec["name"]: {**{k: v for k, v in spec.items() if k != "name"}, "key": list(spec["key"].items())}
            for spec in listing
        }

    async def drop_index(self, index_or_name: Any, *, session: object = None, **_ignored: Any) -> None:
        name = index_or_name
        if not isinstance(name, str):
            name = "_".join(f"{field}_{direction}" for field, direction in normalize_sort(index_or_name))
        if name == "*":
            raise OperationFailure("use drop_indexes() to drop all indexes")
        async with self._round_trip("drop_index", session):
            if not self._state.created:
                raise command_error(26, f"ns not found {self.full_name}")
            self._state.catalog.drop(name)
            self._log.drop_index(name)
            self._state.indexes_changed()

    async def drop_indexes(self, *, session: object = None, **_ignored: Any) -> None:
        async with self._round_trip("drop_indexes", session):
            self._state.catalog.drop_all()
            self._log.drop_indexes()
            self._state.indexes_changed()

    async def drop(self, *, session: object = None, **extra: Any) -> None:
        check_keywords("drop", extra)
        async with self._round_trip("drop", session):
            self.reset()

    def reset(self) -> None:
        """Forget documents and indexes, as dropping the collection does."""
        self._state.store.drop()
        self._state.reset()
        self._log.drop()
