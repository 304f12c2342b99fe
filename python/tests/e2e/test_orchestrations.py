"""Agent Framework orchestrations pause for a human and resume through MongoDB, like in memory.

Each scenario runs in its own interpreter (``orchestration_scenarios.py``) that imports
``agent_framework_orchestrations`` before ``agent_framework_mongodb``, the order import sorters
give an application. Orchestrations registers its checkpoint types when it is imported, so
a storage that only learned of registrations made after its own import would refuse them,
and Agent Framework would swallow the refused save (it logs a warning and carries on): the
pause checkpoint would be missing and nothing could resume. These tests pin the stored
checkpoints, the pending request, the outputs and the event sequence of the resumed runs,
each against the same scenario on Agent Framework's ``InMemoryCheckpointStorage``.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import TypedDict, cast

import pytest

HERE = Path(__file__).parent
SCENARIOS_SCRIPT = HERE / "orchestration_scenarios.py"
PROBE_SCRIPT = HERE / "orchestration_probe.py"
SCENARIO_TIMEOUT_SECONDS = 120

# -- The JSON the scenario script prints ------------------------------------------------


class Pause(TypedDict):
    """What the storage holds while the workflow waits for the human."""

    request_types: list[str]
    checkpoint_count: int
    pause_checkpoint_stored: bool
    pending_request_types: list[str] | None
    pending_request_details: list[str | None] | None
    pending_response_types: list[str] | None
    state_types: list[str] | None


class StorageRun(TypedDict):
    """One storage's run of a scenario: the first run and every resumed one."""

    error: str | None
    pauses: list[Pause]
    runs: list[list[list[str | None]]]
    outputs: list[object]
    final_checkpoint_count: int | None
    final_pending_request_count: int | None
    warnings: list[str]


class Summary(TypedDict):
    scenario: str
    import_order: list[str]
    versions: dict[str, str]
    memory: StorageRun
    mongodb: StorageRun


