"""What one collection holds besides its documents, shared by every object that names it.

pymongo hands out a new collection object for each ``get_collection``/``with_options`` call, and
all of them address the same server-side collection. The engine's collection objects are views
in the same way: each carries its own settings, while the index catalog, the unique-key sets, the
equality lookups and whether the collection exists live here, once per namespace, owned by the
client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._indexes import IndexCatalog
from ._lookup import EqualityLookup
from ._stored import DocumentStore
from ._unique import UniqueKeys


class CollectionState:
    """The documents, index catalog, index entries and existence of one namespace."""

    def __init__(self, namespace: str, store: DocumentStore) -> None:
        self.namespace = namespace
        self.store = store
        self.catalog = IndexCatalog(namespace)
        self.unique = UniqueKeys(lambda: store)
        self.lookup = EqualityLookup(lambda: store)
        self.created = False

    def record(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> None:
        """Keep the index entries in step with a write: ``before`` left, ``after`` entered."""
        self.unique.apply(self.catalog.unique_specs(), before, after)
        self.lookup.apply(self.catalog.specs(), before, after)

    def indexes_changed(self) -> None:
        """Forget the index entries; they are rebuilt from the documents when next needed."""
        self.unique.invalidate()
        self.lookup.invalidate()

    def create(self, default_collation: dict[str, Any] | None) -> None:
        """Make the collection exist, empty of indexes but ``_id_``, with this default collation."""
        self.catalog.reset(default_collation)
        self.indexes_changed()
        self.created = True

    def reset(self) -> None:
        """Forget the indexes and existence, as dropping the collection does (documents aside)."""
        self.catalog.reset()
        self.indexes_changed()
        self.created = False
