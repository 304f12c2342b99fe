"""The load path: stored bytes to a tree of plain values, then the codec's own rebuild.

**Unpickling resolves nothing.** The unpickler's ``find_class`` refuses every global and there
is no ``persistent_load``, so the pickle machine can build only fresh built-in containers and
scalars: ``REDUCE``, ``BUILD``, ``NEWOBJ`` and ``INST``/``OBJ`` have no class, function or
enum member to act on. Extension codes (``EXT1/2/4``) could hand back an object from
``copyreg``'s process-wide cache without ``find_class``; when that cache or registry is in
use, the payload is scanned and such opcodes refused first. Bytes after ``STOP`` are refused.

**The rebuild runs in two phases.** The first walks the whole tree and validates every node
against the rules the save walk applies (exact types, record shapes, finite numbers, string
keys, class names through the :class:`~.rules.TypeResolver`, containers that appear once). Only
when the whole tree passed does the second phase create objects, writing each instance's
state through the descriptors its :class:`~.rules.ClassPlan` vetted. No constructor,
``__setstate__``, ``__reduce__``, ``__getattr__`` or ``__init__`` of any application or
framework class runs, and no such object exists before the whole payload was accepted.
"""

from __future__ import annotations

import copyreg
import datetime as _dt
import io
import math
import pickle
import pickletools
import re
import uuid
import zoneinfo
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final, NoReturn, cast

from ...errors import MongoDBMappingError, MongoDBSerializationError
from .rules import (
    KIND_ENUM,
    KIND_NAMED_TUPLE,
    KIND_OBJECT,
    ClassNotFound,
    ClassPlan,
    TypeRefusal,
    TypeResolver,
    all_not_found,
    check_attribute_names,
    require_data_under_duck_typed_names,
    require_pydantic_slots,
)
from .walk import MAX_NESTING, PATH_CLASSES, check_hash_collisions

# type() spelled so the type checkers see type[Any]: the codec dispatches on exact types of
# values it knows nothing about, and a cast on the hot path would cost a call per value.
_type_of: Callable[[object], type[Any]] = type

__all__ = ["load_tree", "rebuild_tree"]

_EXTENSION_OPCODES: Final = frozenset({"EXT1", "EXT2", "EXT4"})
# copyreg keeps its extension tables as module-level dicts that add_extension/remove_extension
# mutate in place (and the C pickle module holds the same objects), so binding them once is safe.
_EXTENSION_REGISTRY: Final = cast("dict[object, object]", getattr(copyreg, "_extension_registry"))  # noqa: B009
_EXTENSION_CACHE: Final = cast("dict[object, object]", getattr(copyreg, "_extension_cache"))  # noqa: B009
_UUID_BYTES: Final = 16
COPY_FACTOR: Final = 4
COPY_ALLOWANCE: Final = 1 << 20
"""Records may copy at most ``COPY_FACTOR`` times the payload's size, plus ``COPY_ALLOWANCE``
bytes, of bytearray, Decimal and path data: a save writes each such value inline (or shares one
object it really shared), so only a crafted payload that shares one large value among many
records comes near."""
_ZONE_KEY: Final = re.compile(r"[A-Za-z0-9_+\-]{1,64}(/[A-Za-z0-9_+\-]{1,64}){0,4}")


