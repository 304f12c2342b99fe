"""A run's ledger: which of its stored checkpoints a signed storage treats as the run's history.

A signature proves that a holder of a key wrote a document; it cannot prove that the document is
still part of the run. A checkpoint that ``clear_run``, ``delete`` or a ``keep_last`` prune removed
is still signed, so a writer with access to the collection could put it back. The run's counter
document (``sequences.py``) therefore carries a ledger, read by every load of a storage with
signing keys:

* ``run_epoch``: 16 random bytes drawn when the counter is created, copied onto every checkpoint
  of the run and bound by its signature. ``clear_run`` deletes the counter, so the run's next save
  draws a new epoch and no checkpoint from before the clear verifies as part of the run. A run
  without a counter has no live checkpoints.
* ``live_from``: the lowest sequence a load may return, raised (``$max``) by each prune of a
  signed storage before it deletes, so a pruned checkpoint put back stays pruned.
* ``deleted_sequences``: the sequences ``delete`` removed, the newest :data:`MAX_DELETED_RECORDED`,
  recorded before the document is deleted.

A checkpoint below ``live_from`` or among the deleted ones is *not found*, whether its document
was put back or a prune or delete has not finished: queries exclude it on the server, so pages
and ``get_latest`` skip it. A checkpoint of another epoch is refused (``MongoDBIntegrityError``):
it cannot arise from this storage's own operations. A writer who can rewrite the counter too can
still roll a whole run back to an earlier state (``specs/codec.md``, threat model).

Storages without keys keep only the epoch (written by every allocation, never checked): their
loads trust the collection, and they pay no round trip for a ledger.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Final, cast

from pymongo import ReturnDocument

from .._telemetry import count_round_trip
from ..errors import MongoDBIntegrityError, MongoDBPersistenceError, translated_driver_errors
from .documents import PAYLOAD_PROJECTION
from .driver import CheckpointCollection, Document
from .indexes import SIMPLE_COLLATION
from .queries import BY_ID, counter_filter, with_counter
from .scope import CHECKPOINT_KIND, COUNTER_KIND, RunScope
from .signatures import EPOCH_BYTES, EPOCH_FIELD

__all__ = [
    "DELETED_FIELD",
    "LEDGER_PROJECTION",
    "LIVE_FROM_FIELD",
    "MAX_DELETED_RECORDED",
    "LedgerCheck",
    "RunLedger",
    "new_epoch",
    "read_ledger",
    "read_with_ledger",
    "record_deletion",
    "record_live_from",
]

LIVE_FROM_FIELD: Final = "live_from"
DELETED_FIELD: Final = "deleted_sequences"
MAX_DELETED_RECORDED: Final = 1_000
"""Deletions the ledger remembers, newest kept: about 12 KB on the counter at most. A checkpoint
deleted longer ago than that, put back, is live again (``specs/codec.md``)."""
_ID_ONLY: Final[Mapping[str, int]] = {"_id": 1}
LEDGER_PROJECTION: Final[Mapping[str, int]] = {"_id": 0, EPOCH_FIELD: 1, LIVE_FROM_FIELD: 1, DELETED_FIELD: 1}
_PAYLOAD_AND_LEDGER_PROJECTION: Final[Mapping[str, int]] = {
    **PAYLOAD_PROJECTION,
    "_kind": 1,
    LIVE_FROM_FIELD: 1,
    DELETED_FIELD: 1,
}
"""A checkpoint's payload projection plus what tells the counter apart and its ledger (the epoch
field is in both)."""


def new_epoch() -> bytes:
    """A new run lifetime's epoch (what a counter gets when it is created)."""
    return os.urandom(EPOCH_BYTES)


@dataclasses.dataclass(frozen=True, slots=True)
class RunLedger:
    """The run's lifetime and the checkpoints it no longer holds.

    Attributes:
        epoch: The epoch every live checkpoint of the run carries; ``None`` on a counter no
            allocation of this release touched yet.
        live_from: Checkpoints below this sequence were pruned.
        deleted: Sequences of checkpoints ``delete`` removed.
    """

    epoch: bytes | None
    live_from: int = 0
    deleted: frozenset[int] = frozenset()

    def is_live(self, sequence: int) -> bool:
        """Whether a checkpoint with this sequence is still part of the run."""
        return sequence >= self.live_from and sequence not in self.deleted

    def sequence_condition(self) -> dict[str, Any]:
        """The condition on ``sequence`` that keeps only live checkpoints (empty when all are)."""
        condition: dict[str, Any] = {}
        if self.live_from:
            condition["$gte"] = self.live_from
        if self.deleted:
            condition["$nin"] = sorted(self.deleted)
        return condition


