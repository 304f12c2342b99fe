"""Realistic Agent Framework checkpoints for benchmarks.

A checkpoint here looks like one an ``AgentExecutor`` writes mid-conversation: the executor's
conversation (framework ``Message`` objects with text, function calls and function results)
sits under ``state["_executor_state"][executor_id]``, next to ordinary JSON-like workflow state.
The builder only calls public Agent Framework API, so it runs against every supported release.

Import it from the ``python/`` directory: ``from benchmarks.checkpoints import build_checkpoint``.
"""

from __future__ import annotations

import random
from typing import Final

from agent_framework import Content, Message, WorkflowCheckpoint

__all__ = ["CONVERSATION_SIZES", "build_checkpoint", "build_conversation"]

CONVERSATION_SIZES: Final[tuple[int, ...]] = (10, 200, 2000)
"""Message counts the benchmarks report: a short chat, a long session, a very long session."""

_EXECUTOR_ID: Final = "support-agent"
_WORDS: Final[tuple[str, ...]] = (
    "order", "refund", "shipping", "invoice", "customer", "delivery", "status", "account",
    "payment", "address", "warehouse", "tracking", "update", "request", "approved", "pending",
)  # fmt: skip


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def build_conversation(size: int, *, seed: int = 7) -> list[Message]:
    """Return ``size`` messages: user/assistant turns with a tool call and result every few turns."""
    rng = random.Random(seed)  # noqa: S311 - reproducible sample text, not security
    messages: list[Message] = [Message(role="system", contents=[Content.from_text("You help with orders.")])]
    call_number = 0
    while len(messages) < size:
        turn = len(messages)
        if turn % 7 == 3:
            call_number += 1
            call_id = f"call-{call_number}"
            messages.append(
                Message(
                    role="assistant",
                    contents=[
                        Content.from_function_call(
                            call_id=call_id,
                            name="lookup_order",
                            arguments={"order_id": f"ORD-{rng.randrange(10**6):06d}", "verbose": False},
                        )
                    ],
                )
            )
            if len(messages) < size:
                messages.append(
                    Message(
                        role="tool",
                        contents=[
                            Content.from_function_result(
                                call_id=call_id,
                                result={"status": rng.choice(_WORDS), "items": rng.randrange(1, 9)},
                            )
                        ],
                    )
                )
            continue
        role = "user" if turn % 2 else "assistant"
        messages.append(
            Message(
                role=role,
                contents=[Content.from_text(_sentence(rng, rng.randrange(6, 40)))],
                message_id=f"msg-{turn}",
                author_name="agent" if role == "assistant" else None,
            )
        )
    return messages[:size]


def build_checkpoint(size: int, *, seed: int = 7) -> WorkflowCheckpoint:
    """Return a checkpoint holding a ``size``-message conversation plus ordinary workflow state."""
    conversation = build_conversation(size, seed=seed)
    executor_state: dict[str, object] = {
        "cache": {"messages": conversation, "turns": size},
        "thread_id": f"thread-{seed}",
        "options": {"temperature": 0.2, "max_tokens": 800, "tools": ["lookup_order", "refund"]},
    }
    return WorkflowCheckpoint(
        workflow_name="support-workflow",
        graph_signature_hash="6f1c0a9e" * 8,
        checkpoint_id=f"checkpoint-{size}-{seed}",
        previous_checkpoint_id=f"checkpoint-{size}-{seed - 1}",
        timestamp="2025-01-02T03:04:05.000006+00:00",
        state={
            "_executor_state": {_EXECUTOR_ID: executor_state},
            "customer": {"id": "cust-42", "tier": "gold", "open_orders": [1001, 1002, 1003]},
            "step": size,
            "flags": {"escalated": False, "language": "en"},
        },
        iteration_count=size // 2,
        metadata={"superstep": size // 2, "source": "benchmark"},
    )
