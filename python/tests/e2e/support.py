"""Shared pieces of the end-to-end tests."""

from __future__ import annotations

from typing import Any, TypeAlias, TypeVar

from agent_framework import WorkflowCheckpoint
from pymongo import AsyncMongoClient

from agent_framework_mongodb.testing import InMemoryMongoClient

__all__ = ["Client", "instances_in", "type_key"]

Client: TypeAlias = "InMemoryMongoClient | AsyncMongoClient[dict[str, Any]]"
"""The in-process engine, or pymongo's client when ``MONGODB_URI`` is set."""


def type_key(cls: type) -> str:
    """The ``"module:qualname"`` entry ``allowed_checkpoint_types`` takes for ``cls``."""
    return f"{cls.__module__}:{cls.__qualname__}"


_T = TypeVar("_T")


def instances_in(checkpoint: WorkflowCheckpoint, cls: type[_T]) -> list[_T]:
    """Every instance of ``cls`` anywhere in the checkpoint's state, in traversal order."""
    found: list[_T] = []

    def walk(value: object) -> None:
        if isinstance(value, cls):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():  # pyright: ignore[reportUnknownVariableType]
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:  # pyright: ignore[reportUnknownVariableType]
                walk(item)

    walk(checkpoint.state)
    return found
