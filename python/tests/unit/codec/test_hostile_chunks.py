"""The hostile corpus against chunked checkpoints (issue 13): forged leaves, roots and chunk documents.

Every entry of ``chunk_corpus.CHUNK_CORPUS``, and every light entry of the payload corpus
(``hostile_corpus.CORPUS``) embedded as a leaf element and as a chunked root, is planted straight
into the engine and read through ``load``, ``get_latest``, ``list_checkpoints`` and
``list_checkpoint_page``, without and with signing keys. Each read must end in a package mapping
error (the entry's, when it names one) or a checkpoint that a save accepts again, agree with the
other reads, and change nothing (``Guard``: no module imported, no file created, no object of the
process changed, no hook or victim run).

With signing keys, an entry that rewrote the root is refused with ``MongoDBIntegrityError`` before
a byte of it is unpickled; an entry that left the signed root alone and attacked chunk documents is
refused as corrupt (``MongoDBMappingError``: the signed root names each leaf's address, and a
leaf that does not match it is never decompressed), and nothing but the real run's own bytes
reaches the unpickler.

The code-running entries also run in a fresh interpreter that registers an extension code for
``os.system``, and would print, exit, import or create a file if any of them ran
(:func:`test_a_child_process_runs_no_forged_leaf`). A hypothesis test mutates a real chunked
checkpoint's chunks and root, re-addressing the mutation so that it reaches the parser
(``benchmarks/fuzz_chunks.py`` runs it for longer); another forks each mutated run
(``fork_run``, ADR 0040's transplant) and loads the copy, which must end as the source's load does
(``benchmarks/fuzz_chunks.py --fork``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import faulthandler
import functools
import itertools
import json
import logging
import os
import pickle
import pickletools
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import agent_framework._workflows._checkpoint_encoding  # noqa: F401 - imported lazily by the codec (BUG-2)
import pytest
from agent_framework import WorkflowCheckpoint
from bson.errors import InvalidBSON
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.checkpoints.chunk_store import COLLECTION_GRACE, TOUCH_WINDOW
from agent_framework_mongodb.checkpoints.codec import CheckpointCodec, canonical_hash, payload_checksum
from agent_framework_mongodb.checkpoints.documents import stored_payload
from agent_framework_mongodb.checkpoints.scope import CHUNK_KIND, RunScope
from agent_framework_mongodb.errors import (
    MongoDBIntegrityError,
    MongoDBMappingError,
    MongoDBSerializationError,
)
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient
from tests.unit.codec import chunk_corpus as chunks
from tests.unit.codec import hostile_corpus as corpus
from tests.unit.codec.chunk_corpus import CHUNK_CORPUS, ChunkEntry, Forge
from tests.unit.codec.hostile_corpus import (
    BASE_ID,
    CORPUS,
    DECODING_OPERATIONS,
    GOOD_ID,
    WORKFLOW,
    Entry,
    Guard,
    Outcome,
    UnpickleRecorder,
    attempt_async,
    run_operation,
)
from tests.unit.storage._support import advance_server_clock

PYTHON_DIR: Final = Path(__file__).resolve().parents[3]
IN_PROCESS: Final = [entry for entry in CHUNK_CORPUS if not entry.isolate]
LIGHT: Final = [entry for entry in CORPUS if not entry.isolate]
WATCHDOG_SECONDS: Final = 60.0
READ_SECONDS: Final = 10.0
"""Every entry's eight reads together, on a loaded CI machine: a hang or a quadratic blow-up fails."""
CODE_OPCODES: Final = frozenset(
    {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "PERSID", "BINPERSID"}
    | {"EXT1", "EXT2", "EXT4"}
)


@pytest.fixture
def collection(client: InMemoryMongoClient) -> InMemoryCollection:
    return client["hostile"]["chunks"]


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def watchdog() -> Iterator[None]:
    """A load that never ends (a root whose pickle holds itself used to loop in ``references``)
    ends the test process after a minute with every thread's traceback, instead of hanging CI."""
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module", autouse=True)
def _foreign_runs() -> None:
    asyncio.run(chunks.prepare_foreign())


def _codec() -> CheckpointCodec:
    return CheckpointCodec()


