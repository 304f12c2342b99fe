"""The save walk: one pass over a value yields both its canonical identity and its stored tree.

Identity and stored form come from the same code, value by value, so they cannot disagree:
whatever state the tree keeps, the canonical bytes cover, and nothing else.

**The tree** (what gets pickled) holds only ``None``, ``bool``, ``int``, finite ``float``,
``str``, ``bytes``, ``list``, dicts whose keys are all ``str``, and *records*: tuples whose
first item is a one-letter tag (``specs/codec.md`` lists them). A tuple in the tree is always
a record, so no application value is ever ambiguous. Every container appears once: a dict or
list reached twice is copied, so a payload written here never shares a container.

**The canonical form** (hash version 3) is a type-tagged, length-prefixed encoding of the same
values that ignores dict insertion order, set iteration order and ``PYTHONHASHSEED``.

The walk reads instance state only through the descriptors a :class:`~.rules.ClassPlan`
vetted, never through ``getattr``. The only code of a value's class it can run is the
``__getstate__`` of Agent Framework types (which leaves runtime-only fields out); whatever that
raises becomes a ``MongoDBSerializationError``. It hashes or compares a dict key, set member or
attribute name only once the identity of its type shows that the interpreter's or the standard
library's code does that, so a key's own ``__hash__`` or ``__eq__`` never runs (such a key is
refused), and it looks classes up by ``id``, never hashing them.
"""

from __future__ import annotations

import datetime as _dt
import enum
import functools
import math
import pathlib
import struct
import types
import uuid
import zoneinfo
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final, NoReturn, cast

from ...errors import MongoDBMappingError, MongoDBSerializationError
from .object_state import framework_state, merged_framework_state, pydantic_slots, refuse_names, state_dict
from .rules import (
    KIND_ENUM,
    KIND_NAMED_TUPLE,
    ClassNotFound,
    ClassPlan,
    TypeRefusal,
    TypeResolver,
    all_not_found,
    check_attribute_names,
    check_metaclass,
    is_mapping_class,
    require_data_under_duck_typed_names,
)

# type() spelled so the type checkers see type[Any]: the codec dispatches on exact types of
# values it knows nothing about, and a cast on the hot path would cost a call per value.
_type_of: Callable[[object], type[Any]] = type

__all__ = [
    "CANONICAL_HASH_VERSION",
    "CANONICAL_HEADER",
    "MAX_HASH_COLLISIONS",
    "MAX_NESTING",
    "PATH_CLASSES",
    "Walked",
    "walk_value",
]

CANONICAL_HASH_VERSION: Final = 3
"""Version of the canonical encoding; stored beside every hash so a change fails closed."""

CANONICAL_HEADER: Final = b"AFM-CANONICAL/3\n"
"""Prefix of every canonical encoding: hashes of different versions can never collide."""

MAX_NESTING: Final = 100
"""Deepest nesting of containers (dicts, lists, tuples, sets, objects, named tuples) a checkpoint
may have, counting the top level. Save and load apply the same bound, so a load can never
return a value too deep for the next save; 100 levels leave the interpreter's recursion limit
room for the caller's own stack."""

MAX_HASH_COLLISIONS: Final = 32
"""Most set members (or non-str dict keys) of one container that may share a hash value.

Distinct values rarely share a hash (``-1`` and ``-2`` do); thousands that do turn building the
set quadratic, which is how a crafted payload would stall a load. Save and load apply the same
bound, so every stored checkpoint loads."""

PATH_CLASSES: Final[dict[str, type[pathlib.PurePath]]] = {
    cls.__name__: cls
    for cls in (
        pathlib.PurePosixPath,
        pathlib.PureWindowsPath,
        pathlib.PosixPath,
        pathlib.WindowsPath,
    )
}
"""The ``pathlib`` classes a checkpoint may hold, by the name the tree stores."""

_U32: Final = struct.Struct(">I").pack
_F64: Final = struct.Struct(">d").pack
_DATE: Final = struct.Struct(">HBB").pack
_TIME: Final = struct.Struct(">BBBIB").pack
_DATETIME: Final = struct.Struct(">HBBBBBIB").pack
_TIMEDELTA: Final = struct.Struct(">iII").pack
_MAX_LENGTH: Final = 0xFFFFFFFF
_NONE: Final = b"N"
_EMPTY: Final = b"d\x00\x00\x00\x00"

_Entry = tuple[bytes, bytes, int]
"""A dict entry's place in canonical order: (encoded key, encoded key + None, position)."""

# Classes are looked up by id() wherever the walk dispatches on them: a dict lookup by the
# class would run its metaclass's __hash__ and __eq__, and a class whose metaclass calls it equal
# to Decimal (or to an allowed class) would be encoded as that class. These are module-level
# classes, alive as long as the process, so their ids are never reused.
_HASH_SAFE_CLASSES: Final = frozenset(
    id(cls)
    for cls in (
        str, int, float, bool, bytes, type(None), _dt.date, _dt.datetime, _dt.time, _dt.timedelta,
        _dt.timezone, Decimal, uuid.UUID, zoneinfo.ZoneInfo, *PATH_CLASSES.values(),
    )
)  # fmt: skip


