"""The codec's peers on the same checkpoints, for ``benchmarks.codec_benchmark`` (issue 22).

* **LangGraph**: ``JsonPlusSerializer.dumps_typed`` / ``loads_typed`` (``langgraph-checkpoint``, the
  serializer LangGraph's checkpointers use) on the same conversation as LangChain messages, in the
  same state shape: the same texts, tool calls and tool results, message ids and author names.
* **Snapshot**: ``copy.deepcopy`` of the checkpoint's state, what Agent Framework already pays at
  every superstep (``State.set`` deep-copies each executor's snapshot); a save that costs less than
  this at most doubles the framework's own per-superstep state cost.

Both are benchmark-only (the ``peers`` dependency group); nothing here is imported by the package.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from agent_framework import Message, WorkflowCheckpoint
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

__all__ = ["LangGraphPeer", "langchain_messages", "snapshot"]


def langchain_messages(conversation: list[Message]) -> list[BaseMessage]:
    """The conversation as LangChain messages, message by message."""
    converted: list[BaseMessage] = []
    for message in conversation:
        content = message.contents[0]
        if content.type == "function_call":
            arguments: Any = content.arguments
            args = arguments if isinstance(arguments, dict) else json.loads(str(arguments))
            call = {"name": str(content.name), "args": args, "id": str(content.call_id), "type": "tool_call"}
            converted.append(AIMessage(content="", tool_calls=[call]))
        elif content.type == "function_result":
            result = content.result
            text = result if isinstance(result, str) else json.dumps(result)
            converted.append(ToolMessage(content=text, tool_call_id=str(content.call_id)))
        elif message.role == "system":
            converted.append(SystemMessage(content=str(content.text)))
        elif message.role == "user":
            converted.append(HumanMessage(content=str(content.text), id=message.message_id))
        else:
            converted.append(
                AIMessage(content=str(content.text), id=message.message_id, name=message.author_name)
            )
    return converted


def _langgraph_state(checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
    """The checkpoint's state with each executor's conversation as LangChain messages."""
    state = copy.deepcopy(checkpoint.state)
    for executor_state in state["_executor_state"].values():
        cache = executor_state["cache"]
        cache["messages"] = langchain_messages(cache["messages"])
    return state


class LangGraphPeer:
    """LangGraph's serializer on the LangChain twin of one benchmark checkpoint."""

    def __init__(self, checkpoint: WorkflowCheckpoint) -> None:
        self._serializer = JsonPlusSerializer()
        self._state = _langgraph_state(checkpoint)
        self._encoded = self._serializer.dumps_typed(self._state)

    @property
    def stored_bytes(self) -> int:
        """Bytes the serializer writes for the state."""
        return len(self._encoded[1])

    def encode(self) -> object:
        return self._serializer.dumps_typed(self._state)

    def decode(self) -> object:
        return self._serializer.loads_typed(self._encoded)


def snapshot(checkpoint: WorkflowCheckpoint) -> object:
    """The framework's own per-superstep cost: a deep copy of the state."""
    return copy.deepcopy(checkpoint.state)
