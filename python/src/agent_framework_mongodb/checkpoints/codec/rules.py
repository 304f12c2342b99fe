"""Which classes a checkpoint may hold, and how the codec reads and restores their state.

Both directions of the codec ask one :class:`TypeResolver` about a class *by its stored name*,
so what a save may write and what a load may rebuild cannot drift apart: a save looks up the
name of every class it meets and insists that the name leads back to the same class.

Resolving a name never runs code of the class: modules are imported only for names the
application listed, namespaces are read through ``__dict__`` (no ``getattr``, no module
``__getattr__``), and a class's metaclass is checked before any attribute of the class is
touched. The resulting :class:`ClassPlan` tells the walk which descriptors hold an instance's
state, and the rebuild which descriptors to write it back through.
"""

from __future__ import annotations

import abc
import datetime as dt
import decimal
import enum
import functools
import importlib
import logging
import pathlib
import re
import sys
import types
import typing
import uuid
import weakref
import zoneinfo
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Final, cast

from .framework_registry import is_registered_with_framework

__all__ = [
    "DUCK_TYPED_NAMES",
    "FRAMEWORK_MODULE_FAMILIES",
    "KIND_ENUM",
    "KIND_NAMED_TUPLE",
    "KIND_OBJECT",
    "PYDANTIC_EXTRA",
    "PYDANTIC_FIELDS_SET",
    "PYDANTIC_PRIVATE",
    "ClassNotFound",
    "ClassPlan",
    "TypeRefusal",
    "TypeResolver",
    "all_not_found",
    "check_attribute_names",
    "check_metaclass",
    "is_framework_module",
    "is_mapping_class",
    "is_protocol_name",
    "pydantic_slot_problem",
    "require_data_under_duck_typed_names",
    "require_pydantic_slots",
    "type_key",
]

FRAMEWORK_MODULE_FAMILIES: Final[tuple[str, ...]] = (
    "agent_framework",
    "agent_framework_orchestrations",
    "openai.types",
)
"""Packages whose classes are accepted without listing: the families Agent Framework's own
restricted checkpoint decoder allows (its core, its orchestrations, the model SDK types)."""

KIND_OBJECT: Final = 1
"""A plain object, dataclass or pydantic model: state in ``__dict__`` and slots."""
KIND_ENUM: Final = 2
"""An enum member, stored by name."""
KIND_NAMED_TUPLE: Final = 3
"""A ``typing.NamedTuple`` or ``collections.namedtuple`` instance, stored by its items."""

_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_HEAPTYPE: Final = 1 << 9
_DEFAULT_STATE_MODULES: Final = frozenset({"builtins", "enum"})


class TypeRefusal(Exception):
    """A class may not be stored or rebuilt; the codec re-raises it as its own error category."""


class ClassNotFound(TypeRefusal):
    """A class name resolves to no class this process may use: not listed, or not defined by the
    installed framework. ``key`` is the name, so a caller can report every such class at once."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


LISTED_NOT_FOUND: Final = 20
"""Most class names one refusal lists; the count says how many more there were."""


def all_not_found(refusals: Mapping[str, ClassNotFound]) -> TypeRefusal:
    """One refusal naming every class of ``refusals`` (by name, in the order they were met), so a
    save or a load reports all the classes a deployment lacks at once, not one per attempt."""
    found = list(refusals.values())
    if len(found) == 1:
        return found[0]
    names = ", ".join(repr(key) for key in list(refusals)[:LISTED_NOT_FOUND])
    more = len(found) - LISTED_NOT_FOUND
    return TypeRefusal(
        f"{len(found)} classes it names are not available here: {names}"
        f"{f' and {more} more' if more > 0 else ''}. The first: {found[0]}"
    )


def type_key(cls: type) -> str:
    """Return the ``"module:qualname"`` name a checkpoint stores for ``cls``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def is_framework_module(module_name: str) -> bool:
    """Whether ``module_name`` belongs to one of :data:`FRAMEWORK_MODULE_FAMILIES`."""
    return any(
        module_name == family or module_name.startswith(family + ".") for family in FRAMEWORK_MODULE_FAMILIES
    )


