"""The transplant's invariant (``codec/transplant.py``, ADR 0040): moving ``split(tree)`` from one
chunk context to another gives, byte for byte, ``split(tree)`` in the other context, root and leaves;
where it cannot, it says so (``NotTransplantable``) and the caller re-encodes."""

from __future__ import annotations

import copy
import pickle
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_framework_mongodb.checkpoints.codec import EncodedCheckpoint, payload_checksum
from agent_framework_mongodb.checkpoints.codec.chunks import Chunker, SplitTree, leaf_address
from agent_framework_mongodb.checkpoints.codec.transplant import NotTransplantable, Transplanter
from agent_framework_mongodb.errors import MongoDBMappingError

from .test_chunks import BUDGET, SMALL, conversation_tree, join

SOURCE = b"scope-a/tree-chunks/v1"
TARGET = b"scope-b/tree-chunks/v1"


def stored(split: SplitTree) -> tuple[bytes, dict[bytes, bytes]]:
    """What a save stores: the root's pickle, and the leaves by address."""
    return pickle.dumps(split.root, protocol=5), {chunk.address: chunk.data for chunk in split.chunks}


def move(
    payload: bytes,
    leaves: dict[bytes, bytes],
    transplanter: Transplanter,
) -> EncodedCheckpoint:
    root = transplanter.open(payload, payload_checksum(payload))
    transplanter.offer({address: leaves[address] for address in transplanter.wanted(root, leaves)})
    return transplanter.transplant(payload, root, payload_hash="h", logical_bytes=0)


def assert_same_as_a_split_in_the_target(tree: object, settings_: dict[str, int]) -> bool:
    """The invariant for one tree; False when the transplant declined (its caller re-encodes)."""
    payload, leaves = stored(Chunker(SOURCE, **settings_).split(tree))
    expected_root, expected_leaves = stored(Chunker(TARGET, **settings_).split(tree))
    transplanter = Transplanter(
        SOURCE, TARGET, max_checkpoint_bytes=BUDGET, chunker=Chunker(TARGET, **settings_)
    )
    try:
        moved = move(payload, leaves, transplanter)
    except NotTransplantable:
        return False
    assert moved.payload == expected_root
    assert moved.payload_checksum == payload_checksum(expected_root)
    assert {chunk.address: chunk.data for chunk in moved.chunks} == expected_leaves
    assert moved.payload_hash == "h", "the identity hash is the source's, untouched"
    return True


_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=300)
    | st.binary(max_size=300)
)
_trees = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=30)
        | st.dictionaries(st.text(max_size=6), children, max_size=20)
        | st.tuples(st.just("t"), children)
    ),
    max_leaves=300,
)
_forests = st.lists(_trees, min_size=3, max_size=40).map(lambda items: {"items": items, "n": len(items)})
"""Trees large enough to split at these sizes, most of them with leaves that reference leaves."""
_sizes = st.builds(
    lambda split_above, ratio, tail_modulus: {
        "split_above": split_above,
        "leaf_bytes": split_above * ratio,
        "tail_modulus": tail_modulus,
    },
    st.integers(min_value=16, max_value=256),
    st.integers(min_value=1, max_value=3),
    st.integers(min_value=1, max_value=8),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_forests, _sizes)
def test_a_transplant_is_the_split_in_the_target(tree: Any, sizes: dict[str, int]) -> None:
    assert_same_as_a_split_in_the_target(tree, sizes)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_forests, _sizes, st.data())
def test_bytes_equal_to_addresses_stay_values(tree: Any, sizes: dict[str, int], data: st.DataObject) -> None:
    """A value equal to an address, of either run, is a value: the split and the transplant treat it
    as one (it is never rewritten, and shares a leaf's pickle memo only as a save would)."""
    tree = [tree, [f"filler {i}" for i in range(60)]]  # always split: there are addresses to plant
    named = sorted(
        {
            chunk.address
            for context in (SOURCE, TARGET)
            for chunk in Chunker(context, **sizes).split(tree).chunks
        }
    )
    planted = data.draw(st.lists(st.sampled_from(named), min_size=1, max_size=6))
    # Beside the tree and inside it: the tree's own leaves mostly keep their addresses, so the
    # planted values equal addresses its split names (in the leaf that holds them, too).
    # A walked tree never shares a container: each variant holds its own copies.
    repeated = [[*planted, copy.deepcopy(tree)] for _ in range(3)]
    for variant in (
        [copy.deepcopy(tree), *planted],
        [*planted, copy.deepcopy(tree)],
        [repeated, list(planted)],
    ):
        assert_same_as_a_split_in_the_target(variant, sizes)


