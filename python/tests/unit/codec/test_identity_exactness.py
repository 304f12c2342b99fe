"""Canonical identity is exact: values Python calls equal but a load restores differently never share it.

``1``, ``True``, ``1.0`` and ``Decimal("1.0")`` are equal dict keys with equal hashes, and so are the
same instant at two offsets, ``0.0`` and ``-0.0``, or a str enum member and its text; a load gives
each back as it was saved. The save walk caches work by dict lookups, which match by equality, so
every cache must be keyed by something under which equal means identical, and no lookup may hash or
compare a key by the key's own code: the tests place each value after an earlier dict with an
*equal* key, where a cache would answer for it.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import enum
import pathlib
import struct
import subprocess
import sys
import zoneinfo
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, Final, cast

import pytest
from agent_framework import WorkflowCheckpoint
from hypothesis import event, given, settings
from hypothesis import strategies as st

from agent_framework_mongodb.checkpoints.codec import (
    CANONICAL_HEADER,
    CheckpointCodec,
    canonical_form,
    canonical_hash,
)
from agent_framework_mongodb.checkpoints.codec.rules import type_key
from agent_framework_mongodb.errors import MongoDBSerializationError
from tests.unit.codec.state_types import CALLS, Coordinate, EqualityCoordinate, Level, Plain, Tagged


class Shade(str, enum.Enum):
    """A str enum: each member is ``==`` to its text and hashes like it."""

    FAST = "fast"


HOOK_CALLS: list[str] = []
"""What the application code below ran; a save must leave it empty."""


class _PosingAsDecimal(type):
    """Its classes claim to be ``Decimal``: equal to it and hashing like it."""

    def __hash__(cls) -> int:
        HOOK_CALLS.append("_PosingAsDecimal.__hash__")
        return hash(Decimal)

    def __eq__(cls, other: object) -> bool:
        HOOK_CALLS.append("_PosingAsDecimal.__eq__")
        return other is Decimal or other is cls


class FakeDecimal(metaclass=_PosingAsDecimal):
    """Not allowed anywhere; if taken for a Decimal, it would be stored as ``Decimal("42")``."""

    def is_finite(self) -> bool:
        return True

    def __str__(self) -> str:
        return "42"


class _PosingAsPlain(type):
    """Its classes claim to be the allowed ``Plain``."""

    def __hash__(cls) -> int:
        HOOK_CALLS.append("_PosingAsPlain.__hash__")
        return hash(Plain)

    def __eq__(cls, other: object) -> bool:
        HOOK_CALLS.append("_PosingAsPlain.__eq__")
        return other is Plain or other is cls


class FakePlain(Plain, metaclass=_PosingAsPlain):
    """Not allowed; if taken for ``Plain`` after a real one, it would be stored as one."""


class NamedByCode(enum.Enum):
    """An enum whose ``name`` is the class's own code."""

    ONLY = 1

    @property
    def name(self) -> str:
        HOOK_CALLS.append("NamedByCode.name")
        return "ONLY"


class HookedText(str):
    """A str subclass with its own hashing, as a time-zone name or an attribute name."""

    __slots__ = ()

    def __hash__(self) -> int:
        HOOK_CALLS.append("HookedText.__hash__")
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        HOOK_CALLS.append("HookedText.__eq__")
        return str.__eq__(self, other)


