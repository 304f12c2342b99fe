"""Values the storage returns beyond Agent Framework's own types."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Final

from agent_framework import WorkflowCheckpoint

__all__ = [
    "RUN_COUNT_LIMIT",
    "MongoDBCheckpointClearResult",
    "MongoDBCheckpointPage",
    "MongoDBCheckpointSummary",
    "MongoDBCheckpointSummaryPage",
    "MongoDBRunPage",
    "MongoDBRunSummary",
]

RUN_COUNT_LIMIT: Final = 10_000
"""The most checkpoints a run summary counts: a page of runs reads at most ``limit`` times one more
than this many index entries, however long its runs are (``MongoDBRunSummary.checkpoint_count_capped``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBCheckpointPage:
    """One bounded page of a run's checkpoints, in ``(sequence, checkpoint_id)`` order.

    Attributes:
        checkpoints: At most the requested ``limit`` checkpoints.
        next_cursor: Pass to ``list_checkpoint_page`` for the next page; ``None`` when this
            page was not full. A full page always has a cursor, whose page may be empty.
    """

    checkpoints: tuple[WorkflowCheckpoint, ...]
    next_cursor: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBCheckpointSummary:
    """One stored checkpoint as ``list_checkpoint_summaries`` reports it, from its envelope alone.

    Nothing here comes from the payload, which is never fetched or decoded.

    Attributes:
        checkpoint_id: The checkpoint's id; ``load(checkpoint_id)`` restores it.
        sequence: Its place in the run: greater for a later save.
        parent_checkpoint_id: The checkpoint it continues (``previous_checkpoint_id``), if any.
        created_at: When the storage built its document, just before the save's first round
            trip (UTC, millisecond precision).
        expires_at: When MongoDB's TTL monitor may remove it (UTC); ``None`` for a permanent one.
        payload_bytes: The size of its stored payload, as the save recorded it; ``None`` for a
            checkpoint saved before the storage recorded sizes.
    """

    checkpoint_id: str
    sequence: int
    parent_checkpoint_id: str | None
    created_at: datetime
    expires_at: datetime | None
    payload_bytes: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBCheckpointSummaryPage:
    """One bounded page of a run's checkpoint summaries, in ``(sequence, checkpoint_id)`` order.

    Attributes:
        checkpoints: At most the requested ``limit`` summaries.
        next_cursor: Pass to ``list_checkpoint_summaries`` (or ``list_checkpoint_page``: the two
            walk the same order with the same cursors) for the next page; ``None`` when this page
            was not full. A full page always has a cursor, whose page may be empty.
    """

    checkpoints: tuple[MongoDBCheckpointSummary, ...]
    next_cursor: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBCheckpointClearResult:
    """What ``clear_run`` removed.

    Attributes:
        checkpoints_deleted: Checkpoint documents of the run that were deleted.
        counter_deleted: 1 if the run's sequence counter was deleted, else 0.
        acknowledged: Always true: a storage refuses an unacknowledged write concern at
            construction, so every delete was acknowledged. Kept for compatibility.
        chunks_deleted: Chunk documents of the run's chunked checkpoints that were deleted.
    """

    checkpoints_deleted: int
    counter_deleted: int
    acknowledged: bool
    chunks_deleted: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBRunSummary:
    """One run as ``list_runs`` reports it: its counter document, and a count of its checkpoints.

    The identity, the latest checkpoint, ``saves``, ``updated_at`` and ``waiting_for_input`` describe
    the run's latest sequence *allocation*, which each save makes before it inserts; the count is
    of the checkpoint documents the run holds as the same request read them (specs/storage.md,
    "Run discovery").

    Attributes:
        workflow_name: The run's workflow.
        session_id: The run's session; ``catalog.for_session(workflow_name, session_id)``,
            ``storage.for_session(session_id)`` (same workflow) or
            ``storage.for_workflow(workflow_name, session_id)`` opens it.
        latest_checkpoint_id: The checkpoint the latest allocation was for. It is stored unless
            that save failed after allocating; an identical retry names the stored checkpoint.
            ``None`` for a counter no save has updated since summaries were introduced.
        latest_sequence: The latest allocated sequence: at least the greatest stored one, and
            that checkpoint's sequence unless the save failed or was an identical retry.
        checkpoint_count: The checkpoints the run retains: its checkpoint documents in the
            collection when the listing read them, after ``keep_last`` prunes, ``delete`` and
            whatever the TTL monitor has removed (an expired checkpoint counts until the monitor,
            which runs every 60 seconds, removes it). Counted up to :data:`RUN_COUNT_LIMIT`; see
            ``checkpoint_count_capped``.
        updated_at: The server's time of the latest allocation (UTC).
        waiting_for_input: Whether the latest allocation's checkpoint holds pending request-info
            events (``WorkflowCheckpoint.pending_request_info_events`` non-empty).
        saves: The saves the run's counter has counted since it was created: one per ``save`` call
            that allocated a number, identical retries and saves that failed after allocating
            included, however often the save re-allocated. Counts from the counter's sequence if
            the counter predates the count.
        checkpoint_count_capped: The run holds more than :data:`RUN_COUNT_LIMIT` checkpoints, so
            ``checkpoint_count`` is that limit, a lower bound.
    """

    workflow_name: str
    session_id: str
    latest_checkpoint_id: str | None
    latest_sequence: int
    checkpoint_count: int
    updated_at: datetime
    waiting_for_input: bool
    saves: int
    checkpoint_count_capped: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBRunPage:
    """One bounded page of runs, newest activity first.

    Attributes:
        runs: At most the requested ``limit`` summaries.
        next_cursor: Pass to ``list_runs`` (same filter) for the next page; ``None`` when this
            page was not full. A full page always has a cursor, whose page may be empty.
    """

    runs: tuple[MongoDBRunSummary, ...]
    next_cursor: str | None
