"""Chunks of a walked tree: split and join round-trip, appends leave earlier leaves alone, and a
stored leaf someone else wrote is verified, bounded and loaded through the restricted loader."""

from __future__ import annotations

import pickle
import zlib
from typing import Any

import pytest
from agent_framework import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_framework_mongodb.checkpoints.codec.chunks import (
    REFERENCE_TAG,
    Chunk,
    Chunker,
    ChunkReader,
    SplitTree,
    prove_chunk,
    references,
)
from agent_framework_mongodb.checkpoints.codec.rebuild import rebuild_tree
from agent_framework_mongodb.checkpoints.codec.rules import TypeResolver
from agent_framework_mongodb.checkpoints.codec.walk import MAX_NESTING, walk_value
from agent_framework_mongodb.errors import MongoDBMappingError, MongoDBSerializationError

CONTEXT = b"scope-a/tree-chunks/v1"
BUDGET = 64 * 1024 * 1024
SMALL = {"split_above": 256, "leaf_bytes": 512, "tail_modulus": 2}


def conversation_tree(turns: int) -> Any:
    """The walked tree of a state holding a conversation the way AgentExecutor holds it."""
    messages = [
        Message(role="user" if i % 2 else "assistant", contents=[f"message {i} " * 8]) for i in range(turns)
    ]
    state = {
        "full_conversation": messages,
        "session": {"messages": [m.to_dict() for m in messages]},
        "step": turns,
    }
    return walk_value(state, TypeResolver(())).tree


def join(split: SplitTree, *, context: bytes = CONTEXT, budget: int = BUDGET) -> Any:
    """What a load does: fetch what the root wants, level by level, then join."""
    stored = {chunk.address: chunk.data for chunk in split.chunks}
    reader = ChunkReader(context, split.root, budget=budget)
    while wanted := reader.wanted():
        for address in wanted:
            if address in stored:
                reader.add(address, stored[address])
            else:
                return reader.join()  # let the join report what is missing
    return reader.join()


def addresses(split: SplitTree) -> set[bytes]:
    return {chunk.address for chunk in split.chunks}


def test_a_small_tree_is_not_split() -> None:
    tree = conversation_tree(3)

    split = Chunker(CONTEXT).split(tree)

    assert split.chunks == ()
    assert split.root == tree


def test_a_long_conversation_splits_and_joins_back_equal() -> None:
    tree = conversation_tree(400)

    split = Chunker(CONTEXT).split(tree)

    assert len(split.chunks) > 2
    assert len(pickle.dumps(split.root)) < len(pickle.dumps(tree)) // 10
    assert join(split) == tree
    restored = rebuild_tree(join(split), TypeResolver(()), check_root=lambda _: None, payload_size=BUDGET)
    assert isinstance(restored, dict)
    assert restored["full_conversation"][399].text == "message 399 " * 8


def test_appending_leaves_every_earlier_leaf_unchanged() -> None:
    chunker = Chunker(CONTEXT, split_above=8192, leaf_bytes=4096, tail_modulus=2)
    before = chunker.split(conversation_tree(300))
    after = chunker.split(conversation_tree(302))

    new = [chunk for chunk in after.chunks if chunk.address not in addresses(before)]
    dropped = addresses(before) - addresses(after)

    # Two messages were appended to each of two lists: only those lists' last leaves change.
    assert len(dropped) <= 2, "at most each list's open tail leaf is replaced"
    assert 1 <= len(new) <= 4
    assert sum(len(chunk.data) for chunk in new) < sum(len(chunk.data) for chunk in after.chunks) // 10


def test_a_closed_leaf_is_cut_at_the_leaf_size_and_never_moves() -> None:
    chunker = Chunker(CONTEXT, split_above=256, leaf_bytes=1024, tail_modulus=4)
    lengths = [len(chunker.split(list(range(0, n * 1000, 1000))).chunks) for n in (300, 600)]
    first = chunker.split([str(i) * 20 for i in range(300)])
    longer = chunker.split([str(i) * 20 for i in range(600)])

    assert lengths[1] > lengths[0]
    root_refs = list(references(first.root))
    longer_refs = list(references(longer.root))
    closed = [address for address in root_refs if address in longer_refs]
    assert len(closed) >= len(root_refs) - 2
    assert longer_refs[: len(closed)] == closed