@dataclass(frozen=True, slots=True, eq=False)
class ClassPlan:
    """How instances of one class are walked and rebuilt.

    Attributes:
        cls: The class.
        key: Its stored name, ``"module:qualname"``.
        kind: :data:`KIND_OBJECT`, :data:`KIND_ENUM` or :data:`KIND_NAMED_TUPLE`.
        instance_dict: The ``__dict__`` descriptor of instances, or ``None`` for slots-only
            classes; always the interpreter's own, never a property.
        slots: Slot name to its member descriptor, over the whole MRO.
        framework_state: Walk the state the framework's own ``__getstate__`` exposes (which
            leaves out runtime-only fields), instead of the raw instance dictionary.
        pydantic: A pydantic model: private attributes never set are not stored.
        hash_safe: Hashing and comparing instances runs only interpreter or standard-library
            code, so an instance may be a set member or a dict key.
        members: Enum members by name (enums only).
        field_count: Number of items (named tuples only).
        reserved: Names bound in the class or a base (``__dict__`` of the MRO, first binding
            deciding) that an instance attribute may not take: every one but the defaults of
            declared fields (dataclass and pydantic; a slot holding a field is no default),
            plain-data values (``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``) and
            ``functools.cached_property``. An instance attribute of such a name would replace
            what the class means by it (a method, a descriptor, a class, a configuration object)
            for every later lookup through the instance. Protocol names
            (:func:`is_protocol_name`) are refused whether or not the class binds them.
        private: Names of a pydantic model's declared private attributes
            (``__private_attributes__``); the only keys ``__pydantic_private__`` may hold.
        callable_instances: A class of the MRO defines ``__call__``, so an instance is callable
            (read from the classes' ``__dict__``s, nothing called): one may not be stored under a
            name of :data:`DUCK_TYPED_NAMES`.
        clean_names: Attribute-name tuples already found clean, so a checkpoint of thousands of
            alike objects checks each layout once (:func:`check_attribute_names`), each with the
            names of :data:`DUCK_TYPED_NAMES` among them.
    """

    cls: type
    key: str
    kind: int
    instance_dict: types.GetSetDescriptorType | None = None
    slots: Mapping[str, types.MemberDescriptorType] = field(
        default_factory=dict[str, types.MemberDescriptorType]
    )
    framework_state: bool = False
    pydantic: bool = False
    hash_safe: bool = False
    members: Mapping[str, enum.Enum] = field(default_factory=dict[str, enum.Enum])
    field_count: int = 0
    reserved: frozenset[str] = frozenset()
    private: frozenset[str] = frozenset()
    callable_instances: bool = False
    clean_names: dict[tuple[str, ...], tuple[str, ...]] = field(
        default_factory=dict[tuple[str, ...], tuple[str, ...]]
    )


class TypeResolver:
    """Decides, by stored name, which classes a checkpoint may hold; one per codec.

    Args:
        allowed_keys: Application classes (``"module:qualname"``) the application listed. Only
            these names may cause an import.

    Names are accepted from three sources: the framework families (whose modules must
    already be imported), the application's list, and classes registered with
    ``agent_framework.register_checkpoint_type`` (whose modules are imported by definition).
    Every other name is refused without importing anything.
    """

    __slots__ = ("_allowed", "_plans", "_references", "_warned_main")

    def __init__(self, allowed_keys: tuple[str, ...]) -> None:
        self._allowed = frozenset(allowed_keys)
        self._plans: dict[str, ClassPlan] = {}
        self._references: dict[str, type] = {}
        self._warned_main: set[str] = set()  # a class of the running script is warned of once

    def plan(self, key: str) -> ClassPlan:
        """Return the plan for the class stored as ``key``.

        Raises:
            TypeRefusal: The name is not allowed, does not resolve to a class, or the class's
                state cannot be stored and rebuilt without running its code.
        """
        cached = self._plans.get(key)
        if cached is not None:
            return cached
        plan = _plan_for(self._resolve(key), key)
        self._plans[key] = plan
        return plan

    def known_plan(self, key: str) -> ClassPlan | None:
        """The plan already made for ``key``, or ``None``; never resolves or imports anything."""
        return self._plans.get(key)

    def plan_of(self, cls: type) -> ClassPlan:
        """Return the plan for a live instance's class; its name must resolve back to it.

        Raises:
            TypeRefusal: As :meth:`plan`, or the name leads to another class.
        """
        key = _nameable_key(cls)
        plan = self.plan(key)
        if plan.cls is not cls:
            raise TypeRefusal(f"Class {key!r} is not the class its name resolves to when loading.")
        if key.startswith(_MAIN + ":") and key not in self._warned_main:
            self._warned_main.add(key)
            _LOGGER.warning("A checkpoint holds %r, which may load nowhere else.%s", key, _main_advice(_MAIN))
        return plan

    def reference(self, key: str) -> type:
        """Return the class a stored class reference names (a request's response type, say).

        Raises:
            TypeRefusal: The name is not a standard value class and not resolvable as
                :meth:`plan` would resolve it.
        """
        cached = self._references.get(key)
        if cached is not None:
            return cached
        standard = STANDARD_REFERENCES.get(key)
        resolved = standard if standard is not None else self._resolve(key)
        if _is_metaclass(resolved):
            raise TypeRefusal(f"Class reference {key!r} names a metaclass.")
        self._references[key] = resolved
        return resolved

    def check_allowed(self) -> None:
        """Raise unless every listed name leads to a class, importing the listed modules.

        Listing a name is consent to import its module, so a storage can run this when it is
        built and report a misspelt entry then, not at the first save that meets the class.
        It answers only whether the name leads to a class; whether the class's state can be
        stored is still decided per class, when a save or load meets it. Framework names are
        skipped: they resolve by the framework's rules, never by the list.

        Raises:
            TypeRefusal: The first entry that leads to no class, saying why.
        """
        for key in sorted(self._allowed):
            module_name, _, qualname = key.partition(":")
            if is_framework_module(module_name):
                continue
            reason = _import_problem(module_name) or _class_problem(module_name, qualname)
            if reason is not None:
                raise TypeRefusal(f"allowed_checkpoint_types entry {key!r}: {reason}.")

    def reference_key(self, cls: type) -> str:
        """Return the stored name of a class object; it must resolve back to the same class.

        Raises:
            TypeRefusal: As :meth:`reference`, or the name leads to another class.
        """
        standard = _STANDARD_KEYS.get(id(cls))
        if standard is not None:
            return standard
        key = _nameable_key(cls)
        if self.reference(key) is not cls:
            raise TypeRefusal(f"Class {key!r} is not the class its name resolves to when loading.")
        return key

    def _resolve(self, key: str) -> type:
        module_name, _, qualname = key.partition(":")
        if not _NAME.fullmatch(module_name) or not _NAME.fullmatch(qualname):
            raise TypeRefusal(f"{key!r} is not a class name of the form 'module:qualname'.")
        if is_framework_module(module_name):
            # Framework names resolve only in modules already imported (the codec imports the
            # framework's own when it is built: framework_modules.py); a payload never makes
            # this process import a module.
            cls = _find_loaded_class(module_name, qualname)
            if cls is None:
                raise ClassNotFound(
                    key,
                    f"{key!r} is not a class of the installed Agent Framework: the checkpoint was written "
                    "by a version or a framework package that defines it. Install that version or package "
                    "(and import the package, if it is not Agent Framework's own) before loading.",
                )
            return cls
        if key in self._allowed:
            try:
                importlib.import_module(module_name)
            except Exception as error:
                raise TypeRefusal(f"{key!r} is allowed, but its module cannot be imported.") from error
            cls = _find_loaded_class(module_name, qualname)
            if cls is None:
                raise TypeRefusal(
                    f"{key!r} is allowed, but it does not name a class.{_main_advice(module_name)}"
                )
            return cls
        # A registered class was handed to the framework as an object, so its module is loaded;
        # nothing is imported to find out.
        cls = _find_loaded_class(module_name, qualname)
        if cls is not None and is_registered_with_framework(cls):
            return cls
        if module_name == _MAIN:
            raise ClassNotFound(key, f"{key!r} is not allowed.{_main_advice(module_name)}")
        raise ClassNotFound(
            key,
            f"{key!r} is not an Agent Framework class and is not allowed. Add it to "
            "MongoDBCheckpointStorageOptions.allowed_checkpoint_types (or register it with "
            "agent_framework.register_checkpoint_type) if it is one of your checkpoint classes.",
        )


