"""``MongoDBCheckpointStorage``: Agent Framework workflow checkpoints kept in MongoDB.

Each public method is a short orchestration of the steps below it: validate and encode without
I/O, then as few round trips as the operation allows (a save costs two in steady state, an
identical retry included: the sequence allocation and an insert that reports an existing
checkpoint's identity, and a third for a chunked checkpoint's leaves; with ``keep_last``, a
pruning save costs two more, and two more again when it collects chunks; a load, latest, page,
summary page, run page (its runs' checkpoints counted in the same request) or delete costs one, and
a second for chunked checkpoints' leaves). Every operation runs under one client-side deadline
(``operation_timeout``), all its round trips included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Generator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Final

from agent_framework import CheckpointID, CheckpointStorage, WorkflowCheckpoint
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from .._telemetry import (
    OperationRecord,
    Target,
    completion_log,
    count_payload_bytes,
    count_round_trip,
    log_prune_failure,
    target_of,
)
from ..errors import (
    DRIVER_ERRORS,
    MongoDBCheckpointNotFoundError,
    MongoDBConcurrencyError,
    MongoDBConfigurationError,
    MongoDBIntegrationError,
    MongoDBMappingError,
    translate_driver_error,
    translated_driver_errors,
)
from .chunk_memory import ChunkMemory, ChunkWrites
from .chunk_store import (
    check_chunk_sizes,
    collect_unreferenced_chunks,
    delete_run_chunks,
    write_chunks,
)
from .codec import (
    CANONICAL_HASH_VERSION,
    CHUNKED_PAYLOAD_FORMAT,
    CheckpointCodec,
    ChunkSettings,
    EncodedCheckpoint,
)
from .codec.chunks import Chunker
from .codec.signing import PayloadSigner
from .codec.transplant import RootHeading
from .concerns import bind_collection, majority_acknowledged
from .concurrency import concurrently, together
from .connection import (
    DEFAULT_COLLECTION_NAME,
    DEFAULT_DATABASE_NAME,
    DEFAULT_WAIT_TIMEOUT,
    close_client,
    resolve_collection,
    validate_wait_timeout,
    wait_for_server,
)
from .deadlines import operation_deadline
from .documents import (
    ENVELOPE_PROJECTION,
    PreparedCheckpoint,
    SignaturePolicy,
    StoredPayload,
    prepare_checkpoint,
    stored_payload,
    utc_now,
)
from .driver import CheckpointClient, CheckpointCollection, Document
from .forking import ForkAccess, ForkKeep, MongoDBForkResult, fork_run
from .indexes import CHECKPOINT_INDEXES, SIMPLE_COLLATION
from .ledger import LedgerCheck, read_ledger, read_with_ledger, record_deletion
from .options import MongoDBCheckpointStorageOptions, validate_identifier
from .paging import PagePosition, decode_cursor, encode_cursor, resolve_limit
from .provisioning import (
    build_timeout,
    check_indexes,
    create_indexes,
    looked_at_unique_indexes,
    report_missing_unique_indexes,
)
from .queries import (
    ASCENDING_SEQUENCE,
    CHECKPOINT_SUMMARY_PROJECTION,
    DESCENDING_SEQUENCE,
    ID_PROJECTION,
    IDEMPOTENCY_PROJECTION,
    PAYLOAD_PROJECTION,
    SEQUENCE_PROJECTION,
    checkpoint_filter,
    chunks_cleared_update,
    counter_filter,
    insert_if_absent,
    page_filter,
    run_filter,
    unexpired,
)
from .reading import CheckpointDecoder
from .results import (
    MongoDBCheckpointClearResult,
    MongoDBCheckpointPage,
    MongoDBCheckpointSummaryPage,
    MongoDBRunPage,
)
from .retention import is_prune_due, prune_run
from .runs import listing_of, read_run_page
from .scope import RunScope
from .sequences import Allocation, RunActivity, SequenceAllocator, sequence_of
from .strict import escalated_save_failures
from .summaries import checkpoint_id_of, checkpoint_summary_of, page_position_of

__all__ = ["MongoDBCheckpointStorage"]

_MAX_SAVE_ATTEMPTS: Final = 4
"""An insert that collides on the sequence index recovers and retries; this bounds the loop."""


class _Default:
    """The marker of "the options' operation_timeout" (``None`` means no deadline)."""


_DEFAULT: Final = _Default()


_ID_ONLY: Final = {"_id": 1}
_LATEST_READS: Final = 2
"""``get_latest`` reads again once when the latest checkpoint was removed while it was read."""


class MongoDBCheckpointStorage(CheckpointStorage):
    """Checkpoint storage for one workflow run, kept in a MongoDB collection.

    Construction does no I/O and never creates indexes. Give exactly one source of a
    collection; with none, ``MONGODB_URI`` from the environment is used.

    Args:
        collection: A collection to use as is (pymongo ``AsyncCollection`` or compatible).
        options: The run this storage is bound to, and its paging and retention settings.
        mongo_client: A client (pymongo ``AsyncMongoClient`` or compatible) to take the
            collection from, by ``database_name`` and ``collection_name``.
        connection_string: A MongoDB URI; the storage builds and owns the client.
        database_name: The database, with ``mongo_client`` or a connection string.
        collection_name: The collection, with ``mongo_client`` or a connection string.

    Raises:
        MongoDBConfigurationError: The options are not options, the sources are ambiguous or
            missing, a name or URI is invalid, the write concern is unacknowledged (``w=0``), or
            an ``allowed_checkpoint_types`` entry leads to no class (its module is imported to
            find out: listing a class is consent to import it).

    The storage reads from the primary whatever the client's read preference, so every read
    sees every acknowledged write. Injected clients and collections stay the caller's and are
    never closed. A client built from a connection string belongs to the storage: ``close()``
    or leaving ``async with`` closes it exactly once.
    """

    _collection: CheckpointCollection
    _target: Target
    _options: MongoDBCheckpointStorageOptions
    _scope: RunScope
    _codec: CheckpointCodec
    _signer: PayloadSigner | None
    _policy: SignaturePolicy
    _decoder: CheckpointDecoder
    _chunks: ChunkMemory
    _chunk_context: bytes
    _chunker: Chunker
    _owned_client: CheckpointClient | None
    _lifetime: _ClientLifetime

    def __init__(
        self,
        collection: CheckpointCollection | None = None,
        *,
        options: MongoDBCheckpointStorageOptions,
        mongo_client: CheckpointClient | None = None,
        connection_string: str | None = None,
        database_name: str = DEFAULT_DATABASE_NAME,
        collection_name: str = DEFAULT_COLLECTION_NAME,
    ) -> None:
        _require_options(options)
        source = resolve_collection(
            collection,
            mongo_client=mongo_client,
            connection_string=connection_string,
            database_name=database_name,
            collection_name=collection_name,
        )
        codec = CheckpointCodec(options.allowed_checkpoint_types)
        codec.check_allowed_types()
        collection = bind_collection(source.collection)
        self._bind(collection, options, codec, owned_client=source.owned_client, lifetime=_ClientLifetime())

    @classmethod
    async def connect(
        cls,
        collection: CheckpointCollection | None = None,
        *,
        options: MongoDBCheckpointStorageOptions,
        mongo_client: CheckpointClient | None = None,
        connection_string: str | None = None,
        database_name: str = DEFAULT_DATABASE_NAME,
        collection_name: str = DEFAULT_COLLECTION_NAME,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        validate_indexes: bool = False,
    ) -> MongoDBCheckpointStorage:
        """Build a storage, then wait until the server answers a ping.

        Takes the constructor's arguments plus ``wait_timeout``, the seconds to keep retrying
        (with backoff) while the server is unreachable, so a worker started beside MongoDB
        waits for it instead of failing. Each ping's server selection is bounded by what
        remains of ``wait_timeout`` (``pymongo.timeout``), so the call returns close to it.
        With ``validate_indexes``, it then checks the collection's indexes
        (:meth:`validate_indexes`), so a worker refuses to start on a collection nobody ran
        ``ensure_indexes()`` on.

        Raises:
            MongoDBTimeoutError: The server did not answer within ``wait_timeout``. The
                message gives the reason as a fixed phrase (connection refused, host name not
                resolved, TLS handshake failed, timed out (server did not answer), unknown),
                never the driver's text; ``__cause__`` is the last driver error.
            MongoDBIntegrationError: A failure a retry will not clear, such as refused
                credentials (``authentication failed``); raised at once.
            MongoDBIndexMissingError: With ``validate_indexes``, an index is missing (and
                ``MongoDBIndexMismatchError`` when one differs), with the fix in the message.

        A client the storage built is closed again if waiting or the check fails.
        """
        timeout = validate_wait_timeout(wait_timeout)
        _require_bool("validate_indexes", validate_indexes)
        storage = cls(
            collection,
            options=options,
            mongo_client=mongo_client,
            connection_string=connection_string,
            database_name=database_name,
            collection_name=collection_name,
        )
        try:
            await wait_for_server(storage._collection.database, timeout=timeout)
            if validate_indexes:
                await storage.validate_indexes()
        except BaseException:
            await storage.close()
            raise
        return storage

    def for_session(self, session_id: str) -> MongoDBCheckpointStorage:
        """Return a storage for another run of the same workflow, sharing this collection.

        The new storage never owns the client: closing it leaves this one working, and it
        stops working once the owner closes. Making one does no I/O.
        """
        return self._sibling(self._options.with_session(session_id))

    def for_workflow(self, workflow_name: str, session_id: str) -> MongoDBCheckpointStorage:
        """Return a storage for a run of another workflow of the same tenant and application
        (as ``list_runs`` names it), sharing this collection; otherwise like ``for_session``."""
        return self._sibling(self._options.with_workflow(workflow_name, session_id))

    @property
    def options(self) -> MongoDBCheckpointStorageOptions:
        """The run this storage is bound to, and its settings."""
        return self._options

    async def close(self) -> None:
        """Close the client if this storage built it; injected clients are left open.

        Safe to call any number of times: the owned client is closed exactly once, even if
        that close raises. Once it is, this storage and those ``for_session`` made from it
        refuse every operation with ``MongoDBConfigurationError``. Returns within
        ``operation_timeout`` (plus a second) whatever the server does: a close the driver has not
        finished by then is left to finish on its own, and logged at WARNING.
        """
        client, self._owned_client = self._owned_client, None
        if client is not None:
            self._lifetime.closed = True
            await close_client(client, timeout=self._options.operation_timeout)

    async def __aenter__(self) -> MongoDBCheckpointStorage:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    # -- CheckpointStorage protocol ------------------------------------------------------

    async def save(self, checkpoint: WorkflowCheckpoint) -> CheckpointID:
        """Store ``checkpoint`` in the bound run and return its id.

        Saving the same checkpoint again returns the same id and stores nothing new. With
        ``keep_last``, a save whose sequence is due prunes the run's older checkpoints afterwards;
        a failed prune is logged at WARNING and never raised, as the checkpoint is stored.

        Raises:
            MongoDBConfigurationError: ``checkpoint`` is not a ``WorkflowCheckpoint`` of the
                bound workflow, or its id is not a valid identifier.
            MongoDBSerializationError: The checkpoint cannot be stored losslessly, or it is
                larger than ``max_checkpoint_bytes``. Nothing was written.
            MongoDBConcurrencyError: The id is already stored with different content.
            MongoDBTimeoutError: The save did not complete within ``operation_timeout``; saving
                the same checkpoint again is safe.
            MongoDBStrictSaveFailure: With ``strict_saves`` on, instead of any of the above (which
                becomes its ``error`` and ``__cause__``); a ``BaseException``, so Agent Framework's
                ``except Exception`` around saves lets it stop the run.
        """
        return await self._save(checkpoint)

    async def _save_copy(self, checkpoint: WorkflowCheckpoint, payload_hash: str) -> CheckpointID:
        """:meth:`save`, for ``fork_run``: refuse, before any write, a checkpoint whose identity hash
        is not ``payload_hash`` (the one its source document recorded when the fork was planned).

        Raises:
            MongoDBConcurrencyError: The checkpoint is not the one planned; nothing was written.
        """
        return await self._save(checkpoint, expected_hash=payload_hash)

    async def _save(
        self, checkpoint: WorkflowCheckpoint, *, expected_hash: str | None = None
    ) -> CheckpointID:
        with escalated_save_failures(self._options.strict_saves), self._operation("save") as record:
            prepared = self._prepare(checkpoint)
            if expected_hash is not None and prepared.payload_hash != expected_hash:
                raise MongoDBConcurrencyError(
                    "A checkpoint of the run to fork is not the one the fork planned from its document "
                    "(its content's identity hash differs): the run was changed while it was copied, or "
                    "its document was modified outside this storage. Nothing of it was written."
                )
            activity = RunActivity(prepared.checkpoint_id, bool(checkpoint.pending_request_info_events))
            return await self._store(prepared, activity, record)

    async def _save_transplanted(self, heading: RootHeading, encoded: EncodedCheckpoint) -> CheckpointID:
        """:meth:`save`, for ``fork_run``, of a checkpoint already encoded for this run: a source
        checkpoint's root and leaves moved into this run's chunk context (``codec/transplant.py``),
        with its identity hash. Stored as a save stores (sequence, signature with the first key,
        expiry, chunk writes and touches, idempotent retry, ``keep_last``)."""
        with escalated_save_failures(self._options.strict_saves), self._operation("save") as record:
            check_chunk_sizes(encoded.chunks)
            count_payload_bytes(len(encoded.payload))
            prepared = prepare_checkpoint(
                self._scope,
                heading,
                encoded,
                created_at=utc_now(),
                ttl=self._options.ttl,
                signer=self._signer,
            )
            return await self._store(
                prepared, RunActivity(heading.checkpoint_id, heading.waiting_for_input), record
            )

    async def _store(
        self, prepared: PreparedCheckpoint, activity: RunActivity, record: OperationRecord
    ) -> str:
        """A prepared checkpoint's round trips: allocate (with its chunks), insert, prune if due."""
        allocation = await self._allocate(prepared, activity)
        saved = await self._insert(prepared, activity, allocation)
        await self._keep_last(saved)
        record.result_count = 1
        return saved.checkpoint_id

    async def _stored_page(self, cursor: str | None, limit: int) -> tuple[list[StoredPayload], str | None]:
        """One page of the run's stored payloads after ``cursor``, checked as a read checks them
        before decoding (``fork_run`` moves them without decoding), and the next page's cursor."""
        with self._operation("list_checkpoint_page") as record:
            documents, size, check = await self._requested_page(
                PAYLOAD_PROJECTION, self._scope.workflow_name, cursor, limit
            )
            stored = self._decoder.stored(documents, check)
            record.result_count = len(stored)
            return stored, self._next_cursor(documents, size)

    async def load(self, checkpoint_id: CheckpointID) -> WorkflowCheckpoint:
        """Return the bound run's checkpoint with this id.

        With signing keys, the run's ledger is read in the same round trip: a checkpoint that
        ``delete`` or a prune removed is not found even if its document was put back.

        Raises:
            MongoDBCheckpointNotFoundError: The run has no checkpoint with this id (another
                run's checkpoint is never visible).
            MongoDBIntegrityError: With signing keys: the document is unsigned, its signature does
                not match, or it is of another lifetime of the run (from before ``clear_run``).
            MongoDBMappingError: The stored document is of an unknown version, corrupt, or holds
                another checkpoint than this id.
        """
        with self._operation("load") as record:
            requested = _require_checkpoint_id(checkpoint_id)
            query = checkpoint_filter(self._scope, requested)
            check: LedgerCheck | None = None
            if self._signer is None:
                document = await self._find_one(
                    unexpired(query), PAYLOAD_PROJECTION, action="load a checkpoint"
                )
            else:
                document, check = await read_with_ledger(
                    self._collection, self._scope, query, action="load a checkpoint"
                )
            decoded = (
                []
                if document is None
                else await self._decoder.decode([document], check, checkpoint_id=requested)
            )
            if not decoded:  # none, or removed while it was read (its chunks went first)
                raise MongoDBCheckpointNotFoundError("This run has no checkpoint with that id.")
            record.result_count = 1
            return decoded[0]

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """Every checkpoint of the bound run, in ``(sequence, checkpoint_id)`` order.

        Fetched one page of ``page_size`` documents at a time; only the decoded checkpoints
        are kept.
        """
        with self._operation("list_checkpoints") as record:
            self._require_workflow(workflow_name)
            checkpoints: list[WorkflowCheckpoint] = []
            check = await self._ledger_check()
            async for page in self._pages(PAYLOAD_PROJECTION, check, limit=self._options.page_size):
                checkpoints.extend(await self._decoder.decode(page, check))
            record.result_count = len(checkpoints)
            return checkpoints

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        """Delete the bound run's checkpoint with this id; ``False`` if there was none.

        With signing keys, the deletion is first recorded in the run's ledger (three round trips:
        the checkpoint's sequence, the record, the delete), so the checkpoint stays deleted even if
        its document is put back, or if the delete itself fails after the record.
        """
        with self._operation("delete") as record:
            query = checkpoint_filter(self._scope, _require_checkpoint_id(checkpoint_id))
            if self._signer is not None:
                found = await self._find_one(query, SEQUENCE_PROJECTION, action="find a checkpoint to delete")
                if found is None:
                    return False
                with translated_driver_errors(operation="write", action="record a deletion"):
                    await record_deletion(self._collection, self._scope, sequence_of(found))
            with translated_driver_errors(operation="write", action="delete a checkpoint"):
                count_round_trip()
                result = await self._collection.delete_one(query, collation=SIMPLE_COLLATION)
            deleted = result.deleted_count == 1
            record.result_count = int(deleted)
            return deleted

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """The bound run's checkpoint with the greatest sequence, or ``None``."""
        with self._operation("get_latest") as record:
            self._require_workflow(workflow_name)
            for _ in range(_LATEST_READS):
                check = await self._ledger_check()
                document = await self._find_one(
                    _live_filter(self._scope, None, check),
                    PAYLOAD_PROJECTION,
                    sort=DESCENDING_SEQUENCE,
                    action="read the latest",
                )
                if document is None:
                    return None
                decoded = await self._decoder.decode([document], check)
                if decoded:
                    record.result_count = 1
                    return decoded[0]
                # Removed while it was read (its chunks went first): the latest is another now.
            raise MongoDBCheckpointNotFoundError(
                "The run's latest checkpoints were removed while they were read; read again.", retryable=True
            )

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        """The ids of every checkpoint of the bound run, in order; payloads are never fetched."""
        with self._operation("list_checkpoint_ids") as record:
            self._require_workflow(workflow_name)
            ids: list[CheckpointID] = []
            check = await self._ledger_check()
            projection = ID_PROJECTION if check is None else ENVELOPE_PROJECTION
            async for page in self._pages(projection, check, limit=self._options.max_page_size):
                ids.extend(checkpoint_id_of(document) for document in self._decoder.verified(page, check))
            record.result_count = len(ids)
            return ids

    # -- Beyond the protocol ------------------------------------------------------------

    async def list_checkpoint_page(
        self, *, workflow_name: str, cursor: str | None = None, limit: int | None = None
    ) -> MongoDBCheckpointPage:
        """One page of the bound run's checkpoints, after ``cursor`` (from the start without).

        Args:
            workflow_name: Must be the bound workflow.
            cursor: A ``next_cursor`` this storage returned for the same run.
            limit: Page size, from 1 to ``max_page_size``; ``page_size`` by default.

        Raises:
            MongoDBConfigurationError: The workflow, cursor or limit is not valid here.
        """
        with self._operation("list_checkpoint_page") as record:
            documents, size, check = await self._requested_page(
                PAYLOAD_PROJECTION, workflow_name, cursor, limit
            )
            checkpoints = tuple(await self._decoder.decode(documents, check))
            record.result_count = len(checkpoints)
            return MongoDBCheckpointPage(checkpoints, self._next_cursor(documents, size))

    async def list_checkpoint_summaries(
        self, *, workflow_name: str, cursor: str | None = None, limit: int | None = None
    ) -> MongoDBCheckpointSummaryPage:
        """One page of the bound run's checkpoints as summaries: envelopes only, no payload is fetched.

        The order, limits and cursors are ``list_checkpoint_page``'s, and a cursor of either method
        continues the other (same run, same order). See ``MongoDBCheckpointSummary``.

        Raises:
            MongoDBConfigurationError: The workflow, cursor or limit is not valid here.
        """
        with self._operation("list_checkpoint_summaries") as record:
            projection = CHECKPOINT_SUMMARY_PROJECTION if self._signer is None else ENVELOPE_PROJECTION
            documents, size, check = await self._requested_page(projection, workflow_name, cursor, limit)
            summaries = tuple(
                checkpoint_summary_of(document) for document in self._decoder.verified(documents, check)
            )
            record.result_count = len(summaries)
            return MongoDBCheckpointSummaryPage(summaries, self._next_cursor(documents, size))

    async def list_runs(
        self, *, workflow_name: str | None = None, cursor: str | None = None, limit: int | None = None
    ) -> MongoDBRunPage:
        """One page of the runs of this storage's tenant and application, newest activity first.

        The application is this storage's ``application_id``; ``None`` lists only runs stored
        without one. One round trip reads the counters and counts each run's retained checkpoints
        (no payload is read); see ``MongoDBRunSummary`` for what each field means. The same as
        ``MongoDBCheckpointCatalog.list_runs``, whose cursors it shares. A run saved while pages are
        read moves to the front: each run appears at most once, and every run not saved meanwhile
        exactly once. A cleared run (its counter deleted) is not listed.

        Args:
            workflow_name: Only runs of this workflow; all workflows by default.
            cursor: A ``next_cursor`` this storage's tenant and application returned for the same
                ``workflow_name``.
            limit: Page size, from 1 to ``max_page_size``; ``page_size`` by default.

        Raises:
            MongoDBConfigurationError: The workflow name, cursor or limit is not valid here.
        """
        with self._operation("list_runs") as record:
            listing = listing_of(self._scope.tenant_id, self._scope.application_id, workflow_name)
            page = await read_run_page(
                self._collection, listing, cursor=cursor, limit=resolve_limit(limit, self._options)
            )
            record.result_count = len(page.runs)
            return page

    async def fork_run(
        self, *, to_session_id: str, checkpoint_id: str | None = None, keep: ForkKeep = "latest"
    ) -> MongoDBForkResult:
        """Copy the bound run up to ``checkpoint_id`` (its latest by default) into the run
        ``to_session_id`` of the same workflow, so the copy can be resumed with another answer.

        ``keep`` selects what is copied: ``"latest"`` (the checkpoint alone), ``N`` (it and its
        ``N - 1`` nearest ancestors by ``previous_checkpoint_id``) or ``"chain"`` (every ancestor the
        run holds). Ids and lineage are kept, so the copy resumes with the same ``checkpoint_id`` on
        ``storage.for_session(to_session_id)``; this run is only read. A chunked checkpoint is
        moved as stored, re-addressed for the target without decoding its state (ADR 0040); any
        other is loaded through this storage's loader. With signing keys every source checkpoint
        verifies first. Each is stored with the target's settings (signed with the first key,
        ``ttl`` from now), oldest first. Repeating a fork, or finishing one that stopped part way,
        copies only what is missing.

        Raises:
            MongoDBConfigurationError: An argument is invalid, the target is this run, or the target
                holds checkpoints other than this fork's; nothing was written.
            MongoDBCheckpointNotFoundError: This run has no such (or no) checkpoint.
            MongoDBIntegrityError: With signing keys, a checkpoint to copy does not verify; nothing
                was written.
            MongoDBMappingError: A stored envelope is malformed (nothing was written), or a checkpoint
                read names another parent than its envelope (the copy holds the ones before it).
            MongoDBConcurrencyError: A checkpoint read is not the one planned (the run changed, or its
                document was modified), or another writer saved into the target while it was copied.
        """
        self._require_open()
        validate_identifier("to_session_id", to_session_id)  # named as given, before for_session's check
        target = self.for_session(to_session_id)
        access = ForkAccess(
            read_stored=self._stored_page,
            decoder=self._decoder,
            store_transplanted=target._save_transplanted,
            store_reencoded=target._save_copy,
        )
        return await fork_run(
            self._collection, self._options, target.options, access, checkpoint_id=checkpoint_id, keep=keep
        )

    async def clear_run(self) -> MongoDBCheckpointClearResult:
        """Delete every checkpoint of the bound run, then its chunks, then its sequence counter.

        Three round trips: the checkpoints' delete goes out beside an update of the counter that
        tells the run's writers its chunks are going (``chunk_memory.py``), and the counter's delete
        beside another, for a writer that saved in between.

        For a completed run: quiesce its writers first. Safe to retry after a partial failure.
        Every delete states the complete scope; none can reach another run.
        """
        with self._operation("clear_run") as record:
            self._chunks.forget_all()
            with translated_driver_errors(operation="write", action="clear the run"):
                count_round_trip()
                deleting = self._collection.delete_many(run_filter(self._scope), collation=SIMPLE_COLLATION)
                # Before any chunk goes: a writer that remembers the run's chunks learns from its
                # next allocation that they may be gone, even if this clear stops before the counter.
                checkpoints, _ = await concurrently(deleting, self._mark_chunks_cleared())
                chunks_deleted = await delete_run_chunks(self._collection, self._scope)
                # Marked again beside the counter's delete: a writer that read the first mark
                # before the chunks went (a racing save) learns they went, even if the delete
                # fails; if the delete goes first, the mark matches nothing (issue 29).
                count_round_trip()
                counter, _ = await concurrently(
                    self._collection.delete_one(counter_filter(self._scope), collation=SIMPLE_COLLATION),
                    self._mark_chunks_cleared(),
                )
            result = MongoDBCheckpointClearResult(
                checkpoints_deleted=checkpoints.deleted_count,
                counter_deleted=counter.deleted_count,
                acknowledged=True,
                chunks_deleted=chunks_deleted,
            )
            record.result_count = result.checkpoints_deleted
            return result

    async def _mark_chunks_cleared(self) -> object:
        """Set a new chunk generation on the run's counter (if it exists): the run's writers learn
        from their next allocation that the chunks they remember may be gone (ADR 0029)."""
        count_round_trip()
        return await self._collection.find_one_and_update(
            counter_filter(self._scope),
            chunks_cleared_update(),
            _ID_ONLY,
            upsert=False,
            return_document=ReturnDocument.BEFORE,
            collation=SIMPLE_COLLATION,
        )

    async def ensure_indexes(self, *, timeout: float | None = None) -> tuple[str, ...]:
        """Create the collection's indexes (a deploy-time step); returns their names.

        The only operation that creates indexes. Creating an index that already exists with
        the same definition does nothing.

        The steps of :func:`~.provisioning.ensure_checkpoint_indexes`, under their own deadline:
        ``timeout`` seconds, or none by default (never ``operation_timeout``: a build over a
        populated collection may take minutes, and MongoDB aborts a build its deadline cuts short).

        Raises:
            MongoDBIndexMismatchError: An index of the same name or keys exists with another
                definition (the required index is named), or the collection has a non-simple
                default collation (checked first: nothing is created then).
            MongoDBIndexError: An index could not be built, for example a unique one over
                documents that already repeat its key.
        """
        with self._operation("ensure_indexes", deadline=build_timeout(timeout)) as record:
            names = await create_indexes(self._collection)
            record.result_count = len(names)
            return names

    async def validate_indexes(self) -> None:
        """Check, read-only, that every required index exists with its exact definition.

        Raises:
            MongoDBIndexMissingError: A required index does not exist (it is named).
            MongoDBIndexMismatchError: A required index differs (it and the options are named),
                or the collection has a non-simple default collation.
        """
        with self._operation("validate_indexes") as record:
            await check_indexes(self._collection)
            record.result_count = len(CHECKPOINT_INDEXES)

    # -- Steps --------------------------------------------------------------------------

    def _sibling(self, options: MongoDBCheckpointStorageOptions) -> MongoDBCheckpointStorage:
        storage = type(self).__new__(type(self))
        storage._bind(self._collection, options, self._codec, owned_client=None, lifetime=self._lifetime)
        return storage

    @contextmanager
    def _operation(
        self, name: str, *, deadline: float | _Default | None = _DEFAULT
    ) -> Generator[OperationRecord]:
        """One public operation: its completion record, under one deadline for all its round trips
        (``operation_timeout`` unless the operation has its own, as index builds do).

        A caller's enclosing ``pymongo.timeout`` block can only shorten the deadline. A storage
        whose client it closed is refused first, before any I/O.
        """
        seconds = self._options.operation_timeout if isinstance(deadline, _Default) else deadline
        with completion_log(name, self._target) as record, operation_deadline(seconds):
            self._require_open()
            yield record

    def _bind(
        self,
        collection: CheckpointCollection,
        options: MongoDBCheckpointStorageOptions,
        codec: CheckpointCodec,
        *,
        owned_client: CheckpointClient | None,
        lifetime: _ClientLifetime,
    ) -> None:
        self._collection = collection
        self._target = target_of(collection)
        self._options = options
        self._scope = RunScope.from_options(options)
        self._codec = codec
        keys = tuple(options.signing_keys)
        self._signer = PayloadSigner(keys) if keys else None
        self._policy = SignaturePolicy(self._signer, options.accept_unsigned_before)
        self._sequences = SequenceAllocator(
            collection, self._scope, recheck_grace=options.counter_recheck_grace
        )
        self._chunks = ChunkMemory(leave_out_touches=majority_acknowledged(collection))
        self._chunk_context = self._scope.chunk_context(CHUNKED_PAYLOAD_FORMAT)
        # One per run: it compresses only leaves its last split did not hold. encode() never
        # awaits, so concurrent saves of this storage never interleave inside a split.
        self._chunker = Chunker(self._chunk_context)
        self._decoder = CheckpointDecoder(
            collection,
            self._scope,
            codec,
            self._policy,
            chunk_context=self._chunk_context,
            max_checkpoint_bytes=options.max_checkpoint_bytes,
        )
        self._owned_client = owned_client
        self._lifetime = lifetime

    def _require_open(self) -> None:
        if self._lifetime.closed:
            raise MongoDBConfigurationError(
                "This storage is closed: close() closed the client it built, which this storage and "
                "every for_session() storage made from it share. Build a new storage."
            )

    def _require_workflow(self, workflow_name: object) -> None:
        if workflow_name != self._scope.workflow_name:
            # Workflow names are code (a WorkflowBuilder's name=), not run data: errors may show them.
            given = repr(workflow_name) if isinstance(workflow_name, str) else type(workflow_name).__name__
            raise MongoDBConfigurationError(
                f"workflow_name differs from the workflow this storage is bound to: bound to "
                f"{self._scope.workflow_name!r}, got {given[:200]}. Agent Framework "
                "names a workflow randomly per WorkflowBuilder unless it is given a name, so a rebuilt "
                "workflow never matches: build it with WorkflowBuilder(name=...) equal to the "
                "options' workflow_name, or use a storage bound to that workflow."
            )

    def _prepare(self, checkpoint: object) -> PreparedCheckpoint:
        """Everything a save can check or compute before its first round trip."""
        if not isinstance(checkpoint, WorkflowCheckpoint):
            raise MongoDBConfigurationError(
                f"save takes a WorkflowCheckpoint, not {type(checkpoint).__name__}."
            )
        self._require_workflow(checkpoint.workflow_name)
        validate_identifier("checkpoint_id", checkpoint.checkpoint_id)
        if checkpoint.previous_checkpoint_id is not None:
            validate_identifier("previous_checkpoint_id", checkpoint.previous_checkpoint_id)
        chunking = ChunkSettings(
            self._chunk_context, self._options.max_checkpoint_bytes, self._chunks, chunker=self._chunker
        )
        encoded = self._codec.encode(checkpoint, chunking=chunking)
        check_chunk_sizes(encoded.chunks)
        count_payload_bytes(len(encoded.payload))
        return prepare_checkpoint(
            self._scope,
            checkpoint,
            encoded,
            created_at=utc_now(),
            ttl=self._options.ttl,
            signer=self._signer,
        )

    async def _allocate(self, prepared: PreparedCheckpoint, activity: RunActivity) -> Allocation:
        """The save's first round trip: its sequence, and beside it what else must precede the
        insert without depending on it. A chunked checkpoint's leaves are stored (a load never
        finds a checkpoint whose chunks are not all there yet; a failed chunk write leaves a
        spent number), and a process's first save looks at the unique indexes."""
        allocating = self._sequences.allocate(activity=activity, expires_at=prepared.expires_at)
        beside: list[Awaitable[None]] = []
        if not looked_at_unique_indexes(self._collection):
            beside.append(report_missing_unique_indexes(self._collection, strict=self._options.strict_saves))
        writes = self._chunks.plan(prepared.chunks, prepared.expires_at) if prepared.chunks else None
        if writes is not None and (writes.upserts or writes.touches):
            beside.append(
                write_chunks(
                    self._collection, self._scope, writes.upserts, writes.touches, expiry=writes.expiry
                )
            )
        if beside:
            _, allocation = await concurrently(together(*beside), allocating)
        else:
            allocation = await allocating
        if writes is not None:
            await self._settle_chunks(writes, allocation)
        return allocation

    async def _settle_chunks(self, writes: ChunkWrites, allocation: Allocation) -> None:
        """Write what the allocation's reply shows the deferred chunks still need (a round trip
        only when it disagrees with the estimate), then remember the save's chunks."""
        upserts, touches = self._chunks.follow_up(writes, allocation)
        if upserts or touches:
            await write_chunks(self._collection, self._scope, upserts, touches, expiry=writes.expiry)
        self._chunks.remember(writes, allocation, [*upserts, *touches])

    async def _insert(
        self, prepared: PreparedCheckpoint, activity: RunActivity, allocation: Allocation
    ) -> _Saved:
        """Insert unless the id is stored; its identity decides the rest.

        The insert is an upsert that only sets fields when it creates the document and returns
        the document it found, so an identical retry learns it was already done in the same
        round trip. A duplicate key means either that a concurrent save of the same id won (the
        stored identity decides) or that the sequence collided with a retained checkpoint, after
        which the save allocates again, checked against the retained maximum.
        """
        for attempt in range(_MAX_SAVE_ATTEMPTS):
            if attempt:
                allocation = await self._sequences.allocate(
                    activity=activity, expires_at=prepared.expires_at, recover=True
                )
            sequence = allocation.sequence
            try:
                existing = await self._sequences.recording_check(
                    allocation, self._insert_if_absent(prepared, allocation)
                )
            except DuplicateKeyError:
                stored = await self._stored_identity(prepared)
                if stored is not None:
                    return _Saved(prepared.checkpoint_id, sequence, sequence_of(stored))
                # Not this id: the sequence collided with a retained checkpoint. Recover.
            except DRIVER_ERRORS as error:
                raise translate_driver_error(error, operation="write", action="save a checkpoint") from error
            else:
                if existing is None:
                    return _Saved(prepared.checkpoint_id, sequence, sequence)
                self._require_same_identity(existing, prepared)
                return _Saved(prepared.checkpoint_id, sequence, sequence_of(existing))
        raise MongoDBConcurrencyError(
            f"No free sequence number after {_MAX_SAVE_ATTEMPTS} attempts; another writer keeps "
            "taking them. Retry the save.",
            retryable=True,
        )

    async def _insert_if_absent(
        self, prepared: PreparedCheckpoint, allocation: Allocation
    ) -> Document | None:
        """Insert the checkpoint unless its id is stored; returns the stored identity, else None."""
        query = checkpoint_filter(self._scope, prepared.checkpoint_id)
        count_round_trip()
        return await self._collection.find_one_and_update(
            query,
            insert_if_absent(prepared.document(allocation.sequence, allocation.epoch), query),
            IDEMPOTENCY_PROJECTION,
            upsert=True,
            return_document=ReturnDocument.BEFORE,
            collation=SIMPLE_COLLATION,
        )

    async def _stored_identity(self, prepared: PreparedCheckpoint) -> Document | None:
        """This exact checkpoint as stored, or None; raises if its id holds other content."""
        query = checkpoint_filter(self._scope, prepared.checkpoint_id)
        stored = await self._find_one(query, IDEMPOTENCY_PROJECTION, action="compare a stored checkpoint")
        if stored is not None:
            self._require_same_identity(stored, prepared)
        return stored

    async def _keep_last(self, saved: _Saved) -> None:
        """Prune to ``keep_last`` when this save's number is due; a failure is logged, not raised.

        The checkpoint is stored by now, so raising would tell the caller a stored save failed;
        the next due save deletes everything the failed prune left (docs/adr/0012-keep-last.md).
        """
        keep_last = self._options.keep_last
        if keep_last is None or not is_prune_due(saved.allocated, self._options.prune_period):
            return
        try:
            pruned = await prune_run(
                self._collection,
                self._scope,
                keep_last=keep_last,
                protected=saved.stored,
                record_cutoff=self._signer is not None,
            )
            if pruned and self._chunks:
                await self._collect_chunks()
        except MongoDBIntegrationError as error:
            log_prune_failure(error.category)

    async def _collect_chunks(self) -> None:
        """Delete the run's chunks that no retained checkpoint references (after a prune that
        deleted checkpoints, by a storage that has stored chunks: a run of small checkpoints pays
        nothing). Chunks another writer left are collected by its prunes, or by ``clear_run``.

        Reads every retained checkpoint's root; one that does not pass its gates and checksum
        raises, so nothing is collected on a guess about what it references.
        """
        referenced: set[bytes] = set()
        # Every retained root counts, live or expired: collection never deletes on a guess, and a
        # server clock that jumped ahead and back must not cost an unexpired checkpoint its chunks.
        pages = self._pages(PAYLOAD_PROJECTION, None, limit=self._options.max_page_size, expired_too=True)
        async for page in pages:
            for document in page:
                stored = stored_payload(document, self._scope, self._policy)
                if stored.chunked:
                    referenced.update(self._decoder.chunk_addresses(stored))
        await collect_unreferenced_chunks(self._collection, self._scope, referenced)

    def _require_same_identity(self, stored: Mapping[str, Any], prepared: PreparedCheckpoint) -> None:
        """Raise unless the stored checkpoint with this id is the one being saved."""
        if stored.get("idempotency_hash_version") != CANONICAL_HASH_VERSION:
            raise MongoDBMappingError(
                "The stored checkpoint with this id was written with another idempotency hash "
                "version; migrate stored checkpoints before saving over them."
            )
        if stored.get("payload_hash") != prepared.payload_hash:
            raise MongoDBConcurrencyError(
                "A checkpoint with this id is already stored with different content."
            )

    async def _ledger_check(self) -> LedgerCheck | None:
        """With signing keys, the run's ledger as this read's reference (one round trip); without
        keys, nothing to check against (``None``)."""
        if self._signer is None:
            return None
        return LedgerCheck(await read_ledger(self._collection, self._scope))

    async def _find_one(
        self,
        query: Mapping[str, Any],
        projection: Mapping[str, int],
        *,
        action: str,
        sort: list[tuple[str, int]] | None = None,
    ) -> Document | None:
        with translated_driver_errors(operation="read", action=action):
            count_round_trip()
            return await self._collection.find_one(query, projection, sort=sort, collation=SIMPLE_COLLATION)

    async def _requested_page(
        self, projection: Mapping[str, int], workflow_name: object, cursor: object, limit: object
    ) -> tuple[list[Document], int, LedgerCheck | None]:
        """Check a page request (no I/O), then fetch its documents: (documents, page size, the
        ledger they were read against)."""
        self._require_workflow(workflow_name)
        size = resolve_limit(limit, self._options)
        after = None if cursor is None else decode_cursor(self._scope, cursor)
        check = await self._ledger_check()
        return await self._fetch_page(projection, check, after=after, limit=size), size, check

    async def _fetch_page(
        self,
        projection: Mapping[str, int],
        check: LedgerCheck | None,
        *,
        after: PagePosition | None,
        limit: int,
        expired_too: bool = False,
    ) -> list[Document]:
        sequence = None if after is None else after.sequence
        query = (
            page_filter(self._scope, sequence) if expired_too else _live_filter(self._scope, sequence, check)
        )
        with translated_driver_errors(operation="read", action="read a page of checkpoints"):
            count_round_trip()  # find() sends nothing; to_list() sends the query, once
            cursor = self._collection.find(
                query, projection, sort=ASCENDING_SEQUENCE, limit=limit, collation=SIMPLE_COLLATION
            )
            return await cursor.to_list(limit)

    async def _pages(
        self,
        projection: Mapping[str, int],
        check: LedgerCheck | None,
        *,
        limit: int,
        expired_too: bool = False,
    ) -> AsyncIterator[list[Document]]:
        """Every page of the run (its live, unexpired checkpoints; ``expired_too``: every retained
        one, for collection), one bounded request at a time.

        A yielded page is emptied when the consumer asks for the next one, so at most one page of
        raw documents is alive while the next is fetched.
        """
        after: PagePosition | None = None
        while True:
            documents = await self._fetch_page(
                projection, check, after=after, limit=limit, expired_too=expired_too
            )
            following = page_position_of(documents[-1]) if len(documents) == limit else None
            yield documents
            documents.clear()
            if following is None:
                return
            after = following

    def _next_cursor(self, documents: list[Document], limit: int) -> str | None:
        if len(documents) < limit:
            return None
        return encode_cursor(self._scope, page_position_of(documents[-1]))


