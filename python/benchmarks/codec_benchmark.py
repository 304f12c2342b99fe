"""Codec benchmark: run ``cd python && uv run python -m benchmarks.codec_benchmark``.

For each conversation size it prints medians (milliseconds) of:

* raw: ``pickle.dumps`` + ``pickle.loads`` of the same public dict (no safety at all);
* framework: Agent Framework's ``encode_checkpoint_value`` + ``decode_checkpoint_value`` with an
  allowlist, the reference path ``FileCheckpointStorage`` uses (``load/fw`` divides by its decode);
* save: ``CheckpointCodec.encode`` (one walk for tree and identity, pickle of the tree, proof);
* load: ``CheckpointCodec.decode`` (checksum, unpickle with no globals, validate, rebuild);
* walk / tree: the save walk alone, and the unpickle of the stored tree alone: where the time goes;
* lg-enc / lg-dec: LangGraph's ``JsonPlusSerializer`` on the same conversation as LangChain messages
  (``benchmarks/peers.py``); snapshot: the framework's own ``copy.deepcopy`` of the state.

Then the codec's targets (issue 22) as ratios measured in this run: encode <= 3x and decode <= 1.5x
LangGraph's, and encode <= 1.0x the snapshot (a lower bound of the storage's save, which adds the
document and the write); and the peak memory an encode allocates (``tracemalloc``, measured apart
from the timings) against its payload, target <= 3x, beside the snapshot's peak on the same state.
The storage's targets against ``FileCheckpointStorage`` are in ``benchmarks.storage_benchmark``.
"""

from __future__ import annotations

import gc
import pickle
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from importlib.metadata import version
from typing import Any

# Not public API: the reference encoding FileCheckpointStorage uses, imported here only to compare.
from agent_framework._workflows._checkpoint_encoding import (
    decode_checkpoint_value,
    encode_checkpoint_value,
)

from agent_framework_mongodb.checkpoints.codec import CheckpointCodec
from agent_framework_mongodb.checkpoints.codec.rebuild import load_tree
from agent_framework_mongodb.checkpoints.codec.rules import TypeResolver
from agent_framework_mongodb.checkpoints.codec.walk import walk_value
from benchmarks.checkpoints import CONVERSATION_SIZES, build_checkpoint
from benchmarks.peers import LangGraphPeer, snapshot

__all__ = ["main"]

_REPEATS = 9
_TARGETS = (
    ("encode <= 3x LangGraph", 3.0),
    ("decode <= 1.5x LangGraph", 1.5),
    ("encode <= 1.0x snapshot", 1.0),
)
_TARGET_SIZES = (200, 2000)


def _median_ms(operation: Callable[[], object], repeats: int = _REPEATS) -> float:
    operation()  # warm caches and imports
    timings: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        operation()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1000


def _peak_bytes(operation: Callable[[], object]) -> int:
    """The most memory ``operation`` held at once beyond what existed before it (``tracemalloc``)."""
    operation()  # warm caches and imports, which would otherwise count
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        operation()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - before


def _raw_round_trip(public: dict[str, Any]) -> object:
    return pickle.loads(pickle.dumps(public, protocol=5))


def _framework_round_trip(public: dict[str, Any]) -> object:
    return decode_checkpoint_value(encode_checkpoint_value(public), allowed_types=frozenset())


def _framework_encoded(public: dict[str, Any]) -> object:
    return encode_checkpoint_value(public)


def _framework_decode(encoded: object) -> object:
    return decode_checkpoint_value(encoded, allowed_types=frozenset())


def main() -> None:
    codec = CheckpointCodec()
    print(
        f"Python {platform.python_version()} on {platform.machine()}, agent-framework-core "
        f"{version('agent-framework-core')}; medians of {_REPEATS} runs, milliseconds"
    )
    header = (
        f"{'messages':>8} {'bytes':>9} {'raw':>8} {'framework':>10} {'save':>8} {'load':>8} "
        f"{'walk':>8} {'tree':>8} {'save/fw':>8} {'load/fw':>8} {'lg-enc':>8} {'lg-dec':>8} {'snapshot':>9}"
    )
    print(header)
    print("-" * len(header))
    ratios: list[tuple[int, str, float, float]] = []
    memory: list[tuple[int, int, int, int]] = []
    for size in CONVERSATION_SIZES:
        checkpoint = build_checkpoint(size)
        public = checkpoint.to_dict()
        encoded = codec.encode(checkpoint)
        peer = LangGraphPeer(checkpoint)

        raw = _median_ms(partial(_raw_round_trip, public))
        framework = _median_ms(partial(_framework_round_trip, public))
        save = _median_ms(partial(codec.encode, checkpoint))
        load = _median_ms(partial(codec.decode, encoded.payload, checksum=encoded.payload_checksum))
        walked = _median_ms(partial(walk_value, public, TypeResolver(())))
        tree = _median_ms(partial(load_tree, encoded.payload))
        framework_load = _median_ms(partial(_framework_decode, _framework_encoded(public)))
        peer_encode = _median_ms(peer.encode)
        peer_decode = _median_ms(peer.decode)
        copied = _median_ms(partial(snapshot, checkpoint))
        print(
            f"{size:>8} {len(encoded.payload):>9} {raw:>8.2f} {framework:>10.2f} {save:>8.2f} {load:>8.2f} "
            f"{walked:>8.2f} {tree:>8.2f} {save / framework:>8.2f} {load / framework_load:>8.2f} "
            f"{peer_encode:>8.2f} {peer_decode:>8.2f} {copied:>9.2f}"
        )
        if size in _TARGET_SIZES:
            measured = (save / peer_encode, load / peer_decode, save / copied)
            for (target, limit), ratio in zip(_TARGETS, measured, strict=True):
                ratios.append((size, target, ratio, limit))
            encode_peak = _peak_bytes(partial(codec.encode, checkpoint))
            snapshot_peak = _peak_bytes(partial(snapshot, checkpoint))
            memory.append((size, len(encoded.payload), encode_peak, snapshot_peak))
            ratios.append((size, "encode peak <= 3x payload", encode_peak / len(encoded.payload), 3.0))
    print()
    print(
        f"{'messages':>8} {'payload':>9} {'encode peak':>12} {'/payload':>9} "
        f"{'snapshot peak':>14} {'/payload':>9}"
    )
    for size, payload, encode_peak, snapshot_peak in memory:
        print(
            f"{size:>8} {payload:>9} {encode_peak:>12} {encode_peak / payload:>8.1f}x "
            f"{snapshot_peak:>14} {snapshot_peak / payload:>8.1f}x"
        )
    print()
    print(f"{'target':<26} {'messages':>8} {'ratio':>7}  verdict")
    for size, target, ratio, limit in ratios:
        print(f"{target:<26} {size:>8} {ratio:>6.2f}x  {'PASS' if ratio <= limit else 'MISS'}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
