"""Attacks on the signed storage (issue 19, ADR 0020) by a writer with access to the collection and
no key: each test pins one finding as a strict xfail (the assertion states the behaviour the claim
promises), so the suite stays green until the finding is fixed.

The writer edits documents straight in the engine, as in ``test_signed_history.py``.
"""

from __future__ import annotations

import os
import pickle
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, cast

import pytest

from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorage,
    MongoDBIntegrationError,
    MongoDBIntegrityError,
    MongoDBPersistenceError,
)
from agent_framework_mongodb.checkpoints import storage as storage_module
from agent_framework_mongodb.checkpoints.codec import payload_checksum
from agent_framework_mongodb.checkpoints.codec.chunks import REFERENCE_TAG
from agent_framework_mongodb.checkpoints.documents import utc_now
from agent_framework_mongodb.checkpoints.ledger import DELETED_FIELD, LIVE_FROM_FIELD
from agent_framework_mongodb.checkpoints.scope import CHUNK_KIND, RunScope
from agent_framework_mongodb.checkpoints.transition import sign_run
from agent_framework_mongodb.testing import InMemoryCollection

from ._support import (
    COUNTER_KIND,
    WORKFLOW,
    ProxyCollection,
    make_checkpoint,
    make_options,
    make_storage,
    raw_checkpoints,
    raw_counter,
    scope_of,
)

KEY = secrets.token_bytes(32)


def _signed(collection: Any, **overrides: Any) -> MongoDBCheckpointStorage:
    return make_storage(collection, signing_keys=[KEY], **overrides)


def _large_state(size: int = 400, seed: int = 0) -> dict[str, Any]:
    """State big enough to be stored as chunks."""
    return {"history": [f"message {seed}-{n} " * 8 for n in range(size)]}


async def _document(collection: InMemoryCollection, checkpoint_id: str) -> dict[str, Any]:
    (document,) = await raw_checkpoints(collection, checkpoint_id=checkpoint_id)
    return document


async def _ids(storage: MongoDBCheckpointStorage) -> list[str]:
    return await storage.list_checkpoint_ids(workflow_name=WORKFLOW)


# -- 1. the ledger is not authenticated ---------------------------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="finding 1: the counter's ledger (deleted_sequences, live_from) carries no MAC, so a writer "
    "who edits it resurrects a deleted or pruned checkpoint beside newer ones: a state the run never "
    "had, not the 'consistent rollback' the threat model admits",
)
@pytest.mark.parametrize("removal", ["delete", "prune"])
async def test_editing_the_ledger_resurrects_a_removed_checkpoint_beside_newer_ones(
    removal: str, collection: InMemoryCollection
) -> None:
    storage = _signed(collection, keep_last=2) if removal == "prune" else _signed(collection)
    await storage.save(make_checkpoint("cp-0", state={"approved": True}))
    backup = await _document(collection, "cp-0")
    if removal == "delete":
        await storage.save(make_checkpoint("cp-1", state={"approved": False}))
        assert await storage.delete("cp-0")
    for index in range(1, 5):
        await storage.save(make_checkpoint(f"cp-{index}", state={"approved": False}))
    assert "cp-0" not in await _ids(storage)  # the control: removed, and recorded in the ledger
    before = await _ids(storage)

    # The writer puts the signed document back and edits only the ledger; every newer checkpoint
    # stays, so this is no earlier state of the run.
    await collection.insert_one(backup)
    await collection.update_one({"_kind": COUNTER_KIND}, {"$set": {DELETED_FIELD: [], LIVE_FROM_FIELD: 0}})

    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("cp-0")
    assert await _ids(storage) == before