class _ClosedUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global at all."""

    def find_class(self, module: str, name: str, /) -> NoReturn:
        raise pickle.UnpicklingError("stored checkpoint trees name no globals")


def _refuse(reason: str) -> NoReturn:
    raise MongoDBMappingError(
        f"Checkpoint payload is not a tree this codec writes: {reason}. The stored document is "
        "corrupt or was modified outside this storage."
    )


def load_tree(payload: bytes) -> object:
    """Unpickle ``payload`` into plain containers and scalars, refusing anything else.

    Raises:
        MongoDBMappingError: Malformed or truncated bytes, a global, a persistent id, an
            extension code, or bytes after the end of the pickle.
    """
    scanned = bool(_EXTENSION_REGISTRY or _EXTENSION_CACHE)
    if scanned:
        _reject_extension_opcodes(payload)
    stream = io.BytesIO(payload)
    try:
        tree = _ClosedUnpickler(stream).load()
    except RecursionError:
        _refuse("it is nested too deeply")
    except Exception as error:
        raise MongoDBMappingError(
            f"Checkpoint payload could not be unpickled ({type(error).__name__}); it is truncated, "
            "corrupt, or not a checkpoint written by this codec."
        ) from error
    if stream.tell() != len(payload):
        _refuse("bytes follow the end of the pickle")
    if not scanned and (_EXTENSION_REGISTRY or _EXTENSION_CACHE):
        # An extension appeared while loading: vet the bytes before anything is returned.
        _reject_extension_opcodes(payload)
    return tree


def _reject_extension_opcodes(payload: bytes) -> None:
    try:
        uses_extensions = any(
            opcode.name in _EXTENSION_OPCODES for opcode, _, _ in pickletools.genops(payload)
        )
    except Exception as error:
        raise MongoDBMappingError("Checkpoint payload is not a well-formed pickle.") from error
    if uses_extensions:
        _refuse("it uses a copyreg extension code")


def rebuild_tree(
    tree: object,
    resolver: TypeResolver,
    *,
    check_root: Callable[[dict[str, Any]], None],
    payload_size: int,
) -> object:
    """Validate the whole ``tree``, let ``check_root`` vet its top level, then build objects.

    The tree's containers are fresh from the unpickler, so they are updated in place.
    ``payload_size`` bounds what records may copy when built (:data:`COPY_FACTOR`).

    Raises:
        MongoDBMappingError: Anything a save would not have written; nothing is built then.
    """
    if type(tree) is not dict:
        _refuse(f"its top level is a {type(tree).__name__}, not a dict")
    builder = _Rebuild(resolver, COPY_FACTOR * payload_size + COPY_ALLOWANCE)
    try:
        builder.check(tree)
        builder.require_all_found()
        check_root(cast("dict[str, Any]", tree))
    except RecursionError:
        _refuse("it is nested too deeply")
    except TypeRefusal as error:
        raise MongoDBMappingError(
            f"Checkpoint payload cannot be loaded: {error}", class_names=builder.missing_names()
        ) from None
    except MongoDBSerializationError as error:
        # The save-side wording of a shared rule (hash collisions); on load it is a mapping error.
        raise MongoDBMappingError(str(error)) from None
    try:
        builder.build_pending()
    except Exception as error:
        # Phase one accepted the tree, so nothing here should fail; if it does (memory, say), it
        # is still the payload's fault and still a package error.
        raise MongoDBMappingError(
            f"Checkpoint payload could not be rebuilt ({type(error).__name__})."
        ) from error
    return cast(object, tree)


class _Rebuild:
    """One load's rebuild: phase one (:meth:`check`) then phase two (:meth:`build_pending`)."""

    __slots__ = ("_copy_budget", "_depth", "_missing", "_pending", "_resolver", "_seen")

    def __init__(self, resolver: TypeResolver, copy_budget: int) -> None:
        self._resolver = resolver
        self._seen: set[int] = set()
        self._depth = 0
        # Bytes and text that records copy when built (bytearrays, Decimals, paths): a payload
        # may share one large value among many records through the pickle memo.
        self._copy_budget = copy_budget
        # Containers holding records, children before parents, for phase two.
        self._pending: list[dict[str, Any] | list[Any]] = []
        # Classes the tree names that this process cannot use, by name: phase one goes on past
        # them, so one error names them all (a record naming one is neither checked nor built).
        self._missing: dict[str, ClassNotFound] = {}

    @property
    def resolver(self) -> TypeResolver:
        return self._resolver

    # -- phase one: validate ----------------------------------------------------------------

    def mark(self, container: object) -> None:
        # A container reached twice would let a small payload expand exponentially.
        marker = id(container)
        if marker in self._seen:
            _refuse("a container appears more than once")
        self._seen.add(marker)

    def check(self, node: Any) -> bool:  # noqa: PLR0912 - one flat exact-type dispatch
        """Validate ``node``; return whether it is, or holds, a record phase two must build."""
        cls = _type_of(node)
        if cls is dict:
            self.mark(node)
            self.descend()
            dirty = False
            for key, item in node.items():
                if type(key) is not str:
                    _refuse("a plain dict has a key that is not a str")
                kind = _type_of(item)
                if kind is str or item is None or kind is int or kind is bool:
                    continue
                if self.check(item):
                    dirty = True
            self._depth -= 1
            if dirty:
                self._pending.append(node)
            return dirty
        if cls is list:
            self.mark(node)
            self.descend()
            dirty = False
            for item in node:
                kind = _type_of(item)
                if kind is str or item is None or kind is int or kind is bool:
                    continue
                if self.check(item):
                    dirty = True
            self._depth -= 1
            if dirty:
                self._pending.append(node)
            return dirty
        if cls is str or node is None or cls is int or cls is bool or cls is bytes:
            return False
        if cls is float:
            if not math.isfinite(node):
                _refuse("it holds a NaN or infinite float")
            return False
        if cls is tuple:
            self.check_record(node)
            return True
        _refuse(f"it holds a raw {cls.__name__}")

    def check_record(self, node: tuple[Any, ...]) -> None:
        if not node or type(node[0]) is not str:
            _refuse("a record has no tag")
        checker = _RECORD_CHECKS.get(node[0])
        if checker is None:
            _refuse(f"unknown record tag {node[0]!r}")
        arity = _RECORD_ARITY.get(node[0])
        if arity is not None and len(node) != arity:
            _refuse(f"a {node[0]!r} record has {len(node)} parts, not {arity}")
        self.mark(node)
        nests = node[0] in _NESTING_TAGS
        if nests:
            self.descend()
        try:
            checker(self, node)
        except ClassNotFound as missing:
            self._missing.setdefault(missing.key, missing)
        if nests:
            self._depth -= 1

    def missing_names(self) -> tuple[str, ...]:
        """The classes phase one found unavailable so far, by name."""
        return tuple(self._missing)

    def require_all_found(self) -> None:
        """Raise one refusal naming every class the tree names that this process cannot use."""
        if not self._missing:
            return
        raise all_not_found(self._missing)

    def descend(self) -> None:
        self._depth += 1
        if self._depth > MAX_NESTING:
            _refuse(f"it is nested more than {MAX_NESTING} levels deep")

    def spend(self, size: int) -> None:
        self._copy_budget -= size
        if self._copy_budget < 0:
            _refuse("its records would copy far more data than the payload holds")

    def check_items(self, items: tuple[Any, ...]) -> None:
        for item in items:
            self.check(item)

    def check_key(self, node: Any) -> None:
        """A set member or dict key: hashing it must run no application code; then validated."""
        self.require_hash_safe(node)
        self.check(node)

    def require_hash_safe(self, node: Any) -> None:
        cls = _type_of(node)
        if cls is dict or cls is list:
            _refuse("a set member or dict key is a mutable container")
        if cls is not tuple or not node or type(node[0]) is not str:
            return  # scalars; anything malformed is refused by check()
        tag = node[0]
        if tag in ("t", "Z"):
            items = node[1:]
        elif tag in ("e", "n"):
            # A class not found here propagates to the record holding this key, which is then
            # left unchecked as a whole: its members are never hashed (they are not all checked).
            plan = self.plan(
                node[1] if len(node) > 1 else None, KIND_ENUM if tag == "e" else KIND_NAMED_TUPLE
            )
            if not plan.hash_safe:
                _refuse(f"{plan.key!r} cannot be a set member or dict key")
            items = node[2:] if tag == "n" else ()
        elif tag in _HASHABLE_STANDARD_TAGS:
            return
        else:
            _refuse(f"a {tag!r} record cannot be a set member or dict key")
        for item in items:
            self.require_hash_safe(item)

    def check_members(self, members: tuple[Any, ...], kind: str) -> None:
        for member in members:
            self.check_key(member)
        # The collision bound is checked on built values, which for these kinds are built-in,
        # standard-library, enum or named-tuple values; application objects are not built here.
        check_hash_collisions([self.stand_in(member) for member in members], kind)

    def stand_in(self, node: Any) -> Any:
        """A hash-safe node's value for hashing and comparing, with no application object built.

        A named tuple's class keeps tuple hashing and equality (``ClassPlan.hash_safe``), so a
        plain tuple of its items hashes and compares the same.
        """
        if _type_of(node) is not tuple:
            return node
        tag = node[0]
        if tag == "n":
            return tuple(self.stand_in(item) for item in node[2:])
        if tag == "t":
            return tuple(self.stand_in(item) for item in node[1:])
        if tag == "Z":
            return frozenset(self.stand_in(item) for item in node[1:])
        return self.build(node)  # enum members exist already; the rest are standard values

    def plan(self, key: object, kind: int) -> ClassPlan:
        if type(key) is not str:
            _refuse("a record names no class")
        known_missing = self._missing.get(key)
        if known_missing is not None:
            # Resolved once per load: a payload naming one unavailable class many times costs one
            # lookup (a "no" from the framework's registry is not cached across loads).
            raise known_missing
        plan = self._resolver.plan(key)
        if plan.kind != kind:
            _refuse(f"{plan.key!r} is stored as another kind of value than it is")
        return plan

    def reference(self, key: str) -> type:
        known_missing = self._missing.get(key)
        if known_missing is not None:
            raise known_missing
        return self._resolver.reference(key)

    # -- phase two: build --------------------------------------------------------------------

    def build_pending(self) -> None:
        build = self.build
        for container in self._pending:
            if type(container) is dict:
                mapping = container
                for key, item in mapping.items():
                    if type(item) is tuple:
                        mapping[key] = build(item)
            else:
                sequence: list[Any] = container  # type: ignore[assignment]  # not a dict: a list
                for position, item in enumerate(sequence):
                    if type(item) is tuple:
                        sequence[position] = build(item)

    def build(self, node: Any) -> Any:
        """A validated node's value: records are built, containers are already final."""
        if _type_of(node) is not tuple:
            return node
        return _RECORD_BUILDS[node[0]](self, node)

    def build_items(self, items: tuple[Any, ...]) -> list[Any]:
        build = self.build
        return [build(item) if type(item) is tuple else item for item in items]


