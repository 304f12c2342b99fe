"""Index lookups answer exactly what mongomock_ng's scan answers, and touch only their candidates."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import bson
import pytest
from bson.binary import Binary
from bson.objectid import ObjectId
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymongo import ASCENDING, DESCENDING, IndexModel

import agent_framework_mongodb.testing._collection_base as collection_base
import agent_framework_mongodb.testing._lookup as lookup_module
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient
from agent_framework_mongodb.testing._indexes import matches as real_matches

_OID = ObjectId("5f0000000000000000000001")
_WHEN = datetime(2025, 1, 2, 3, 4, 5)
_BINARY_4 = Binary(b"x" * 16, 4)
_BINARIES = (b"x", b"", _BINARY_4)
_SCALARS = st.sampled_from(
    [0, 1, 2, 1.0, 2.5, True, False, "x", "y", "1", None, _OID, str(_OID), _WHEN, math.nan, *_BINARIES]
)
_VALUES = st.one_of(
    _SCALARS,
    st.lists(_SCALARS, max_size=3),
    st.fixed_dictionaries({"d": _SCALARS}),
    st.lists(st.fixed_dictionaries({"d": _SCALARS}), max_size=2),
)
_FIELDS = ("a", "b", "c", "n")
_DOCUMENTS = st.lists(st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=4), min_size=0, max_size=25)
_LOOKUP_VALUES = st.sampled_from(
    [0, 1, 2, 1.0, True, False, "x", "y", "1", None, _OID, _WHEN, math.nan, *_BINARIES]
)


def _reachable(value: Any) -> list[Any]:
    """The scalars a filter can name to match ``value``: itself, its elements, their ``d``."""
    if isinstance(value, dict):
        return _reachable(value.get("d"))
    if isinstance(value, list):
        return [found for item in value for found in _reachable(item)]
    return [value]


def _filters(documents: list[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Filters naming, per field, values the documents hold there (so they match some), or any
    lookup value."""

    def held(path: str) -> list[Any]:
        top, _, rest = path.partition(".")
        found: list[Any] = []
        for document in documents:
            value = document.get(top)
            if rest == "d":
                value = [
                    item.get("d")
                    for item in (value if isinstance(value, list) else [value])
                    if isinstance(item, dict)
                ]
            found.extend(_reachable(value))
        return found

    def condition(path: str) -> st.SearchStrategy[Any]:
        pool = held(path)
        values = st.one_of(*[st.sampled_from(pool)] * 3, _LOOKUP_VALUES) if pool else _LOOKUP_VALUES
        return st.one_of(
            values,
            values.map(lambda value: {"$eq": value}),
            st.lists(values, min_size=1, max_size=3).map(lambda items: {"$in": items}),
            values.map(lambda value: {"$gte": value}),
            st.lists(_SCALARS, max_size=2),
        )

    paths = st.lists(st.sampled_from(["a", "b", "c", "n.d", "_id", "a.0"]), max_size=3, unique=True)
    return paths.flatmap(lambda chosen: st.fixed_dictionaries({path: condition(path) for path in chosen}))


_SORTS = st.one_of(
    st.none(),
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "n.d"]), st.sampled_from([1, -1])), min_size=1, max_size=2
    ),
)
_PROJECTIONS = st.sampled_from([None, {"a": 1}, {"b": 0}, {"_id": 0, "c": 1}])
_INDEXES = [
    IndexModel([("a", ASCENDING), ("b", ASCENDING)], name="a_b"),
    IndexModel([("c", ASCENDING)], name="c_where_a", partialFilterExpression={"a": 1}),
    IndexModel([("b", ASCENDING), ("a", DESCENDING)], name="b_a_sparse", sparse=True),
    IndexModel([("n.d", ASCENDING)], name="n_d"),
    IndexModel([("a", ASCENDING), ("c", ASCENDING)], name="a_c_where_b", partialFilterExpression={"b": "x"}),
]


def _encoded(documents: list[dict[str, Any]]) -> list[bytes]:
    return [bson.encode(document) for document in documents]


