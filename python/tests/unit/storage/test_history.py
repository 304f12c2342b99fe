"""``diff_checkpoints`` and ``checkpoint_history``: what each checkpoint changed, never a value."""

from __future__ import annotations

import dataclasses
import json
import pickle
import secrets
from datetime import datetime
from typing import Any

import pydantic
import pytest
from agent_framework import WorkflowCheckpoint, WorkflowEvent, WorkflowMessage

from agent_framework_mongodb import (
    MongoDBCheckpointDiff,
    MongoDBConfigurationError,
    MongoDBHistoryEntry,
    MongoDBIntegrityError,
    MongoDBMessageCountChange,
    MongoDBPendingRequestChange,
    MongoDBPendingRequestSummary,
    MongoDBValueChange,
    MongoDBValueSummary,
    checkpoint_history,
    diff_checkpoints,
)
from agent_framework_mongodb.checkpoints.history import pending_request_summary, value_summary
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import make_checkpoint, make_storage

SECRET = "a-secret-value-never-reported"  # noqa: S105 - a marker that must not be printed


def request(request_id: str) -> WorkflowEvent[Any]:
    return WorkflowEvent.request_info(
        request_id=request_id, source_executor_id="approver", request_data={"q": SECRET}, response_type=str
    )


def message(text: str) -> WorkflowMessage:
    return WorkflowMessage(data=text, source_id="planner", target_id="writer")


def superstep(
    checkpoint_id: str,
    *,
    previous: str | None = None,
    iteration: int = 0,
    state: dict[str, Any] | None = None,
    executors: dict[str, Any] | None = None,
    messages: dict[str, list[WorkflowMessage]] | None = None,
    requests: tuple[str, ...] = (),
) -> WorkflowCheckpoint:
    checkpoint = make_checkpoint(checkpoint_id, previous=previous, state=dict(state or {}))
    if executors is not None:
        checkpoint.state["_executor_state"] = executors
    checkpoint.messages = messages or {}
    checkpoint.iteration_count = iteration
    checkpoint.pending_request_info_events = {request_id: request(request_id) for request_id in requests}
    return checkpoint


def by_name(changes: tuple[MongoDBValueChange, ...]) -> dict[str, MongoDBValueChange]:
    return {change.name: change for change in changes}


# -- diff_checkpoints ---------------------------------------------------------------------------


def test_state_keys_added_removed_changed_and_unchanged_by_type_and_size() -> None:
    before = superstep("a", state={"kept": 1, "edited": [1, 2], "dropped": SECRET})
    after = superstep("b", state={"kept": 1, "edited": [1, 2, 3], "new": {"k": SECRET}})

    diff = diff_checkpoints(before, after)

    changes = by_name(diff.state)
    assert list(changes) == ["dropped", "edited", "kept", "new"]
    assert changes["kept"].change == "unchanged"
    assert changes["edited"] == MongoDBValueChange(
        "edited",
        "changed",
        MongoDBValueSummary("list", len(pickle.dumps([1, 2], protocol=5))),
        MongoDBValueSummary("list", len(pickle.dumps([1, 2, 3], protocol=5))),
    )
    assert changes["dropped"].change == "removed"
    assert changes["dropped"].before == MongoDBValueSummary("str", len(pickle.dumps(SECRET, protocol=5)))
    assert changes["dropped"].after is None
    assert changes["new"].change == "added"
    assert changes["new"].before is None
    assert changes["new"].after is not None
    assert changes["new"].after.type_name == "dict"
    assert SECRET not in json.dumps(diff.to_dict())
    assert [change.name for change in diff.changes_only().state] == ["dropped", "edited", "new"]


def test_executor_states_are_compared_apart_from_the_state_keys() -> None:
    before = superstep("a", state={"user": 1}, executors={"planner": {"step": 1}, "gone": {}})
    after = superstep("b", state={"user": 1}, executors={"planner": {"step": 2}, "writer": {"draft": ""}})

    diff = diff_checkpoints(before, after)

    assert [change.name for change in diff.state] == ["user"]  # _executor_state is not a state key here
    assert {name: change.change for name, change in by_name(diff.executors).items()} == {
        "gone": "removed",
        "planner": "changed",
        "writer": "added",
    }


