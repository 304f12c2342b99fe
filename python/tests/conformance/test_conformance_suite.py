"""This storage through the conformance suite's pytest plugin, as another storage's author registers theirs.

One test per check (``mongodb_engine[list.save_order]`` and so on), on the in-process engine;
``conformance/report.py`` runs the same checks through pymongo on the wire front as well.
"""

from __future__ import annotations

from datetime import timedelta

from agent_framework import CheckpointStorage
from agent_framework_checkpoint_conformance import Capabilities, StorageScope
from agent_framework_checkpoint_conformance.plugin import checkpoint_storage_conformance

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.testing import InMemoryMongoClient

ENGINE = InMemoryMongoClient()
"""One engine for every check: each check is its own run (``scope.run_id``), as in one database."""


@checkpoint_storage_conformance(
    capabilities=Capabilities(shared_between_instances=True, concurrent_writers=True)
)
async def mongodb_engine(scope: StorageScope) -> CheckpointStorage:
    options = MongoDBCheckpointStorageOptions(
        tenant_id="conformance",
        workflow_name=scope.workflow_name,
        session_id=scope.run_id,
        allowed_checkpoint_types=scope.allowed_checkpoint_types,
        ttl=timedelta(days=1),
        signing_keys=(b"a test key for the conformance suite only",),
    )
    return MongoDBCheckpointStorage(mongo_client=ENGINE, options=options, database_name="conformance")