_MAIN: Final = "__main__"
_LOGGER: Final = logging.getLogger("agent_framework_mongodb")


def _main_advice(module_name: str) -> str:
    """Why a class of the running script cannot be named reliably, for a refusal's message."""
    if module_name != _MAIN:
        return ""
    return (
        " A class defined in the script Python was started with is named '__main__:...', and that name "
        "means another module in every other entry point (a worker started differently, a test, the CLI), "
        "so a checkpoint holding it loads nowhere else. Move the class into a module both import, and list "
        "it as 'module:QualName' (or the class itself) in allowed_checkpoint_types."
    )


def _nameable_key(cls: type) -> str:
    key = type_key(cls)
    if "<locals>" in key:
        raise TypeRefusal(f"Class {key!r} is defined inside a function and cannot be named on load.")
    return key


def _allowed_metaclasses() -> frozenset[type]:
    metaclasses: set[type] = {type, abc.ABCMeta, enum.EnumMeta, type(typing.Protocol)}
    pydantic = sys.modules.get("pydantic")
    base_model = getattr(pydantic, "BaseModel", None) if pydantic is not None else None
    if isinstance(base_model, type):
        metaclasses.add(type(base_model))
    return frozenset(metaclasses)


def check_metaclass(cls: type) -> None:
    """Refuse a class whose metaclass is not one the codec allows, before anything touches it.

    Hashing, comparing or reading a name of a class runs its metaclass's code; the save walk
    asks this first, so only the allowed metaclasses' (the interpreter's, abc's, enum's, typing's,
    pydantic's) ever runs. Both names are read through ``type``'s own descriptors.

    Raises:
        TypeRefusal: The class's metaclass is another one.
    """
    metaclass = type(cls)
    if metaclass is type or any(metaclass is allowed for allowed in _allowed_metaclasses()):
        return
    raise TypeRefusal(
        f"{_TYPE_MODULE.__get__(cls)}:{_TYPE_QUALNAME.__get__(cls)} has the metaclass "
        f"{_TYPE_MODULE.__get__(metaclass)}:{_TYPE_QUALNAME.__get__(metaclass)}; only classes of type, "
        "abc.ABCMeta, enum.EnumMeta, typing's protocol metaclass or pydantic's are stored"
    )


def _is_metaclass(cls: type) -> bool:
    return issubclass(cls, type)


def _is_class(value: object) -> bool:
    # issubclass on type(value) never consults the value itself (isinstance may read __class__).
    return issubclass(type(value), type)


_TYPE_NAMESPACE: Final = cast("types.GetSetDescriptorType", type.__dict__["__dict__"])
_TYPE_MODULE: Final = cast("types.GetSetDescriptorType", type.__dict__["__module__"])
_TYPE_QUALNAME: Final = cast("types.GetSetDescriptorType", type.__dict__["__qualname__"])
"""``type``'s own descriptors: read through them, a class's namespace and names never pass
through its metaclass's attribute hooks."""


def _import_problem(module_name: str) -> str | None:
    """Import a listed module; why it cannot be imported, or ``None``."""
    try:
        importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            return f"module {module_name!r} not found"
        return f"importing module {module_name!r} failed (ModuleNotFoundError)"
    except Exception as error:
        return f"importing module {module_name!r} failed ({type(error).__name__})"
    return None


