"""The collection's indexes: their definitions, how to create them, and how to check them.

Every query the storage sends states, by equality, the scope prefix and the document kind, and
passes the simple collation; these definitions are built so each such query has an index whose
partial filter it provably satisfies and whose keys serve its sort without an in-memory sort.

- Partial filters use only ``_kind`` equality, which every query repeats. A ``$type`` or
  ``$exists`` predicate that queries do not state would make the index ineligible for them.
- TTL indexes are single-field: MongoDB does not expire documents through a compound index
  (https://www.mongodb.com/docs/manual/core/index-ttl/). The checkpoint and counter TTL indexes
  share the key ``expires_at`` and differ by partial filter, which MongoDB allows from 5.0
  (https://www.mongodb.com/docs/manual/core/index-partial/#restrictions).
- All indexes use the simple collation, and every query passes it: a collection created with a
  default collation would otherwise apply that collation, and an index with another collation
  cannot serve string comparisons.
- A collection created with a non-simple default collation cannot hold checkpoints: its ``_id_``
  index takes that collation, which no later command can change, so the storage's simple-collation
  ``_id`` lookups (the counter allocation, loads, the idempotent insert) could not use it and
  would scan the collection (https://www.mongodb.com/docs/manual/reference/collation/#collation-and-index-use,
  and ``db.createCollection``'s ``collation`` option:
  https://www.mongodb.com/docs/manual/reference/method/db.createCollection/). ``ID_INDEX_NAME``
  is checked for it before anything is created.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pymongo import ASCENDING, IndexModel

from .scope import CHECKPOINT_KIND, CHUNK_KIND, COUNTER_KIND

__all__ = [
    "CHECKPOINT_INDEXES",
    "CHUNK_EXPIRATION_INDEX",
    "CHUNK_SCOPE_INDEX",
    "COUNTER_EXPIRATION_INDEX",
    "EXPIRATION_INDEX",
    "IDENTITY_INDEX",
    "ID_INDEX_NAME",
    "LINEAGE_INDEX",
    "RUN_ACTIVITY_INDEX",
    "SCOPE_PREFIX",
    "SEQUENCE_INDEX",
    "SIMPLE_COLLATION",
    "IndexSpec",
    "collation_conflict",
    "index_differences",
]

SIMPLE_COLLATION: Mapping[str, str] = {"locale": "simple"}

ID_INDEX_NAME = "_id_"
"""The index MongoDB builds on ``_id``; it inherits the collection's default collation."""

SCOPE_PREFIX: tuple[str, ...] = ("scope_discriminator", "workflow_name", "session_id")
"""Key prefix of every scoped index; every scoped query states these fields by equality."""

_CHECKPOINTS_ONLY: Mapping[str, str] = {"_kind": CHECKPOINT_KIND}
_COUNTERS_ONLY: Mapping[str, str] = {"_kind": COUNTER_KIND}
_CHUNKS_ONLY: Mapping[str, str] = {"_kind": CHUNK_KIND}


@dataclasses.dataclass(frozen=True, slots=True)
class IndexSpec:
    """One required index, by name, with every option that must match."""

    name: str
    keys: tuple[str, ...]
    partial_filter: Mapping[str, Any]
    unique: bool = False
    expire_after_seconds: int | None = None

    def model(self) -> IndexModel:
        """The pymongo definition ``create_indexes`` sends."""
        options: dict[str, Any] = {
            "name": self.name,
            "partialFilterExpression": dict(self.partial_filter),
            "collation": dict(SIMPLE_COLLATION),
        }
        if self.unique:
            options["unique"] = True
        if self.expire_after_seconds is not None:
            options["expireAfterSeconds"] = self.expire_after_seconds
        return IndexModel([(key, ASCENDING) for key in self.keys], **options)


IDENTITY_INDEX = IndexSpec(
    name="checkpoint_scope_identity",
    keys=(*SCOPE_PREFIX, "checkpoint_id"),
    partial_filter=_CHECKPOINTS_ONLY,
    unique=True,
)
SEQUENCE_INDEX = IndexSpec(
    name="checkpoint_scope_sequence",
    keys=(*SCOPE_PREFIX, "sequence"),
    partial_filter=_CHECKPOINTS_ONLY,
    unique=True,
)
"""Serves pages, ``get_latest`` and the retained-maximum read; sequences are unique per run, so
ordering by sequence alone is the storage's (sequence, checkpoint_id) order."""

