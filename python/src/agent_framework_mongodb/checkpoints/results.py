"""Values the storage returns beyond Agent Framework's own types."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from agent_framework import WorkflowCheckpoint

__all__ = [
    "MongoDBCheckpointClearResult",
    "MongoDBCheckpointPage",
    "MongoDBCheckpointSummary",
    "MongoDBCheckpointSummaryPage",
    "MongoDBRunPage",
    "MongoDBRunSummary",
]


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
    """One run as ``list_runs`` reports it, read from the run's counter document alone.

    Every field describes the run's latest sequence *allocation*, which each save makes before
    it inserts (specs/storage.md, "Run discovery").

    Attributes:
        workflow_name: The run's workflow.
        session_id: The run's session; ``storage.for_session(session_id)`` (same workflow) or
            ``storage.for_workflow(workflow_name, session_id)`` opens it.
        latest_checkpoint_id: The checkpoint the latest allocation was for. It is stored unless
            that save failed after allocating; an identical retry names the stored checkpoint.
            ``None`` for a counter no save has updated since summaries were introduced.
        latest_sequence: The latest allocated sequence: at least the greatest stored one, and
            that checkpoint's sequence unless the save failed or was an identical retry.
        checkpoint_count: Sequence allocations since the counter was created (an upper bound on
            the checkpoints saved since: failed saves, identical retries, recoveries, deletions
            and expiries are not subtracted). Counts from the counter's sequence if it predates
            the field.
        updated_at: The server's time of the latest allocation (UTC).
        waiting_for_input: Whether the latest allocation's checkpoint holds pending request-info
            events (``WorkflowCheckpoint.pending_request_info_events`` non-empty).
    """

    workflow_name: str
    session_id: str
    latest_checkpoint_id: str | None
    latest_sequence: int
    checkpoint_count: int
    updated_at: datetime
    waiting_for_input: bool


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