def _class_problem(module_name: str, qualname: str) -> str | None:
    """Why ``qualname`` does not name a class defined in an imported module, or ``None``.

    Walks namespaces only, through ``type``'s own descriptors, so no metaclass code runs.
    """
    namespace: Mapping[str, object] = sys.modules[module_name].__dict__
    resolved: object = None
    for part in qualname.split("."):
        if part not in namespace:
            return f"module {module_name!r} has no attribute {part!r}"
        resolved = namespace[part]
        if not _is_class(resolved):
            return f"{part!r} is a {type(resolved).__name__}, not a class"
        namespace = cast("Mapping[str, object]", _TYPE_NAMESPACE.__get__(resolved))
    if _TYPE_MODULE.__get__(resolved) != module_name or _TYPE_QUALNAME.__get__(resolved) != qualname:
        return "the class is defined elsewhere and only imported there; name it where it is defined"
    return None


def _find_loaded_class(module_name: str, qualname: str) -> type | None:
    """Walk ``qualname`` through an imported module's namespace and class ``__dict__``s only."""
    module = sys.modules.get(module_name)
    if module is None:
        return None
    metaclasses = _allowed_metaclasses()
    namespace: Mapping[str, object] = module.__dict__
    resolved: object = None
    for part in qualname.split("."):
        resolved = namespace.get(part)
        # The metaclass is checked before any attribute of the class is read, so a metaclass
        # with its own attribute hooks never runs.
        if not _is_class(resolved) or type(resolved) not in metaclasses:
            return None
        namespace = typing.cast(type, resolved).__dict__
    cls = typing.cast(type, resolved)
    # An import alias (a framework module importing subprocess.Popen, say) has another identity.
    if cls.__module__ != module_name or cls.__qualname__ != qualname:
        return None
    return cls


def _plan_for(cls: type, key: str) -> ClassPlan:
    # The mapping guard comes first: no enum, tuple or object rule may admit a mapping.
    if is_mapping_class(cls):
        raise TypeRefusal(
            f"{key!r} is a mapping class; only exact dict is stored. Convert it to a plain dict first."
        )
    if _is_enum_class(cls):
        return _enum_plan(cls, key)
    if _is_path_class(cls):
        # A path subclass would be walked as an object, caches and all; the exact classes are
        # stored by their text instead.
        raise TypeRefusal(f"{key!r} derives from a pathlib class; store a pathlib path itself.")
    if _is_named_tuple(cls):
        return ClassPlan(
            cls=cls,
            key=key,
            kind=KIND_NAMED_TUPLE,
            hash_safe=not {"__hash__", "__eq__"} & cls.__dict__.keys(),
            callable_instances=_defines_call(cls),
            field_count=len(typing.cast("tuple[str, ...]", cls.__dict__["_fields"])),
        )
    if _has_builtin_base(cls):
        raise TypeRefusal(
            f"{key!r} derives from a built-in type, whose state the codec cannot see; store its "
            "contents in a plain class or dataclass instead."
        )
    if getattr(cls, "__abstractmethods__", None):
        # object.__new__ refuses abstract classes, and no instance of one can exist to be saved.
        raise TypeRefusal(f"{key!r} is abstract; it has no instances to store.")
    pydantic = _is_pydantic_model(cls)
    return ClassPlan(
        cls=cls,
        key=key,
        kind=KIND_OBJECT,
        instance_dict=_instance_dict_descriptor(cls, key),
        reserved=_reserved_names(cls, pydantic),
        private=_private_names(cls) if pydantic else frozenset(),
        slots=_slot_descriptors(cls, key),
        callable_instances=_defines_call(cls),
        framework_state=is_framework_module(cls.__module__) and not pydantic and _defines_getstate(cls),
        pydantic=pydantic,
    )


def is_mapping_class(cls: type) -> bool:
    """Whether ``cls`` is ``dict``, a dict subclass or any other mapping, ABC-registered included.

    A mapping here is a class whose MRO holds ``dict`` or ``collections.abc.Mapping``, or a class
    registered (``register``) with ``Mapping``, with an ABC deriving from it, or with an ABC
    registered with one of those. It is decided from the classes' ``__mro__`` and the ABCs'
    registries only, read through ``type``'s own descriptors and the ``abc`` module's registry
    dump, so no ``__subclasshook__``, ``__subclasscheck__``, ``__instancecheck__`` or other
    metaclass code runs, on save or on load: ``issubclass(cls, Mapping)`` would call the hooks of
    every ABC deriving from ``Mapping`` in the process, with a class a payload chose. What such a
    hook alone would call a mapping is not one here.
    """
    registered = _registered_mappings()
    for base in cast("tuple[type, ...]", _TYPE_MRO.__get__(cls)):
        if base is dict or base is Mapping or registered.get(id(base)) is base:
            return True
    return False


_TYPE_MRO: Final = cast("types.GetSetDescriptorType", type.__dict__["__mro__"])
_TYPE_SUBCLASSES: Final = cast("Callable[[type], list[type]]", type.__dict__["__subclasses__"])
_ABC_DUMP: Final = cast(
    "Callable[[object], tuple[set[weakref.ref[type]], object, object, object]] | None",
    getattr(sys.modules.get("_abc"), "_get_dump", None),
)
_registered_cache: list[tuple[int, dict[int, type]]] = []


