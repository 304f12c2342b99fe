"""What ``sign_run`` signs is bounded by what the operator vouches for (issue 30, ADR 0032).

Each test is a finding of issue 30, attacked as a collection writer without the key would: it fails
on the transition before the bounds (it signed whatever it found unsigned, decoded it in a dry run,
and gave a re-created counter the first checkpoint's expiry).
"""

from __future__ import annotations

import asyncio
import secrets
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBConfigurationError,
    MongoDBIntegrityError,
)
from agent_framework_mongodb.checkpoints import storage as storage_module
from agent_framework_mongodb.checkpoints.reading import CheckpointDecoder
from agent_framework_mongodb.checkpoints.signatures import SIGNATURE_FIELD
from agent_framework_mongodb.checkpoints.transition import sign_run
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient

from ._support import COUNTER_KIND, make_checkpoint, make_options, make_storage, raw_counter, scope_of

KEY = secrets.token_bytes(32)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _signing() -> Any:
    return make_options(signing_keys=[KEY])


async def test_a_field_deleted_from_a_signed_checkpoint_is_not_signed_again(
    collection: InMemoryCollection,
) -> None:
    signed = make_storage(collection, signing_keys=[KEY])
    await signed.save(make_checkpoint("first", state={"limit": 10}))
    await signed.save(make_checkpoint("approval", state={"limit": 10}))
    # A writer without the key plants content and strips the signature: the document is unsigned.
    await collection.update_one({"checkpoint_id": "approval"}, {"$unset": {SIGNATURE_FIELD: ""}})
    with pytest.raises(MongoDBIntegrityError):
        await signed.load("approval")

    refused = await sign_run(collection, _signing(), write=True, written_before=_now())
    assert refused.signed == ()
    assert refused.refused == ("approval",)
    assert "already holds signed checkpoints" in refused.candidates[-1].reason
    with pytest.raises(MongoDBIntegrityError):  # nothing was signed
        await signed.load("approval")

    # Beside the signed ones, only what is older than the run's first signed checkpoint is signed.
    result = await sign_run(collection, _signing(), write=True, written_before=_now(), beside_signed=True)
    assert result.signed == ()
    assert result.refused == ("approval",)
    (reviewed,) = [candidate for candidate in result.candidates if candidate.checkpoint_id == "approval"]
    assert reviewed.reason == "not older than the run's first signed checkpoint"
    with pytest.raises(MongoDBIntegrityError):
        await signed.load("approval")


async def test_a_document_inserted_into_a_signed_run_is_not_signed(collection: InMemoryCollection) -> None:
    unsigned = make_storage(collection)
    await unsigned.save(make_checkpoint("planted"))
    planted = await collection.find_one({"checkpoint_id": "planted"})
    assert planted is not None
    await collection.delete_many({})
    signed = make_storage(collection, signing_keys=[KEY])
    await signed.save(make_checkpoint("genuine"))
    planted["sequence"] = 99  # after the signed one, as the latest
    await collection.insert_one(planted)

    refused = await sign_run(collection, _signing(), write=True, written_before=_now())
    assert refused.refused == ("planted",)
    assert not refused.written
    result = await sign_run(collection, _signing(), write=True, written_before=_now(), beside_signed=True)
    assert result.refused == ("planted",)
    with pytest.raises(MongoDBIntegrityError):  # still refused, never resumed from
        await signed.get_latest(workflow_name=make_options().workflow_name)


async def test_only_documents_created_before_the_cut_off_are_signed(collection: InMemoryCollection) -> None:
    unsigned = make_storage(collection)
    await unsigned.save(make_checkpoint("before"))
    await asyncio.sleep(0.01)
    cut_off = _now()
    await asyncio.sleep(0.01)
    await unsigned.save(make_checkpoint("after"))

    result = await sign_run(collection, _signing(), write=True, written_before=cut_off)
    assert result.signed == ("before",)
    assert result.refused == ("after",)
    signed = make_storage(collection, signing_keys=[KEY])
    assert (await signed.load("before")).checkpoint_id == "before"
    with pytest.raises(MongoDBIntegrityError):
        await signed.load("after")


