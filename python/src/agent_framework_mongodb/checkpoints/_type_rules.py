"""Type rules shared by the canonical form, the controlled pickler and the restricted loader.

Which classes belong to Agent Framework, which override pickle hooks, which are mappings or
carry built-in state: every layer of the codec must answer these questions identically.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, cast

__all__ = [
    "PICKLE_HOOKS",
    "has_builtin_base",
    "is_enum_class",
    "is_framework_type",
    "is_mapping_class",
    "pickle_hook_overrides",
    "slot_names",
    "type_key",
]

PICKLE_HOOKS: Final[tuple[str, ...]] = (
    "__reduce__",
    "__reduce_ex__",
    "__getstate__",
    "__setstate__",
    "__getnewargs__",
    "__getnewargs_ex__",
)
"""Methods through which a class could run its own code while being pickled or unpickled."""

_HEAPTYPE: Final = 1 << 9


def type_key(cls: type) -> str:
    """Return the ``"module:qualname"`` identity of ``cls``, as used by ``allowed_checkpoint_types``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def is_framework_type(cls: type) -> bool:
    """Whether ``cls`` is defined in Agent Framework Core (``agent_framework`` or a submodule)."""
    module = cls.__module__
    return module == "agent_framework" or module.startswith("agent_framework.")


def pickle_hook_overrides(cls: type) -> tuple[str, ...]:
    """Return the pickle hooks ``cls`` (or an application base) overrides.

    Every object has ``__reduce_ex__`` (and, on Python 3.11+, ``__getstate__``), so presence says
    nothing: what matters is who defines the hook. Definitions from ``object``, built-in types,
    the ``enum`` module (the default enum reduction) and the ``__getstate__``/``__setstate__``
    pair that ``dataclasses`` generates for frozen slotted dataclasses are defaults: they run only
    standard-library code and record nothing but the object's fields.
    """
    found: list[str] = []
    for name in PICKLE_HOOKS:
        for klass in cls.__mro__:
            hook = klass.__dict__.get(name)
            if hook is not None:
                if not _is_default_hook(klass, hook):
                    found.append(name)
                break
    return tuple(found)


def _is_default_hook(owner: type, hook: object) -> bool:
    if owner is object or owner.__module__ in ("builtins", "enum"):
        return True
    return getattr(hook, "__module__", None) == "dataclasses" and getattr(hook, "__qualname__", "") in (
        "_dataclass_getstate",
        "_dataclass_setstate",
    )


def slot_names(cls: type) -> tuple[str, ...]:
    names: list[str] = []
    for klass in cls.__mro__:
        declared = klass.__dict__.get("__slots__", ())
        for declared_name in (declared,) if isinstance(declared, str) else cast("tuple[str, ...]", declared):
            if declared_name in ("__dict__", "__weakref__"):
                continue
            if declared_name.startswith("__") and not declared_name.endswith("__"):
                # Private slot names are stored mangled, exactly as pickle looks them up.
                names.append(f"_{klass.__name__.lstrip('_')}{declared_name}")
            else:
                names.append(declared_name)
    return tuple(names)


def is_mapping_class(cls: type) -> bool:
    """Whether ``cls`` is ``dict``, a dict subclass or any other mapping (ABC-registered included)."""
    return issubclass(cls, (dict, Mapping))


def has_builtin_base(cls: type) -> bool:
    """Whether a base of ``cls`` other than ``object`` is implemented in C (a built-in type).

    Such bases (list, int, Exception, ...) keep state outside ``__dict__`` and slots, which
    neither the canonical form nor default pickling of plain objects would capture.
    """
    return any(base is not object and not (base.__flags__ & _HEAPTYPE) for base in cls.__mro__)


def is_enum_class(cls: type) -> bool:
    """Whether ``cls`` is an ``enum.Enum`` class."""
    return issubclass(cls, enum.Enum)
