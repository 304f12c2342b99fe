"""The connection the commands share: where the data is, the deadlines, and the client factory.

Data comes from a MongoDB URI (``--uri`` or ``MONGODB_URI``) or, with ``--engine-file``, from the
package's file-backed in-process engine. Deadlines follow the URI's own options first and
``--timeout`` only where the URI sets none (:func:`resolve_deadlines`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from importlib import import_module
from pathlib import Path
from typing import Any

import click

from ..checkpoints import MongoDBCheckpointCatalog, MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from ..checkpoints.connection import (
    DEFAULT_WAIT_TIMEOUT,
    close_client,
    create_owned_client,
    uri_options,
    wait_for_server,
)
from ..checkpoints.driver import CheckpointClient, CheckpointCollection
from ..checkpoints.options import DEFAULT_OPERATION_TIMEOUT, MAX_OPERATION_TIMEOUT
from ._errors import CommandFailure
from ._keys import keys_from_environment

__all__ = [
    "ENGINE_HINT",
    "CliSettings",
    "ClientFactory",
    "Connection",
    "Deadlines",
    "MissingExtra",
    "default_client",
    "engine_factory",
    "require_engine_extra",
    "resolve_deadlines",
]

ClientFactory = Callable[[str | None], CheckpointClient]
"""Builds a client from the URI (``None`` when none was given); called inside the event loop."""

PLACEHOLDER_NAME = "cli"
"""The workflow and session a storage is bound to when a command names none (tenant-wide commands
use ``catalog`` instead)."""

ENGINE_HINT = (
    "--engine-file needs the in-process engine (the testing extra):\n"
    '    pip install "agent-framework-mongodb-checkpoints[cli,testing]"'
)
USAGE_STATUS = 2


class MissingExtra(click.ClickException):
    """An optional dependency the options need is not installed: exit status 2, like a usage error."""

    exit_code = USAGE_STATUS


@dataclasses.dataclass(frozen=True, slots=True)
class Deadlines:
    """How long a command's storage calls and its wait for the server may take.

    Attributes:
        operation: Seconds each storage call may take (the storage's ``operation_timeout``).
        server_selection: Seconds the command waits for a server before its first call.
        client_options: Options for the client the command builds: only those the URI leaves
            unset, so the URI's own always stand.
        overridden: The URI options that replace an explicit ``--timeout`` (for a note).
    """

    operation: float = DEFAULT_OPERATION_TIMEOUT
    server_selection: float = DEFAULT_WAIT_TIMEOUT
    client_options: Mapping[str, Any] = dataclasses.field(default_factory=dict[str, Any])
    overridden: tuple[str, ...] = ()


def resolve_deadlines(uri: str | None, timeout: float | None) -> Deadlines:
    """The deadlines for ``uri`` and ``--timeout`` (``None`` when not given).

    - Server selection: the URI's ``serverSelectionTimeoutMS``, else ``timeout``, else 30 s
      (pymongo's default). The storage's calls run under ``pymongo.timeout``, which replaces
      pymongo's server selection timeout with the call's own deadline, so the command first waits
      for a server within this bound (``Connection.collection_handle``).
    - Each storage call: the URI's ``timeoutMS`` (``0``, "no limit", becomes the storage's
      largest, an hour), else ``timeout``, else 30 s.
    """
    given: Mapping[str, Any] = {} if uri is None else uri_options(uri)
    selection: object = given.get("serverselectiontimeoutms")
    operation: object = given.get("timeoutms")
    overridden: list[str] = []
    client_options: dict[str, Any] = {}
    if isinstance(selection, (int, float)) and selection > 0:
        server_selection = float(selection)
        overridden.append("serverSelectionTimeoutMS")
    else:
        server_selection = DEFAULT_WAIT_TIMEOUT if timeout is None else timeout
        if timeout is not None:
            client_options["serverSelectionTimeoutMS"] = max(1, math.ceil(timeout * 1000))
    if isinstance(operation, (int, float)):
        operation_seconds = (
            MAX_OPERATION_TIMEOUT if operation == 0 else min(float(operation), MAX_OPERATION_TIMEOUT)
        )
        overridden.append("timeoutMS")
    else:
        operation_seconds = DEFAULT_OPERATION_TIMEOUT if timeout is None else timeout
    return Deadlines(
        operation=operation_seconds,
        server_selection=server_selection,
        client_options=client_options,
        overridden=tuple(overridden) if timeout is not None else (),
    )


def default_client(uri: str | None, *, defaults: Mapping[str, Any] | None = None) -> CheckpointClient:
    """A pymongo ``AsyncMongoClient`` for ``uri``, as the storage builds its own (no I/O yet)."""
    if uri is None:
        raise click.UsageError("No MongoDB URI: set MONGODB_URI, pass --uri, or use --engine-file PATH.")
    return create_owned_client(uri, defaults=defaults)


def require_engine_extra() -> None:
    """Raise :class:`MissingExtra` unless the in-process engine (the ``testing`` extra) imports."""
    try:
        import_module("agent_framework_mongodb.testing")
    except ImportError as error:
        if not (error.name or "").startswith("mongomock_ng"):
            raise
        raise MissingExtra(ENGINE_HINT) from None


def engine_factory(path: Path) -> ClientFactory:
    """A factory of file-backed in-process engines over ``path`` (the URI, if any, is ignored)."""

    def open_engine(_uri: str | None) -> CheckpointClient:
        from ..testing import EngineFileError, InMemoryMongoClient  # noqa: PLC0415 - the testing extra

        try:
            return InMemoryMongoClient(path=path)
        except EngineFileError as error:
            raise CommandFailure("engine_file", str(error)) from error
        except OSError as error:
            raise CommandFailure(
                "engine_file", f"The engine file {str(path)!r} cannot be opened ({error.strerror or error})."
            ) from error

    return open_engine


@dataclasses.dataclass(frozen=True, slots=True)
class CliSettings:
    """What a caller (a test) injects through Click's ``obj``.

    Attributes:
        client_factory: Replaces the client the command would build (a URI's pymongo client or
            ``--engine-file``'s engine); a client it returns is left open.
        on_client: Called with every client a command builds or gets, before it is used (tests
            look at a built client's options).
    """

    client_factory: ClientFactory | None = None
    on_client: Callable[[CheckpointClient], None] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Connection:
    """The group's options, resolved."""

    uri: str | None
    database: str
    collection: str
    client_factory: ClientFactory
    owns_client: bool
    deadlines: Deadlines = Deadlines()
    engine_file: Path | None = None
    on_client: Callable[[CheckpointClient], None] | None = None

    @property
    def in_process(self) -> bool:
        """Whether the data is the in-process engine's (``--engine-file``)."""
        return self.engine_file is not None

    @asynccontextmanager
    async def client(self) -> AsyncGenerator[CheckpointClient]:
        """The command's client, closed afterwards if the command built it; no I/O before use."""
        client = self.client_factory(self.uri)
        if self.on_client is not None:
            self.on_client(client)
        try:
            yield client
        finally:
            if self.owns_client:
                await close_client(client, timeout=self.deadlines.operation)

    @asynccontextmanager
    async def collection_handle(self) -> AsyncGenerator[CheckpointCollection]:
        """The checkpoint collection, once a server answers within the server selection bound.

        Raises:
            MongoDBTimeoutError: No server answered within ``deadlines.server_selection``.
        """
        async with self.client() as client:
            collection = client[self.database][self.collection]
            await wait_for_server(collection.database, timeout=self.deadlines.server_selection)
            yield collection

    @asynccontextmanager
    async def storage(
        self,
        *,
        tenant: str,
        application: str | None,
        workflow: str = PLACEHOLDER_NAME,
        session: str = PLACEHOLDER_NAME,
        allowed_types: Sequence[str] = (),
    ) -> AsyncGenerator[MongoDBCheckpointStorage]:
        """A storage bound to the run (or, with the placeholders, to the tenant and application)."""
        options = MongoDBCheckpointStorageOptions(
            tenant_id=tenant,
            application_id=application,
            workflow_name=workflow,
            session_id=session,
            allowed_checkpoint_types=allowed_types,
            operation_timeout=self.deadlines.operation,
            # With keys in the environment, reads verify as a worker's storage does.
            signing_keys=keys_from_environment(required=False),
        )
        async with self.collection_handle() as collection:
            yield MongoDBCheckpointStorage(collection, options=options)

    @asynccontextmanager
    async def catalog(
        self, *, tenant: str, application: str | None
    ) -> AsyncGenerator[MongoDBCheckpointCatalog]:
        """The tenant's and application's catalog: its runs, and a storage for any of them."""
        async with self.collection_handle() as collection:
            yield MongoDBCheckpointCatalog(
                collection,
                tenant_id=tenant,
                application_id=application,
                operation_timeout=self.deadlines.operation,
                signing_keys=keys_from_environment(required=False),
            )