def _real_pickles(base: chunks.Base) -> set[bytes]:
    """The run's own bytes a read may unpickle: the good payload, the real root, and every
    element of the real leaves."""
    seen: set[bytes] = {bytes(base.root_document["checkpoint"])}
    for document in base.documents:
        if document.get("checkpoint_id") == GOOD_ID:
            seen.add(bytes(document["checkpoint"]))
    for chunk in base.chunks:
        raw = zlib.decompress(bytes(chunk["data"]))
        if raw[:1] in (b"l", b"d"):  # a list or dict leaf is one pickle of its elements
            seen.add(raw[1:])
    return seen


async def _reads(
    collection: InMemoryCollection,
    build: Any,
    *,
    signed: bool,
    cwd: Path,
    markers: tuple[str, ...] = (),
    with_chunks: bool = False,
    reads: tuple[str, ...] = DECODING_OPERATIONS,
) -> tuple[dict[str, Outcome], chunks.Base, chunks.Plant, list[str], UnpickleRecorder]:
    """Plant one entry, then run the decoding reads under a Guard and a recorder."""
    opts = chunks.options(signed=signed)
    base = await chunks.load_base(collection, opts, with_chunks=with_chunks)
    forge = Forge(base)
    build(forge)
    try:
        await chunks.apply_plant(collection, base, forge.plant)
    except InvalidBSON:
        # bson before pymongo 4.14 refuses to decode a subtype-4 binary that is not 16 bytes, so
        # such a document cannot be planted (nor, with that driver, read back from a server).
        pytest.skip("this bson release cannot decode the planted document")
    storage = MongoDBCheckpointStorage(collection, options=opts)
    outcomes: dict[str, Outcome] = {}
    recorder = UnpickleRecorder()
    with recorder.installed(), Guard(cwd, markers) as guard:
        for operation in reads:
            outcomes[operation] = await attempt_async(
                functools.partial(run_operation, storage, operation), f"storage.{operation}"
            )
        # Ids are read without payloads: untouched, unless a forged document poses as a checkpoint.
        ids = await attempt_async(lambda: storage.list_checkpoint_ids(workflow_name=WORKFLOW), "ids")
    assert ids.refused or ids.value == [GOOD_ID, BASE_ID]
    return outcomes, base, forge.plant, guard.problems, recorder


def _accepted(operation: str, value: object) -> WorkflowCheckpoint:
    checkpoint = corpus.hostile_checkpoint(operation, value)
    assert isinstance(checkpoint, WorkflowCheckpoint)
    assert (checkpoint.checkpoint_id, checkpoint.workflow_name) == (BASE_ID, WORKFLOW)
    return checkpoint


def _judge_unsigned(
    name: str,
    outcomes: dict[str, Outcome],
    *,
    may_load: bool,
    match: str | None,
    state: Any,
    resaves: bool = True,
) -> None:
    refused = {operation: outcome.refused for operation, outcome in outcomes.items()}
    assert len(set(refused.values())) == 1, f"{name}: the reads disagree: {refused}"
    for operation, outcome in outcomes.items():
        if outcome.error is not None:
            assert type(outcome.error) is MongoDBMappingError or isinstance(
                outcome.error, MongoDBSerializationError
            ), f"{name}: {operation} raised {type(outcome.error).__name__}"
            if match is not None:
                assert match in str(outcome.error), (
                    f"{name}: {operation} refused it for another reason: {outcome.error}"
                )
            continue
        assert may_load, f"{name}: {operation} loaded it; it must be refused"
        checkpoint = _accepted(operation, outcome.value)
        if state is not corpus.NO_STATE:
            assert checkpoint.state == state, f"{name}: {operation} restored another state"
        if resaves:  # a load may only return what a save stores
            _codec().encode(checkpoint)
        else:
            with pytest.raises(MongoDBSerializationError):
                _codec().encode(checkpoint)


