"""A checkpoint saved after a ``w:1`` failover loads, though the failover lost chunks its storage
remembers (issue 29).

With ``w:1`` (the implicit default of a primary-secondary-arbiter set) a primary acknowledges a save
before any secondary has it; if it then fails, the new primary never had that save's chunks. The
same storage's next save references them: it must find out they are gone (a touch's matched count)
and write them again, not leave their touches out as chunks it stored in the same window (ADR 0029,
amended: only under ``w: "majority"``). Checked through a real client on a two-member front whose
replication is paused before the lost saves, then failed over.
"""

from __future__ import annotations

from pathlib import Path

from agent_framework_mongodb.checkpoints.codec import canonical_hash

from ...conftest import WireServerFactory
from ..storage._support import make_storage
from ..storage.test_chunked_checkpoints import conversation
from .conftest import Connect

DATABASE, COLLECTION = "checkpoint_db", "checkpoint_coll"
LOST_UP_TO = 40
"""Saves 11 to 40 are lost: long enough for them to complete leaves that the next save references."""


async def test_a_save_after_a_w1_failover_that_lost_remembered_chunks_loads(
    make_wire_server: WireServerFactory, connect: Connect, tmp_path: Path
) -> None:
    server = await make_wire_server(path=tmp_path / "engine.journal", members=2)
    storage = make_storage(connect(server, w=1)[DATABASE][COLLECTION], operation_timeout=5.0)
    await storage.ensure_indexes()
    await storage.save(conversation(10))  # replicated

    server.pause_replication()
    for step in range(11, LOST_UP_TO + 1):  # acknowledged by the primary alone
        await storage.save(conversation(step))
    await server.fail_over(to=1)  # the new primary never had them
    server.resume_replication()

    after = conversation(LOST_UP_TO + 1)
    await storage.save(after)  # references leaves the lost saves completed
    reader = make_storage(connect(server)[DATABASE][COLLECTION])
    loaded = await reader.load(after.checkpoint_id)
    assert canonical_hash(loaded.to_dict()) == canonical_hash(after.to_dict())
    assert await reader.list_checkpoint_ids(workflow_name=after.workflow_name) == [
        conversation(10).checkpoint_id,
        after.checkpoint_id,
    ]