@functools.cache
def orchestrations_problem() -> str | None:
    """Why the installed orchestrations/core pair cannot run the scenarios, or ``None``."""
    completed = subprocess.run(  # noqa: S603 - our own interpreter and script
        [sys.executable, str(PROBE_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_SECONDS,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return cast("str | None", json.loads(completed.stdout)["problem"])


def run_scenario(name: str) -> Summary:
    """Run one scenario in a fresh interpreter and return its summary, or skip if it cannot run."""
    problem = orchestrations_problem()
    if problem is not None:
        pytest.skip(problem)
    completed = subprocess.run(  # noqa: S603 - our own interpreter and script
        [sys.executable, str(SCENARIOS_SCRIPT), name],
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_SECONDS,
        check=False,
    )
    assert completed.returncode == 0, f"scenario {name} failed:\n{completed.stderr}"
    summary = cast("Summary", json.loads(completed.stdout))
    assert summary["scenario"] == name
    assert summary["import_order"] == ["agent_framework_orchestrations", "agent_framework_mongodb"]
    return summary


def expected_checkpoint_counts(storage_run: StorageRun) -> list[int]:
    """How many checkpoints a run should have stored at each pause, then at the end.

    Agent Framework saves one checkpoint when a run starts (or resumes with responses) and one
    after every superstep, so the counts follow from the event sequence alone, whatever the
    storage; the orchestrations release decides how many supersteps a step of the scenario takes.
    """
    counts: list[int] = []
    total = 0
    for events in storage_run["runs"]:
        total += 1 + sum(1 for event in events if event[0] == "superstep_completed")
        counts.append(total)
    return counts


def assert_mongodb_matches_reference(summary: Summary) -> None:
    """The MongoDB run stored, resumed and finished exactly as the in-memory run did."""
    memory, mongodb = summary["memory"], summary["mongodb"]
    assert mongodb["error"] is None, json.dumps(mongodb, indent=2)
    assert mongodb["pauses"] == memory["pauses"]
    assert mongodb["runs"] == memory["runs"]
    assert mongodb["outputs"] == memory["outputs"]
    assert mongodb["final_checkpoint_count"] == memory["final_checkpoint_count"]
    assert mongodb["final_pending_request_count"] == memory["final_pending_request_count"] == 0
    # Agent Framework logs a save it could not make instead of raising: there must be none.
    assert mongodb["warnings"] == memory["warnings"]


def assert_pauses_stored(storage_run: StorageRun, pauses: int) -> None:
    """Every pause left its checkpoint, and the counts are what the run's supersteps imply."""
    stored = [pause["pause_checkpoint_stored"] for pause in storage_run["pauses"]]
    assert stored == [True] * pauses, (
        f"pause checkpoints stored: {stored}; warnings logged: {storage_run['warnings']}"
    )
    expected = expected_checkpoint_counts(storage_run)
    assert [pause["checkpoint_count"] for pause in storage_run["pauses"]] == expected[:pauses]
    assert storage_run["final_checkpoint_count"] == expected[-1]


def message(author: str, text: str) -> dict[str, object]:
    return {"role": "assistant", "author_name": author, "text": text}


def agent_response(*messages: dict[str, object]) -> dict[str, object]:
    return {"type": "AgentResponse", "messages": list(messages)}


# -- Magentic with human plan review ----------------------------------------------------

FIRST_PLAN = "Plan for 'Summarise how a paused workflow is resumed.': ask the researcher, then answer."
REVISED_PLAN = "Revised plan: ask the researcher, then answer (1 review note(s) applied)."
MAGENTIC_FINAL_ANSWER = (
    "Final answer: Resume loads the pause checkpoint and delivers the response; no process has "
    f"to stay running. [{REVISED_PLAN}]"
)


def test_magentic_plan_review_pauses_and_resumes_in_new_workflow_instances() -> None:
    summary = run_scenario("magentic")
    memory, mongodb = summary["memory"], summary["mongodb"]

    # The reference run behaves as scripted: a plan review, a revision, a second review, done.
    assert memory["error"] is None, memory["error"]
    assert_pauses_stored(memory, pauses=2)
    assert memory["outputs"] == [agent_response(message("magentic_manager", MAGENTIC_FINAL_ANSWER))]

    # MongoDB: both pause checkpoints are stored, each holding the plan under review.
    assert_pauses_stored(mongodb, pauses=2)
    plans = [pause["pending_request_details"] for pause in mongodb["pauses"]]
    assert plans == [[FIRST_PLAN], [REVISED_PLAN]]
    for pause in mongodb["pauses"]:
        assert pause["request_types"] == ["MagenticPlanReviewRequest"]
        assert pause["pending_request_types"] == ["MagenticPlanReviewRequest"]
        assert pause["pending_response_types"] == ["MagenticPlanReviewResponse"]
        assert pause["state_types"] is not None
        assert "agent_framework_orchestrations._magentic:MagenticPlanReviewRequest" in pause["state_types"]
    # The revision given after the first pause reached the researcher after the second one,
    # through chat history that only the second pause checkpoint carried.
    assert mongodb["outputs"] == [agent_response(message("magentic_manager", MAGENTIC_FINAL_ANSWER))]
    assert_mongodb_matches_reference(summary)


# -- Group chat with request info after the writer --------------------------------------

FIRST_DRAFT = "Draft 1: paused workflows resume from MongoDB."
SECOND_DRAFT = "Draft 2: paused workflows resume from MongoDB, across processes."
GROUP_CHAT_OUTPUTS = [
    agent_response(message("critic", f"Critic approves: {SECOND_DRAFT}")),
    agent_response(
        message("group_chat_orchestrator", "The group chat has reached the maximum number of rounds.")
    ),
]


def test_group_chat_request_info_pauses_and_resumes_in_new_workflow_instances() -> None:
    summary = run_scenario("group_chat")
    memory, mongodb = summary["memory"], summary["mongodb"]

    # The reference run: the writer's draft is reviewed, revised on feedback, reviewed, approved.
    assert memory["error"] is None, memory["error"]
    assert_pauses_stored(memory, pauses=2)
    assert memory["outputs"] == GROUP_CHAT_OUTPUTS

    # MongoDB: both pause checkpoints are stored, each holding the writer's response under
    # review, to be answered with orchestrations' AgentRequestInfoResponse.
    assert_pauses_stored(mongodb, pauses=2)
    drafts = [pause["pending_request_details"] for pause in mongodb["pauses"]]
    assert drafts == [[FIRST_DRAFT], [SECOND_DRAFT]]
    for pause in mongodb["pauses"]:
        assert pause["request_types"] == ["AgentExecutorResponse"]
        assert pause["pending_request_types"] == ["AgentExecutorResponse"]
        assert pause["pending_response_types"] == ["AgentRequestInfoResponse"]
        assert pause["state_types"] is not None
        assert (
            "class agent_framework_orchestrations._orchestration_request_info:AgentRequestInfoResponse"
            in pause["state_types"]
        )
    # The critic saw the second draft: the human's feedback survived the first resume.
    assert mongodb["outputs"] == GROUP_CHAT_OUTPUTS
    assert_mongodb_matches_reference(summary)