# -- 2. sign-run launders tampering ---------------------------------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="finding 2: sign-run re-signs a checkpoint whose current-format signature fails (its envelope "
    "was edited, or it is from before clear_run) as if it were merely unsigned, laundering the tampering",
)
@pytest.mark.parametrize("tampering", ["resequenced", "from_before_clear_run"])
async def test_sign_run_does_not_re_sign_a_tampered_signed_checkpoint(
    tampering: str, collection: InMemoryCollection
) -> None:
    storage = _signed(collection)
    await storage.save(make_checkpoint("approval", state={"approved": True}))
    if tampering == "resequenced":
        await storage.save(make_checkpoint("revoked", state={"approved": False}))
        # The old approval renumbered past the revocation: refused, as the signature binds sequence.
        await collection.update_one({"checkpoint_id": "approval"}, {"$set": {"sequence": 10**12}})
    else:
        backup = await _document(collection, "approval")
        await storage.clear_run()
        await storage.save(make_checkpoint("revoked", state={"approved": False}))
        await collection.insert_one(backup)  # put back into the run's new lifetime
    with pytest.raises(MongoDBIntegrityError):  # the control: the signed storage sees the tampering
        await storage.load("approval")

    # The operator runs sign-run (the "no counter" message even recommends it).
    result = await sign_run(collection, make_options(signing_keys=[KEY]), write=True)

    assert "approval" not in result.signed
    with pytest.raises(MongoDBIntegrityError):
        await storage.load("approval")


@pytest.mark.xfail(
    strict=True,
    reason="finding 3: sign-run signs the envelope it read first but proves a second read (load); the "
    "sign update matches only _id and payload_checksum, so a payload swapped around the proof is signed "
    "without ever passing the restricted loader, and then reaches the unpickler of a signed storage",
)
async def test_sign_run_signs_only_a_payload_it_proved(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    unsigned = make_storage(collection)
    await unsigned.save(make_checkpoint("cp-1", state={"n": 1}))
    good = await _document(collection, "cp-1")
    hostile = b"\x80\x05N."  # any bytes the restricted loader would refuse: here a bare None
    hostile_fields = {"checkpoint": hostile, "payload_checksum": payload_checksum(hostile)}
    good_fields = {"checkpoint": good["checkpoint"], "payload_checksum": good["payload_checksum"]}
    await collection.update_one({"_id": good["_id"]}, {"$set": hostile_fields})

    real_load = storage_module.MongoDBCheckpointStorage.load

    async def racing_load(self: Any, checkpoint_id: str) -> Any:
        # The writer races the operator's command: the good payload while it is proved, the hostile
        # one again before the signature is written.
        await collection.update_one({"_id": good["_id"]}, {"$set": good_fields})
        try:
            return await real_load(self, checkpoint_id)
        finally:
            await collection.update_one({"_id": good["_id"]}, {"$set": hostile_fields})

    with monkeypatch.context() as patch:
        patch.setattr(storage_module.MongoDBCheckpointStorage, "load", racing_load)  # sign-run's reader
        await sign_run(collection, make_options(signing_keys=[KEY]), write=True)

    # The signed storage must refuse the hostile payload by its MAC, before any parser sees it.
    with pytest.raises(MongoDBIntegrityError) as raised:
        await _signed(collection).load("cp-1")
    assert type(raised.value) is MongoDBIntegrityError


@pytest.mark.xfail(
    strict=True,
    reason="finding 10: sign-run on an envelope field of a type no save writes (a double payload_bytes) "
    "raises a bare ValueError ('a bug of the caller'), which the CLI does not report: a traceback",
)
async def test_sign_run_reports_an_unsignable_envelope_as_a_package_error(
    collection: InMemoryCollection,
) -> None:
    await make_storage(collection).save(make_checkpoint("cp-1"))
    await collection.update_one({"checkpoint_id": "cp-1"}, {"$set": {"payload_bytes": 1.5}})
    with pytest.raises(MongoDBIntegrationError):
        await sign_run(collection, make_options(signing_keys=[KEY]), write=True)


# -- 4. the transition protects nothing signed -----------------------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="finding 4: with accept_unsigned_before, a checkpoint saved *signed* after the cut-off can be "
    "replaced by an unsigned forgery back-dated before it (created_at is the writer's), which also skips "
    "the epoch and can take any sequence; the README says 'every new save is signed' as if that protected it",
)
async def test_the_transition_does_not_let_a_signed_checkpoint_be_replaced_unsigned(
    client: Any, collection: InMemoryCollection
) -> None:
    signing_started = datetime.now(timezone.utc) - timedelta(seconds=1)
    transition = _signed(collection, accept_unsigned_before=signing_started)
    await transition.save(make_checkpoint("cp-1", state={"approved": False}))
    signed = await _document(collection, "cp-1")
    assert "payload_signature" in signed

    # The forgery: an unsigned document a storage without keys writes elsewhere, back-dated.
    elsewhere = client["other_db"]["other_coll"]
    await make_storage(elsewhere).save(make_checkpoint("cp-1", state={"approved": True}))
    (forged,) = await raw_checkpoints(elsewhere)
    forged.update(created_at=signing_started - timedelta(days=1), sequence=10**12)
    await collection.delete_one({"_id": signed["_id"]})
    await collection.insert_one({**forged, "_id": signed["_id"]})

    with pytest.raises(MongoDBIntegrityError):
        await transition.load("cp-1")


