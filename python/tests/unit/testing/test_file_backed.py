"""The file-backed mode: what a reopened engine restores, torn tails, corruption, the writer lock."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from bson.objectid import ObjectId
from pymongo import IndexModel
from pymongo.errors import BulkWriteError, InvalidOperation
from pymongo.write_concern import WriteConcern

from agent_framework_mongodb.testing import (
    EngineFileCorruptedError,
    EngineFileError,
    EngineFileLockedError,
    InMemoryMongoClient,
    _journal,
    expire_documents,
)
from agent_framework_mongodb.testing._journal_format import MAGIC, frame

PYTHON_DIR = Path(__file__).resolve().parents[3]


# Files are read through these synchronous helpers: the tests are async because the engine is.
def size(path: Path) -> int:
    return path.stat().st_size


def read(path: Path) -> bytes:
    return path.read_bytes()


def write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path.resolve() / "engine.journal"


async def snapshot(client: InMemoryMongoClient) -> dict[str, Any]:
    """Everything a reopened engine must restore: per collection, documents in natural order,
    the index listing (options included) and the default collation."""
    state: dict[str, Any] = {}
    for database in await client.list_database_names():
        for name in await client[database].list_collection_names():
            collection = client[database][name]
            listing = await (await collection.list_indexes()).to_list()
            state[f"{database}.{name}"] = {
                "documents": collection.stored_documents(),
                "indexes": listing,
                "collation": client.collection_state(database, name).catalog.default_collation,
            }
    return state


async def write_everything(client: InMemoryMongoClient) -> None:
    """One of each change to stored state, over three databases' worth of collections."""
    runs = client["app"]["runs"]
    await runs.create_indexes(
        [
            IndexModel([("tenant", 1), ("seq", -1)], name="scope_seq", unique=True),
            IndexModel("expires", name="ttl", expireAfterSeconds=3600),
            IndexModel(
                "kind", name="partial", unique=True, partialFilterExpression={"kind": {"$eq": "counter"}}
            ),
            IndexModel("scratch", name="to_drop"),
        ]
    )
    await runs.drop_index("to_drop")
    await runs.insert_many(
        [
            {"_id": {"compound": 1}, "tenant": "v", "seq": 1},
            {"_id": 1, "tenant": "t", "seq": 1, "at": datetime(2026, 1, 2, 3, 4, 5, 678000)},
            {"_id": "two", "tenant": "t", "seq": 2, "blob": b"\x00\x01", "nested": {"a": [1, {"b": None}]}},
            {"_id": ObjectId(), "tenant": "u", "seq": 1},
            {"_id": 5, "tenant": "w", "seq": 9},
        ]
    )
    await runs.update_one({"_id": 1}, {"$set": {"seq": 10}})
    await runs.update_one({"_id": {"compound": 1}}, {"$set": {"seq": 2}})  # keeps its place
    counter = {"$inc": {"value": 1}, "$set": {"kind": "counter"}}
    await runs.update_one({"_id": "counter"}, counter, upsert=True)
    await runs.find_one_and_update({"_id": "counter"}, [{"$set": {"value": {"$add": ["$value", 1]}}}])
    await runs.delete_one({"_id": 5})
    await runs.delete_many({"tenant": "u"})

    await client["app"].create_collection("localized", collation={"locale": "fr_CA"})
    await client["app"]["localized"].create_index("name")
    await client["app"]["bare"].create_index("_id", name="_id_")  # exists, adding no index
    dropped = client["app"]["dropped"]
    await dropped.insert_one({"_id": 1})
    await dropped.create_index("x")
    await dropped.drop()
    await client["other"]["gone"].insert_one({"_id": 1})
    await client["other"].drop_collection("gone")
    reindexed = client["other"]["reindexed"]
    await reindexed.create_index("y")
    await reindexed.insert_one({"_id": 1, "y": 2})
    await reindexed.drop_indexes()