def _registered_mappings() -> dict[int, type]:
    """Classes registered as mappings (directly or through an ABC registered or derived), by ``id``.

    Remade when ``abc.get_cache_token()`` changes, which every ``register`` call does; a class
    deriving from one of them is found by its MRO. Held strongly until then, so an ``id`` cannot
    name another class meanwhile.
    """
    token = cast(int, abc.get_cache_token())
    if _registered_cache and _registered_cache[0][0] == token:
        return _registered_cache[0][1]
    found: dict[int, type] = {}
    seen: set[int] = set()
    pending: list[type] = [Mapping]
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        namespace = cast("Mapping[str, object]", _TYPE_NAMESPACE.__get__(node))
        if "_abc_impl" not in namespace and "_abc_registry" not in namespace:
            continue  # not an ABC: what derives from it is found by its MRO
        for registered in _abc_registry(namespace):
            found[id(registered)] = registered
            pending.append(registered)
        # ABCs deriving from an ABC may have registries of their own.
        pending.extend(_TYPE_SUBCLASSES(node))
    _registered_cache[:] = [(token, found)]
    return found


def _abc_registry(namespace: Mapping[str, object]) -> list[type]:
    """The classes an ABC's registry holds, read from its namespace: the C ``abc``'s data goes to
    its dump function on a stand-in object, never through the ABC's own attribute lookup."""
    impl = namespace.get("_abc_impl")
    classes: list[object] = []
    if impl is not None and _ABC_DUMP is not None:
        try:
            references, *_ = _ABC_DUMP(types.SimpleNamespace(_abc_impl=impl))
        except TypeError:  # a class attribute of that name that is not abc's data: no registry
            return []
        classes.extend(reference() for reference in references)
    else:  # the pure-Python abc (_py_abc) keeps a WeakSet
        registry = namespace.get("_abc_registry")
        if registry is not None:
            classes.extend(cast("Iterable[object]", registry))
    return [cast(type, item) for item in classes if _is_class(item)]


def _is_path_class(cls: type) -> bool:
    return issubclass(cls, pathlib.PurePath)


def _is_enum_class(cls: type) -> bool:
    return issubclass(cls, enum.Enum)


def _enum_plan(cls: type, key: str) -> ClassPlan:
    if type(cls) is not enum.EnumMeta:
        raise TypeRefusal(f"Enum {key!r} has a custom metaclass; only standard enums are stored.")
    members = dict(typing.cast("type[enum.Enum]", cls).__members__)
    return ClassPlan(
        cls=cls,
        key=key,
        kind=KIND_ENUM,
        hash_safe=_defined_by_standard_library(cls, "__hash__")
        and _defined_by_standard_library(cls, "__eq__"),
        callable_instances=_defines_call(cls),
        members=members,
    )


def _is_named_tuple(cls: type) -> bool:
    return (
        cls.__bases__ == (tuple,)
        and type(cls.__dict__.get("_fields")) is tuple
        and cls.__dict__.get("__slots__") == ()
    )


def _has_builtin_base(cls: type) -> bool:
    """Whether a base other than ``object`` is implemented in C and so keeps hidden state."""
    return any(base is not object and not (base.__flags__ & _HEAPTYPE) for base in cls.__mro__)


def _is_pydantic_model(cls: type) -> bool:
    pydantic = sys.modules.get("pydantic")
    base_model = getattr(pydantic, "BaseModel", None) if pydantic is not None else None
    return base_model is not None and base_model in cls.__mro__


def _mro_lookup(cls: type, name: str) -> tuple[type, object] | None:
    for klass in cls.__mro__:
        namespace = klass.__dict__
        if name in namespace:
            return klass, namespace[name]
    return None


def _instance_dict_descriptor(cls: type, key: str) -> types.GetSetDescriptorType | None:
    found = _mro_lookup(cls, "__dict__")
    if found is None:
        return None
    descriptor = found[1]
    if type(descriptor) is not types.GetSetDescriptorType:
        # A __dict__ property would hide the real instance state from the walk.
        raise TypeRefusal(f"Class {key!r} replaces __dict__; its state cannot be read faithfully.")
    return descriptor


def _slot_descriptors(cls: type, key: str) -> dict[str, types.MemberDescriptorType]:
    """Every slot of the MRO, by its real (already mangled) attribute name."""
    slots: dict[str, types.MemberDescriptorType] = {}
    for klass in cls.__mro__:
        for name, attribute in klass.__dict__.items():
            if type(attribute) is types.MemberDescriptorType and attribute.__objclass__ is klass:
                if name in slots:
                    raise TypeRefusal(f"Class {key!r} declares slot {name!r} twice in its hierarchy.")
                slots[name] = attribute
    return slots


_PLAIN_DATA: Final = frozenset({type(None), bool, int, float, str, bytes})
"""Class attributes an instance attribute may shadow: values, not behaviour (the class-level
defaults of a plain class). Containers are not among them: a class-level set or dict is the
class's configuration (``_PICKLE_OMIT_FIELDS``), which code reads through ``self``."""


def _reserved_names(cls: type, pydantic: bool) -> frozenset[str]:
    """The names :attr:`ClassPlan.reserved` lists, decided once per class."""
    declared = _declared_fields(cls, pydantic)
    reserved: set[str] = set()
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, attribute in klass.__dict__.items():
            # Only the first binding along the MRO is what a lookup through the instance finds.
            if name in seen:
                continue
            seen.add(name)
            kind: type[object] = type(cast(object, attribute))
            # A declared field's class attribute is its default, unless it is the slot that holds
            # the field: an instance dict entry beside a slot is state no instance has.
            default = name in declared and kind is not types.MemberDescriptorType
            if not (default or kind in _PLAIN_DATA or kind is functools.cached_property):
                reserved.add(name)
    return frozenset(reserved)


