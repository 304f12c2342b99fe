"""One command as a handler sees it: the engine, the server's cursors, the database and the document."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._client import InMemoryMongoClient
from .._collection import InMemoryCollection
from ._cursors import Cursors
from ._replies import CommandError, not_implemented

GENERIC_FIELDS = frozenset(
    {
        "$db",
        "lsid",
        "txnNumber",
        "$clusterTime",
        "$readPreference",
        "readConcern",
        "writeConcern",
        "maxTimeMS",
        "comment",
        "apiVersion",
        "apiStrict",
        "apiDeprecationErrors",
        "$audit",
        "$client",
        "bypassDocumentValidation",
    }
)
"""Fields any command may carry (https://www.mongodb.com/docs/manual/reference/command/, "Command
Fields"); the handlers read the ones they need and the pipeline the rest."""


@dataclass(frozen=True)
class Invocation:
    engine: InMemoryMongoClient
    cursors: Cursors
    database: str
    command: dict[str, Any]

    @property
    def name(self) -> str:
        return next(iter(self.command))

    @property
    def target(self) -> str:
        """The collection the command names as its first value."""
        value = self.command[self.name]
        if not isinstance(value, str) or not value:
            raise CommandError(73, f"collection name has invalid type {type(value).__name__}")
        return value

    @property
    def namespace(self) -> str:
        return f"{self.database}.{self.target}"

    def collection(self, name: str | None = None) -> InMemoryCollection:
        return self.engine[self.database][name or self.target]

    def exists(self, name: str | None = None) -> bool:
        return (name or self.target) in self.engine[self.database].existing_collection_names()

    def option(self, name: str, default: Any = None) -> Any:
        return self.command.get(name, default)

    def document(self, name: str) -> dict[str, Any] | None:
        value = self.command.get(name)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise CommandError(
                14,
                f"BSON field '{self.name}.{name}' is the wrong type '{type(value).__name__}',"
                " expected type 'object'",
            )
        return dict(value)  # pyright: ignore[reportUnknownArgumentType]

    def batch_size(self, container: Mapping[str, Any] | None = None) -> int | None:
        source = self.command if container is None else container
        value = source.get("batchSize")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise CommandError(51024, f"BSON field 'batchSize' value must be >= 0, actual value '{value}'")
        return int(value)

    def refuse(self, *options: str) -> None:
        """Options whose effect the engine does not simulate: refused, never ignored."""
        for option in options:
            if option in self.command:
                raise not_implemented(f"{self.name}'s {option!r}")


Handler = Callable[[Invocation], Awaitable[dict[str, Any]]]