def test_large_strings_and_bytes_become_pieces_even_inside_leaves() -> None:
    text = "é" * 100_000
    blob = bytes(range(256)) * 400
    items: list[Any] = [
        {"text": text, "blob": blob, "n": 0},
        *({"n": i, "note": "y" * 30} for i in range(1, 300)),
    ]
    tree = {"items": items, "alone": text}

    split = Chunker(CONTEXT, split_above=4096, leaf_bytes=8192).split(tree)
    reader = ChunkReader(CONTEXT, split.root, budget=BUDGET)
    stored = {chunk.address: chunk.data for chunk in split.chunks}
    levels = 0
    while wanted := reader.wanted():
        levels += 1
        for address in wanted:
            reader.add(address, stored[address])

    assert reader.join() == tree
    assert levels == 2, "pieces inside a list's leaves are a second level"
    assert max(len(chunk.data) for chunk in split.chunks) < 16 * 1024, "compressed pieces of 8 KiB"


def test_equal_parts_share_one_chunk_but_join_into_separate_containers() -> None:
    part = [f"entry {i}" for i in range(200)]
    tree = {"a": list(part), "b": list(part)}

    split = Chunker(CONTEXT, **SMALL).split(tree)
    joined = join(split)

    assert joined == tree
    assert joined["a"] is not joined["b"]
    assert len(split.chunks) == len(addresses(split))


def test_dicts_split_by_entry_keep_their_order() -> None:
    tree = {f"key-{i:04d}": {"value": i, "text": "x" * 40} for i in range(500, 0, -1)}

    joined = join(Chunker(CONTEXT, **SMALL).split(tree))

    assert joined == tree
    assert list(joined) == list(tree)


_leaf_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300) | st.binary(max_size=300),
    lambda children: (
        st.lists(children, max_size=12)
        | st.dictionaries(st.text(max_size=6), children, max_size=8)
        | st.tuples(st.just("t"), children)
    ),
    max_leaves=80,
)


@settings(max_examples=150, deadline=None)
@given(_leaf_values, st.integers(min_value=16, max_value=400), st.integers(min_value=1, max_value=8))
def test_any_tree_joins_back_equal(tree: Any, split_above: int, tail_modulus: int) -> None:
    split = Chunker(
        CONTEXT, split_above=split_above, leaf_bytes=split_above, tail_modulus=tail_modulus
    ).split(tree)

    assert join(split) == tree


# -- Stored leaves someone else wrote -------------------------------------------------------------


@pytest.fixture
def split() -> SplitTree:
    return Chunker(CONTEXT, **SMALL).split(conversation_tree(60))


def _direct(split: SplitTree) -> Chunk:
    """A leaf the root itself references (the first one a load reads)."""
    direct = set(references(split.root))
    return next(chunk for chunk in split.chunks if chunk.address in direct)


def test_a_modified_leaf_is_refused(split: SplitTree) -> None:
    chunk = _direct(split)
    damaged = bytearray(chunk.data)
    damaged[len(damaged) // 2] ^= 1
    reader = ChunkReader(CONTEXT, split.root, budget=BUDGET)

    with pytest.raises(MongoDBMappingError, match="does not match its address"):
        reader.add(chunk.address, bytes(damaged))


def test_a_leaf_of_another_run_is_refused(split: SplitTree) -> None:
    reader = ChunkReader(b"scope-b/tree-chunks/v1", split.root, budget=BUDGET)

    with pytest.raises(MongoDBMappingError, match="another run"):
        reader.add(_direct(split).address, _direct(split).data)


def test_a_missing_leaf_fails_the_whole_load(split: SplitTree) -> None:
    partial = SplitTree(split.root, split.chunks[1:])

    with pytest.raises(MongoDBMappingError, match="missing"):
        join(partial)


def _forged(kind: bytes, body: bytes) -> Chunk:
    data = zlib.compress(kind + body)
    return Chunk(_address_for(data), data)


def _body(*elements: object, protocol: int = 5) -> bytes:
    """A list or dict leaf's body: one pickle of the list of its elements."""
    return pickle.dumps(list(elements), protocol=protocol)


def _address_for(data: bytes) -> bytes:
    # Anyone who can write the collection can compute an address: it is integrity, not authenticity.
    from agent_framework_mongodb.checkpoints.codec.chunks import leaf_address

    return leaf_address(CONTEXT, data)


def _reading(chunk: Chunk, reference_kind: str = "l") -> Any:
    root = {"value": (REFERENCE_TAG, reference_kind, [chunk.address])}
    reader = ChunkReader(CONTEXT, root, budget=BUDGET)
    reader.add(chunk.address, chunk.data)
    return reader.join()


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("pwned",))


