"""expire_documents: one pass of the TTL monitor."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from agent_framework_mongodb.testing import InMemoryCollection, expire_documents

NOW = datetime(2024, 1, 1, 12, 0, 0)


async def test_expires_dates_at_or_before_the_threshold(coll: InMemoryCollection) -> None:
    # https://www.mongodb.com/docs/manual/core/index-ttl/#expiration-of-data
    await coll.create_index("at", expireAfterSeconds=60)
    await coll.insert_many(
        [
            {"_id": "old", "at": NOW - timedelta(seconds=61)},
            {"_id": "edge", "at": NOW - timedelta(seconds=60)},
            {"_id": "fresh", "at": NOW - timedelta(seconds=59)},
            {"_id": "not-a-date", "at": "2000-01-01"},
            {"_id": "missing"},
            {"_id": "array", "at": [NOW + timedelta(days=1), NOW - timedelta(days=1)]},
        ]
    )
    assert expire_documents(coll, now=NOW) == 3
    remaining = [d["_id"] for d in await coll.find({}, sort=[("_id", 1)]).to_list()]
    assert remaining == ["fresh", "missing", "not-a-date"]


async def test_partial_ttl_index_only_expires_matching_documents(coll: InMemoryCollection) -> None:
    # https://www.mongodb.com/docs/manual/core/index-ttl/#support-for-partial-indexes
    await coll.create_index("expires_at", expireAfterSeconds=0, partialFilterExpression={"kind": "lease"})
    past = NOW - timedelta(hours=1)
    await coll.insert_many(
        [
            {"_id": 1, "kind": "lease", "expires_at": past},
            {"_id": 2, "kind": "checkpoint", "expires_at": past},
        ]
    )
    assert expire_documents(coll, now=NOW) == 1
    assert [d["_id"] for d in await coll.find({}).to_list()] == [2]


async def test_aware_now_is_converted_to_utc_and_no_ttl_index_means_nothing(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": 1, "at": NOW})
    assert expire_documents(coll, now=NOW + timedelta(days=1)) == 0
    await coll.create_index("at", expireAfterSeconds=3600)
    aware = datetime(2024, 1, 1, 14, 59, tzinfo=timezone(timedelta(hours=2)))  # 12:59 UTC
    assert expire_documents(coll, now=aware) == 0
    assert expire_documents(coll, now=aware + timedelta(minutes=1)) == 1


async def test_engine_never_expires_documents_by_itself(coll: InMemoryCollection) -> None:
    await coll.create_index("at", expireAfterSeconds=0)
    await coll.insert_one({"_id": 1, "at": datetime(2000, 1, 1)})
    assert await coll.count_documents({}) == 1


async def test_a_document_two_ttl_indexes_expire_is_deleted_once(coll: InMemoryCollection) -> None:
    await coll.create_index("at", expireAfterSeconds=60)
    await coll.create_index("until", expireAfterSeconds=0)
    past = NOW - timedelta(hours=1)
    await coll.insert_many(
        [
            {"_id": {"run": 1}, "at": past, "until": past},  # a document _id: filed under a hashable key
            {"_id": {"run": 2}, "at": past},
            {"_id": {"run": 3}, "at": NOW, "until": NOW + timedelta(minutes=1)},
        ]
    )

    assert expire_documents(coll, now=NOW) == 2
    assert [d["_id"] for d in await coll.find({}).to_list()] == [{"run": 3}]