def _judge_signed(
    name: str,
    outcomes: dict[str, Outcome],
    base: chunks.Base,
    plant: chunks.Plant,
    recorder: UnpickleRecorder,
    *,
    unsigned_refused: bool,
) -> None:
    for operation, outcome in outcomes.items():
        if plant.root is not None:  # the signed payload was replaced
            assert isinstance(outcome.error, MongoDBIntegrityError), f"{name}: signed {operation}: {outcome}"
        elif plant.touches_root:  # an envelope field: a version gate, or the signature, refuses it
            assert isinstance(outcome.error, MongoDBMappingError), f"{name}: signed {operation}: {outcome}"
        elif unsigned_refused:
            assert outcome.error is not None, f"{name}: signed {operation} loaded it"
        else:
            assert outcome.error is None, f"{name}: signed {operation} refused it: {outcome.error}"
    real = _real_pickles(base)
    if plant.root is not None:
        real.discard(bytes(base.root_document["checkpoint"]))
    foreign = [payload for payload in recorder.payloads if payload not in real]
    assert not foreign, f"{name}: a signed storage unpickled bytes it did not write: {foreign[:2]}"
    # Verify, then parse: no chunk bytes but the run's own reach zlib either.
    stored = {bytes(chunk["data"]) for chunk in base.chunks}
    inflated = [data for data in recorder.inflated if data not in stored]
    assert not inflated, f"{name}: a signed storage decompressed {len(inflated)} chunks it did not write"


# -- the chunk corpus ---------------------------------------------------------------------------


def test_the_chunk_corpus_covers_what_issue_13_names() -> None:
    names = {entry.name for entry in CHUNK_CORPUS}
    for fragment in (
        "exec-os-system-global-reduce",
        "stack-global-reduce",
        "-inst-",
        "-obj-",
        "newobj",
        "build-on",
        "persid",
        "ext1",
        "ext2",
        "ext4",
        "bomb",
        "200k-times",
        "chain-9-levels",
        "wrong-kind",
        "arity",
        "address-31-bytes",
        "address-33-bytes",
        "addresses-empty",
        "200k-absent",
        "nested-odd-length",
        "nested-str",
        "nested-100k",
        "chunk-id-str",
        "chunk-id-int",
        "chunk-id-document",
        "chunk-id-binary-subtype-4",
        "chunk-data-binary-subtype-4",
        "duplicated",
        "another-session",
        "another-tenant",
        "plain-tree-labelled-chunked",
        "chunked-root-labelled-plain",
        "root-itself",
        "invalid-utf8",
        "dict-leaf-repeated-key",
        "dict-leaf-int-key",
        "zlib-truncated",
        "zlib-extra-byte",
    ):
        assert any(fragment in name for name in names), fragment
    assert len(CHUNK_CORPUS) >= 150


@pytest.mark.parametrize("entry", IN_PROCESS, ids=[entry.name for entry in IN_PROCESS])
@pytest.mark.usefixtures("watchdog")
async def test_hostile_chunks(entry: ChunkEntry, client: InMemoryMongoClient, cwd: Path) -> None:
    started = time.perf_counter()
    how: dict[str, Any] = {"markers": entry.markers, "with_chunks": entry.needs_chunks, "reads": entry.reads}
    outcomes, _, _, problems, _ = await _reads(
        client["hostile"]["unsigned"], entry.build, signed=False, cwd=cwd, **how
    )
    assert not problems, f"unsigned: {'; '.join(problems)}"
    _judge_unsigned(
        entry.name, outcomes, may_load=entry.expect == "either", match=entry.match, state=entry.state
    )
    unsigned_refused = next(iter(outcomes.values())).refused
    del outcomes
    signed, base, plant, problems, recorder = await _reads(
        client["hostile"]["signed"], entry.build, signed=True, cwd=cwd, **how
    )
    assert not problems, f"signed: {'; '.join(problems)}"
    _judge_signed(entry.name, signed, base, plant, recorder, unsigned_refused=unsigned_refused)
    assert time.perf_counter() - started < READ_SECONDS


# -- the payload corpus inside chunks ---------------------------------------------------------


def _runs_code(payload: bytes) -> bool:
    """Whether a payload holds an opcode that resolves a global or calls, or is not a clean
    pickle at all: such an element must be refused wherever it is placed."""
    try:
        names = [opcode.name for opcode, _, _ in pickletools.genops(payload)]
    except Exception:
        return True
    return bool(CODE_OPCODES.intersection(names)) or len(payload) != _pickle_end(payload)


def _pickle_end(payload: bytes) -> int:
    end = 0
    for opcode, _, position in pickletools.genops(payload):
        if opcode.name == "STOP" and position is not None:
            end = position + 1
            break
    return end