# -- 5. gates before the MAC: a forged format gets migration advice --------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="finding 5: the version gates run before the signature, so a signed document with a forged "
    "payload_format or schema_version is reported as a format to migrate ('resume with the release that "
    "wrote them' - the one whose loader runs code), not as tampering",
)
@pytest.mark.parametrize(("field", "value"), [("payload_format", "pickle-5/v1"), ("schema_version", 2)])
async def test_a_forged_version_gate_is_reported_as_tampering(
    field: str, value: object, collection: InMemoryCollection
) -> None:
    storage = _signed(collection)
    await storage.save(make_checkpoint("cp-1"))
    await collection.update_one({"checkpoint_id": "cp-1"}, {"$set": {field: value}})
    with pytest.raises(MongoDBIntegrityError) as raised:
        await storage.load("cp-1")
    assert type(raised.value) is MongoDBIntegrityError


# -- 6. the ledger's size --------------------------------------------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="finding 6: ledger_of accepts a deleted_sequences far longer than any storage writes (newest "
    "1,000); every signed read then carries the whole counter, builds a set of it and sends it back as $nin",
)
async def test_a_deleted_sequences_longer_than_any_storage_writes_is_refused(
    collection: InMemoryCollection,
) -> None:
    storage = _signed(collection)
    await storage.save(make_checkpoint("cp-1"))
    await collection.update_one(
        {"_kind": COUNTER_KIND}, {"$set": {DELETED_FIELD: list(range(10**6, 10**6 + 200_000))}}
    )
    with pytest.raises(MongoDBPersistenceError, match="ledger"):
        await storage.load("cp-1")


# -- 7. what one load fetches ------------------------------------------------------------------------------