async def test_reopening_restores_documents_indexes_collections_and_drops(path: Path) -> None:
    client = InMemoryMongoClient(path=path)
    await write_everything(client)
    before = await snapshot(client)
    await client.close()

    reopened = InMemoryMongoClient(path=path)
    assert await snapshot(reopened) == before
    assert set(before) == {"app.runs", "app.localized", "app.bare", "other.reindexed"}
    assert before["app.localized"]["collation"]["locale"] == "fr_CA"
    assert [spec["name"] for spec in before["app.runs"]["indexes"]] == ["_id_", "scope_seq", "ttl", "partial"]
    assert [doc["_id"] for doc in before["app.runs"]["documents"]] == [{"compound": 1}, 1, "two", "counter"]
    # The restored unique indexes still refuse duplicates.
    with pytest.raises(BulkWriteError):
        await reopened["app"]["runs"].insert_many([{"tenant": "t", "seq": 2}])
    await reopened.close()


async def test_every_write_is_in_the_file_before_the_call_returns(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = InMemoryMongoClient(path=path)
    coll = client["db"]["c"]
    synced: list[int] = []
    real_fsync = os.fsync

    def counted_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counted_fsync)
    sizes = [size(path)]
    await coll.insert_one({"_id": 1})
    sizes.append(size(path))
    await coll.update_one({"_id": 1}, {"$set": {"a": 1}})
    sizes.append(size(path))
    await coll.update_one({"_id": 1}, {"$set": {"a": 1}})  # changes nothing, records nothing
    sizes.append(size(path))
    await coll.insert_many([{"_id": n} for n in range(2, 40)])
    sizes.append(size(path))
    assert sizes[0] == len(MAGIC)
    assert sizes[0] < sizes[1] < sizes[2] == sizes[3] < sizes[4]
    assert len(synced) == 3, "one sync per operation that changed something, insert_many included"
    await client.close()


async def test_a_torn_last_record_at_any_byte_opens_with_the_previous_state(
    path: Path, tmp_path: Path
) -> None:
    client = InMemoryMongoClient(path=path)
    await write_everything(client)
    previous = await snapshot(client)
    good_size = size(path)
    await client["app"]["runs"].insert_one({"_id": "last", "tenant": "z", "seq": 1, "pad": "x" * 40})
    await client.close()
    whole = read(path)
    assert len(whole) > good_size

    torn = tmp_path / "torn.journal"
    for cut in range(good_size, len(whole)):
        write(torn, whole[:cut])
        engine = InMemoryMongoClient(path=torn)
        assert await snapshot(engine) == previous, f"cut at byte {cut}"
        assert size(torn) == good_size, "the torn tail is dropped on open"
        await engine.close()

    # After the tail is dropped, new records follow whole ones and replay.
    engine = InMemoryMongoClient(path=torn)
    await engine["app"]["runs"].insert_one({"_id": "after", "tenant": "z", "seq": 2})
    await engine.close()
    engine = InMemoryMongoClient(path=torn)
    ids = [doc["_id"] for doc in engine["app"]["runs"].stored_documents()]
    assert ids[-1] == "after"
    assert "last" not in ids
    await engine.close()


async def test_a_file_cut_inside_its_first_line_opens_empty(path: Path) -> None:
    for cut in range(len(MAGIC)):
        write(path, MAGIC[:cut])
        engine = InMemoryMongoClient(path=path)
        assert await engine.list_database_names() == []
        await engine.close()
        assert read(path) == MAGIC


async def test_zeros_after_the_last_record_are_a_torn_tail(path: Path) -> None:
    client = InMemoryMongoClient(path=path)
    await client["db"]["c"].insert_one({"_id": 1})
    await client.close()
    whole = size(path)
    write(path, read(path) + b"\0" * 4096)  # what a file system may leave when it grew the file first
    engine = InMemoryMongoClient(path=path)
    assert engine["db"]["c"].stored_documents() == [{"_id": 1}]
    assert size(path) == whole
    await engine.close()


async def _two_record_file(path: Path) -> tuple[int, int]:
    """A file of two insert records; the offsets where each record's payload starts."""
    client = InMemoryMongoClient(path=path)
    await client["db"]["c"].insert_one({"_id": 1, "v": "first"})
    first_end = size(path)
    await client["db"]["c"].insert_one({"_id": 2, "v": "second"})
    await client.close()
    return len(MAGIC) + 8, first_end + 8


