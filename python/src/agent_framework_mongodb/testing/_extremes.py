"""``$max`` and ``$min`` of a list of expressions skip missing operands, as the server's do.

MongoDB's expression forms consider only the operands that are neither null nor missing, and
return null when none is (https://www.mongodb.com/docs/manual/reference/operator/aggregation/max/,
"Null or Missing Values"). mongomock_ng drops null operands but keeps a missing one as its
"nothing" sentinel, and then fails comparing it with the others (``TypeError``), so
``{$max: ["$absent", "$$NOW"]}`` broke an update the server applies. While the engine runs a
request (:func:`server_extremes`), the two entries of mongomock_ng's operator table are swapped
for ones that drop both; everything else about the comparison (the chosen operand returned as it
is, entry 23) stays mongomock_ng's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any, Final, cast

from mongomock_ng import aggregate

from ._swaps import CountedSwap

__all__ = ["server_extremes"]

_originals: dict[str, Callable[[Any], Any]] = {}


_NOTHING: Final[object] = getattr(aggregate, "NOTHING")  # noqa: B009 - not in its __all__
"""mongomock_ng's value of a missing field."""


def _present(values: Iterable[Any]) -> list[Any]:
    return [value for value in values if value is not None and value is not _NOTHING]


def _extreme(choose: Callable[[list[Any]], Any]) -> Callable[[Any], Any]:
    def evaluate(values: Any) -> Any:
        # A list of expressions arrives evaluated as an iterable; one expression as its value,
        # which the server takes apart only when it is an array.
        several = isinstance(values, Iterable) and not isinstance(values, (str, bytes, dict))
        operands = _present(cast("Iterable[Any]", values) if several else [values])
        return choose(operands) if operands else None

    return evaluate


_SHIMS: dict[str, Callable[[Any], Any]] = {"$max": _extreme(max), "$min": _extreme(min)}


def _install() -> None:
    table = _operator_table()
    for name, shim in _SHIMS.items():
        _originals[name] = table[name]
        table[name] = shim


def _restore() -> None:
    _operator_table().update(_originals)


def _operator_table() -> dict[str, Callable[[Any], Any]]:
    table: dict[str, Callable[[Any], Any]] = getattr(aggregate, "_GROUPING_OPERATOR_MAP")  # noqa: B009 - private
    return table


_SWAP: Final = CountedSwap(_install, _restore)


def server_extremes() -> contextlib.AbstractContextManager[None]:
    """Evaluate ``$max`` and ``$min`` as the server does while the block runs (a counted swap,
    ``_swaps.py``)."""
    return _SWAP.held()
