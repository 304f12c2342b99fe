"""The shape of ``WorkflowCheckpoint.to_dict()`` that both directions of the codec insist on.

A save refuses a public dictionary of another shape, and a load refuses a payload whose top
level is not one, before any object is built; so a load can only return what a save could store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, cast

from agent_framework import WorkflowCheckpoint

__all__ = ["CHECKPOINT_FIELDS", "SUPPORTED_PAYLOAD_VERSIONS", "shape_problem"]

SUPPORTED_PAYLOAD_VERSIONS: Final = frozenset({"1.0"})
"""``WorkflowCheckpoint.version`` values this build can restore."""

CHECKPOINT_FIELDS: Final[frozenset[str]] = frozenset(
    field.name for field in dataclasses.fields(WorkflowCheckpoint)
)
"""The public fields of the installed framework's ``WorkflowCheckpoint``."""

_FIELD_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    "workflow_name": (str,),
    "graph_signature_hash": (str,),
    "checkpoint_id": (str,),
    "previous_checkpoint_id": (str, type(None)),
    "timestamp": (str,),
    "messages": (dict,),
    "state": (dict,),
    "pending_request_info_events": (dict,),
    "iteration_count": (int,),
    "metadata": (dict,),
    "version": (str,),
}
"""Expected exact types of the fields this build knows; fields a newer framework adds are free."""


def shape_problem(public: Mapping[str, Any], *, tree: bool = False) -> str | None:
    """Return what is wrong with a public checkpoint dictionary, or ``None`` if nothing is.

    With ``tree``, ``public`` is a stored tree's top level, where a dict with a key that is not
    a ``str`` is still an ``"m"`` record.
    """
    if CHECKPOINT_FIELDS.symmetric_difference(public):
        missing = sorted(CHECKPOINT_FIELDS - public.keys())
        extra = sorted(public.keys() - CHECKPOINT_FIELDS, key=repr)
        return f"its fields differ from WorkflowCheckpoint's (missing {missing}, unexpected {extra})"
    for name, types in _FIELD_TYPES.items():
        value = public.get(name)
        if (
            name in public
            and type(value) not in types
            and not (tree and dict in types and _is_mapping_record(value))
        ):
            return f"its {name!r} is a {type(public[name]).__name__}"
    if public.get("version") not in SUPPORTED_PAYLOAD_VERSIONS:
        return (
            f"its version {public.get('version')!r} is not one this build restores "
            f"({', '.join(sorted(SUPPORTED_PAYLOAD_VERSIONS))})"
        )
    return None


def _is_mapping_record(value: object) -> bool:
    if type(value) is not tuple:
        return False
    record = cast("tuple[object, ...]", value)
    return len(record) > 0 and record[0] == "m"
