"""Storages broken on purpose, each in one way, to show the suite catches it with a clear message.

Each is Agent Framework's ``InMemoryCheckpointStorage`` with one method changed.
"""

from __future__ import annotations

import copy
from datetime import datetime

from agent_framework import InMemoryCheckpointStorage, WorkflowCheckpoint

__all__ = [
    "BROKEN",
    "DeleteAlwaysTrue",
    "ForgetsPendingRequests",
    "LatestIsOldest",
    "ReorderedListing",
    "ResaveDuplicates",
    "SharedObjects",
]


class ReorderedListing(InMemoryCheckpointStorage):
    """Lists newest first (both listings), as a storage sorting by a descending key would."""

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return list(reversed(await super().list_checkpoints(workflow_name=workflow_name)))

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return list(reversed(await super().list_checkpoint_ids(workflow_name=workflow_name)))


class LatestIsOldest(InMemoryCheckpointStorage):
    """get_latest returns the oldest checkpoint: a sort in the wrong direction."""

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        listed = await self.list_checkpoints(workflow_name=workflow_name)
        return min(listed, key=lambda c: datetime.fromisoformat(c.timestamp)) if listed else None


class ResaveDuplicates(InMemoryCheckpointStorage):
    """Keeps every save as a new entry, so a retried save is listed twice."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[WorkflowCheckpoint] = []

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        self.entries.append(copy.deepcopy(checkpoint))
        return await super().save(checkpoint)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        live = set(await super().list_checkpoint_ids(workflow_name=workflow_name))
        return [
            c.checkpoint_id
            for c in self.entries
            if c.workflow_name == workflow_name and c.checkpoint_id in live
        ]


class DeleteAlwaysTrue(InMemoryCheckpointStorage):
    """delete answers True even when there was nothing to delete."""

    async def delete(self, checkpoint_id: str) -> bool:
        await super().delete(checkpoint_id)
        return True


class ForgetsPendingRequests(InMemoryCheckpointStorage):
    """Drops the pending requests on save: a paused run cannot be answered after a resume."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        stripped = copy.deepcopy(checkpoint)
        stripped.pending_request_info_events = {}
        return await super().save(stripped)


class SharedObjects(InMemoryCheckpointStorage):
    """Keeps the caller's object and hands it out again, so changes after save leak into storage."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        self._checkpoints[checkpoint.checkpoint_id] = checkpoint
        return checkpoint.checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        found = self._checkpoints.get(checkpoint_id)
        if found is None:
            return await super().load(checkpoint_id)
        return found


BROKEN: dict[type[InMemoryCheckpointStorage], tuple[str, str]] = {
    ReorderedListing: ("list.save_order", "list_checkpoints gave [7, 6, 5, 4, 3, 2, 1, 0]; saved 0..7"),
    LatestIsOldest: ("get_latest.newest", "returned the checkpoint saved at position 0, not the newest (5)"),
    ResaveDuplicates: ("save.idempotent", "is listed 2 times"),
    DeleteAlwaysTrue: ("delete.missing", "delete of an id never saved did not return False"),
    ForgetsPendingRequests: (
        "workflows.human_in_the_loop",
        "the latest checkpoint holds pending requests []",
    ),
    SharedObjects: (
        "load.copies",
        "after the saved object was changed, the loaded checkpoint is not what was saved",
    ),
}
"""Each broken storage, the check it must fail, and a fragment of that check's message."""
