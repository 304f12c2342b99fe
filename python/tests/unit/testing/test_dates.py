"""``$dateTrunc``, ``$dateAdd`` and ``$dateSubtract`` over ``$$NOW`` and stored dates, in updates
and in ``$expr`` filters, as MongoDB 5.0+ evaluates them in UTC (DIVERGENCES.md entry 27)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from bson.objectid import ObjectId
from pymongo import ReturnDocument
from pymongo.errors import OperationFailure

from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

_NOW = datetime(2026, 3, 4, 12, 34, 56, 789000)  # a Wednesday


@pytest.fixture
def dated(client: InMemoryMongoClient) -> InMemoryCollection:
    client.clock = lambda: _NOW
    return client["db"]["dated"]


async def _evaluate(coll: InMemoryCollection, expression: Any, **fields: Any) -> Any:
    """What an update pipeline stores for ``expression`` in a document holding ``fields``."""
    await coll.delete_many({})
    await coll.insert_one({"_id": 1, **fields})
    await coll.update_one({"_id": 1}, [{"$set": {"out": expression}}])
    stored = await coll.find_one({"_id": 1})
    assert stored is not None
    return stored["out"]


def _trunc(unit: str, bin_size: float | None = None, date: Any = "$$NOW", **extra: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"date": date, "unit": unit, **extra}
    if bin_size is not None:
        arguments["binSize"] = bin_size
    return {"$dateTrunc": arguments}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (_trunc("millisecond"), _NOW),
        (_trunc("second"), datetime(2026, 3, 4, 12, 34, 56)),
        (_trunc("minute", 15), datetime(2026, 3, 4, 12, 30)),
        # Bins count from 2000-01-01T00:00Z: 229,428 hours later, so 5-hour bins start at 09:00.
        (_trunc("hour", 5), datetime(2026, 3, 4, 9)),
        (_trunc("day"), datetime(2026, 3, 4)),
        (_trunc("week"), datetime(2026, 3, 1)),  # the Sunday before
        (_trunc("week", startOfWeek="Monday"), datetime(2026, 3, 2)),
        (_trunc("week", startOfWeek="wed"), datetime(2026, 3, 4)),
        # Two-week bins count from the first Sunday of 2000, 2000-01-02: 1,365 weeks before.
        (_trunc("week", 2), datetime(2026, 2, 22)),
        (_trunc("month", 5), datetime(2025, 11, 1)),  # 314 months after 2000-01 -> 310
        (_trunc("quarter", 2), datetime(2026, 1, 1)),
        (_trunc("year", 10), datetime(2020, 1, 1)),  # the manual's example periods
        (_trunc("minute", 2.0), datetime(2026, 3, 4, 12, 34)),  # an integral double is an integer
        # Before the reference point bins round down, not towards it.
        (_trunc("day", 3, date=datetime(1999, 12, 31, 5)), datetime(1999, 12, 29)),
        (_trunc("day", date=ObjectId.from_datetime(datetime(2026, 1, 2, 3))), datetime(2026, 1, 2)),
        (_trunc("day", date="$missing"), None),
        (_trunc("day", date=None), None),
        (_trunc("day", binSize=None), None),
        (_trunc("week", startOfWeek=None), None),
    ],
)
async def test_date_trunc_bins_from_the_servers_reference_point(
    dated: InMemoryCollection, expression: dict[str, Any], expected: datetime | None
) -> None:
    assert await _evaluate(dated, expression) == expected


@pytest.mark.parametrize(
    ("unit", "step"),
    [
        ("millisecond", timedelta(milliseconds=1)),
        ("second", timedelta(seconds=1)),
        ("minute", timedelta(minutes=1)),
        ("hour", timedelta(hours=1)),
        ("day", timedelta(days=1)),
        ("week", timedelta(weeks=1)),
    ],
)
async def test_date_add_and_subtract_move_by_fixed_units_in_utc(
    dated: InMemoryCollection, unit: str, step: timedelta
) -> None:
    added = {"$dateAdd": {"startDate": "$$NOW", "unit": unit, "amount": 600}}
    assert await _evaluate(dated, added) == _NOW + 600 * step
    subtracted = {"$dateSubtract": {"startDate": "$t", "unit": unit, "amount": 3.0}}
    assert await _evaluate(dated, subtracted, t=_NOW) == _NOW - 3 * step
    negative = {"$dateAdd": {"startDate": "$t", "unit": unit, "amount": -2}}
    assert await _evaluate(dated, negative, t=_NOW) == _NOW - 2 * step


async def test_date_arithmetic_returns_null_for_null_or_missing_arguments(dated: InMemoryCollection) -> None:
    for arguments in (
        {"startDate": "$missing", "unit": "day", "amount": 1},
        {"startDate": None, "unit": "day", "amount": 1},
        {"startDate": "$$NOW", "unit": None, "amount": 1},
        {"startDate": "$$NOW", "unit": "day", "amount": "$missing"},
    ):
        assert await _evaluate(dated, {"$dateAdd": arguments}) is None, arguments
        assert await _evaluate(dated, {"$dateSubtract": arguments}) is None, arguments


@pytest.mark.parametrize(
    "expression",
    [
        {"$dateAdd": {"startDate": "$$NOW", "unit": "day", "amount": 1.5}},
        {"$dateAdd": {"startDate": "$$NOW", "unit": "fortnight", "amount": 1}},
        {"$dateSubtract": {"startDate": "not a date", "unit": "day", "amount": 1}},
        _trunc("day", 0),
        _trunc("day", 1.5),
        _trunc("week", startOfWeek="someday"),
        _trunc("day", date=5),
    ],
)
async def test_invalid_date_arguments_fail_the_update(
    dated: InMemoryCollection, expression: dict[str, Any]
) -> None:
    with pytest.raises(OperationFailure):
        await _evaluate(dated, expression)


async def test_expr_filters_compare_a_field_to_a_date_computed_from_now(dated: InMemoryCollection) -> None:
    # The storage's collection filter: chunks no save touched in the last ten minutes.
    await dated.insert_many(
        [{"_id": minutes, "touched_at": _NOW - timedelta(minutes=minutes)} for minutes in (0, 9, 10, 11, 30)]
    )
    stale: dict[str, Any] = {
        "$expr": {
            "$lt": [
                "$touched_at",
                {"$dateSubtract": {"startDate": "$$NOW", "unit": "millisecond", "amount": 600000}},
            ]
        }
    }
    assert [d["_id"] for d in await dated.find(stale, sort=[("_id", 1)]).to_list()] == [11, 30]
    assert await dated.count_documents(stale) == 2
    assert await dated.find_one({"$and": [stale, {"_id": {"$gt": 11}}]}) == {
        "_id": 30,
        "touched_at": _NOW - timedelta(minutes=30),
    }
    touched = await dated.find_one_and_update(
        stale, [{"$set": {"touched_at": "$$NOW"}}], sort=[("_id", 1)], return_document=ReturnDocument.AFTER
    )
    assert touched == {"_id": 11, "touched_at": _NOW}
    assert (await dated.delete_many(stale)).deleted_count == 1  # only 30 is still stale
    assert (await dated.delete_one({"$or": [stale, {"_id": 0}]})).deleted_count == 1
    assert sorted(d["_id"] for d in await dated.find({}).to_list()) == [9, 10, 11]


async def test_now_outside_expr_is_a_plain_string(dated: InMemoryCollection) -> None:
    # A query filter holds values, not expressions, so "$$NOW" there matches the string.
    await dated.insert_many([{"_id": 1, "v": "$$NOW"}, {"_id": 2, "v": _NOW}])
    assert [d["_id"] for d in await dated.find({"v": "$$NOW"}).to_list()] == [1]