LINEAGE_INDEX = IndexSpec(
    name="checkpoint_scope_lineage",
    keys=(*SCOPE_PREFIX, "parent_checkpoint_id"),
    partial_filter=_CHECKPOINTS_ONLY,
)
EXPIRATION_INDEX = IndexSpec(
    name="checkpoint_expiration",
    keys=("expires_at",),
    partial_filter=_CHECKPOINTS_ONLY,
    expire_after_seconds=0,
)
COUNTER_EXPIRATION_INDEX = IndexSpec(
    name="checkpoint_counter_expiration",
    keys=("expires_at",),
    partial_filter=_COUNTERS_ONLY,
    expire_after_seconds=0,
)
RUN_ACTIVITY_INDEX = IndexSpec(
    name="checkpoint_run_activity",
    keys=("tenant_id", "application_id", "allocated_at", "_id"),
    partial_filter=_COUNTERS_ONLY,
)
"""Serves ``list_runs``: counters of one tenant and application, walked backwards for newest
activity first, with ``_id`` as the cursor's tiebreaker. A workflow filter is a residual filter."""

CHUNK_SCOPE_INDEX = IndexSpec(
    name="checkpoint_chunk_scope",
    keys=(*SCOPE_PREFIX, "touched_at"),
    partial_filter=_CHUNKS_ONLY,
)
"""Serves ``clear_run``'s and the collection's deletes of a run's chunks (scope equality, then a
range on ``touched_at``). Loads and saves name chunks by ``_id`` and use ``_id_``."""
CHUNK_EXPIRATION_INDEX = IndexSpec(
    name="checkpoint_chunk_expiration",
    keys=("expires_at",),
    partial_filter=_CHUNKS_ONLY,
    expire_after_seconds=0,
)
"""Chunks expire like checkpoints; each save moves a chunk's ``expires_at`` only later."""
CHECKPOINT_INDEXES: tuple[IndexSpec, ...] = (
    IDENTITY_INDEX,
    SEQUENCE_INDEX,
    LINEAGE_INDEX,
    EXPIRATION_INDEX,
    COUNTER_EXPIRATION_INDEX,
    RUN_ACTIVITY_INDEX,
    CHUNK_SCOPE_INDEX,
    CHUNK_EXPIRATION_INDEX,
)


def index_differences(spec: IndexSpec, listed: Mapping[str, Any]) -> list[str]:
    """Name each way an index document from ``list_indexes`` differs from ``spec``."""
    differences: list[str] = []
    keys = listed.get("key", {})
    if list(keys.items()) != [(key, ASCENDING) for key in spec.keys]:
        differences.append("keys")
    if bool(listed.get("unique", False)) != spec.unique:
        differences.append("unique")
    if _plain(listed.get("partialFilterExpression")) != dict(spec.partial_filter):
        differences.append("partialFilterExpression")
    if listed.get("expireAfterSeconds") != spec.expire_after_seconds:
        differences.append("expireAfterSeconds")
    if _collation_locale(listed.get("collation")) != SIMPLE_COLLATION["locale"]:
        differences.append("collation")
    return differences


def collation_conflict(listed: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why the collection cannot be used, if its ``_id_`` index (from ``list_indexes``, by name)
    has a non-simple collation; ``None`` when it has none or the collection does not exist."""
    id_index = listed.get(ID_INDEX_NAME)
    if id_index is None:
        return None
    locale = _collation_locale(id_index.get("collation"))
    if locale == SIMPLE_COLLATION["locale"]:
        return None
    return (
        f"The collection was created with a default collation (locale {locale!r}), which its _id "
        "index inherits, so the storage's simple-collation lookups by _id cannot use that index. "
        "A collection's default collation cannot be changed: use a collection created without one, "
        "then run ensure_indexes()."
    )


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return value


def _collation_locale(collation: object) -> object:
    # The server omits the collation of an index built with the simple collation on a
    # collection without a default collation; both spellings mean the same index.
    if collation is None:
        return SIMPLE_COLLATION["locale"]
    if isinstance(collation, Mapping):
        return collation.get("locale")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return collation