class Walked:
    """A value's stored tree and canonical encoding (header included; the walk's own buffer).

    ``copied`` is what the load's rebuild will copy out of records (bytearray bytes, Decimal and
    path text), counted as the rebuild counts it: a tree may share one such value among many
    records through the pickle memo (a path's text is cached on the path), and a load refuses a
    payload whose records copy far more than it holds (``rebuild.COPY_FACTOR``).
    """

    __slots__ = ("canonical", "copied", "tree")

    def __init__(self, tree: object, canonical: bytes | bytearray, copied: int) -> None:
        self.tree = tree
        self.canonical = canonical
        self.copied = copied


def walk_value(value: object, resolver: TypeResolver) -> Walked:
    """Return the tree and canonical form of ``value``.

    Raises:
        MongoDBSerializationError: A class that may not be stored (not allowed, a mapping
            other than exact dict, state the codec cannot read), a set member or dict key
            whose hashing would run application code, distinct members that encode alike,
            or an exception raised by application code while reading state.
        MongoDBMappingError: A cycle, a non-finite number, nesting deeper than the interpreter
            allows, or a value of an unsupported type.
    """
    out = bytearray(CANONICAL_HEADER)
    walker = _Walker(resolver)
    try:
        tree = walker.encode(value, out)
        walker.require_all_found()
    except (MongoDBMappingError, RecursionError) as error:
        if isinstance(error, RecursionError):
            raise MongoDBMappingError(
                "Checkpoint state is nested too deeply to encode; flatten it into shallower structures."
            ) from None
        raise
    except TypeRefusal as error:
        names = tuple(walker.not_found)
        if isinstance(error, ClassNotFound) and error.key not in walker.not_found:
            names += (error.key,)
        message = f"Checkpoint state cannot be stored: {error}"
        raise MongoDBSerializationError(message, class_names=names) from None
    except Exception as error:
        # Only a framework __getstate__, the one hook the walk calls, raises anything else.
        raise MongoDBSerializationError(
            f"Reading checkpoint state raised {type(error).__name__}; the checkpoint was not stored."
        ) from error
    # The buffer itself, not a bytes copy: it is only hashed, and a copy would add its size (2.5 MB
    # at 2,000 messages, 3.5x the payload) to the encode's peak memory.
    return Walked(tree, out, walker.copied)


def _fail_cycle() -> NoReturn:
    raise MongoDBMappingError("Checkpoint state contains a reference cycle; it has no canonical form.")


def _fail_depth() -> NoReturn:
    raise MongoDBMappingError(
        f"Checkpoint state is nested more than {MAX_NESTING} levels deep; flatten it into "
        "shallower structures."
    )


def _fail_duplicate(kind: str) -> NoReturn:
    raise MongoDBSerializationError(
        f"Checkpoint state contains a {kind} whose distinct members encode identically, so its "
        "order is not canonical; use keys or elements that differ in value."
    )


def _length(size: int) -> bytes:
    if size > _MAX_LENGTH:
        raise MongoDBMappingError("Checkpoint state contains a value too large to encode.")
    return _U32(size)


def _text(text: str) -> bytes:
    # Pickle round-trips lone surrogates, so the identity must distinguish them too.
    data = text.encode("utf-8", "surrogatepass")
    return _length(len(data)) + data


def _exact_strs(items: tuple[object, ...]) -> bool:
    """Whether every item is exactly a ``str`` (by the type's identity, so no code of it runs)."""
    for item in items:  # noqa: SIM110 - all() of a generator costs twice as much per object
        if type(item) is not str:
            return False
    return True


def check_hash_collisions(members: list[Any] | tuple[Any, ...], kind: str) -> None:
    """Refuse a container whose members share hash values beyond :data:`MAX_HASH_COLLISIONS`."""
    if len(members) - len({hash(member) for member in members}) > MAX_HASH_COLLISIONS:
        raise MongoDBSerializationError(
            f"Checkpoint state contains a {kind} with more than {MAX_HASH_COLLISIONS} members that "
            "share a hash value; such a container would make loading quadratic."
        )


_Order = tuple[bytes, tuple[_Entry, ...]]
"""A str-keyed dict layout's canonical header (``d`` and count) and its entries in canonical order."""

_Handler = Callable[[Any, bytearray], Any]
"""Appends a value's canonical bytes to the buffer and returns its tree node."""


