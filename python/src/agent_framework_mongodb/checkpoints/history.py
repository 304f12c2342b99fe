"""What changed between two checkpoints, and a run's checkpoints walked with what each one changed.

A diff never holds a value of the checkpoints: only what the CLI's ``show`` prints of one by
default, which is names (state keys, executor ids, message sources, request ids), type names,
sizes (the bytes a value pickles to, as the codec stores it) and counts. A value "changed" when it
compares unequal to the other checkpoint's value of the same name.

:func:`diff_checkpoints` compares two decoded checkpoints; :func:`checkpoint_history` walks a
bound storage's run oldest first, one page at a time, comparing each checkpoint with the one
before it in the run's order.
"""

from __future__ import annotations

import dataclasses
import pickle
import types
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from agent_framework import WorkflowCheckpoint

if TYPE_CHECKING:
    from .storage import MongoDBCheckpointStorage

__all__ = [
    "EXECUTOR_STATE_KEY",
    "MongoDBCheckpointDiff",
    "MongoDBHistoryEntry",
    "MongoDBMessageCountChange",
    "MongoDBPendingRequestChange",
    "MongoDBPendingRequestSummary",
    "MongoDBValueChange",
    "MongoDBValueSummary",
    "checkpoint_history",
    "diff_checkpoints",
    "pending_request_summary",
    "value_summary",
]

EXECUTOR_STATE_KEY: Final = "_executor_state"
"""Where Agent Framework keeps each executor's state in ``WorkflowCheckpoint.state``."""

ValueChangeKind = Literal["added", "removed", "changed", "unchanged"]
RequestChangeKind = Literal["added", "resolved", "unchanged"]


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBValueSummary:
    """What may be reported of a value: its type's name and size, never the value.

    Attributes:
        type_name: The value's class name (``type(value).__name__``).
        size: The bytes the value pickles to (protocol 5, as the codec stores it); -1 if it
            does not pickle.
    """

    type_name: str
    size: int

    def to_dict(self) -> dict[str, object]:
        return {"type": self.type_name, "bytes": self.size}


