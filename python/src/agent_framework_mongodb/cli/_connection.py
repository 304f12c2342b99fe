"""The connection the commands share: URI, database, collection, and the client factory."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager

import click

from ..checkpoints import MongoDBCheckpointCatalog, MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from ..checkpoints.connection import create_owned_client
from ..checkpoints.driver import CheckpointClient, CheckpointCollection
from ._keys import keys_from_environment

__all__ = ["CliSettings", "ClientFactory", "Connection", "default_client"]

ClientFactory = Callable[[str | None], CheckpointClient]
"""Builds a client from the URI (``None`` when none was given); called inside the event loop."""

PLACEHOLDER_NAME = "cli"
"""The workflow and session a storage is bound to when a command names none (tenant-wide commands
use ``catalog`` instead)."""


def default_client(uri: str | None) -> CheckpointClient:
    """A pymongo ``AsyncMongoClient`` for ``uri``, as the storage builds its own (no I/O yet)."""
    if uri is None:
        raise click.UsageError("No MongoDB URI: set MONGODB_URI or pass --uri.")
    return create_owned_client(uri)


@dataclasses.dataclass(frozen=True, slots=True)
class CliSettings:
    """What a caller (a test) injects through Click's ``obj``: the client factory.

    A client from an injected factory is left open; the default one is closed after each command.
    """

    client_factory: ClientFactory


@dataclasses.dataclass(frozen=True, slots=True)
class Connection:
    """The group's options, resolved."""

    uri: str | None
    database: str
    collection: str
    client_factory: ClientFactory
    owns_client: bool

    @asynccontextmanager
    async def collection_handle(self) -> AsyncGenerator[CheckpointCollection]:
        """The checkpoint collection, its client closed afterwards if the command built it."""
        client = self.client_factory(self.uri)
        try:
            yield client[self.database][self.collection]
        finally:
            if self.owns_client:
                await client.close()

    @asynccontextmanager
    async def storage(
        self,
        *,
        tenant: str,
        application: str | None,
        workflow: str = PLACEHOLDER_NAME,
        session: str = PLACEHOLDER_NAME,
    ) -> AsyncGenerator[MongoDBCheckpointStorage]:
        """A storage bound to the run (or, with the placeholders, to the tenant and application)."""
        options = MongoDBCheckpointStorageOptions(
            tenant_id=tenant,
            application_id=application,
            workflow_name=workflow,
            session_id=session,
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
                signing_keys=keys_from_environment(required=False),
            )