async def test_writing_needs_a_cut_off_in_the_past(collection: InMemoryCollection) -> None:
    await make_storage(collection).save(make_checkpoint("cp"))
    with pytest.raises(MongoDBConfigurationError, match="vouch"):
        await sign_run(collection, _signing(), write=True)
    with pytest.raises(MongoDBConfigurationError, match="later than now"):
        await sign_run(collection, _signing(), write=True, written_before=_now() + timedelta(hours=1))
    assert await collection.count_documents({SIGNATURE_FIELD: {"$exists": True}}) == 0


async def test_a_dry_run_decodes_nothing(
    collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_storage(collection).save(make_checkpoint("cp", state={"x": 1}))

    async def refuse(*_args: object, **_kwargs: object) -> object:
        raise AssertionError("a dry run decoded a payload")

    monkeypatch.setattr(CheckpointDecoder, "decode", refuse)
    result = await sign_run(collection, _signing(), write=False)
    assert result.signed == ("cp",)
    (candidate,) = result.candidates
    assert candidate.sequence == 1
    assert candidate.lifetime is None
    assert candidate.created_at is not None
    assert len(candidate.payload_sha256) == 64


async def test_the_counter_a_transition_creates_outlives_every_checkpoint_it_covers(
    collection: InMemoryCollection,
) -> None:
    unsigned = make_storage(collection, ttl=timedelta(hours=1))
    for name in ("short", "long", "middle"):
        await unsigned.save(make_checkpoint(name))
    now = _now().replace(microsecond=0)
    expiries = {
        "short": now + timedelta(hours=1),
        "long": now + timedelta(hours=9),
        "middle": now + timedelta(hours=3),
    }
    for name, moment in expiries.items():
        await collection.update_one({"checkpoint_id": name}, {"$set": {"expires_at": moment}})
    await collection.delete_one({"_kind": COUNTER_KIND})

    await sign_run(collection, _signing(), write=True, written_before=_now())
    counter = await raw_counter(collection, scope_of(unsigned))
    assert counter is not None
    assert counter["expires_at"].replace(tzinfo=timezone.utc) == expiries["long"]


async def test_adopting_names_each_lifetime_and_an_old_latest(collection: InMemoryCollection) -> None:
    signed = make_storage(collection, signing_keys=[KEY])
    await signed.save(make_checkpoint("old-1"))
    await signed.save(make_checkpoint("old-2"))
    old_epoch = (await raw_counter(collection, scope_of(signed)) or {})["run_epoch"]
    await collection.delete_one({"_kind": COUNTER_KIND})  # as a clear_run's counter delete would

    dry = await sign_run(collection, _signing(), write=False, adopt=True)
    assert {candidate.lifetime for candidate in dry.candidates} == {bytes(old_epoch).hex()}
    assert dry.adopted_latest == "old-2"
    done = await sign_run(collection, _signing(), write=True, adopt=True, written_before=_now())
    assert done.adopted_latest == "old-2"
    assert done.signed == ("old-1", "old-2")


async def test_a_signed_read_refuses_what_expired_whatever_the_server_returned(
    client: InMemoryMongoClient, collection: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ADR 0020: expiry is the server's filter, and the decoder checks it again. A server whose clock
    # is hours behind (as one that ignores UNEXPIRED, or an operator's copy) returns a checkpoint
    # whose signed expires_at passed an hour ago by this machine's clock: it is not loaded.
    signed = make_storage(collection, signing_keys=[KEY], ttl=timedelta(hours=1))
    await signed.save(make_checkpoint("fresh"))
    hours_ago = _now() - timedelta(hours=2)
    monkeypatch.setattr(storage_module, "utc_now", lambda: hours_ago)
    client.clock = lambda: hours_ago
    await signed.save(make_checkpoint("expired"))
    monkeypatch.undo()
    stored = await collection.find_one({"checkpoint_id": "expired"})
    assert stored is not None
    assert stored["expires_at"].replace(tzinfo=timezone.utc) < _now() - timedelta(minutes=30)

    with pytest.raises(MongoDBCheckpointNotFoundError):
        await signed.load("expired")
    workflow = make_options().workflow_name
    assert await signed.list_checkpoint_ids(workflow_name=workflow) == ["fresh"]
    assert [c.checkpoint_id for c in await signed.list_checkpoints(workflow_name=workflow)] == ["fresh"]
    # Within CLOCK_MARGIN the server's clock decides: the fresh one loads.
    assert (await signed.load("fresh")).checkpoint_id == "fresh"