def test_messages_are_counted_per_source() -> None:
    before = superstep("a", messages={"planner": [message("x")], "idle": [message("y"), message("z")]})
    after = superstep("b", messages={"planner": [message("x"), message("w")], "writer": [message("v")]})

    diff = diff_checkpoints(before, after)

    assert diff.messages == (
        MongoDBMessageCountChange("idle", 2, 0),
        MongoDBMessageCountChange("planner", 1, 2),
        MongoDBMessageCountChange("writer", 0, 1),
    )
    assert [count.delta for count in diff.messages] == [-2, 1, 1]


def test_pending_requests_added_and_resolved_by_id_with_their_type_names() -> None:
    before = superstep("a", requests=("r-old", "r-kept"))
    after = superstep("b", requests=("r-kept", "r-new"))

    diff = diff_checkpoints(before, after)

    asked = MongoDBPendingRequestSummary(
        event_type="WorkflowEvent",
        request_type="dict",
        response_type="str",
        source_executor_id="approver",
        data=MongoDBValueSummary("dict", len(pickle.dumps({"q": SECRET}, protocol=5))),
        data_fields=("q",),
    )
    assert diff.pending_requests == (
        MongoDBPendingRequestChange("r-kept", "unchanged", asked),
        MongoDBPendingRequestChange("r-new", "added", asked),
        MongoDBPendingRequestChange("r-old", "resolved", asked),
    )
    assert [request.request_id for request in diff.changes_only().pending_requests] == ["r-new", "r-old"]
    assert (diff.pending_requests[0].event_type, diff.pending_requests[0].request_type) == (
        "WorkflowEvent",
        "dict",
    )
    assert SECRET not in json.dumps(diff.to_dict())
    assert diff.to_dict()["pending_requests"][0] == {  # type: ignore[index]
        "request_id": "r-kept",
        "change": "unchanged",
        "event_type": "WorkflowEvent",
        "request_type": "dict",
        "response_type": "str",
        "source_executor_id": "approver",
        "data": {"type": "dict", "bytes": asked.data.size, "fields": ["q"]},  # type: ignore[union-attr]
    }


def test_an_event_without_a_request_type_has_none() -> None:
    after = superstep("b")
    after.pending_request_info_events = {"r": {"question": SECRET}}  # type: ignore[dict-item]
    (change,) = diff_checkpoints(None, after).pending_requests
    assert change == MongoDBPendingRequestChange("r", "added", MongoDBPendingRequestSummary("dict"))


@dataclasses.dataclass
class Approval:
    """A request an executor sends: its fields are named, its values never."""

    amount: int
    customer_id: str


class Reviewed(pydantic.BaseModel):
    verdict: str
    note: str = ""


class Plain:
    def __init__(self) -> None:
        self.reason = SECRET
        self._private = 1


@pytest.mark.parametrize(
    ("data", "fields"),
    [
        (Approval(5, SECRET), ("amount", "customer_id")),
        (Reviewed(verdict=SECRET), ("note", "verdict")),
        (Plain(), ("_private", "reason")),
        # A key that is no identifier may be data itself (an e-mail address, a sentence): left out.
        ({"question": 1, SECRET + "@example.com": 2, 3: 4}, ("question",)),
        (SECRET, ()),
    ],
)
def test_a_request_summary_names_its_datas_class_size_and_fields_never_a_value(
    data: object, fields: tuple[str, ...]
) -> None:
    event = WorkflowEvent.request_info(
        request_id="r", source_executor_id="gate", request_data=data, response_type=bool
    )
    summary = pending_request_summary(event)
    assert summary.event_type == "WorkflowEvent"
    assert summary.request_type == type(data).__name__
    assert summary.response_type == "bool"
    assert summary.source_executor_id == "gate"
    assert summary.data == MongoDBValueSummary(type(data).__name__, len(pickle.dumps(data, protocol=5)))
    assert summary.data_fields == fields
    assert SECRET not in json.dumps(summary.to_dict())


class Masked:
    """A class whose ``__dict__`` is a property: its code must not decide the names shown."""

    @property
    def __dict__(self) -> dict[str, object]:  # type: ignore[override]
        return {"spoofed": 1}


def test_a_request_summary_runs_no_property_of_the_data() -> None:
    event = WorkflowEvent.request_info(
        request_id="r", source_executor_id="gate", request_data=Masked(), response_type=bool
    )
    assert pending_request_summary(event).data_fields == ()  # ("spoofed",) had the property run


def test_a_request_summary_of_an_event_that_is_no_request_names_its_class_only() -> None:
    # WorkflowEvent's request properties raise for any other event type; the summary reads none.
    assert pending_request_summary(WorkflowEvent("output", data=None)) == MongoDBPendingRequestSummary(
        "WorkflowEvent"
    )
    assert pending_request_summary(WorkflowEvent("output", data=Approval(1, SECRET))) == (
        MongoDBPendingRequestSummary(
            "WorkflowEvent",
            request_type="Approval",
            data=value_summary(Approval(1, SECRET)),
            data_fields=("amount", "customer_id"),
        )
    )


