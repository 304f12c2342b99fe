"""The diagnostic checks one by one: each against the answers that make it pass, warn and fail."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path

from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

from agent_framework_mongodb.checkpoints.diagnostics import (
    MICROSOFT_DISTRIBUTION,
    OUR_DISTRIBUTION,
    SHARED_INIT,
    Status,
    check_allowed_types,
    check_deployment,
    check_installation,
    check_signing_keys,
    feature_compatibility_check,
    indexes_check,
    read_preference_check,
    retryable_writes_check,
    server_version_check,
    topology_check,
    write_concern_check,
)
from agent_framework_mongodb.checkpoints.indexes import CHECKPOINT_INDEXES, RUN_ACTIVITY_INDEX
from agent_framework_mongodb.testing import InMemoryMongoClient

# -- the installation, in a made-up site-packages --------------------------------------------------

OURS_INIT = b"# agent-framework-mongodb-checkpoints's __init__\n"
THEIRS_INIT = b"# Microsoft's __init__\n"
SHARED_MARKER = "agent_framework_mongodb/py.typed"
OUR_FILES = {"agent_framework_mongodb/checkpoints/__init__.py": b"# checkpoints\n", SHARED_MARKER: b""}
THEIR_FILES = {"agent_framework_mongodb/_store.py": b"# vector store\n", SHARED_MARKER: b""}


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def install(
    site: Path, name: str, version: str, init: bytes, files: dict[str, bytes], *, editable: bool = False
) -> None:
    """Write a distribution as pip leaves it: its files, METADATA and a RECORD hashing each file."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows = [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    if editable:
        (info / "direct_url.json").write_text(
            json.dumps({"url": "file:///src", "dir_info": {"editable": True}})
        )
    else:
        for path, data in {SHARED_INIT: init, **files}.items():
            target = site / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            rows.append(f"{path},{record_hash(data)},{len(data)}")
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def ours(site: Path, **options: bool) -> None:
    install(site, OUR_DISTRIBUTION, "0.1.0", OURS_INIT, OUR_FILES, **options)


def theirs(site: Path) -> None:
    install(site, MICROSOFT_DISTRIBUTION, "1.0.0a261015", THEIRS_INIT, THEIR_FILES)


def test_our_distribution_alone_is_ok(tmp_path: Path) -> None:
    ours(tmp_path)
    check = check_installation(path=[str(tmp_path)])
    assert check.status is Status.OK, check
    assert "is not installed" in check.summary


def test_ours_installed_after_microsofts_owns_the_shared_init(tmp_path: Path) -> None:
    theirs(tmp_path)
    ours(tmp_path)  # writes its __init__.py over theirs
    check = check_installation(path=[str(tmp_path)])
    assert check.status is Status.OK, check
    assert check.details["shared_init_owner"] == OUR_DISTRIBUTION
    assert "Uninstalling either deletes that file" in check.summary
    after = check.details["after_uninstalling"]
    assert isinstance(after, dict)
    assert set(after) == {OUR_DISTRIBUTION, MICROSOFT_DISTRIBUTION}


def test_microsofts_installed_last_is_a_warning_with_the_import_that_fails(tmp_path: Path) -> None:
    ours(tmp_path)
    theirs(tmp_path)
    check = check_installation(path=[str(tmp_path)])
    assert check.status is Status.WARN, check
    assert check.details["shared_init_owner"] == MICROSOFT_DISTRIBUTION
    assert "from agent_framework_mongodb import MongoDBCheckpointStorage" in check.summary
    assert check.fix is not None
    assert f"--force-reinstall --no-deps {OUR_DISTRIBUTION}" in check.fix


def test_an_uninstall_that_deleted_the_shared_init_fails(tmp_path: Path) -> None:
    ours(tmp_path)
    theirs(tmp_path)
    # What `pip uninstall agent-framework-mongodb` leaves: both shared files are gone.
    (tmp_path / SHARED_INIT).unlink()
    (tmp_path / SHARED_MARKER).unlink()
    check = check_installation(path=[str(tmp_path)])
    assert check.status is Status.FAIL, check
    assert "is missing" in check.summary
    assert check.fix is not None
    assert f"pip install --force-reinstall --no-deps {OUR_DISTRIBUTION}" in check.fix


def test_a_missing_file_of_ours_fails(tmp_path: Path) -> None:
    ours(tmp_path)
    (tmp_path / "agent_framework_mongodb/checkpoints/__init__.py").unlink()
    check = check_installation(path=[str(tmp_path)])
    assert check.status is Status.FAIL, check
    assert check.details["missing_files"] == ["agent_framework_mongodb/checkpoints/__init__.py"]


