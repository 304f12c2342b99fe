"""What of an instance the walk stores: its state as the rebuild will write it back.

The walk (``walk.py``) reads an instance's ``__dict__`` and slots through the descriptors its
:class:`~.rules.ClassPlan` vetted. Two kinds of class need more than that, and this module holds
those rules: Agent Framework classes whose own ``__getstate__`` leaves runtime-only fields out
(their stored state is what that hook exposes, the fields it leaves out stored as ``None``), and
pydantic models, whose slots hold extras, private attributes and the fields set.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, NoReturn, cast

from .rules import (
    PYDANTIC_PRIVATE,
    ClassPlan,
    TypeRefusal,
    check_attribute_names,
    require_pydantic_slots,
)

__all__ = ["framework_state", "merged_framework_state", "pydantic_slots", "refuse_names", "state_dict"]

_PAIR: Final = 2


def refuse_names(plan: ClassPlan, names: tuple[object, ...]) -> NoReturn:
    """Refuse an instance dict with a name that is not an exact ``str``, as the full check does."""
    check_attribute_names(plan, names)  # raises at that name, or at a bad name before it
    raise TypeRefusal("an instance's attributes must have str names")


def merged_framework_state(instance_dict: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """A slotless framework object's stored state: the state its ``__getstate__`` exposes, and
    the fields it leaves out as ``None``, as the framework's own restore sets them."""
    omitted = instance_dict.keys() - state.keys()
    if not omitted:
        return state
    merged = state.copy()
    for name in sorted(omitted):
        merged[name] = None
    return merged


def framework_state(
    value: Any,
    plan: ClassPlan,
    instance_dict: dict[str, Any] | None,
    slots: dict[str, Any] | None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """State of a framework object as its own ``__getstate__`` exposes it.

    Agent Framework types leave runtime-only fields (an SDK's raw response) out of their pickle
    state and restore them as ``None``; the tree does the same, so the rebuilt object holds
    exactly what the framework's own restore would give it.
    """
    state = state_dict(value.__getstate__())
    if state is None:
        raise TypeRefusal(f"{plan.key!r} exposes pickle state that is not a dict.")
    if not plan.slots:
        if instance_dict is None:
            raise TypeRefusal(f"{plan.key!r} exposes state but has no place for it.")
        omitted = instance_dict.keys() - state.keys()
        if not omitted:
            return state, None
        # Fields the framework leaves out come back as None, as its own restore sets them.
        merged = state.copy()
        for name in sorted(omitted):
            merged[name] = None
        return merged, None
    dict_part: dict[str, Any] | None = None if instance_dict is None else dict.fromkeys(instance_dict)
    slot_part: dict[str, Any] = {}
    for name, item in state.items():
        if name in plan.slots:
            slot_part[name] = item
        elif dict_part is not None:
            dict_part[name] = item
        else:
            raise TypeRefusal(f"{plan.key!r} exposes state {name!r} that it has no place for.")
    return dict_part, slot_part


def state_dict(state: object) -> dict[str, Any] | None:
    """A ``__getstate__`` result as one dict: a dict, a (dict, slots) pair or ``None``."""
    if state is None:
        return {}
    if type(state) is tuple:
        parts = cast("tuple[object, ...]", state)
        if len(parts) == _PAIR and all(part is None or type(part) is dict for part in parts):
            merged: dict[str, Any] = {}
            for part in parts:
                if part is not None:
                    merged.update(cast("dict[str, Any]", part))
            return merged
        return None
    return cast("dict[str, Any]", state) if type(state) is dict else None


def pydantic_slots(plan: ClassPlan, slots: dict[str, Any]) -> dict[str, Any]:
    """Vet a model's extras, private attributes and fields set; leave out unset private ones.

    Private attributes never set are left out, as pydantic's own pickling does.
    """
    private: object = slots.get(PYDANTIC_PRIVATE)
    if type(private) is dict and private:
        values = cast("dict[str, object]", private)
        slots = dict(slots)
        slots[PYDANTIC_PRIVATE] = {
            name: item for name, item in values.items() if type(item).__name__ != "PydanticUndefinedType"
        }
    require_pydantic_slots(plan, slots, _live_fields_set_names)
    return slots


def _live_fields_set_names(held: object) -> tuple[object, ...] | None:
    # model_construct keeps a frozenset it is given; pydantic itself makes sets.
    if type(held) is set or type(held) is frozenset:
        return tuple(cast("Iterable[object]", held))
    return None
