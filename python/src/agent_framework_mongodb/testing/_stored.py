"""mongomock_ng's documents of one collection, reached by ``_id`` without a scan.

mongomock_ng answers ``replace_one({"_id": ...})`` and ``delete_one({"_id": ...})`` by matching the
filter against every stored document, so each single-document write cost a scan of the
collection. Its store is an insertion-ordered mapping keyed by ``_id`` (a document-valued ``_id``
wrapped in its ``hashdict``); the engine reads and writes that mapping directly once a document
has passed every check, and still inserts through ``insert_one`` so mongomock_ng validates new
documents as before.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Any

from mongomock_ng import helpers as _helpers

from ._codec import as_mapping

__all__ = ["DocumentStore", "store_key"]

_hashdict: Any = getattr(_helpers, "hashdict")  # noqa: B009 - untyped module


def store_key(document_id: Any) -> Hashable:
    """The key mongomock_ng files a document under: its ``_id``, a document one made hashable."""
    mapping = as_mapping(document_id)
    return _hashdict(mapping) if mapping is not None else document_id  # type: ignore[no-any-return]


class DocumentStore:
    """The stored documents of one mongomock_ng collection, in natural (insertion) order."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    @property
    def _documents(self) -> Any:
        # mongomock_ng's CollectionStore; looked up each time, as dropping the database replaces it.
        return self._backend._store

    def get(self, key: Hashable) -> dict[str, Any]:
        """The stored document itself (not a copy) filed under ``key``."""
        return self._documents[key]  # type: ignore[no-any-return]

    def insert(self, document: dict[str, Any]) -> None:
        """Insert through mongomock_ng, which validates the document and stores it last."""
        self._backend.insert_one(document)

    def replace(self, document: dict[str, Any]) -> None:
        """Replace the document with the same ``_id`` in place, keeping its natural position."""
        self._documents[store_key(document["_id"])] = document

    def delete(self, document: Mapping[str, Any]) -> None:
        del self._documents[store_key(document["_id"])]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The stored documents themselves, in natural order (a snapshot of the order)."""
        return iter(list(self._documents.documents))

    def __len__(self) -> int:
        return len(self._documents)

    def drop(self) -> None:
        self._backend.drop()
