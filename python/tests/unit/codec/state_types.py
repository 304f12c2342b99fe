"""Application classes the state-type codec tests store: models, tuples, records, enums, hostiles.

Every hook a class defines appends to :data:`CALLS`; the tests clear it before a save and assert
that neither the save nor the load ran any of them. :func:`rich_value` builds one value holding
every kind of state below; the identity tests also call it in subprocesses.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import enum
import pathlib
import sys
import zoneinfo
from collections.abc import Iterator, Mapping
from typing import Any, Generic, NamedTuple, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    RootModel,
    field_validator,
    model_validator,
)

__all__ = [
    "ALLOWED_FOR_RICH",
    "ARMED",
    "CALLS",
    "NEW_YORK",
    "PARIS",
    "Address",
    "AnswersEverything",
    "AppPath",
    "ArmedHashKey",
    "Box",
    "Color",
    "Coordinate",
    "CoordinateSubclass",
    "Customer",
    "DictProperty",
    "DuplicateSlot",
    "EqualityCoordinate",
    "Failure",
    "Flexible",
    "FrozenRecord",
    "FrozenSettings",
    "FrozenSlotted",
    "HashedCoordinate",
    "Hidden",
    "Hooked",
    "Level",
    "Mode",
    "Numbers",
    "Pair",
    "Partial",
    "Perm",
    "Plain",
    "RaisingGetattribute",
    "ReadOnlyMapping",
    "Registry",
    "Scores",
    "SideEffectKey",
    "SlottedRecord",
    "Tagged",
    "Tags",
    "Validated",
    "Vault",
    "VaultChild",
    "WithPrivate",
    "key_of",
    "rich_value",
]

CALLS: list[str] = []
"""Hooks append their name here; a save or load must leave it as it was."""

PARIS = zoneinfo.ZoneInfo("Europe/Paris")
NEW_YORK = zoneinfo.ZoneInfo("America/New_York")


def key_of(cls: type) -> str:
    """The ``"module:qualname"`` name of a class in this module."""
    return f"{cls.__module__}:{cls.__qualname__}"


# -- pydantic models ------------------------------------------------------------------------------


class Address(BaseModel):
    street: str
    city: str = "Paris"
    zip_code: str | None = None


class Customer(BaseModel):
    name: str
    address: Address
    tags: list[str] = Field(default_factory=list)
    score: float = 0.0
    nickname: str | None = None


class Flexible(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: int
    label: str = "none"


class WithPrivate(BaseModel):
    name: str
    _note: str = PrivateAttr(default="t0")
    _cache: dict[str, int] = PrivateAttr(default_factory=dict)
    _late: str = PrivateAttr()
    """No default: absent until assigned."""


class FrozenSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    when: dt.datetime
    limits: tuple[int, ...] = ()


class Validated(BaseModel):
    """Every validation and construction hook records itself in :data:`CALLS`."""

    model_config = ConfigDict(validate_assignment=True)

    value: int
    label: str = "x"

    def __init__(self, **data: Any) -> None:
        CALLS.append("Validated.__init__")
        super().__init__(**data)

    @field_validator("value")
    @classmethod
    def _check_value(cls, value: int) -> int:
        CALLS.append("Validated.field_validator")
        return value

    @model_validator(mode="before")
    @classmethod
    def _before(cls, data: Any) -> Any:
        CALLS.append("Validated.model_validator(before)")
        return data

    @model_validator(mode="after")
    def _after(self) -> Validated:
        CALLS.append("Validated.model_validator(after)")
        return self

    def model_post_init(self, context: Any, /) -> None:
        CALLS.append("Validated.model_post_init")

    def __getstate__(self) -> dict[Any, Any]:
        CALLS.append("Validated.__getstate__")
        return super().__getstate__()

    def __setstate__(self, state: dict[Any, Any]) -> None:
        CALLS.append("Validated.__setstate__")
        super().__setstate__(state)

    def __reduce_ex__(self, protocol: Any) -> Any:
        CALLS.append("Validated.__reduce_ex__")
        return super().__reduce_ex__(protocol)

    def __copy__(self) -> Validated:
        CALLS.append("Validated.__copy__")
        return super().__copy__()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Validated:
        CALLS.append("Validated.__deepcopy__")
        return super().__deepcopy__(memo)


class Tags(RootModel[list[str]]):
    pass


class Scores(RootModel[dict[str, int]]):
    pass


T = TypeVar("T")


class Box(BaseModel, Generic[T]):
    """Generic: ``Box[int]`` is a class named ``Box[int]``, which no stored name can express."""

    item: T


# -- named tuples ---------------------------------------------------------------------------------


class Coordinate(NamedTuple):
    lat: float
    lon: float
    label: str = ""


Pair = collections.namedtuple("Pair", ["left", "right"], defaults=[None])


class HashedCoordinate(NamedTuple):
    """Defines its own hash: it may be stored, but never as a set member or dict key."""

    x: int
    y: int

    def __hash__(self) -> int:
        CALLS.append("HashedCoordinate.__hash__")
        return hash(self.x)


class EqualityCoordinate(NamedTuple):
    x: int
    y: int

    def __eq__(self, other: object) -> bool:
        CALLS.append("EqualityCoordinate.__eq__")
        return tuple.__eq__(self, other)

    def __hash__(self) -> int:
        return tuple.__hash__(self)


# -- dataclasses and plain classes ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FrozenRecord:
    name: str
    size: int = 0
    where: pathlib.PurePath | None = None


@dataclasses.dataclass(slots=True)
class SlottedRecord:
    name: str
    values: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, slots=True)
class FrozenSlotted:
    x: int
    y: int


class Vault:
    """Name-mangled private slots: the stored names are ``_Vault__secret`` and ``label``."""

    __slots__ = ("__secret", "label")

    def __init__(self, label: str, secret: str) -> None:
        self.label = label
        self.__secret = secret

    @property
    def secret(self) -> str:
        return self.__secret

    def __eq__(self, other: object) -> bool:
        return type(other) is Vault and (self.label, self.__secret) == (other.label, other.__secret)

    __hash__ = None  # type: ignore[assignment]


class VaultChild(Vault):
    """Its own ``__secret`` is ``_VaultChild__secret``, beside the parent's ``_Vault__secret``."""

    __slots__ = ("__secret", "__weakref__")

    def __init__(self, label: str, secret: str, child_secret: str) -> None:
        super().__init__(label, secret)
        self.__secret = child_secret

    @property
    def child_secret(self) -> str:
        return self.__secret


