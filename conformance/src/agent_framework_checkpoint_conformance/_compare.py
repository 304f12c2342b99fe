"""Structural comparison of what was saved with what came back, naming the first difference.

Agent Framework's own classes do not all define equality (``WorkflowEvent`` compares by
identity), so ``==`` cannot tell a faithful copy from a lossy one. Values are compared by type,
then by their fields, down to values that define their own equality.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import cast

__all__ = ["first_difference"]

_SHORT = 80
"""The longest value a message quotes whole."""

_MAX_DEPTH = 40
"""Deep enough for any checkpoint; a guard against cycles, which checkpoints do not have."""


def first_difference(expected: object, actual: object, path: str = "checkpoint") -> str | None:
    """``None`` when ``actual`` is a faithful copy of ``expected``, else where and how they differ."""
    return _difference(expected, actual, path, 0)


def _difference(expected: object, actual: object, path: str, depth: int) -> str | None:  # noqa: PLR0911 - one return per kind of value
    if depth > _MAX_DEPTH:
        return None
    if type(expected) is not type(actual):
        return (
            f"{path}: saved a {_type_name(expected)}, loaded a {_type_name(actual)} "
            f"({_short(expected)} became {_short(actual)})"
        )
    # Both are of one type from here on, so what one is, the other is too.
    if isinstance(expected, Mapping):
        mappings = cast("tuple[Mapping[object, object], Mapping[object, object]]", (expected, actual))
        return _mapping_difference(*mappings, path, depth)
    if isinstance(expected, (list, tuple)):
        sequences = cast("tuple[Sequence[object], Sequence[object]]", (expected, actual))
        return _sequence_difference(*sequences, path, depth)
    if isinstance(expected, (type, enum.Enum)):
        # Classes (a request's response type) and enum members are singletons: identity is equality.
        return None if expected is actual else f"{path}: saved {_short(expected)}, loaded {_short(actual)}"
    if _defines_equality(expected):
        return None if expected == actual else f"{path}: saved {_short(expected)}, loaded {_short(actual)}"
    fields_expected, fields_actual = _fields(expected), _fields(actual)
    if fields_expected is None or fields_actual is None:
        # No fields to look into and identity equality only: nothing more can be compared.
        return None
    return _mapping_difference(fields_expected, fields_actual, path, depth, attributes=True)


def _mapping_difference(
    expected: Mapping[object, object],
    actual: Mapping[object, object],
    path: str,
    depth: int,
    *,
    attributes: bool = False,
) -> str | None:
    missing = [key for key in expected if key not in actual]
    if missing:
        return f"{path}: {_short(missing[0])} was saved but did not come back"
    extra = [key for key in actual if key not in expected]
    if extra:
        return f"{path}: {_short(extra[0])} came back but was never saved"
    for key, value in expected.items():
        inner = f"{path}.{key}" if attributes else f"{path}[{key!r}]"
        found = _difference(value, actual[key], inner, depth + 1)
        if found is not None:
            return found
    return None


def _sequence_difference(
    expected: Sequence[object], actual: Sequence[object], path: str, depth: int
) -> str | None:
    if len(expected) != len(actual):
        return f"{path}: saved {len(expected)} items, loaded {len(actual)}"
    for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
        found = _difference(left, right, f"{path}[{index}]", depth + 1)
        if found is not None:
            return found
    return None


def _defines_equality(value: object) -> bool:
    """Whether ``value``'s class compares by value (its own ``__eq__``) rather than by identity."""
    if dataclasses.is_dataclass(value):
        # A dataclass's generated __eq__ compares fields with ==, which would hide a field whose
        # class compares by identity; its fields are walked instead.
        return False
    own: object = getattr(type(value), "__eq__", None)
    return own is not object.__eq__


def _fields(value: object) -> dict[object, object] | None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    attributes: dict[object, object] = {}
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict):
        attributes.update(state)  # pyright: ignore[reportUnknownArgumentType]
    for cls in type(value).__mro__:
        slots: object = cls.__dict__.get("__slots__", ())
        names = (slots,) if isinstance(slots, str) else slots
        if isinstance(names, (tuple, list)):
            for name in names:  # pyright: ignore[reportUnknownVariableType]
                if isinstance(name, str) and name not in ("__dict__", "__weakref__") and hasattr(value, name):
                    attributes[name] = getattr(value, name)
    return attributes or None


def _type_name(value: object) -> str:
    return type(value).__qualname__


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."
