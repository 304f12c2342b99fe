"""Codec benchmark: run ``cd python && uv run python -m benchmarks.codec_benchmark``.

For each conversation size it prints medians (milliseconds) of:

* raw: ``pickle.dumps`` + ``pickle.loads`` of the same public dict (no safety at all);
* framework: Agent Framework's ``encode_checkpoint_value`` + ``decode_checkpoint_value`` with an
  allowlist, the reference path ``FileCheckpointStorage`` uses;
* save: ``CheckpointCodec.encode`` (canonical hash + controlled pickle + round-trip proof);
* load: ``CheckpointCodec.decode`` (checksum + extension guard + restricted unpickle + from_dict);
* restricted: ``CheckpointCodec.load_restricted`` on the same bytes: the restricted unpickler
  alone, without checksum, extension guard, dict check or ``from_dict``.

Targets: save <= 1.25x framework (200 and 2000 messages); load <= 1.5x restricted.
"""

from __future__ import annotations

import pickle
import platform
import statistics
import sys
import time
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
from benchmarks.checkpoints import CONVERSATION_SIZES, build_checkpoint

__all__ = ["main"]

_REPEATS = 9


def _median_ms(operation: Callable[[], object], repeats: int = _REPEATS) -> float:
    operation()  # warm caches and imports
    timings: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        operation()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1000


def _raw_round_trip(public: dict[str, Any]) -> object:
    return pickle.loads(pickle.dumps(public, protocol=5))


def _framework_round_trip(public: dict[str, Any]) -> object:
    return decode_checkpoint_value(encode_checkpoint_value(public), allowed_types=frozenset())


def main() -> None:
    codec = CheckpointCodec()
    print(
        f"Python {platform.python_version()} on {platform.machine()}, agent-framework-core "
        f"{version('agent-framework-core')}; medians of {_REPEATS} runs, milliseconds"
    )
    header = (
        f"{'messages':>8} {'bytes':>9} {'raw':>8} {'framework':>10} {'save':>8} {'load':>8} "
        f"{'restricted':>10} {'save/fw':>8} {'load/restr':>10}"
    )
    print(header)
    print("-" * len(header))
    for size in CONVERSATION_SIZES:
        checkpoint = build_checkpoint(size)
        public = checkpoint.to_dict()
        encoded = codec.encode(checkpoint)

        raw = _median_ms(partial(_raw_round_trip, public))
        framework = _median_ms(partial(_framework_round_trip, public))
        save = _median_ms(partial(codec.encode, checkpoint))
        load = _median_ms(partial(codec.decode, encoded.payload, checksum=encoded.payload_checksum))
        restricted = _median_ms(partial(codec.load_restricted, encoded.payload))
        print(
            f"{size:>8} {len(encoded.payload):>9} {raw:>8.2f} {framework:>10.2f} {save:>8.2f} {load:>8.2f} "
            f"{restricted:>10.2f} {save / framework:>8.2f} {load / restricted:>10.2f}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
