"""Checks of the deployment: the connection, the server, and the checkpoint collection.

Each check is a small function from what the server answered to a :class:`Check`, so it can be
tested against any answer; :func:`check_deployment` asks the server (a ping, then five round trips
under one operation deadline, each request bounded by it) and runs them. Against the in-process engine
(``agent_framework_mongodb.testing``), what only a server has (a feature compatibility version, a
replica set, a cluster-wide write concern) is reported as skipped.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Awaitable, Mapping
from typing import Any, Final, Protocol, cast

from pymongo.errors import OperationFailure, PyMongoError

from ...errors import MongoDBIntegrationError, MongoDBTimeoutError
from ..connection import DEFAULT_COLLECTION_NAME, DEFAULT_DATABASE_NAME, wait_for_server
from ..deadlines import bounded, operation_deadline
from ..driver import CheckpointClient, CheckpointCollection
from ..indexes import CHECKPOINT_INDEXES, ID_INDEX_NAME, collation_conflict, index_differences
from ._model import Check, Status

__all__ = [
    "MINIMUM_SERVER",
    "MINIMUM_SHARDED_LOOKUP",
    "check_deployment",
    "cli_command",
    "collation_check",
    "connection_check",
    "feature_compatibility_check",
    "indexes_check",
    "is_in_process",
    "read_preference_check",
    "retryable_writes_check",
    "server_version_check",
    "topology_check",
    "write_concern_check",
]

MINIMUM_SERVER = (5, 0)
"""MongoDB 5.0 with featureCompatibilityVersion 5.0 (docs/deployment.md, "Minimum server")."""
MINIMUM_SHARDED_LOOKUP = (5, 1)
"""``$lookup`` from a sharded collection (the run pages' join) needs MongoDB 5.1 (the manual's
``$lookup`` page, "Sharded Collections")."""
_FCV_ID: Final = "featureCompatibilityVersion"
_FCV_BY_HAND_ON_MONGOS: Final = (
    'db.getSiblingDB("admin").system.version.findOne({_id: "featureCompatibilityVersion"})'
)

_UNAUTHORIZED = 13
_CLI = "agent-framework-mongodb"
_ENGINE = "the in-process engine"

Unanswered = PyMongoError | MongoDBTimeoutError
"""Why a question went unanswered: the driver's error, or a request the driver did not end by its
deadline (``deadlines.bounded``)."""
_UNANSWERED: Final = (PyMongoError, MongoDBTimeoutError)


class _AdminDatabase(Protocol):
    async def command(self, command: Mapping[str, Any], /) -> Mapping[str, Any]: ...


class _VersionCollection(Protocol):
    async def find_one(self, filter: Mapping[str, Any], /) -> Mapping[str, Any] | None: ...


class _Settings(Protocol):
    """What pymongo's collections (and the engine's) say of their read preference and write concern."""

    @property
    def read_preference(self) -> Any: ...

    @property
    def write_concern(self) -> Any: ...


def is_in_process(client: object) -> bool:
    """Whether ``client`` is this package's in-process engine (told by its module, never imported)."""
    return type(client).__module__.startswith("agent_framework_mongodb.testing")


async def check_deployment(
    client: CheckpointClient,
    *,
    database_name: str,
    collection_name: str,
    operation_timeout: float,
    server_selection_timeout: float,
) -> list[Check]:
    """The connection, the server and the collection: every check in order, none raising."""
    collection = client[database_name][collection_name]
    in_process = is_in_process(client)
    connection = await connection_check(collection, timeout=server_selection_timeout, in_process=in_process)
    if connection.status is Status.FAIL:
        names = (
            "server version",
            "feature compatibility",
            "topology",
            "indexes",
            "collation",
            "write concern",
        )
        retry = retryable_writes_check(_retry_writes(client))
        skipped = [Check(name, Status.SKIP, "Not checked: no connection.") for name in names]
        return [connection, *skipped, retry, read_preference_check(_mode(collection))]
    admin = cast("_AdminDatabase", client["admin"])
    with operation_deadline(operation_timeout):
        build = await _ask(collection.database.command("buildInfo"))
        hello = await _ask(collection.database.command("hello"))
        sharded = _is_mongos(hello)
        fcv = await _feature_compatibility(admin, sharded=sharded)
        listed = await _listed_indexes(collection)
        default = None if in_process else await _ask(admin.command({"getDefaultRWConcern": 1}))
    where = {"database_name": database_name, "collection_name": collection_name}
    return [
        connection,
        server_version_check(build, in_process=in_process, sharded=sharded),
        feature_compatibility_check(fcv, in_process=in_process, sharded=sharded),
        topology_check(hello, in_process=in_process),
        indexes_check(listed, **where),
        collation_check(listed, **where),
        write_concern_check(_write_concern(collection), default, in_process=in_process),
        retryable_writes_check(_retry_writes(client)),
        read_preference_check(_mode(collection)),
    ]


