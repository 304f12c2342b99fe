"""Create and check the checkpoint collection's indexes: a deploy-time step.

Run from the repository root:

    python3 -m uv run --directory python python ../samples/index_provisioning.py

``ensure_indexes()`` is the only operation that creates indexes, and creating an index that already
exists with the same definition does nothing, so a deploy job can run it every time. A worker can then
call ``validate_indexes()`` at start-up: it only reads, and fails naming a missing or different index.

With ``MONGODB_URI`` set the sample uses that server; without it, the in-process engine from
``agent_framework_mongodb.testing``. It says which.
"""

import asyncio
import os

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions

# Indexes belong to the collection, not to a run; any run's options reach the same collection.
OPTIONS = MongoDBCheckpointStorageOptions(
    tenant_id="deploy", workflow_name="expense-approval", session_id="index-provisioning"
)


async def open_storage() -> MongoDBCheckpointStorage:
    """A storage on MONGODB_URI when set, else on the in-process engine."""
    if os.environ.get("MONGODB_URI"):
        print("Using the MongoDB server named by MONGODB_URI.")
        return await MongoDBCheckpointStorage.connect(options=OPTIONS, wait_timeout=10)

    from agent_framework_mongodb.testing import InMemoryMongoClient

    print("MONGODB_URI is not set: using the in-process engine (agent_framework_mongodb.testing).")
    return await MongoDBCheckpointStorage.connect(mongo_client=InMemoryMongoClient(), options=OPTIONS)


async def main() -> None:
    async with await open_storage() as storage:
        names = await storage.ensure_indexes()  # at deploy time
        print(f"Ensured {len(names)} indexes: {', '.join(names)}.")
        await storage.validate_indexes()  # at worker start-up
        print("Validated: every index exists with its exact definition.")


if __name__ == "__main__":
    asyncio.run(main())