def _flip(path: Path, offset: int) -> bytes:
    data = bytearray(path.read_bytes())
    data[offset + 10] ^= 0xFF
    path.write_bytes(bytes(data))
    return bytes(data)


async def test_a_checksum_mismatch_in_the_last_record_is_ignored_as_a_torn_tail(path: Path) -> None:
    _, second = await _two_record_file(path)
    _flip(path, second)
    engine = InMemoryMongoClient(path=path)
    assert engine["db"]["c"].stored_documents() == [{"_id": 1, "v": "first"}]
    await engine.close()


async def test_a_checksum_mismatch_before_the_last_record_is_an_error_naming_the_file(path: Path) -> None:
    first, _ = await _two_record_file(path)
    damaged = _flip(path, first)
    with pytest.raises(EngineFileCorruptedError, match=rf"{path}.*checksum.*at byte {len(MAGIC)}"):
        InMemoryMongoClient(path=path)
    assert read(path) == damaged, "a damaged file is left as it is"
    InMemoryMongoClient(path=path.with_name("other.journal"))  # the refused open released its lock
    with pytest.raises(EngineFileCorruptedError):
        InMemoryMongoClient(path=path)


async def test_a_length_no_record_can_have_is_an_error(path: Path) -> None:
    write(path, MAGIC + (2**31).to_bytes(4, "little") + b"\x01" * 64)
    with pytest.raises(EngineFileCorruptedError, match="record length"):
        InMemoryMongoClient(path=path)


def test_a_record_this_engine_cannot_apply_is_an_error(path: Path) -> None:
    unknown = frame({"op": "frobnicate", "db": "db", "coll": "c"})
    absent_index = frame({"op": "drop_index", "db": "db", "coll": "c", "name": "absent"})
    for record in (unknown, absent_index):
        write(path, MAGIC + record + frame({"op": "exists", "db": "db", "coll": "c"}))
        with pytest.raises(EngineFileCorruptedError, match=rf"{path} holds a record this engine cannot"):
            InMemoryMongoClient(path=path)


async def test_a_file_of_another_format_is_refused_and_left_alone(path: Path) -> None:
    write(path, b"my notes\n")
    with pytest.raises(EngineFileCorruptedError, match="not an InMemoryMongoClient file"):
        InMemoryMongoClient(path=path)
    assert read(path) == b"my notes\n"


async def test_a_second_client_on_the_same_file_is_refused_until_the_first_closes(path: Path) -> None:
    first = InMemoryMongoClient(path=str(path))
    with pytest.raises(EngineFileLockedError, match=rf"{path} is open in another .*process {os.getpid()}"):
        InMemoryMongoClient(path=path)
    await first["db"]["c"].insert_one({"_id": 1})
    await first.close()
    second = InMemoryMongoClient(path=path)
    assert second["db"]["c"].stored_documents() == [{"_id": 1}]
    assert second.path == path
    assert repr(second) == f"InMemoryMongoClient(tz_aware=False, path={str(path)!r})"
    await second.close()
    with pytest.raises(InvalidOperation):
        await second["db"]["c"].insert_one({"_id": 2})