def _declared_fields(cls: type, pydantic: bool) -> frozenset[str]:
    """Fields the class declares as instance state: a class-level value of one is its default."""
    if pydantic:
        # __pydantic_fields__ from pydantic 2.10 on; a plain model_fields dict before.
        for name in ("__pydantic_fields__", "model_fields"):
            found = _mro_lookup(cls, name)
            if found is not None and type(found[1]) is dict:
                return frozenset(cast("dict[str, object]", found[1]))
        return frozenset()
    if is_dataclass(cls):
        return frozenset(item.name for item in fields(cls))
    return frozenset()


def _private_names(cls: type) -> frozenset[str]:
    found = _mro_lookup(cls, "__private_attributes__")
    private = found[1] if found is not None else None
    return frozenset(cast("dict[str, object]", private)) if type(private) is dict else frozenset()


def is_protocol_name(name: str) -> bool:
    """Whether ``name`` begins and ends with an underscore (``__deepcopy__``, ``_repr_html_``).

    Such names are how the interpreter and libraries find hooks on an object, often through
    the instance (``copy.deepcopy`` reads ``obj.__deepcopy__``, IPython ``obj._repr_html_``,
    pydantic ``self.__pydantic_serializer__``), and no state is named so.
    """
    return name[:1] == "_" and name[-1:] == "_"


_CLEAN_LAYOUTS: Final = 64
"""Attribute-name tuples :attr:`ClassPlan.clean_names` keeps per class; a payload of many
layouts only makes the later ones take the full check."""


def check_attribute_names(plan: ClassPlan, names: tuple[object, ...]) -> tuple[str, ...]:
    """Refuse an instance attribute name a stored object may not have; remember a clean layout.

    Callers look ``names`` up in ``plan.clean_names`` first: the hot path is one dict lookup.

    Returns:
        The names of :data:`DUCK_TYPED_NAMES` among ``names``, in order: the attributes whose
        values :func:`require_data_under_duck_typed_names` must vet.

    Raises:
        TypeRefusal: A name that is not a ``str``, a protocol name (:func:`is_protocol_name`), or
            one of :attr:`ClassPlan.reserved`.
    """
    duck_typed: list[str] = []
    for name in names:
        if type(name) is not str:
            raise TypeRefusal("an instance's attributes must have str names")
        if is_protocol_name(name):
            raise TypeRefusal(
                f"an instance of {plan.key!r} has an attribute {name!r}; a name that begins and ends "
                "with an underscore is a hook Python and libraries look up on the object, never state"
            )
        if name in plan.reserved:
            raise TypeRefusal(
                f"an instance of {plan.key!r} has an attribute {name!r} that hides the class attribute "
                "of that name; only declared fields and plain-data class attributes may be shadowed"
            )
        if name in DUCK_TYPED_NAMES:
            duck_typed.append(name)
    found = tuple(duck_typed)
    if len(plan.clean_names) < _CLEAN_LAYOUTS:
        plan.clean_names[cast("tuple[str, ...]", names)] = found
    return found