async def _seeded(documents: list[dict[str, Any]], writes: list[tuple[str, Any]]) -> InMemoryCollection:
    coll = InMemoryMongoClient()["db"]["coll"]
    await coll.create_indexes(_INDEXES[:2])
    for position, document in enumerate(documents):
        await coll.insert_one({"_id": position, **document})
    await coll.create_indexes(_INDEXES[2:])  # maps rebuilt over stored documents, then kept write by write
    for step, (kind, argument) in enumerate(writes):
        if kind == "set":
            await coll.update_one({"_id": argument[0]}, {"$set": argument[1]})
        elif kind == "delete":
            await coll.delete_many(argument)
        else:
            await coll.insert_one({"_id": f"late-{step}", "a": argument, "b": "x"})
    return coll


_WRITES = st.lists(
    st.one_of(
        st.tuples(
            st.just("set"),
            st.tuples(st.integers(0, 25), st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=2)),
        ),
        st.tuples(
            st.just("delete"), st.dictionaries(st.sampled_from(["a", "b", "_id"]), _LOOKUP_VALUES, max_size=1)
        ),
        st.tuples(st.just("insert"), _LOOKUP_VALUES),
    ),
    max_size=6,
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    documents=_DOCUMENTS,
    writes=_WRITES,
    data=st.data(),
    sort=_SORTS,
    skip=st.integers(0, 3),
    limit=st.integers(0, 4),
    projection=_PROJECTIONS,
)
async def test_indexed_results_are_the_scans(  # noqa: PLR0917 - hypothesis passes each strategy
    documents: list[dict[str, Any]],
    writes: list[tuple[str, Any]],
    data: st.DataObject,
    sort: list[tuple[str, int]] | None,
    skip: int,
    limit: int,
    projection: dict[str, Any] | None,
) -> None:
    filter_ = data.draw(_filters(documents), label="filter")
    coll = await _seeded(documents, writes)
    scan = coll.database.client.backend["db"]["coll"]
    expected = list(scan.find(filter_, projection, sort=sort, skip=skip, limit=limit))
    found = await coll.find(filter_, projection, sort=sort, skip=skip, limit=limit).to_list()
    assert _encoded(found) == _encoded(expected)
    assert await coll.count_documents(filter_) == len(list(scan.find(filter_)))
    deleted = len(list(scan.find(filter_)))
    assert (await coll.delete_many(filter_)).deleted_count == deleted
    assert _encoded(coll.stored_documents()) == _encoded(list(scan.find({})))