def _embedded(entry: Entry, placement: str) -> Any:
    if placement == "root":
        return lambda forge: forge.root(entry.payload)
    if entry.name.startswith("stream-"):
        # A damaged stream (empty, truncated, no STOP) has no opcodes to splice into a list: as a
        # leaf's one pickle it is the leaf's whole body.
        return chunks._whole_leaf(entry.payload)
    return chunks._element(entry.payload)


@pytest.mark.usefixtures("watchdog")
@pytest.mark.parametrize("placement", ["leaf-element", "root"])
@pytest.mark.parametrize("entry", LIGHT, ids=[entry.name for entry in LIGHT])
async def test_payload_corpus_inside_chunks(
    entry: Entry, placement: str, client: InMemoryMongoClient, cwd: Path
) -> None:
    build = _embedded(entry, placement)
    outcomes, _, _, problems, _ = await _reads(
        client["hostile"]["unsigned"], build, signed=False, cwd=cwd, markers=entry.markers
    )
    assert not problems, f"unsigned: {'; '.join(problems)}"
    if placement == "root":
        # A chunked root without references is the plain payload: the plain corpus's verdict.
        may_load, state, resaves = entry.expect != "refused", entry.state, entry.resaves
    else:
        may_load, state, resaves = not _runs_code(entry.payload), corpus.NO_STATE, entry.resaves
    if entry.bug:
        pytest.xfail(entry.bug)
    _judge_unsigned(entry.name, outcomes, may_load=may_load, match=None, state=state, resaves=resaves)
    unsigned_refused = next(iter(outcomes.values())).refused
    del outcomes
    signed, base, plant, problems, recorder = await _reads(
        client["hostile"]["signed"], build, signed=True, cwd=cwd, markers=entry.markers
    )
    assert not problems, f"signed: {'; '.join(problems)}"
    _judge_signed(entry.name, signed, base, plant, recorder, unsigned_refused=unsigned_refused)


# -- the intact base, and the nested hint at its limit -----------------------------------------


async def test_the_base_loads_equal_through_every_read(client: InMemoryMongoClient, cwd: Path) -> None:
    """The positive control: with nothing forged, every read restores the saved checkpoint."""
    expected = canonical_hash(chunks.base_checkpoint().to_dict())
    for signed in (False, True):
        outcomes, _, _, problems, _ = await _reads(
            client["hostile"][f"base-{signed}"], lambda forge: None, signed=signed, cwd=cwd, with_chunks=True
        )
        assert not problems
        for operation, outcome in outcomes.items():
            assert canonical_hash(_accepted(operation, outcome.value).to_dict()) == expected


def test_a_million_hinted_addresses_are_parsed_in_bounded_time() -> None:
    """A hint MongoDB could not even store (32 MB) still parses quickly, and only as addresses."""
    opts = chunks.options(signed=False)
    scope = RunScope.from_options(opts)
    document = {
        "schema_version": 1,
        "framework_version": "agent-framework-core/1:WorkflowCheckpoint.to_dict/v1",
        "payload_version": "1.0",
        "payload_format": "tree-chunks/v1",
        "idempotency_hash_version": 3,
        "checkpoint_id": BASE_ID,
        "sequence": 1,
        "checkpoint": b"x",
        "payload_checksum": payload_checksum(b"x"),
    }
    hint = os.urandom(32 * 1_000_000)
    document["nested_chunks"] = hint
    template = asyncio.run(chunks._template(opts))
    root = next(doc for doc in template if doc.get("checkpoint_id") == BASE_ID)
    document.update(
        {name: root[name] for name in ("payload_version", "idempotency_hash_version", "framework_version")}
    )
    started = time.perf_counter()
    stored = stored_payload(document, scope)
    assert len(stored.nested) == 1_000_000
    assert time.perf_counter() - started < 5
    with pytest.raises(MongoDBMappingError, match="nested_chunks is malformed"):
        stored_payload({**document, "nested_chunks": hint + b"\x00"}, scope)


# -- keep_last collection facing a hostile retained root ------------------------------------------


def _history(seed: int) -> dict[str, Any]:
    return {"history": [f"message {seed}-{n} " * 8 for n in range(400)], "seed": seed}


