"""Application-defined checkpoint classes the codec tests store and restore."""

from __future__ import annotations

import abc
import enum
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

__all__ = [
    "AbstractState",
    "Cached",
    "Color",
    "HookedEnum",
    "HookedState",
    "ListLike",
    "Mapped",
    "OrderState",
    "Pair",
    "Point",
    "SlottedPoint",
    "Unkeyed",
]

HOOK_CALLS: list[str] = []
"""Every hook of the hostile classes below appends here; tests assert it stays empty."""


@dataclass
class OrderState:
    order_id: str
    lines: list[str] = field(default_factory=list)
    total: float = 0.0


@dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int


class SlottedPoint:
    __slots__ = ("__secret", "x")

    def __init__(self, x: int, secret: str) -> None:
        self.x = x
        self.__secret = secret

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlottedPoint) and (self.x, self.__secret) == (other.x, other.__secret)

    def __hash__(self) -> int:
        return hash(self.x)


@dataclass(eq=False)
class Unkeyed:
    name: str


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class HookedEnum(enum.Enum):
    A = 1

    def __reduce_ex__(self, protocol: Any) -> Any:
        HOOK_CALLS.append("HookedEnum.__reduce_ex__")
        return (HookedEnum, (1,))


class HookedState:
    def __init__(self, value: int) -> None:
        self.value = value

    def __reduce__(self) -> Any:
        HOOK_CALLS.append("HookedState.__reduce__")
        return (HookedState, (self.value,))


class Mapped(OrderedDict[str, int]):
    pass


class ListLike(list[int]):
    pass


class Pair(NamedTuple):
    left: int
    right: str


class Cached:
    """A cached property keeps its value in the instance dict under the property's own name."""

    def __init__(self, base: int) -> None:
        self.base = base

    @cached_property
    def doubled(self) -> int:
        return self.base * 2


class AbstractState(abc.ABC):
    """Listed by a test, but abstract: no instance can exist, so none may be rebuilt."""

    @abc.abstractmethod
    def step(self) -> None: ...
