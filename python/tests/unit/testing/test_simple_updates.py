"""The fast post-image of simple update documents is the slow (mongomock_ng) path's, byte for byte."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import bson
import mongomock_ng
import pytest
from bson.binary import Binary
from bson.int64 import Int64
from bson.objectid import ObjectId
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import agent_framework_mongodb.testing._collection_base as collection_base
from agent_framework_mongodb.testing import InMemoryMongoClient
from agent_framework_mongodb.testing._codec import to_storage, wire_value
from agent_framework_mongodb.testing._simple_updates import simple_post_image
from agent_framework_mongodb.testing._updates import compute_post_image

_NOW = datetime(2026, 1, 1, 12, 0, 0)
_EARLY = datetime(2025, 6, 1, 0, 0, 0, 123000)
_LATE = datetime(2027, 3, 4, 5, 6, 7, 890000)
_OID = ObjectId("5f0000000000000000000001")
_SCALARS = st.sampled_from(
    [
        0,
        1,
        -1,
        2,
        1.0,
        2.5,
        -0.0,
        math.nan,
        math.inf,
        2**40,
        Int64(1),
        Int64(3),
        True,
        False,
        None,
        "x",
        "",
        "$$NOW",
        b"x",
        b"",
        _OID,
        Binary(b"x" * 16, 4),
        _EARLY,
        _NOW,
        _LATE,
    ]
)
_VALUES = st.one_of(
    _SCALARS,
    st.lists(_SCALARS, max_size=2),
    # "$not" with a one-element list is what the slow path's normalisation rewrites.
    st.dictionaries(
        st.sampled_from(["d", "$d", "$not", "d.e"]),
        st.one_of(_SCALARS, st.lists(_SCALARS, max_size=1)),
        max_size=2,
    ),
)
_FIELDS = st.sampled_from(["a", "b", "c", "n", "touched_at", "expires_at"])
_ODD_FIELDS = st.sampled_from(["_id", "a.b", "$a", ""])
_OPERATORS = st.sampled_from(["$set", "$setOnInsert", "$max", "$min", "$unset", "$inc"])
_IDS = st.one_of(
    st.integers(0, 3), st.sampled_from(["k", b"k", _OID]), st.fixed_dictionaries({"r": st.just(1)})
)
_UPDATES = st.dictionaries(
    _OPERATORS,
    st.dictionaries(st.one_of(_FIELDS, _FIELDS, _FIELDS, _ODD_FIELDS), _VALUES, max_size=3),
    min_size=1,
    max_size=4,
)
_ORDERED = st.sampled_from(
    [0, 1, -1, 2, 1.0, 2.5, -0.0, math.inf, 2**40, Int64(1), Int64(3), _EARLY, _NOW, _LATE]
)
# Mostly updates the fast path takes (a few fields, comparable operands), so most examples compare.
_SIMPLE_UPDATES = st.dictionaries(
    _OPERATORS.filter(lambda name: name != "$inc"),
    st.dictionaries(_FIELDS, st.one_of(_ORDERED, _ORDERED, _VALUES), min_size=1, max_size=2),
    min_size=1,
    max_size=3,
)
_CONDITIONS = st.one_of(
    _SCALARS, st.fixed_dictionaries({"$eq": _SCALARS}), st.fixed_dictionaries({"$gt": _SCALARS})
)
_FILTERS = st.dictionaries(st.one_of(_FIELDS, st.just("_id"), st.just("a.b")), _CONDITIONS, max_size=3)


def _slow(
    pre: dict[str, Any] | None, update: dict[str, Any], filter_: dict[str, Any]
) -> dict[str, Any] | str:
    # A fresh scratch each time: a failed update that moved ``_id`` to a document (``$set`` of ``_id``
    # beside a failing ``$min``) leaves mongomock_ng's scratch raising KeyError for every later update.
    scratch: Any = mongomock_ng.MongoClient()["scratch"]["post_image"]
    try:
        return compute_post_image(scratch, pre, update, filter_, now=_NOW)
    except Exception as error:
        return f"{type(error).__name__}: {error}"


def _bytes(document: dict[str, Any], *, upserted: bool) -> bytes:
    # A generated _id is random; its position (first) is still compared.
    return bson.encode(
        {**document, "_id": None} if upserted and isinstance(document["_id"], ObjectId) else document
    )


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pre=st.one_of(
        st.none(), st.tuples(_IDS, st.dictionaries(_FIELDS, st.one_of(_ORDERED, _VALUES), max_size=4))
    ),
    update=st.one_of(_SIMPLE_UPDATES, _SIMPLE_UPDATES, _SIMPLE_UPDATES, _UPDATES),
    filter_=_FILTERS,
)
def test_fast_post_image_is_the_slow_paths(
    pre: tuple[Any, dict[str, Any]] | None, update: dict[str, Any], filter_: dict[str, Any]
) -> None:
    stored = None if pre is None else to_storage({"_id": pre[0], **pre[1]})
    sent, server_filter = wire_value(update), wire_value(filter_)
    fast = simple_post_image(stored, sent, server_filter)
    slow = _slow(stored, sent, server_filter)
    event(f"{'fast' if fast is not None else 'slow'} {'upsert' if stored is None else 'update'}")
    if fast is None:
        return  # the slow path decides, as it always did
    event("unchanged" if bson.encode(fast) == bson.encode(stored or {}) else "changed")
    assert not isinstance(slow, str), f"the fast path answered where the slow path fails: {slow}"
    assert _bytes(fast, upserted=stored is None) == _bytes(slow, upserted=stored is None)
    assert stored is None or bson.encode(stored) == bson.encode(to_storage(stored)), "pre-image left alone"


def test_the_storages_chunk_touch_and_insert_take_the_fast_path() -> None:
    stored = to_storage(
        {"_id": b"c1", "_kind": "chunk", "run": "r", "data": b"\0" * 2048, "touched_at": _NOW}
    )
    stored["expires_at"] = _LATE
    touch = wire_value({"$max": {"touched_at": _EARLY, "expires_at": _LATE}})
    unchanged = simple_post_image(stored, touch, {"_id": {"$in": [b"c1"]}})
    assert unchanged is not None
    assert bson.encode(unchanged) == bson.encode(stored)
    raised = simple_post_image(stored, wire_value({"$max": {"touched_at": _LATE}}), {})
    assert raised == {**stored, "touched_at": _LATE}
    insert = wire_value({"$setOnInsert": {"data": b"d"}, "$max": {"touched_at": _NOW, "expires_at": _LATE}})
    new = simple_post_image(None, insert, {"_id": b"c2", "_kind": "chunk", "run": "r"})
    assert new is not None
    assert list(new.items()) == [
        ("_id", b"c2"),
        ("_kind", "chunk"),
        ("run", "r"),
        ("data", b"d"),
        ("touched_at", _NOW),
        ("expires_at", _LATE),
    ]
    slow = _slow(None, insert, {"_id": b"c2", "_kind": "chunk", "run": "r"})
    assert not isinstance(slow, str)
    assert _bytes(new, upserted=False) == _bytes(slow, upserted=False)


@pytest.mark.parametrize(
    "update",
    [
        {"$inc": {"a": 1}},
        {"$set": {"a.b": 1}},
        {"$set": {"_id": 1}},
        {"$set": {"$a": 1}},
        {"$set": {}},
        {"$set": {"a": 1}, "$max": {"a": 2}},
        {"$set": {"a": "$$NOW"}},
        {"$set": {"a": {"$literal": 1}}},
        {"$max": {"n": "1"}},
        {"$max": {"n": True}},
        {"$max": {"n": math.nan}},
        {"$min": {"s": 1}},
        {"$min": {"d": 1}},
        {"$max": {"n": _NOW}},
    ],
)
def test_updates_it_does_not_model_go_the_slow_path(update: dict[str, Any]) -> None:
    stored = to_storage({"_id": 1, "n": 1, "s": "x", "d": _NOW})
    assert simple_post_image(stored, wire_value(update), {}) is None


def test_pipelines_go_the_slow_path() -> None:
    assert simple_post_image({"_id": 1}, [{"$set": {"a": 1}}], {}) is None


async def test_the_engine_touches_chunks_without_mongomock(monkeypatch: pytest.MonkeyPatch) -> None:
    coll = InMemoryMongoClient()["db"]["chunks"]
    await coll.insert_many([{"_id": bytes([n]), "touched_at": _NOW} for n in range(5)])
    calls: list[object] = []
    real = compute_post_image

    def counting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(collection_base, "compute_post_image", counting)
    noop = await coll.update_many(
        {"_id": {"$in": [bytes([n]) for n in range(5)]}}, {"$max": {"touched_at": _EARLY}}
    )
    assert (noop.matched_count, noop.modified_count) == (5, 0)
    later = await coll.update_many({}, {"$max": {"touched_at": _LATE}})
    assert (later.matched_count, later.modified_count) == (5, 5)
    assert calls == []
    await coll.update_one({"_id": bytes([0])}, {"$inc": {"n": 1}})
    assert len(calls) == 1
    assert await coll.find_one({"_id": bytes([0])}) == {"_id": bytes([0]), "touched_at": _LATE, "n": 1}


def test_the_post_image_owns_its_embedded_values() -> None:
    # The slow path's post-image is a fresh copy; stored documents must not share arrays or
    # embedded documents with the pre-image or with an update applied to many documents.
    stored = to_storage({"_id": 1, "keep": {"d": [1]}})
    update = wire_value({"$set": {"a": [1], "b": {"d": 2}}})
    post = simple_post_image(stored, update, {})
    assert post is not None
    assert post["keep"] == stored["keep"]
    assert post["keep"] is not stored["keep"]
    assert post["a"] is not update["$set"]["a"]
    assert post["b"] is not update["$set"]["b"]
