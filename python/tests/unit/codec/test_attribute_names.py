"""Instance attribute names a stored object may have (issue 19; specs/codec.md rule 4, ADR 0021).

A rebuilt object's instance dict is read by every later attribute lookup, and Python and libraries
look hooks up through the instance: ``copy.deepcopy`` reads ``obj.__deepcopy__``, pydantic's
``model_dump`` reads ``self.__pydantic_serializer__`` and its ``__setattr__`` reads
``self.__pydantic_setattr_handlers__``, pydantic's ``__getattr__`` serves ``__pydantic_extra__``
entries for any name the class lacks. A stored name of that kind, holding a class (a storable
value), would make the workflow call that class after a load that ran nothing itself.

The first tests plant each such name in a real save's tree: the demonstration builds the object
the way the rebuild does and shows what a later, ordinary call would run; the load must refuse
the tree with ``MongoDBMappingError``, and a save of a live object with the same attribute must
refuse it with ``MongoDBSerializationError``. The properties then draw names from every reserved
family (hooks, the class's behaviour, its non-field class attributes) for every kind of object
the codec rebuilds, and check that declared fields, class-level defaults included, still round
trip.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.metadata
import importlib.util
import pickle
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, cast

import pytest
from agent_framework import Content, Message, WorkflowCheckpoint
from agent_framework._serialization import make_json_safe
from agent_framework._workflows._agent_executor import AgentExecutorRequest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_framework_mongodb import MongoDBMappingError, MongoDBSerializationError
from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, payload_checksum
from agent_framework_mongodb.checkpoints.codec.rules import DUCK_TYPED_NAMES
from tests.unit.codec.attribute_types import (
    CALLS,
    KINDS,
    CallableThing,
    FrozenThing,
    ModelThing,
    Phase,
    PlainThing,
    Planted,
    RecordThing,
    SlottedRecordThing,
    SlottedThing,
    key_of,
)

_CODEC: Final = CheckpointCodec(tuple(key_of(cls) for cls in KINDS))
_PLANTED: Final = key_of(Planted)
_PYDANTIC_SLOTS: Final = ("__pydantic_extra__", "__pydantic_fields_set__", "__pydantic_private__")


@pytest.fixture(autouse=True)
def _clean_calls() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


def _checkpoint(value: object) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="g" * 64,
        checkpoint_id="cp-attributes",
        timestamp="2025-01-01T00:00:00+00:00",
        state={"value": value},
    )


def _saved(value: object) -> tuple[dict[str, Any], list[Any]]:
    """The stored tree of a real save of ``value``, and the parts of its object record.

    The record is returned as a list (tag, name, instance dict, slots); :func:`_load` puts it
    back, so a test edits the parts and loads the edited tree.
    """
    encoded = _CODEC.encode(_checkpoint(value))
    tree = cast("dict[str, Any]", pickle.loads(encoded.payload))
    record = cast("tuple[Any, ...]", tree["state"]["value"])
    assert record[0] == "o"
    return tree, list(record)


def _load(tree: dict[str, Any], record: list[Any]) -> object:
    tree["state"]["value"] = tuple(record)
    payload = pickle.dumps(tree, protocol=5)
    return _CODEC.decode(payload, checksum=payload_checksum(payload)).state["value"]


def _refused_at_load(value: object, edit: Callable[[list[Any]], None]) -> str:
    """Load a real save of ``value`` after ``edit`` planted something in its record; it must be refused."""
    tree, record = _saved(value)
    edit(record)
    with pytest.raises(MongoDBMappingError) as caught:
        _load(tree, record)
    assert CALLS == [], "the load ran the planted class"
    return str(caught.value)


def _refused_at_save(value: object) -> str:
    with pytest.raises(MongoDBSerializationError) as caught:
        _CODEC.encode(_checkpoint(value))
    assert type(caught.value) is MongoDBSerializationError
    return str(caught.value)


def _as_rebuilt(value: object, attributes: dict[str, object], slots: dict[str, object] | None = None) -> Any:
    """``value`` as a load that accepted ``attributes`` (and pydantic ``slots``) would rebuild it.

    ``object.__new__`` and the interpreter's own descriptors, as the rebuild writes state: what a
    workflow would have been handed.
    """
    cls = type(value)
    rebuilt = object.__new__(cls)
    vars(rebuilt).update({**vars(value), **attributes})
    for name in _PYDANTIC_SLOTS if isinstance(value, ModelThing) else ():
        object.__setattr__(rebuilt, name, (slots or {}).get(name, getattr(value, name)))
    return rebuilt


def _planted() -> tuple[str, str]:
    return ("c", _PLANTED)


def _request() -> AgentExecutorRequest:
    return AgentExecutorRequest(messages=[Message(role="user", contents=["hi"])])


def _model() -> ModelThing:
    model = ModelThing.model_validate({"name": "m", "count": 2, "colour": "teal"})
    model._late = "late"
    return model


# -- what a planted name would run, refused on load and on save ------------------------------------


def test_a_deepcopy_hook_planted_on_an_executor_request_is_refused() -> None:
    request = _request()
    # Executor.execute deep-copies the message it was handed (an AgentExecutorRequest for an agent
    # executor), and copy.deepcopy looks __deepcopy__ up through the instance: the class the
    # payload named would be constructed. AgentExecutorRequest defines no __deepcopy__ of its own.
    copy.deepcopy(_as_rebuilt(request, {"__deepcopy__": Planted}))
    assert CALLS == ["Planted.__init__"]
    CALLS.clear()

    message = _refused_at_load(request, lambda record: record[2].update(__deepcopy__=_planted()))
    assert "'__deepcopy__'" in message
    vars(request)["__deepcopy__"] = Planted
    assert "'__deepcopy__'" in _refused_at_save(request)


@pytest.mark.parametrize(
    "name",
    [
        "__deepcopy__",
        "__getattr__",
        "__class__",
        "_repr_html_",
        "_PICKLE_OMIT_FIELDS",  # read through self by the framework's __getstate__
        "DEFAULT_EXCLUDE",  # read through self by to_dict
        "text",  # a property
        "to_dict",  # a method
    ],
)
def test_a_name_planted_on_a_framework_message_is_refused(name: str) -> None:
    if name == "_PICKLE_OMIT_FIELDS" and not hasattr(Message, name):
        pytest.skip(f"this Agent Framework's Message has no {name} for an attribute to shadow")
    message = Message(role="user", contents=[Content.from_text("hi")])
    assert f"{name!r}" in _refused_at_load(message, lambda record: record[2].update({name: _planted()}))
    vars(message)[name] = Planted
    assert f"{name!r}" in _refused_at_save(message)


def test_a_serializer_planted_in_a_model_instance_dict_is_refused() -> None:
    model = _model()
    # BaseModel.model_dump calls self.__pydantic_serializer__.to_python(self, ...).
    _as_rebuilt(model, {"__pydantic_serializer__": Planted}).model_dump()
    assert CALLS == ["Planted.to_python"]
    CALLS.clear()

    refusal = _refused_at_load(model, lambda record: record[2].update(__pydantic_serializer__=_planted()))
    assert "'__pydantic_serializer__'" in refusal
    vars(model)["__pydantic_serializer__"] = Planted
    _refused_at_save(model)


def test_setattr_handlers_planted_in_a_model_instance_dict_are_refused() -> None:
    model = _model()
    # BaseModel.__setattr__ calls self.__pydantic_setattr_handlers__[name](self, name, value).
    _as_rebuilt(model, {"__pydantic_setattr_handlers__": {"count": Planted}}).count = 3
    assert CALLS == ["Planted.__init__"]
    CALLS.clear()

    refusal = _refused_at_load(
        model, lambda record: record[2].update(__pydantic_setattr_handlers__={"count": _planted()})
    )
    assert "'__pydantic_setattr_handlers__'" in refusal
    vars(model)["__pydantic_setattr_handlers__"] = {"count": Planted}
    _refused_at_save(model)


@pytest.mark.parametrize("name", ["__html__", "__deepcopy__", "_repr_html_", "__class__"])
def test_a_hook_named_extra_field_is_refused(name: str) -> None:
    model = _model()
    if name == "__html__":
        # BaseModel.__getattr__ serves any name the class lacks from the extras: markupsafe's
        # escape() would call obj.__html__(), IPython obj._repr_html_().
        getattr(_as_rebuilt(model, {}, {"__pydantic_extra__": {name: Planted}}), name)()
        assert CALLS == ["Planted.__init__"]
        CALLS.clear()

    def plant(record: list[Any]) -> None:
        record[3]["__pydantic_extra__"][name] = _planted()

    assert f"extra field {name!r}" in _refused_at_load(model, plant)
    cast("dict[str, object]", model.__pydantic_extra__)[name] = Planted
    assert f"extra field {name!r}" in _refused_at_save(model)


@pytest.mark.parametrize("name", ["__deepcopy__", "_other", "name"])
def test_a_private_attribute_the_class_does_not_declare_is_refused(name: str) -> None:
    model = _model()

    def plant(record: list[Any]) -> None:
        record[3]["__pydantic_private__"][name] = _planted()

    assert f"private attribute {name!r}" in _refused_at_load(model, plant)
    cast("dict[str, object]", model.__pydantic_private__)[name] = Planted
    assert f"private attribute {name!r}" in _refused_at_save(model)


@pytest.mark.parametrize(
    ("stored", "live"),
    [
        (["name"], ["name"]),
        (("S", 1), {1}),
        (None, None),
        (("o", key_of(PlainThing), {"name": "x"}, None), PlainThing("x")),
        (("t", "name"), ("name",)),
    ],
    ids=["list", "int-members", "none", "object", "tuple"],
)
def test_a_fields_set_that_is_not_a_set_of_names_is_refused(stored: object, live: object) -> None:
    model = _model()

    def plant(record: list[Any]) -> None:
        record[3]["__pydantic_fields_set__"] = stored

    assert "__pydantic_fields_set__" in _refused_at_load(model, plant)
    object.__setattr__(model, "__pydantic_fields_set__", live)
    assert "__pydantic_fields_set__" in _refused_at_save(model)


# -- names the framework calls by duck typing (issue 30) --------------------------------------------


def _callable_thing() -> tuple[Any, ...]:
    return ("o", key_of(CallableThing), {"label": "c"}, None)


def test_a_class_under_a_name_the_class_lacks_would_be_constructed_by_the_framework() -> None:
    # PlainThing defines no to_dict and Message no model_dump, so neither name shadows anything;
    # Agent Framework's make_json_safe (events, telemetry, tool results) calls any model_dump or
    # to_dict it finds on an object, through the instance.
    make_json_safe(_as_rebuilt(PlainThing("p"), {"to_dict": Planted}))
    assert CALLS == ["Planted.__init__"]
    CALLS.clear()
    make_json_safe(_as_rebuilt(Message(role="user", contents=["hi"]), {"model_dump": CallableThing()}))
    assert CALLS == ["CallableThing.__call__"]


@pytest.mark.parametrize("held", ["class", "callable-instance"])
@pytest.mark.parametrize("name", sorted(DUCK_TYPED_NAMES))
def test_a_class_or_callable_under_a_duck_typed_name_is_refused(name: str, held: str) -> None:
    value = PlainThing("p")
    stored = _planted() if held == "class" else _callable_thing()
    refusal = _refused_at_load(value, lambda record: record[2].update({name: stored}))
    assert f"{name!r}" in refusal
    assert "Agent Framework looks up on any object and calls" in refusal
    vars(value)[name] = Planted if held == "class" else CallableThing()
    assert f"{name!r}" in _refused_at_save(value)


@pytest.mark.parametrize("name", ["model_dump", "tolist", "dict"])
def test_a_class_under_a_duck_typed_name_of_a_framework_message_is_refused(name: str) -> None:
    # Message's state is walked through its own __getstate__: the stored state is checked too.
    message = Message(role="user", contents=[Content.from_text("hi")])
    assert f"{name!r}" in _refused_at_load(message, lambda record: record[2].update({name: _planted()}))
    vars(message)[name] = Planted
    assert f"{name!r}" in _refused_at_save(message)


def test_a_class_in_a_duck_typed_pydantic_extra_is_refused() -> None:
    # pydantic's __getattr__ serves an extra for any name the class lacks.
    model = _model()
    _as_rebuilt(model, {}, {"__pydantic_extra__": {"to_dict": Planted}}).to_dict()
    assert CALLS == ["Planted.__init__"]
    CALLS.clear()

    def plant(record: list[Any]) -> None:
        record[3]["__pydantic_extra__"]["to_dict"] = _planted()

    assert "extra field 'to_dict'" in _refused_at_load(model, plant)
    cast("dict[str, object]", model.__pydantic_extra__)["to_dict"] = Planted
    assert "extra field 'to_dict'" in _refused_at_save(model)


def test_data_under_duck_typed_names_and_classes_under_other_names_round_trip() -> None:
    value = PlainThing("p")
    vars(value).update(
        to_dict="text", dict={"a": 1}, split=("x",), tolist=PlainThing("inner"), model_dump=Phase.NEW
    )
    vars(value)["response_type"] = Planted  # a class object as data, under a name nothing calls
    restored = _round_trip(value)
    assert (restored.to_dict, restored.dict, restored.split) == ("text", {"a": 1}, ("x",))
    assert type(restored.tolist) is PlainThing
    assert restored.model_dump is Phase.NEW
    assert restored.response_type is Planted
    model = _model()
    cast("dict[str, object]", model.__pydantic_extra__)["to_dict"] = "data"
    assert _round_trip(model).__pydantic_extra__ == {"colour": "teal", "to_dict": "data"}
    assert CALLS == []


def _framework_sources() -> str:
    texts: list[str] = []
    for package in ("agent_framework", "agent_framework_orchestrations"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                texts.extend(path.read_text(encoding="utf-8") for path in Path(location).rglob("*.py"))
    return "\n".join(texts)


def test_every_duck_typed_name_is_looked_up_by_the_installed_framework() -> None:
    # DUCK_TYPED_NAMES was collected from agent-framework-core 1.23.0; older releases lack some.
    version = importlib.metadata.version("agent-framework-core")
    if tuple(int(part) for part in version.split(".")[:2]) < (1, 23):
        pytest.skip(f"the names were collected from Agent Framework 1.23; {version} is installed")
    sources = _framework_sources()
    missing = {name for name in DUCK_TYPED_NAMES if f'"{name}"' not in sources}
    # A name stays while a supported release calls it: these are another release's, not the installed one's.
    other_releases = {"cancelling": (1, 23), "create_trigger_tool": (1, 26)}
    unexplained = sorted(name for name in missing if name not in other_releases)
    assert unexplained == [], "names no supported release looks up: re-collect DUCK_TYPED_NAMES"
    installed = tuple(int(part) for part in version.split(".")[:2])
    assert not {name for name in missing if other_releases.get(name) == installed}, (
        "a listed release's name is gone"
    )


# -- the shadowing real state needs still round-trips ----------------------------------------------


def _round_trip(value: object) -> Any:
    encoded = _CODEC.encode(_checkpoint(value))
    return _CODEC.decode(encoded.payload, checksum=encoded.payload_checksum).state["value"]


def test_declared_fields_and_plain_data_defaults_may_shadow_class_attributes() -> None:
    request = AgentExecutorRequest(messages=[Message(role="user", contents=["hi"])], should_respond=False)
    record = RecordThing("r", size=2, phase=Phase.DONE, tags=("a",))  # an enum and a tuple default
    plain = PlainThing("p", retries=5)  # shadows 3, None and True
    assert plain.doubled == "pp"  # a cached property's value in the instance dict
    for value in (record, plain, FrozenThing("k", phase=Phase.NEW), SlottedRecordThing(1, 2)):
        restored = _round_trip(value)
        assert type(restored) is type(value)
        assert vars(restored) == vars(value)
    assert _round_trip(record).phase is Phase.DONE
    restored_request = _round_trip(request)
    assert restored_request.should_respond is False
    assert [message.to_dict() for message in restored_request.messages] == [
        message.to_dict() for message in request.messages
    ]


def test_extras_named_like_model_methods_and_frozen_fields_sets_round_trip() -> None:
    # The class answers copy and json itself; pydantic's __getattr__ never serves them, so they
    # are only data (as a MongoDB document's _id is).
    model = ModelThing.model_validate({"name": "m", "copy": 1, "json": "j", "_id": "x"})
    assert _round_trip(model).__pydantic_extra__ == {"copy": 1, "json": "j", "_id": "x"}
    # Typed as a set, but pydantic keeps the frozenset it is given.
    constructed = ModelThing.model_construct(_fields_set=cast("set[str]", frozenset({"name"})), name="c")
    assert type(cast(object, constructed.model_fields_set)) is frozenset
    assert _round_trip(constructed).model_fields_set == frozenset({"name"})


# -- properties over every kind the codec rebuilds -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Kind:
    """One kind of rebuilt object: how to make one, and the names its class binds.

    Attributes:
        make: A fresh instance from drawn field values.
        fields: A strategy of keyword values for ``make`` (declared state, defaults included).
        configuration: Class attributes that are neither fields nor behaviour (containers,
            classes, objects), and slot names, which an instance dict entry may not take.
    """

    cls: type[Any]
    make: Callable[[dict[str, Any]], object]
    fields: st.SearchStrategy[dict[str, Any]]
    configuration: tuple[str, ...]

    def behaviour(self) -> tuple[str, ...]:
        """Methods, classmethods, staticmethods and properties the class (or a base) defines."""
        kinds = (types.FunctionType, classmethod, staticmethod, property)
        return tuple(
            sorted(
                {
                    name
                    for klass in self.cls.__mro__
                    if klass is not object
                    for name, attribute in vars(klass).items()
                    if isinstance(attribute, kinds)
                }
            )
        )


_texts = st.text(max_size=8)
_phases = st.sampled_from(list(Phase))


def _make_message(values: dict[str, Any]) -> Message:
    return Message(
        role=values["role"], contents=[Content.from_text(values["text"])], author_name=values["author"]
    )


def _make_model(values: dict[str, Any]) -> ModelThing:
    model = ModelThing.model_validate({"name": values["name"], "count": values["count"], **values["extra"]})
    if values["late"] is not None:
        model._late = values["late"]
    return model


_KINDS: Final = (
    _Kind(
        PlainThing,
        lambda values: PlainThing(values["name"], values["retries"]),
        st.fixed_dictionaries({"name": _texts, "retries": st.integers()}),
        ("registry", "factory", "helper_object"),
    ),
    _Kind(
        SlottedThing,
        lambda values: SlottedThing(values["count"], values["tag"], values["note"]),
        st.fixed_dictionaries({"count": st.integers(), "tag": _texts, "note": _texts}),
        ("kinds", "count", "tag"),
    ),
    _Kind(
        RecordThing,
        lambda values: RecordThing(**values),
        st.fixed_dictionaries(
            {
                "name": _texts,
                "size": st.integers(),
                "phase": _phases,
                "tags": st.tuples(_texts) | st.just(()),
                "items": st.lists(st.integers(), max_size=3),
            }
        ),
        ("limits", "factory"),
    ),
    _Kind(
        FrozenThing,
        lambda values: FrozenThing(**values),
        st.fixed_dictionaries({"key": _texts, "level": st.integers(), "phase": _phases}),
        ("registry",),
    ),
    _Kind(
        SlottedRecordThing,
        lambda values: SlottedRecordThing(**values),
        st.fixed_dictionaries({"x": st.integers(), "y": st.integers()}),
        ("origin", "x", "y"),
    ),
    _Kind(
        ModelThing,
        _make_model,
        st.fixed_dictionaries(
            {
                "name": _texts,
                "count": st.integers(),
                "extra": st.dictionaries(
                    st.sampled_from(["colour", "copy", "json", "_id"]), _texts, max_size=3
                ),
                "late": st.none() | _texts,
            }
        ),
        ("model_config", "_abc_impl"),
    ),
    _Kind(
        Message,
        _make_message,
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant"]), "text": _texts, "author": st.none() | _texts}
        ),
        ("DEFAULT_EXCLUDE", "INJECTABLE", "_PICKLE_OMIT_FIELDS", "_SHALLOW_COPY_FIELDS"),
    ),
    _Kind(
        Content,
        lambda values: Content.from_text(values["text"]),
        st.fixed_dictionaries({"text": _texts}),
        ("_PICKLE_OMIT_FIELDS", "_SHALLOW_COPY_FIELDS"),
    ),
)

_HOOKS: Final = st.sampled_from(
    [
        "__deepcopy__",
        "__copy__",
        "__class__",
        "__reduce_ex__",
        "__reduce__",
        "__getattr__",
        "__getattribute__",
        "__setattr__",
        "__getstate__",
        "__setstate__",
        "__dict__",
        "__html__",
        "__pydantic_serializer__",
        "__pydantic_setattr_handlers__",
        "__pydantic_validator__",
        "_repr_html_",
        "_ipython_display_",
    ]
)
_PROTOCOL_NAMES: Final = (
    _HOOKS
    | st.from_regex(r"__[a-z][a-z0-9_]{0,10}__", fullmatch=True)
    | st.from_regex(r"_[a-z][a-z0-9]{0,10}_", fullmatch=True)
)


@st.composite
def _reserved_names(draw: st.DrawFn, kind: _Kind) -> str:
    """A name from every family the rule reserves: hooks, the class's behaviour, its configuration."""
    family = draw(st.sampled_from(["protocol", "behaviour", "configuration"]))
    if family == "protocol":
        return draw(_PROTOCOL_NAMES)
    # Only what this Agent Framework's class binds (Core 1.13's Message has no _PICKLE_OMIT_FIELDS).
    configuration = tuple(name for name in kind.configuration if hasattr(kind.cls, name))
    return draw(st.sampled_from(kind.behaviour() if family == "behaviour" else configuration))