HOSTILE_ROOTS: Final[dict[str, dict[str, object] | str]] = {
    "checksum-wrong": {"payload_checksum": "0" * 64},
    "not-a-pickle": "garbage",
    "malformed-reference": "malformed",
    "nested-odd": {"nested_chunks": b"\x01" * 33},
    "nested-str": {"nested_chunks": "abc"},
    "unknown-format": {"payload_format": "tree-chunks/v9"},
    "first-format": {"payload_format": "pickle-5/v1"},
}


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
@pytest.mark.parametrize("hostile", sorted(HOSTILE_ROOTS))
async def test_keep_last_collection_facing_a_hostile_root_deletes_nothing(
    hostile: str,
    signed: bool,
    collection: InMemoryCollection,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    opts = dataclasses.replace(chunks.options(signed=signed), keep_last=2)
    storage = MongoDBCheckpointStorage(collection, options=opts)
    for step in range(3):
        await storage.save(_numbered(step))
    retained = await collection.find({"_kind": "workflow_checkpoint"}).sort("sequence", 1).to_list(None)
    victim = retained[-1]
    change = HOSTILE_ROOTS[hostile]
    if change == "garbage":
        update: dict[str, Any] = {"checkpoint": b"garbage", "payload_checksum": payload_checksum(b"garbage")}
    elif change == "malformed":
        tree = pickle.loads(bytes(victim["checkpoint"]))
        tree["state"] = {"x": ("@", "l", [b"short"])}
        payload = pickle.dumps(tree, protocol=5)
        update = {"checkpoint": payload, "payload_checksum": payload_checksum(payload)}
    else:
        assert isinstance(change, dict)
        update = dict(change)
    await collection.update_one({"_id": victim["_id"]}, {"$set": update})
    before = {bytes(chunk["_id"]) for chunk in await collection.find({"_kind": CHUNK_KIND}).to_list(None)}

    advance_server_clock(collection, COLLECTION_GRACE + TOUCH_WINDOW)  # the server's clock decides
    with caplog.at_level(logging.WARNING):
        saved = await storage.save(_numbered(3))

    assert saved == "cp-3"
    after = {bytes(chunk["_id"]) for chunk in await collection.find({"_kind": CHUNK_KIND}).to_list(None)}
    assert before <= after, f"{len(before - after)} chunks deleted facing a hostile root"
    assert any("prune failed" in record.getMessage() for record in caplog.records)
    # The control: once the root is whole again, the next due prune collects the garbage.
    restore: dict[str, Any] = {"$set": {name: victim[name] for name in update if name in victim}}
    if any(name not in victim for name in update):
        restore["$unset"] = {name: "" for name in update if name not in victim}
    await collection.update_one({"_id": victim["_id"]}, restore)
    caplog.clear()
    await storage.save(_numbered(4))
    final = {bytes(chunk["_id"]) for chunk in await collection.find({"_kind": CHUNK_KIND}).to_list(None)}
    assert before - final, "the control collected nothing: the test would pass without a collection"
    assert not any("prune failed" in record.getMessage() for record in caplog.records)


def _numbered(step: int) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=WORKFLOW,
        graph_signature_hash="graph-hash-1",
        checkpoint_id=f"cp-{step}",
        timestamp=corpus.FIXED_TIMESTAMP,
        state=_history(step),
    )


# -- a child process that would show any code a forged leaf ran ---------------------------------

_CHILD: Final = """
import asyncio, copyreg, json, sys
import agent_framework._workflows._checkpoint_encoding
from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.testing import InMemoryMongoClient
from tests.unit.codec import chunk_corpus as chunks
from tests.unit.storage._support import advance_server_clock
from tests.unit.codec.hostile_corpus import DECODING_OPERATIONS, run_operation

# An extension code an unrestricted unpickler would resolve to os.system from copyreg's tables.
copyreg.add_extension("os", "system", 0x4242)

async def main():
    client = InMemoryMongoClient()
    await chunks.prepare_foreign()
    # Warm up: what a real process did before a hostile load.
    warm = MongoDBCheckpointStorage(client["w"]["c"], options=chunks.options(signed=False))
    await warm.save(chunks.base_checkpoint())
    await warm.load(chunks.BASE_ID)
    results, imported = {}, {}
    for number, entry in enumerate(e for e in chunks.CHUNK_CORPUS if e.executes):
        for signed in (False, True):
            collection = client["h"][f"c{number}-{signed}"]
            opts = chunks.options(signed=signed)
            base = await chunks.load_base(collection, opts)
            forge = chunks.Forge(base)
            entry.build(forge)
            await chunks.apply_plant(collection, base, forge.plant)
            storage = MongoDBCheckpointStorage(collection, options=opts)
            before = set(sys.modules)
            for operation in DECODING_OPERATIONS:
                try:
                    await run_operation(storage, operation)
                    outcome = "loaded"
                except BaseException as error:
                    outcome = type(error).__name__
                results[f"{entry.name}:{signed}:{operation}"] = outcome
            for name in sorted(set(sys.modules) - before):
                imported.setdefault(name, entry.name)
    sys.stdout.write("RESULT " + json.dumps({"results": results, "imported": imported}) + "\\n")

asyncio.run(main())
"""


