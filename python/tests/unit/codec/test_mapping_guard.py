"""The mapping guard runs no application hook (issue 30; specs/codec.md rule 4).

The codec refuses mapping classes other than exact ``dict``. Asked as ``issubclass(cls, Mapping)``,
that question runs ``Mapping``'s ABC machinery, which asks every ABC deriving from ``Mapping`` in
the process: each one's ``__subclasshook__``, and the ``__subclasscheck__`` of its metaclass, is
called with the class in question. On load, the payload chooses that class. The guard reads the
classes' MROs and the ABCs' registries instead, on save and on load, so none of those hooks runs;
registered mappings are still refused.
"""

from __future__ import annotations

import abc
import pickle
from collections.abc import Iterator, Mapping
from typing import Any, Final, cast

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import MongoDBMappingError, MongoDBSerializationError
from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, payload_checksum
from agent_framework_mongodb.checkpoints.codec.rules import is_mapping_class

HOOK_CALLS: list[str] = []
"""Every call into an application hook of this module appends here."""


class _Mapping(Mapping[str, object]):
    """The methods a concrete Mapping needs; the classes below add their hooks."""

    def __getitem__(self, key: str) -> object:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class HookedMapping(_Mapping):
    """An application's Mapping ABC with a ``__subclasshook__`` that claims ``ClaimedMapping``."""

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        HOOK_CALLS.append(f"__subclasshook__({other.__name__})")
        return True if other.__name__ == "ClaimedMapping" else NotImplemented


class RecordingMeta(abc.ABCMeta):
    """A metaclass whose ``issubclass``/``isinstance`` hooks record every question."""

    def __subclasscheck__(cls, other: type) -> bool:
        HOOK_CALLS.append(f"__subclasscheck__({other.__name__})")
        return super().__subclasscheck__(other)

    def __instancecheck__(cls, instance: object) -> bool:
        HOOK_CALLS.append(f"__instancecheck__({type(instance).__name__})")
        return super().__instancecheck__(instance)


class MetaHookedMapping(_Mapping, metaclass=RecordingMeta):
    """A Mapping ABC of that metaclass."""


class Sample:
    """An ordinary allowed class: a load that plans it asks whether it is a mapping."""

    def __init__(self, value: int = 1) -> None:
        self.value = value


class SavedSample(Sample):
    """Another allowed class, asked about by a save first (ABCs cache their answers per class)."""


class ClaimedMapping:
    """A plain class that only ``HookedMapping.__subclasshook__`` calls a mapping."""

    def __init__(self) -> None:
        self.value = 2


class RegisteredMapping:
    """A plain class registered with an application's Mapping ABC, not derived from Mapping."""

    def __init__(self) -> None:
        self.value = 3


HookedMapping.register(RegisteredMapping)


def _key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


_ALLOWED: Final = tuple(_key(cls) for cls in (Sample, SavedSample, ClaimedMapping, RegisteredMapping))


@pytest.fixture(autouse=True)
def _fresh_abc_caches() -> Iterator[None]:
    # ABCs cache their answers; a process that never asked about a class before runs the hooks.
    for abc_class in (Mapping, _Mapping, HookedMapping, MetaHookedMapping):
        cast(Any, abc_class)._abc_caches_clear()
    HOOK_CALLS.clear()
    yield
    HOOK_CALLS.clear()


def _checkpoint(value: object) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="g" * 64,
        checkpoint_id="cp-mapping-guard",
        timestamp="2025-01-01T00:00:00+00:00",
        state={"value": value},
    )


def _payload(record: tuple[Any, ...]) -> bytes:
    """A payload whose state holds ``record``: the tree a writer chooses."""
    codec = CheckpointCodec(_ALLOWED)
    tree = pickle.loads(codec.encode(_checkpoint(None)).payload)
    tree["state"]["value"] = record
    return pickle.dumps(tree, protocol=5)


def _decode(payload: bytes) -> object:
    # A new codec: its resolver has planned no class yet, as in a process that just started.
    return CheckpointCodec(_ALLOWED).decode(payload, checksum=payload_checksum(payload)).state["value"]


def test_the_hooks_answer_issubclass() -> None:
    # What the guard used to call: issubclass(cls, Mapping) asks every Mapping ABC's hooks.
    assert not issubclass(Sample, Mapping)
    assert HOOK_CALLS == ["__subclasshook__(Sample)", "__subclasscheck__(Sample)"]
    HOOK_CALLS.clear()
    assert issubclass(ClaimedMapping, Mapping)
    assert "__subclasshook__(ClaimedMapping)" in HOOK_CALLS


def test_no_application_hook_runs_on_load() -> None:
    restored = _decode(_payload(("o", _key(Sample), {"value": 5}, None)))
    assert type(restored) is Sample
    assert restored.value == 5
    assert HOOK_CALLS == []


def test_no_application_hook_runs_on_save() -> None:
    encoded = CheckpointCodec(_ALLOWED).encode(_checkpoint(SavedSample(7)))
    assert HOOK_CALLS == []
    assert type(_decode(encoded.payload)) is SavedSample
    assert HOOK_CALLS == []


def test_a_class_only_a_hook_calls_a_mapping_is_stored_as_an_object() -> None:
    # The hook is not asked, on save or on load: the class is a plain object to the codec.
    encoded = CheckpointCodec(_ALLOWED).encode(_checkpoint(ClaimedMapping()))
    assert type(_decode(encoded.payload)) is ClaimedMapping
    assert not is_mapping_class(ClaimedMapping)
    assert HOOK_CALLS == []


def test_registered_and_derived_mappings_are_refused_without_running_hooks() -> None:
    assert is_mapping_class(RegisteredMapping)
    assert is_mapping_class(HookedMapping)
    assert is_mapping_class(MetaHookedMapping)
    assert is_mapping_class(dict)
    assert not is_mapping_class(Sample)
    with pytest.raises(MongoDBSerializationError, match="mapping class"):
        CheckpointCodec(_ALLOWED).encode(_checkpoint(RegisteredMapping()))
    with pytest.raises(MongoDBMappingError, match="mapping class"):
        _decode(_payload(("o", _key(RegisteredMapping), {"value": 3}, None)))
    assert HOOK_CALLS == []


def test_a_class_attribute_named_like_abc_data_is_not_a_registry() -> None:
    class Odd:
        _abc_impl = "not abc data"

    HookedMapping.register(Odd)  # Odd's own namespace is read as a registry holder: nothing there
    HOOK_CALLS.clear()
    assert is_mapping_class(Odd)
    assert not is_mapping_class(Sample)


def test_a_registration_made_later_is_seen() -> None:
    class Late:
        pass

    assert not is_mapping_class(Late)
    HookedMapping.register(Late)  # register asks issubclass(Late, HookedMapping) itself
    HOOK_CALLS.clear()
    assert is_mapping_class(Late)
    assert HOOK_CALLS == []