async def connection_check(collection: CheckpointCollection, *, timeout: float, in_process: bool) -> Check:
    """Whether a server answers a ping within ``timeout`` (retrying transient failures)."""
    try:
        await wait_for_server(collection.database, timeout=timeout)
    except MongoDBIntegrationError as error:
        return Check(
            "connection",
            Status.FAIL,
            str(error),
            "Check the URI's hosts, credentials and TLS options, and that the server is running.",
            {"category": error.category},
        )
    where = _ENGINE if in_process else "the server"
    return Check("connection", Status.OK, f"{where[0].upper()}{where[1:]} answered a ping.", None, {})


def server_version_check(
    build: Mapping[str, Any] | Unanswered, *, in_process: bool = False, sharded: bool = False
) -> Check:
    """MongoDB 5.0 or newer, from ``buildInfo``; through ``mongos``, 5.1 or newer for run pages."""
    name = "server version"
    if isinstance(build, _UNANSWERED):
        return _unanswered(name, build, "db.runCommand({buildInfo: 1})")
    version = str(build.get("version", "unknown"))
    if in_process:
        return Check(
            name,
            Status.OK,
            f"{_ENGINE.capitalize()}, answering as MongoDB {version}.",
            None,
            {"version": version},
        )
    numbers = _version_numbers(version)
    if sharded and numbers is not None and MINIMUM_SERVER <= numbers < MINIMUM_SHARDED_LOOKUP:
        return Check(
            name,
            Status.WARN,
            f"MongoDB {version} (mongos): list_runs and the catalog's run pages join the counters to "
            "the checkpoints with $lookup, which a sharded checkpoint collection supports from 5.1.",
            "Upgrade to MongoDB 5.1 or newer, or keep the checkpoint collection unsharded "
            "(docs/deployment.md, Sharding).",
            {"version": version},
        )
    if numbers is None or numbers >= MINIMUM_SERVER:
        return Check(name, Status.OK, f"MongoDB {version}.", None, {"version": version})
    return Check(
        name,
        Status.FAIL,
        f"MongoDB {version} is older than 5.0, which the storage needs (update pipelines, three TTL "
        "indexes on one key).",
        "Upgrade the server to MongoDB 5.0 or newer (docs/deployment.md, Minimum server).",
        {"version": version},
    )


def feature_compatibility_check(
    reply: Mapping[str, Any] | Unanswered, *, in_process: bool = False, sharded: bool = False
) -> Check:
    """featureCompatibilityVersion 5.0 or newer: from ``getParameter`` on a replica set; through
    ``mongos``, whose ``getParameter`` answers with its own binary version or an error
    (SERVER-100224, SERVER-118760), from the cluster's ``admin.system.version`` document, given as
    ``{"featureCompatibilityVersion": document}``."""
    name = "feature compatibility"
    if in_process:
        return Check(name, Status.SKIP, f"{_ENGINE.capitalize()} has no featureCompatibilityVersion.")
    if isinstance(reply, _UNANSWERED):
        by_hand = (
            _FCV_BY_HAND_ON_MONGOS
            if sharded
            else "db.adminCommand({getParameter: 1, featureCompatibilityVersion: 1})"
        )
        return _unanswered(name, reply, by_hand)
    setting: object = reply.get(_FCV_ID)
    if setting is None:
        return Check(
            name,
            Status.WARN,
            "Not checked: the cluster states no featureCompatibilityVersion.",
            f"Check by hand with {_FCV_BY_HAND_ON_MONGOS}.",
            {},
        )
    version = (
        str(cast("Mapping[str, Any]", setting).get("version"))
        if isinstance(setting, Mapping)
        else str(setting)
    )
    numbers = _version_numbers(version)
    if numbers is not None and numbers < MINIMUM_SERVER:
        return Check(
            name,
            Status.FAIL,
            f"featureCompatibilityVersion {version}: below 5.0 the second and third TTL index on "
            "expires_at conflict with the first, so indexes ensure fails.",
            "Raise it with setFeatureCompatibilityVersion (docs/deployment.md, Minimum server).",
            {"version": version},
        )
    return Check(name, Status.OK, f"featureCompatibilityVersion {version}.", None, {"version": version})