# -- records: one check and one build per tag --------------------------------------------------


def _require(condition: bool, reason: str) -> None:
    if not condition:
        _refuse(reason)


def _ints(node: tuple[Any, ...], count: int) -> None:
    _require(len(node) >= count + 1, f"a {node[0]!r} record is too short")
    _require(all(type(part) is int for part in node[1 : count + 1]), f"a {node[0]!r} record holds a non-int")


def _valid(make: Callable[[], object], what: str) -> None:
    try:
        make()
    except Exception:
        _refuse(f"it holds an invalid {what}")


def _check_tuple(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    rebuild.check_items(node[1:])


def _build_tuple(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return tuple(rebuild.build_items(node[1:]))


def _check_mapping(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _require(len(node) % 2 == 1, "a mapping record has a key without a value")
    keys = node[1::2]
    _require(any(type(key) is not str for key in keys), "a mapping record has only str keys")
    rebuild.check_members(keys, "dict")
    rebuild.check_items(node[2::2])
    _require(len({rebuild.stand_in(key) for key in keys}) == len(keys), "a mapping record repeats a key")


def _build_mapping(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    build = rebuild.build
    return {build(node[position]): build(node[position + 1]) for position in range(1, len(node), 2)}


def _check_set(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    rebuild.check_members(node[1:], "set")


def _build_set(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return set(rebuild.build_items(node[1:]))


def _build_frozenset(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return frozenset(rebuild.build_items(node[1:]))


def _check_bytearray(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _require(type(node[1]) is bytes, "a bytearray record is malformed")
    rebuild.spend(len(node[1]))


def _check_date(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _ints(node, 3)
    _valid(lambda: _build_date(rebuild, node), "date")


def _build_date(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return _dt.date(node[1], node[2], node[3])


def _check_zone(rebuild: _Rebuild, node: Any) -> None:
    if node is None:
        return
    _require(type(node) is tuple and len(node) > 0 and node[0] in ("z", "k"), "a time zone is malformed")
    rebuild.check_record(node)


def _check_time(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _ints(node, 5)
    _check_zone(rebuild, node[6])
    _valid(lambda: _build_time(rebuild, node), "time")


def _build_time(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return _dt.time(node[1], node[2], node[3], node[4], rebuild.build(node[6]), fold=node[5])


def _check_datetime(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _ints(node, 8)
    _check_zone(rebuild, node[9])
    _valid(lambda: _build_datetime(rebuild, node), "datetime")


def _build_datetime(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    zone = rebuild.build(node[9])
    return _dt.datetime(node[1], node[2], node[3], node[4], node[5], node[6], node[7], zone, fold=node[8])


def _check_timedelta(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _ints(node, 3)
    _valid(lambda: _build_timedelta(rebuild, node), "timedelta")


def _build_timedelta(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return _dt.timedelta(days=node[1], seconds=node[2], microseconds=node[3])


def _check_timezone(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _require(node[4] is None or type(node[4]) is str, "a timezone record is malformed")
    _ints(node, 3)
    _valid(lambda: _build_timezone(rebuild, node), "timezone")


def _build_timezone(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    offset = _dt.timedelta(days=node[1], seconds=node[2], microseconds=node[3])
    return _dt.timezone(offset) if node[4] is None else _dt.timezone(offset, node[4])


def _check_zoneinfo(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _require(type(node[1]) is str, "a ZoneInfo record is malformed")
    # The key pattern keeps the zone database lookup inside its own directory tree.
    _require(bool(_ZONE_KEY.fullmatch(node[1])) and ".." not in node[1], "a ZoneInfo key is malformed")
    _valid(lambda: _build_zoneinfo(rebuild, node), "time zone key")


def _build_zoneinfo(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return zoneinfo.ZoneInfo(node[1])


def _check_decimal(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _require(type(node[1]) is str, "a Decimal record is malformed")
    rebuild.spend(len(node[1]))
    try:
        finite = Decimal(node[1]).is_finite()
    except Exception:
        finite = False
    _require(finite, "it holds an invalid or non-finite Decimal")


def _build_decimal(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return Decimal(node[1])


def _check_uuid(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _require(type(node[1]) is bytes and len(node[1]) == _UUID_BYTES, "a UUID record is malformed")


def _build_uuid(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return uuid.UUID(bytes=node[1])


def _check_path(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _require(
        type(node[1]) is str and node[1] in PATH_CLASSES and type(node[2]) is str and "\x00" not in node[2],
        "a path record is malformed",
    )
    rebuild.spend(len(node[2]))
    _valid(lambda: _build_path(rebuild, node), "path")


def _build_path(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return PATH_CLASSES[node[1]](node[2])


def _check_enum(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _require(type(node[2]) is str, "an enum record is malformed")
    plan = rebuild.plan(node[1], KIND_ENUM)
    _require(node[2] in plan.members, f"{plan.key!r} has no member {node[2]!r}")


def _build_enum(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return rebuild.resolver.plan(node[1]).members[node[2]]


def _check_class(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _require(type(node[1]) is str, "a class record is malformed")
    rebuild.reference(node[1])


def _build_class(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    return rebuild.resolver.reference(node[1])


def _check_named_tuple(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    _require(len(node) > 1, "a named-tuple record is malformed")
    plan = rebuild.plan(node[1], KIND_NAMED_TUPLE)
    _require(len(node) - 2 == plan.field_count, f"{plan.key!r} is stored with the wrong number of items")
    rebuild.check_items(node[2:])


def _build_named_tuple(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    cls = rebuild.resolver.plan(node[1]).cls
    # tuple.__new__ fills the items without calling the class's generated __new__.
    return tuple.__new__(cls, rebuild.build_items(node[2:]))  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]


def _check_object(rebuild: _Rebuild, node: tuple[Any, ...]) -> None:
    plan = rebuild.plan(node[1], KIND_OBJECT)
    # Any, as the node's parts are: a typing.cast per object cost about 0.6 ms of a 2,000-message load.
    instance_state: Any = node[2]
    slot_state: Any = node[3]
    if plan.instance_dict is None:
        _require(instance_state is None, f"{plan.key!r} instances have no __dict__")
    else:
        _require(type(instance_state) is dict, f"{plan.key!r} is stored without its attributes")
        rebuild.check(instance_state)
        names = tuple(instance_state)
        duck_typed = plan.clean_names.get(names)
        if duck_typed is None:
            duck_typed = check_attribute_names(plan, names)
        if duck_typed:
            known_plan = rebuild.resolver.known_plan
            require_data_under_duck_typed_names(plan, instance_state, None, known_plan, duck_typed)
    if slot_state is not None:
        _require(type(slot_state) is dict, f"{plan.key!r} is stored with malformed slots")
        rebuild.check(slot_state)
        unknown = slot_state.keys() - plan.slots.keys()
        _require(not unknown, f"{plan.key!r} has no slot named {sorted(unknown)[0] if unknown else ''!r}")
        if plan.pydantic:
            require_pydantic_slots(plan, slot_state, _stored_fields_set_names)
        require_data_under_duck_typed_names(plan, None, slot_state, rebuild.resolver.known_plan)


def _stored_fields_set_names(node: object) -> tuple[object, ...] | None:
    # model_construct keeps a frozenset it is given; pydantic itself makes sets. Phase one
    # already validated the record, so it has a tag.
    record = cast("tuple[object, ...]", node) if type(node) is tuple else ()
    return record[1:] if record and record[0] in ("S", "Z") else None


def _build_object(rebuild: _Rebuild, node: tuple[Any, ...]) -> Any:
    plan = rebuild.resolver.plan(node[1])
    # object.__new__ allocates without running the class's __new__ or __init__; state goes in
    # through the interpreter's own descriptors, so no __setattr__ or property runs either.
    instance = object.__new__(cast("type[object]", plan.cls))
    if plan.instance_dict is not None:
        plan.instance_dict.__set__(instance, node[2])
    if node[3]:
        slots = plan.slots
        for name, item in node[3].items():
            slots[name].__set__(instance, item)
    return instance


_RecordStep = Callable[[_Rebuild, tuple[Any, ...]], Any]

_RECORD_CHECKS: Final[dict[str, _RecordStep]] = {
    "t": _check_tuple,
    "m": _check_mapping,
    "S": _check_set,
    "Z": _check_set,
    "a": _check_bytearray,
    "D": _check_date,
    "H": _check_time,
    "W": _check_datetime,
    "R": _check_timedelta,
    "z": _check_timezone,
    "k": _check_zoneinfo,
    "M": _check_decimal,
    "U": _check_uuid,
    "p": _check_path,
    "e": _check_enum,
    "c": _check_class,
    "n": _check_named_tuple,
    "o": _check_object,
}

_RECORD_BUILDS: Final[dict[str, _RecordStep]] = {
    "t": _build_tuple,
    "m": _build_mapping,
    "S": _build_set,
    "Z": _build_frozenset,
    "a": lambda rebuild, node: bytearray(node[1]),
    "D": _build_date,
    "H": _build_time,
    "W": _build_datetime,
    "R": _build_timedelta,
    "z": _build_timezone,
    "k": _build_zoneinfo,
    "M": _build_decimal,
    "U": _build_uuid,
    "p": _build_path,
    "e": _build_enum,
    "c": _build_class,
    "n": _build_named_tuple,
    "o": _build_object,
}

_RECORD_ARITY: Final[dict[str, int]] = {
    "a": 2, "D": 4, "H": 7, "W": 10, "R": 4, "z": 5, "k": 2, "M": 2, "U": 2, "p": 3, "e": 3, "c": 2, "o": 4,
}  # fmt: skip
"""Parts (tag included) of the records whose size is fixed."""

_NESTING_TAGS: Final = frozenset({"t", "m", "S", "Z", "o", "n"})
"""Records that stand for containers, and so count towards :data:`~.walk.MAX_NESTING`."""

_HASHABLE_STANDARD_TAGS: Final = frozenset({"D", "H", "W", "R", "z", "k", "M", "U", "p", "c"})
