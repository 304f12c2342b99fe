"""The entries of a collection's unique indexes, maintained write by write.

Checking a write against every stored document made each insert cost a scan of the collection,
so seeding a few thousand documents took minutes. A unique index's entries each belong to exactly
one stored document, so a write collides exactly when the entries it adds meet the index's set.
The sets change with each insert, update and delete, and are rebuilt from the stored documents
when the indexes themselves change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ._indexes import index_entries

__all__ = ["UniqueKeys"]

Spec = Mapping[str, Any]
Document = Mapping[str, Any]


class UniqueKeys:
    """Per unique index, the set of entries the stored documents contribute."""

    def __init__(self, stored: Callable[[], Iterable[Document]]) -> None:
        self._stored = stored
        self._keys: dict[str, set[tuple[Any, ...]]] | None = None

    def invalidate(self) -> None:
        """Forget the sets; the next check rebuilds them (after index changes)."""
        self._keys = None

    def collision(self, specs: Sequence[Spec], before: Document | None, after: Document) -> Spec | None:
        """The first unique index on which replacing ``before`` by ``after`` would collide."""
        keys = self._current(specs)
        for spec in specs:
            added = index_entries(spec, after)
            if before is not None:
                added -= index_entries(spec, before)
            if added & keys[spec["name"]]:
                return spec
        return None

    def apply(self, specs: Sequence[Spec], before: Document | None, after: Document | None) -> None:
        """Record a write that happened: ``before`` left the collection, ``after`` entered it."""
        if self._keys is None:
            return
        for spec in specs:
            entries = self._keys.setdefault(spec["name"], set())
            if before is not None:
                entries -= index_entries(spec, before)
            if after is not None:
                entries |= index_entries(spec, after)

    def _current(self, specs: Sequence[Spec]) -> dict[str, set[tuple[Any, ...]]]:
        if self._keys is None or any(spec["name"] not in self._keys for spec in specs):
            documents = list(self._stored())
            self._keys = {
                spec["name"]: {entry for document in documents for entry in index_entries(spec, document)}
                for spec in specs
            }
        return self._keys
