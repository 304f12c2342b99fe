"""``aggregate``: the stages a run page sends, as the server runs them (DIVERGENCES.md entry 31)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest
from pymongo import IndexModel
from pymongo.errors import AutoReconnect, OperationFailure

import agent_framework_mongodb.testing._collection_base as collection_base
from agent_framework_mongodb.testing import InMemoryCollection, InMemoryMongoClient, Scheduling
from agent_framework_mongodb.testing._indexes import matches as real_matches

SIMPLE = {"locale": "simple"}
COUNT_PER_RUN = [
    {"$match": {"kind": "run"}},
    {"$sort": {"_id": 1}},
    {
        "$lookup": {
            "from": "coll",
            "localField": "run",
            "foreignField": "run",
            "pipeline": [{"$match": {"kind": "item"}}, {"$count": "n"}],
            "as": "items",
        }
    },
    {"$project": {"items": 1}},
]


async def run(coll: InMemoryCollection, pipeline: Any, **options: Any) -> list[dict[str, Any]]:
    return await (await coll.aggregate(pipeline, **options)).to_list(None)


async def seed_runs(coll: InMemoryCollection) -> None:
    await coll.insert_many(
        [
            {"_id": 1, "kind": "run", "run": "a"},
            {"_id": 2, "kind": "run", "run": "b"},
            {"_id": 3, "kind": "run"},  # no run field: joins as null
            {"_id": 10, "kind": "item", "run": "a"},
            {"_id": 11, "kind": "item", "run": "a"},
            {"_id": 12, "kind": "other", "run": "a"},
            {"_id": 13, "kind": "item"},
        ]
    )


async def test_a_lookup_counts_each_documents_matches_and_count_emits_nothing_for_none(
    coll: InMemoryCollection,
) -> None:
    await seed_runs(coll)
    result = await run(coll, COUNT_PER_RUN)
    # "b" has no items: the server's $count (a $group on null) emits no document, so its array is
    # empty; mongomock_ng emitted {"n": 0}. A missing local field joins as null, which matches
    # foreign documents without the field, as the concise syntax's {$eq: null} does.
    assert result == [
        {"_id": 1, "items": [{"n": 2}]},
        {"_id": 2, "items": []},
        {"_id": 3, "items": [{"n": 1}]},
    ]


async def test_an_array_local_field_joins_each_element(coll: InMemoryCollection) -> None:
    await coll.insert_many(
        [
            {"_id": 1, "tags": ["x", "y"]},
            {"_id": 2, "tag": "x"},
            {"_id": 3, "tag": "y"},
            {"_id": 4, "tag": "z"},
        ]
    )
    pipeline = [
        {"$match": {"_id": 1}},
        {"$lookup": {"from": "coll", "localField": "tags", "foreignField": "tag", "as": "found"}},
    ]
    (joined,) = await run(coll, pipeline)
    assert [found["_id"] for found in joined["found"]] == [2, 3]


async def test_the_leading_find_sorts_skips_and_limits_as_a_find_does(coll: InMemoryCollection) -> None:
    await coll.insert_many([{"_id": index, "v": index % 3} for index in range(9)])
    pipeline = [{"$match": {"v": {"$gte": 1}}}, {"$sort": {"v": -1, "_id": 1}}, {"$skip": 1}, {"$limit": 3}]
    expected = await coll.find({"v": {"$gte": 1}}, sort=[("v", -1), ("_id", 1)], skip=1, limit=3).to_list(
        None
    )
    assert await run(coll, pipeline) == expected
    assert await run(coll, [{"$limit": 2}, {"$count": "n"}]) == [{"n": 2}]


async def test_a_lookup_uses_the_joined_collections_index_maps(
    coll: InMemoryCollection, monkeypatch: pytest.MonkeyPatch
) -> None:
    await coll.create_indexes(
        [IndexModel([("run", 1), ("seq", 1)], partialFilterExpression={"kind": "item"})]
    )
    await coll.insert_many(
        [{"_id": index, "kind": "item", "run": f"r{index % 50}", "seq": index} for index in range(500)]
    )
    await coll.insert_one({"_id": "head", "kind": "run", "run": "r7"})
    checked: list[object] = []

    def counting(filter_: Any, document: Any) -> bool:
        checked.append(document)
        return real_matches(filter_, document)

    monkeypatch.setattr(collection_base, "matches", counting)
    pipeline = [
        {"$match": {"_id": "head"}},
        {
            "$lookup": {
                "from": "coll",
                "localField": "run",
                "foreignField": "run",
                "pipeline": [{"$match": {"kind": "item"}}, {"$count": "n"}],
                "as": "items",
            }
        },
    ]
    (head,) = await run(coll, pipeline)
    assert head["items"] == [{"n": 10}]
    assert len(checked) < 20, "candidates came from the index map, not a scan of 501 documents"


@pytest.mark.parametrize(
    ("stage", "code"),
    [
        ({"$limit": 0}, 15958),
        ({"$limit": "2"}, 15957),
        ({"$skip": -1}, 15956),
        ({"$count": ""}, 40157),
        ({"$count": 1}, 40156),
        ({"$count": "$n"}, 40158),
        ({"$count": "a.b"}, 40160),
        ({"$sort": {"a": 2}}, 15975),
        ({"$project": {"a": 1, "b": 0}}, 31254),
        ({"$lookup": {"from": "coll", "as": "x", "localField": "a"}}, 9),
        ({"$lookup": {"from": "coll", "as": "x", "pipeline": [], "bogus": 1}}, 9),
        ({"$match": {}, "$limit": 1}, 40323),
    ],
)
async def test_malformed_stages_fail_with_the_servers_codes(
    coll: InMemoryCollection, stage: dict[str, Any], code: int
) -> None:
    await coll.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as raised:
        await coll.aggregate([{"$match": {"_id": {"$gte": 0}}}, {"$skip": 0}, stage])
    assert raised.value.code == code


@pytest.mark.parametrize(
    "stage",
    [
        {"$group": {"_id": "$a"}},
        {"$unwind": "$a"},
        {"$project": {"a.b": 1}},
        {"$project": {"a": "$b"}},
        {"$lookup": {"from": "coll", "as": "x", "let": {"v": "$a"}, "pipeline": []}},
    ],
)
async def test_stages_and_options_the_engine_does_not_simulate_are_refused(
    coll: InMemoryCollection, stage: dict[str, Any]
) -> None:
    await coll.insert_one({"_id": 1, "a": [1]})
    with pytest.raises(NotImplementedError, match=r"DIVERGENCES\.md"):
        await coll.aggregate([stage])
    with pytest.raises(NotImplementedError):
        await coll.aggregate([], let={"v": 1})


async def test_a_lookup_over_100_mib_of_matches_fails_with_4568(coll: InMemoryCollection) -> None:
    await coll.insert_one({"_id": "head", "run": "r"})
    blob = "x" * (15 * 1024 * 1024)
    await coll.insert_many([{"_id": index, "run": "r", "blob": blob} for index in range(7)])
    pipeline = [
        {"$match": {"_id": "head"}},
        {"$lookup": {"from": "coll", "localField": "run", "foreignField": "run", "as": "all"}},
    ]
    with pytest.raises(OperationFailure) as raised:
        await coll.aggregate(pipeline)
    assert raised.value.code == 4568


async def test_a_returned_document_over_16_mib_fails_with_10334(coll: InMemoryCollection) -> None:
    await coll.insert_many(
        [{"_id": "head", "run": "r"}, {"_id": 1, "run": "r", "blob": "x" * (9 * 1024 * 1024)}]
    )
    await coll.insert_one({"_id": 2, "run": "r", "blob": "y" * (9 * 1024 * 1024)})
    pipeline = [
        {"$match": {"_id": "head"}},
        {"$lookup": {"from": "coll", "localField": "run", "foreignField": "run", "as": "all"}},
    ]
    with pytest.raises(OperationFailure) as raised:
        await coll.aggregate(pipeline)
    assert raised.value.code == 10334


async def test_aggregate_sees_now_decodes_with_the_views_codec_and_honours_faults(
    client: InMemoryMongoClient, coll: InMemoryCollection
) -> None:
    await coll.insert_one({"_id": 1, "at": datetime(2000, 1, 1)})
    idle = {"$expr": {"$lt": ["$at", {"$dateSubtract": {"startDate": "$$NOW", "unit": "day", "amount": 1}}]}}
    (found,) = await run(
        coll.with_options(codec_options=coll.codec_options.with_options(tz_aware=True)), [{"$match": idle}]
    )
    assert found["at"].tzinfo is not None
    client.clock = lambda: datetime(2000, 1, 1, 12)
    assert await run(coll, [{"$match": idle}]) == []
    coll.fail_next("aggregate", AutoReconnect("lost"))
    with pytest.raises(AutoReconnect):
        await coll.aggregate([])


async def test_a_collection_with_a_default_collation_needs_the_simple_one(
    client: InMemoryMongoClient,
) -> None:
    coll = await client["db"].create_collection("fr", collation={"locale": "fr"})
    with pytest.raises(NotImplementedError):
        await coll.aggregate([])
    assert await run(coll, [], collation=SIMPLE) == []


async def test_divergence_an_aggregate_runs_atomically_its_lookups_included() -> None:
    # Entry 31: the server may yield between documents and between a $lookup's sub-queries, so a
    # write that commits meanwhile may be seen by some lookups and not others; the engine runs the
    # whole pipeline at once. Here one insert_many (itself atomic in the engine, entry 20) adds an
    # item to each run while the counts are read: under every seed, both or neither are seen.
    outcomes: set[tuple[int, int]] = set()
    for seed in range(12):
        client = InMemoryMongoClient(scheduling=Scheduling(seed=seed))
        coll = client["db"]["coll"]
        await seed_runs(coll)
        added = [{"_id": 100, "kind": "item", "run": "a"}, {"_id": 101, "kind": "item", "run": "b"}]
        result, _ = await asyncio.gather(run(coll, COUNT_PER_RUN), coll.insert_many(added))
        counts = {document["_id"]: (document["items"] or [{"n": 0}])[0]["n"] for document in result}
        outcomes.add((counts[1], counts[2]))
    assert outcomes <= {(2, 0), (3, 1)}