def test_a_value_equal_to_an_address_in_the_same_leaf_is_not_rewritten() -> None:
    sizes = {"split_above": 64, "leaf_bytes": 1024, "tail_modulus": 1}
    inner = ["x" * 100]
    source = Chunker(SOURCE, **sizes).split([inner]).chunks[0].address
    target = Chunker(TARGET, **sizes).split([inner]).chunks[0].address
    # One leaf holds the reference to the piece and both runs' addresses as values.
    tree = [[source, inner, target]]
    assert assert_same_as_a_split_in_the_target(tree, sizes)
    payload, leaves = stored(Chunker(SOURCE, **sizes).split(tree))
    moved = move(
        payload,
        leaves,
        Transplanter(SOURCE, TARGET, max_checkpoint_bytes=BUDGET, chunker=Chunker(TARGET, **sizes)),
    )
    assert join(SplitTree(pickle.loads(moved.payload), moved.chunks), context=TARGET) == tree


@pytest.mark.parametrize("turns", [4, 40, 200])
def test_a_conversation_moves_byte_for_byte_with_its_nested_pieces(turns: int) -> None:
    tree = conversation_tree(turns)
    tree["large"] = ["y" * 70_000, b"z" * 70_000, [{"blob": "w" * 20_000, "i": i} for i in range(12)]]
    assert assert_same_as_a_split_in_the_target(tree, {})


def _chain(sizes: dict[str, int], history: int, extra: Any) -> tuple[int, int]:
    """A run's checkpoints through one transplanter: (moved, declined); every one moved is equal to
    a save in the target, and a leaf the chain shares is offered once, never asked for again."""
    transplanter = Transplanter(SOURCE, TARGET, max_checkpoint_bytes=BUDGET, chunker=Chunker(TARGET, **sizes))
    source, target = Chunker(SOURCE, **sizes), Chunker(TARGET, **sizes)
    offered: set[bytes] = set()
    moved_count = declined = 0
    for turns in range(2, history, 3):
        tree = {"history": [{"text": f"turn {i} " * 12, "n": i, "extra": extra} for i in range(turns)]}
        payload, leaves = stored(source.split(tree))
        expected = stored(target.split(tree))
        root = transplanter.open(payload, payload_checksum(payload))
        wanted = transplanter.wanted(root, leaves)
        assert not wanted & offered, "a leaf moved before is fetched again"
        offered |= wanted
        transplanter.offer({address: leaves[address] for address in wanted})
        try:
            moved = transplanter.transplant(payload, root, payload_hash="h", logical_bytes=0)
        except NotTransplantable:
            declined += 1
            continue
        moved_count += 1
        assert (moved.payload, {c.address: c.data for c in moved.chunks}) == expected
    return moved_count, declined


def test_a_chain_without_nested_leaves_moves_every_checkpoint() -> None:
    assert _chain({"split_above": 4096, "leaf_bytes": 4096, "tail_modulus": 2}, 200, None) == (66, 0)


def test_a_chain_with_nested_leaves_moves_most_and_declines_the_rest() -> None:
    """Elements that reference leaves (each message holds a split string) decide the tail's cuts by
    their addresses: where the target's cuts give another number of leaves, the checkpoint is
    declined (re-encoded by the fork); the others move exactly."""
    moved, declined = _chain({"split_above": 256, "leaf_bytes": 1024, "tail_modulus": 2}, 120, "e" * 300)
    assert moved > declined


# -- what the transplant refuses -----------------------------------------------------------------


def _small_split() -> tuple[bytes, dict[bytes, bytes], SplitTree]:
    tree = {"history": [{"text": f"turn {i} " * 12, "n": i, "blob": "b" * 300} for i in range(30)]}
    split = Chunker(SOURCE, **SMALL).split(tree)
    payload, leaves = stored(split)
    return payload, leaves, split


def _transplanter(budget: int = BUDGET) -> Transplanter:
    return Transplanter(SOURCE, TARGET, max_checkpoint_bytes=budget, chunker=Chunker(TARGET, **SMALL))


