"""The 16 MiB limit on every command, reads included, where pymongo refuses to send it
(DIVERGENCES.md entry 18)."""

from __future__ import annotations

from typing import Any

import bson
import pytest
from bson.binary import Binary
from bson.codec_options import CodecOptions
from pymongo import message
from pymongo.errors import DocumentTooLarge
from pymongo.read_concern import ReadConcern

from agent_framework_mongodb.testing import InMemoryCollection

_MIB16 = 16 * 1024 * 1024
_SESSION = {"id": Binary(bytes(16), 4)}


def _addresses(count: int) -> list[Binary]:
    """``count`` distinct 32-byte binaries, as chunk addresses are."""
    return [Binary(index.to_bytes(32, "big")) for index in range(count)]


async def test_a_huge_in_list_is_refused_by_pymongo_for_every_command_that_carries_it(
    coll: InMemoryCollection,
) -> None:
    # 600,000 addresses are some 27 MB of filter: past 16 MiB and its allowance alike.
    await coll.insert_one({"_id": Binary(bytes(32)), "v": 1})
    for operator in ("$in", "$nin"):
        huge = {"_id": {operator: _addresses(600_000)}}
        with pytest.raises(DocumentTooLarge, match=r"^BSON document too large \(\d+ bytes\)"):
            await coll.find(huge).to_list()
        with pytest.raises(DocumentTooLarge, match=r"^BSON document too large \(\d+ bytes\)"):
            await coll.find_one(huge)
        with pytest.raises(DocumentTooLarge, match=r"^aggregate command document too large$"):
            await coll.count_documents(huge)
        with pytest.raises(DocumentTooLarge, match=r"^delete command document too large$"):
            await coll.delete_many(huge)
        with pytest.raises(DocumentTooLarge, match=r"^delete command document too large$"):
            await coll.delete_one(huge)
        with pytest.raises(DocumentTooLarge, match=r"^findAndModify command document too large$"):
            await coll.find_one_and_update(huge, {"$set": {"v": 2}})
        with pytest.raises(DocumentTooLarge, match=r"^update command document too large$"):
            await coll.update_many(huge, {"$set": {"v": 2}})
    assert await coll.find({}).to_list() == [{"_id": bytes(32), "v": 1}]  # subtype 0 decodes as bytes


def _pymongos_find_size(filter_: dict[str, Any], **options: Any) -> int:
    """The size pymongo checks before sending this find: its own command builder and encoder."""
    command = message._gen_find_command(  # private: the reference the engine is checked against
        "coll", filter_, None, 0, options.get("limit", 0), None, None, ReadConcern(), None
    )
    command["lsid"] = _SESSION
    _, _, size, _ = message._op_msg(0, command, "db", None, CodecOptions())
    return size


def _filter_of_find_size(target: int) -> dict[str, Any]:
    """A filter whose find command pymongo sizes at exactly ``target`` bytes."""
    filter_ = {"k": ""}
    filter_["k"] = "x" * (target - _pymongos_find_size(filter_))
    assert _pymongos_find_size(filter_) == target
    return filter_


async def test_a_find_is_refused_past_16_mib_exactly_as_pymongo_sizes_it(coll: InMemoryCollection) -> None:
    # send_message compares the command's total size with maxBsonObjectSize, no allowance.
    at_limit = _filter_of_find_size(_MIB16)
    assert await coll.find(at_limit).to_list() == []
    over = _filter_of_find_size(_MIB16 + 1)
    with pytest.raises(DocumentTooLarge, match=rf"^BSON document too large \({_MIB16 + 1} bytes\)"):
        await coll.find(over).to_list()


async def test_find_one_and_count_documents_take_their_own_commands_sizes(coll: InMemoryCollection) -> None:
    # find_one adds limit 1 and singleBatch (pymongo's find(...).limit(-1)), so the filter that
    # makes a plain find exactly 16 MiB is refused there; count_documents is an aggregate
    # command, sent through run_command, which allows 16,382 bytes more.
    await coll.insert_one({"_id": 1, "k": "x"})
    at_limit = _filter_of_find_size(_MIB16)
    assert _pymongos_find_size(at_limit, limit=-1) > _MIB16
    with pytest.raises(DocumentTooLarge, match="BSON document too large"):
        await coll.find_one(at_limit)
    assert await coll.count_documents(at_limit) == 0
    past_allowance = {"k": "x" * (_MIB16 + 16_382)}
    aggregate = {
        "aggregate": "coll",
        "pipeline": [{"$match": past_allowance}, {"$group": {"_id": 1, "n": {"$sum": 1}}}],
        "cursor": {},
        "lsid": _SESSION,
        "$db": "db",
    }
    assert len(bson.encode(aggregate)) > _MIB16 + 16_382
    with pytest.raises(DocumentTooLarge, match="aggregate command document too large"):
        await coll.count_documents(past_allowance)
