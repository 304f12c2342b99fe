"""What listings read off stored documents: ids, page positions and summaries, never a payload.

Each reader checks the fields it needs and raises ``MongoDBMappingError`` for a document that
lacks them, so a damaged or foreign document fails loudly instead of being listed on a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from ..errors import MongoDBMappingError
from .documents import as_utc
from .paging import PagePosition, RunPosition
from .queries import COUNTED_FIELD, RETAINED_FIELD
from .results import RUN_COUNT_LIMIT, MongoDBCheckpointSummary, MongoDBRunSummary

__all__ = [
    "checkpoint_id_of",
    "checkpoint_summary_of",
    "page_position_of",
    "run_position_of",
    "run_summary_of",
]


def checkpoint_id_of(document: Mapping[str, Any]) -> str:
    """A checkpoint document's ``checkpoint_id``."""
    checkpoint_id = document.get("checkpoint_id")
    if not isinstance(checkpoint_id, str):
        raise MongoDBMappingError("A stored checkpoint document has no checkpoint_id.")
    return checkpoint_id


def page_position_of(document: Mapping[str, Any]) -> PagePosition:
    """Where a page that ended with this checkpoint document continues."""
    return PagePosition(_sequence_of(document), checkpoint_id_of(document))


def checkpoint_summary_of(document: Mapping[str, Any]) -> MongoDBCheckpointSummary:
    """A checkpoint document's envelope as a summary (``CHECKPOINT_SUMMARY_PROJECTION``)."""
    created_at = document.get("created_at")
    expires_at = document.get("expires_at")
    parent = document.get("parent_checkpoint_id")
    size = document.get("payload_bytes")
    if not isinstance(created_at, datetime) or not (expires_at is None or isinstance(expires_at, datetime)):
        raise MongoDBMappingError("A stored checkpoint document has no creation time, or an invalid expiry.")
    return MongoDBCheckpointSummary(
        checkpoint_id=checkpoint_id_of(document),
        sequence=_sequence_of(document),
        parent_checkpoint_id=parent if isinstance(parent, str) else None,
        created_at=as_utc(created_at),
        expires_at=None if expires_at is None else as_utc(expires_at),
        payload_bytes=_count(size),
    )


def run_summary_of(document: Mapping[str, Any]) -> MongoDBRunSummary:
    """A run page's document: a counter (``RUN_SUMMARY_PROJECTION``) with the count its lookup added."""
    match document:
        case {
            "workflow_name": str() as workflow_name,
            "session_id": str() as session_id,
            "sequence": int() as sequence,
            "allocated_at": datetime() as allocated_at,
        } if not isinstance(sequence, bool):
            pass
        case _:
            raise MongoDBMappingError("A stored run counter document is not a run summary.")
    latest = document.get("latest_checkpoint_id")
    saves = _count(document.get("allocations"))
    retained = _retained_count(document)
    return MongoDBRunSummary(
        workflow_name=workflow_name,
        session_id=session_id,
        latest_checkpoint_id=latest if isinstance(latest, str) else None,
        latest_sequence=int(sequence),
        checkpoint_count=min(retained, RUN_COUNT_LIMIT),
        updated_at=as_utc(allocated_at),
        waiting_for_input=document.get("waiting_for_input") is True,
        saves=int(sequence) if saves is None else saves,
        checkpoint_count_capped=retained > RUN_COUNT_LIMIT,
    )


def _retained_count(document: Mapping[str, Any]) -> int:
    """The count a run page's lookup added: ``[]`` (``$count`` emits nothing for no checkpoints) or
    one ``{"checkpoints": n}``."""
    retained: object = document.get(RETAINED_FIELD)
    if retained == []:
        return 0
    if isinstance(retained, list) and len(cast("list[object]", retained)) == 1:
        counted = cast("list[object]", retained)[0]
        count = (
            _count(cast("Mapping[str, object]", counted).get(COUNTED_FIELD))
            if isinstance(counted, Mapping)
            else None
        )
        if count is not None:
            return count
    raise MongoDBMappingError("A run page holds no checkpoint count for a run.")


def run_position_of(document: Mapping[str, Any]) -> RunPosition:
    """Where a run page that ended with this counter document continues."""
    allocated_at = document.get("allocated_at")
    counter_id = document.get("_id")
    if not isinstance(allocated_at, datetime) or not isinstance(counter_id, str):
        raise MongoDBMappingError("A stored run counter document has no allocation time or id.")
    return RunPosition(allocated_at, counter_id)


def _sequence_of(document: Mapping[str, Any]) -> int:
    sequence = document.get("sequence")
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        raise MongoDBMappingError("A stored checkpoint document has no sequence.")
    return int(sequence)  # a plain int, not bson's Int64


def _count(value: object) -> int | None:
    # Counts come back as int or bson's Int64 (an int subclass) depending on their BSON width,
    # which the server chooses; a bool is not a count.
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return int(value)
    return None
