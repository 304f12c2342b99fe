"""Can the installed agent-framework-orchestrations run ``orchestration_scenarios.py``?

``test_orchestrations.py`` runs this file in a fresh interpreter rather than importing
orchestrations itself: importing it registers its checkpoint types with Agent Framework,
process-wide, and pytest's process must stay as every other test expects it. Prints one JSON
object: the installed versions, and why the scenarios cannot run here, or ``null``.

The oldest Agent Framework Core the storage supports (1.13) only has orchestrations releases
without a ``name=`` builder option (it arrived in 1.2, which needs Core 1.19). There every
build gets a random workflow name, so a new workflow instance cannot find, or save into, the
run it resumes in a storage scoped by workflow name: the scenarios are skipped, not failed.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import sys

__all__ = ["problem"]

# Every orchestrations name the scenarios import.
REQUIRED_NAMES = (
    "MAGENTIC_MANAGER_NAME",
    "AgentRequestInfoResponse",
    "GroupChatBuilder",
    "GroupChatRequestSentEvent",
    "GroupChatResponseReceivedEvent",
    "GroupChatState",
    "MagenticBuilder",
    "MagenticContext",
    "MagenticManagerBase",
    "MagenticOrchestratorEvent",
    "MagenticPlanReviewRequest",
    "MagenticPlanReviewResponse",
    "MagenticProgressLedger",
    "MagenticProgressLedgerItem",
)


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or ``None`` when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """The versions of the two distributions whose pairing decides whether the scenarios run."""
    names = ("agent-framework-core", "agent-framework-orchestrations")
    return {name: installed_version(name) for name in names}


def problem() -> str | None:
    """Why the scenarios cannot run with the installed pair, or ``None`` when they can."""
    installed = versions()
    if installed["agent-framework-orchestrations"] is None:
        return "agent-framework-orchestrations is not installed"
    pair = (
        f"agent-framework-orchestrations {installed['agent-framework-orchestrations']} with "
        f"agent-framework-core {installed['agent-framework-core']}"
    )
    try:
        import agent_framework_orchestrations as orchestrations
    except ImportError as error:
        return f"{pair} cannot be imported ({error}); install a release built for this core"
    missing = [name for name in REQUIRED_NAMES if not hasattr(orchestrations, name)]
    builders = (orchestrations.MagenticBuilder, orchestrations.GroupChatBuilder)
    missing.extend(
        f"{builder.__name__}(name=...)"
        for builder in builders
        if "name" not in inspect.signature(builder).parameters
    )
    if "enable_plan_review" not in inspect.signature(orchestrations.MagenticBuilder).parameters:
        missing.append("MagenticBuilder(enable_plan_review=...)")
    if not hasattr(orchestrations.GroupChatBuilder, "with_request_info"):
        missing.append("GroupChatBuilder.with_request_info")
    if not missing:
        return None
    reason = f"{pair} lacks {', '.join(missing)}"
    if any(item.endswith("(name=...)") for item in missing):
        reason += (
            "; without a fixed workflow name every build is named at random, so no new workflow "
            "instance can resume a run from a storage scoped by workflow name"
        )
    return reason


if __name__ == "__main__":
    print(json.dumps({"versions": versions(), "problem": problem()}))
    sys.exit(0)
