"""Canonical identity (hash version 3): tags, ordering, guards and failures."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterator, Mapping
from decimal import Decimal

import pytest
from agent_framework import Content, Message, WorkflowCheckpointException

from agent_framework_mongodb.checkpoints import codec
from agent_framework_mongodb.checkpoints.codec import CANONICAL_HASH_VERSION, CANONICAL_HEADER
from agent_framework_mongodb.errors import MongoDBMappingError, MongoDBSerializationError
from tests.unit.codec.app_types import Color, HookedEnum, HookedState, Mapped, OrderState, Point, Unkeyed

_APPLICATION_TYPES = tuple(
    f"tests.unit.codec.app_types:{name}"
    for name in (
        "Color",
        "HookedEnum",
        "HookedState",
        "Mapped",
        "OrderState",
        "Point",
        "SlottedPoint",
        "Unkeyed",
    )
)


def canonical_form(value: object) -> bytes:
    return codec.canonical_form(value, _APPLICATION_TYPES)


def canonical_hash(value: object) -> str:
    return codec.canonical_hash(value, _APPLICATION_TYPES)


class _ReadOnly(Mapping[str, int]):
    def __getitem__(self, key: str) -> int:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_version_and_header() -> None:
    assert CANONICAL_HASH_VERSION == 3
    assert canonical_form(None) == CANONICAL_HEADER + b"N"
    assert len(canonical_hash({})) == 64


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (1, 1.0),
        (1, True),
        (1.0, True),
        (0, False),
        (0.0, -0.0),
        ("a", b"a"),
        (b"a", bytearray(b"a")),
        ([1], (1,)),
        ({1}, frozenset({1})),
        ([], {}),
        ("", None),
        (dt.date(2020, 1, 2), dt.datetime(2020, 1, 2)),
        (dt.datetime(2020, 1, 2), dt.datetime(2020, 1, 2, tzinfo=dt.timezone.utc)),
        (Decimal("1.0"), Decimal("1.00")),
        (Decimal("1"), 1),
        (Color.RED, "red"),
        (Point(1, 2), {"x": 1, "y": 2}),
        (dt.datetime(2021, 11, 7, 1, 30), dt.datetime(2021, 11, 7, 1, 30, fold=1)),
    ],
)
def test_distinct_values_hash_differently(left: object, right: object) -> None:
    assert canonical_hash(left) != canonical_hash(right)


def test_dict_order_and_hash_seed_do_not_matter() -> None:
    forward = {"b": 1, "a": [1, 2], 3: "x", (1, "t"): None}
    backward = dict(reversed(list(forward.items())))
    assert list(forward) != list(backward)
    assert canonical_form(forward) == canonical_form(backward)


def test_sets_are_ordered_by_encoding() -> None:
    values: set[object] = {"pear", "apple", 3, 2.5, (1, 2), b"z"}
    rebuilt: set[object] = set()
    for value in reversed(list(values)):
        rebuilt.add(value)
    assert canonical_form(values) == canonical_form(rebuilt)
    assert canonical_form(frozenset(values)) == canonical_form(frozenset(rebuilt))


def test_standard_values_encode() -> None:
    tz = dt.timezone(dt.timedelta(hours=-5, minutes=-30), "Somewhere")
    value = {
        "when": dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=tz),
        "day": dt.date(1, 1, 1),
        "clock": dt.time(12, 0, tzinfo=dt.timezone.utc),
        "span": dt.timedelta(days=-1, microseconds=5),
        "id": uuid.UUID(int=7),
        "amount": Decimal("-0.00"),
        "big": 2**200,
        "neg": -(2**70),
    }
    assert canonical_hash(value) == canonical_hash(dict(value))
    assert canonical_hash(dt.timezone(dt.timedelta(hours=1))) != canonical_hash(
        dt.timezone(dt.timedelta(hours=1), "CET")
    )


def test_objects_carry_type_identity_and_state() -> None:
    assert canonical_hash(OrderState("o-1")) == canonical_hash(OrderState("o-1"))
    assert canonical_hash(OrderState("o-1")) != canonical_hash(OrderState("o-2"))
    assert b"tests.unit.codec.app_types:OrderState" in canonical_form(OrderState("o-1"))
    assert b"tests.unit.codec.app_types:Point" in canonical_form(Point(1, 2))


def test_framework_messages_encode_through_their_own_state() -> None:
    first = Message(role="user", contents=[Content.from_text("hello")])
    second = Message(role="user", contents=[Content.from_text("hello")])
    assert canonical_hash(first) == canonical_hash(second)
    assert canonical_hash(first) != canonical_hash(
        Message(role="assistant", contents=[Content.from_text("hello")])
    )


@pytest.mark.parametrize(
    "mapping",
    [
        OrderedDict(a=1),
        defaultdict(int, a=1),
        Counter("aab"),
        Mapped(a=1),
        _ReadOnly(),
    ],
    ids=["OrderedDict", "defaultdict", "Counter", "allowlistable-subclass", "Mapping-ABC"],
)
def test_every_mapping_but_exact_dict_is_rejected(mapping: object) -> None:
    with pytest.raises(MongoDBSerializationError, match="only exact dict"):
        canonical_form({"nested": [mapping]})


def test_mapping_guard_runs_before_enum_handling() -> None:
    # An enum that is also a Mapping (through ABC registration: enum and mapping metaclasses
    # cannot be combined by inheritance) must meet the mapping guard, not the enum rule.
    class MappingEnum(enum.Enum):
        ONLY = 1

    Mapping.register(MappingEnum)
    with pytest.raises(MongoDBSerializationError, match="only exact dict"):
        canonical_form(MappingEnum.ONLY)


def test_pickle_hooks_neither_run_nor_change_the_identity() -> None:
    from tests.unit.codec.app_types import HOOK_CALLS

    assert canonical_form(HookedState(1)) != canonical_form(HookedState(2))
    assert canonical_form(HookedEnum.A).endswith(
        b"e" + _length_prefixed("tests.unit.codec.app_types:HookedEnum") + _length_prefixed("A")
    )
    assert HOOK_CALLS == []


def test_cycles_are_rejected() -> None:
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(MongoDBMappingError, match="cycle"):
        canonical_form({"a": looped})
    state = OrderState("o")
    state.lines = [state]  # type: ignore[list-item]
    with pytest.raises(MongoDBMappingError, match="cycle"):
        canonical_form(state)


def test_shared_references_are_not_cycles() -> None:
    shared = [1, 2]
    assert canonical_form([shared, shared]) == canonical_form([[1, 2], [1, 2]])


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), -float("inf"), Decimal("NaN"), Decimal("-Infinity")]
)
def test_non_finite_numbers_are_rejected(value: object) -> None:
    with pytest.raises(MongoDBMappingError, match="NaN or infinite"):
        canonical_form([value])


@pytest.mark.parametrize(
    "value",
    [print, len, uuid, complex(1, 2), range(3), memoryview(b"x"), ValueError("x"), iter([])],
    ids=[
        "builtin-function",
        "len",
        "module",
        "complex",
        "range",
        "memoryview",
        "exception",
        "iterator",
    ],
)
def test_unsupported_values_are_mapping_errors(value: object) -> None:
    with pytest.raises(MongoDBMappingError) as raised:
        canonical_form({"v": value})
    assert isinstance(raised.value, WorkflowCheckpointException)


def test_class_objects_are_named_references() -> None:
    # A paused workflow's request event holds its response type as a class object.
    assert canonical_form(str) == CANONICAL_HEADER + b"c\x00\x00\x00\x0cbuiltins:str"
    assert canonical_form(OrderState) == CANONICAL_HEADER + b"c" + _length_prefixed(
        "tests.unit.codec.app_types:OrderState"
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [(str, "builtins:str"), (str, bytes), (int, bool), (OrderState, OrderState(order_id="o"))],
)
def test_class_references_are_distinct_from_other_values(first: object, second: object) -> None:
    assert canonical_form(first) != canonical_form(second)


def test_class_defined_in_a_function_has_no_reference() -> None:
    class Local:
        pass

    with pytest.raises(MongoDBMappingError, match="inside a function"):
        canonical_form({"response_type": Local})


def _length_prefixed(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(4, "big") + data


def test_local_classes_are_unsupported() -> None:
    class Local:
        pass

    with pytest.raises(MongoDBMappingError, match="defined inside a function"):
        canonical_form(Local())


def test_builtin_subclasses_are_unsupported() -> None:
    class Text(str):
        pass

    with pytest.raises(MongoDBMappingError):
        canonical_form([Text("a")])


def test_application_objects_are_neither_set_members_nor_dict_keys() -> None:
    # Rebuilding the set or dict on load would run the class's own __hash__ and __eq__.
    with pytest.raises(MongoDBSerializationError, match="hashing code"):
        canonical_form({Unkeyed("a"): 1})
    with pytest.raises(MongoDBSerializationError, match="hashing code"):
        canonical_form({Point(1, 2)})


def test_deep_nesting_becomes_a_mapping_error() -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(MongoDBMappingError, match="nested more than 100 levels"):
        canonical_form(deep)


def test_surrogates_are_distinguished() -> None:
    assert canonical_hash("\ud800") != canonical_hash("\ud801")