def test_a_shared_init_neither_installed_is_a_warning(tmp_path: Path) -> None:
    ours(tmp_path)
    (tmp_path / SHARED_INIT).write_bytes(b"# edited\n")
    check = check_installation(path=[str(tmp_path)])
    assert check.status is Status.WARN, check
    assert "not the file either distribution installed" in check.summary


def test_no_metadata_and_editable_installs(tmp_path: Path) -> None:
    assert check_installation(path=[str(tmp_path)]).status is Status.WARN
    ours(tmp_path, editable=True)
    assert check_installation(path=[str(tmp_path)]).status is Status.OK
    theirs(tmp_path)
    assert check_installation(path=[str(tmp_path)]).status is Status.WARN


def test_this_environments_installation_is_found() -> None:
    check = check_installation()
    assert check.status is Status.OK, check
    assert OUR_DISTRIBUTION in check.summary


# -- the server's answers --------------------------------------------------------------------------

UNAUTHORIZED = OperationFailure("not authorized", code=13)


def test_server_version() -> None:
    assert server_version_check({"version": "7.0.12"}).status is Status.OK
    old = server_version_check({"version": "4.4.29"})
    assert old.status is Status.FAIL
    assert old.fix is not None
    assert "5.0" in old.fix
    assert server_version_check(ServerSelectionTimeoutError("x")).status is Status.WARN


def test_feature_compatibility_version() -> None:
    assert (
        feature_compatibility_check({"featureCompatibilityVersion": {"version": "7.0"}}).status is Status.OK
    )
    low = feature_compatibility_check({"featureCompatibilityVersion": {"version": "4.4"}})
    assert low.status is Status.FAIL
    assert "setFeatureCompatibilityVersion" in (low.fix or "")
    unread = feature_compatibility_check(UNAUTHORIZED)
    assert unread.status is Status.WARN
    assert "not authorized" in unread.summary
    assert "getParameter" in (unread.fix or "")
    assert feature_compatibility_check({}, in_process=True).status is Status.SKIP


def test_topology() -> None:
    replica = topology_check({"setName": "rs0", "hosts": ["a:1", "b:1", "c:1"], "isWritablePrimary": True})
    assert replica.status is Status.OK
    assert "rs0" in replica.summary
    assert (
        "arbiter" in topology_check({"setName": "rs0", "hosts": ["a:1", "b:1"], "arbiters": ["c:1"]}).summary
    )
    assert topology_check({"msg": "isdbgrid"}).status is Status.OK
    standalone = topology_check({"isWritablePrimary": True})
    assert standalone.status is Status.WARN
    assert "replica set" in (standalone.fix or "")


def test_write_concern() -> None:
    assert write_concern_check({"w": "majority"}, None).status is Status.OK
    assert write_concern_check({"w": 0}, None).status is Status.FAIL
    assert write_concern_check({"w": 1}, None).status is Status.WARN
    implicit = write_concern_check(
        {}, {"defaultWriteConcern": {"w": "majority"}, "defaultWriteConcernSource": "implicit"}
    )
    assert implicit.status is Status.OK
    assert "implicit" in implicit.summary
    arbiters = write_concern_check(
        {}, {"defaultWriteConcern": {"w": 1}, "defaultWriteConcernSource": "implicit"}
    )
    assert arbiters.status is Status.WARN
    assert write_concern_check({}, UNAUTHORIZED).status is Status.WARN
    assert write_concern_check({}, None, in_process=True).status is Status.OK


def test_an_implicit_default_the_server_leaves_unstated_is_w1() -> None:
    """A primary-secondary-arbiter set answers getDefaultRWConcern without ``defaultWriteConcern``
    because its implicit default is w:1 (jstests/replsets/get_default_write_concern_majority.js)."""
    psa = write_concern_check({}, {"defaultWriteConcernSource": "implicit", "localUpdateWallClockTime": 0})
    assert psa.status is Status.WARN
    assert psa.details == {"w": 1}
    assert "unstated" in psa.summary


def test_the_feature_compatibility_version_through_mongos_is_the_clusters_document() -> None:
    old = feature_compatibility_check(
        {"featureCompatibilityVersion": {"_id": "featureCompatibilityVersion", "version": "4.4"}},
        sharded=True,
    )
    assert old.status is Status.FAIL
    current = feature_compatibility_check(
        {"featureCompatibilityVersion": {"_id": "featureCompatibilityVersion", "version": "7.0"}},
        sharded=True,
    )
    assert current.status is Status.OK
    unstated = feature_compatibility_check({"featureCompatibilityVersion": None}, sharded=True)
    assert unstated.status is Status.WARN
    refused = feature_compatibility_check(UNAUTHORIZED, sharded=True)
    assert refused.status is Status.WARN
    assert "system.version" in (refused.fix or "")


