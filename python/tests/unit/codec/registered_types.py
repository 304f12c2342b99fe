"""A class registered with ``agent_framework.register_checkpoint_type`` by one test only."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RegisteredState"]


@dataclass
class RegisteredState:
    value: int