@pytest.mark.parametrize(
    ("chunk", "reason"),
    [
        (_forged(b"l", b"\x00\x00\x00\x09" + pickle.dumps([1])), "truncated"),
        (_forged(b"l", b"\x00\x00\x00\x00"), "truncated"),
        (_forged(b"l", b"\x00\x00"), "truncated"),
        (_forged(b"l", _body([1])[:-1]), "truncated"),
        (_forged(b"l", _body([1]) + b"."), "bytes follow the end"),
        (_forged(b"l", _body()), "truncated or malformed"),
        (_forged(b"l", pickle.dumps({"not": "a list"})), "truncated or malformed"),
        (_forged(b"x", b"anything"), "unknown kind"),
        (_forged(b"", b""), "empty"),
    ],
)
def test_a_malformed_leaf_is_refused(chunk: Chunk, reason: str) -> None:
    with pytest.raises(MongoDBMappingError, match=reason):
        _reading(chunk)


def test_a_leaf_with_a_global_never_runs_code(capsys: pytest.CaptureFixture[str]) -> None:
    chunk = _forged(b"l", pickle.dumps([_Evil()]))

    with pytest.raises(MongoDBMappingError):
        _reading(chunk)
    assert "pwned" not in capsys.readouterr().out


def test_a_reference_of_another_kind_is_refused() -> None:
    chunk = _forged(b"b", b"raw bytes")

    assert _reading(chunk, "b") == {"value": b"raw bytes"}
    with pytest.raises(MongoDBMappingError, match="kind"):
        _reading(chunk, "l")


def test_repeated_dict_entries_are_refused() -> None:
    body = _body(["same", 1], ["same", 1])

    with pytest.raises(MongoDBMappingError, match="repeated key"):
        _reading(_forged(b"d", body), "d")


def test_a_decompression_bomb_stops_at_the_budget() -> None:
    chunk = _forged(b"b", b"\x00" * (8 * 1024 * 1024))
    reader = ChunkReader(CONTEXT, (REFERENCE_TAG, "b", [chunk.address]), budget=1024 * 1024)

    with pytest.raises(MongoDBMappingError, match="size limit"):
        reader.add(chunk.address, chunk.data)


def test_references_repeated_many_times_exhaust_the_budget() -> None:
    chunk = _forged(b"b", b"x" * 1000)
    root = (REFERENCE_TAG, "b", [chunk.address] * 5000)
    reader = ChunkReader(CONTEXT, root, budget=1024 * 1024)
    reader.add(chunk.address, chunk.data)

    with pytest.raises(MongoDBMappingError, match="size limit"):
        reader.join()


@pytest.mark.parametrize(
    "record",
    [
        (REFERENCE_TAG, "l"),
        (REFERENCE_TAG, "q", [b"\x00" * 32]),
        (REFERENCE_TAG, "l", []),
        (REFERENCE_TAG, "l", [b"short"]),
        (REFERENCE_TAG, "l", ["text" * 8]),
        (REFERENCE_TAG, "l", (b"\x00" * 32,)),
    ],
)
def test_a_malformed_reference_is_refused(record: tuple[Any, ...]) -> None:
    with pytest.raises(MongoDBMappingError, match="malformed chunk reference"):
        ChunkReader(CONTEXT, {"value": record}, budget=BUDGET)