_kinds = st.sampled_from(_KINDS)
_stored_values = st.sampled_from(["planted", "text", 1, None])
"""What a planted attribute holds: ``"planted"`` stands for a class record naming :class:`Planted`."""

_PROPERTY_SETTINGS: Final = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _stored(value: object) -> object:
    return _planted() if value == "planted" else value


def _live(value: object) -> object:
    return Planted if value == "planted" else value


@_PROPERTY_SETTINGS
@given(data=st.data(), kind=_kinds, value=_stored_values)
def test_a_stored_reserved_name_is_refused_on_load(data: st.DataObject, kind: _Kind, value: object) -> None:
    name = data.draw(_reserved_names(kind), label="name")
    instance = kind.make(data.draw(kind.fields, label="fields"))
    _refused_at_load(instance, lambda record: record[2].update({name: _stored(value)}))


@_PROPERTY_SETTINGS
@given(data=st.data(), kind=_kinds, value=_stored_values)
def test_a_live_reserved_name_is_refused_on_save(data: st.DataObject, kind: _Kind, value: object) -> None:
    name = data.draw(_reserved_names(kind), label="name")
    instance = kind.make(data.draw(kind.fields, label="fields"))
    vars(instance)[name] = _live(value)
    _refused_at_save(instance)


@_PROPERTY_SETTINGS
@given(kind=_kinds, data=st.data())
def test_declared_fields_of_every_kind_round_trip(kind: _Kind, data: st.DataObject) -> None:
    instance = kind.make(data.draw(kind.fields, label="fields"))
    restored = _round_trip(instance)
    assert type(restored) is type(instance)
    assert vars(restored) == vars(instance)
    for slot in _PYDANTIC_SLOTS if kind.cls is ModelThing else ():
        assert getattr(restored, slot) == getattr(instance, slot)
    for name in ("count", "tag", "x", "y"):
        if isinstance(vars(type(instance)).get(name), types.MemberDescriptorType):
            assert getattr(restored, name) == getattr(instance, name)
    assert CALLS == []


