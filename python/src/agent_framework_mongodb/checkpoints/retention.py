"""``keep_last``: after a save, delete the run's checkpoints older than its newest ``keep_last``.

A prune is two round trips through the scoped sequence index (``checkpoint_scope_sequence``):
one projected ``find_one`` walks the index backwards, skipping ``keep_last - 1`` keys, to the
``keep_last``-th newest sequence; one ``delete_many`` removes the run's checkpoints below it. With
fewer than ``keep_last`` stored, the read finds nothing and the prune ends after one round trip.
Reading the cut-off, rather than deleting below ``saved - keep_last``, keeps exactly the newest
``keep_last`` although sequences have gaps (an identical retry or a collision spends a number;
ADR 0006).

The cut-off never passes the sequence of the checkpoint the save returns, so a save never removes
what it stored, even when concurrent saves inserted higher sequences meanwhile. Saves prune only
on every ``prune_period``-th sequence number, so the cost is amortised; see
docs/adr/0012-keep-last.md for the bound, the races and the failure policy.
"""

from __future__ import annotations

from .._telemetry import count_round_trip
from ..errors import translated_driver_errors
from .driver import CheckpointCollection
from .indexes import SIMPLE_COLLATION
from .ledger import record_live_from
from .queries import DESCENDING_SEQUENCE, SEQUENCE_PROJECTION, older_than_filter, run_filter
from .scope import RunScope
from .sequences import sequence_of

__all__ = ["is_prune_due", "prune_run"]


def is_prune_due(allocated: int, period: int) -> bool:
    """Whether the save that allocated ``allocated`` prunes: one number in every ``period``.

    Decided by the number, not by a per-storage count, so every writer of a run agrees and a
    restarted worker keeps the rhythm; an identical retry prunes on its number too.
    """
    return allocated % period == 0


async def prune_run(
    collection: CheckpointCollection,
    scope: RunScope,
    *,
    keep_last: int,
    protected: int,
    record_cutoff: bool = False,
) -> int:
    """Delete the run's checkpoints older than its newest ``keep_last``, never ``protected`` or above.

    With ``record_cutoff`` (a signed storage), the cut-off is first recorded in the run's ledger
    (``ledger.py``), one round trip more, so a pruned checkpoint put back stays pruned.
    Returns how many were deleted. Driver errors are translated (``MongoDBIntegrationError``).
    """
    with translated_driver_errors(operation="read", action="find the keep_last cut-off"):
        count_round_trip()
        oldest_kept = await collection.find_one(
            run_filter(scope),
            SEQUENCE_PROJECTION,
            sort=DESCENDING_SEQUENCE,
            skip=keep_last - 1,
            collation=SIMPLE_COLLATION,
        )
    if oldest_kept is None:
        return 0
    cutoff = min(sequence_of(oldest_kept), protected)
    with translated_driver_errors(operation="write", action="delete checkpoints beyond keep_last"):
        if record_cutoff:
            await record_live_from(collection, scope, cutoff)
        count_round_trip()
        result = await collection.delete_many(older_than_filter(scope, cutoff), collation=SIMPLE_COLLATION)
    return result.deleted_count