def test_an_unjoined_reference_is_refused_by_the_rebuild(split: SplitTree) -> None:
    with pytest.raises(MongoDBMappingError):
        rebuild_tree(split.root, TypeResolver(()), check_root=lambda _: None, payload_size=BUDGET)


def test_references_nested_too_deeply_are_refused() -> None:
    def chain(levels: int) -> tuple[Any, dict[bytes, Chunk]]:
        chunks: dict[bytes, Chunk] = {}
        inner: Any = [1]
        for _ in range(levels):
            chunk = _forged(b"l", _body([inner]))
            chunks[chunk.address] = chunk
            inner = (REFERENCE_TAG, "l", [chunk.address])
        return {"value": inner}, chunks

    def read(levels: int) -> None:
        root, chunks = chain(levels)
        reader = ChunkReader(CONTEXT, root, budget=BUDGET)
        while wanted := reader.wanted():
            for address in wanted:
                reader.add(address, chunks[address].data)

    # As deep as a save can nest (MAX_NESTING containers), and no deeper.
    read(MAX_NESTING)
    with pytest.raises(MongoDBMappingError, match="too deeply"):
        read(MAX_NESTING + 1)


def test_the_reference_mark_is_how_pickle_writes_the_tag() -> None:
    from agent_framework_mongodb.checkpoints.codec.chunks import _REFERENCE_MARK

    assert _REFERENCE_MARK in pickle.dumps([{"x": (REFERENCE_TAG, "l", [b"\x00" * 32])}], protocol=5)


def test_a_reference_spelled_another_way_stays_unresolved_and_is_refused() -> None:
    target = _forged(b"b", b"content")
    # Protocol 3 writes text as BINUNICODE (4-byte length), never SHORT_BINUNICODE: no mark.
    holder = _forged(b"l", _body([(REFERENCE_TAG, "b", [target.address])], protocol=3))
    root = {"items": (REFERENCE_TAG, "l", [holder.address])}
    reader = ChunkReader(CONTEXT, root, budget=BUDGET)
    reader.add(holder.address, holder.data)

    assert reader.wanted() == set()
    with pytest.raises(MongoDBMappingError, match="not one its checkpoint references"):
        reader.add(target.address, target.data)
    joined = reader.join()
    assert joined["items"][0][0] == (REFERENCE_TAG, "b", [target.address])  # type: ignore[index]
    with pytest.raises(MongoDBMappingError):
        rebuild_tree(joined, TypeResolver(()), check_root=lambda _: None, payload_size=BUDGET)


# -- Determinism ----------------------------------------------------------------------------------


def _fresh(text: str) -> str:
    """An equal string that is another object."""
    copy = text.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
    assert len(text) < 2 or copy is not text  # one-character strings are cached
    return copy


def _unshared(node: Any) -> Any:
    """An equal tree in which no string is an object found anywhere else in it."""
    if type(node) is str:
        return _fresh(node)
    if type(node) is list:
        return [_unshared(item) for item in node]
    if type(node) is tuple:
        return tuple(_unshared(item) for item in node)
    if type(node) is dict:
        return {_fresh(key): _unshared(value) for key, value in node.items()}
    return node


def _stored(split: SplitTree) -> list[tuple[bytes, bytes]]:
    return [(chunk.address, chunk.data) for chunk in split.chunks]


def test_equal_content_splits_the_same_whichever_strings_are_shared() -> None:
    text = "a line said twice in one message, " * 3
    shared = [{"said": text, "again": text, "n": i} for i in range(300)]
    unshared = [{"said": _fresh(text), "again": _fresh(text), "n": i} for i in range(300)]
    # What a memo-based pickle would do: equal elements, other bytes (another leaf address).
    assert shared[0] == unshared[0]
    assert pickle.dumps(shared[0], protocol=5) != pickle.dumps(unshared[0], protocol=5)

    one = Chunker(CONTEXT, **SMALL).split(shared)
    other = Chunker(CONTEXT, **SMALL).split(unshared)

    assert one.chunks
    assert one.root == other.root
    assert _stored(one) == _stored(other)


