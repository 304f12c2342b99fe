"""Create and check the checkpoint collection's indexes: a deploy-time step.

Run from the repository root:

    python3 -m uv run --directory python python ../samples/index_provisioning.py

Indexes belong to the collection, not to a run, so provisioning needs only the collection: no
tenant, workflow or session. ``ensure_checkpoint_indexes()`` is the only call that creates indexes,
and creating an index that already exists with the same definition does nothing, so a deploy job
can run it every time. A worker can then call ``validate_checkpoint_indexes()`` at start-up: it only
reads, and fails naming a missing or different index. (A storage's ``ensure_indexes()`` and
``validate_indexes()`` do the same on its own collection.)

With ``MONGODB_URI`` set the sample uses that server; without it, the in-process engine from
``agent_framework_mongodb.testing``. It says which.
"""

import asyncio
import os
from typing import Any

from pymongo import AsyncMongoClient

from agent_framework_mongodb.checkpoints import ensure_checkpoint_indexes, validate_checkpoint_indexes
from agent_framework_mongodb.testing import InMemoryMongoClient

# The storage's default database and collection names.
DATABASE_NAME = "agent_framework"
COLLECTION_NAME = "workflow_checkpoints"


def open_client() -> AsyncMongoClient[dict[str, Any]] | InMemoryMongoClient:
    """A client for MONGODB_URI when set, else the in-process engine."""
    uri = os.environ.get("MONGODB_URI")
    if uri:
        print("Using the MongoDB server named by MONGODB_URI.")
        return AsyncMongoClient(uri)
    print("MONGODB_URI is not set: using the in-process engine (agent_framework_mongodb.testing).")
    return InMemoryMongoClient()


async def main() -> None:
    client = open_client()
    try:
        collection = client[DATABASE_NAME][COLLECTION_NAME]
        names = await ensure_checkpoint_indexes(collection, timeout=30)  # at deploy time
        print(f"Ensured {len(names)} indexes: {', '.join(names)}.")
        await validate_checkpoint_indexes(collection)  # at worker start-up
        print("Validated: every index exists with its exact definition.")
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())