def test_a_sharded_cluster_below_5_1_warns_that_run_pages_need_it() -> None:
    below = server_version_check({"version": "5.0.14"}, sharded=True)
    assert below.status is Status.WARN
    assert "$lookup" in below.summary
    assert server_version_check({"version": "5.1.0"}, sharded=True).status is Status.OK
    assert server_version_check({"version": "5.0.14"}).status is Status.OK
    assert server_version_check({"version": "4.4.1"}, sharded=True).status is Status.FAIL


def test_retryable_writes() -> None:
    assert retryable_writes_check(True).status is Status.OK
    off = retryable_writes_check(False)
    assert off.status is Status.WARN
    assert "retryWrites=false" in (off.fix or "")
    assert retryable_writes_check(None).status is Status.SKIP


def test_read_preference() -> None:
    assert read_preference_check("primary").status is Status.OK
    secondary = read_preference_check("secondaryPreferred")
    assert secondary.status is Status.WARN
    assert "still reads the primary" in secondary.summary


def test_indexes_by_name() -> None:
    listed = {spec.name: spec.model().document for spec in CHECKPOINT_INDEXES}
    assert indexes_check(listed).status is Status.OK
    del listed["checkpoint_scope_identity"]
    listed[RUN_ACTIVITY_INDEX.name] = {"key": {"other": 1}, "name": RUN_ACTIVITY_INDEX.name}
    check = indexes_check(listed)
    assert check.status is Status.FAIL
    assert check.details["missing"] == ["checkpoint_scope_identity"]
    assert check.details["different"] == {RUN_ACTIVITY_INDEX.name: ["keys", "partialFilterExpression"]}
    assert "neither idempotent nor ordered" in check.summary
    assert check.fix is not None
    assert (
        f"indexes drop {RUN_ACTIVITY_INDEX.name} --yes`, then `agent-framework-mongodb indexes ensure`"
        in (check.fix)
    )


def test_signing_keys() -> None:
    source = "KEYS"
    assert check_signing_keys([], source=source).status is Status.WARN
    assert check_signing_keys([b"k" * 32], source=source).status is Status.OK
    assert "all 2 verify" in check_signing_keys([b"k" * 32, b"j" * 32], source=source).summary
    short = check_signing_keys([b"short"], source=source)
    assert short.status is Status.FAIL
    assert "at least 32" in short.summary
    assert "short" not in short.summary.replace("at least", "")  # no key material


def test_allowed_types() -> None:
    assert check_allowed_types([]).status is Status.SKIP
    assert check_allowed_types(["json.decoder:JSONDecoder"]).status is Status.OK
    missing = check_allowed_types(["no_such_module_here:Thing"])
    assert missing.status is Status.FAIL
    assert "no_such_module_here" in missing.summary


# -- the deployment end to end on the engine -------------------------------------------------------


def deployment(client: InMemoryMongoClient) -> dict[str, Status]:
    checks = asyncio.run(
        check_deployment(
            client, database_name="db", collection_name="c", operation_timeout=5, server_selection_timeout=5
        )
    )
    return {check.name: check.status for check in checks}


def test_retry_writes_off_in_the_uri_is_a_warning() -> None:
    assert deployment(InMemoryMongoClient(retryWrites=False))["retryable writes"] is (Status.WARN)
    assert deployment(InMemoryMongoClient())["retryable writes"] is Status.OK


def test_the_engines_write_concern_and_read_preference_are_the_clients() -> None:
    assert deployment(InMemoryMongoClient(w=0))["write concern"] is Status.FAIL
    assert deployment(InMemoryMongoClient(w=1))["write concern"] is Status.WARN
    assert deployment(InMemoryMongoClient(readPreference="secondary"))["read preference"] is Status.WARN
    plain = deployment(InMemoryMongoClient())
    assert plain["write concern"] is Status.OK
    assert plain["feature compatibility"] is Status.SKIP
    assert plain["indexes"] is Status.FAIL  # nothing created yet


def test_a_failed_listing_is_reported_not_raised() -> None:
    client = InMemoryMongoClient()
    client.fail_next("list_indexes", OperationFailure("boom", code=8000))
    statuses = deployment(client)
    assert statuses["indexes"] is Status.WARN
    assert statuses["collation"] is Status.WARN


def test_no_connection_skips_the_servers_checks() -> None:
    client = InMemoryMongoClient()
    asyncio.run(client.close())
    statuses = deployment(client)
    assert statuses["connection"] is Status.FAIL
    assert statuses["indexes"] is Status.SKIP
    assert statuses["server version"] is Status.SKIP
