"""``MongoDBCheckpointCatalog``: one tenant's (and application's) runs, without a storage bound to one.

A storage is bound to a run because Agent Framework's protocol carries none; listing, pruning and
clearing runs are the tenant's operations. The catalog takes the storage's sources (a collection,
a client or a connection string) and settings, lists the runs with their retained checkpoints
counted (``runs.py``, the steps ``MongoDBCheckpointStorage.list_runs`` uses too, with the same
cursors), plans and carries out prunes of idle runs (``pruning.py``), and hands out a storage for
any of its runs (``for_session``), sharing its collection. Construction does no I/O.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterable
from contextlib import contextmanager
from datetime import datetime, timedelta
from types import TracebackType
from typing import Final

from .._telemetry import OperationRecord, Target, completion_log, target_of
from ..errors import MongoDBConfigurationError
from .codec import CheckpointCodec
from .concerns import bind_collection
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
from .driver import CheckpointClient, CheckpointCollection
from .options import (
    DEFAULT_MAX_CHECKPOINT_BYTES,
    DEFAULT_MAX_PAGE_SIZE,
    DEFAULT_OPERATION_TIMEOUT,
    DEFAULT_PAGE_SIZE,
    MongoDBCheckpointStorageOptions,
)
from .paging import RunPosition, resolve_limit
from .pruning import (
    MongoDBClearedRun,
    MongoDBPrunePlan,
    MongoDBPruneResult,
    MongoDBSkippedRun,
    MongoDBSkipReason,
    split_waiting,
    still_as_planned,
    validate_older_than,
)
from .results import MongoDBCheckpointClearResult, MongoDBRunPage, MongoDBRunSummary
from .runs import idle_for, listing_of, read_run_documents, read_run_page
from .scope import RunScope
from .storage import MongoDBCheckpointStorage
from .summaries import run_position_of, run_summary_of

__all__ = ["MongoDBCheckpointCatalog"]

_UNBOUND: Final = "catalog"
"""The workflow and session of the catalog's template options, which only validate its settings:
every storage it hands out replaces both, and its own operations state no run."""


class MongoDBCheckpointCatalog:
    """The runs of one tenant and application in a MongoDB collection: list, prune, clear, open.

    Takes the storage's sources (give at most one; with none, ``MONGODB_URI`` from the environment)
    and the storage's settings, which every storage ``for_session`` returns gets; see
    ``MongoDBCheckpointStorageOptions`` for each. Construction does no I/O and never creates indexes.

    Args:
        collection: A collection to use as is (pymongo ``AsyncCollection`` or compatible).
        tenant_id: The tenant whose runs the catalog lists and clears. Required.
        application_id: The application within the tenant; ``None`` (the default) is its own
            application: runs stored without one.
        mongo_client: A client to take the collection from, by ``database_name`` and ``collection_name``.
        connection_string: A MongoDB URI; the catalog builds and owns the client.
        database_name: The database, with ``mongo_client`` or a connection string.
        collection_name: The collection, with ``mongo_client`` or a connection string.
        page_size: Runs per ``list_runs`` page by default (and checkpoints per page of its storages).
        max_page_size: The largest ``limit`` a caller may ask for.
        operation_timeout: Seconds each operation (each page of a prune's plan, each run's check)
            may take, every round trip included.

    The other keywords (``ttl``, ``keep_last``, ``allowed_checkpoint_types``, ``signing_keys``,
    ``accept_unsigned_before``, ``strict_saves``, ``max_checkpoint_bytes``) only configure the
    storages ``for_session`` returns; listing, pruning and clearing never read a payload.

    Raises:
        MongoDBConfigurationError: A setting is invalid (as ``MongoDBCheckpointStorageOptions``
            says), the sources are ambiguous or missing, or the write concern is unacknowledged.

    A client built from a connection string belongs to the catalog: ``close()`` or leaving
    ``async with`` closes it, and with it every storage ``for_session`` returned.
    """

    _collection: CheckpointCollection
    _target: Target
    _template: MongoDBCheckpointStorageOptions
    _owned_client: CheckpointClient | None
    _closed: bool

    def __init__(
        self,
        collection: CheckpointCollection | None = None,
        *,
        tenant_id: str,
        application_id: str | None = None,
        mongo_client: CheckpointClient | None = None,
        connection_string: str | None = None,
        database_name: str = DEFAULT_DATABASE_NAME,
        collection_name: str = DEFAULT_COLLECTION_NAME,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_page_size: int = DEFAULT_MAX_PAGE_SIZE,
        operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
        ttl: timedelta | None = None,
        keep_last: int | None = None,
        allowed_checkpoint_types: Iterable[str | type] = (),
        signing_keys: Iterable[bytes] = (),
        accept_unsigned_before: datetime | None = None,
        strict_saves: bool = False,
        max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
    ) -> None:
        template = MongoDBCheckpointStorageOptions(
            tenant_id=tenant_id,
            application_id=application_id,
            workflow_name=_UNBOUND,
            session_id=_UNBOUND,
            page_size=page_size,
            max_page_size=max_page_size,
            operation_timeout=operation_timeout,
            ttl=ttl,
            keep_last=keep_last,
            allowed_checkpoint_types=allowed_checkpoint_types,
            signing_keys=signing_keys,
            accept_unsigned_before=accept_unsigned_before,
            strict_saves=strict_saves,
            max_checkpoint_bytes=max_checkpoint_bytes,
        )
        source = resolve_collection(
            collection,
            mongo_client=mongo_client,
            connection_string=connection_string,
            database_name=database_name,
            collection_name=collection_name,
        )
        CheckpointCodec(template.allowed_checkpoint_types).check_allowed_types()
        self._collection = bind_collection(source.collection)
        self._target = target_of(self._collection)
        self._template = template
        self._owned_client = source.owned_client
        self._closed = False

    @classmethod
    async def connect(
        cls,
        collection: CheckpointCollection | None = None,
        *,
        tenant_id: str,
        application_id: str | None = None,
        mongo_client: CheckpointClient | None = None,
        connection_string: str | None = None,
        database_name: str = DEFAULT_DATABASE_NAME,
        collection_name: str = DEFAULT_COLLECTION_NAME,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_page_size: int = DEFAULT_MAX_PAGE_SIZE,
        operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
    ) -> MongoDBCheckpointCatalog:
        """Build a catalog (the storages it opens take the default settings), then wait until the
        server answers a ping, as ``MongoDBCheckpointStorage.connect`` does (same errors); a client
        the catalog built is closed again if waiting fails."""
        timeout = validate_wait_timeout(wait_timeout)
        catalog = cls(
            collection,
            tenant_id=tenant_id,
            application_id=application_id,
            mongo_client=mongo_client,
            connection_string=connection_string,
            database_name=database_name,
            collection_name=collection_name,
            page_size=page_size,
            max_page_size=max_page_size,
            operation_timeout=operation_timeout,
        )
        try:
            await wait_for_server(catalog._collection.database, timeout=timeout)
        except BaseException:
            await catalog.close()
            raise
        return catalog

    @property
    def tenant_id(self) -> str:
        """The tenant whose runs this catalog lists and clears."""
        return self._template.tenant_id

    @property
    def application_id(self) -> str | None:
        """The application within the tenant (``None``: runs stored without one)."""
        return self._template.application_id

    def for_session(self, workflow_name: str, session_id: str) -> MongoDBCheckpointStorage:
        """A storage for one run of the tenant and application (as ``list_runs`` names it), with the
        catalog's settings, sharing its collection. Making one does no I/O; it never owns the client.

        Raises:
            MongoDBConfigurationError: ``workflow_name`` or ``session_id`` is not a valid identifier,
                or the catalog closed the client it built.
        """
        self._require_open()
        return MongoDBCheckpointStorage(
            self._collection, options=self._template.with_workflow(workflow_name, session_id)
        )

    async def close(self) -> None:
        """Close the client if this catalog built it; injected clients are left open. Idempotent.
        Once it is closed, the catalog refuses every operation with ``MongoDBConfigurationError``.
        Returns within ``operation_timeout`` (plus a second), as ``MongoDBCheckpointStorage.close``."""
        client, self._owned_client = self._owned_client, None
        if client is not None:
            self._closed = True
            await close_client(client, timeout=self._template.operation_timeout)

    async def __aenter__(self) -> MongoDBCheckpointCatalog:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def list_runs(
        self, *, workflow_name: str | None = None, cursor: str | None = None, limit: int | None = None
    ) -> MongoDBRunPage:
        """One page of the tenant's runs, newest activity first, each with its retained checkpoints
        counted: one round trip, no payload read (``MongoDBRunSummary`` says what each field means).

        Exactly ``MongoDBCheckpointStorage.list_runs`` of a storage of this tenant and application:
        the same runs and cursors. A run saved while pages are read moves to the front, so each run
        appears at most once and every run not saved meanwhile exactly once.

        Args:
            workflow_name: Only runs of this workflow; all workflows by default.
            cursor: A ``next_cursor`` returned for this tenant, application and ``workflow_name``.
            limit: Page size, from 1 to ``max_page_size``; ``page_size`` by default.

        Raises:
            MongoDBConfigurationError: The workflow name, cursor or limit is not valid here.
        """
        with self._operation("list_runs") as record:
            listing = listing_of(self.tenant_id, self.application_id, workflow_name)
            page = await read_run_page(
                self._collection, listing, cursor=cursor, limit=resolve_limit(limit, self._template)
            )
            record.result_count = len(page.runs)
            return page

    async def iter_runs(self, *, workflow_name: str | None = None) -> AsyncIterator[MongoDBRunSummary]:
        """Every run of the tenant (and workflow), newest activity first: ``list_runs`` pages of
        ``page_size``, each its own operation and round trip, read as the iteration reaches them."""
        cursor: str | None = None
        while True:
            page = await self.list_runs(workflow_name=workflow_name, cursor=cursor)
            for run in page.runs:
                yield run
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def clear_run(self, workflow_name: str, session_id: str) -> MongoDBCheckpointClearResult:
        """Delete one run's checkpoints, then its chunks, then its counter: the run's storage's
        ``clear_run`` (quiesce its writers first; safe to retry after a partial failure)."""
        return await self.for_session(workflow_name, session_id).clear_run()

    async def plan_prune(
        self, *, older_than: timedelta, workflow_name: str | None = None, include_waiting: bool = False
    ) -> MongoDBPrunePlan:
        """Which runs a prune would clear: those whose latest save is more than ``older_than`` before
        the server's current time, less those waiting for input unless ``include_waiting``.

        Reads pages of ``page_size`` idle runs (one round trip each, under its own deadline); clears
        nothing. ``prune(plan)`` carries the plan out.

        Raises:
            MongoDBConfigurationError: ``older_than`` is not a positive ``timedelta``, or the
                workflow name is not valid.
        """
        with completion_log("plan_prune", self._target) as record:
            self._require_open()
            idle = await self._idle_runs(validate_older_than(older_than), workflow_name)
            runs, skipped = split_waiting(idle, include_waiting=include_waiting is True)
            record.result_count = len(runs)
            return MongoDBPrunePlan(
                tenant_id=self.tenant_id,
                application_id=self.application_id,
                older_than=older_than,
                include_waiting=include_waiting is True,
                runs=runs,
                skipped=skipped,
            )

    async def prune(self, plan: MongoDBPrunePlan) -> MongoDBPruneResult:
        """Clear the runs ``plan`` lists, each only if its counter is still as the plan read it.

        Per run: one read of its counter, under its own deadline (a run saved since the plan is
        skipped, ``SAVED_SINCE_PLANNED``: its new checkpoint may wait for input), then its
        ``clear_run`` (three round trips, its own operation). A failure stops the prune and is
        raised; the runs cleared before it stay cleared, and planning again finds the rest.

        Raises:
            MongoDBConfigurationError: ``plan`` is not a plan of this catalog's tenant and application.
        """
        with completion_log("prune", self._target) as record:
            self._require_open()
            self._require_own(plan)
            cleared: list[MongoDBClearedRun] = []
            skipped = list(plan.skipped)
            for run in plan.runs:
                if await self._still_as_planned(run, include_waiting=plan.include_waiting):
                    cleared.append(
                        MongoDBClearedRun(run, await self.clear_run(run.workflow_name, run.session_id))
                    )
                else:
                    skipped.append(MongoDBSkippedRun(run, MongoDBSkipReason.SAVED_SINCE_PLANNED))
            record.result_count = len(cleared)
            return MongoDBPruneResult(tuple(cleared), tuple(skipped))

    # -- Steps --------------------------------------------------------------------------

    @contextmanager
    def _operation(self, name: str) -> Generator[OperationRecord]:
        """One public operation: its completion record, under ``operation_timeout``."""
        with completion_log(name, self._target) as record, self._deadline():
            self._require_open()
            yield record

    @contextmanager
    def _deadline(self) -> Generator[None]:
        with operation_deadline(self._template.operation_timeout):
            yield

    async def _idle_runs(self, older_than: timedelta, workflow_name: object) -> list[MongoDBRunSummary]:
        """Every run idle for ``older_than`` by the server's clock, a page at a time."""
        listing = listing_of(self.tenant_id, self.application_id, workflow_name)
        limit = self._template.page_size
        idle: list[MongoDBRunSummary] = []
        after: RunPosition | None = None
        while True:
            with self._deadline():
                documents = await read_run_documents(
                    self._collection, listing, after=after, limit=limit, idle=idle_for(older_than)
                )
            idle.extend(run_summary_of(document) for document in documents)
            if len(documents) < limit:
                return idle
            after = run_position_of(documents[-1])

    async def _still_as_planned(self, run: MongoDBRunSummary, *, include_waiting: bool) -> bool:
        scope = RunScope.from_options(self._template.with_workflow(run.workflow_name, run.session_id))
        with self._deadline():
            return await still_as_planned(self._collection, scope, run, include_waiting=include_waiting)

    def _require_open(self) -> None:
        if self._closed:
            raise MongoDBConfigurationError(
                "This catalog is closed: close() closed the client it built, which its storages share. "
                "Build a new catalog."
            )

    def _require_own(self, plan: object) -> None:
        if not isinstance(plan, MongoDBPrunePlan) or (plan.tenant_id, plan.application_id) != (
            self.tenant_id,
            self.application_id,
        ):
            raise MongoDBConfigurationError(
                "prune takes a MongoDBPrunePlan that this catalog's plan_prune returned (same tenant "
                "and application)."
            )