DUCK_TYPED_NAMES: Final[frozenset[str]] = frozenset(
    {
        "to_dict",
        "from_dict",
        "to_json",
        "model_dump",
        "model_validate",
        "dict",
        "as_dict",
        "tolist",
        "unicode_string",
        "get_final_response",
        "aclose",
        "as_function",
        "split",
        "cancelling",
        "is_junction",
        "selection_func",
        "_update_agent_name_and_description",
        "_run_after_providers",
        "create_trigger_tool",
    }
)
"""Names Agent Framework looks up on an object it was handed, by duck typing (``getattr`` or
``hasattr`` with that name, whatever the object's class), and then calls or tests with
``callable()``. Instance state (instance dict, slots, pydantic extras and private attributes) may
hold no class and no callable instance under these names, on save or load
(:func:`require_data_under_duck_typed_names`): after a load, the framework's call would construct
the class or call the object the payload chose. A name the class binds itself is refused as an
attribute anyway (:attr:`ClassPlan.reserved`); this covers the names a class *lacks*.

Collected from the installed source of agent-framework-core 1.23.0 and 1.26.0 and
agent-framework-orchestrations 1.4.0 (``getattr(``/``hasattr(`` with a constant name, and calls on
values the function was handed), file and function; a name stays while a supported release calls it:

- ``to_dict``: ``_serialization.py`` ``_is_serialization_protocol`` (with ``from_dict``, the
  runtime test of ``SerializationProtocol``) and ``_serialize_value``, which then calls
  ``value.to_dict(exclude=..., exclude_none=...)``; ``_serialization.py`` ``make_json_safe``;
  ``_sessions.py`` ``_serialize_value``; ``_types.py`` ``_serialize_value``; ``_tools.py``
  ``FunctionTool._make_dumpable``; ``agent_framework_orchestrations/_magentic.py``
  ``_message_to_payload``.
- ``from_dict``: ``_serialization.py`` ``_is_serialization_protocol`` (tested with
  ``callable()``: it decides that ``to_dict`` is called); ``_workflows/_typing_utils.py``
  ``try_coerce_to_type`` (called on the target).
- ``to_json``: ``agent_framework_orchestrations/_magentic.py`` ``_message_to_payload``.
- ``model_dump``: ``_serialization.py`` ``make_json_safe``; ``_mcp.py``
  ``_mcp_tool_result_host_payload``.
- ``model_validate``: ``_workflows/_typing_utils.py`` ``try_coerce_to_type``.
- ``dict``: ``_serialization.py`` ``make_json_safe``.
- ``as_dict``: ``observability.py`` ``_build_tool_otel_definition``.
- ``tolist``: ``_in_memory.py`` ``_numeric_vector``; ``_vectors.py`` ``_msgspec_enc_hook`` and
  ``_normalize_vector``.
- ``unicode_string``: ``_mcp.py`` ``_consume_json_size`` (tested with ``callable()``).
- ``get_final_response``: ``_workflows/_agent_executor.py`` ``AgentExecutor._run_agent_streaming``.
- ``aclose``: ``_types.py`` ``ResponseStream.close``.
- ``as_function``: ``_harness/_agent.py`` ``_assemble_shell``.
- ``split``: ``_workflows/_functional.py`` ``_split_workflow_interruption``.
- ``cancelling``: ``_workflows/_functional.py`` ``RunContext._settle_workflow_tasks`` (on a
  finished task).
- ``is_junction``: ``_filesystem.py`` ``_is_link_or_reparse_point``.
- ``selection_func``: ``_workflows/_edge_runner.py`` ``FanOutEdgeRunner.__init__`` (called when
  a message is sent).
- ``_update_agent_name_and_description``: ``_agents.py``
  ``RawAgent._update_agent_name_and_description`` (on the agent's client).
- ``_run_after_providers``: ``_harness/_loop.py``
  ``AgentLoopMiddleware._fire_turn_scoped_after_providers`` (on the agent).
- ``create_trigger_tool`` (1.26): ``_compaction.py``, the compaction tool's constructor, which calls
  it on the strategy it was handed when it is callable.

``cancelling`` is 1.23's (1.26 no longer looks it up); 1.26's other new lookups,
``requires_client_managed_history`` (compared with ``True``) and ``source_id`` (a string read), are
data, never called.

Not listed: lookups through ``self`` or on a class the framework chose (``__name__``,
``__module__``, ``model_fields``), names read as data and never called (``text``, ``type``,
``name``, ``call_id``), dunder and sunder names (refused as attributes by
:func:`is_protocol_name` whatever they hold: ``__deepcopy__``, ``__dict__``, ``__aiter__``,
``__getstate__``, the one hook the codec itself calls, on framework classes), and the members of
the framework's other ``runtime_checkable`` protocols (``SupportsAgentRun``, the chat-client
``Supports*`` protocols, ``TokenizerProtocol``, ``RunnerContext``, ``Evaluator``, the vector-store
protocols), which it tests agents, clients, tokenizers, stores and contexts against, never
values it reads from workflow state. The codec itself looks nothing up by duck typing: it reads
state through the descriptors a :class:`ClassPlan` vetted.
"""


def _defines_call(cls: type) -> bool:
    return _mro_lookup(cls, "__call__") is not None


def _callable_node(node: object, known_plan: Callable[[str], ClassPlan | None]) -> str | None:
    """What a tree node holds that can be called, or ``None``: a class object (``"c"``), or an
    object, enum member or named tuple whose class defines ``__call__``. Functions, methods and
    other callables of built-in types have no node: the walk refuses them wherever they are."""
    if type(node) is not tuple:
        return None
    record = cast("tuple[object, ...]", node)
    if len(record) < 2 or type(record[1]) is not str:  # noqa: PLR2004 - a tag and a class name
        return None
    key = record[1]
    if record[0] == "c":
        return f"the class {key!r}"
    if record[0] in ("o", "e", "n"):
        plan = known_plan(key)
        if plan is not None and plan.callable_instances:
            return f"a callable {key!r} instance"
    return None


def require_data_under_duck_typed_names(
    plan: ClassPlan,
    instance_state: object,
    slot_state: object,
    known_plan: Callable[[str], ClassPlan | None],
    instance_names: tuple[str, ...] | None = None,
) -> None:
    """Refuse instance state holding a class or a callable under a :data:`DUCK_TYPED_NAMES` name.

    Save and load share it, over the tree: the save's encoded state, the load's validated state.
    It looks at the instance dict, the slots, and a pydantic model's extras and private
    attributes (its ``__getattr__`` serves both by name).

    Args:
        plan: The plan of the object whose state this is.
        instance_state: The instance dict's node (a dict of nodes by name), or ``None``.
        slot_state: The slots' node, or ``None``.
        known_plan: The plan of a class the walk or the rebuild resolved already, by name, or
            ``None``; it never resolves a name itself.
        instance_names: The duck-typed names of the instance dict when the caller knows them
            (:func:`check_attribute_names`); otherwise every name is looked at.

    Raises:
        TypeRefusal: Such a name holds a class, or an instance whose class defines ``__call__``.
    """
    _require_data(plan, instance_state, known_plan, instance_names, "attribute")
    if type(slot_state) is not dict:
        return
    slots = cast("dict[str, object]", slot_state)
    _require_data(plan, slots, known_plan, None, "slot")
    if plan.pydantic:
        _require_data(plan, slots.get(PYDANTIC_EXTRA), known_plan, None, "extra field")
        _require_data(plan, slots.get(PYDANTIC_PRIVATE), known_plan, None, "private attribute")