class __Hidden:  # a class name with leading underscores mangles differently
    """``__x`` here mangles to ``_Hidden__x``: leading underscores of the class name are dropped."""

    __slots__ = ("__x",)

    def __init__(self, x: int) -> None:
        self.__x = x


Hidden = __Hidden


class Plain:
    """An ordinary class with a ``__dict__`` and no hooks."""

    def __init__(self, **attributes: Any) -> None:
        self.__dict__.update(attributes)

    def __eq__(self, other: object) -> bool:
        return type(other) is Plain and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]


# -- enums ----------------------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Perm(enum.Flag):
    R = 1
    W = 2
    X = 4
    RW = 3


if sys.version_info >= (3, 11):

    class Mode(enum.StrEnum):
        FAST = "fast"
        SLOW = "slow"


# -- classes the codec must refuse, or store without running their code ---------------------------


class Hooked:
    """Every pickling and copying hook raises after recording itself."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __getstate__(self) -> Any:
        CALLS.append("Hooked.__getstate__")
        raise RuntimeError("Hooked.__getstate__ must not run")

    def __setstate__(self, state: Any) -> None:
        CALLS.append("Hooked.__setstate__")
        raise RuntimeError("Hooked.__setstate__ must not run")

    def __reduce__(self) -> Any:
        CALLS.append("Hooked.__reduce__")
        raise RuntimeError("Hooked.__reduce__ must not run")

    def __reduce_ex__(self, protocol: Any) -> Any:
        CALLS.append("Hooked.__reduce_ex__")
        raise RuntimeError("Hooked.__reduce_ex__ must not run")

    def __getnewargs_ex__(self) -> Any:
        CALLS.append("Hooked.__getnewargs_ex__")
        raise RuntimeError("Hooked.__getnewargs_ex__ must not run")

    def __copy__(self) -> Any:
        CALLS.append("Hooked.__copy__")
        raise RuntimeError("Hooked.__copy__ must not run")

    def __deepcopy__(self, memo: Any) -> Any:
        CALLS.append("Hooked.__deepcopy__")
        raise RuntimeError("Hooked.__deepcopy__ must not run")

    def __setattr__(self, name: str, value: Any) -> None:
        CALLS.append("Hooked.__setattr__")
        object.__setattr__(self, name, value)

    def __new__(cls, *args: Any, **kwargs: Any) -> Hooked:
        CALLS.append("Hooked.__new__")
        return super().__new__(cls)


class AnswersEverything:
    """``__getattr__`` answers every missing attribute, ``__getstate__`` and the like included."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __getattr__(self, name: str) -> Any:
        CALLS.append(f"AnswersEverything.__getattr__({name})")
        return lambda *args, **kwargs: {"forged": True}


