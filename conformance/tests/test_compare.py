"""first_difference names where a loaded value stopped being what was saved."""

from __future__ import annotations

from dataclasses import dataclass

from agent_framework import Message, WorkflowEvent

from agent_framework_checkpoint_conformance._compare import first_difference


@dataclass
class Point:
    x: int
    label: object


def test_equal_values_have_no_difference() -> None:
    value = {"a": [1, 2.5, None, True], "m": Message("user", ["hi"]), "p": Point(1, (1, 2))}
    copy = {"a": [1, 2.5, None, True], "m": Message("user", ["hi"]), "p": Point(1, (1, 2))}

    assert first_difference(value, copy) is None


def test_a_tuple_that_came_back_as_a_list_is_named() -> None:
    found = first_difference({"p": Point(1, (1, 2))}, {"p": Point(1, [1, 2])})

    assert found == "checkpoint['p'].label: saved a tuple, loaded a list ((1, 2) became [1, 2])"


def test_classes_without_equality_are_compared_by_their_fields() -> None:
    saved = WorkflowEvent.request_info(
        request_id="r1", source_executor_id="e", request_data="ask", response_type=str
    )
    same = WorkflowEvent.request_info(
        request_id="r1", source_executor_id="e", request_data="ask", response_type=str
    )
    other = WorkflowEvent.request_info(
        request_id="r1", source_executor_id="e", request_data="asked", response_type=str
    )

    assert first_difference(saved, same) is None
    assert first_difference(saved, other) == "checkpoint.data: saved 'ask', loaded 'asked'"


def test_missing_and_extra_keys_are_named() -> None:
    assert first_difference({"a": 1, "b": 2}, {"a": 1}) == "checkpoint: 'b' was saved but did not come back"
    assert first_difference({"a": 1}, {"a": 1, "c": 3}) == "checkpoint: 'c' came back but was never saved"
    assert first_difference([1, 2], [1]) == "checkpoint: saved 2 items, loaded 1"