class _Layout:
    """What one walk learnt about one class's instance dicts of one set of names, in order.

    Made only once those names passed the attribute-name check, and keyed by the name tuple
    (exact ``str``s, checked before every lookup), so an instance with these names needs no
    further check of them. For a framework class, ``state_names`` is the key tuple its
    ``__getstate__`` returned for such an instance the last time, ``omitted`` the positions
    (in the instance's names, sorted by name) of the fields it left out, and ``merged`` the
    order of the stored state those make. ``duck_typed`` and ``state_duck_typed`` are the names of
    :data:`~.rules.DUCK_TYPED_NAMES` among the instance dict's and the stored state's names,
    whose values are vetted for every instance.

    Kept for one walk only, like every cache of the walk: what a save learns about a class is
    never applied to another save, and no cache outlives the classes its ids name. (The plan
    itself is the resolver's, kept per codec; its check that a name leads back to the same
    class refuses a class replaced under its name.)
    """

    __slots__ = ("duck_typed", "merged", "omitted", "order", "state_duck_typed", "state_names")

    def __init__(self, order: _Order, duck_typed: tuple[str, ...]) -> None:
        self.order = order
        self.duck_typed = duck_typed
        self.state_names: tuple[str, ...] | None = None
        self.omitted: tuple[int, ...] = ()
        self.merged: _Order | None = None
        self.state_duck_typed = duck_typed