def test_another_spelling_of_a_file_shares_its_lock(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = InMemoryMongoClient(path=path)
    link = path.with_name("link.journal")
    link.symlink_to(path)
    monkeypatch.chdir(path.parent)
    for spelling in (link, "engine.journal", "./link.journal"):
        with pytest.raises(EngineFileLockedError, match=str(path)):
            InMemoryMongoClient(path=spelling)
    asyncio.run(first.close())


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such directory"):
        InMemoryMongoClient(path=tmp_path / "absent" / "engine.journal")


_HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from agent_framework_mongodb.testing import InMemoryMongoClient

    client = InMemoryMongoClient(path=sys.argv[1])
    asyncio.run(client["db"]["c"].insert_one({"_id": "from the child"}))
    print("ready", flush=True)
    sys.stdin.readline()  # holds the file until told to end; exits without close()
    """
)


def test_the_lock_refuses_another_process_and_ends_with_it(path: Path) -> None:
    holder = subprocess.Popen(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=PYTHON_DIR,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(EngineFileLockedError, match=rf"{path} .*process {holder.pid}\)"):
            InMemoryMongoClient(path=path)
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
        assert holder.stdout is not None
        holder.stdout.close()
    engine = InMemoryMongoClient(path=path)  # the child ended without close(): the lock went with it
    assert engine["db"]["c"].stored_documents() == [{"_id": "from the child"}]
    asyncio.run(engine.close())


async def test_unacknowledged_writes_apply_lose_their_errors_and_are_kept(path: Path) -> None:
    client = InMemoryMongoClient(path=path)
    coll = client["db"].get_collection("c", write_concern=WriteConcern(w=0))
    inserted = await coll.insert_one({"_id": 1, "v": 1})
    assert not inserted.acknowledged
    duplicate = await coll.insert_one({"_id": 1, "v": "lost"})  # the server's error is lost
    assert not duplicate.acknowledged
    await coll.update_one({"_id": 1}, {"$set": {"v": 2}})
    await client.close()
    reopened = InMemoryMongoClient(path=path)
    assert reopened["db"]["c"].stored_documents() == [{"_id": 1, "v": 2}]
    await reopened.close()


async def test_an_insert_many_stopped_half_way_keeps_its_first_half(path: Path) -> None:
    client = InMemoryMongoClient(path=path)
    with pytest.raises(BulkWriteError):
        await client["db"]["c"].insert_many([{"_id": 1}, {"_id": 2}, {"_id": 1}, {"_id": 3}])
    await client.close()
    reopened = InMemoryMongoClient(path=path)
    assert reopened["db"]["c"].stored_documents() == [{"_id": 1}, {"_id": 2}]
    await reopened.close()


async def test_expired_documents_stay_expired(path: Path) -> None:
    client = InMemoryMongoClient(path=path)
    coll = client["db"]["c"]
    await coll.create_index("at", expireAfterSeconds=60)
    await coll.insert_many([{"_id": 1, "at": datetime(2026, 1, 1)}, {"_id": 2, "at": datetime(2026, 6, 1)}])
    assert expire_documents(coll, now=datetime(2026, 3, 1)) == 1
    await client.close()
    reopened = InMemoryMongoClient(path=path)
    assert reopened["db"]["c"].stored_documents() == [{"_id": 2, "at": datetime(2026, 6, 1)}]
    await reopened.close()


async def test_superseded_records_are_compacted_away(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_journal, "COMPACTION_SLACK", 4096)
    client = InMemoryMongoClient(path=path)
    coll = client["db"]["c"]
    await coll.create_index("n", unique=True)
    await coll.insert_one({"_id": "kept", "n": -1, "pad": "k" * 500})
    largest = 0
    for n in range(300):
        await coll.update_one({"_id": "counter"}, {"$set": {"n": n, "pad": "p" * 200}}, upsert=True)
        largest = max(largest, size(path))
    before = await snapshot(client)
    await client.close()
    assert largest < 3 * 4096 + 2000, "the file is rewritten once superseded records dominate"
    assert not path.with_name(path.name + ".compacting").exists()
    reopened = InMemoryMongoClient(path=path)
    assert await snapshot(reopened) == before
    await reopened.close()


async def test_a_failed_write_is_reported_and_later_writes_are_refused(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = InMemoryMongoClient(path=path)
    coll = client["db"]["c"]
    await coll.insert_one({"_id": 1})

    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(EngineFileError, match=rf"could not write {path}: No space left on device"):
        await coll.insert_one({"_id": 2})
    monkeypatch.undo()
    with pytest.raises(EngineFileError, match=r"an earlier write .* failed"):
        await coll.insert_one({"_id": 3})
    await client.close()


def test_without_a_path_nothing_is_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    client = InMemoryMongoClient()
    asyncio.run(client["db"]["c"].insert_one({"_id": 1}))
    assert client.path is None
    assert not client.journal.enabled
    assert repr(client) == "InMemoryMongoClient(tz_aware=False)"
    assert not any(tmp_path.iterdir())
    asyncio.run(client.close())