def topology_check(hello: Mapping[str, Any] | Unanswered, *, in_process: bool = False) -> Check:
    """A replica set or a sharded cluster, from ``hello``; a standalone server is a warning."""
    name = "topology"
    if in_process:
        return Check(
            name,
            Status.SKIP,
            f"{_ENGINE.capitalize()}: one process, no replication (production needs a replica set).",
        )
    if isinstance(hello, _UNANSWERED):
        return _unanswered(name, hello, "db.runCommand({hello: 1})")
    if hello.get("msg") == "isdbgrid":
        return Check(name, Status.OK, "A sharded cluster (connected to mongos).", None, {"kind": "sharded"})
    set_name = hello.get("setName")
    if set_name is not None:
        hosts: object = hello.get("hosts", [])
        arbiters: object = hello.get("arbiters", [])
        members = len(cast("list[object]", hosts)) if isinstance(hosts, list) else 0
        voters = len(cast("list[object]", arbiters)) if isinstance(arbiters, list) else 0
        details: dict[str, object] = {"kind": "replica set", "members": members, "arbiters": voters}
        arbiter_note = f", {voters} arbiter(s): check the write concern" if voters else ""
        return Check(
            name,
            Status.OK,
            f"Replica set {set_name!s}, {members} member(s) listed by hello{arbiter_note}.",
            None,
            details,
        )
    return Check(
        name,
        Status.WARN,
        "A standalone server: no retryable writes and no majority write concern, so a failover or a "
        "network error can lose a save.",
        "Run a replica set (for development a single-node one, as compose.yaml starts).",
        {"kind": "standalone"},
    )


def cli_command(
    database_name: str = DEFAULT_DATABASE_NAME, collection_name: str = DEFAULT_COLLECTION_NAME
) -> str:
    """The command line's program with the ``--database`` and ``--collection`` the collection needs
    (none for the defaults); the connection itself (``MONGODB_URI`` or ``--uri``) is the reader's."""
    words = [_CLI]
    if database_name != DEFAULT_DATABASE_NAME:
        words.append(f"--database {shlex.quote(database_name)}")
    if collection_name != DEFAULT_COLLECTION_NAME:
        words.append(f"--collection {shlex.quote(collection_name)}")
    return " ".join(words)


def _ensure(command: str) -> str:
    return f"`{command} indexes ensure` (a deploy-time step; see docs/deployment.md, Indexes)"


def indexes_check(
    listed: Mapping[str, Mapping[str, Any]] | Unanswered,
    *,
    database_name: str = DEFAULT_DATABASE_NAME,
    collection_name: str = DEFAULT_COLLECTION_NAME,
) -> Check:
    """Every required index present with its exact definition, by name (``list_indexes``).

    The fix is commands to run in order: each different index dropped (``indexes drop NAME --yes``),
    then ``indexes ensure``; on a collection with a default collation, which ``indexes ensure``
    refuses, the collation check's fix comes first.
    """
    name = "indexes"
    command = cli_command(database_name, collection_name)
    if isinstance(listed, _UNANSWERED):
        return _unanswered(name, listed, f"{command} indexes validate")
    missing = [spec.name for spec in CHECKPOINT_INDEXES if spec.name not in listed]
    different = {
        spec.name: index_differences(spec, listed[spec.name])
        for spec in CHECKPOINT_INDEXES
        if spec.name in listed and index_differences(spec, listed[spec.name])
    }
    details: dict[str, object] = {"missing": missing, "different": different}
    if not missing and not different:
        return Check(
            name,
            Status.OK,
            f"All {len(CHECKPOINT_INDEXES)} checkpoint indexes exist as defined.",
            None,
            details,
        )
    problems: list[str] = []
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if different:
        problems.append(
            "different " + ", ".join(f"{index} ({', '.join(fields)})" for index, fields in different.items())
        )
    unique = [spec.name for spec in CHECKPOINT_INDEXES if spec.unique and spec.name in missing]
    consequence = (
        f"; without {' and '.join(unique)} saves are neither idempotent nor ordered" if unique else ""
    )
    if collation_conflict(listed) is not None:
        fix = (
            "First recreate the collection without its default collation (the collation check's fix): "
            "indexes ensure refuses this one."
        )
    elif different:
        drops = ", ".join(f"`{command} indexes drop {index} --yes`" for index in different)
        fix = f"Run {drops}, then {_ensure(command)}, with the writers quiet."
    else:
        fix = f"Run {_ensure(command)}."
    return Check(name, Status.FAIL, f"Indexes {'; '.join(problems)}{consequence}.", fix, details)