class _Walker:
    """One save's walk; its caches (texts, key orders, plans, layouts) live as long as the save.

    The hot paths (any value, dicts, sequences, each class's instances) are closures over the
    caches, built once per walk (at 2,000 messages that halves the walk's cost against bound
    methods). Values dispatch through one table keyed by ``id`` of their exact class: the
    built-in and standard classes are in it from the start, and each class of instances gets
    its own encoder, made from its plan the first time the walk meets it (``instance_encoder``).
    Against the walk that dispatched every value through a chain of type tests and read every
    object through the generic state reader, the table, the per-class encoders and the
    per-layout knowledge of ``_dict_object_encoder`` took the walk from 45.5-48.0 to 36.4-38.3 ms
    at 2,000 messages and from 4.6-4.7 to 3.7-3.8 ms at 200, side by side (ADR 0028).
    """

    __slots__ = (
        "_active", "_handlers", "_identities", "_member_names", "_orders", "_placed", "_plans",
        "_resolver", "_texts", "copied", "encode", "encode_dict", "encode_sequence", "encode_text",
        "not_found", "text_order",
    )  # fmt: skip

    def __init__(self, resolver: TypeResolver) -> None:
        self._resolver = resolver
        self._texts: dict[str, bytes] = {}
        self._orders: dict[tuple[str, ...], _Order] = {}
        # Keyed by id(cls), as _HASH_SAFE_CLASSES is; each plan (and each class's encoder, which
        # holds its plan) holds its class, so the id of a class in these caches stays its own for
        # the whole walk.
        self._plans: dict[int, ClassPlan] = {}
        self._handlers: dict[int, _Handler] = {}
        self._identities: dict[int, bytes] = {}
        self._member_names: dict[int, dict[int, str]] = {}
        self._active: set[int] = set()
        # Containers of the value placed in the tree as they are; one reached again is copied.
        self._placed: set[int] = set()
        # Classes this process may not store, by name: the walk goes on past them (their
        # instances are not read) so that one refusal names every class a deployment must list.
        self.not_found: dict[str, ClassNotFound] = {}
        self.copied = 0  # Walked.copied
        self._build_hot_paths()
        self._handlers.update(self._value_encoders())

    def _build_hot_paths(self) -> None:  # noqa: PLR0915 - the closures share the walk's caches
        texts = self._texts
        orders = self._orders
        active = self._active
        placed = self._placed
        handlers = self._handlers
        u32 = _U32

        def encode_text(text: str) -> bytes:
            encoded = texts.get(text)
            if encoded is None:
                encoded = texts[text] = b"s" + _text(text)
            return encoded

        def encode(value: Any, out: bytearray) -> Any:
            """Append ``value``'s canonical bytes to ``out`` and return its tree node."""
            cls = _type_of(value)
            if cls is str:
                encoded = texts.get(value)
                out += encoded if encoded is not None else encode_text(value)
                return value
            if value is None:
                out += _NONE
                return None
            handler = handlers.get(id(cls))
            if handler is not None:
                return handler(value, out)
            if issubclass(cls, type):
                return self.encode_class(value, out)
            return self.instance_encoder(cls)(value, out)

        def encode_sequence(tag: bytes, value: list[Any] | tuple[Any, ...], out: bytearray) -> Any:
            """Encode items in order; return ``value`` itself when every item is its own node."""
            out += tag
            out += u32(len(value))
            nodes: list[Any] | None = None
            for position, item in enumerate(value):
                if item is None:
                    out += _NONE
                    continue
                cls = _type_of(item)
                if cls is str:
                    encoded = texts.get(item)
                    out += encoded if encoded is not None else encode_text(item)
                    continue
                handler = handlers.get(id(cls))
                node = handler(item, out) if handler is not None else encode(item, out)
                if node is not item:
                    if nodes is None:
                        nodes = list(value)
                    nodes[position] = node
            return value if nodes is None else nodes

        def encode_list(value: list[Any], out: bytearray) -> Any:
            marker = id(value)
            if marker in active:
                _fail_cycle()
            active.add(marker)
            if len(active) > MAX_NESTING:
                _fail_depth()
            items = encode_sequence(b"l", value, out)
            active.discard(marker)
            if items is not value:
                return items
            if marker in placed:
                return value.copy()
            placed.add(marker)
            return value

        def text_order(keys: tuple[str, ...]) -> _Order:
            """The order of a dict whose keys the caller knows are exact ``str``s.

            Object state and JSON-like dicts repeat the same str keys thousands of times, so their
            orders are cached by the key tuple. Only tuples of exact ``str``: a lookup matches by
            equality, and equal keys of other types (``1``, ``True`` and ``1.0``; ``0.0`` and
            ``-0.0``; Decimal exponents; one instant at two offsets; a str enum member and its
            text) encode apart. The types are checked before the lookup, so it hashes and compares
            only ``str``s and a key's own ``__hash__`` or ``__eq__`` never runs.
            """
            order = orders.get(keys)
            if order is None:
                # A framework __getstate__'s names are taken as its copies of the vetted instance
                # dict's (read_state); any other key would be encoded as a value here, as before.
                copied = self.copied
                order, _ = mixed_order(keys)
                self.copied = copied  # such a key is counted where it is placed
                orders[keys] = order
            return order

        def mixed_order(keys: tuple[Any, ...]) -> tuple[_Order, list[Any]]:
            """The order of a dict with a key that is not a ``str``, and the keys' tree nodes.

            Never cached (see ``text_order``). Each key is encoded once: its bytes order the
            entries and its node goes into the ``m`` record.
            """
            encoded: dict[bytes, int] = {}
            key_nodes: list[Any] = []
            for position, key in enumerate(keys):
                if type(key) is str:
                    encoded[encode_text(key)] = position
                    key_nodes.append(key)
                    continue
                buffer = bytearray()
                key_nodes.append(encode(key, buffer))
                encoded[bytes(buffer)] = position
            if len(encoded) != len(keys):
                _fail_duplicate("dict")
            entries = tuple(
                (key_bytes, key_bytes + _NONE, position) for key_bytes, position in sorted(encoded.items())
            )
            return (b"d" + u32(len(keys)), entries), key_nodes

        def encode_dict(mapping: dict[Any, Any], out: bytearray, order: _Order | None = None) -> Any:  # noqa: PLR0912
            """Encode a dict; ``order`` is its layout's, when the caller already knows it."""
            marker = id(mapping)
            if marker in active:
                _fail_cycle()
            active.add(marker)
            if len(active) > MAX_NESTING:
                _fail_depth()
            if not mapping:
                out += _EMPTY
                active.discard(marker)
                if marker in placed:
                    return mapping.copy()
                placed.add(marker)
                return mapping
            values = tuple(mapping.values())
            key_nodes: list[Any] | None = None
            if order is None:
                keys = tuple(mapping)
                for key in keys:
                    if type(key) is not str:
                        order, key_nodes = mixed_order(keys)
                        break
                else:
                    order = text_order(keys)
            header, entries = order
            out += header
            nodes: list[Any] | None = None
            for key_bytes, key_and_none, position in entries:
                item = values[position]
                # None and str dominate checkpoint state; encode them without a call.
                if item is None:
                    out += key_and_none
                    continue
                out += key_bytes
                cls = _type_of(item)
                if cls is str:
                    encoded = texts.get(item)
                    out += encoded if encoded is not None else encode_text(item)
                    continue
                handler = handlers.get(id(cls))
                node = handler(item, out) if handler is not None else encode(item, out)
                if node is not item:
                    if nodes is None:
                        nodes = list(values)
                    nodes[position] = node
            active.discard(marker)
            if key_nodes is not None:
                return self.mapping_record(mapping, key_nodes, values if nodes is None else nodes)
            if nodes is not None:
                return dict(zip(mapping, nodes, strict=True))
            if marker in placed:
                return mapping.copy()
            placed.add(marker)
            return mapping

        handlers[id(dict)] = encode_dict
        handlers[id(list)] = encode_list
        self.encode_text = encode_text
        self.encode = encode
        self.encode_dict = encode_dict
        self.encode_sequence = encode_sequence
        self.text_order = text_order

    def _value_encoders(self) -> dict[int, _Handler]:
        """Encoders of the other built-in and the standard classes, by ``id`` of the class."""
        active = self._active

        def encode_bool(value: bool, out: bytearray) -> Any:
            out += b"T" if value else b"F"
            return value

        def encode_int(value: int, out: bytearray) -> Any:
            magnitude = abs(value)
            data = magnitude.to_bytes((magnitude.bit_length() + 7) // 8, "big")
            out += b"i-" if value < 0 else b"i+"
            out += _length(len(data))
            out += data
            return value

        def encode_float(value: float, out: bytearray) -> Any:
            if not math.isfinite(value):
                raise MongoDBMappingError(
                    "Checkpoint state contains a NaN or infinite float, which has no canonical form."
                )
            out += b"f"
            out += _F64(value)
            return value

        def encode_tuple(value: tuple[Any, ...], out: bytearray) -> Any:
            marker = id(value)
            if marker in active:
                _fail_cycle()
            active.add(marker)
            if len(active) > MAX_NESTING:
                _fail_depth()
            items = self.encode_sequence(b"t", value, out)
            active.discard(marker)
            return ("t", *items)

        def encode_bytes(value: bytes, out: bytearray) -> Any:
            out += b"b"
            out += _length(len(value))
            out += value
            return value

        def encode_bytearray(value: bytearray, out: bytearray) -> Any:
            out += b"a"
            out += _length(len(value))
            out += value
            self.copied += len(value)
            return ("a", bytes(value))

        def encode_set(value: set[Any], out: bytearray) -> Any:
            return self.encode_members(value, out, True)

        def encode_frozenset(value: frozenset[Any], out: bytearray) -> Any:
            return self.encode_members(value, out, False)

        encoders: dict[int, _Handler] = {
            id(bool): encode_bool,
            id(int): encode_int,
            id(float): encode_float,
            id(tuple): encode_tuple,
            id(bytes): encode_bytes,
            id(bytearray): encode_bytearray,
            id(set): encode_set,
            id(frozenset): encode_frozenset,
            # A class object whose metaclass is type itself; other metaclasses take the
            # encoder's slow path, which tells class objects from instances.
            id(type): self.encode_class,
        }
        for cls, standard in _STANDARD_ENCODER_CLASSES:
            encoders[id(cls)] = functools.partial(standard, self)
        return encoders

    def enter(self, value: object) -> int:
        marker = id(value)
        if marker in self._active:
            _fail_cycle()
        self._active.add(marker)
        if len(self._active) > MAX_NESTING:
            _fail_depth()
        return marker

    def mapping_record(
        self, mapping: dict[Any, Any], key_nodes: list[Any], nodes: tuple[Any, ...] | list[Any]
    ) -> tuple[Any, ...]:
        """The ``m`` record of a dict with a key that is not a ``str``: key and value nodes in order.

        Every key is checked before the collision bound hashes them all.
        """
        keys = tuple(mapping)
        for key in keys:
            if not self.is_hash_safe(key):
                raise TypeRefusal(_unhashable_message(key, "dict key"))
        check_hash_collisions(keys, "dict")
        record: list[Any] = ["m"]
        for key_node, node in zip(key_nodes, nodes, strict=True):
            record.append(key_node)
            record.append(node)
        return tuple(record)

    def encode_members(self, members: set[Any] | frozenset[Any], out: bytearray, mutable: bool) -> Any:
        marker = self.enter(members)
        encoded: dict[bytes, Any] = {}
        for member in members:
            if not self.is_hash_safe(member):
                raise TypeRefusal(_unhashable_message(member, "set member"))
            buffer = bytearray()
            node = self.encode(member, buffer)
            encoded[bytes(buffer)] = node
        if len(encoded) != len(members):
            _fail_duplicate("set")
        check_hash_collisions(tuple(members), "set")
        out += b"S" if mutable else b"Z"
        out += _U32(len(encoded))
        nodes: list[Any] = ["S" if mutable else "Z"]
        for member_bytes in sorted(encoded):
            out += member_bytes
            nodes.append(encoded[member_bytes])
        self._active.discard(marker)
        return tuple(nodes)

    def is_hash_safe(self, value: Any) -> bool:
        """Whether hashing ``value`` (on load, to rebuild a set or dict) runs no application code."""
        cls = _type_of(value)
        if id(cls) in _HASH_SAFE_CLASSES or issubclass(cls, type):
            return True
        if cls is tuple or cls is frozenset:
            return all(self.is_hash_safe(item) for item in value)
        plan = self.plan(cls)
        return plan.hash_safe and (
            plan.kind != KIND_NAMED_TUPLE or all(self.is_hash_safe(item) for item in value)
        )

    def pass_over(self, missing: ClassNotFound) -> None:
        """Note a class this process may not store, in place of its value's node: the save is
        refused at the end (:meth:`require_all_found`); the walk goes on only to find the others."""
        self.not_found.setdefault(missing.key, missing)

    def require_all_found(self) -> None:
        """Raise one refusal naming every class the walk passed over as not storable here."""
        if self.not_found:
            raise all_not_found(self.not_found)

    # -- classes and instances --------------------------------------------------------------

    def plan(self, cls: type) -> ClassPlan:
        plan = self._plans.get(id(cls))
        if plan is None:
            # Before anything hashes the class or reads its names: that would run its metaclass.
            check_metaclass(cls)
            if is_mapping_class(cls):
                # Said before "not allowed": no listing could make a mapping storable.
                raise TypeRefusal(
                    f"{cls.__module__}:{cls.__qualname__} is a mapping class; only exact dict is stored. "
                    "Convert it to a plain dict first."
                )
            plan = self._plans[id(cls)] = self._resolver.plan_of(cls)
        return plan

    def encode_class(self, value: type, out: bytearray) -> Any:
        # A class object (a request's response type, say) is stored by name; the resolver
        # decides which names may be stored, exactly as it decides on load.
        check_metaclass(value)
        try:
            key = self._resolver.reference_key(value)
        except ClassNotFound as missing:
            return self.pass_over(missing)
        out += b"c"
        out += _text(key)
        return ("c", key)

    def instance_encoder(self, cls: type) -> _Handler:
        """The encoder of ``cls``'s instances, made from its plan and kept for the rest of the walk.

        The plan is the walk's (:meth:`plan`), made once per class; the encoder is kept under the
        class's ``id``, which the plan it holds keeps the class's own.
        """
        try:
            plan = self.plan(cls)
        except ClassNotFound as missing:
            # Its instances are passed over unread; a plan refused otherwise stops the walk.
            refusal = missing

            def pass_over(value: Any, out: bytearray) -> Any:
                return self.pass_over(refusal)

            self._handlers[id(cls)] = pass_over
            return pass_over
        identity = self._identities.get(id(cls))
        if identity is None:
            identity = self._identities[id(cls)] = _text(plan.key)
        encoder: _Handler
        if plan.kind == KIND_ENUM:
            encoder = self._enum_encoder(plan, identity)
        elif plan.kind == KIND_NAMED_TUPLE:
            encoder = self._named_tuple_encoder(plan, identity)
        elif plan.instance_dict is not None and not plan.slots:
            encoder = self._dict_object_encoder(plan, identity)
        else:
            encoder = self._object_encoder(plan, identity)
        self._handlers[id(cls)] = encoder
        return encoder

    def _enum_encoder(self, plan: ClassPlan, identity: bytes) -> _Handler:
        key = plan.key

        def encode_member(value: Any, out: bytearray) -> Any:
            name = self.member_name(value, plan)
            out += b"e"
            out += identity
            out += _text(name)
            return ("e", key, name)

        return encode_member

    def _named_tuple_encoder(self, plan: ClassPlan, identity: bytes) -> _Handler:
        key = plan.key
        prefix = b"n" + identity

        def encode_named_tuple(value: Any, out: bytearray) -> Any:
            marker = self.enter(value)
            out += prefix
            items = self.encode_sequence(b"t", value, out)
            self._active.discard(marker)
            return ("n", key, *items)

        return encode_named_tuple

    def _object_encoder(self, plan: ClassPlan, identity: bytes) -> _Handler:
        """Any class of objects: slots, pydantic models, a framework class with slots."""
        key = plan.key
        prefix = b"o" + identity
        known_plan = self._resolver.known_plan

        def encode_object(value: Any, out: bytearray) -> Any:
            marker = self.enter(value)
            instance_state, slot_state = self.read_state(value, plan)
            out += prefix
            # Exact str names (read_state), so the key-order lookup need not check them again.
            instance_node = self.encode_state(instance_state, out, text_names=True)
            slot_node = self.encode_state(slot_state, out)
            require_data_under_duck_typed_names(plan, instance_node, slot_node, known_plan)
            self._active.discard(marker)
            return ("o", key, instance_node, slot_node)

        return encode_object

    def _dict_object_encoder(self, plan: ClassPlan, identity: bytes) -> _Handler:  # noqa: PLR0915 - one flat path
        """A class whose instances keep all their state in ``__dict__`` (the framework's
        messages and contents, plain classes, dataclasses without slots).

        The same steps as :meth:`_object_encoder`'s, in the same order, with what depends only on
        an instance dict's names (the attribute-name check, the key order, which fields the
        framework's ``__getstate__`` leaves out) learnt once per walk and layout (:class:`_Layout`).
        """
        key = plan.key
        prefix = b"o" + identity
        descriptor = cast(types.GetSetDescriptorType, plan.instance_dict)
        framework = plan.framework_state
        layouts: dict[tuple[str, ...], _Layout] = {}
        active = self._active
        encode_dict = self.encode_dict
        text_order = self.text_order
        known_plan = self._resolver.known_plan

        def encode_dict_object(value: Any, out: bytearray) -> Any:  # noqa: PLR0912, PLR0915 - one flat path
            marker = id(value)
            if marker in active:
                _fail_cycle()
            active.add(marker)
            if len(active) > MAX_NESTING:
                _fail_depth()
            instance_dict: dict[str, Any] = descriptor.__get__(value)
            if not instance_dict:
                instance_state, _ = self.read_state(value, plan)
                out += prefix
                instance_node = self.encode_state(instance_state, out, text_names=True)
                require_data_under_duck_typed_names(plan, instance_node, None, known_plan)
                out += _EMPTY
                active.discard(marker)
                return ("o", key, instance_node, None)
            names = tuple(instance_dict)
            # Exact str names first: the lookup would hash and compare a str subclass its own way.
            for name in names:
                if type(name) is not str:
                    refuse_names(plan, names)
            layout = layouts.get(names)
            if layout is None:
                duck_typed = plan.clean_names.get(names)
                if duck_typed is None:
                    duck_typed = check_attribute_names(plan, names)
                layout = layouts[names] = _Layout(text_order(names), duck_typed)
            if not framework:
                out += prefix
                instance_node = encode_dict(instance_dict, out, layout.order)
                if layout.duck_typed:
                    require_data_under_duck_typed_names(
                        plan, instance_node, None, known_plan, layout.duck_typed
                    )
                out += _EMPTY
                active.discard(marker)
                return ("o", key, instance_node, None)
            state = state_dict(value.__getstate__())
            if state is None:
                raise TypeRefusal(f"{key!r} exposes pickle state that is not a dict.")
            state_names = tuple(state)
            merged_order = layout.merged
            # Equal names (compared as the old set difference of names hashed and compared them:
            # the state's names are the framework hook's copies of the vetted instance dict's)
            # leave out the same fields, so the layout's positions name them in this instance.
            if merged_order is not None and state_names == layout.state_names:
                if layout.omitted:
                    merged = state.copy()
                    for position in layout.omitted:
                        merged[names[position]] = None
                else:
                    merged = state
            else:
                merged = merged_framework_state(instance_dict, state)
                # The stored dict holds every name of the instance dict, so one of the same size
                # holds the same names (Agent Framework copies the instance dict's own str
                # objects); a larger one has names __getstate__ added, vetted here.
                if merged and len(merged) != len(instance_dict):
                    layout.state_duck_typed = check_attribute_names(plan, tuple(merged))
                positions = {name: position for position, name in enumerate(names)}
                layout.state_names = state_names
                layout.omitted = tuple(positions[name] for name in list(merged)[len(state) :])
                layout.merged = merged_order = text_order(tuple(merged)) if merged else None
            out += prefix
            instance_node = encode_dict(merged, out, merged_order)
            if layout.state_duck_typed:
                require_data_under_duck_typed_names(
                    plan, instance_node, None, known_plan, layout.state_duck_typed
                )
            out += _EMPTY
            active.discard(marker)
            return ("o", key, instance_node, None)

        return encode_dict_object

    def member_name(self, member: enum.Enum, plan: ClassPlan) -> str:
        """The name the rebuild finds ``member`` by, found by identity among the class's members.

        Never ``member.name``: an enum may define its own ``name``, and a name looked up in the
        members by equality could be a str subclass that only compares equal (so only exact
        ``str`` names count).
        """
        names = self._member_names.get(id(plan.cls))
        if names is None:
            names = self._member_names[id(plan.cls)] = {}
            for candidate_name, candidate in plan.members.items():
                # __members__ lists a member's own name before the aliases bound to it.
                if type(candidate_name) is str:
                    names.setdefault(id(candidate), candidate_name)
        name = names.get(id(member))
        if name is None:
            raise TypeRefusal(
                f"{plan.key!r} value is not a single named member (a combination of flags, say)."
            )
        return name

    def encode_state(self, state: dict[str, Any] | None, out: bytearray, text_names: bool = False) -> Any:
        if state is None:
            out += _EMPTY
            return None
        node = self.encode_dict(state, out, self.text_order(tuple(state)) if text_names and state else None)
        if type(node) is not dict:
            raise TypeRefusal("an instance's attributes must have str names")
        return cast(Any, node)

    def read_state(self, value: Any, plan: ClassPlan) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Return (instance dict, slot values) exactly as the rebuild will write them back.

        Every name of the instance dict returned is an exact ``str``: checked here, or, for a
        framework class, one its ``__getstate__`` copied from the checked instance dict.

        The instance dict's names are vetted before any code of the value runs: a framework
        ``__getstate__`` is looked up through the instance, and reads ``self`` too.
        """
        instance_dict = None if plan.instance_dict is None else plan.instance_dict.__get__(value)
        if instance_dict:
            names = tuple(instance_dict)
            # Exact str names first: the lookup would hash and compare a str subclass its own way.
            if not _exact_strs(names) or names not in plan.clean_names:
                check_attribute_names(plan, names)
        slots: dict[str, Any] | None = None
        if plan.slots:
            slots = {}
            for name, descriptor in plan.slots.items():
                try:
                    slots[name] = descriptor.__get__(value)
                except AttributeError:  # noqa: PERF203 - only an unset slot raises, and stays unset
                    continue
        if plan.framework_state:
            state, slot_state = framework_state(value, plan, instance_dict, slots)
            # As in _dict_object_encoder: a larger dict has names __getstate__ added.
            if state and len(state) != len(instance_dict or ()):
                check_attribute_names(plan, tuple(state))
            return state, slot_state
        if plan.pydantic and slots is not None:
            slots = pydantic_slots(plan, slots)
        return instance_dict, slots


def _unhashable_message(value: object, role: str) -> str:
    return (
        f"a {role} of type {type(value).__module__}:{type(value).__qualname__} would run its own "
        "hashing code when the checkpoint is loaded; sets and dict keys may hold only built-in "
        "values, standard-library values, enums and named tuples"
    )


# -- standard-library values ------------------------------------------------------------------


def _encode_zone(walker: _Walker, value: Any, out: bytearray) -> Any:
    if value is None:
        out += _NONE
        return None
    cls = _type_of(value)
    if cls is _dt.timezone:
        return _encode_timezone(walker, value, out)
    if cls is zoneinfo.ZoneInfo:
        return _encode_zoneinfo(walker, value, out)
    raise TypeRefusal(
        f"time zone {cls.__module__}:{cls.__qualname__} is not stored; use datetime.timezone or "
        "zoneinfo.ZoneInfo"
    )


def _encode_datetime(walker: _Walker, value: _dt.datetime, out: bytearray) -> Any:
    out += b"W"
    out += _DATETIME(
        value.year,
        value.month,
        value.day,
        value.hour,
        value.minute,
        value.second,
        value.microsecond,
        value.fold,
    )
    zone = _encode_zone(walker, value.tzinfo, out)
    return (
        "W", value.year, value.month, value.day, value.hour, value.minute, value.second,
        value.microsecond, value.fold, zone,
    )  # fmt: skip


def _encode_date(walker: _Walker, value: _dt.date, out: bytearray) -> Any:
    out += b"D"
    out += _DATE(value.year, value.month, value.day)
    return ("D", value.year, value.month, value.day)


def _encode_time(walker: _Walker, value: _dt.time, out: bytearray) -> Any:
    out += b"H"
    out += _TIME(value.hour, value.minute, value.second, value.microsecond, value.fold)
    zone = _encode_zone(walker, value.tzinfo, out)
    return ("H", value.hour, value.minute, value.second, value.microsecond, value.fold, zone)


def _encode_timedelta(walker: _Walker, value: _dt.timedelta, out: bytearray) -> Any:
    out += b"R"
    out += _TIMEDELTA(value.days, value.seconds, value.microseconds)
    return ("R", value.days, value.seconds, value.microseconds)


def _encode_timezone(walker: _Walker, value: _dt.timezone, out: bytearray) -> Any:
    # __getinitargs__ tells timezone(offset) from timezone(offset, name); the two compare equal
    # but keep different names.
    arguments = cast("tuple[Any, ...]", value.__getinitargs__())  # type: ignore[attr-defined]
    offset = cast(_dt.timedelta, arguments[0])
    name = cast("str | None", arguments[1] if len(arguments) > 1 else None)
    out += b"z"
    out += _TIMEDELTA(offset.days, offset.seconds, offset.microseconds)
    if name is None:
        out += _NONE
    elif type(name) is str:
        out += walker.encode_text(name)
    else:
        # Its own __hash__ and __eq__ would run in the text cache, and the load has no such name.
        raise TypeRefusal("a time zone name that is a str subclass is not stored; name the zone with a str")
    return ("z", offset.days, offset.seconds, offset.microseconds, name)


def _encode_zoneinfo(walker: _Walker, value: zoneinfo.ZoneInfo, out: bytearray) -> Any:
    key = value.key
    # Only a zone the loader's ZoneInfo(key) gives back is stored by its key; one read from a
    # file (even with a key) or made with no_cache may hold other rules.
    if type(key) is not str or _cached_zone(key) is not value:
        raise TypeRefusal("only time zones made with zoneinfo.ZoneInfo(key) are stored, by their key")
    out += b"k"
    out += _text(key)
    return ("k", key)


def _cached_zone(key: str) -> zoneinfo.ZoneInfo | None:
    try:
        return zoneinfo.ZoneInfo(key)
    except Exception:
        return None


def _encode_decimal(walker: _Walker, value: Decimal, out: bytearray) -> Any:
    if not value.is_finite():
        raise MongoDBMappingError(
            "Checkpoint state contains a NaN or infinite Decimal, which has no canonical form."
        )
    text = str(value)
    out += b"M"
    out += _text(text)
    walker.copied += len(text)
    return ("M", text)


def _encode_uuid(walker: _Walker, value: uuid.UUID, out: bytearray) -> Any:
    data = value.bytes
    out += b"U"
    out += data
    return ("U", data)


def _encode_path(walker: _Walker, value: pathlib.PurePath, out: bytearray) -> Any:
    name = type(value).__name__
    text = str(value)
    out += b"p"
    out += _text(name)
    out += _text(text)
    walker.copied += len(text)
    return ("p", name, text)


_StandardEncoder = Callable[[_Walker, Any, bytearray], Any]

_STANDARD_ENCODER_CLASSES: Final[tuple[tuple[type, _StandardEncoder], ...]] = (
    (_dt.datetime, _encode_datetime),
    (_dt.date, _encode_date),
    (_dt.time, _encode_time),
    (_dt.timedelta, _encode_timedelta),
    (_dt.timezone, _encode_timezone),
    (zoneinfo.ZoneInfo, _encode_zoneinfo),
    (Decimal, _encode_decimal),
    (uuid.UUID, _encode_uuid),
    *((path_class, _encode_path) for path_class in PATH_CLASSES.values()),
)

_STANDARD_ENCODERS: Final[dict[int, _StandardEncoder]] = {
    id(cls): encoder for cls, encoder in _STANDARD_ENCODER_CLASSES
}
"""Encoders of the standard classes, by ``id`` of the class (see ``_HASH_SAFE_CLASSES``)."""