@dataclasses.dataclass(frozen=True, slots=True)
class _Saved:
    """What a save stored: the id, the number it allocated, and the stored checkpoint's sequence
    (another one for an identical retry, whose number is spent)."""

    checkpoint_id: CheckpointID
    allocated: int
    stored: int


@dataclasses.dataclass(slots=True)
class _ClientLifetime:
    """Whether a storage-built client was closed; shared by its owner and ``for_session`` siblings."""

    closed: bool = False


def _live_filter(scope: RunScope, after: int | None, check: LedgerCheck | None) -> dict[str, Any]:
    """A page or latest query: the run's unexpired checkpoints and, with keys, only live ones."""
    return page_filter(scope, after, None if check is None else check.sequence_condition(), unexpired=True)


def _require_checkpoint_id(checkpoint_id: object) -> str:
    # The rule save applies: an id save would refuse cannot be stored, so asking for it is an
    # error of the caller's, reported without a round trip.
    return validate_identifier("checkpoint_id", checkpoint_id)


def _require_options(options: object) -> None:
    if not isinstance(options, MongoDBCheckpointStorageOptions):
        raise MongoDBConfigurationError(
            f"options must be MongoDBCheckpointStorageOptions, not {type(options).__name__}."
        )


def _require_bool(name: str, value: object) -> None:
    # Only a bool: a truthy string such as "false" must not switch a check on.
    if not isinstance(value, bool):
        raise MongoDBConfigurationError(f"{name} must be True or False, not {value!r}.")
