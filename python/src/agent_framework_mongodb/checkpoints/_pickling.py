"""The controlled save path: a pickler that only writes what the restricted loader can read.

``pickle.dumps`` consults process-global state that application code can change: reducers in
``copyreg.dispatch_table`` and extension codes in the ``copyreg`` extension registry. The
controlled pickler has its own empty dispatch table and vets every non-builtin object *before*
pickle looks up any of its hooks; the extension walk rejects registered types before pickling.
"""

from __future__ import annotations

import enum
import io
import pickle
from typing import Any, Final, cast

from ..errors import MongoDBMappingError, MongoDBSerializationError
from ._type_rules import (
    has_builtin_base,
    is_framework_type,
    is_mapping_class,
    pickle_hook_overrides,
    type_key,
)
from ._unpickling import ALLOWED_STANDARD_GLOBALS, EXTENSION_REGISTRY, TypePolicy

__all__ = ["PICKLE_PROTOCOL", "controlled_dumps", "reject_extension_types"]

PICKLE_PROTOCOL: Final = 5

_STANDARD_TYPES: Final[frozenset[str]] = frozenset(
    f"{module}:{name}" for module, name in ALLOWED_STANDARD_GLOBALS
)

# None, bool, int, float, str and bytes never reach reducer_override (pickle writes them itself),
# nor do exact dict, list, tuple, set, frozenset and bytearray.


class _ControlledPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, policy: TypePolicy) -> None:
        super().__init__(file, protocol=PICKLE_PROTOCOL)
        # A private, empty table: copyreg.dispatch_table (process-global, writable by any
        # import) is never consulted.
        self.dispatch_table = {}
        self._policy = policy
        self._vetted: set[type] = set()

    def reducer_override(self, obj: object) -> Any:
        # Called before pickle looks up __reduce_ex__/__reduce__/__getstate__ on obj, so a
        # rejected class never gets to run a hook.
        if isinstance(obj, type):
            if obj not in self._vetted:
                _vet_class_reference(obj, self._policy)
                self._vetted.add(obj)
            return NotImplemented
        cls = type(obj)
        if cls not in self._vetted:
            _vet_class(cls, self._policy)
            self._vetted.add(cls)
        return NotImplemented


def _vet_class(cls: type, policy: TypePolicy) -> None:
    key = type_key(cls)
    if key in _STANDARD_TYPES:
        return
    if is_mapping_class(cls):
        raise MongoDBSerializationError(
            f"Checkpoint state contains a {key!r} mapping; only exact dict is supported."
        )
    if is_framework_type(cls):
        return
    hooks = pickle_hook_overrides(cls)
    if hooks:
        raise MongoDBSerializationError(
            f"Class {key!r} overrides pickle hooks ({', '.join(hooks)}); checkpoint classes must use "
            "default pickling, even when listed in allowed_checkpoint_types."
        )
    if not _is_enum(cls) and has_builtin_base(cls):
        raise MongoDBMappingError(f"Checkpoint state contains a value of unsupported type {key!r}.")
    if not policy.allows_application_type(key):
        raise MongoDBSerializationError(
            f"Checkpoint state contains an instance of {key!r}, which could not be loaded again: add "
            f'"{key}" to MongoDBCheckpointStorageOptions.allowed_checkpoint_types (or register it '
            "with agent_framework.register_checkpoint_type)."
        )


def _vet_class_reference(cls: type, policy: TypePolicy) -> None:
    """A class object is pickled by name: accept it only if the loader resolves that name to it."""
    key = type_key(cls)
    try:
        resolved = policy.resolve(cls.__module__, cls.__qualname__)
    except MongoDBMappingError as error:
        raise MongoDBSerializationError(
            f"Checkpoint state refers to class {key!r}, which could not be loaded again: {error}"
        ) from error
    if resolved is not cls:
        raise MongoDBSerializationError(
            f"Checkpoint state refers to class {key!r}, but that name loads another class."
        )


def _is_enum(cls: type) -> bool:
    return issubclass(cls, enum.Enum)


def controlled_dumps(value: object, policy: TypePolicy) -> bytes:
    """Pickle ``value`` with protocol 5, ignoring global reducers and vetting every class."""
    buffer = io.BytesIO()
    _ControlledPickler(buffer, policy).dump(value)
    return buffer.getvalue()


def reject_extension_types(value: object) -> None:
    """Raise if any value in the graph has a type registered with ``copyreg.add_extension``.

    Pickle writes such a class as a process-local EXT code instead of its name, and the loading
    process may map that code to something else. Only called when the registry is not empty.
    """
    registered = set(EXTENSION_REGISTRY)
    seen: set[int] = set()
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        cls = type(item)
        if (cls.__module__, cls.__qualname__) in registered or (cls.__module__, cls.__name__) in registered:
            raise MongoDBSerializationError(
                f"Checkpoint state contains an instance of {type_key(cls)!r}, which is registered with "
                "copyreg.add_extension; extension codes are process-local. Remove the registration "
                "(copyreg.remove_extension) or migrate the value to another type."
            )
        pending.extend(_children(item))


def _children(item: object) -> list[object]:
    cls = type(item)
    if cls is dict:
        mapping = cast("dict[object, object]", item)
        return [*mapping.keys(), *mapping.values()]
    if cls in (list, tuple, set, frozenset):
        return list(cast("list[object]", item))
    if isinstance(item, (str, bytes, bytearray, int, float, type)) or item is None:
        return []
    if isinstance(item, enum.Enum):
        return [item.value]
    children: list[object] = []
    instance_dict = getattr(item, "__dict__", None)
    if isinstance(instance_dict, dict):
        state = cast("dict[object, object]", instance_dict)
        children.extend(state.values())
    for klass in cls.__mro__:
        declared = klass.__dict__.get("__slots__", ())
        for declared_name in (declared,) if isinstance(declared, str) else cast("tuple[str, ...]", declared):
            name = declared_name
            if name.startswith("__") and not name.endswith("__"):
                name = f"_{klass.__name__.lstrip('_')}{name}"
            if name not in ("__dict__", "__weakref__") and hasattr(item, name):
                children.append(getattr(item, name))
    if is_framework_type(cls) and "__getstate__" in pickle_hook_overrides(cls):
        get_state = getattr(item, "__getstate__")  # noqa: B009
        children.append(get_state())
    return children