def test_a_real_conversation_splits_the_same_once_its_sharing_is_undone() -> None:
    tree = conversation_tree(120)
    copy = _unshared(tree)
    assert copy == tree
    assert pickle.dumps(copy, protocol=5) != pickle.dumps(tree, protocol=5), "the walk's tree shares strings"

    one = Chunker(CONTEXT, **SMALL).split(tree)
    other = Chunker(CONTEXT, **SMALL).split(copy)

    assert one.root == other.root
    assert _stored(one) == _stored(other)


def test_a_reused_chunker_splits_as_a_new_one_and_compresses_only_new_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chunker = Chunker(CONTEXT, split_above=8192, leaf_bytes=4096, tail_modulus=2)
    before = chunker.split(conversation_tree(300))
    compress = zlib.compress
    calls: list[int] = []

    def counting(data: bytes, /, level: int = -1) -> bytes:
        calls.append(len(data))
        return compress(data, level)

    monkeypatch.setattr(zlib, "compress", counting)
    after = chunker.split(conversation_tree(302))
    monkeypatch.undo()

    fresh = Chunker(CONTEXT, split_above=8192, leaf_bytes=4096, tail_modulus=2).split(conversation_tree(302))
    assert after.root == fresh.root
    assert _stored(after) == _stored(fresh)
    new = [chunk for chunk in after.chunks if chunk.address not in addresses(before)]
    assert 1 <= len(calls) == len(new) < len(after.chunks) // 4


# -- Save-time proof of leaves --------------------------------------------------------------------


def _trees() -> list[Any]:
    text = "é" * 50_000
    return [
        conversation_tree(400),
        {"items": [{"text": text, "blob": bytes(range(256)) * 200, "n": 0}, *({"n": i} for i in range(300))]},
        {f"key-{i:04d}": {"value": i, "text": "x" * 40} for i in range(500)},
        ("t", [("t", i) for i in range(2000)]),
    ]


@pytest.mark.parametrize("tree", _trees())
def test_every_leaf_of_a_split_proves(tree: Any) -> None:
    split = Chunker(CONTEXT, split_above=4096, leaf_bytes=8192).split(tree)

    assert split.chunks
    for chunk in split.chunks:
        assert chunk.parts
        prove_chunk(CONTEXT, chunk, budget=BUDGET)


def test_the_parts_are_what_the_split_placed_in_each_leaf() -> None:
    items = [str(i) * 20 for i in range(300)]
    text = "é" * 20_000
    mapping = {f"key-{i}": i for i in range(400)}
    tree = {"items": items, "text": text, "mapping": mapping}

    split = Chunker(CONTEXT, split_above=4096, leaf_bytes=8192).split(tree)
    by_address = {chunk.address: chunk for chunk in split.chunks}

    def content(record: Any) -> list[Any]:
        return [part for address in record[2] for part in by_address[address].parts]

    root = split.root
    assert isinstance(root, dict)
    assert content(root["items"]) == items
    assert content(root["mapping"]) == [[key, value] for key, value in mapping.items()]
    assert b"".join(content(root["text"])) == text.encode()
    assert all(type(part) is bytes for part in content(root["text"]))


def _altered(chunk: Chunk, how: str) -> Chunk:
    data = bytearray(chunk.data)
    if how == "bit flip":
        data[len(data) // 2] ^= 1
        return Chunk(chunk.address, bytes(data), chunk.parts)
    if how == "truncated":
        return Chunk(chunk.address, chunk.data[:-3], chunk.parts)
    if how == "readdressed":  # consistent with its address, but not what the split placed
        forged = _forged(b"l", _body(["another element"]))
        return Chunk(forged.address, forged.data, chunk.parts)
    if how == "other parts":
        return Chunk(chunk.address, chunk.data, (*chunk.parts[:-1], "something else"))
    if how == "fewer parts":
        return Chunk(chunk.address, chunk.data, chunk.parts[:-1])
    assert how == "no parts"
    return Chunk(chunk.address, chunk.data)


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("bit flip", "does not match its address"),
        ("truncated", "does not match its address"),
        ("readdressed", "other content"),
        ("other parts", "other content"),
        ("fewer parts", "other content"),
        ("no parts", "other content"),
    ],
)
def test_an_altered_leaf_does_not_prove(split: SplitTree, how: str, reason: str) -> None:
    chunk = next(chunk for chunk in split.chunks if len(chunk.parts) > 1)
    prove_chunk(CONTEXT, chunk, budget=BUDGET)

    with pytest.raises(MongoDBSerializationError, match=reason):
        prove_chunk(CONTEXT, _altered(chunk, how), budget=BUDGET)


