"""What one collection holds besides its documents, shared by every object that names it.

pymongo hands out a new collection object for each ``get_collection``/``with_options`` call, and
all of them address the same server-side collection. The engine's collection objects are views
in the same way: each carries its own settings, while the index catalog, the unique-key sets and
whether the collection exists live here, once per namespace, owned by the client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._indexes import IndexCatalog
from ._unique import UniqueKeys


class CollectionState:
    """The index catalog, unique-key sets and existence of one namespace."""

    def __init__(self, namespace: str, stored: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self.namespace = namespace
        self.catalog = IndexCatalog(namespace)
        self.unique = UniqueKeys(stored)
        self.created = False

    def create(self, default_collation: dict[str, Any] | None) -> None:
        """Make the collection exist, empty of indexes but ``_id_``, with this default collation."""
        self.catalog.reset(default_collation)
        self.unique.invalidate()
        self.created = True

    def reset(self) -> None:
        """Forget the indexes and existence, as dropping the collection does (documents aside)."""
        self.catalog.reset()
        self.unique.invalidate()
        self.created = False