class TextHashedKey:
    """A dict key that hashes as its text does, so a tuple of it hashes as a tuple of that text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __hash__(self) -> int:
        HOOK_CALLS.append("TextHashedKey.__hash__")
        return hash(self.text)

    def __eq__(self, other: object) -> bool:
        HOOK_CALLS.append("TextHashedKey.__eq__")
        return other == self.text


@pytest.fixture(autouse=True)
def _no_hook_calls() -> Iterator[None]:
    HOOK_CALLS.clear()
    yield
    assert HOOK_CALLS == [], "the save ran application code"


_ALLOWED: Final = tuple(type_key(cls) for cls in (Shade, Level, Coordinate, Plain, NamedByCode))

_UTC: Final = dt.timezone.utc
_PLUS_ONE: Final = dt.timezone(dt.timedelta(hours=1))
_NAMED_UTC: Final = dt.timezone(dt.timedelta(0), "UTC")
_PARIS: Final = zoneinfo.ZoneInfo("Europe/Paris")
_NOON: Final = dt.datetime(2024, 1, 1, 12, tzinfo=_UTC)

FAMILIES: Final[tuple[tuple[object, ...], ...]] = (
    (1, True, 1.0, Decimal(1), Decimal("1.0"), Level.LOW),
    (0, False, 0.0, -0.0, Decimal(0), Decimal("0.00"), Decimal("-0")),
    (2, 2.0, Decimal("2.0"), Level.HIGH),
    ("fast", Shade.FAST),
    (
        _NOON,
        _NOON.astimezone(_PLUS_ONE),
        _NOON.astimezone(_PARIS),
        _NOON.replace(tzinfo=_NAMED_UTC),
        _NOON.replace(fold=1),
    ),
    (dt.datetime(2024, 1, 1, 12), dt.datetime(2024, 1, 1, 12, fold=1)),
    (dt.time(12, tzinfo=_UTC), dt.time(13, tzinfo=_PLUS_ONE), dt.time(12, tzinfo=_NAMED_UTC)),
    (_UTC, _NAMED_UTC, dt.timezone(dt.timedelta(0), "Z")),
    (pathlib.PurePosixPath("/srv"), pathlib.PosixPath("/srv")),
    (pathlib.PureWindowsPath("C:/Users"), pathlib.PureWindowsPath("c:/users")),
)
"""Hashable values, pairwise ``==`` with equal hashes within a family, each encoding differently;
distinct families are never ``==``."""


def exactly_equal(first: object, second: object) -> bool:
    """``==`` that also compares types and the differences equality ignores, at every depth.

    Scalars of one type are compared by ``repr`` as well, which tells ``-0.0``, a Decimal's
    exponent, a datetime's zone and fold, a timezone's name and a path's class apart.
    """
    if type(first) is not type(second):
        return False
    if isinstance(first, (list, tuple)):
        assert isinstance(second, (list, tuple))
        return len(first) == len(second) and all(map(exactly_equal, first, second))
    if isinstance(first, dict):
        assert isinstance(second, dict)
        pairs = list(second.items())
        return len(first) == len(second) and all(
            any(exactly_equal(key, other_key) and exactly_equal(item, other) for other_key, other in pairs)
            for key, item in first.items()
        )
    if isinstance(first, (set, frozenset)):
        assert isinstance(second, (set, frozenset))
        return len(first) == len(second) and all(
            any(exactly_equal(member, other) for other in second) for member in first
        )
    return first == second and repr(first) == repr(second)


def _body(value: object) -> bytes:
    return canonical_form(value, _ALLOWED)[len(CANONICAL_HEADER) :]


def _two_dicts(first_key: object, second_key: object) -> bytes:
    """The canonical form of two one-key dicts in a list, written out by hand."""
    return CANONICAL_HEADER + b"l" + struct.pack(">I", 2) + _body({first_key: "v"}) + _body({second_key: "v"})


def _pairs() -> Iterator[tuple[object, object]]:
    for family in FAMILIES:
        for other in family[1:]:
            yield family[0], other
    yield (1, "x"), (True, "x")
    yield (0.0,), (-0.0,)
    yield frozenset({1}), frozenset({1.0})
    yield (1.0, 2.0, ""), Coordinate(1.0, 2.0)


_PAIRS: Final = list(_pairs())


def test_families_are_equal_yet_encode_apart() -> None:
    # Guards the tests below: Python cannot tell a family's members apart as dict keys.
    for family in FAMILIES:
        assert len({hash(member) for member in family}) == 1
        assert all(member == family[0] for member in family)
        assert len({_body(member) for member in family}) == len(family)
    for position, family in enumerate(FAMILIES):
        for other in FAMILIES[position + 1 :]:
            assert family[0] != other[0]


@pytest.mark.parametrize(("first", "second"), _PAIRS, ids=repr)
def test_a_key_equal_to_an_earlier_dicts_key_keeps_its_own_identity(first: object, second: object) -> None:
    assert first == second
    assert hash(first) == hash(second)

    assert canonical_form([{first: "v"}, {second: "v"}], _ALLOWED) == _two_dicts(first, second)
    assert canonical_hash([{first: "v"}, {second: "v"}], _ALLOWED) != canonical_hash(
        [{first: "v"}, {first: "v"}], _ALLOWED
    )


@pytest.mark.parametrize(("first", "second"), _PAIRS, ids=repr)
def test_a_key_equal_to_an_earlier_dicts_key_in_object_state_keeps_its_own_identity(
    first: object, second: object
) -> None:
    earlier, later = Plain(table={first: "v"}), Plain(table={second: "v"})
    assert canonical_hash([earlier, later], _ALLOWED) != canonical_hash([earlier, earlier], _ALLOWED)


def test_a_str_subclass_key_after_an_equal_str_key_is_refused() -> None:
    # Tagged("a") == "a": a cache answering for it would store a class the load cannot rebuild.
    with pytest.raises(MongoDBSerializationError, match="built-in type"):
        canonical_form([{"a": 1}, {Tagged("a"): 1}], (type_key(Tagged),))


def test_a_key_equal_to_an_earlier_tuple_key_is_never_compared() -> None:
    # Only orders of str keys are cached, so no lookup meets the earlier (1, 2) to call __eq__.
    CALLS.clear()
    with pytest.raises(MongoDBSerializationError, match="dict key"):
        canonical_form([{(1, 2): "v"}, {EqualityCoordinate(1, 2): "v"}], (type_key(EqualityCoordinate),))
    assert CALLS == []


def test_a_key_that_hashes_like_an_earlier_dicts_str_key_is_never_hashed_or_compared() -> None:
    # Its key tuple hashes as ("a",) does: a cache lookup by the tuple would run its __hash__,
    # then its __eq__ against the earlier dict's "a" (equal, so it would take that dict's order).
    value = [{"a": "v"}, {TextHashedKey("a"): "v"}]
    HOOK_CALLS.clear()
    with pytest.raises(MongoDBSerializationError, match="dict key"):
        canonical_form(value, (type_key(TextHashedKey),))


def test_an_attribute_name_that_is_a_str_subclass_is_refused_without_hashing_it() -> None:
    # The earlier Plain makes ("a",) a known clean layout; looking the later one's names up in it
    # would hash and compare HookedText("a") its own way.
    later = Plain(a=1)
    del later.__dict__["a"]
    later.__dict__[HookedText("a")] = 1
    HOOK_CALLS.clear()
    with pytest.raises(MongoDBSerializationError, match="str names"):
        canonical_form([Plain(a=1), later], _ALLOWED)


@pytest.mark.parametrize(
    "build",
    [
        lambda: {FakeDecimal: "v"},
        lambda: {(FakeDecimal,): "v"},
        lambda: [{Decimal: "v"}, {FakeDecimal: "v"}],
        lambda: {FakeDecimal},
        lambda: {frozenset({FakeDecimal}): "v"},
    ],
    ids=["key", "key-in-tuple", "key-after-decimal", "set-member", "key-in-frozenset"],
)
def test_a_class_key_with_its_own_metaclass_is_refused_without_hashing_it(build: Any) -> None:
    value = build()  # building the container hashed the class; the save must not
    HOOK_CALLS.clear()
    with pytest.raises(MongoDBSerializationError, match="metaclass"):
        canonical_form(value)


def test_an_object_whose_class_equals_decimal_is_not_stored_as_a_decimal() -> None:
    with pytest.raises(MongoDBSerializationError, match="metaclass"):
        canonical_form([Decimal(42), FakeDecimal()])


def test_a_class_that_equals_decimal_is_not_stored_as_decimal() -> None:
    with pytest.raises(MongoDBSerializationError, match="metaclass"):
        canonical_form([Decimal, FakeDecimal])


def test_an_object_whose_class_equals_an_allowed_class_is_not_stored_as_one() -> None:
    with pytest.raises(MongoDBSerializationError, match="metaclass"):
        canonical_form([Plain(a=1), FakePlain(a=1)], _ALLOWED)


def test_an_enum_member_is_named_without_running_the_enums_code() -> None:
    form = canonical_form(NamedByCode.ONLY, _ALLOWED)
    assert form.endswith(b"\x00\x00\x00\x04ONLY")


def test_a_zone_named_by_a_str_subclass_is_refused_without_hashing_it() -> None:
    zone = dt.timezone(dt.timedelta(hours=1), HookedText("CET"))
    with pytest.raises(MongoDBSerializationError, match="time zone name"):
        canonical_form([{"CET": 1}, dt.datetime(2024, 1, 1, tzinfo=zone)])


_LEAF_PROBE: Final = """
from agent_framework_mongodb.checkpoints.codec.chunks import Chunker
assert Chunker(b"context").split([["a", b"a", "x" * 40, n] for n in range(3000)]).chunks
"""


def test_a_leaf_holding_a_text_and_equal_bytes_never_compares_them() -> None:
    # "a" and b"a" hash alike: one table of both compared them, which -bb makes an error.
    probe = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-bb", "-c", _LEAF_PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    assert probe.returncode == 0, probe.stderr


# -- property: trees that differ anywhere never share an identity -----------------------------------


@dataclasses.dataclass(frozen=True)
class Atom:
    """A leaf or key: some member of ``FAMILIES[family]``."""

    family: int


@dataclasses.dataclass(frozen=True)
class Node:
    """A container of specs: ``kind`` is ``list``, ``tuple``, ``dict``, ``set`` or ``frozenset``;
    a dict's children are alternating key and value specs."""

    kind: str
    children: tuple[Atom | Node, ...]


