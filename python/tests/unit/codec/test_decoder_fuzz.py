"""A bounded property-based fuzz of ``CheckpointCodec.decode`` (about 20 s in the normal suite).

Three generators from ``hostile_corpus.py``: opcode streams from a pickle grammar (globals,
REDUCE, BUILD, memo operations, extension codes, buffers, frames; free sequences and whole
checkpoints around a random value program), valid pickles of trees with random records, and
real encoded payloads mutated by bit flips, byte writes, insertions, deletions, duplications,
splices and truncations.

For every example, decode returns a ``WorkflowCheckpoint`` that a save accepts again, or raises
a ``MongoDBMappingError``; nothing else, and no side effect (``Guard``). The one documented
residual (a framework object its own ``__getstate__`` rejects at the next save,
``hostile_corpus.known_bug``) is counted as a hypothesis event, not a failure.
``benchmarks/fuzz_decoder.py`` runs the same generators for as long as asked.

``AFM_FUZZ_EXAMPLES`` overrides the number of examples per generator.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

# As in test_hostile_payloads.py: imported by the codec lazily (BUG-2), imported here up front.
import agent_framework._workflows._checkpoint_encoding  # noqa: F401
import pytest
from hypothesis import HealthCheck, event, given, settings

from tests.unit.codec.hostile_corpus import (
    address_space_headroom,
    fuzz_codec,
    judge,
    known_bug,
    mutated_payloads,
    opcode_streams,
    tree_payloads,
)

EXAMPLES: Final = int(os.environ.get("AFM_FUZZ_EXAMPLES", "0"))
CODEC: Final = fuzz_codec()

_FUZZ: Final = settings(
    deadline=None,
    database=None,  # nothing written under the working directory the checks watch
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The working directory while the module runs (a file a payload creates lands here), with
    the address space bounded so that a memory bomb fails inside the decode."""
    directory = tmp_path_factory.mktemp("fuzz-cwd")
    with pytest.MonkeyPatch.context() as patch, address_space_headroom():
        patch.chdir(directory)
        yield directory


def _check(payload: bytes, root: Path) -> None:
    verdict = judge(payload, CODEC, root)
    event(verdict.outcome)
    bug = known_bug(verdict)
    if bug is not None:
        event(f"known {bug}")
        return
    assert not verdict.outcome.startswith("escape:"), f"{verdict.outcome}: {verdict.message}"
    assert not verdict.problems, verdict.problems


@settings(_FUZZ, max_examples=EXAMPLES or 1200)
@given(payload=opcode_streams())
def test_opcode_streams_decode_or_fail_cleanly(payload: bytes, root: Path) -> None:
    _check(payload, root)


@settings(_FUZZ, max_examples=EXAMPLES or 1200)
@given(payload=tree_payloads())
def test_hostile_trees_decode_or_fail_cleanly(payload: bytes, root: Path) -> None:
    _check(payload, root)


@settings(_FUZZ, max_examples=EXAMPLES or 1200)
@given(payload=mutated_payloads())
def test_mutated_payloads_decode_or_fail_cleanly(payload: bytes, root: Path) -> None:
    _check(payload, root)


def test_the_generators_produce_accepted_and_refused_payloads(root: Path) -> None:
    """The generators are not all refused at the first byte: some examples restore (this keeps
    the fuzz honest about what it exercises)."""
    outcomes: dict[str, int] = {}
    seen: list[bytes] = []
    for strategy in (opcode_streams(), tree_payloads(), mutated_payloads()):

        @settings(_FUZZ, max_examples=120, derandomize=True)
        @given(payload=strategy)
        def collect(payload: bytes) -> None:
            seen.append(payload)

        collect()
    for payload in seen:
        outcome = judge(payload, CODEC, root).outcome
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("checkpoint", 0) > 0, outcomes
    assert outcomes.get("MongoDBMappingError", 0) > 0, outcomes