def _count_matches(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every document the engine's matcher is asked about, from now on."""
    evaluated: list[object] = []

    def counting(filter_: Any, document: Any) -> bool:
        evaluated.append(document)
        return real_matches(filter_, document)

    monkeypatch.setattr(collection_base, "matches", counting)
    return evaluated


async def test_equality_on_an_index_prefix_matches_only_its_candidates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    coll = InMemoryMongoClient()["db"]["coll"]
    await coll.create_index([("run", ASCENDING), ("seq", ASCENDING)])
    await coll.insert_many(
        [{"_id": f"{run}-{seq}", "run": run, "seq": seq} for run in range(20) for seq in range(50)]
    )
    evaluated = _count_matches(monkeypatch)
    assert await coll.find_one({"_id": "3-7"}) == {"_id": "3-7", "run": 3, "seq": 7}
    assert len(evaluated) == 1
    evaluated.clear()
    assert [d["seq"] for d in await coll.find({"run": 4}, sort=[("seq", DESCENDING)], limit=2).to_list()] == [
        49,
        48,
    ]
    assert len(evaluated) == 2  # the walk down the index stops at the limit
    evaluated.clear()
    assert (await coll.delete_many({"run": 5})).deleted_count == 50
    assert len(evaluated) == 50  # one pass over the run, not the collection
    assert await coll.count_documents({}) == 950


async def test_an_id_lookup_beats_a_prefix_whose_next_field_has_one_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A run's chunks share their touch time: a count of distinct next values (1) chose the run's
    # prefix, and every chunk of the run was matched against a long $in.
    coll = InMemoryMongoClient()["db"]["coll"]
    await coll.create_index([("run", ASCENDING), ("touched", ASCENDING)])
    await coll.insert_many([{"_id": bytes([n]), "run": "r", "touched": 1} for n in range(200)])
    evaluated = _count_matches(monkeypatch)
    found = await coll.find({"_id": {"$in": [bytes([3]), bytes([9])]}, "run": "r"}).to_list()
    assert sorted(d["_id"] for d in found) == [bytes([3]), bytes([9])]
    assert len(evaluated) == 2


async def test_choosing_the_index_does_not_visit_a_large_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    # Counting a run's prefix to the end on every save made a save into a run of 50,000
    # checkpoints 7x one into 500 (the engine-scale benchmark); the count stops above the best.
    coll = InMemoryMongoClient()["db"]["coll"]
    await coll.create_index([("run", ASCENDING), ("seq", ASCENDING)])
    await coll.insert_many([{"_id": n, "run": "r", "seq": n} for n in range(3000)])
    visits: list[int] = []
    real = lookup_module._count_below

    def counted(node: Any, levels: int, bound: int | None) -> int:
        visits.append(levels)
        return real(node, levels, bound)

    monkeypatch.setattr(lookup_module, "_count_below", counted)
    assert await coll.find_one({"_id": 17, "run": "r"}) == {"_id": 17, "run": "r", "seq": 17}
    assert len(visits) < 10


async def test_values_mongomock_equates_are_found_and_doubts_fall_back_to_the_scan() -> None:
    coll = InMemoryMongoClient()["db"]["coll"]
    await coll.create_index([("k", ASCENDING), ("s", ASCENDING)])
    await coll.insert_many(
        [
            {"_id": 1, "k": 1, "s": 1},
            {"_id": 2, "k": 1.0, "s": True},  # mongomock_ng's == equates 1, 1.0 and true
            {"_id": 3, "k": True, "s": 0},
            {"_id": 4, "k": [5, 1], "s": 2},  # an array matches by its elements
            {"_id": 5, "k": [str(_OID)], "s": 3},  # mongomock_ng matches an ObjectId against its hex string
            {"_id": 6, "s": 4},
        ]
    )
    ids = [d["_id"] for d in await coll.find({"k": 1}).to_list()]
    assert ids == [1, 2, 3, 4]
    assert [d["_id"] for d in await coll.find({"k": _OID}).to_list()] == [5]
    assert [d["_id"] for d in await coll.find({"k": None}).to_list()] == [6]  # None: the scan
    # A true filed with 1 under the sort field breaks the walk's order: the candidates are sorted.
    scan = coll.database.client.backend["db"]["coll"]
    expected = [d["_id"] for d in scan.find({"k": 1}, sort=[("s", DESCENDING)], limit=3)]
    ordered = await coll.find({"k": 1}, sort=[("s", DESCENDING)], limit=3).to_list()
    assert [d["_id"] for d in ordered] == expected == [2, 4, 1]  # true ranks above numbers


async def test_ordered_walk_stays_in_step_with_writes_of_equal_values_of_other_types() -> None:
    coll = InMemoryMongoClient()["db"]["coll"]
    await coll.create_index([("k", ASCENDING), ("s", ASCENDING)])
    scan = coll.database.client.backend["db"]["coll"]

    async def walked() -> list[Any]:
        found = await coll.find({"k": 1}, sort=[("s", DESCENDING)], limit=10).to_list()
        expected = list(scan.find({"k": 1}, sort=[("s", DESCENDING)], limit=10))
        assert _encoded(found) == _encoded(expected)
        return [document["_id"] for document in found]

    await coll.insert_many([{"_id": i, "k": 1, "s": s} for i, s in enumerate([3, 1, 2])])
    assert await walked() == [0, 2, 1]  # the sorted values of s under k=1 are kept from here on
    await coll.insert_one({"_id": 3, "k": 1, "s": True})  # filed under the key 1 already there
    await coll.delete_one({"_id": 1})
    await coll.delete_one({"_id": 3})  # removes the key 1, named by true
    await coll.insert_many([{"_id": 4, "k": 1, "s": 0}, {"_id": 5, "k": 1, "s": 5}])
    assert await walked() == [5, 0, 2, 4]
    assert (await coll.delete_many({"k": 1, "s": {"$lt": 3}})).deleted_count == 2
    assert await walked() == [5, 0]