def test_an_edited_root_is_refused_before_it_is_parsed() -> None:
    payload, _, _ = _small_split()
    edited = payload[:-2] + b"X."
    with pytest.raises(MongoDBMappingError, match="checksum"):
        _transplanter().open(edited, payload_checksum(payload))


def test_a_missing_leaf_is_refused() -> None:
    payload, leaves, _ = _small_split()
    transplanter = _transplanter()
    root = transplanter.open(payload, payload_checksum(payload))
    wanted = sorted(transplanter.wanted(root, leaves))
    transplanter.offer({address: leaves[address] for address in wanted[1:]})
    with pytest.raises(MongoDBMappingError, match="missing"):
        transplanter.transplant(payload, root, payload_hash="h", logical_bytes=0)


def test_a_leaf_that_does_not_match_its_address_is_refused() -> None:
    payload, leaves, _ = _small_split()
    transplanter = _transplanter()
    root = transplanter.open(payload, payload_checksum(payload))
    wanted = transplanter.wanted(root, leaves)
    forged = {address: zlib.compress(b"l" + pickle.dumps([1], protocol=5)) for address in wanted}
    transplanter.offer(forged)
    with pytest.raises(MongoDBMappingError, match="does not match its address"):
        transplanter.transplant(payload, root, payload_hash="h", logical_bytes=0)


def _with_leaf(split: SplitTree, raw: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    """The split with one more leaf, ``raw`` compressed, that its root references."""
    data = zlib.compress(raw, 1)
    address = leaf_address(SOURCE, data)
    root = {"split": split.root, "planted": ("@", "l", [address])}
    payload, leaves = stored(SplitTree(root, split.chunks))
    return payload, {**leaves, address: data}


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"l" + pickle.dumps([("@", "l", [b"short"])], protocol=5), id="record-address-short"),
        pytest.param(b"l" + pickle.dumps([("@", "q", [b"a" * 32])], protocol=5), id="record-kind-unknown"),
        pytest.param(b"l" + pickle.dumps([("@", "l")], protocol=5), id="record-arity"),
        pytest.param(b"l" + pickle.dumps([("@", "l", [])], protocol=5), id="record-empty"),
        pytest.param(b"l" + pickle.dumps([("@", "l", [b"m" * 32])], protocol=5), id="record-names-no-leaf"),
        pytest.param(b"l" + b"\x80\x05garbage", id="leaf-not-a-pickle"),
        pytest.param(b"l" + pickle.dumps([], protocol=5), id="leaf-empty"),
        pytest.param(b"x" + pickle.dumps([1], protocol=5), id="leaf-kind-unknown"),
        pytest.param(b"d" + pickle.dumps([["k", 1]], protocol=5), id="leaf-of-another-kind"),
    ],
)
def test_a_malformed_leaf_is_refused(raw: bytes) -> None:
    _, _, split = _small_split()
    payload, leaves = _with_leaf(split, raw)
    with pytest.raises(MongoDBMappingError):
        move(payload, leaves, _transplanter())


def test_a_leaf_beyond_the_budget_is_refused() -> None:
    _, _, split = _small_split()
    payload, leaves = _with_leaf(split, b"l" + pickle.dumps([b"\0" * 200_000], protocol=5))
    with pytest.raises(MongoDBMappingError, match="size limit"):
        move(payload, leaves, _transplanter(budget=100_000))


def test_a_root_that_does_not_pickle_back_is_declined() -> None:
    """Equal strings stored as two objects where a pickle of the loaded root shares one: the root's
    sharing is by identity, so such a root is re-encoded rather than moved."""
    _, leaves, split = _small_split()
    root: dict[str, object] = {"split": split.root}
    root["pair"] = ["".join(["a", "b"]), "".join(["a", "b"])]  # equal, two objects: written twice
    payload = pickle.dumps(root, protocol=5)
    loaded = pickle.dumps(pickle.loads(payload), protocol=5)
    assert loaded == payload  # two objects stay two: this root moves
    shared = payload.replace(b"\x8c\x02ab\x94", b"\x8c\x02ab\x94", 1)
    assert shared == payload
    # One str object referenced twice in the stored bytes but rebuilt as two would not round-trip;
    # a hand-written pickle with a redundant MEMOIZE does not either.
    odd = payload.replace(b"\x8c\x02ab\x94", b"\x8c\x02ab\x94\x94", 1)
    transplanter = _transplanter()
    with pytest.raises((NotTransplantable, MongoDBMappingError)):
        move(odd, leaves, transplanter)
