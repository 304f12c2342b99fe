"""Which writes pymongo retries after a network error: its own rules, per method.

pymongo decides when it sends (pymongo 4.20): ``insert_one``, ``update_one``, ``delete_one`` and
``find_one_and_update`` pass ``retryable`` true to ``_retryable_write`` when acknowledged
(``_insert_one``, ``_update_retryable``, ``_delete_retryable``, ``_find_and_modify`` in
pymongo/asynchronous/collection.py), ``update_many`` and ``delete_many`` pass false
(``multi``), and a bulk (``bulk_write``, ``insert_many``) is retryable unless a statement updates
or deletes many documents: ``add_update`` with ``multi`` and ``add_delete`` with limit 0 clear
``is_retryable`` (pymongo/bulk_shared.py). An unacknowledged write is never retried
(``execute_no_results``), and ``retryWrites=false`` turns retries off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

SINGLE_DOCUMENT_WRITES: Final = frozenset(
    {"insert_one", "insert_many", "update_one", "delete_one", "find_one_and_update", "bulk_write"}
)
"""Retryable unless a bulk holds a multi-document statement."""


@dataclass(frozen=True)
class WriteAttempts:
    """How pymongo sends one write: whether it retries it, and whether it reads a reply."""

    retryable: bool
    acknowledged: bool


def write_attempts(
    operation: str, *, acknowledged: bool, retry_writes: bool, multi: bool = False
) -> WriteAttempts:
    """pymongo's rule for ``operation``; ``multi``: a bulk holding an ``UpdateMany``/``DeleteMany``."""
    retryable = operation in SINGLE_DOCUMENT_WRITES and not multi and acknowledged and retry_writes
    return WriteAttempts(retryable, acknowledged)