def _require_data(
    plan: ClassPlan,
    state: object,
    known_plan: Callable[[str], ClassPlan | None],
    names: tuple[str, ...] | None,
    part: str,
) -> None:
    if type(state) is not dict or not state:
        return
    mapping = cast("dict[object, object]", state)
    for name in names if names is not None else tuple(mapping):
        # Exact str first: a name of another type is refused by the checks of its kind, and
        # would hash and compare its own way here.
        if type(name) is not str or name not in DUCK_TYPED_NAMES:
            continue
        held = _callable_node(mapping.get(name), known_plan)
        if held is not None:
            raise TypeRefusal(
                f"an instance of {plan.key!r} holds {held} in its {part} {name!r}, a name Agent Framework "
                "looks up on any object and calls; store data under it, not a class or a callable"
            )


PYDANTIC_EXTRA: Final = "__pydantic_extra__"
PYDANTIC_PRIVATE: Final = "__pydantic_private__"
PYDANTIC_FIELDS_SET: Final = "__pydantic_fields_set__"
"""The slots of a pydantic model whose contents :func:`pydantic_slot_problem` vets."""


def require_pydantic_slots(
    plan: ClassPlan,
    slots: Mapping[str, object],
    fields_set_names: Callable[[object], tuple[object, ...] | None],
) -> None:
    """Refuse a pydantic model's extras, private attributes or fields set that
    :func:`pydantic_slot_problem` finds wrong; save and load share it.

    Args:
        plan: The model's plan.
        slots: The model's slot state, as read on save or as loaded.
        fields_set_names: The members of a stored fields set (a live set on save, a set record
            on load), or ``None`` when it is not a set.

    Raises:
        TypeRefusal: The first problem found.
    """
    for slot in (PYDANTIC_EXTRA, PYDANTIC_PRIVATE, PYDANTIC_FIELDS_SET):
        if slot not in slots:
            continue
        held = slots[slot]
        names: tuple[object, ...] | None = None
        if slot == PYDANTIC_FIELDS_SET:
            names = fields_set_names(held)
        elif held is None:
            continue
        elif type(held) is dict:
            names = tuple(cast("dict[object, object]", held))
        problem = pydantic_slot_problem(plan, slot, names)
        if problem is not None:
            raise TypeRefusal(problem)


def pydantic_slot_problem(plan: ClassPlan, slot: str, names: tuple[object, ...] | None) -> str | None:
    """Why one of a pydantic model's slots may not be stored or rebuilt, or ``None``.

    Args:
        plan: The model's plan.
        slot: :data:`PYDANTIC_EXTRA`, :data:`PYDANTIC_PRIVATE` or :data:`PYDANTIC_FIELDS_SET`.
        names: The dict's keys (extras, private attributes) or the set's members (fields set),
            or ``None`` when the slot holds another kind of value.

    pydantic's ``__getattr__`` serves ``__pydantic_extra__`` entries for any name the class
    lacks, so an extra named like a hook (:func:`is_protocol_name`) would answer every library
    that looks for one. Private entries it serves only under declared names, so any other key
    is state no instance of the class can have. ``model_fields_set`` meets ``model_dump``'s
    ``exclude_unset`` and must be a set of names, not an object with its own ``__contains__``.
    """
    shape = "set or frozenset" if slot == PYDANTIC_FIELDS_SET else "dict"
    if names is None:
        return f"{plan.key!r} holds a {slot} that is not a {shape}"
    for name in names:
        if type(name) is not str:
            return f"{plan.key!r} holds a {slot} with a name that is not a str"
        if slot == PYDANTIC_EXTRA and is_protocol_name(name):
            return (
                f"{plan.key!r} has an extra field {name!r}, which pydantic would serve as a hook of the model"
            )
        if slot == PYDANTIC_PRIVATE and name not in plan.private:
            return f"{plan.key!r} has a private attribute {name!r} that the class does not declare"
    return None


def _defines_getstate(cls: type) -> bool:
    found = _mro_lookup(cls, "__getstate__")
    if found is None or found[0] is object or found[0].__module__ in _DEFAULT_STATE_MODULES:
        return False
    # Frozen slotted dataclasses get a generated __getstate__ that only lists the fields.
    return getattr(found[1], "__module__", None) != "dataclasses"


def _defined_by_standard_library(cls: type, name: str) -> bool:
    found = _mro_lookup(cls, name)
    return found is not None and found[0].__module__ in _DEFAULT_STATE_MODULES


def _standard_references() -> dict[str, type]:
    classes: tuple[type, ...] = (
        str, int, float, bool, bytes, bytearray, list, tuple, dict, set, frozenset,
        dt.date, dt.datetime, dt.time, dt.timedelta, dt.timezone, decimal.Decimal, uuid.UUID,
        zoneinfo.ZoneInfo, pathlib.PurePath, pathlib.PurePosixPath, pathlib.PureWindowsPath,
        pathlib.Path, pathlib.PosixPath, pathlib.WindowsPath,
    )  # fmt: skip
    # pathlib's classes moved to pathlib._local in Python 3.13; they are named by their public
    # module, so a reference stored by one Python version loads in another.
    return {(f"pathlib:{cls.__name__}" if _is_path_class(cls) else type_key(cls)): cls for cls in classes}


STANDARD_REFERENCES: Final[Mapping[str, type]] = _standard_references()
"""Built-in and standard-library value classes a checkpoint may name as class objects."""

_STANDARD_KEYS: Final[Mapping[int, str]] = {id(cls): key for key, cls in STANDARD_REFERENCES.items()}
"""Stored names of :data:`STANDARD_REFERENCES` by ``id`` of the class: looked up by the class, a
class whose metaclass calls it equal to ``int`` would be stored as ``int``. The classes live as long
as the process, so their ids are never reused."""