Spec = Atom | Node

_atoms = st.builds(Atom, st.integers(min_value=0, max_value=len(FAMILIES) - 1))


def _atom_sets(members: st.SearchStrategy[Spec]) -> st.SearchStrategy[tuple[Spec, ...]]:
    # Equal members would collapse into one, so specs are unique, and a frozenset's specs sorted:
    # two specs then build equal values only if they are the same spec.
    return st.lists(members, max_size=4, unique=True).map(lambda specs: tuple(sorted(specs, key=repr)))


_hashables: st.SearchStrategy[Spec] = st.recursive(
    _atoms,
    lambda children: (
        st.builds(Node, st.just("tuple"), st.lists(children, max_size=3).map(tuple))
        | st.builds(Node, st.just("frozenset"), _atom_sets(_atoms))
    ),
    max_leaves=4,
)


def _dicts(values: st.SearchStrategy[Spec]) -> st.SearchStrategy[Spec]:
    entries = st.lists(st.tuples(_hashables, values), max_size=4, unique_by=lambda entry: entry[0])
    return entries.map(lambda pairs: Node("dict", tuple(part for pair in pairs for part in pair)))


_specs: st.SearchStrategy[Spec] = st.recursive(
    _atoms,
    lambda children: (
        st.builds(Node, st.sampled_from(["list", "tuple"]), st.lists(children, max_size=4).map(tuple))
        | _dicts(children)
        | st.builds(Node, st.sampled_from(["set", "frozenset"]), _atom_sets(_hashables))
    ),
    max_leaves=20,
).filter(lambda spec: _count_atoms(spec) > 0)


