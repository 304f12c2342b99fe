"""Keep an Agent Framework workflow's checkpoints in MongoDB.

Run from the repository root (see README.md, Quick start):

    python3 -m uv run --directory python python ../samples/workflow_checkpoint_resume.py

With ``MONGODB_URI`` set the sample uses that server; without it, the in-process engine from
``agent_framework_mongodb.testing``. It says which.
"""

from __future__ import annotations

import asyncio
import os

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions

OPTIONS = MongoDBCheckpointStorageOptions(
    tenant_id="demo-tenant", workflow_name="expense-approval", session_id="expense-42"
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
        scope = storage.options
        print(f"Storage ready for run {scope.session_id!r} of workflow {scope.workflow_name!r}.")


if __name__ == "__main__":
    asyncio.run(main())
