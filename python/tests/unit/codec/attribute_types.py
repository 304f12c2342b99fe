"""Classes the instance-attribute-name tests store: one of every kind of object the codec rebuilds.

Each kind has declared state (fields, some with class-level defaults), behaviour (a method, a
classmethod, a staticmethod, a property) and class attributes that are not fields (a container,
a class, an object). :class:`Planted` is the class a crafted payload names to be called later; it
records every call in :data:`CALLS`.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, PrivateAttr

__all__ = [
    "CALLS",
    "KINDS",
    "CallableThing",
    "FrozenThing",
    "ModelThing",
    "Phase",
    "PlainThing",
    "Planted",
    "RecordThing",
    "SlottedRecordThing",
    "SlottedThing",
    "key_of",
]

CALLS: list[str] = []
"""Every call into :class:`Planted` appends here."""


def key_of(cls: type) -> str:
    """The ``"module:qualname"`` name of a class in this module."""
    return f"{cls.__module__}:{cls.__qualname__}"


class Planted:
    """What a payload would have a later lookup call: constructing it, or its serializer hook."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        CALLS.append("Planted.__init__")

    @classmethod
    def to_python(cls, *args: object, **kwargs: object) -> dict[str, object]:
        CALLS.append("Planted.to_python")
        return {}


class CallableThing:
    """An allowed class whose instances are callable: what a payload could store under a name the
    framework calls by duck typing, instead of a class."""

    def __init__(self, label: str = "c") -> None:
        self.label = label

    def __call__(self, *args: object, **kwargs: object) -> dict[str, object]:
        CALLS.append("CallableThing.__call__")
        return {}


class Phase(enum.Enum):
    NEW = "new"
    DONE = "done"


class _Helper:
    """An ordinary object kept as a class attribute (a logger, a client, a registry)."""


class PlainThing:
    """A plain class: class-level plain-data defaults its instances shadow, and behaviour."""

    retries = 3
    label_default: str | None = None
    enabled = True
    registry: ClassVar[dict[str, int]] = {}
    factory: ClassVar[type] = Planted
    helper_object: ClassVar[_Helper] = _Helper()

    def __init__(self, name: str = "p", retries: int = 3) -> None:
        self.name = name
        self.retries = retries
        self.label_default = "set"
        self.enabled = False

    def describe(self) -> str:
        return self.name

    @classmethod
    def make(cls) -> PlainThing:
        return cls()

    @staticmethod
    def helper() -> int:
        return 1

    @property
    def shouted(self) -> str:
        return self.name.upper()

    @functools.cached_property
    def doubled(self) -> str:
        return self.name * 2


class SlottedThing:
    """Slots beside an instance dict: the dict's names follow the rule, the slots are the class's own."""

    __slots__ = ("__dict__", "count", "tag")

    kinds: ClassVar[tuple[str, ...]] = ("a", "b")

    def __init__(self, count: int = 0, tag: str = "t", note: str = "n") -> None:
        self.count = count
        self.tag = tag
        self.note = note

    def bump(self) -> None:
        self.count += 1

    @classmethod
    def make(cls) -> SlottedThing:
        return cls()

    @staticmethod
    def helper() -> int:
        return 2

    @property
    def summary(self) -> str:
        return f"{self.tag}:{self.count}"


@dataclasses.dataclass
class RecordThing:
    """A dataclass whose defaults are class attributes: an enum member and a tuple among them."""

    name: str
    size: int = 0
    phase: Phase = Phase.NEW
    tags: tuple[str, ...] = ()
    items: list[int] = dataclasses.field(default_factory=list)
    limits: ClassVar[dict[str, int]] = {"max": 3}
    factory: ClassVar[type] = Planted

    def describe(self) -> str:
        return self.name

    @classmethod
    def make(cls) -> RecordThing:
        return cls("made")

    @staticmethod
    def helper() -> int:
        return 3

    @property
    def weight(self) -> int:
        return self.size * 2


@dataclasses.dataclass(frozen=True)
class FrozenThing:
    """A frozen dataclass: its instance dict is written only by the codec's descriptor."""

    key: str
    level: int = 1
    phase: Phase = Phase.DONE
    registry: ClassVar[dict[str, int]] = {}

    def describe(self) -> str:
        return self.key

    @property
    def upper(self) -> str:
        return self.key.upper()


class _DictBase:
    """Gives the slotted dataclass below an instance dict, so a name can be injected into one."""

    def base_method(self) -> int:
        return 0


@dataclasses.dataclass(frozen=True, slots=True)
class SlottedRecordThing(_DictBase):
    """A frozen slotted dataclass (fields in slots) that keeps its base's instance dict."""

    x: int
    y: int = 0
    origin: ClassVar[tuple[int, int]] = (0, 0)

    def norm(self) -> int:
        return abs(self.x) + abs(self.y)


class ModelThing(BaseModel):
    """A pydantic model with extras, a private attribute, a cached property and behaviour."""

    model_config = ConfigDict(extra="allow")

    name: str
    count: int = 0
    _note: str = PrivateAttr(default="n0")
    _late: str = PrivateAttr()

    def describe(self) -> str:
        return self.name

    @classmethod
    def make(cls) -> ModelThing:
        return cls(name="made")

    @staticmethod
    def helper() -> int:
        return 4

    @property
    def loud(self) -> str:
        return self.name.upper()

    @functools.cached_property
    def doubled(self) -> str:
        return self.name * 2


KINDS: tuple[type[Any], ...] = (
    PlainThing,
    SlottedThing,
    RecordThing,
    FrozenThing,
    SlottedRecordThing,
    ModelThing,
    Planted,
    Phase,
    CallableThing,
)
"""Every class of this module a test codec allows."""
