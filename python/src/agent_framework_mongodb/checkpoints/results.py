"""Values the storage returns beyond Agent Framework's own types."""

from __future__ import annotations

import dataclasses

from agent_framework import WorkflowCheckpoint

__all__ = ["MongoDBCheckpointClearResult", "MongoDBCheckpointPage"]


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
class MongoDBCheckpointClearResult:
    """What ``clear_run`` removed.

    Attributes:
        checkpoints_deleted: Checkpoint documents of the run that were deleted.
        counter_deleted: 1 if the run's sequence counter was deleted, else 0.
        acknowledged: Always true: a storage refuses an unacknowledged write concern at
            construction, so both deletes were acknowledged. Kept for compatibility.
    """

    checkpoints_deleted: int
    counter_deleted: int
    acknowledged: bool