def test_a_child_process_runs_no_forged_leaf(tmp_path: Path) -> None:
    """Every code-running entry (os.system, exec, os._exit and sys.exit included), in a fresh
    interpreter: it exits 0, prints nothing but its result, creates no file, imports nothing, and
    every read of every entry ends in a package mapping error."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(  # noqa: S603 - the interpreter running the tests, fixed arguments
        [sys.executable, "-c", _CHILD],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    lines = result.stdout.splitlines()
    assert len(lines) == 1, f"the child printed: {lines[:5]}"
    assert lines[0].startswith("RESULT "), lines[0][:200]
    assert "PWNED" not in result.stdout + result.stderr
    report = json.loads(lines[0][len("RESULT ") :])
    assert list(tmp_path.iterdir()) == []
    assert report["imported"] == {}, report["imported"]
    executes = [entry for entry in CHUNK_CORPUS if entry.executes]
    assert len(report["results"]) == len(executes) * 2 * len(DECODING_OPERATIONS)
    for key, outcome in report["results"].items():
        signed = key.split(":")[1] == "True"
        assert outcome == ("MongoDBIntegrityError" if signed else "MongoDBMappingError"), (key, outcome)


# -- the fuzz -------------------------------------------------------------------------------------

FUZZ_EXAMPLES: Final = int(os.environ.get("AFM_FUZZ_EXAMPLES", "0")) or 250
_FUZZ: Final = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@pytest.fixture(scope="module")
def fuzz_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    directory = tmp_path_factory.mktemp("chunk-fuzz-cwd")
    loop = asyncio.new_event_loop()
    client = InMemoryMongoClient()
    collection = client["fuzz"]["chunks"]
    base = loop.run_until_complete(chunks.load_base(collection, chunks.options(signed=False)))
    with pytest.MonkeyPatch.context() as patch, corpus.address_space_headroom():
        patch.chdir(directory)
        yield directory, (loop, collection, base)
    loop.run_until_complete(client.close())
    loop.close()


@_FUZZ
@given(plan=chunks.mutations())
def test_mutated_chunked_checkpoints_load_equal_or_fail_cleanly(
    plan: Any, fuzz_run: tuple[Path, Any]
) -> None:
    root, (loop, collection, base) = fuzz_run
    mutation = chunks.mutate(base, plan)
    outcome, problems = chunks.judge_mutation(loop, collection, base, mutation, root)
    event(f"{mutation.description}: {outcome}")
    assert not problems, (mutation.description, outcome, problems)


FORK_EXAMPLES: Final = int(os.environ.get("AFM_FORK_FUZZ_EXAMPLES", "0")) or 40
_FORK_SESSIONS: Final = itertools.count()


@settings(_FUZZ, max_examples=FORK_EXAMPLES)
@given(plan=chunks.mutations(), fork_first=st.booleans(), fresh=st.booleans())
def test_forks_of_mutated_runs_fail_cleanly_or_load_as_their_source(
    plan: Any, fork_first: bool, fresh: bool, fuzz_run: tuple[Path, Any]
) -> None:
    """``fork_run(keep="chain")`` of a mutated run raises a package error, or its copy's loads end
    as the source's do (the same checkpoint, or refused), and nothing changes (ADR 0040: a
    transplant copies what verified, and the copy loads, or is refused, as the source does)."""
    root, (loop, collection, base) = fuzz_run
    mutation = chunks.mutate(base, plan)
    outcome, problems = chunks.judge_fork(
        loop,
        collection,
        base,
        mutation,
        root,
        # The session the intact run transplants into, or a fresh one (mostly re-encoded).
        to_session_id=f"fork-{next(_FORK_SESSIONS)}" if fresh else None,
        fork_first=fork_first,
    )
    event(f"{mutation.description}: {outcome}")
    assert not problems, (mutation.description, outcome, problems)


# -- a finding this corpus pinned: a save accepted what its load would refuse ------------------------


async def test_a_checkpoint_a_save_accepts_loads_again(collection: InMemoryCollection) -> None:
    # A save bounded the whole tree's pickle by max_checkpoint_bytes, a load the leaves it joins,
    # each reference charged in full: a tree repeating one small value pickles small and joins
    # large. The save now refuses what its load would (chunks.join_cost), before any I/O.
    storage = MongoDBCheckpointStorage(collection, options=chunks.options(signed=False))
    repetitive = corpus.base_checkpoint({"ints": [7] * 300_000})  # about 600 KB, under 1 MiB
    with pytest.raises(MongoDBSerializationError, match="join to"):
        await storage.save(repetitive)
    assert await collection.count_documents({}) == 0
    varied = corpus.base_checkpoint({"ints": list(range(60_000))})
    await storage.save(varied)
    assert (await storage.load(BASE_ID)).state == varied.state


# -- verify, then parse: hinted bombs beside an intact root, in a child process ---------------------

_HINTED_BOMBS_CHILD: Final = """
import asyncio, json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from agent_framework_mongodb import MongoDBCheckpointStorage
from agent_framework_mongodb.testing import InMemoryMongoClient
from tests.unit.codec import chunk_corpus as chunks
from tests.unit.storage._support import advance_server_clock
from tests.unit.codec import hostile_corpus as corpus

