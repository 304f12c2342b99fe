"""Codec v2 on application state: pydantic models, named tuples, zones, paths, records, enums.

Every value goes into a real ``WorkflowCheckpoint``'s ``state``, through ``encode`` and ``decode``
of a codec that allows its classes (by name, by class object through the options, or both), and
must come back exactly: the same types, equal values, and the same instance state read straight
from ``__dict__`` and slots. No hook of an application class may run on either side.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import decimal
import enum
import io
import pathlib
import struct
import sys
import types
import uuid
import zoneinfo
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pydantic
import pytest
from agent_framework import Message, WorkflowCheckpoint

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageOptions,
    MongoDBConfigurationError,
    MongoDBMappingError,
    MongoDBSerializationError,
)
from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, canonical_hash
from agent_framework_mongodb.testing import InMemoryMongoClient
from tests.unit.codec import state_types as st
from tests.unit.codec.state_types import (
    ARMED,
    CALLS,
    NEW_YORK,
    PARIS,
    Address,
    AnswersEverything,
    ArmedHashKey,
    Box,
    Color,
    Coordinate,
    CoordinateSubclass,
    Customer,
    DictProperty,
    DuplicateSlot,
    EqualityCoordinate,
    Failure,
    Flexible,
    FrozenRecord,
    FrozenSettings,
    FrozenSlotted,
    HashedCoordinate,
    Hidden,
    Hooked,
    Level,
    Numbers,
    Pair,
    Partial,
    Perm,
    Plain,
    RaisingGetattribute,
    ReadOnlyMapping,
    Registry,
    Scores,
    SideEffectKey,
    SlottedRecord,
    Tagged,
    Tags,
    Validated,
    Vault,
    VaultChild,
    WithPrivate,
    key_of,
)

Allow = Callable[[Iterable[type]], CheckpointCodec]

_SCOPE: dict[str, Any] = {"tenant_id": "tenant", "workflow_name": "wf", "session_id": "run-1"}


def _by_name(classes: Iterable[type]) -> CheckpointCodec:
    return CheckpointCodec(tuple(key_of(cls) for cls in classes))


def _options(allowed: Iterable[type | str] = ()) -> MongoDBCheckpointStorageOptions:
    # The field is annotated as the tuple of names it stores, though it accepts any iterable of
    # classes and names; the keyword goes through a dict so the tests pass what users pass.
    fields: dict[str, Any] = {**_SCOPE, "allowed_checkpoint_types": allowed}
    return MongoDBCheckpointStorageOptions(**fields)


def _by_class_through_options(classes: Iterable[type]) -> CheckpointCodec:
    return CheckpointCodec(_options(list(classes)).allowed_checkpoint_types)


def _mixed_through_options(classes: Iterable[type]) -> CheckpointCodec:
    # A generator (any iterable) alternating class objects and names.
    entries = (cls if position % 2 else key_of(cls) for position, cls in enumerate(classes))
    return CheckpointCodec(_options(entries).allowed_checkpoint_types)


@pytest.fixture(
    params=[_by_name, _by_class_through_options, _mixed_through_options],
    ids=["names", "classes-via-options", "mixed-via-options"],
)
def allow(request: pytest.FixtureRequest) -> Allow:
    factory: Allow = request.param
    return factory


@pytest.fixture(autouse=True)
def _clean_calls() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()
    ARMED.clear()


# -- helpers ----------------------------------------------------------------------------------------


def _checkpoint(state: dict[str, Any]) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="g" * 64,
        checkpoint_id="cp-state-types",
        timestamp="2025-01-01T00:00:00+00:00",
        state=state,
    )


def _round_trip(codec: CheckpointCodec, value: Any) -> Any:
    """Encode and decode ``value`` inside a checkpoint; no application hook may run."""
    CALLS.clear()
    encoded = codec.encode(_checkpoint({"value": value}))
    assert CALLS == [], "the save ran application code"
    restored = codec.decode(encoded.payload, checksum=encoded.payload_checksum)
    assert CALLS == [], "the load ran application code"
    return restored.state["value"]


def _instance_dict(value: object) -> dict[str, Any] | None:
    for klass in type(value).__mro__:
        descriptor = vars(klass).get("__dict__")
        if type(descriptor) is types.GetSetDescriptorType:
            state: dict[str, Any] = descriptor.__get__(value)
            return state
    return None


def _slot_values(value: object) -> dict[str, Any]:
    slots: dict[str, Any] = {}
    for klass in type(value).__mro__:
        for name, attribute in vars(klass).items():
            if type(attribute) is types.MemberDescriptorType:
                try:
                    slots[name] = attribute.__get__(value)
                except AttributeError:
                    continue
    return slots


def _zone(zone: dt.tzinfo | None) -> Any:
    if type(zone) is zoneinfo.ZoneInfo:
        return ("ZoneInfo", zone.key, zone is zoneinfo.ZoneInfo(zone.key))
    return repr(zone)  # timezone's repr tells named from unnamed and utc from timezone(0)


def _exact(value: Any) -> Any:  # noqa: PLR0911, PLR0912 - one case per kind of value
    """A structure equal only for values of identical types and identical state, recursively.

    Objects are read through the interpreter's own descriptors, never their attribute hooks.
    Dict order is kept (the codec preserves it); set members are compared order-free.
    """
    cls = type(value)
    if value is None or cls in (str, int, bool, bytes):
        return (cls, value)
    if cls is float:
        return (cls, value.hex())
    if cls is list:
        return (cls, [_exact(item) for item in value])
    if cls is dict:
        return (cls, [(_exact(key), _exact(item)) for key, item in value.items()])
    if cls in (set, frozenset):
        return (cls, sorted(repr(_exact(member)) for member in value))
    if cls in (dt.datetime, dt.time):
        return (cls, value.replace(tzinfo=None).isoformat(), value.fold, _zone(value.tzinfo))
    if cls in (dt.date, dt.timedelta, uuid.UUID):
        return (cls, value)
    if cls is decimal.Decimal:
        return (cls, str(value))
    if cls is zoneinfo.ZoneInfo or cls is dt.timezone:
        return (cls, _zone(value))
    # pathlib classes live in pathlib._local from Python 3.13 on.
    if isinstance(value, pathlib.PurePath) and cls.__module__.partition(".")[0] == "pathlib":
        return (cls, str(value))
    if isinstance(value, enum.Enum):
        return (cls, value.name, value is cls[value.name])
    if isinstance(value, type):
        return ("class", value)
    if isinstance(value, tuple):
        return (cls, [_exact(item) for item in value])
    instance_dict = _instance_dict(value)
    return (
        cls,
        None if instance_dict is None else _exact(instance_dict),
        _exact(_slot_values(value)),
    )


def _assert_exact(restored: Any, original: Any) -> None:
    assert type(restored) is type(original)
    assert _exact(restored) == _exact(original)


def _tzif(offset_seconds: int, abbreviation: bytes) -> bytes:
    """A minimal TZif (version 1) file: one fixed offset, no transitions."""
    counts = struct.pack(">6l", 0, 0, 0, 0, 1, len(abbreviation) + 1)
    return (
        b"TZif" + b"\x00" * 16 + counts + struct.pack(">lBB", offset_seconds, 0, 0) + abbreviation + b"\x00"
    )


def _refused(codec: CheckpointCodec, value: Any) -> MongoDBSerializationError:
    """The save of ``value`` is refused with a serialization error and runs no application code."""
    CALLS.clear()
    with pytest.raises(MongoDBSerializationError) as caught:
        codec.encode(_checkpoint({"value": value}))
    assert type(caught.value) is MongoDBSerializationError
    return caught.value


# -- 1. pydantic models ------------------------------------------------------------------------------


def test_plain_and_nested_models(allow: Allow) -> None:
    original = Customer(name="Ada", address=Address(street="1 rue X", zip_code="75001"), tags=["vip"])
    restored = _round_trip(allow([Customer, Address]), original)

    _assert_exact(restored, original)
    assert restored == original
    assert restored is not original
    assert type(restored.address) is Address
    assert restored.address is not original.address
    assert restored.model_fields_set == {"name", "address", "tags"}
    assert restored.address.model_fields_set == {"street", "zip_code"}
    assert restored.model_dump() == original.model_dump()
    assert restored.model_dump(exclude_unset=True) == original.model_dump(exclude_unset=True)


def test_nested_model_class_must_be_allowed_too() -> None:
    error = _refused(_by_name([Customer]), Customer(name="Ada", address=Address(street="s")))
    assert key_of(Address) in str(error)


def test_fields_set_is_preserved_exactly(allow: Allow) -> None:
    codec = allow([Address])
    defaulted = Address(street="s")
    explicit = Address(street="s", city="Paris", zip_code=None)
    constructed = Address.model_construct(_fields_set={"city"}, street="s")
    assert defaulted == explicit  # pydantic's == ignores which fields were set

    for original in (defaulted, explicit, constructed):
        restored = _round_trip(codec, original)
        _assert_exact(restored, original)
        assert restored.model_fields_set == original.model_fields_set
        assert type(restored.model_fields_set) is set

    assert _round_trip(codec, defaulted).model_dump(exclude_unset=True) == {"street": "s"}
    assert canonical_hash(defaulted, [key_of(Address)]) != canonical_hash(explicit, [key_of(Address)])


def test_extra_allow_keeps_extras(allow: Allow) -> None:
    original = Flexible.model_validate(
        {"id": 7, "colour": "teal", "size": 3, "nested": {"a": [1, 2]}, "when": dt.date(2025, 1, 2)}
    )
    restored = _round_trip(allow([Flexible]), original)

    _assert_exact(restored, original)
    assert restored == original
    assert restored.__pydantic_extra__ == {
        "colour": "teal",
        "size": 3,
        "nested": {"a": [1, 2]},
        "when": dt.date(2025, 1, 2),
    }
    assert list(restored.__pydantic_extra__ or {}) == ["colour", "size", "nested", "when"]
    assert restored.model_fields_set == {"id", "colour", "size", "nested", "when"}
    assert restored.model_dump() == original.model_dump()


def test_extra_allow_without_extras(allow: Allow) -> None:
    original = Flexible(id=1)
    restored = _round_trip(allow([Flexible]), original)
    _assert_exact(restored, original)
    assert restored.__pydantic_extra__ == {}


def test_private_attributes_set_defaulted_and_unset(allow: Allow) -> None:
    codec = allow([WithPrivate])
    fresh = WithPrivate(name="fresh")
    assigned = WithPrivate(name="assigned")
    assigned._note = "t1"
    assigned._cache = {"hits": 3}
    assigned._late = "late"

    restored_fresh = _round_trip(codec, fresh)
    _assert_exact(restored_fresh, fresh)
    assert restored_fresh == fresh
    assert restored_fresh._note == "t0"
    assert restored_fresh._cache == {}
    assert "_late" not in (restored_fresh.__pydantic_private__ or {})
    with pytest.raises(AttributeError):
        _ = restored_fresh._late

    restored_assigned = _round_trip(codec, assigned)
    _assert_exact(restored_assigned, assigned)
    assert restored_assigned == assigned
    assert (restored_assigned._note, restored_assigned._cache, restored_assigned._late) == (
        "t1",
        {"hits": 3},
        "late",
    )
    assert restored_assigned._cache is not assigned._cache


def test_private_attribute_deleted_stays_deleted(allow: Allow) -> None:
    original = WithPrivate(name="n")
    del original._note
    restored = _round_trip(allow([WithPrivate]), original)
    _assert_exact(restored, original)
    with pytest.raises(AttributeError):
        _ = restored._note


def test_model_without_private_attributes_keeps_none_private_slot(allow: Allow) -> None:
    original = Address(street="s")
    assert original.__pydantic_private__ is None
    restored = _round_trip(allow([Address]), original)
    assert restored.__pydantic_private__ is None
    assert restored.__pydantic_extra__ is None


def test_frozen_model_stays_frozen_and_hashes_alike(allow: Allow) -> None:
    original = FrozenSettings(key="k", when=dt.datetime(2025, 3, 30, 3, 30, tzinfo=PARIS), limits=(1, 2))
    restored = _round_trip(allow([FrozenSettings]), original)

    _assert_exact(restored, original)
    assert restored == original
    assert hash(restored) == hash(original)
    with pytest.raises(pydantic.ValidationError):
        restored.key = "other"
    assert restored.key == "k"


def test_model_hooks_never_run_on_save_or_load(allow: Allow) -> None:
    original = Validated(value=3)
    built_with = list(CALLS)
    assert "Validated.field_validator" in built_with
    assert "Validated.model_post_init" in built_with
    CALLS.clear()

    restored = _round_trip(allow([Validated]), original)  # asserts CALLS stayed empty

    _assert_exact(restored, original)
    assert restored == original
    assert restored.model_fields_set == {"value"}
    # The restored model is a working model: assignment validation is still wired.
    restored.value = 4
    assert "Validated.field_validator" in CALLS
    assert original.value == 3


def test_validated_model_inside_containers_runs_no_hook(allow: Allow) -> None:
    original = {
        "list": [Validated(value=1), Validated(value=2, label="y")],
        "nested": {"m": Validated(value=5)},
    }
    CALLS.clear()
    restored = _round_trip(allow([Validated]), original)
    _assert_exact(restored, original)


def test_root_models(allow: Allow) -> None:
    codec = allow([Tags, Scores])
    for original in (Tags(["a", "b"]), Scores({"x": 1, "y": 2}), Tags([])):
        restored = _round_trip(codec, original)
        _assert_exact(restored, original)
        assert restored == original
        assert restored.root == original.root
        assert restored.model_fields_set == {"root"}


def test_unparametrized_generic_model_round_trips(allow: Allow) -> None:
    original: Box[Any] = Box(item=[1, "two"])
    restored = _round_trip(allow([Box]), original)
    _assert_exact(restored, original)
    assert type(restored) is Box


def test_parametrized_generic_model_is_refused_at_save() -> None:
    parametrized = Box[int]
    assert parametrized.__qualname__ == "Box[int]"
    value = parametrized(item=1)
    # Even with both the generic and its parametrization listed by name, no stored name
    # "module:Box[int]" is valid, so the save refuses before any I/O.
    codec = CheckpointCodec((key_of(Box), f"{parametrized.__module__}:Box[int]"))
    error = _refused(codec, value)
    assert "Box[int]" in str(error)
    assert error.__cause__ is None
    _refused(codec, {"response_type": parametrized})


def test_parametrized_generic_model_cannot_be_listed_in_options() -> None:
    with pytest.raises(MongoDBConfigurationError):
        _options([Box[int]])


# -- 2. named tuples -------------------------------------------------------------------------------


def test_named_tuples_round_trip(allow: Allow) -> None:
    codec = allow([Coordinate, Pair])
    values: list[Any] = [
        Coordinate(48.85, 2.35, "Paris"),
        Coordinate(0.0, -0.0),
        Pair("left"),
        Pair(Coordinate(1.0, 2.0), [Pair(1, 2)]),
    ]
    for original in values:
        restored = _round_trip(codec, original)
        _assert_exact(restored, original)
        assert restored == original
        assert restored._fields == original._fields
    assert _round_trip(codec, Coordinate(0.0, -0.0)).lon.hex() == (-0.0).hex()


def test_named_tuples_as_dict_keys_and_set_members(allow: Allow) -> None:
    codec = allow([Coordinate, Pair, Color, Level])
    original: dict[str, Any] = {
        "keys": {Coordinate(1.0, 2.0): "a", Pair(1, "x"): "b", Pair(Pair(1, 2), None): "c", (1, 2): "plain"},
        "set": {Coordinate(0.0, 0.0, "origin"), Pair("a", "b"), Pair(Color.RED, Level.LOW), (1.0, 2.0)},
        "frozen": frozenset({Coordinate(3.0, 4.0), Pair(frozenset({1, 2}), "f")}),
    }
    restored = _round_trip(codec, original)

    _assert_exact(restored, original)
    assert restored == original
    key_types = sorted(type(key).__name__ for key in restored["keys"])
    assert key_types == ["Coordinate", "Pair", "Pair", "tuple"]
    assert {type(member).__name__ for member in restored["set"]} == {"Coordinate", "Pair", "tuple"}
    assert Coordinate(0.0, 0.0, "origin") in restored["set"]


def test_named_tuple_with_own_hash_is_stored_as_a_value(allow: Allow) -> None:
    original = [HashedCoordinate(1, 2), EqualityCoordinate(3, 4)]
    restored = _round_trip(allow([HashedCoordinate, EqualityCoordinate]), original)
    _assert_exact(restored, original)


@pytest.mark.parametrize(
    "member",
    [HashedCoordinate(1, 2), EqualityCoordinate(1, 2), Coordinate(FrozenSlotted(1, 2), 0.0)],  # type: ignore[arg-type]
    ids=["own-hash", "own-eq", "holds-an-object"],
)
def test_named_tuple_that_would_run_code_when_hashed_is_refused_as_set_member(member: Any) -> None:
    codec = _by_name([HashedCoordinate, EqualityCoordinate, Coordinate, FrozenSlotted])
    members = {member}
    CALLS.clear()
    error = _refused(codec, members)
    assert "set member" in str(error)
    assert CALLS == []
    _refused(codec, frozenset(members))
    _refused(codec, {"nested": [(1, members)]})


@pytest.mark.parametrize(
    "key", [HashedCoordinate(1, 2), EqualityCoordinate(1, 2)], ids=["own-hash", "own-eq"]
)
def test_named_tuple_that_would_run_code_when_hashed_is_refused_as_dict_key(key: Any) -> None:
    error = _refused(_by_name([HashedCoordinate, EqualityCoordinate]), {key: "value"})
    assert "dict key" in str(error)


def test_named_tuple_subclass_is_refused() -> None:
    _refused(_by_name([CoordinateSubclass]), CoordinateSubclass(1.0, 2.0))


# -- 3. datetimes and time zones -------------------------------------------------------------------

_UTC_NAMED = dt.timezone(dt.timedelta(0), "UTC")
_ZONED: dict[str, Any] = {
    "paris-summer": dt.datetime(2025, 7, 14, 12, 0, tzinfo=PARIS),
    "paris-winter": dt.datetime(2025, 1, 14, 12, 0, 0, 999999, tzinfo=PARIS),
    "paris-ambiguous-fold0": dt.datetime(2024, 10, 27, 2, 30, tzinfo=PARIS),
    "paris-ambiguous-fold1": dt.datetime(2024, 10, 27, 2, 30, tzinfo=PARIS, fold=1),
    "paris-gap": dt.datetime(2025, 3, 30, 2, 30, tzinfo=PARIS),
    "new-york-ambiguous-fold0": dt.datetime(2024, 11, 3, 1, 30, tzinfo=NEW_YORK),
    "new-york-ambiguous-fold1": dt.datetime(2024, 11, 3, 1, 30, tzinfo=NEW_YORK, fold=1),
    "time-paris": dt.time(8, 15, 30, 5, tzinfo=PARIS),
    "time-new-york-fold1": dt.time(1, 30, tzinfo=NEW_YORK, fold=1),
    "utc-singleton": dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    "utc-named": dt.datetime(2025, 1, 1, tzinfo=_UTC_NAMED),
    "offset-named": dt.datetime(2025, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30), "IST")),
    "offset-unnamed": dt.datetime(2025, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-3, minutes=-30))),
    "offset-max": dt.datetime(2025, 1, 1, tzinfo=dt.timezone.max),
    "offset-seconds": dt.time(23, 59, tzinfo=dt.timezone(dt.timedelta(seconds=37, microseconds=5))),
    "naive": dt.datetime(2025, 1, 1, 12, 0, 0, 123456),
    "naive-fold1": dt.datetime(2025, 1, 1, 12, 0, fold=1),
    "naive-time": dt.time(0, 0),
    "extremes": [dt.datetime.min, dt.datetime.max, dt.time.max],
    "bare-zones": [PARIS, NEW_YORK, dt.timezone.utc, _UTC_NAMED],
}


@pytest.mark.parametrize("name", list(_ZONED))
def test_datetimes_and_times_round_trip_exactly(name: str) -> None:
    original = _ZONED[name]
    restored = _round_trip(CheckpointCodec(), original)
    _assert_exact(restored, original)
    assert restored == original
    if isinstance(original, (dt.datetime, dt.time)):
        assert restored.fold == original.fold
        assert restored.tzinfo is original.tzinfo or type(original.tzinfo) is dt.timezone
        assert restored.utcoffset() == original.utcoffset()
        assert restored.tzname() == original.tzname()


def test_fold_selects_the_offset_after_the_round_trip() -> None:
    restored = _round_trip(
        CheckpointCodec(), [_ZONED["new-york-ambiguous-fold0"], _ZONED["new-york-ambiguous-fold1"]]
    )
    assert [value.fold for value in restored] == [0, 1]
    assert [value.utcoffset() for value in restored] == [dt.timedelta(hours=-4), dt.timedelta(hours=-5)]
    assert restored[0].tzinfo is NEW_YORK


def test_timezone_identity_and_names_survive() -> None:
    restored = _round_trip(
        CheckpointCodec(), [dt.timezone.utc, _UTC_NAMED, dt.timezone(dt.timedelta(hours=2))]
    )
    assert restored[0] is dt.timezone.utc
    assert restored[1] is not dt.timezone.utc
    assert restored[1].tzname(None) == "UTC"
    assert repr(restored[2]) == repr(dt.timezone(dt.timedelta(hours=2)))


def test_zoned_values_as_dict_keys_and_set_members() -> None:
    original = {
        "keys": {
            PARIS: 1,
            dt.timezone.utc: 2,
            dt.datetime(2025, 1, 1, tzinfo=NEW_YORK): 3,
            dt.time(1, tzinfo=PARIS): 4,
        },
        "set": {NEW_YORK, dt.timezone(dt.timedelta(hours=1), "CET"), dt.date(2025, 1, 1)},
    }
    restored = _round_trip(CheckpointCodec(), original)
    _assert_exact(restored, original)
    assert restored == original


def test_zoneinfo_from_a_file_without_key_is_refused() -> None:
    zone = zoneinfo.ZoneInfo.from_file(io.BytesIO(_tzif(3600, b"ONE")))
    assert zone.key is None
    for value in (zone, dt.datetime(2025, 1, 1, tzinfo=zone), dt.time(1, tzinfo=zone), {"k": [zone]}):
        error = _refused(CheckpointCodec(), value)
        assert "ZoneInfo" in str(error)


def test_zoneinfo_from_a_file_with_a_key_is_not_silently_replaced() -> None:
    zone = zoneinfo.ZoneInfo.from_file(io.BytesIO(_tzif(3600, b"ONE")), key="America/New_York")
    original = dt.datetime(2025, 1, 1, 12, tzinfo=zone)
    assert original.utcoffset() == dt.timedelta(hours=1)
    codec = CheckpointCodec()
    try:
        encoded = codec.encode(_checkpoint({"value": original}))
    except MongoDBSerializationError:
        return  # refusing is correct too
    restored = codec.decode(encoded.payload, checksum=encoded.payload_checksum).state["value"]
    assert restored.utcoffset() == original.utcoffset()
    assert restored == original


def test_zoneinfo_with_an_unknown_key_is_refused() -> None:
    zone = zoneinfo.ZoneInfo.from_file(io.BytesIO(_tzif(3600, b"ONE")), key="No/Such_Zone")
    _refused(CheckpointCodec(), dt.datetime(2025, 1, 1, tzinfo=zone))


def test_uncached_zoneinfo_is_refused() -> None:
    # The tree stores a zone by its key and a load gets ZoneInfo(key); a zone that is not that
    # cached instance (no_cache, from_file) might hold other rules, so it is not stored.
    uncached = zoneinfo.ZoneInfo.no_cache("Europe/Paris")
    error = _refused(CheckpointCodec(), [dt.datetime(2025, 7, 1, tzinfo=uncached)])
    assert "ZoneInfo(key)" in str(error)
    assert _round_trip(CheckpointCodec(), [PARIS])[0] is PARIS


# -- 4. paths ----------------------------------------------------------------------------------------

_PATHS: list[pathlib.PurePath] = [
    pathlib.PurePosixPath("/srv/app/config.toml"),
    pathlib.PurePosixPath("//two/leading/slashes"),
    pathlib.PurePosixPath("relative/dir"),
    pathlib.PurePosixPath(),
    pathlib.PureWindowsPath(r"C:\Users\Ada\notes.txt"),
    pathlib.PureWindowsPath(r"\\server\share\folder"),
    pathlib.PureWindowsPath("c:drive-relative"),
    pathlib.PureWindowsPath("/rooted/no/drive"),
]
if sys.platform != "win32":
    _PATHS += [pathlib.PosixPath("/srv/run.log"), pathlib.Path("relative/file.txt"), pathlib.Path.cwd()]


@pytest.mark.parametrize("original", _PATHS, ids=[f"{type(path).__name__}:{path}" for path in _PATHS])
def test_paths_round_trip(original: pathlib.PurePath) -> None:
    restored = _round_trip(CheckpointCodec(), original)
    assert type(restored) is type(original)
    assert str(restored) == str(original)
    assert restored == original
    assert restored.parts == original.parts
    assert hash(restored) == hash(original)


def test_paths_as_dict_keys_set_members_and_object_state(allow: Allow) -> None:
    original = {
        "keys": {pathlib.PurePosixPath("/a"): 1, pathlib.PureWindowsPath("C:/a"): 2},
        "set": {pathlib.PurePosixPath("a"), pathlib.PureWindowsPath("a")},
        "record": FrozenRecord("r", 1, pathlib.PureWindowsPath(r"D:\data")),
    }
    restored = _round_trip(allow([FrozenRecord]), original)
    _assert_exact(restored, original)
    assert restored == original


# -- 5. dataclasses, slotted classes, enums and class objects ----------------------------------------


def test_dataclasses_round_trip(allow: Allow) -> None:
    codec = allow([FrozenRecord, SlottedRecord, FrozenSlotted])
    values: list[Any] = [
        FrozenRecord("frozen", 3, pathlib.PurePosixPath("/x")),
        SlottedRecord("slotted", [1, 2, 3]),
        FrozenSlotted(-1, 2**70),
        [FrozenSlotted(0, 0), SlottedRecord("in-list")],
    ]
    for original in values:
        restored = _round_trip(codec, original)
        _assert_exact(restored, original)
        assert restored == original
    frozen = _round_trip(codec, FrozenSlotted(1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.x = 5
    assert hash(frozen) == hash(FrozenSlotted(1, 2))


def test_mangled_private_slots_round_trip(allow: Allow) -> None:
    codec = allow([Vault, VaultChild, Hidden])
    vault = Vault("v", "secret-1")
    child = VaultChild("c", "parent-secret", "child-secret")
    hidden = Hidden(5)
    assert set(_slot_values(child)) == {"_Vault__secret", "_VaultChild__secret", "label"}
    assert set(_slot_values(hidden)) == {"_Hidden__x"}

    for original in (vault, child, hidden):
        restored = _round_trip(codec, original)
        _assert_exact(restored, original)
    restored_child = _round_trip(codec, child)
    assert (restored_child.label, restored_child.secret, restored_child.child_secret) == (
        "c",
        "parent-secret",
        "child-secret",
    )
    assert _round_trip(codec, vault) == vault


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (Vault("v", "secret-1"), Vault("v", "secret-2")),
        (VaultChild("c", "same", "child-1"), VaultChild("c", "same", "child-2")),
        (VaultChild("c", "parent-1", "same"), VaultChild("c", "parent-2", "same")),
        (Hidden(1), Hidden(2)),
    ],
    ids=["private-slot", "child-private-slot", "parent-private-slot", "leading-underscore-class"],
)
def test_objects_differing_only_in_a_private_slot_have_different_identities(first: Any, second: Any) -> None:
    keys = [key_of(Vault), key_of(VaultChild), key_of(Hidden)]
    assert canonical_hash(first, keys) != canonical_hash(second, keys)
    assert _exact(first) != _exact(second)


def test_unset_slots_stay_unset(allow: Allow) -> None:
    original = Partial()
    original.second = [1]
    restored = _round_trip(allow([Partial]), original)
    _assert_exact(restored, original)
    assert not hasattr(restored, "first")
    assert restored.second == [1]
    empty = _round_trip(allow([Partial]), Partial())
    assert _slot_values(empty) == {}


def test_plain_objects_round_trip_with_their_whole_dict(allow: Allow) -> None:
    original = Plain(alpha=1, beta=[Level.HIGH, Color.BLUE], gamma={"path": pathlib.PurePosixPath("/p")})
    original.__dict__["not an identifier"] = "kept"
    restored = _round_trip(allow([Plain, Level, Color]), original)
    _assert_exact(restored, original)
    assert restored == original
    assert list(restored.__dict__) == ["alpha", "beta", "gamma", "not an identifier"]


def test_shared_objects_come_back_as_equal_copies(allow: Allow) -> None:
    shared = SlottedRecord("shared", [1])
    restored = _round_trip(allow([SlottedRecord]), [shared, shared])
    _assert_exact(restored, [shared, shared])
    assert restored[0] is not restored[1]


def test_enums_round_trip_as_the_same_members(allow: Allow) -> None:
    codec = allow([Color, Level, Perm])
    original: list[Any] = [
        Color.RED,
        Color.BLUE,
        Level.LOW,
        Level.HIGH,
        Perm.R,
        Perm.X,
        Perm.RW,
        Perm.R | Perm.W,
    ]
    restored = _round_trip(codec, original)
    assert all(item is expected for item, expected in zip(restored, original, strict=True))
    assert type(restored[2]) is Level
    assert type(restored[6]) is Perm


@pytest.mark.skipif(sys.version_info < (3, 11), reason="enum.StrEnum is new in Python 3.11")
def test_str_enum_round_trips_as_the_member(allow: Allow) -> None:
    mode: Any = vars(st)["Mode"]
    original = {"mode": mode.FAST, "set": {mode.SLOW, "fast!"}, "keys": {mode.FAST: 1}}
    restored = _round_trip(allow([mode]), original)
    assert restored["mode"] is mode.FAST
    assert {type(member) for member in restored["set"]} == {mode, str}
    assert type(next(iter(restored["keys"]))) is mode


def test_enums_as_dict_keys_and_set_members(allow: Allow) -> None:
    original = {
        "keys": {Level.LOW: "low", 2: "two", Color.RED: "red"},
        "set": {Perm.W, Color.BLUE, Level.HIGH},
    }
    restored = _round_trip(allow([Color, Level, Perm]), original)
    _assert_exact(restored, original)
    assert [type(key) for key in restored["keys"]] == [Level, int, Color]


@pytest.mark.parametrize(
    "value", [Perm.R | Perm.X, Perm.R | Perm.W | Perm.X, Perm(0)], ids=["R|X", "R|W|X", "empty"]
)
def test_composite_flag_values_are_refused(value: Perm) -> None:
    error = _refused(_by_name([Perm]), value)
    assert "single named member" in str(error)


def test_class_objects_as_values(allow: Allow) -> None:
    original = {
        "response_type": str,
        "standard": [int, bytes, dt.datetime, decimal.Decimal, pathlib.PurePosixPath, zoneinfo.ZoneInfo],
        "app": [Customer, FrozenRecord, Color],
        "set": {str, Customer},
        "keys": {int: "int", Customer: "customer"},
    }
    restored = _round_trip(allow([Customer, FrozenRecord, Color]), original)
    _assert_exact(restored, original)
    assert restored["response_type"] is str
    assert restored["app"][0] is Customer


def test_class_objects_that_are_not_allowed_or_not_nameable_are_refused() -> None:
    class Local:
        pass

    codec = _by_name([Customer])
    for value in (Address, Local, type, enum.EnumMeta, Box[int]):
        _refused(codec, {"response_type": value})


# -- 6. refusals: before any I/O, and without running application code ----------------------------


def test_class_not_allowed_is_refused() -> None:
    error = _refused(CheckpointCodec(), Plain(a=1))
    assert key_of(Plain) in str(error)
    assert "allowed_checkpoint_types" in str(error)
    _refused(_by_name([Address]), {"deep": [{"x": Customer(name="n", address=Address(street="s"))}]})


@pytest.mark.parametrize(
    "value",
    [
        Registry(a=1),
        ReadOnlyMapping({"a": 1}),
        collections.OrderedDict(a=1),
        collections.defaultdict(int, a=1),
        collections.Counter("aab"),
        collections.ChainMap({"a": 1}),
        types.MappingProxyType({"a": 1}),
    ],
    ids=lambda value: type(value).__name__,
)
def test_mapping_classes_are_refused_even_when_allowed(value: Any) -> None:
    allowed = CheckpointCodec((key_of(type(value)),))
    error = _refused(allowed, value)
    assert "mapping" in str(error)


@pytest.mark.parametrize(
    "value", [Tagged("x"), Numbers([1]), Failure("boom")], ids=lambda value: type(value).__name__
)
def test_builtin_derived_classes_are_refused_even_when_allowed(value: Any) -> None:
    error = _refused(_by_name([type(value)]), value)
    assert "built-in" in str(error)


def test_class_replacing_dict_is_refused_without_reading_it() -> None:
    error = _refused(_by_name([DictProperty]), DictProperty())
    assert "__dict__" in str(error)
    assert CALLS == []


def test_class_declaring_a_slot_twice_is_refused() -> None:
    _refused(_by_name([DuplicateSlot]), DuplicateSlot("label", "secret"))


def test_pickling_and_copying_hooks_are_never_called(allow: Allow) -> None:
    original = Hooked(7)
    original.extra = [Hooked(8)]
    CALLS.clear()
    restored = _round_trip(allow([Hooked]), original)  # neither __new__ nor __setattr__ either
    _assert_exact(restored, original)
    assert restored.value == 7
    assert type(restored.extra[0]) is Hooked


def test_getattr_that_answers_everything_is_never_consulted(allow: Allow) -> None:
    original = AnswersEverything(3)
    restored = _round_trip(allow([AnswersEverything]), original)
    _assert_exact(restored, original)
    assert _instance_dict(restored) == {"value": 3}


def test_getattribute_that_raises_is_never_consulted(allow: Allow) -> None:
    # v2 reads __dict__ through the interpreter's descriptor, so the hostile hook never runs and
    # the save neither fails nor lets its exception escape.
    original = RaisingGetattribute(3)
    restored = _round_trip(allow([RaisingGetattribute]), original)
    assert type(restored) is RaisingGetattribute
    assert _instance_dict(restored) == {"value": 3}


def test_application_exception_during_a_save_is_a_package_error() -> None:
    key = ArmedHashKey(1)
    state = {key: "value"}
    ARMED.append(True)
    with pytest.raises(MongoDBSerializationError) as caught:
        _by_name([ArmedHashKey]).encode(_checkpoint({"value": state}))
    assert not isinstance(caught.value, RuntimeError)


def test_framework_getstate_that_raises_is_a_package_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Message) -> dict[str, Any]:
        raise RuntimeError("framework __getstate__ raised")

    # Agent Framework Core 1.13 defines no __getstate__ on Message; 1.23 does.
    monkeypatch.setattr(Message, "__getstate__", broken, raising=False)
    with pytest.raises(MongoDBSerializationError) as caught:
        CheckpointCodec().encode(_checkpoint({"message": Message(role="user", contents=["hi"])}))
    assert type(caught.value.__cause__) is RuntimeError


@pytest.mark.parametrize(
    "member",
    [
        SideEffectKey(1),
        FrozenSlotted(1, 2),
        FrozenRecord("r"),
        FrozenSettings(key="k", when=dt.datetime(2025, 1, 1)),
    ],
    ids=lambda member: type(member).__name__,
)
def test_application_object_as_set_member_is_refused_before_hashing(member: Any) -> None:
    codec = _by_name([SideEffectKey, FrozenSlotted, FrozenRecord, FrozenSettings])
    members = {member}
    CALLS.clear()
    error = _refused(codec, members)
    assert "set member" in str(error)
    assert CALLS == []
    _refused(codec, [frozenset(members)])


@pytest.mark.parametrize(
    "key",
    [
        SideEffectKey(1),
        FrozenSlotted(1, 2),
        FrozenRecord("r"),
        FrozenSettings(key="k", when=dt.datetime(2025, 1, 1)),
    ],
    ids=lambda key: type(key).__name__,
)
def test_application_object_as_dict_key_is_refused(key: Any) -> None:
    codec = _by_name([SideEffectKey, FrozenSlotted, FrozenRecord, FrozenSettings])
    mapping = {key: "value"}
    error = _refused(codec, mapping)
    assert "dict key" in str(error)
    _refused(codec, {"nested": {"deeper": mapping}})


@pytest.mark.parametrize("key", [SideEffectKey(1), HashedCoordinate(1, 2)], ids=["object", "named-tuple"])
def test_dict_key_with_own_hash_is_refused_at_save(key: Any) -> None:
    # The save hashes a key only once its type says the interpreter or the standard library
    # does it, so neither the key's __hash__ nor its __eq__ runs (test_identity_exactness.py
    # has one that hashes like an earlier dict's str key); it is refused before anything is stored.
    mapping = {key: "value"}
    CALLS.clear()
    error = _refused(_by_name([SideEffectKey, HashedCoordinate]), mapping)
    assert "dict key" in str(error)
    assert CALLS == []


def test_unsupported_value_is_a_package_error() -> None:
    for value in (lambda: None, iter([]), object(), float("nan"), memoryview(b"x")):
        with pytest.raises(MongoDBMappingError):
            CheckpointCodec().encode(_checkpoint({"value": value}))


def test_codec_takes_classes_as_well_as_names() -> None:
    restored = _round_trip(CheckpointCodec((Plain,)), Plain(a=1))
    assert restored == Plain(a=1)
    options = _options({Plain})
    assert options.allowed_checkpoint_types == (key_of(Plain),)


def test_options_refuse_classes_defined_in_functions() -> None:
    class Local:
        pass

    with pytest.raises(MongoDBConfigurationError):
        _options([Local])


# -- 8. end to end through a storage on the in-process engine ----------------------------------------


async def test_storage_saves_and_loads_application_state(client: InMemoryMongoClient) -> None:
    collection = client["checkpoint_db"]["state_types"]
    allowed: list[type | str] = [Customer, key_of(Address), key_of(Coordinate)]
    storage = MongoDBCheckpointStorage(collection, options=_options(allowed))
    assert storage.options.allowed_checkpoint_types == (key_of(Customer), key_of(Address), key_of(Coordinate))
    state: dict[str, Any] = {
        "customer": Customer(name="Ada", address=Address(street="1 rue X"), tags=["vip"]),
        "where": Coordinate(48.85, 2.35, "Paris"),
        "visits": {Coordinate(1.0, 2.0): 1},
        "when": dt.datetime(2024, 11, 3, 1, 30, tzinfo=NEW_YORK, fold=1),
        "path": pathlib.PurePosixPath("/srv/app"),
        "windows": pathlib.PureWindowsPath(r"C:\data"),
    }
    checkpoint = _checkpoint(state)
    checkpoint_id = await storage.save(checkpoint)

    # A storage built elsewhere, listing the same classes by name only, reads it back.
    reader = MongoDBCheckpointStorage(
        collection,
        options=_options([key_of(Customer), key_of(Address), key_of(Coordinate)]),
    )
    for source in (storage, reader):
        CALLS.clear()
        loaded = await source.load(checkpoint_id)
        assert CALLS == []
        _assert_exact(loaded.state, state)
        assert loaded.state == state
        assert loaded.state["when"].utcoffset() == dt.timedelta(hours=-5)
        assert loaded.state["customer"].model_fields_set == {"name", "address", "tags"}
        assert loaded.checkpoint_id == checkpoint.checkpoint_id

    stored = await collection.find({}).to_list(None)
    assert len([document for document in stored if document.get("checkpoint_id") == checkpoint_id]) == 1

    # Without the classes listed, the load is refused rather than building anything.
    stranger = MongoDBCheckpointStorage(collection, options=_options())
    with pytest.raises(MongoDBMappingError):
        await stranger.load(checkpoint_id)


async def test_storage_refuses_before_any_write(client: InMemoryMongoClient) -> None:
    collection = client["checkpoint_db"]["state_types_refused"]
    storage = MongoDBCheckpointStorage(collection, options=_options([Customer]))
    for state in (
        {"customer": Customer(name="n", address=Address(street="s"))},
        {"key": {SideEffectKey(1): 1}},
    ):
        with pytest.raises(MongoDBSerializationError):
            await storage.save(_checkpoint(state))
    assert await collection.count_documents({}) == 0