def value_summary(value: object) -> MongoDBValueSummary:
    """The type name and pickled size of ``value``."""
    try:
        size = len(pickle.dumps(value, protocol=5))
    except Exception:  # a size is informative only: an unpicklable value is marked -1
        size = -1
    return MongoDBValueSummary(type(value).__name__, size)


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBValueChange:
    """One state key or executor state, compared between two checkpoints.

    Attributes:
        name: The state key, or the executor's id.
        change: ``added`` (only in the later checkpoint), ``removed`` (only in the earlier one),
            ``changed`` (in both, comparing unequal) or ``unchanged``.
        before: The earlier checkpoint's value's type and size; ``None`` when it has none.
        after: The later checkpoint's; ``None`` when it has none.
    """

    name: str
    change: ValueChangeKind
    before: MongoDBValueSummary | None
    after: MongoDBValueSummary | None

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "change": self.change,
            "before": None if self.before is None else self.before.to_dict(),
            "after": None if self.after is None else self.after.to_dict(),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBMessageCountChange:
    """The in-flight messages of one source (an executor, or another sender) in two checkpoints.

    Attributes:
        source: The key of ``WorkflowCheckpoint.messages``.
        before: How many the earlier checkpoint holds (0 when the source is absent).
        after: How many the later checkpoint holds (0 when the source is absent).
    """

    source: str
    before: int
    after: int

    @property
    def delta(self) -> int:
        """``after - before``: messages added (positive) or removed (negative)."""
        return self.after - self.before

    def to_dict(self) -> dict[str, object]:
        return {"source": self.source, "before": self.before, "after": self.after, "delta": self.delta}


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBPendingRequestSummary:
    """What may be reported of a pending request: what it asks for and what answer it expects, by
    class name, who asked, and its data's class, size and field names; never a value.

    Attributes:
        event_type: The pending event's class name (``WorkflowEvent`` for a ``request_info`` event).
        request_type: The class name of the request (the event's ``request_type``, else its data's
            class); ``None`` when the event carries neither.
        response_type: The class name of the answer it expects (``response_type``); ``None``
            when the event names none.
        source_executor_id: The executor that asked; ``None`` when the event names none.
        data: The request data's class name and pickled size; ``None`` when the event has no data.
        data_fields: The data's field names, sorted: a dataclass's or a pydantic model's fields,
            or the identifier-like string keys of a ``dict`` or an instance's ``__dict__``.
            Keys that are not identifiers may be data themselves, so they are left out.
    """

    event_type: str
    request_type: str | None = None
    response_type: str | None = None
    source_executor_id: str | None = None
    data: MongoDBValueSummary | None = None
    data_fields: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "event_type": self.event_type,
            "request_type": self.request_type,
            "response_type": self.response_type,
            "source_executor_id": self.source_executor_id,
            "data": None if self.data is None else {**self.data.to_dict(), "fields": list(self.data_fields)},
        }


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBPendingRequestChange:
    """One pending request (``pending_request_info_events``) compared between two checkpoints.

    Attributes:
        request_id: The request's id.
        change: ``added`` (pending only in the later checkpoint), ``resolved`` (pending only in
            the earlier one) or ``unchanged`` (pending in both).
        request: What the request is, from the later checkpoint that holds it (the earlier one
            for a resolved request).
    """

    request_id: str
    change: RequestChangeKind
    request: MongoDBPendingRequestSummary

    @property
    def event_type(self) -> str:
        """The pending event's class name (``request.event_type``)."""
        return self.request.event_type

    @property
    def request_type(self) -> str | None:
        """The request's class name (``request.request_type``)."""
        return self.request.request_type

    def to_dict(self) -> dict[str, object]:
        return {"request_id": self.request_id, "change": self.change, **self.request.to_dict()}


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBCheckpointDiff:
    """What differs between an earlier and a later checkpoint (names, types, sizes, counts).

    Each tuple is in name order. A diff from :func:`diff_checkpoints` lists every name of either
    checkpoint, ``unchanged`` ones too (side by side); :meth:`changes_only` drops those.

    Attributes:
        before_checkpoint_id: The earlier checkpoint; ``None`` when there is none (the first of a
            run, compared with nothing: everything in it is ``added``).
        after_checkpoint_id: The later checkpoint.
        iteration_before: The earlier checkpoint's ``iteration_count``; ``None`` without one.
        iteration_after: The later checkpoint's ``iteration_count``.
        state: The state keys, except the executors' states (``_executor_state``).
        executors: Each executor's state.
        messages: The in-flight messages of each source, counted.
        pending_requests: The pending requests, by id.
    """

    before_checkpoint_id: str | None
    after_checkpoint_id: str
    iteration_before: int | None
    iteration_after: int
    state: tuple[MongoDBValueChange, ...]
    executors: tuple[MongoDBValueChange, ...]
    messages: tuple[MongoDBMessageCountChange, ...]
    pending_requests: tuple[MongoDBPendingRequestChange, ...]

    @property
    def has_changes(self) -> bool:
        """Whether anything differs, the iteration count included."""
        return (
            self.iteration_before != self.iteration_after
            or any(change.change != "unchanged" for change in (*self.state, *self.executors))
            or any(count.delta for count in self.messages)
            or any(request.change != "unchanged" for request in self.pending_requests)
        )

    def changes_only(self) -> MongoDBCheckpointDiff:
        """This diff without its ``unchanged`` entries."""
        return dataclasses.replace(
            self,
            state=tuple(change for change in self.state if change.change != "unchanged"),
            executors=tuple(change for change in self.executors if change.change != "unchanged"),
            messages=tuple(count for count in self.messages if count.delta),
            pending_requests=tuple(
                request for request in self.pending_requests if request.change != "unchanged"
            ),
        )

    def to_dict(self) -> dict[str, object]:
        """The diff as JSON-ready values."""
        return {
            "before_checkpoint_id": self.before_checkpoint_id,
            "after_checkpoint_id": self.after_checkpoint_id,
            "iteration_before": self.iteration_before,
            "iteration_after": self.iteration_after,
            "state": [change.to_dict() for change in self.state],
            "executors": [change.to_dict() for change in self.executors],
            "messages": [count.to_dict() for count in self.messages],
            "pending_requests": [request.to_dict() for request in self.pending_requests],
        }


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBHistoryEntry:
    """One checkpoint of a run's history, with what changed since the one before it.

    Attributes:
        checkpoint_id: The checkpoint's id.
        previous_checkpoint_id: The checkpoint it names as its parent, if any. Usually the one
            before it in the run; ``diff.before_checkpoint_id`` says which one it was compared with.
        sequence: Its place in the run (greater for a later save); ``None`` if its envelope was
            not found beside it (removed while the history was read).
        created_at: When the storage built its document (UTC); ``None`` as for ``sequence``.
        timestamp: The checkpoint's own ``timestamp`` (ISO 8601, set by Agent Framework).
        iteration_count: The checkpoint's ``iteration_count`` (its superstep).
        diff: What changed since the checkpoint before it in the run, changes only.
    """

    checkpoint_id: str
    previous_checkpoint_id: str | None
    sequence: int | None
    created_at: datetime | None
    timestamp: str
    iteration_count: int
    diff: MongoDBCheckpointDiff

    def to_dict(self) -> dict[str, object]:
        """The entry as JSON-ready values (``created_at`` in ISO 8601)."""
        return {
            "checkpoint_id": self.checkpoint_id,
            "previous_checkpoint_id": self.previous_checkpoint_id,
            "sequence": self.sequence,
            "created_at": None if self.created_at is None else self.created_at.isoformat(),
            "timestamp": self.timestamp,
            "iteration_count": self.iteration_count,
            "diff": self.diff.to_dict(),
        }