def _count_atoms(spec: Spec) -> int:
    if isinstance(spec, Atom):
        return 1
    return sum(_count_atoms(child) for child in spec.children)


def _realize(spec: Spec, variants: list[int], *, reversed_dicts: bool = False) -> object:
    """Build the value of ``spec``, atom ``n`` (depth first) being variant ``variants[n]``;
    with ``reversed_dicts``, every dict's entries are inserted in reverse order."""
    position = iter(range(len(variants)))

    def build(node: Spec) -> Any:
        if isinstance(node, Atom):
            family = FAMILIES[node.family]
            return family[variants[next(position)] % len(family)]
        children = [build(child) for child in node.children]
        if node.kind == "dict":
            entries = list(zip(children[::2], children[1::2], strict=True))
            return dict(entries[::-1] if reversed_dicts else entries)
        kinds: dict[str, Any] = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
        return kinds[node.kind](children)

    return build(spec)


@st.composite
def _twins(draw: st.DrawFn) -> tuple[object, object]:
    """A tree twice (the earlier copy fills any cache), and the same with one atom replaced by
    another member of its family: ``==`` to it, yet not the same value."""
    spec = draw(_specs)
    count = _count_atoms(spec)
    variants = draw(st.lists(st.integers(min_value=0, max_value=6), min_size=count, max_size=count))
    site = draw(st.integers(min_value=0, max_value=count - 1))
    family = FAMILIES[_family_at(spec, site)]
    current = variants[site] % len(family)
    replacement = (current + draw(st.integers(min_value=1, max_value=len(family) - 1))) % len(family)
    twin_variants = [*variants[:site], replacement, *variants[site + 1 :]]
    earlier = _realize(spec, variants)
    return [earlier, _realize(spec, variants)], [earlier, _realize(spec, twin_variants)]


def _family_at(spec: Spec, site: int) -> int:
    atoms: list[int] = []

    def collect(node: Spec) -> None:
        if isinstance(node, Atom):
            atoms.append(node.family)
        else:
            for child in node.children:
                collect(child)

    collect(spec)
    return atoms[site]


@settings(max_examples=300, deadline=None)
@given(_twins())
def test_trees_that_differ_anywhere_never_share_an_identity(twins: tuple[object, object]) -> None:
    original, twin = twins
    assert original == twin  # equality cannot tell them apart
    assert not exactly_equal(original, twin)
    assert canonical_hash(original, _ALLOWED) != canonical_hash(twin, _ALLOWED)