def collation_check(
    listed: Mapping[str, Mapping[str, Any]] | Unanswered,
    *,
    database_name: str = DEFAULT_DATABASE_NAME,
    collection_name: str = DEFAULT_COLLECTION_NAME,
) -> Check:
    """No default collation on the collection (its ``_id_`` index would take it).

    The fix recreates it: ``indexes ensure`` on a new collection (which it creates with the simple
    collation), the workers and the command line pointed at it, and the old one dropped in mongosh.
    """
    name = "collation"
    if isinstance(listed, _UNANSWERED):
        return _unanswered(name, listed, "db.getCollectionInfos()")
    if ID_INDEX_NAME not in listed:
        return Check(
            name,
            Status.OK,
            "The collection does not exist yet; indexes ensure creates it without a default collation.",
        )
    conflict = collation_conflict(listed)
    if conflict is None:
        return Check(name, Status.OK, "The collection has the simple (binary) collation.")
    return Check(
        name,
        Status.FAIL,
        conflict.split(". ")[0] + ".",
        _recreate(database_name, collection_name),
        {"collation": dict(cast("Mapping[str, Any]", listed[ID_INDEX_NAME].get("collation", {})))},
    )


def _recreate(database_name: str, collection_name: str) -> str:
    new = f"{collection_name}_v2"
    old = f"db.getSiblingDB({json.dumps(database_name)}).getCollection({json.dumps(collection_name)})"
    return (
        "A default collation cannot be changed, so the collection must be recreated: run "
        f"{_ensure(cli_command(database_name, new))}, which creates a new collection {new} with the "
        f"simple collation; set collection_name={new!r} in every worker and --collection {new} for this "
        f"command line; finish or clear the runs left in {collection_name}, then drop it in mongosh: "
        f"`{old}.drop()`."
    )


def write_concern_check(
    client_setting: Mapping[str, Any],
    server_default: Mapping[str, Any] | Unanswered | None,
    *,
    in_process: bool = False,
) -> Check:
    """Acknowledged writes, ideally ``w: "majority"``: the client's own write concern (from the URI or
    the client), else the cluster's default (``getDefaultRWConcern``)."""
    name = "write concern"
    majority = 'Set w=majority in the URI (docs/deployment.md, "Write concern and read concern").'
    if "w" in client_setting:
        return _write_concern_of(client_setting["w"], "the client's", majority)
    if in_process:
        return Check(name, Status.OK, f"The driver's default; {_ENGINE} acknowledges every write.")
    if isinstance(server_default, _UNANSWERED):
        return Check(
            name,
            Status.WARN,
            f"The client sets none, and the cluster's default could not be read ({_reason(server_default)}).",
            majority,
        )
    default: object = None if server_default is None else server_default.get("defaultWriteConcern")
    w: object = cast("Mapping[str, Any]", default).get("w") if isinstance(default, Mapping) else None
    if w is None:
        # The server states its implicit default only when it is majority; it leaves the field out
        # where the implicit default is w:1, on a set with too few data-bearing voters for its
        # arbiters (jstests/replsets/get_default_write_concern_majority.js) and before 5.0.
        return _write_concern_of(1, "the cluster's implicit default, which it leaves unstated", majority)
    source = None if server_default is None else server_default.get("defaultWriteConcernSource")
    return _write_concern_of(w, f"the cluster's {source or 'implicit'} default", majority)


def _write_concern_of(w: object, whose: str, majority: str) -> Check:
    name = "write concern"
    if w == 0:
        return Check(
            name,
            Status.FAIL,
            f"w=0 ({whose}): unacknowledged writes, which the storage refuses.",
            majority,
            {"w": 0},
        )
    if w == 1:
        return Check(
            name,
            Status.WARN,
            f"w=1 ({whose}): a save that returned is rolled back if the primary fails before a "
            "secondary has it.",
            majority,
            {"w": 1},
        )
    return Check(name, Status.OK, f"w={w} ({whose}).", None, {"w": w})


