"""The hostile corpus through ``sign-run``'s paths (issue 30): nothing planted reaches a parser.

Every payload of the corpus, the isolated ones too (a SIGSEGV or a bomb when decoded), is planted
into a run as a collection writer without the key would, then handed to ``sign_run``: its dry run
decodes nothing, a cut-off that does not cover it keeps it undecoded, and in a signed run an unsigned
document is refused before anything of it is read. The unpickle recorder sees no call at all.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta, timezone

import pytest

from agent_framework_mongodb.checkpoints.transition import sign_run
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient
from tests.unit.codec.hostile_corpus import BASE_ID, CORPUS, UnpickleRecorder, plant, storage_options

KEY = secrets.token_bytes(32)


@pytest.fixture
def collection(client: InMemoryMongoClient) -> InMemoryCollection:
    return client["hostile"]["transition"]


async def test_no_planted_payload_is_parsed_in_an_unsigned_run(collection: InMemoryCollection) -> None:
    parsed: dict[str, list[str]] = {}
    for entry in CORPUS:
        await collection.delete_many({})
        options = storage_options(allowed=entry.allowed)
        await plant(collection, options, entry.payload)
        signing = storage_options(allowed=entry.allowed, signing_keys=[KEY])
        created = [
            document["created_at"]
            for document in await collection.find({"_kind": "workflow_checkpoint"}).to_list(None)
        ]
        before_all = min(created).replace(tzinfo=timezone.utc) - timedelta(milliseconds=1)
        recorder = UnpickleRecorder()
        with recorder.installed():
            dry = await sign_run(collection, signing, write=False)
            done = await sign_run(collection, signing, write=True, written_before=before_all)
        assert BASE_ID in dry.signed, entry.name  # listed for review ...
        assert BASE_ID in done.refused, entry.name  # ... not vouched for
        assert not done.written, entry.name
        if recorder.calls:
            parsed[entry.name] = recorder.calls
    assert parsed == {}, f"sign-run parsed planted payloads: {parsed}"


async def test_no_payload_planted_into_a_signed_run_is_parsed(collection: InMemoryCollection) -> None:
    parsed: dict[str, list[str]] = {}
    for entry in CORPUS:
        await collection.delete_many({})
        options = storage_options(allowed=entry.allowed, signing_keys=[KEY])
        await plant(collection, options, entry.payload, drop_signature=True)
        now = datetime.now(timezone.utc)
        recorder = UnpickleRecorder()
        with recorder.installed():
            dry = await sign_run(collection, options, write=False)
            done = await sign_run(collection, options, write=True, written_before=now)
            beside = await sign_run(collection, options, write=True, written_before=now, beside_signed=True)
        assert dry.refused == (BASE_ID,), entry.name  # listed, with why, for review
        assert done.refused == (BASE_ID,), entry.name
        assert beside.refused == (BASE_ID,), entry.name
        assert not done.written, entry.name
        assert not beside.written, entry.name
        if recorder.calls:
            parsed[entry.name] = recorder.calls
    assert parsed == {}, f"sign-run parsed planted payloads: {parsed}"
