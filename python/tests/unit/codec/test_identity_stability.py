"""Canonical identity (hash version 3) of application state: stable, and sensitive to every change.

The identity must not depend on ``PYTHONHASHSEED``, dict insertion order or the order a set was
built in, and must change whenever anything the load would restore differently changes, even
where ``==`` calls the two values equal (fields set, fold, zone key, path class, enum vs int).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import pathlib
import subprocess
import sys
import zoneinfo
from collections.abc import Callable
from typing import Any, Final

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, canonical_hash
from agent_framework_mongodb.errors import MongoDBSerializationError
from tests.unit.codec import state_types
from tests.unit.codec.state_types import (
    ALLOWED_FOR_RICH,
    PARIS,
    Address,
    AppPath,
    Color,
    Coordinate,
    Flexible,
    FrozenRecord,
    FrozenSettings,
    Hidden,
    Level,
    Pair,
    Perm,
    Vault,
    VaultChild,
    key_of,
    rich_value,
)

_KEYS: Final = tuple(key_of(cls) for cls in ALLOWED_FOR_RICH)
_PYTHON_ROOT: Final = pathlib.Path(__file__).resolve().parents[3]
_SEEDS: Final = ("0", "1", "12345")

_PROBE: Final = """
import json
from agent_framework import WorkflowCheckpoint
from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, canonical_hash
from tests.unit.codec.state_types import ALLOWED_FOR_RICH, key_of, rich_value

