"""``$dateAdd``, ``$dateSubtract`` and ``$dateTrunc`` as the server evaluates them, in UTC.

mongomock_ng evaluates these three operators itself, but not as MongoDB 5.0+ does
(https://www.mongodb.com/docs/manual/reference/operator/aggregation/dateAdd/,
https://www.mongodb.com/docs/manual/reference/operator/aggregation/dateSubtract/,
https://www.mongodb.com/docs/manual/reference/operator/aggregation/dateTrunc/): a null or missing
argument raised ``KeyError`` where the server returns null, an integral double ``amount`` (``1.0``)
was refused where the server takes any integral number, a ``Timestamp`` or ``ObjectId`` date was
not converted, and ``$dateTrunc`` refused ``binSize`` and ``startOfWeek``. While the engine runs a
request (:func:`server_date_expressions`), mongomock_ng's two handlers are swapped for the ones
below for the fixed-length units (millisecond to week) and for every truncation; ``$dateAdd`` of
months, quarters or years, and any ``timezone``, stay mongomock_ng's.

Truncation bins count from the server's reference point, 2000-01-01T00:00:00Z, in steps of
``binSize`` units, rounding down (so dates before 2000 fall in the bin below); weeks count from
the first ``startOfWeek`` day (Sunday by default) on or after 2000-01-01.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Final, cast

from bson.objectid import ObjectId
from bson.timestamp import Timestamp
from mongomock_ng import aggregate
from pymongo.errors import OperationFailure

from ._swaps import CountedSwap

FIXED_UNITS_MS: Final = {
    "millisecond": 1,
    "second": 1_000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}
"""Milliseconds per unit; in UTC each of these units has one length."""

_MONTHS: Final = {"month": 1, "quarter": 3, "year": 12}
_EPOCH: Final = datetime(1970, 1, 1)
_REFERENCE: Final = datetime(2000, 1, 1)
_DAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

_Handler = Callable[..., Any]
_originals: dict[str, _Handler] = {}


def _install() -> None:
    _originals["add"] = aggregate._handle_date_add_operator  # pyright: ignore[reportPrivateUsage]
    _originals["trunc"] = aggregate._handle_date_trunc_operator  # pyright: ignore[reportPrivateUsage]
    aggregate._handle_date_add_operator = _date_add  # pyright: ignore[reportPrivateUsage]
    aggregate._handle_date_trunc_operator = _date_trunc  # pyright: ignore[reportPrivateUsage]


def _restore() -> None:
    aggregate._handle_date_add_operator = _originals["add"]  # pyright: ignore[reportPrivateUsage]
    aggregate._handle_date_trunc_operator = _originals["trunc"]  # pyright: ignore[reportPrivateUsage]


_SWAP: Final = CountedSwap(_install, _restore)


def server_date_expressions() -> contextlib.AbstractContextManager[None]:
    """Evaluate the three operators as the server does while the block runs (a counted swap:
    requests in flight together share it, ``_swaps.py``)."""
    return _SWAP.held()


def _date_add(operator: str, values: Any, out_value: Mapping[str, Any]) -> datetime | None:
    """``$dateAdd``/``$dateSubtract``; ``out_value`` holds the evaluated arguments (a missing
    one absent)."""
    if not isinstance(values, Mapping) or not {"startDate", "unit", "amount"} <= set(values):  # pyright: ignore[reportUnknownArgumentType]
        raise OperationFailure(f"{operator} requires startDate, unit and amount", 40414)
    if "timezone" in values or out_value.get("unit") in _MONTHS:
        return _originals["add"](operator, values, out_value)  # type: ignore[no-any-return]
    if any(out_value.get(name) is None for name in ("startDate", "unit", "amount")):
        return None  # the server's answer to a null or missing argument
    start = _as_date(operator, "startDate", out_value["startDate"])
    unit_ms = _fixed_unit(operator, out_value["unit"])
    amount = _integral(operator, "amount", out_value["amount"])
    if operator == "$dateSubtract":
        amount = -amount
    return _from_ms(operator, _to_ms(start) + amount * unit_ms)


def _date_trunc(values: Any, out_value: Mapping[str, Any]) -> datetime | None:
    """``$dateTrunc`` with ``binSize`` and ``startOfWeek``, counted from the reference point."""
    if not isinstance(values, Mapping) or not {"date", "unit"} <= set(values):  # pyright: ignore[reportUnknownArgumentType]
        raise OperationFailure("$dateTrunc requires date and unit", 40414)
    if "timezone" in values:
        return _originals["trunc"](values, out_value)  # type: ignore[no-any-return]
    given: set[str] = set(cast("Mapping[str, Any]", values))
    if any(out_value.get(name) is None for name in ("date", "unit", *({"binSize"} & given))):
        return None
    unit = out_value["unit"]
    if unit == "week" and "startOfWeek" in given and out_value.get("startOfWeek") is None:
        return None
    moment = _as_date("$dateTrunc", "date", out_value["date"])
    bin_size = _integral("$dateTrunc", "binSize", out_value.get("binSize", 1))
    if bin_size <= 0:
        raise OperationFailure("$dateTrunc requires 'binSize' to be greater than 0")
    if unit in _MONTHS:
        step = bin_size * _MONTHS[unit]
        months = (moment.year - _REFERENCE.year) * 12 + moment.month - 1
        start = months // step * step  # floor division: bins below the reference round down too
        return datetime(_REFERENCE.year + start // 12, start % 12 + 1, 1)
    step_ms = _fixed_unit("$dateTrunc", unit) * bin_size
    reference = _REFERENCE
    if unit == "week":
        first = _first_day("$dateTrunc", out_value.get("startOfWeek", "sunday"))
        reference += timedelta(days=(first - _REFERENCE.weekday()) % 7)
    offset = _to_ms(moment) - _to_ms(reference)
    return _from_ms("$dateTrunc", _to_ms(reference) + offset // step_ms * step_ms)


def _as_date(operator: str, name: str, value: Any) -> datetime:
    """The argument as the naive-UTC date it denotes: dates, Timestamps and ObjectIds convert."""
    if isinstance(value, ObjectId):
        value = value.generation_time
    elif isinstance(value, Timestamp):
        value = value.as_datetime()
    if not isinstance(value, datetime):
        raise OperationFailure(f"{operator} requires {name} to be a date, but got {type(value).__name__}")
    if value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def _integral(operator: str, name: str, value: Any) -> int:
    """An integral number of any BSON numeric type (``2.0`` included), as the server accepts."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OperationFailure(f"{operator} requires {name} to be an integer, but got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise OperationFailure(f"{operator} requires {name} to be an integer, but got {value!r}")
    return int(value)


def _fixed_unit(operator: str, unit: Any) -> int:
    if not isinstance(unit, str) or unit not in FIXED_UNITS_MS:
        raise OperationFailure(f"{operator}: unknown time unit value: {unit!r}")
    return FIXED_UNITS_MS[unit]


def _first_day(operator: str, day: Any) -> int:
    """The weekday (Monday 0) a week starts on: a day's name or its first three letters."""
    name = day.lower() if isinstance(day, str) else ""
    for number, full in enumerate(_DAYS):
        if name in (full, full[:3]):
            return number
    raise OperationFailure(f"{operator} parameter 'startOfWeek' value cannot be recognized as a day: {day}")


def _to_ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _from_ms(operator: str, milliseconds: int) -> datetime:
    try:
        return _EPOCH + timedelta(milliseconds=milliseconds)
    except OverflowError:
        raise OperationFailure(f"{operator} overflowed") from None