@dataclasses.dataclass(frozen=True, slots=True)
class LedgerCheck:
    """What one read of a signed storage holds its documents against: the run's ledger as read
    at the start of the operation, or ``None`` when the run has no counter."""

    ledger: RunLedger | None

    def sequence_condition(self) -> dict[str, Any]:
        """The condition on ``sequence`` a query adds so that only live checkpoints come back."""
        return {} if self.ledger is None else self.ledger.sequence_condition()

    def is_live(self, sequence: int) -> bool:
        """Whether the run still holds the checkpoint with this sequence."""
        return self.ledger is None or self.ledger.is_live(sequence)

    def require_current(self, epoch: bytes | None) -> None:
        """Raise unless a signed document of epoch ``epoch`` belongs to the run's lifetime.

        ``None`` is a document accepted unsigned during a transition: it has no lifetime to check.

        Raises:
            MongoDBIntegrityError: The run has no counter, or another epoch.
        """
        if epoch is None:
            return
        if self.ledger is None:
            raise MongoDBIntegrityError(
                "A signed checkpoint is stored for a run that has no counter: the run was cleared (this "
                "one was put back afterwards) or its counter was deleted by hand, so the checkpoint is "
                "not part of any lifetime of the run. To keep the checkpoints of a run whose counter was "
                "deleted, re-sign them with `agent-framework-mongodb sign-run`."
            )
        if epoch != self.ledger.epoch:
            raise MongoDBIntegrityError(
                "A signed checkpoint belongs to an earlier lifetime of its run: it was stored before "
                "the run was cleared (or its counter deleted) and put back, so it is not loaded."
            )


async def read_ledger(collection: CheckpointCollection, scope: RunScope) -> RunLedger | None:
    """The run's ledger, or ``None`` when the run has no counter (never saved, or cleared)."""
    with translated_driver_errors(operation="read", action="read the run's ledger"):
        count_round_trip()
        document = await collection.find_one(
            counter_filter(scope), LEDGER_PROJECTION, sort=None, collation=SIMPLE_COLLATION
        )
    return None if document is None else ledger_of(document)


async def read_with_ledger(
    collection: CheckpointCollection, scope: RunScope, query: Mapping[str, Any], *, action: str
) -> tuple[Document | None, LedgerCheck]:
    """The one checkpoint ``query`` names by ``_id``, and the run's ledger, in one round trip.

    Raises:
        MongoDBIntegrationError: Translated driver errors.
        MongoDBPersistenceError: The counter holds a malformed ledger.
    """
    with translated_driver_errors(operation="read", action=action):
        count_round_trip()  # find() sends nothing; to_list() sends the query, once
        cursor = collection.find(
            with_counter(scope, query),
            _PAYLOAD_AND_LEDGER_PROJECTION,
            sort=BY_ID,
            limit=2,
            collation=SIMPLE_COLLATION,
        )
        documents = await cursor.to_list(2)
    checkpoint = counter = None
    for document in documents:
        kind = document.pop("_kind", None)
        if kind == COUNTER_KIND:
            counter = document
        elif kind == CHECKPOINT_KIND:
            checkpoint = document
    return checkpoint, LedgerCheck(None if counter is None else ledger_of(counter))


def ledger_of(document: Mapping[str, Any]) -> RunLedger:
    """Read the ledger fields of a counter document.

    Raises:
        MongoDBPersistenceError: A ledger field holds a value no storage writes.
    """
    epoch = document.get(EPOCH_FIELD)
    live_from = document.get(LIVE_FROM_FIELD, 0)
    deleted = cast(object, document.get(DELETED_FIELD, []))
    sequences = cast("list[object]", deleted) if isinstance(deleted, list) else None
    if (
        not (epoch is None or (type(epoch) is bytes and len(epoch) == EPOCH_BYTES))
        or not _is_count(live_from)
        or sequences is None
        or len(sequences) > MAX_DELETED_RECORDED
        or not all(_is_count(item) for item in sequences)
    ):
        raise MongoDBPersistenceError("The run's counter holds a ledger no storage writes.")
    return RunLedger(epoch, int(live_from), frozenset(int(cast(int, item)) for item in sequences))


async def record_live_from(collection: CheckpointCollection, scope: RunScope, sequence: int) -> None:
    """Raise the run's ``live_from`` to ``sequence`` (a prune's cut-off), before it deletes.

    Updates nothing when the counter is gone: a run without a counter has no live checkpoints.
    The caller translates driver errors.
    """
    await _update_counter(collection, scope, {"$max": {LIVE_FROM_FIELD: sequence}})


async def record_deletion(collection: CheckpointCollection, scope: RunScope, sequence: int) -> None:
    """Record that the checkpoint with ``sequence`` is deleted, before its document is.

    The caller translates driver errors.
    """
    await _update_counter(
        collection, scope, {"$push": {DELETED_FIELD: {"$each": [sequence], "$slice": -MAX_DELETED_RECORDED}}}
    )


async def _update_counter(
    collection: CheckpointCollection, scope: RunScope, update: Mapping[str, Any]
) -> None:
    # find_one_and_update, not update_one: the storage's collection protocol stays pymongo's
    # smallest surface it needs; the reply is the counter's _id only.
    count_round_trip()
    await collection.find_one_and_update(
        counter_filter(scope),
        update,
        _ID_ONLY,
        upsert=False,
        return_document=ReturnDocument.BEFORE,
        collation=SIMPLE_COLLATION,
    )


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