class RaisingGetattribute:
    """Any attribute read through the instance raises; state is readable only through descriptors."""

    def __init__(self, value: int) -> None:
        object.__setattr__(self, "value", value)

    def __getattribute__(self, name: str) -> Any:
        CALLS.append(f"RaisingGetattribute.__getattribute__({name})")
        raise RuntimeError(f"attribute {name!r} refused")


class DictProperty:
    """Replaces ``__dict__`` with a property: what it shows is not the instance's state."""

    def __init__(self) -> None:
        object.__setattr__(self, "real", 1)

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        CALLS.append("DictProperty.__dict__")
        return {"forged": True}


class SideEffectKey:
    """Hashing and comparing record themselves: a set member or dict key would run them on load."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __hash__(self) -> int:
        CALLS.append("SideEffectKey.__hash__")
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        CALLS.append("SideEffectKey.__eq__")
        return type(other) is SideEffectKey and self.value == other.value


class Registry(dict[str, int]):
    pass


class ReadOnlyMapping(Mapping[str, int]):
    def __init__(self, items: dict[str, int]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> int:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class Tagged(str):
    __slots__ = ()


class Numbers(list[int]):
    pass


class Failure(Exception):
    pass


class DuplicateSlot(Vault):
    """Declares ``label`` again: two slots of one name in the hierarchy."""

    __slots__ = ("label",)


class CoordinateSubclass(Coordinate):
    """A subclass of a named tuple is no longer a named tuple: a tuple with hidden state."""

    __slots__ = ()


class ArmedHashKey(NamedTuple):
    """Hashes like a tuple until armed, then raises: application code running inside a save."""

    value: int

    def __hash__(self) -> int:
        CALLS.append("ArmedHashKey.__hash__")
        if ARMED:
            raise RuntimeError("ArmedHashKey.__hash__ raised")
        return hash(self.value)


ARMED: list[bool] = []
"""Non-empty while :class:`ArmedHashKey` must raise."""


class AppPath(pathlib.PurePosixPath):
    """An application's own path class: ``pathlib`` caches ``str()`` and ``hash()`` in slots."""

    __slots__ = ()


class Partial:
    """Slots that may stay unset."""

    __slots__ = ("first", "second")

    first: Any
    second: Any


# -- one value holding every kind of state ---------------------------------------------------------


ALLOWED_FOR_RICH: tuple[type, ...] = (
    Address,
    Customer,
    Flexible,
    WithPrivate,
    FrozenSettings,
    Tags,
    Coordinate,
    Pair,
    HashedCoordinate,
    FrozenRecord,
    SlottedRecord,
    FrozenSlotted,
    Vault,
    VaultChild,
    Hidden,
    Plain,
    Color,
    Level,
    Perm,
)
"""Classes :func:`rich_value` instantiates."""