def test_iteration_counts_and_ids() -> None:
    diff = diff_checkpoints(superstep("a", iteration=2), superstep("b", iteration=5))
    assert (diff.before_checkpoint_id, diff.after_checkpoint_id) == ("a", "b")
    assert (diff.iteration_before, diff.iteration_after) == (2, 5)
    assert diff.has_changes


def test_identical_checkpoints_have_no_changes() -> None:
    fields: dict[str, Any] = {
        "state": {"k": [1]},
        "executors": {"e": {"s": 1}},
        "messages": {"e": [message("m")]},
        "requests": ("r",),
        "iteration": 1,
    }
    diff = diff_checkpoints(superstep("a", **fields), superstep("b", **fields))
    assert not diff.has_changes
    empty = diff.changes_only()
    assert (empty.state, empty.executors, empty.messages, empty.pending_requests) == ((), (), (), ())


def test_against_nothing_everything_is_added() -> None:
    diff = diff_checkpoints(None, superstep("a", state={"k": 1}, executors={"e": {}}, requests=("r",)))
    assert diff.before_checkpoint_id is None
    assert diff.iteration_before is None
    assert [change.change for change in (*diff.state, *diff.executors)] == ["added", "added"]
    assert [request.change for request in diff.pending_requests] == ["added"]


