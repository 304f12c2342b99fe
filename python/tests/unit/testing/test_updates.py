"""Update documents, aggregation update pipelines and upserts, pinned to MongoDB's behaviour."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from bson.int64 import Int64
from pymongo import ReturnDocument
from pymongo.errors import WriteError

from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

AFTER = ReturnDocument.AFTER


async def _after(coll: InMemoryCollection, filter_: dict[str, Any], update: Any, **kwargs: Any) -> Any:
    return await coll.find_one_and_update(filter_, update, return_document=AFTER, **kwargs)


async def test_remove_variable_in_set_removes_the_field(coll: InMemoryCollection) -> None:
    # https://www.mongodb.com/docs/manual/reference/aggregation-variables/#mongodb-variable-variable.REMOVE
    await coll.insert_one({"_id": 1, "a": 1, "b": 2})
    assert await _after(coll, {"_id": 1}, [{"$set": {"a": "$$REMOVE"}}]) == {"_id": 1, "b": 2}
    assert await _after(coll, {"_id": 1}, [{"$addFields": {"b": "$$REMOVE"}}]) == {"_id": 1}


async def test_cond_yielding_remove_removes_the_field(coll: InMemoryCollection) -> None:
    await coll.insert_many([{"_id": 1, "done": True, "expires_at": 5}, {"_id": 2, "done": False}])
    stage = {"$set": {"expires_at": {"$cond": [{"$eq": ["$done", True]}, "$$REMOVE", 10]}}}
    assert await _after(coll, {"_id": 1}, [stage]) == {"_id": 1, "done": True}
    assert await _after(coll, {"_id": 2}, [stage]) == {"_id": 2, "done": False, "expires_at": 10}
    named = {"$set": {"done": {"$cond": {"if": "$done", "then": "$$REMOVE", "else": "$done"}}}}
    assert await _after(coll, {"_id": 2}, [named]) == {"_id": 2, "done": False, "expires_at": 10}


async def test_removed_field_is_missing_for_later_stages(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1, "a": 5})
    pipeline = [{"$set": {"a": "$$REMOVE"}}, {"$set": {"b": {"$ifNull": ["$a", "gone"]}}}]
    assert await _after(coll, {"_id": 1}, pipeline) == {"_id": 1, "b": "gone"}


async def test_remove_inside_embedded_document_and_literal_string(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1})
    pipeline = [{"$set": {"sub": {"keep": 1, "drop": "$$REMOVE"}, "text": {"$literal": "$$REMOVE"}}}]
    assert await _after(coll, {"_id": 1}, pipeline) == {"_id": 1, "sub": {"keep": 1}, "text": "$$REMOVE"}


async def test_pipeline_upsert_seeds_filter_equalities_first(coll: InMemoryCollection) -> None:
    # https://www.mongodb.com/docs/manual/reference/method/db.collection.findOneAndUpdate/#upsert
    pipeline = [{"$set": {"n": {"$add": [{"$ifNull": ["$n", 0]}, 1]}}}]
    first = await _after(coll, {"_id": "c", "kind": "k"}, pipeline, upsert=True)
    assert first == {"_id": "c", "kind": "k", "n": 1}
    second = await _after(coll, {"_id": "c", "kind": "k"}, pipeline, upsert=True)
    assert second == {"_id": "c", "kind": "k", "n": 2}


async def test_upsert_seeds_from_and_clauses_and_eq_but_not_ranges(coll: InMemoryCollection) -> None:
    # https://www.mongodb.com/docs/manual/reference/method/db.collection.updateOne/#upsert-with-operator-expressions
    filter_ = {"_id": "d", "$and": [{"a": {"$eq": 1}}, {"b.c": 2}], "r": {"$gt": 1}}
    assert await _after(coll, filter_, {"$set": {"z": 1}}, upsert=True) == {
        "_id": "d",
        "a": 1,
        "b": {"c": 2},
        "z": 1,
    }
    assert await _after(coll, {"_id": "e", "tag": "t"}, [{"$set": {"z": 1}}], upsert=True) == {
        "_id": "e",
        "tag": "t",
        "z": 1,
    }


async def test_upsert_without_id_generates_one_first(coll: InMemoryCollection) -> None:
    result = await coll.update_one({"k": "x"}, [{"$set": {"n": 1}}], upsert=True)
    stored = await coll.find_one({"k": "x"})
    assert stored is not None
    assert next(iter(stored)) == "_id"
    assert stored == {"_id": result.upserted_id, "k": "x", "n": 1}


async def test_set_on_insert_applies_only_when_inserting(coll: InMemoryCollection) -> None:
    update = {"$setOnInsert": {"created": 1}, "$inc": {"n": 1}}
    assert await _after(coll, {"_id": 1}, update, upsert=True) == {"_id": 1, "created": 1, "n": 1}
    await coll.update_one({"_id": 1}, {"$setOnInsert": {"created": 2}, "$inc": {"n": 1}}, upsert=True)
    assert await coll.find_one({"_id": 1}) == {"_id": 1, "created": 1, "n": 2}


async def test_return_document_before_and_none_when_nothing_matches(coll: InMemoryCollection) -> None:
    assert await coll.find_one_and_update({"_id": 1}, {"$set": {"a": 1}}) is None
    assert await coll.find_one_and_update({"_id": 1}, {"$set": {"a": 1}}, upsert=True) is None
    before = await coll.find_one_and_update({"_id": 1}, {"$set": {"a": 2}}, projection={"a": 1, "_id": 0})
    assert before == {"a": 1}


async def test_find_one_and_update_honours_sort(coll: InMemoryCollection) -> None:
    await coll.insert_many([{"_id": i, "g": "x", "n": i} for i in range(3)])
    picked = await coll.find_one_and_update({"g": "x"}, {"$set": {"hit": True}}, sort=[("n", -1)])
    assert picked is not None
    assert picked["_id"] == 2


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ({"$add": ["$a", 2, "$b"]}, 6),
        ({"$max": ["$a", "$b", 0]}, 3),
        ({"$ifNull": ["$missing", "$a"]}, 1),
        ({"$cond": [{"$gt": ["$b", "$a"]}, "yes", "no"]}, "yes"),
        ({"$eq": ["$a", 1]}, True),
        ({"$gt": ["$a", "$b"]}, False),
        ({"$and": [{"$eq": ["$a", 1]}, {"$gt": ["$b", 2]}]}, True),
        ({"$or": [{"$eq": ["$a", 0]}, {"$gt": ["$b", 5]}]}, False),
        ({"$literal": "$a"}, "$a"),
        ({"$type": "$a"}, "int"),
        ({"$type": "$missing"}, "missing"),
        ("$sub.x", "deep"),
        ({"$ne": ["$a", 1]}, False),
        ({"$gte": ["$b", 3]}, True),
        # BSON orders null below every date (the counter's "grace over" test relies on it).
        ({"$gte": ["$d", None]}, True),
        ({"$gte": [None, "$d"]}, False),
        ({"$max": [{"$ifNull": ["$missing", "$d"]}, datetime(2023, 1, 1)]}, datetime(2024, 1, 1)),
        ({"$add": ["$d", 1500]}, datetime(2024, 1, 1, 0, 0, 1, 500000)),
        ({"$type": "$d"}, "date"),
    ],
)
async def test_expressions_a_sequence_counter_uses(
    coll: InMemoryCollection, expression: Any, expected: Any
) -> None:
    await coll.insert_one({"_id": 1, "a": 1, "b": 3, "sub": {"x": "deep"}, "d": datetime(2024, 1, 1)})
    after = await _after(coll, {"_id": 1}, [{"$set": {"out": expression}}])
    assert after is not None
    assert after["out"] == expected


async def test_pipeline_unset_project_and_replace_with(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1, "a": 1, "b": 2, "c": 3})
    assert await _after(coll, {"_id": 1}, [{"$unset": ["a"]}]) == {"_id": 1, "b": 2, "c": 3}
    assert await _after(coll, {"_id": 1}, [{"$project": {"c": 0}}]) == {"_id": 1, "b": 2}
    replaced = await _after(coll, {"_id": 1}, [{"$replaceWith": {"_id": "$_id", "only": "$b"}}])
    assert replaced == {"_id": 1, "only": 2}


async def test_changing_id_is_rejected_as_immutable(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1})
    with pytest.raises(WriteError) as info:
        await coll.update_one({"_id": 1}, {"$set": {"_id": 2}})
    assert info.value.code == 66
    with pytest.raises(WriteError):
        await coll.update_one({"_id": 1}, [{"$set": {"_id": 3}}])
    assert await coll.find_one({}) == {"_id": 1}


@pytest.mark.parametrize("update", [{}, {"a": 1}, []])
async def test_invalid_update_documents_are_rejected_client_side(
    coll: InMemoryCollection, update: Any
) -> None:
    with pytest.raises(ValueError, match="update"):
        await coll.update_one({"_id": 1}, update)


async def test_array_filters_are_refused_explicitly(coll: InMemoryCollection) -> None:
    with pytest.raises(NotImplementedError):
        await coll.update_one({"_id": 1}, {"$set": {"a.$[x]": 1}}, array_filters=[{"x": 1}])


async def test_documents_with_embedded_document_ids_update_and_upsert(coll: InMemoryCollection) -> None:
    # mongomock_ng cannot update these in place; the engine swaps the _id out while updating.
    key = {"thread": "t", "seq": 1}
    await coll.insert_one({"_id": key, "n": 1})
    assert await _after(coll, {"_id": key}, {"$inc": {"n": 1}}) == {"_id": key, "n": 2}
    pipeline = [{"$set": {"n": {"$add": ["$n", 1]}, "copy": "$_id"}}]
    assert await _after(coll, {"_id": key}, pipeline) == {"_id": key, "n": 3, "copy": key}
    other = {"thread": "t", "seq": 2}
    assert await _after(coll, {"_id": other}, [{"$set": {"n": 1}}], upsert=True) == {"_id": other, "n": 1}
    assert await coll.count_documents({"_id.thread": "t"}) == 2


async def test_now_variable_is_the_clock_once_per_update(
    client: InMemoryMongoClient, coll: InMemoryCollection
) -> None:
    # $$NOW: one value for the whole operation, in every stage, read from the server's clock.
    # https://www.mongodb.com/docs/manual/reference/aggregation-variables/#mongodb-variable-variable.NOW
    readings = iter([datetime(2030, 1, 1, 0, 0, 0, 123456, tzinfo=timezone.utc), datetime(2031, 1, 1)])
    client.clock = lambda: next(readings)
    pipeline = [
        {"$set": {"at": "$$NOW", "later": {"$add": ["$$NOW", 1000]}, "kept": {"$literal": "$$NOW"}}},
        {"$set": {"same": {"$eq": ["$at", "$$NOW"]}}},
    ]
    first = await _after(coll, {"_id": 1}, pipeline, upsert=True)
    assert first == {
        "_id": 1,
        "at": datetime(2030, 1, 1, 0, 0, 0, 123000),  # BSON dates keep milliseconds
        "later": datetime(2030, 1, 1, 0, 0, 1, 123000),
        "kept": "$$NOW",
        "same": True,
    }
    second = await _after(coll, {"_id": 1}, [{"$set": {"at": "$$NOW"}}])
    assert second["at"] == datetime(2031, 1, 1)


async def test_not_takes_its_documented_one_element_list(coll: InMemoryCollection) -> None:
    # https://www.mongodb.com/docs/manual/reference/operator/aggregation/not/: { $not: [ <expression> ] }
    await coll.insert_one({"_id": 1, "yes": True})
    stage = {
        "$set": {
            "listed": {"$not": [False]},
            "listed_field": {"$not": ["$yes"]},
            "listed_expression": {"$not": [{"$eq": [1, 2]}]},
            "bare": {"$not": {"$lt": [1, 2]}},
        }
    }
    assert await _after(coll, {"_id": 1}, [stage]) == {
        "_id": 1,
        "yes": True,
        "listed": True,
        "listed_field": False,
        "listed_expression": True,
        "bare": False,
    }


async def test_arithmetic_keeps_the_servers_integer_widths(coll: InMemoryCollection) -> None:
    # A 64-bit operand makes a 64-bit result, 32-bit ones a 32-bit result unless it overflows, and
    # a 64-bit overflow in $add a double; $max returns its operand as it is. pymongo hands int64
    # back as bson's Int64 and int32 as int.
    await coll.insert_many(
        [
            {"_id": "int", "n": 3},
            {"_id": "long", "n": Int64(3)},
            {"_id": "edge", "n": 2**31 - 1},
            {"_id": "top", "n": Int64(2**63 - 1)},
        ]
    )
    plus_one = [{"$set": {"n": {"$add": ["$n", 1]}}}]
    floored = [{"$set": {"n": {"$add": [{"$max": ["$n", Int64(5)]}, 1]}}}]
    cases: list[tuple[str, Any, Any, type]] = [
        ("int", plus_one, 4, int),
        ("int", floored, 6, Int64),
        ("int", {"$inc": {"n": 1}}, 7, Int64),
        ("long", plus_one, 4, Int64),
        ("long", {"$inc": {"n": 1}}, 5, Int64),
        ("long", [{"$set": {"n": {"$subtract": ["$n", 1]}}}], 4, Int64),
        ("long", [{"$set": {"n": {"$multiply": ["$n", 2]}}}], 8, Int64),
        ("edge", plus_one, 2**31, Int64),
        ("top", plus_one, float(2**63), float),
    ]
    for _id, update, value, width in cases:
        after = await _after(coll, {"_id": _id}, update)
        assert (after["n"], type(after["n"])) == (value, width), (_id, update)
        (stored,) = [d for d in coll.stored_documents() if d["_id"] == _id]
        assert type(stored["n"]) is width
    assert (await _after(coll, {"_id": "new"}, {"$inc": {"n": Int64(1)}}, upsert=True))[
        "n"
    ].__class__ is Int64
    assert (await _after(coll, {"_id": "new32"}, {"$inc": {"n": 1}}, upsert=True))["n"].__class__ is int
    # An upsert seeded from the filter keeps the filter's width.
    seeded = await _after(coll, {"_id": "seed", "n": Int64(1)}, {"$inc": {"n": 1}}, upsert=True)
    assert type(seeded["n"]) is Int64


async def test_max_and_min_skip_missing_and_null_operands(coll: InMemoryCollection) -> None:
    # The server considers only operands that are neither null nor missing, and gives null when
    # none is (manual, $max (aggregation), "Null or Missing Values"); mongomock_ng raised TypeError.
    await coll.insert_one({"_id": 1, "low": 2, "high": 9})
    await coll.update_one(
        {"_id": 1},
        [
            {
                "$set": {
                    "max_of_missing": {"$max": ["$absent", 5]},
                    "min_of_missing": {"$min": ["$absent", None, 5]},
                    "max_of_fields": {"$max": ["$low", "$absent", "$high"]},
                    "min_of_fields": {"$min": ["$high", "$absent", "$low"]},
                    "none_present": {"$max": ["$absent", None]},
                    "latest": {"$max": ["$absent", "$$NOW"]},
                }
            }
        ],
    )
    stored = await coll.find_one({"_id": 1})
    assert stored is not None
    assert (stored["max_of_missing"], stored["min_of_missing"]) == (5, 5)
    assert (stored["max_of_fields"], stored["min_of_fields"]) == (9, 2)
    assert stored["none_present"] is None
    assert isinstance(stored["latest"], datetime)
