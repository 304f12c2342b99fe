"""The walk's per-class encoders and per-layout knowledge (ADR 0028) never change what is stored.

Each class met gets an encoder made once per walk, and instances whose ``__dict__`` has names
already seen reuse what those names decided: the attribute-name check, the key order and, for a
framework class, which fields its ``__getstate__`` leaves out. So an instance's encoding must not
depend on what the walk met before it: every instance below is encoded alone and after each of
the others, and each refusal still happens after clean instances of the same layout.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

import pytest
from agent_framework import Content, Message

from agent_framework_mongodb.checkpoints.codec import CANONICAL_HEADER, canonical_form
from agent_framework_mongodb.checkpoints.codec.rules import TypeResolver, type_key
from agent_framework_mongodb.checkpoints.codec.walk import walk_value
from agent_framework_mongodb.errors import MongoDBSerializationError
from tests.unit.codec.state_types import Plain

_ALLOWED: Final = (type_key(Plain),)


def _text() -> Content:
    return Content.from_text("hello")


def _with_raw() -> Content:
    content = Content.from_text("raw")
    content.raw_representation = {"sdk": "response"}
    return content


def _without_omitted_field() -> Content:
    # __getstate__ has nothing to leave out, so the stored state is its own dict.
    content = Content.from_text("no raw")
    del content.__dict__["raw_representation"]
    return content


def _with_extra_field() -> Content:
    content = Content.from_text("extra")
    content.__dict__["extra_field"] = [1, 2]
    return content


def _reordered() -> Content:
    content = Content.from_text("reordered")
    text = content.__dict__.pop("text")
    content.__dict__["text"] = text
    return content


def _empty() -> Message:
    message = Message(role="user", contents=[])
    message.__dict__.clear()
    return message


def _call() -> Content:
    return Content.from_function_call(call_id="c1", name="lookup", arguments={"id": 1, "all": True})


def _message() -> Message:
    return Message(role="user", contents=[Content.from_text("in a message")], message_id="m1")


def _plain() -> Plain:
    return Plain(a=1, b="two")


def _plain_other_layout() -> Plain:
    return Plain(b="two", a=1, c=None)


def _plain_empty() -> Plain:
    return Plain()


_INSTANCES: Final[tuple[Callable[[], object], ...]] = (
    _text, _with_raw, _without_omitted_field, _with_extra_field, _reordered, _empty, _call, _message,
    _plain, _plain_other_layout, _plain_empty,
)  # fmt: skip


def _alone(build: Callable[[], object]) -> tuple[bytes, Any]:
    walked = walk_value(build(), TypeResolver(_ALLOWED))
    return bytes(walked.canonical[len(CANONICAL_HEADER) :]), walked.tree


@pytest.mark.parametrize(
    ("first", "second"),
    list(itertools.product(_INSTANCES, repeat=2)),
    ids=lambda build: build.__name__.strip("_"),
)
def test_an_instance_encodes_as_it_does_alone_whatever_came_before(
    first: Callable[[], object], second: Callable[[], object]
) -> None:
    walked = walk_value([first(), first(), second()], TypeResolver(_ALLOWED))
    (first_bytes, first_tree), (second_bytes, second_tree) = _alone(first), _alone(second)
    assert walked.canonical == CANONICAL_HEADER + b"l" + struct.pack(">I", 3) + first_bytes * 2 + second_bytes
    assert walked.tree == [first_tree, first_tree, second_tree]


@pytest.mark.parametrize("build", [_text, _message, _plain], ids=lambda build: build.__name__.strip("_"))
def test_a_hook_name_after_clean_instances_of_its_layout_is_refused(build: Callable[[], object]) -> None:
    clean = [build() for _ in range(3)]
    armed = build()
    armed.__dict__["__deepcopy__"] = None
    with pytest.raises(MongoDBSerializationError, match="__deepcopy__"):
        canonical_form([*clean, armed], _ALLOWED)


def test_a_second_class_of_the_same_name_is_refused_not_encoded_as_the_first() -> None:
    impostor = type("Plain", (), {"__module__": Plain.__module__, "__qualname__": Plain.__qualname__})
    for value in ([Plain(a=1), impostor()], [impostor(), Plain(a=1)]):
        with pytest.raises(MongoDBSerializationError, match="not the class its name resolves to"):
            canonical_form(value, _ALLOWED)


def test_a_key_that_is_not_a_str_is_encoded_once_and_counted_once() -> None:
    walked = walk_value({Decimal("1.50"): "a", "b": [Decimal("2")]}, TypeResolver(()))
    assert walked.tree == ("m", ("M", "1.50"), "a", "b", [("M", "2")])
    assert walked.copied == len("1.50") + len("2")