keys = tuple(key_of(cls) for cls in ALLOWED_FOR_RICH)
checkpoint = WorkflowCheckpoint(
    workflow_name="wf", graph_signature_hash="g", checkpoint_id="c", timestamp="t", state=rich_value()
)
print(json.dumps({
    "hash": canonical_hash(rich_value(), keys),
    "reversed": canonical_hash(rich_value(reverse=True), keys),
    "payload_hash": CheckpointCodec(keys).encode(checkpoint).payload_hash,
    "set_order": list({f"member-{index}" for index in range(20)}),
}))
"""


def _identity(value: Any) -> str:
    return canonical_hash(value, _KEYS)


def _checkpoint(state: dict[str, Any]) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf", graph_signature_hash="g", checkpoint_id="c", timestamp="t", state=state
    )


# -- stability ---------------------------------------------------------------------------------------


def test_identity_is_the_same_under_every_hash_seed() -> None:
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONHASHSEED"}
    # The probe imports the tests package from the project root, however pytest was started.
    environment["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(_PYTHON_ROOT), environment.get("PYTHONPATH", "")) if part
    )
    processes = {
        seed: subprocess.Popen(  # noqa: S603 - this interpreter, a fixed script
            [sys.executable, "-c", _PROBE],
            cwd=_PYTHON_ROOT,
            env={**environment, "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in _SEEDS
    }
    results: dict[str, dict[str, Any]] = {}
    for seed, process in processes.items():
        stdout, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr
        results[seed] = json.loads(stdout)

    expected = _identity(rich_value())
    payload_hash = CheckpointCodec(_KEYS).encode(_checkpoint(rich_value())).payload_hash
    for seed, result in results.items():
        assert result["hash"] == expected, f"PYTHONHASHSEED={seed}"
        assert result["reversed"] == expected, f"PYTHONHASHSEED={seed}"
        assert result["payload_hash"] == payload_hash, f"PYTHONHASHSEED={seed}"
    # The seeds really did change hashing: the same set iterates in different orders.
    assert len({tuple(result["set_order"]) for result in results.values()}) > 1


def test_identity_ignores_dict_insertion_and_set_construction_order() -> None:
    forward, backward = rich_value(), rich_value(reverse=True)
    # The two really differ in every order the codec must ignore.
    assert list(forward) != list(backward)
    assert list(forward["int_set"]) != list(backward["int_set"])
    assert list(forward["tuple_keys"]) != list(backward["tuple_keys"])
    assert list(forward["flexible"].__pydantic_extra__) != list(backward["flexible"].__pydantic_extra__)
    assert list(forward["private"]._cache) != list(backward["private"]._cache)
    assert list(vars(forward["plain"])) != list(vars(backward["plain"]))

    assert _identity(forward) == _identity(backward)
    assert CheckpointCodec(_KEYS).encode(_checkpoint(forward)).payload_hash == (
        CheckpointCodec(_KEYS).encode(_checkpoint(backward)).payload_hash
    )


def test_identity_is_the_same_for_equal_values_built_apart() -> None:
    assert _identity(rich_value()) == _identity(rich_value())
    first = rich_value()
    assert _identity(first) == _identity(first)  # walking leaves the value as it was


def test_identity_survives_a_round_trip() -> None:
    codec = CheckpointCodec(_KEYS)
    encoded = codec.encode(_checkpoint(rich_value()))
    restored = codec.decode(encoded.payload, checksum=encoded.payload_checksum)
    assert _identity(restored.state) == _identity(rich_value())
    assert codec.encode(restored).payload_hash == encoded.payload_hash


# -- sensitivity -------------------------------------------------------------------------------------

Mutation = Callable[[dict[str, Any]], None]


def _set_field(value: dict[str, Any]) -> None:
    value["customer"].address.street = "2 rue Y"  # already in the fields set


def _set_top_field(value: dict[str, Any]) -> None:
    value["customer"].score = 0.0  # same value as the default; the fields set grows


def _change_extra(value: dict[str, Any]) -> None:
    value["flexible"].__pydantic_extra__["colour"] = "red"


def _add_extra(value: dict[str, Any]) -> None:
    value["flexible"].__pydantic_extra__["more"] = None


def _change_private(value: dict[str, Any]) -> None:
    value["private"]._note = "t2"


def _change_private_container(value: dict[str, Any]) -> None:
    value["private"]._cache["c"] = 4


def _set_unset_private(value: dict[str, Any]) -> None:
    value["private"]._late = "now set"


def _unset_private(value: dict[str, Any]) -> None:
    del value["private_late"]._late


def _drop_from_fields_set(value: dict[str, Any]) -> None:
    value["explicit"] = Address(street="s", city="Paris")  # == the original: only zip_code left the set


def _add_to_fields_set(value: dict[str, Any]) -> None:
    value["defaulted"] = Address(street="s", city="Paris")


def _change_frozen_model(value: dict[str, Any]) -> None:
    value["frozen"] = value["frozen"].model_copy(update={"key": "other"})


def _change_root(value: dict[str, Any]) -> None:
    value["root"].root.append("c")


def _change_zone_key(value: dict[str, Any]) -> None:
    # Berlin and Paris share offsets: the datetimes are equal, the stored zones are not.
    value["paris"] = value["paris"].replace(tzinfo=zoneinfo.ZoneInfo("Europe/Berlin"))


def _change_time_zone_key(value: dict[str, Any]) -> None:
    value["paris_time"] = value["paris_time"].replace(tzinfo=zoneinfo.ZoneInfo("Europe/Brussels"))


def _change_fold(value: dict[str, Any]) -> None:
    value["zoned"] = value["zoned"].replace(fold=0)


def _name_utc(value: dict[str, Any]) -> None:
    value["utc"] = value["utc"].replace(tzinfo=dt.timezone(dt.timedelta(0), "UTC"))


def _unname_offset(value: dict[str, Any]) -> None:
    value["named_offset"] = value["named_offset"].replace(
        tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))
    )


def _zone_to_fixed_offset(value: dict[str, Any]) -> None:
    value["paris"] = value["paris"].replace(tzinfo=dt.timezone(dt.timedelta(hours=2)))


def _make_aware(value: dict[str, Any]) -> None:
    value["naive"] = value["naive"].replace(tzinfo=dt.timezone.utc)


def _change_microsecond(value: dict[str, Any]) -> None:
    value["naive"] = value["naive"].replace(microsecond=123457)


def _change_path(value: dict[str, Any]) -> None:
    value["paths"][0] = pathlib.PurePosixPath("/srv/app2")


def _change_path_class(value: dict[str, Any]) -> None:
    value["paths"][2] = pathlib.PurePosixPath(value["paths"][2])  # == the PosixPath


def _change_path_flavour(value: dict[str, Any]) -> None:
    value["paths"][0] = pathlib.PureWindowsPath("/srv/app")


def _change_windows_case(value: dict[str, Any]) -> None:
    value["paths"][1] = pathlib.PureWindowsPath(r"c:\users\ADA")  # == under Windows rules


def _change_dataclass_path(value: dict[str, Any]) -> None:
    value["frozen_record"] = dataclasses.replace(
        value["frozen_record"], where=pathlib.PurePosixPath("/srv/s")
    )


def _change_enum(value: dict[str, Any]) -> None:
    value["enums"][0] = Color.BLUE


def _int_for_int_enum(value: dict[str, Any]) -> None:
    value["enums"][1] = 2  # == Level.HIGH


def _change_flag(value: dict[str, Any]) -> None:
    value["enums"][2] = Perm.W


def _replace_key(value: dict[str, Any], field: str, old: Any, new: Any) -> None:
    mapping = value[field]
    assert old in mapping
    value[field] = {new if key == old else key: item for key, item in mapping.items()}


def _change_enum_key(value: dict[str, Any]) -> None:
    _replace_key(value, "tuple_keys", Level.LOW, Level.HIGH)


def _int_for_enum_key(value: dict[str, Any]) -> None:
    _replace_key(value, "tuple_keys", Level.LOW, 1)


def _tuple_for_named_tuple(value: dict[str, Any]) -> None:
    value["coordinate"] = tuple(value["coordinate"])


def _other_named_tuple(value: dict[str, Any]) -> None:
    value["pair"] = Coordinate(value["pair"][0], value["pair"][1], "")


def _change_named_tuple_item(value: dict[str, Any]) -> None:
    value["coordinate"] = value["coordinate"]._replace(label="Lyon")


def _tuple_key_for_named_tuple_key(value: dict[str, Any]) -> None:
    _replace_key(value, "tuple_keys", Coordinate(1.0, 2.0), (1.0, 2.0, ""))


def _change_set_member(value: dict[str, Any]) -> None:
    value["tuple_set"].discard(Pair("a", "b"))
    value["tuple_set"].add(Pair("a", "c"))


def _add_set_member(value: dict[str, Any]) -> None:
    value["string_set"].add("member-20")


def _change_vault_secret(value: dict[str, Any]) -> None:
    value["vault"] = Vault("v", "secret-2")


def _change_child_secret(value: dict[str, Any]) -> None:
    value["vault_child"] = VaultChild("c", "parent-secret", "child-secret-2")


def _change_hidden_slot(value: dict[str, Any]) -> None:
    value["hidden"] = Hidden(6)


def _unset_slot(value: dict[str, Any]) -> None:
    del value["vault"].label


def _change_slotted_dataclass(value: dict[str, Any]) -> None:
    value["slotted_record"].values.append(4)


def _change_plain_attribute(value: dict[str, Any]) -> None:
    value["plain"].gamma["k"] = Color.RED


def _change_class_object(value: dict[str, Any]) -> None:
    value["classes"]["response_type"] = bytes


def _change_app_class_object(value: dict[str, Any]) -> None:
    value["classes"]["model"] = Address


def _list_for_set(value: dict[str, Any]) -> None:
    value["frozen_members"] = set(value["frozen_members"])


_MUTATIONS: Final[dict[str, Mutation]] = {
    mutation.__name__.lstrip("_"): mutation
    for mutation in (
        _set_field,
        _set_top_field,
        _change_extra,
        _add_extra,
        _change_private,
        _change_private_container,
        _set_unset_private,
        _unset_private,
        _drop_from_fields_set,
        _add_to_fields_set,
        _change_frozen_model,
        _change_root,
        _change_zone_key,
        _change_time_zone_key,
        _change_fold,
        _name_utc,
        _unname_offset,
        _zone_to_fixed_offset,
        _make_aware,
        _change_microsecond,
        _change_path,
        _change_path_class,
        _change_path_flavour,
        _change_windows_case,
        _change_dataclass_path,
        _change_enum,
        _int_for_int_enum,
        _change_flag,
        _change_enum_key,
        _int_for_enum_key,
        _tuple_for_named_tuple,
        _other_named_tuple,
        _change_named_tuple_item,
        _tuple_key_for_named_tuple_key,
        _change_set_member,
        _add_set_member,
        _change_vault_secret,
        _change_child_secret,
        _change_hidden_slot,
        _unset_slot,
        _change_slotted_dataclass,
        _change_plain_attribute,
        _change_class_object,
        _change_app_class_object,
        _list_for_set,
    )
}

_EQUAL_YET_DISTINCT: Final = frozenset(
    {
        "set_top_field",
        "drop_from_fields_set",
        "add_to_fields_set",
        "change_zone_key",
        "change_fold",
        "name_utc",
        "unname_offset",
        "zone_to_fixed_offset",
        "change_path_class",
        "change_windows_case",
        "int_for_int_enum",
        "int_for_enum_key",
        "tuple_for_named_tuple",
        "tuple_key_for_named_tuple_key",
        "list_for_set",
    }
)
"""Mutations after which the value still compares ``==`` to the original, yet loads differently."""


def _mutated(name: str) -> dict[str, Any]:
    value = rich_value()
    _MUTATIONS[name](value)
    return value


@pytest.mark.parametrize("name", list(_MUTATIONS))
def test_every_change_changes_the_identity(name: str) -> None:
    assert _identity(_mutated(name)) != _identity(rich_value())


@pytest.mark.parametrize("name", sorted(_EQUAL_YET_DISTINCT))
def test_changes_equality_ignores_still_change_the_identity(name: str) -> None:
    # Guards the sensitivity test: these mutations really are invisible to ==.
    mutated, original = _mutated(name), rich_value()
    assert all(mutated[key] == original[key] for key in original if key not in ("vault_child", "hidden"))
    assert _identity(mutated) != _identity(original)


def test_all_changes_have_distinct_identities() -> None:
    identities = {name: _identity(_mutated(name)) for name in _MUTATIONS}
    assert len(set(identities.values())) == len(identities)


def test_encoded_payload_hash_follows_the_identity() -> None:
    codec = CheckpointCodec(_KEYS)
    base = codec.encode(_checkpoint(rich_value())).payload_hash
    for name in ("drop_from_fields_set", "change_zone_key", "change_fold", "change_private"):
        assert codec.encode(_checkpoint(_mutated(name))).payload_hash != base, name


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (Flexible.model_validate({"id": 1, "a": 1}), Flexible.model_validate({"id": 1, "b": 1})),
        (Flexible(id=1), Flexible(id=1, label="none")),
        (
            FrozenSettings(key="k", when=dt.datetime(2025, 1, 1, tzinfo=PARIS)),
            FrozenSettings(key="k", when=dt.datetime(2025, 1, 1, tzinfo=zoneinfo.ZoneInfo("Europe/Madrid"))),
        ),
        (
            FrozenRecord("r", 0, pathlib.PurePosixPath("a")),
            FrozenRecord("r", 0, pathlib.PureWindowsPath("a")),
        ),
        (Level.LOW, 1),
        (Coordinate(1.0, 2.0), Pair(1.0, 2.0)),
        ({Level.LOW}, {1}),
        ({"k": Color.RED}, {"k": "red"}),
    ],
    ids=[
        "extra-name",
        "fields-set",
        "zone-in-frozen-model",
        "path-flavour",
        "int-enum",
        "tuple-class",
        "enum-member",
        "enum-value",
    ],
)
def test_small_values_differing_in_one_respect(first: Any, second: Any) -> None:
    keys = (*_KEYS, key_of(Flexible))
    assert canonical_hash(first, keys) != canonical_hash(second, keys)


def test_an_allowed_path_subclass_is_refused() -> None:
    # Walked as an object, pathlib's caches (_str, _hash, ...) would enter its identity, and
    # _hash depends on PYTHONHASHSEED; only the exact pathlib classes are stored, by their text.
    with pytest.raises(MongoDBSerializationError, match="pathlib"):
        canonical_hash(AppPath("/srv/app"), (key_of(AppPath),))


def test_module_keys_are_stable() -> None:
    # The identity names classes by "module:qualname"; these are the names the tests rely on.
    assert key_of(Hidden) == "tests.unit.codec.state_types:__Hidden"
    assert key_of(Vault) == f"{state_types.__name__}:Vault"