def retryable_writes_check(retry_writes: bool | None) -> Check:
    """pymongo's retryable writes, on unless the URI says ``retryWrites=false``."""
    name = "retryable writes"
    if retry_writes is None:
        return Check(name, Status.SKIP, "The client does not say whether it retries writes.")
    if retry_writes:
        return Check(name, Status.OK, "On: pymongo resends a write once after a failover or a network error.")
    return Check(
        name,
        Status.WARN,
        "Off (retryWrites=false): a save that meets a failover or a dropped connection fails instead of "
        "being resent once, so the run goes on without that checkpoint unless strict_saves is set.",
        "Drop retryWrites=false from the URI (docs/deployment.md, Replica sets and retryable writes).",
        {"retry_writes": False},
    )


def read_preference_check(mode: str) -> Check:
    """The storage reads the primary whatever the client's read preference; another is a warning."""
    name = "read preference"
    if mode == "primary":
        return Check(name, Status.OK, "primary.", None, {"mode": mode})
    return Check(
        name,
        Status.WARN,
        f"{mode}: the storage still reads the primary (read-your-writes), so it cannot read while the "
        "primary is down; the setting applies only to other uses of the client.",
        "Drop readPreference from the URI the storage uses, or keep it knowingly (docs/deployment.md).",
        {"mode": mode},
    )


def _is_mongos(hello: Mapping[str, Any] | Unanswered) -> bool:
    return not isinstance(hello, _UNANSWERED) and hello.get("msg") == "isdbgrid"


async def _feature_compatibility(admin: _AdminDatabase, *, sharded: bool) -> Mapping[str, Any] | Unanswered:
    if not sharded:
        return await _ask(admin.command({"getParameter": 1, _FCV_ID: 1}))
    versions = cast("_VersionCollection", cast("Mapping[str, object]", admin)["system.version"])
    try:
        document = await bounded(versions.find_one({"_id": _FCV_ID}))
    except _UNANSWERED as error:
        return error
    return {_FCV_ID: document}


def _retry_writes(client: CheckpointClient) -> bool | None:
    # pymongo's client.options.retry_writes; the in-process engine's client.retry_writes.
    for holder in (getattr(client, "options", None), client):
        retry: object = getattr(holder, "retry_writes", None)
        if isinstance(retry, bool):
            return retry
    return None


async def _ask(reply: Awaitable[Mapping[str, Any]]) -> Mapping[str, Any] | Unanswered:
    try:
        answer: Mapping[str, Any] = await bounded(reply)
    except _UNANSWERED as error:
        return error
    return answer


async def _listed_indexes(collection: CheckpointCollection) -> Mapping[str, Mapping[str, Any]] | Unanswered:
    try:
        cursor = await bounded(collection.list_indexes())
        return {str(index.get("name")): index for index in await bounded(cursor.to_list(None))}
    except _UNANSWERED as error:
        return error


def _write_concern(collection: CheckpointCollection) -> Mapping[str, Any]:
    document: object = getattr(cast("_Settings", collection).write_concern, "document", {})
    return cast("Mapping[str, Any]", document) if isinstance(document, Mapping) else {}


def _mode(collection: CheckpointCollection) -> str:
    document: object = getattr(cast("_Settings", collection).read_preference, "document", {})
    mode: object = cast("Mapping[str, Any]", document).get("mode") if isinstance(document, Mapping) else None
    return str(mode or "primary")


def _unanswered(name: str, error: Unanswered, by_hand: str) -> Check:
    unauthorized = isinstance(error, OperationFailure) and error.code == _UNAUTHORIZED
    return Check(
        name,
        Status.WARN,
        f"Not checked: {_reason(error)}.",
        f"Check by hand with {by_hand}" + (" as a user allowed to run it." if unauthorized else "."),
        {"error": type(error).__name__},
    )


def _reason(error: Unanswered) -> str:
    if isinstance(error, OperationFailure):
        if error.code == _UNAUTHORIZED:
            return "not authorized"
        return f"the server refused it (code {error.code})"
    return f"the driver failed ({type(error).__name__})"


def _version_numbers(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return None if match is None else (int(match.group(1)), int(match.group(2)))