def _differs(before: object, after: object) -> bool:
    """Whether two values compare unequal; a comparison that fails or is not a truth value
    falls back to comparing what they pickle to."""
    try:
        return bool(before != after)
    except Exception:  # such as an array's element-wise comparison
        try:
            return pickle.dumps(before, protocol=5) != pickle.dumps(after, protocol=5)
        except Exception:  # neither compares nor pickles: report it changed rather than hide it
            return True


def _compare_values(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[MongoDBValueChange, ...]:
    changes: list[MongoDBValueChange] = []
    for name in sorted({*before, *after}):
        if name not in before:
            changes.append(MongoDBValueChange(name, "added", None, value_summary(after[name])))
        elif name not in after:
            changes.append(MongoDBValueChange(name, "removed", value_summary(before[name]), None))
        else:
            kind: ValueChangeKind = "changed" if _differs(before[name], after[name]) else "unchanged"
            changes.append(
                MongoDBValueChange(name, kind, value_summary(before[name]), value_summary(after[name]))
            )
    return tuple(changes)


def _executor_states(checkpoint: WorkflowCheckpoint | None) -> dict[str, Any]:
    if checkpoint is None:
        return {}
    executors: object = checkpoint.state.get(EXECUTOR_STATE_KEY, {})
    if not isinstance(executors, dict):
        return {}
    typed: dict[object, Any] = executors  # pyright: ignore[reportUnknownVariableType]
    return {str(executor_id): state for executor_id, state in typed.items()}


def _user_state(checkpoint: WorkflowCheckpoint | None) -> dict[str, Any]:
    if checkpoint is None:
        return {}
    return {str(key): value for key, value in checkpoint.state.items() if key != EXECUTOR_STATE_KEY}


def _request_field(event: object, name: str) -> object:
    """``event``'s ``name``, or ``None``.

    Agent Framework's ``WorkflowEvent`` (1.13 to 1.26 alike) keeps a request's fields behind
    properties that raise for an event that is not a ``request_info`` one; an event of another
    class (a checkpoint written by other code) may lack them.
    """
    try:
        return getattr(event, name, None)
    except Exception:  # the property's RuntimeError: not a request_info event
        return None


def _class_name(value: object) -> str | None:
    return value.__name__ if isinstance(value, type) else None


_NO_FIELDS: Final[tuple[str, ...]] = ()


def _field_names(data: object) -> tuple[str, ...]:
    """The names of ``data``'s fields, read from its class or its instance namespace, so no
    property or ``__getattr__`` of the data's class runs."""
    cls = type(data)
    if dataclasses.is_dataclass(cls):
        return tuple(sorted(field.name for field in dataclasses.fields(cls)))
    model_fields: object = getattr(cls, "__pydantic_fields__", None)  # pydantic 2's class attribute
    if isinstance(model_fields, dict):
        return tuple(sorted(str(name) for name in model_fields))  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    if isinstance(data, dict):
        keys: list[object] = list(data)  # pyright: ignore[reportUnknownArgumentType]
    else:
        namespace = _instance_namespace(data)
        if not isinstance(namespace, dict):
            return _NO_FIELDS
        keys = list(namespace)  # pyright: ignore[reportUnknownArgumentType]
    return tuple(sorted(key for key in keys if isinstance(key, str) and key.isidentifier()))


def _instance_namespace(data: object) -> object:
    """``data``'s instance ``__dict__`` through the interpreter's own descriptor; ``None`` for a
    value without one (slotted, built-in) or a class that replaces ``__dict__`` (whose code would
    run)."""
    for klass in type(data).__mro__:
        descriptor: object = klass.__dict__.get("__dict__")
        if descriptor is not None:
            if type(descriptor) is not types.GetSetDescriptorType:
                return None
            return descriptor.__get__(data)
    return None


def pending_request_summary(event: object) -> MongoDBPendingRequestSummary:
    """What ``event``, a value of ``pending_request_info_events``, asks for; never a value.

    Reads ``data``, ``request_type``, ``response_type`` and ``source_executor_id`` where the event
    has them (a ``request_info`` ``WorkflowEvent``); for anything else only its class is named.
    """
    data = _request_field(event, "data")
    request_type = _class_name(_request_field(event, "request_type"))
    if request_type is None and data is not None:
        request_type = type(data).__name__
    source = _request_field(event, "source_executor_id")
    return MongoDBPendingRequestSummary(
        event_type=type(event).__name__,
        request_type=request_type,
        response_type=_class_name(_request_field(event, "response_type")),
        source_executor_id=source if isinstance(source, str) else None,
        data=None if data is None else value_summary(data),
        data_fields=_NO_FIELDS if data is None else _field_names(data),
    )


def _compare_requests(
    before: Mapping[str, object], after: Mapping[str, object]
) -> tuple[MongoDBPendingRequestChange, ...]:
    changes: list[MongoDBPendingRequestChange] = []
    for request_id in sorted({*before, *after}):
        kind: RequestChangeKind = (
            "added" if request_id not in before else "resolved" if request_id not in after else "unchanged"
        )
        event = after[request_id] if request_id in after else before[request_id]
        changes.append(MongoDBPendingRequestChange(request_id, kind, pending_request_summary(event)))
    return tuple(changes)


def _message_counts(checkpoint: WorkflowCheckpoint | None) -> dict[str, int]:
    if checkpoint is None:
        return {}
    return {str(source): len(messages) for source, messages in checkpoint.messages.items()}


def diff_checkpoints(before: WorkflowCheckpoint | None, after: WorkflowCheckpoint) -> MongoDBCheckpointDiff:
    """What differs from ``before`` to ``after``, every name of either listed (side by side).

    ``before`` may be ``None`` (nothing to compare with): everything in ``after`` is then
    ``added``. The diff holds names, type names, sizes and counts, never a value.
    """
    before_counts, after_counts = _message_counts(before), _message_counts(after)
    return MongoDBCheckpointDiff(
        before_checkpoint_id=None if before is None else before.checkpoint_id,
        after_checkpoint_id=after.checkpoint_id,
        iteration_before=None if before is None else before.iteration_count,
        iteration_after=after.iteration_count,
        state=_compare_values(_user_state(before), _user_state(after)),
        executors=_compare_values(_executor_states(before), _executor_states(after)),
        messages=tuple(
            MongoDBMessageCountChange(source, before_counts.get(source, 0), after_counts.get(source, 0))
            for source in sorted({*before_counts, *after_counts})
        ),
        pending_requests=_compare_requests(
            {} if before is None else before.pending_request_info_events, after.pending_request_info_events
        ),
    )


async def checkpoint_history(
    storage: MongoDBCheckpointStorage, *, page_size: int | None = None
) -> AsyncIterator[MongoDBHistoryEntry]:
    """The bound run's checkpoints, oldest first, each with what changed since the one before it.

    Reads one page of ``page_size`` checkpoints at a time (``list_checkpoint_page``; the storage's
    ``page_size`` by default), with that page's envelopes (``list_checkpoint_summaries``, same
    cursor) for each checkpoint's sequence and creation time. Only the current page and the
    previous checkpoint are kept, so memory does not grow with the run. Loading is the storage's
    own: its ``allowed_checkpoint_types`` and, with signing keys, its verification apply.

    Raises:
        MongoDBConfigurationError: ``page_size`` is not from 1 to the storage's ``max_page_size``.
        The storage's errors for a page that cannot be read or decoded.
    """
    workflow = storage.options.workflow_name
    previous: WorkflowCheckpoint | None = None
    cursor: str | None = None
    while True:
        page = await storage.list_checkpoint_page(workflow_name=workflow, cursor=cursor, limit=page_size)
        if page.checkpoints:
            envelopes = await storage.list_checkpoint_summaries(
                workflow_name=workflow, cursor=cursor, limit=page_size
            )
            summaries = {summary.checkpoint_id: summary for summary in envelopes.checkpoints}
            for checkpoint in page.checkpoints:
                summary = summaries.get(checkpoint.checkpoint_id)
                yield MongoDBHistoryEntry(
                    checkpoint_id=checkpoint.checkpoint_id,
                    previous_checkpoint_id=checkpoint.previous_checkpoint_id,
                    sequence=None if summary is None else summary.sequence,
                    created_at=None if summary is None else summary.created_at,
                    timestamp=checkpoint.timestamp,
                    iteration_count=checkpoint.iteration_count,
                    diff=diff_checkpoints(previous, checkpoint).changes_only(),
                )
                previous = checkpoint
        cursor = page.next_cursor
        if cursor is None:
            return
