"""Diagnose a deployment of the checkpoint storage: what ``agent-framework-mongodb doctor`` runs.

Each check is a small function returning a :class:`Check` (``ok``, ``warn``, ``fail`` or
``skip``, a one-line summary and a one-line fix); none raises for what it finds. Useful outside the
command line too, for example in a worker's start-up health check::

    checks = await check_deployment(client, database_name="agent_framework",
                                    collection_name="workflow_checkpoints",
                                    operation_timeout=10, server_selection_timeout=10)
    failed = [check for check in checks if check.status is Status.FAIL]

Not part of the package's top-level API (``agent_framework_mongodb.checkpoints.__all__``): import
this module by its path.
"""

from ._deployment import (
    MINIMUM_SERVER,
    check_deployment,
    collation_check,
    connection_check,
    feature_compatibility_check,
    indexes_check,
    is_in_process,
    read_preference_check,
    retryable_writes_check,
    server_version_check,
    topology_check,
    write_concern_check,
)
from ._installation import MICROSOFT_DISTRIBUTION, OUR_DISTRIBUTION, SHARED_INIT, check_installation
from ._model import Check, Status
from ._process import (
    DEFAULT_CHILD_TIMEOUT,
    check_allowed_types,
    check_framework_types,
    check_signing_keys,
    waiting_run_checkpoint_payload,
)

__all__ = [
    "DEFAULT_CHILD_TIMEOUT",
    "MICROSOFT_DISTRIBUTION",
    "MINIMUM_SERVER",
    "OUR_DISTRIBUTION",
    "SHARED_INIT",
    "Check",
    "Status",
    "check_allowed_types",
    "check_deployment",
    "check_framework_types",
    "check_installation",
    "check_signing_keys",
    "collation_check",
    "connection_check",
    "feature_compatibility_check",
    "indexes_check",
    "is_in_process",
    "read_preference_check",
    "retryable_writes_check",
    "server_version_check",
    "topology_check",
    "waiting_run_checkpoint_payload",
    "write_concern_check",
]