def test_a_leaf_of_another_context_or_over_the_budget_does_not_prove(split: SplitTree) -> None:
    chunk = max(split.chunks, key=lambda chunk: len(zlib.decompress(chunk.data)))

    with pytest.raises(MongoDBSerializationError, match="another run"):
        prove_chunk(b"scope-b/tree-chunks/v1", chunk, budget=BUDGET)
    with pytest.raises(MongoDBSerializationError, match="size limit"):
        prove_chunk(CONTEXT, chunk, budget=len(zlib.decompress(chunk.data)) - 1)


def test_a_leaf_the_restricted_loader_refuses_does_not_prove() -> None:
    chunk = _forged(b"l", pickle.dumps([_Evil()]))

    with pytest.raises(MongoDBSerializationError, match="would not load again"):
        prove_chunk(CONTEXT, Chunk(chunk.address, chunk.data, (_Evil(),)), budget=BUDGET)


# -- What the split pickles -----------------------------------------------------------------------


def _nested(depth: int) -> Any:
    if depth == 0:
        return {"a": 1, "b": "text value", "c": None}
    return {f"k{i}": _nested(depth - 1) for i in range(8)}


def _counting_whole_pickles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from agent_framework_mongodb.checkpoints.codec import chunks

    sizes: list[int] = []
    whole = chunks._pickled_size

    def counting(node: object) -> int:
        sizes.append(whole(node))
        return sizes[-1]

    monkeypatch.setattr(chunks, "_pickled_size", counting)
    return sizes


def test_small_containers_above_long_lists_are_never_pickled_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = conversation_tree(400)
    sizes = _counting_whole_pickles(monkeypatch)

    split = Chunker(CONTEXT).split(tree)

    assert len(split.chunks) > 2
    assert sizes == []


def test_a_tree_of_many_small_dicts_is_pickled_in_c_not_walked_node_by_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tree = walk_value(_nested(4), TypeResolver(())).tree  # 4,681 dicts, no long list
    sizes = _counting_whole_pickles(monkeypatch)

    split = Chunker(CONTEXT).split(tree)

    assert join(split) == tree
    assert 8 <= len(sizes) < 200
    assert sum(sizes) < 3 * len(pickle.dumps(tree, protocol=5))


@pytest.mark.parametrize(
    "tree",
    [
        {"items": [7] * 50_000},
        {"shared": ["x" * 40_000] * 6},
        {"nested": [{"text": "y" * 20_000, "n": n} for n in range(8)], "tail": list(range(9_000))},
    ],
    ids=["repeated-ints", "one-string-six-times", "nested-pieces"],
)
def test_join_cost_is_what_the_join_charges(tree: dict[str, Any]) -> None:
    from agent_framework_mongodb.checkpoints.codec.chunks import join_cost

    split = Chunker(CONTEXT).split(tree)
    assert split.chunks
    root = pickle.loads(pickle.dumps(split.root, protocol=5))
    cost = join_cost(split.root, split.chunks)
    for budget, joins in ((cost, True), (cost - 1, False)):
        reader = ChunkReader(CONTEXT, pickle.loads(pickle.dumps(root, protocol=5)), budget=budget)
        while wanted := reader.wanted():
            for chunk in split.chunks:
                if chunk.address in wanted:
                    reader.add(chunk.address, chunk.data)
        if joins:
            assert reader.join() == tree
        else:
            with pytest.raises(MongoDBMappingError, match="size limit"):
                reader.join()
