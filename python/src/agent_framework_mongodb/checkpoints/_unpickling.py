"""The restricted load path: which classes a stored checkpoint may name, and how it is read.

A stored payload may name only three kinds of global, and only classes:

* the standard value types of the codec (``datetime``, ``Decimal``, ``UUID``, ...),
* concrete classes defined in Agent Framework Core (``agent_framework`` and its submodules),
* application classes listed in ``allowed_checkpoint_types`` or registered with Agent Framework's
  ``register_checkpoint_type`` (see ``docs/adr/0005-framework-type-registry.md``), provided they
  use default pickling.

Anything else, including functions, modules, ``getattr`` traversal and aliases that a framework
module merely imports, fails with :class:`MongoDBMappingError` before the name is called.
"""

from __future__ import annotations

import copyreg
import functools
import importlib
import io
import pickle
import pickletools
import threading
from collections.abc import Callable, Mapping
from typing import Final, Protocol, cast

import agent_framework

from ..errors import MongoDBMappingError
from ._type_rules import is_framework_type, is_mapping_class, pickle_hook_overrides, type_key

__all__ = [
    "ALLOWED_BUILTIN_CLASSES",
    "ALLOWED_STANDARD_GLOBALS",
    "EXTENSION_REGISTRY",
    "TypePolicy",
    "framework_registered_types",
    "has_extension_registrations",
    "reject_extension_opcodes",
    "restricted_loads",
]

ALLOWED_STANDARD_GLOBALS: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        ("datetime", "date"),
        ("datetime", "datetime"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("decimal", "Decimal"),
        ("uuid", "UUID"),
    }
)
"""Globals that protocol-5 pickles of the codec's standard values refer to; all are classes."""

ALLOWED_BUILTIN_CLASSES: Final[frozenset[tuple[str, str]]] = frozenset(
    ("builtins", cls.__name__)
    for cls in (str, int, float, bool, bytes, bytearray, list, tuple, dict, set, frozenset)
)
"""The built-in value classes a checkpoint may name as class objects (a request's response type).

Their instances never go through ``find_class``: pickle writes them with dedicated opcodes. Only
a reference to the class itself (``response_type=str``) does. ``builtins:type`` stays blocked:
calling it with three arguments would create classes.
"""

_EXTENSION_OPCODES: Final = frozenset({"EXT1", "EXT2", "EXT4"})

# copyreg keeps its extension tables as module-level dicts that add_extension/remove_extension
# mutate in place (and the C pickle module holds the same objects), so binding them once is safe.
EXTENSION_REGISTRY: Final = cast("dict[tuple[str, str], int]", getattr(copyreg, "_extension_registry"))  # noqa: B009
_EXTENSION_CACHE: Final = cast("dict[int, object]", getattr(copyreg, "_extension_cache"))  # noqa: B009

_ALLOW_HINT: Final = (
    'Add "{key}" to MongoDBCheckpointStorageOptions.allowed_checkpoint_types if it is one of '
    "your application's checkpoint classes."
)


class _Registrar(Protocol):
    def __call__(self, cls: type, /) -> None: ...


class _RegistryObserver:
    """Wraps ``agent_framework.register_checkpoint_type`` to learn what gets registered.

    Agent Framework offers no public way to read its registry, so the observer records each
    registration made through the public function after this module was imported and passes the
    call on unchanged.
    """

    def __init__(self, register: _Registrar) -> None:
        self.wrapped = register
        self.keys: set[str] = set()
        self._lock = threading.Lock()
        functools.update_wrapper(self, register)

    def __call__(self, cls: type, /) -> None:
        self.wrapped(cls)
        # Recorded only after the framework accepted it, so a rejected call is not honoured here.
        with self._lock:
            self.keys.add(type_key(cls))

    def snapshot(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self.keys)


def _install_registry_observer() -> _RegistryObserver | None:
    register = cast("_Registrar | None", getattr(agent_framework, "register_checkpoint_type", None))
    if register is None:
        return None  # Agent Framework Core < 1.14 has no registry; only the option applies.
    if isinstance(register, _RegistryObserver):
        return register
    observer = _RegistryObserver(register)
    setattr(agent_framework, "register_checkpoint_type", observer)  # noqa: B010
    return observer


_OBSERVER: Final = _install_registry_observer()


def framework_registered_types() -> frozenset[str]:
    """Return the type keys registered through ``agent_framework.register_checkpoint_type``."""
    return _OBSERVER.snapshot() if _OBSERVER is not None else frozenset()