def rich_value(*, reverse: bool = False) -> dict[str, Any]:
    """A value holding every kind of state the tests cover.

    With ``reverse``, every dict (extras and private attributes included) is built in the opposite
    insertion order and every set from its members in the opposite order: the same value.
    """

    def ordered(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
        return dict(reversed(pairs) if reverse else pairs)

    def members(items: list[Any]) -> set[Any]:
        built: set[Any] = set()
        for item in reversed(items) if reverse else items:
            built.add(item)
        return built

    customer = Customer(name="Ada", address=Address(street="1 rue X"), tags=["vip", "fr"])
    flexible = Flexible.model_validate(
        ordered([("id", 7), ("colour", "teal"), ("size", 3), ("nested", {"a": [1, 2]})])
    )
    private = WithPrivate(name="p")
    private._note = "t1"
    private._cache = ordered([("a", 1), ("b", 2), ("c", 3)])
    private_late = WithPrivate(name="late")
    private_late._late = "assigned"
    zoned = dt.datetime(2024, 11, 3, 1, 30, tzinfo=NEW_YORK, fold=1)
    return ordered(
        [
            ("customer", customer),
            ("defaulted", Address(street="s")),
            ("explicit", Address(street="s", city="Paris", zip_code=None)),
            ("flexible", flexible),
            ("private", private),
            ("private_late", private_late),
            ("frozen", FrozenSettings(key="k", when=dt.datetime(2025, 3, 30, 2, 30, tzinfo=PARIS))),
            ("root", Tags(["a", "b"])),
            ("coordinate", Coordinate(48.85, 2.35, "Paris")),
            ("pair", Pair("l", Pair(1, 2))),
            ("hashed", HashedCoordinate(1, 2)),
            ("tuple_keys", ordered([(Coordinate(1.0, 2.0), "a"), (Pair(1, "x"), "b"), (Level.LOW, "c")])),
            ("tuple_set", members([Coordinate(0.0, 0.0), Pair("a", "b"), Color.RED, Perm.W, "s", 3])),
            ("string_set", members([f"member-{index}" for index in range(20)])),
            # 1, 9 and 17 share a slot of a small set's table, so insertion order shows in iteration.
            ("int_set", members([1, 9, 17])),
            (
                "frozen_members",
                frozenset(members([pathlib.PurePosixPath("/a"), dt.date(2025, 1, 1), Level.LOW])),
            ),
            ("zoned", zoned),
            ("zoned_fold0", zoned.replace(fold=0)),
            ("paris", dt.datetime(2025, 7, 14, 12, 0, tzinfo=PARIS)),
            ("paris_time", dt.time(8, 15, tzinfo=PARIS)),
            (
                "named_offset",
                dt.datetime(2025, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30), "IST")),
            ),
            ("offset", dt.datetime(2025, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-3)))),
            ("utc", dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)),
            ("naive", dt.datetime(2025, 1, 1, 12, 0, 0, 123456)),
            (
                "paths",
                [
                    pathlib.PurePosixPath("/srv/app"),
                    pathlib.PureWindowsPath(r"C:\Users\ada"),
                    pathlib.PosixPath("relative/file.txt"),
                ],
            ),
            ("frozen_record", FrozenRecord("r", 2, pathlib.PurePosixPath("/srv/r"))),
            ("slotted_record", SlottedRecord("s", [1, 2, 3])),
            ("frozen_slotted", FrozenSlotted(1, 2)),
            ("vault", Vault("v", "secret-1")),
            ("vault_child", VaultChild("c", "parent-secret", "child-secret")),
            ("hidden", Hidden(5)),
            ("plain", Plain(**ordered([("alpha", 1), ("beta", [Level.HIGH]), ("gamma", {"k": Color.BLUE})]))),
            ("enums", [Color.RED, Level.HIGH, Perm.R, Perm.RW]),
            ("classes", {"response_type": str, "model": Customer, "zone_type": zoneinfo.ZoneInfo}),
        ]
    )
