"""The suite's own checks, on hand-written input: they run everywhere, server or not.

``uses_id_index`` reads explain output only a real server produces, so it is checked here against
the shapes servers report. The express shapes follow mongodb/mongo
``src/mongo/db/query/plan_explainer_express.cpp`` (one stage, named after the write stage or the
iterator, with ``keyPattern`` and ``indexName``); see ``_support.EXPRESS_STAGES``. The sequence
checks must reject what ADR 0006 forbids and accept the gaps it allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from ._support import assert_in_save_order, assert_valid_sequences, uses_id_index, winning_plan_stages


def explain_of(winning_plan: Mapping[str, Any]) -> dict[str, Any]:
    return {"queryPlanner": {"winningPlan": dict(winning_plan), "rejectedPlans": []}}


def express(stage: str, index_name: str | None, key_pattern: Mapping[str, int] | None) -> dict[str, Any]:
    plan: dict[str, Any] = {"isCached": False, "stage": stage}
    if key_pattern is not None:
        plan["keyPattern"] = dict(key_pattern)
    if index_name is not None:
        plan["indexName"] = index_name
    return plan


ID_KEY = {"_id": 1}
OTHER_KEY = {"checkpoint_id": 1}


def ixscan(index_name: str, key_pattern: Mapping[str, int]) -> dict[str, Any]:
    return {
        "stage": "IXSCAN",
        "keyPattern": dict(key_pattern),
        "indexName": index_name,
        "direction": "forward",
        "indexBounds": {key: ["[1, 1]"] for key in key_pattern},
    }


ID_LOOKUPS: dict[str, dict[str, Any]] = {
    "express-ixscan-8.0": express("EXPRESS_IXSCAN", "_id_", ID_KEY),
    "express-update-8.0": express("EXPRESS_UPDATE", "_id_", ID_KEY),
    "express-delete-8.0": express("EXPRESS_DELETE", "_id_", ID_KEY),
    "idhack-classic": {"stage": "IDHACK"},
    "idhack-under-delete": {"stage": "DELETE", "inputStage": {"stage": "IDHACK"}},
    "fetch-over-id-ixscan": {
        "stage": "FETCH",
        "filter": {"_kind": {"$eq": "workflow_checkpoint"}},
        "inputStage": ixscan("_id_", ID_KEY),
    },
    "update-over-id-ixscan": {
        "stage": "UPDATE",
        "inputStage": {"stage": "FETCH", "inputStage": ixscan("_id_", ID_KEY)},
    },
    "slot-based-query-plan": {
        "queryPlan": {"stage": "FETCH", "inputStage": ixscan("_id_", ID_KEY)},
        "slotBasedPlan": {"slots": "...", "stages": "[2] nlj inner [] [s4, s5] ..."},
    },
    "sharded": {
        "stage": "SINGLE_SHARD",
        "shards": [
            {"shardName": "shard0", "winningPlan": {"stage": "FETCH", "inputStage": ixscan("_id_", ID_KEY)}}
        ],
    },
}

NOT_ID_LOOKUPS: dict[str, dict[str, Any]] = {
    # 8.0 serves an equality on another index's first field through the express path too.
    "express-ixscan-over-another-index": express("EXPRESS_IXSCAN", "checkpoint_id_1", OTHER_KEY),
    "express-update-over-another-index": express("EXPRESS_UPDATE", "checkpoint_id_1", OTHER_KEY),
    "express-delete-over-another-index": express("EXPRESS_DELETE", "checkpoint_id_1", OTHER_KEY),
    "express-without-an-index-name": express("EXPRESS_IXSCAN", None, None),
    "express-clustered": express("EXPRESS_CLUSTERED_IXSCAN", None, None),
    "fetch-over-another-ixscan": {
        "stage": "FETCH",
        "inputStage": ixscan("checkpoint_scope_identity", OTHER_KEY),
    },
    "collection-scan": {"stage": "COLLSCAN", "direction": "forward"},
}


@pytest.mark.parametrize("plan", ID_LOOKUPS.values(), ids=ID_LOOKUPS.keys())
def test_id_lookups_are_recognised(plan: Mapping[str, Any]) -> None:
    assert uses_id_index(winning_plan_stages(explain_of(plan)))


@pytest.mark.parametrize("plan", NOT_ID_LOOKUPS.values(), ids=NOT_ID_LOOKUPS.keys())
def test_other_plans_are_not_id_lookups(plan: Mapping[str, Any]) -> None:
    explain = explain_of(plan)
    explain["queryPlanner"]["rejectedPlans"] = [ixscan("_id_", ID_KEY), {"stage": "IDHACK"}]

    assert not uses_id_index(winning_plan_stages(explain))


def test_stages_are_listed_outermost_first_without_filters_or_rejected_plans() -> None:
    plan = {
        "stage": "LIMIT",
        "inputStage": {
            "stage": "FETCH",
            "filter": {"stage": "not-a-stage"},
            "inputStage": ixscan("checkpoint_sequence", {"sequence": 1}),
        },
    }
    explain = explain_of(plan)
    explain["queryPlanner"]["rejectedPlans"] = [{"stage": "COLLSCAN"}]

    assert [stage["stage"] for stage in winning_plan_stages(explain)] == ["LIMIT", "FETCH", "IXSCAN"]


# -- sequences ------------------------------------------------------------------------------


def test_gaps_are_valid_sequences_in_save_order() -> None:
    sequences_by_id = {"a": 1, "b": 4, "c": 9}

    assert_valid_sequences(sequences_by_id, count=3)
    assert_in_save_order(sequences_by_id, ["a", "b", "c"])


@pytest.mark.parametrize(
    ("sequences_by_id", "count"),
    [
        ({"a": 1, "b": 1}, 2),
        ({"a": 0, "b": 2}, 2),
        ({"a": -3, "b": 2}, 2),
        ({"a": 1, "b": 2}, 3),
    ],
    ids=["shared", "zero", "negative", "missing-checkpoint"],
)
def test_invalid_sequences_are_rejected(sequences_by_id: dict[str, int], count: int) -> None:
    with pytest.raises(AssertionError):
        assert_valid_sequences(sequences_by_id, count=count)


@pytest.mark.parametrize("saved", [["b", "a", "c"], ["a", "c", "b"]], ids=["first-pair", "last-pair"])
def test_sequences_against_the_save_order_are_rejected(saved: list[str]) -> None:
    with pytest.raises(AssertionError):
        assert_in_save_order({"a": 1, "b": 4, "c": 9}, saved)