class TypePolicy:
    """Decides which classes a checkpoint may contain; shared by the pickler and the unpickler."""

    __slots__ = ("_allowed", "_resolved")

    def __init__(self, allowed_checkpoint_types: tuple[str, ...]) -> None:
        self._allowed: frozenset[str] = frozenset(allowed_checkpoint_types)
        self._resolved: dict[tuple[str, str], type] = {}

    def allows_application_type(self, key: str) -> bool:
        return key in self._allowed or key in framework_registered_types()

    def resolve(self, module: str, name: str) -> type:
        """Return the class a payload names, or raise :class:`MongoDBMappingError`."""
        cached = self._resolved.get((module, name))
        if cached is not None:
            return cached
        key = f"{module}:{name}"
        if (module, name) in ALLOWED_STANDARD_GLOBALS or (module, name) in ALLOWED_BUILTIN_CLASSES:
            resolved = _import_class(module, name)
        elif module == "agent_framework" or module.startswith("agent_framework."):
            resolved = _import_class(module, name)
            if issubclass(resolved, type):
                raise _blocked(key, "it is a metaclass")
        elif self.allows_application_type(key):
            resolved = _import_class(module, name)
            _check_application_class(resolved, key)
        else:
            raise _blocked(key, "it is neither a standard value type, an Agent Framework class nor allowed")
        self._resolved[(module, name)] = resolved
        return resolved


def _import_class(module_name: str, qualname: str) -> type:
    key = f"{module_name}:{qualname}"
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise MongoDBMappingError(
            f"Checkpoint payload names {key!r}, whose module cannot be imported."
        ) from error
    # Walk the dotted name through class namespaces only: no getattr (descriptors, module
    # __getattr__), no modules or functions along the way.
    namespace: Mapping[str, object] = vars(module)
    resolved: object = None
    for part in qualname.split("."):
        resolved = namespace.get(part)
        if not isinstance(resolved, type):
            raise _blocked(key, "it is not a class")
        namespace = resolved.__dict__
    cls = cast(type, resolved)
    # An import alias (a framework module importing subprocess.Popen, say) has another identity.
    if cls.__module__ != module_name or cls.__qualname__ != qualname:
        raise _blocked(key, f"it is an alias of {type_key(cls)!r}")
    return cls


def _check_application_class(cls: type, key: str) -> None:
    if is_mapping_class(cls):
        raise _blocked(key, "mapping classes are never allowed; store a plain dict")
    if is_framework_type(cls):
        return
    hooks = pickle_hook_overrides(cls)
    if hooks:
        raise _blocked(key, f"it overrides pickle hooks ({', '.join(hooks)}); allowed classes get no hooks")
    if issubclass(cls, type):
        raise _blocked(key, "it is a metaclass")


def _blocked(key: str, reason: str) -> MongoDBMappingError:
    return MongoDBMappingError(
        f"Checkpoint payload names {key!r}, which the restricted loader blocks: {reason}. "
        + _ALLOW_HINT.format(key=key)
    )


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, payload: bytes, find: Callable[[str, str], type]) -> None:
        super().__init__(io.BytesIO(payload))
        self._find = find

    def find_class(self, module: str, name: str, /) -> type:
        return self._find(module, name)


def has_extension_registrations() -> bool:
    """Whether any ``copyreg`` extension code is registered or cached in this process."""
    return bool(EXTENSION_REGISTRY) or bool(_EXTENSION_CACHE)


def reject_extension_opcodes(payload: bytes) -> None:
    """Raise if ``payload`` uses EXT1/EXT2/EXT4, which can resolve a class without ``find_class``."""
    try:
        uses_extensions = any(
            opcode.name in _EXTENSION_OPCODES for opcode, _, _ in pickletools.genops(payload)
        )
    except Exception as error:
        raise MongoDBMappingError("Checkpoint payload is not a well-formed pickle.") from error
    if uses_extensions:
        raise MongoDBMappingError(
            "Checkpoint payload uses a copyreg extension code; the restricted loader refuses "
            "extension codes because they bypass its class checks."
        )


def restricted_loads(payload: bytes, policy: TypePolicy) -> object:
    """Unpickle ``payload`` resolving globals only through ``policy``; no other checks."""
    return _RestrictedUnpickler(payload, policy.resolve).load()