class _FetchMeter:
    """Bytes of chunk data the storage's leaf fetch returned (before any of them is verified)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fetched = 0
        real: Callable[..., Awaitable[dict[bytes, object]]] = getattr(storage_module, "fetch_chunks")  # noqa: B009 - not re-exported

        async def metered(collection: Any, scope: RunScope, addresses: Any) -> dict[bytes, object]:
            found = await real(collection, scope, addresses)
            self.fetched += sum(len(data) for data in found.values() if isinstance(data, bytes))
            return found

        monkeypatch.setattr(f"{storage_module.__name__}.fetch_chunks", metered)


CAP = 1024 * 1024
GARBAGE = 2 * 1024 * 1024


@pytest.mark.xfail(
    strict=True,
    reason="finding 7: a load fetches every named chunk whole before verifying any; a writer who replaces "
    "the data of a signed checkpoint's chunks with large garbage makes each load hold leaves x 16 MiB, "
    "not max_checkpoint_bytes (signed or not)",
)
async def test_a_signed_load_fetches_no_more_chunk_bytes_than_its_budget(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = _signed(collection, max_checkpoint_bytes=CAP)
    await storage.save(make_checkpoint("cp-big", state=_large_state(3000)))
    chunks = await collection.find({"_kind": CHUNK_KIND}).to_list(None)
    assert len(chunks) >= 4
    for chunk in chunks:
        await collection.update_one({"_id": chunk["_id"]}, {"$set": {"data": os.urandom(GARBAGE)}})
    meter = _FetchMeter(monkeypatch)

    with pytest.raises(MongoDBIntegrationError):
        await storage.load("cp-big")
    assert meter.fetched <= 2 * CAP, f"{meter.fetched:,} bytes fetched for a {CAP:,}-byte budget"


@pytest.mark.xfail(
    strict=True,
    reason="finding 7 (unsigned): a crafted root (or the unsigned nested_chunks hint) names any number of "
    "planted chunks; all are fetched whole before the budget or any address is checked",
)
async def test_an_unsigned_load_fetches_no_more_chunk_bytes_than_its_budget(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = make_storage(collection, max_checkpoint_bytes=CAP)
    await storage.save(make_checkpoint("cp-big", state=_large_state()))
    root = await _document(collection, "cp-big")
    scope = scope_of(storage)
    addresses = [secrets.token_bytes(32) for _ in range(8)]  # any address: the root is not signed
    for address in addresses:
        await collection.insert_one(
            {"_id": address, "_kind": CHUNK_KIND, **scope.fields(), "data": os.urandom(GARBAGE)}
        )
    tree = pickle.loads(bytes(root["checkpoint"]))
    tree["state"] = {"blobs": [(REFERENCE_TAG, "b", [address]) for address in addresses]}
    payload = pickle.dumps(tree, protocol=5)
    await collection.update_one(
        {"_id": root["_id"]},
        {"$set": {"checkpoint": payload, "payload_checksum": payload_checksum(payload)}},
    )
    meter = _FetchMeter(monkeypatch)

    with pytest.raises(MongoDBIntegrationError):
        await storage.load("cp-big")
    assert meter.fetched <= 2 * CAP, f"{meter.fetched:,} bytes fetched for a {CAP:,}-byte budget"


# -- 8. liveness is checked on the server only for pages and latest ----------------------------------------


class _ServerIgnoringSequence(ProxyCollection):
    """Stands for a server that evaluates another ``sequence`` than the one the client decodes (a
    document with the field twice: the server matches and sorts on one occurrence, pymongo's dict keeps
    the last). Modelled by dropping the ledger's condition on ``sequence`` from every checkpoint query."""

    @staticmethod
    def _strip(query: Any) -> Any:
        if not isinstance(query, Mapping):
            return query
        fields = cast("Mapping[str, Any]", query)
        condition = fields.get("sequence")
        if not isinstance(condition, Mapping):
            return fields
        kept = {
            op: value
            for op, value in cast("Mapping[str, Any]", condition).items()
            if op not in {"$nin", "$gte"}
        }
        stripped = {name: value for name, value in fields.items() if name != "sequence"}
        if kept:
            stripped["sequence"] = kept
        return stripped

    async def find_one(self, filter: Any | None = None, *args: Any, **kwargs: Any) -> Any:
        return await super().find_one(self._strip(filter), *args, **kwargs)

    def find(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (self._strip(args[0]), *args[1:])
        return super().find(*args, **kwargs)


@pytest.mark.xfail(
    strict=True,
    reason="finding 8 (defence in depth): get_latest and pages never check a returned document's signed "
    "sequence against the ledger (only load does), so whenever the server's match and the client's decoded "
    "field differ, a deleted checkpoint comes back as the latest",
)
async def test_get_latest_checks_the_signed_sequence_against_the_ledger(
    collection: InMemoryCollection,
) -> None:
    storage = _signed(collection)
    await storage.save(make_checkpoint("cp-1", state={"approved": False}))
    await storage.save(make_checkpoint("cp-2", state={"approved": True}))
    backup = await _document(collection, "cp-2")
    assert await storage.delete("cp-2")
    await collection.insert_one(backup)

    diverging = _signed(_ServerIgnoringSequence(collection))
    try:
        latest = await diverging.get_latest(workflow_name=WORKFLOW)
    except MongoDBIntegrityError:
        return  # refused: fine
    assert latest is not None
    assert latest.checkpoint_id == "cp-1"


# -- 9. an expired checkpoint put back ------------------------------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="finding 9: expires_at is signed but no read decides with it; a checkpoint the TTL monitor "
    "removed (no ledger record) and a writer put back loads as live while its run goes on",
)
async def test_an_expired_checkpoint_put_back_is_not_found(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = _signed(collection, ttl=timedelta(minutes=1))
    with monkeypatch.context() as patch:  # saved two hours ago: expired an hour and 59 minutes ago
        patch.setattr(f"{storage_module.__name__}.utc_now", lambda: utc_now() - timedelta(hours=2))
        await storage.save(make_checkpoint("cp-old", state={"approved": True}))
    expired = await _document(collection, "cp-old")
    assert expired["expires_at"] < datetime.now(timezone.utc).replace(tzinfo=None)
    await collection.delete_one({"_id": expired["_id"]})  # what the TTL monitor did
    await storage.save(make_checkpoint("cp-new", state={"approved": False}))  # the run goes on

    await collection.insert_one(expired)  # the writer puts it back

    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("cp-old")


# -- 2b. sign-run after a counter loss resurrects everything ----------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="finding 2b: deleting the counter (which the 'no counter' error answers with 'run sign-run') "
    "also deletes the ledger, so sign-run re-signs every deleted or pruned checkpoint put back beside it, "
    "into the new lifetime; nothing says so, and sign-run has no way to keep them out",
)
async def test_sign_run_after_a_counter_loss_does_not_resurrect_deleted_checkpoints(
    collection: InMemoryCollection,
) -> None:
    storage = _signed(collection)
    await storage.save(make_checkpoint("approval", state={"approved": True}))
    await storage.save(make_checkpoint("revoked", state={"approved": False}))
    backup = await _document(collection, "approval")
    assert await storage.delete("approval")

    await collection.insert_one(backup)  # put back: stays deleted, the ledger says so
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("approval")
    await collection.delete_one({"_kind": COUNTER_KIND})  # ... until the counter goes
    with pytest.raises(MongoDBIntegrityError, match="sign-run"):
        await storage.load("revoked")

    result = await sign_run(collection, make_options(signing_keys=[KEY]), write=True)

    assert "approval" not in result.signed
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await storage.load("approval")


# -- measurements kept out of the suite -----------------------------------------------------------------


@pytest.mark.skipif(not os.environ.get("AFM_ATTACK_MEASURE"), reason="measurement, not a test")
async def test_measure_a_huge_ledger(collection: InMemoryCollection) -> None:
    storage = _signed(collection)
    await storage.save(make_checkpoint("cp-1"))
    await collection.update_one(
        {"_kind": COUNTER_KIND}, {"$set": {DELETED_FIELD: list(range(10**6, 2 * 10**6))}}
    )
    counter = await raw_counter(collection, scope_of(storage))
    assert counter is not None
    started = time.perf_counter()
    await storage.load("cp-1")
    await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
    print(f"load + id listing with a 1M-entry ledger: {time.perf_counter() - started:.2f}s")
    clean = _signed(collection.database["clean"])
    await clean.save(make_checkpoint("cp-1"))
    started = time.perf_counter()
    await clean.load("cp-1")
    await clean.list_checkpoint_ids(workflow_name=WORKFLOW)
    print(f"the same with an empty ledger: {time.perf_counter() - started:.4f}s")