_undeclared_private = _PROTOCOL_NAMES | st.from_regex(r"_[a-z]{1,8}", fullmatch=True).filter(
    lambda name: name not in ModelThing.__private_attributes__
)
_malformed_fields_sets = st.sampled_from(
    [
        (["name"], ["name"]),
        (("S", 7), {7}),
        (None, None),
        (("t", "name"), ("name",)),
        ({"name": 1}, {"name": 1}),
    ]
)


@_PROPERTY_SETTINGS
@given(
    fields=_KINDS[5].fields,
    slot=st.sampled_from(_PYDANTIC_SLOTS),
    extra=_PROTOCOL_NAMES,
    private=_undeclared_private,
    fields_set=_malformed_fields_sets,
)
def test_pydantic_machinery_in_a_model_is_refused_on_load_and_save(
    fields: dict[str, Any], slot: str, extra: str, private: str, fields_set: tuple[object, object]
) -> None:
    model = _make_model(fields)

    def plant(record: list[Any]) -> None:
        if slot == "__pydantic_extra__":
            record[3][slot][extra] = _planted()
        elif slot == "__pydantic_private__":
            record[3][slot][private] = _planted()
        else:
            record[3][slot] = fields_set[0]

    _refused_at_load(model, plant)
    if slot == "__pydantic_extra__":
        cast("dict[str, object]", model.__pydantic_extra__)[extra] = Planted
    elif slot == "__pydantic_private__":
        cast("dict[str, object]", model.__pydantic_private__)[private] = Planted
    else:
        object.__setattr__(model, slot, fields_set[1])
    _refused_at_save(model)