BY_NAME = {entry.name: entry for entry in corpus.CORPUS}
BOMBS = {
    "deep-tuple-dict-key-200k": BY_NAME["deep-tuple-dict-key-200k"].payload,
    "colliding-raw-set-20k": BY_NAME["colliding-raw-set-20k"].payload,
    "memo-index-4g": b"\\x80\\x05N" + b"r" + (0xFFFFFFF0).to_bytes(4, "little") + b".",
    "five-million-empty-lists": b"\\x80\\x05](" + b"]" * 5_000_000 + b"e.",
}

async def main():
    client = InMemoryMongoClient()
    results = {}
    for name, body in BOMBS.items():
        for signed in (False, True):
            collection = client["h"][f"{name}-{signed}"]
            opts = chunks.options(signed=signed)
            base = await chunks.load_base(collection, opts)
            forge = chunks.Forge(base)
            chunks.beside_intact_root(body)(forge)
            await chunks.apply_plant(collection, base, forge.plant)
            storage = MongoDBCheckpointStorage(collection, options=opts)
            started = time.perf_counter()
            try:
                loaded = await storage.load(chunks.BASE_ID)
                outcome = "loaded" if loaded.state == chunks.base_state() else "other state"
            except BaseException as error:
                outcome = type(error).__name__
            results[f"{name}:{signed}"] = [outcome, round(time.perf_counter() - started, 3)]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    sys.stdout.write("RESULT " + json.dumps({"results": results, "peak_mb": peak_mb}) + "\\n")

asyncio.run(main())
"""


def test_hinted_bombs_beside_an_intact_root_are_never_parsed(tmp_path: Path) -> None:
    """The four outcomes issue 19 found in a signed storage (SIGSEGV, MemoryError, seconds of CPU,
    gigabytes resident), planted as a hinted leaf beside an intact root: a signed storage refuses
    the document (the hint is signed), an unsigned one loads the real checkpoint and never parses
    the leaf, both quickly and within a 2 GiB address space."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(  # noqa: S603 - the interpreter running the tests, fixed arguments
        [sys.executable, "-c", _HINTED_BOMBS_CHILD],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    (line,) = result.stdout.splitlines()
    report = json.loads(line[len("RESULT ") :])
    assert len(report["results"]) == 8
    for key, (outcome, seconds) in report["results"].items():
        signed = key.endswith(":True")
        assert outcome == ("MongoDBIntegrityError" if signed else "loaded"), (key, outcome)
        assert seconds < READ_SECONDS, (key, seconds)
    assert report["peak_mb"] < 1024, report