@settings(max_examples=100, deadline=None)
@given(_twins())
def test_an_exact_copy_shares_the_identity(twins: tuple[object, object]) -> None:
    original, _ = twins
    duplicate = copy.deepcopy(original)
    assert exactly_equal(original, duplicate)
    assert canonical_hash(duplicate, _ALLOWED) == canonical_hash(original, _ALLOWED)


def test_a_str_enum_key_after_an_equal_str_key_round_trips() -> None:
    # The later dict's keys are equal to the earlier one's, whose order is cached; one is a str
    # enum member, so that order is not looked up for it. "first" is walked before "second" (the
    # shorter encoded key sorts first).
    state = {"first": {"a": [1], "fast": 0}, "second": {"a": [1], Shade.FAST: 0}}
    # Entries in the order of their encoded keys, each value encoded by a walk of its own.
    entries = b"".join(_body(name) + _body(state[name]) for name in sorted(state, key=_body))
    assert canonical_form(state, _ALLOWED) == CANONICAL_HEADER + b"d" + struct.pack(">I", 2) + entries
    codec = CheckpointCodec(_ALLOWED)
    checkpoint = WorkflowCheckpoint(
        workflow_name="wf", graph_signature_hash="g", checkpoint_id="c", timestamp="t", state=state
    )
    encoded = codec.encode(checkpoint)
    restored = codec.decode(encoded.payload, checksum=encoded.payload_checksum).state
    assert exactly_equal(restored, state)
    assert encoded.payload_hash == canonical_hash(checkpoint.to_dict(), _ALLOWED)


# -- property: one identity exactly when the loads are identical ------------------------------------


def exact_form(value: object) -> object:
    """A hashable description of ``value`` that two values share exactly when a load cannot tell
    them apart: types and ``repr`` of scalars (``-0.0``, a Decimal's exponent, a datetime's zone
    and fold, a path's class), container kinds, and neither dict nor set order."""
    cls = type(value)
    if cls is dict:
        items = cast("dict[object, object]", value).items()
        return ("dict", frozenset((exact_form(key), exact_form(item)) for key, item in items))
    if cls is list or cls is tuple:
        return (cls.__name__, tuple(exact_form(item) for item in cast("tuple[object, ...]", value)))
    if cls is set or cls is frozenset:
        return (cls.__name__, frozenset(exact_form(member) for member in cast("frozenset[object]", value)))
    return (cls.__module__, cls.__qualname__, repr(value))


@st.composite
def _trees_after_an_earlier_one(draw: st.DrawFn) -> tuple[object, object, object]:
    """An earlier tree and two trees saved after it. All three are built from one spec, so the
    earlier one's dicts hold keys equal to theirs; the second tree takes each atom from the first
    or another variant (often the same one), and may insert its dicts' entries in reverse order."""
    spec = draw(_specs)
    count = _count_atoms(spec)
    variants = st.lists(st.integers(min_value=0, max_value=6), min_size=count, max_size=count)
    first = draw(variants)
    changes = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    other = draw(variants)
    second = [
        changed if change else kept for kept, changed, change in zip(first, other, changes, strict=True)
    ]
    earlier = _realize(spec, draw(variants))
    return earlier, _realize(spec, first), _realize(spec, second, reversed_dicts=draw(st.booleans()))


def _save_and_load(codec: CheckpointCodec, earlier: object, value: object) -> tuple[str, object]:
    """The payload hash of a checkpoint holding ``earlier`` then ``value``, and ``value`` as it loads."""
    checkpoint = WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="g",
        checkpoint_id="c",
        timestamp="t",
        state={"trees": [earlier, value]},
    )
    encoded = codec.encode(checkpoint)
    restored = codec.decode(encoded.payload, checksum=encoded.payload_checksum)
    return encoded.payload_hash, restored.state["trees"][1]


@settings(max_examples=300, deadline=None)
@given(_trees_after_an_earlier_one())
def test_two_values_share_an_identity_exactly_when_they_load_back_identically(
    values: tuple[object, object, object],
) -> None:
    earlier, first, second = values
    codec = CheckpointCodec(_ALLOWED)
    first_hash, first_loaded = _save_and_load(codec, earlier, first)
    second_hash, second_loaded = _save_and_load(codec, earlier, second)
    assert exact_form(first_loaded) == exact_form(first)
    assert exact_form(second_loaded) == exact_form(second)
    event("same identity" if first_hash == second_hash else "other identities")
    assert (first_hash == second_hash) == (exact_form(first_loaded) == exact_form(second_loaded))
