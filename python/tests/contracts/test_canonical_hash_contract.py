"""Golden vectors for canonical hash version 3, replayed in-process and across hash seeds.

The fixture describes each input in a small typed JSON notation (so another implementation can
replay it) with its expected canonical encoding and SHA-256. The vectors were computed once and
committed; this test never regenerates them.

Notation: JSON null/true/false/strings/integers/arrays/objects are None/bool/str/int/list/dict
(object keys are str). Tagged objects have exactly one key starting with "$":
``$float`` (Python repr: "-0.0", "1e+300"), ``$bytes``/``$bytearray`` (base64), ``$tuple``,
``$set``, ``$frozenset`` (arrays), ``$dict`` (array of [key, value] pairs), ``$date``,
``$datetime``/``$time`` ({"iso": ..., "fold": 0|1}), ``$timedelta`` ([days, seconds, µs]),
``$timezone`` ({"offset": [days, seconds, µs], "name": str|null}), ``$decimal`` and ``$uuid``
(strings), ``$zoneinfo`` (an IANA key; ``$datetime``/``$time`` may carry ``"zone": key``),
``$path`` ({"class": "PurePosixPath"|..., "path": str}), ``$enum`` ({"type": ..., "name": ...}),
``$namedtuple`` ({"type": ..., "items": [...]}), ``$object`` ({"type": "module:qualname",
"fields": {...}}), ``$class`` ("module:qualname": the class object itself). Classes named by
``$object``, ``$enum``, ``$namedtuple`` and ``$class`` come from ``tests.unit.codec.app_types``
and are allowed while computing.
"""

from __future__ import annotations

import base64
import datetime as dt
import importlib
import json
import os
import pathlib
import subprocess
import sys
import uuid
import zoneinfo
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import pytest

from agent_framework_mongodb.checkpoints import codec
from agent_framework_mongodb.checkpoints.codec import CANONICAL_HASH_VERSION
from agent_framework_mongodb.errors import MongoDBIntegrationError

FIXTURE = Path(__file__).parent / "fixtures" / "checkpoint_canonical_hash.json"
_PROJECT = Path(__file__).resolve().parents[2]
_ALLOWED = tuple(f"tests.unit.codec.app_types:{name}" for name in ("Color", "OrderState", "Pair", "Point"))


def canonical_form(value: object) -> bytes:
    return codec.canonical_form(value, _ALLOWED)


def canonical_hash(value: object) -> str:
    return codec.canonical_hash(value, _ALLOWED)


def _timedelta(parts: list[int]) -> dt.timedelta:
    return dt.timedelta(days=parts[0], seconds=parts[1], microseconds=parts[2])


def decode_value(node: Any) -> Any:  # noqa: PLR0911, PLR0912 - one branch per notation tag
    """Turn the fixture's typed JSON notation into the Python value it describes."""
    if isinstance(node, list):
        return [decode_value(item) for item in node]
    if not isinstance(node, dict):
        return node
    mapping = cast("dict[str, Any]", node)
    tagged = [key for key in mapping if key.startswith("$")]
    if not tagged:
        return {key: decode_value(item) for key, item in mapping.items()}
    (tag,) = tagged
    body = mapping[tag]
    if tag == "$float":
        return float(body)
    if tag in ("$bytes", "$bytearray"):
        data = base64.b64decode(body)
        return data if tag == "$bytes" else bytearray(data)
    if tag == "$tuple":
        return tuple(decode_value(item) for item in body)
    if tag == "$set":
        return {decode_value(item) for item in body}
    if tag == "$frozenset":
        return frozenset(decode_value(item) for item in body)
    if tag == "$dict":
        return {decode_value(key): decode_value(item) for key, item in body}
    if tag == "$date":
        return dt.date.fromisoformat(body)
    if tag == "$datetime":
        moment = dt.datetime.fromisoformat(body["iso"]).replace(fold=body["fold"])
        return moment.replace(tzinfo=zoneinfo.ZoneInfo(body["zone"])) if "zone" in body else moment
    if tag == "$time":
        clock = dt.time.fromisoformat(body["iso"]).replace(fold=body["fold"])
        return clock.replace(tzinfo=zoneinfo.ZoneInfo(body["zone"])) if "zone" in body else clock
    if tag == "$zoneinfo":
        return zoneinfo.ZoneInfo(body)
    if tag == "$path":
        return cast("type[pathlib.PurePath]", getattr(pathlib, body["class"]))(body["path"])
    if tag == "$enum":
        return getattr(_class(body["type"]), body["name"])
    if tag == "$namedtuple":
        return _class(body["type"])(*(decode_value(item) for item in body["items"]))
    if tag == "$timedelta":
        return _timedelta(body)
    if tag == "$timezone":
        offset = _timedelta(body["offset"])
        return dt.timezone(offset) if body["name"] is None else dt.timezone(offset, body["name"])
    if tag == "$decimal":
        return Decimal(body)
    if tag == "$uuid":
        return uuid.UUID(body)
    if tag == "$class":
        return _class(body)
    if tag == "$object":
        cls = _class(body["type"])
        instance = object.__new__(cls)
        for name, item in body["fields"].items():
            object.__setattr__(instance, name, decode_value(item))
        return instance
    raise ValueError(f"unknown fixture tag {tag}")


def _class(key: str) -> Any:
    module, _, qualname = key.partition(":")
    return getattr(importlib.import_module(module), qualname)


def _load() -> dict[str, Any]:
    return cast("dict[str, Any]", json.loads(FIXTURE.read_text(encoding="utf-8")))


def _vectors() -> list[dict[str, Any]]:
    return cast("list[dict[str, Any]]", _load()["vectors"])


def _compute_all() -> dict[str, str]:
    return {vector["name"]: canonical_hash(decode_value(vector["input"])) for vector in _vectors()}


def test_fixture_declares_this_hash_version() -> None:
    assert _load()["hash_version"] == CANONICAL_HASH_VERSION


@pytest.mark.parametrize("vector", _vectors(), ids=lambda vector: vector["name"])
def test_vector_in_process(vector: dict[str, Any]) -> None:
    value = decode_value(vector["input"])
    assert canonical_form(value).hex() == vector["canonical_hex"]
    assert canonical_hash(value) == vector["sha256"]


@pytest.mark.parametrize("vector", _load()["rejections"], ids=lambda vector: vector["name"])
def test_rejection_vector(vector: dict[str, Any]) -> None:
    with pytest.raises(MongoDBIntegrationError) as raised:
        canonical_form(decode_value(vector["input"]))
    assert raised.value.category == vector["category"]


def test_equivalent_vectors_share_a_hash() -> None:
    by_name = {vector["name"]: vector["sha256"] for vector in _vectors()}
    for group in _load()["equivalent"]:
        assert len({by_name[name] for name in group}) == 1, group


@pytest.mark.parametrize("seed", ["0", "12345"])
def test_vectors_across_hash_seeds(seed: str) -> None:
    script = (
        "import json; from tests.contracts.test_canonical_hash_contract import _compute_all; "
        "print(json.dumps(_compute_all()))"
    )
    environment = {**os.environ, "PYTHONHASHSEED": seed}
    result = subprocess.run(  # noqa: S603 - the interpreter running this test, fixed arguments
        [sys.executable, "-c", script],
        cwd=_PROJECT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    computed = json.loads(result.stdout)
    assert computed == {vector["name"]: vector["sha256"] for vector in _vectors()}
