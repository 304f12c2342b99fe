"""One pass of MongoDB's TTL monitor, run on demand."""

from __future__ import annotations

from collections.abc import Hashable
from datetime import datetime, timedelta, timezone
from typing import Any

from ._collection import InMemoryCollection
from ._indexes import matches, resolve
from ._stored import store_key


def _naive_utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment
    return moment.astimezone(timezone.utc).replace(tzinfo=None)


def _expired(value: Any, threshold: datetime) -> bool:
    """A date, or the earliest date of an array, at or before ``threshold``; other values never expire."""
    dates = [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, datetime)]  # pyright: ignore[reportUnknownVariableType]
    return bool(dates) and min(dates) <= threshold


def expire_documents(collection: InMemoryCollection, *, now: datetime) -> int:
    """Delete what the TTL monitor would delete at ``now`` and return how many documents went.

    For each single-field index with ``expireAfterSeconds``, a document expires when its indexed
    field holds a date (or an array whose earliest date) is at or before
    ``now - expireAfterSeconds``, and it matches the index's ``partialFilterExpression`` if any.
    A naive ``now`` is taken as UTC. The engine never expires documents on its own.
    """
    current = _naive_utc(now)
    doomed: list[Any] = []
    # By the key the store files them under (a document _id made hashable): a list membership
    # test made expiring n documents O(n^2).
    seen: set[Hashable] = set()
    for spec in collection.index_specs():
        ttl = spec.get("expireAfterSeconds")
        if ttl is None or len(spec["key"]) != 1:
            continue
        (field,) = spec["key"]
        threshold = current - timedelta(seconds=float(ttl))
        partial = spec.get("partialFilterExpression")
        for document in collection.stored_documents():
            if partial is not None and not matches(partial, document):
                continue
            values = resolve(document, field.split("."))
            if not any(_expired(value, threshold) for value in values):
                continue
            key = store_key(document["_id"])
            if key not in seen:
                seen.add(key)
                doomed.append(document["_id"])
    if not doomed:
        return 0
    with collection.database.client.journal.batch():  # one synced append in the file-backed mode
        return collection.delete_matching({"_id": {"$in": doomed}})