class Uncomparable:
    """Compares as an array does: its ``!=`` is not a truth value."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __ne__(self, other: object) -> Any:
        raise TypeError("ambiguous")

    def __reduce__(self) -> Any:
        return (Uncomparable, (self.value,))


def test_a_value_that_does_not_compare_is_compared_by_its_pickle() -> None:
    same = diff_checkpoints(
        superstep("a", state={"u": Uncomparable(1)}), superstep("b", state={"u": Uncomparable(1)})
    )
    other = diff_checkpoints(
        superstep("a", state={"u": Uncomparable(1)}), superstep("b", state={"u": Uncomparable(2)})
    )
    assert [change.change for change in same.state] == ["unchanged"]
    assert [change.change for change in other.state] == ["changed"]


def test_an_unpicklable_value_has_size_minus_one() -> None:
    diff = diff_checkpoints(None, superstep("a", state={"f": lambda: None}))
    assert diff.state[0].after == MongoDBValueSummary("function", -1)


def test_to_dict_is_json() -> None:
    diff = diff_checkpoints(superstep("a", state={"k": 1}), superstep("b", state={"k": 2}, requests=("r",)))
    assert json.loads(json.dumps(diff.to_dict())) == {
        "before_checkpoint_id": "a",
        "after_checkpoint_id": "b",
        "iteration_before": 0,
        "iteration_after": 0,
        "state": [
            {
                "name": "k",
                "change": "changed",
                "before": {"type": "int", "bytes": len(pickle.dumps(1, protocol=5))},
                "after": {"type": "int", "bytes": len(pickle.dumps(2, protocol=5))},
            }
        ],
        "executors": [],
        "messages": [],
        "pending_requests": [
            {
                "request_id": "r",
                "change": "added",
                "event_type": "WorkflowEvent",
                "request_type": "dict",
                "response_type": "str",
                "source_executor_id": "approver",
                "data": {"type": "dict", "bytes": value_summary({"q": SECRET}).size, "fields": ["q"]},
            }
        ],
    }


# -- checkpoint_history -------------------------------------------------------------------------


def run_of_supersteps() -> list[WorkflowCheckpoint]:
    """Four supersteps: a plan, a draft, a pause for approval, the approval."""
    return [
        superstep("cp-0", iteration=0, executors={"planner": {}}, messages={"planner": [message("go")]}),
        superstep(
            "cp-1",
            previous="cp-0",
            iteration=1,
            state={"plan": ["a"]},
            executors={"planner": {"done": True}},
            messages={"writer": [message("draft")]},
        ),
        superstep(
            "cp-2",
            previous="cp-1",
            iteration=2,
            state={"plan": ["a"]},
            executors={"planner": {"done": True}, "writer": {"draft": SECRET}},
            requests=("approve-1",),
        ),
        superstep(
            "cp-3",
            previous="cp-2",
            iteration=3,
            state={"plan": ["a"], "approved": True},
            executors={"planner": {"done": True}, "writer": {"draft": SECRET}},
        ),
    ]


async def save_all(storage: Any, checkpoints: list[WorkflowCheckpoint]) -> None:
    for checkpoint in checkpoints:
        await storage.save(checkpoint)


async def history_of(storage: Any, **kwargs: Any) -> list[MongoDBHistoryEntry]:
    return [entry async for entry in checkpoint_history(storage, **kwargs)]


def assert_superstep_history(entries: list[MongoDBHistoryEntry]) -> None:
    assert [entry.checkpoint_id for entry in entries] == ["cp-0", "cp-1", "cp-2", "cp-3"]
    assert [entry.previous_checkpoint_id for entry in entries] == [None, "cp-0", "cp-1", "cp-2"]
    assert [entry.diff.before_checkpoint_id for entry in entries] == [None, "cp-0", "cp-1", "cp-2"]
    assert [entry.iteration_count for entry in entries] == [0, 1, 2, 3]
    sequences = [entry.sequence for entry in entries]
    assert all(sequence is not None for sequence in sequences)
    assert sequences == sorted(sequences)  # type: ignore[type-var]
    assert all(isinstance(entry.created_at, datetime) for entry in entries)

    first, second, third, fourth = (entry.diff for entry in entries)
    assert [(c.name, c.change) for c in first.executors] == [("planner", "added")]
    assert first.messages == (MongoDBMessageCountChange("planner", 0, 1),)
    assert [(c.name, c.change) for c in second.state] == [("plan", "added")]
    assert [(c.name, c.change) for c in second.executors] == [("planner", "changed")]
    assert second.messages == (
        MongoDBMessageCountChange("planner", 1, 0),
        MongoDBMessageCountChange("writer", 0, 1),
    )
    assert third.state == ()  # "plan" is unchanged, so not listed
    assert [(c.name, c.change) for c in third.executors] == [("writer", "added")]
    assert [(r.request_id, r.change) for r in third.pending_requests] == [("approve-1", "added")]
    assert [(c.name, c.change) for c in fourth.state] == [("approved", "added")]
    assert fourth.executors == ()
    assert [(r.request_id, r.change) for r in fourth.pending_requests] == [("approve-1", "resolved")]
    assert SECRET not in json.dumps([entry.to_dict() for entry in entries])


@pytest.mark.parametrize("page_size", [1, 2, 3, 4, 10])
async def test_history_walks_a_saved_run_page_by_page(collection: InMemoryCollection, page_size: int) -> None:
    storage = make_storage(collection, page_size=2, max_page_size=10)
    await save_all(storage, run_of_supersteps())

    assert_superstep_history(await history_of(storage, page_size=page_size))


async def test_history_keeps_one_page_and_the_previous_checkpoint(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = make_storage(collection)
    await save_all(storage, run_of_supersteps())
    pages: list[int] = []
    original = storage.list_checkpoint_page

    async def recorded(**kwargs: Any) -> Any:
        page = await original(**kwargs)
        pages.append(len(page.checkpoints))
        return page

    monkeypatch.setattr(storage, "list_checkpoint_page", recorded)
    entries = await history_of(storage, page_size=2)
    assert len(entries) == 4
    assert pages == [2, 2, 0]  # a full last page needs one more (empty) page to end


async def test_history_of_a_signed_run(collection: InMemoryCollection) -> None:
    key = secrets.token_bytes(32)
    storage = make_storage(collection, signing_keys=[key])
    await save_all(storage, run_of_supersteps())

    assert_superstep_history(await history_of(storage, page_size=3))

    other_key = make_storage(collection, signing_keys=[secrets.token_bytes(32)])
    with pytest.raises(MongoDBIntegrityError):
        await history_of(other_key)


async def test_history_of_an_empty_run_is_empty(collection: InMemoryCollection) -> None:
    assert await history_of(make_storage(collection)) == []


async def test_history_refuses_a_page_size_beyond_the_storages(collection: InMemoryCollection) -> None:
    storage = make_storage(collection, page_size=2, max_page_size=5)
    await save_all(storage, run_of_supersteps())
    with pytest.raises(MongoDBConfigurationError):
        await history_of(storage, page_size=6)


def test_a_diff_is_frozen() -> None:
    diff = diff_checkpoints(None, superstep("a"))
    with pytest.raises(AttributeError):
        diff.after_checkpoint_id = "b"  # type: ignore[misc]
    assert isinstance(diff, MongoDBCheckpointDiff)
