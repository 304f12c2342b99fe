"""Where a storage's collection comes from, who owns its client, and waiting for the server.

A storage takes exactly one source: an injected collection, an injected client, a connection
string, or ``MONGODB_URI`` from the environment when none is given. Injected objects stay the
caller's; a client built here from a connection string belongs to the storage, which closes it.
Nothing in this module does I/O except :func:`wait_for_server` and :func:`close_client`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, TypeGuard, cast

from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.driver_info import DriverInfo
from pymongo.errors import PyMongoError
from pymongo.topology_description import TopologyDescription
from pymongo.uri_parser import split_options

from ..errors import (
    MongoDBConfigurationError,
    MongoDBIntegrationError,
    MongoDBTimeoutError,
    is_transient_driver_error,
    translate_driver_error,
)
from ._connection_failures import FailureReason, failure_reason, topology_failure_reason
from .deadlines import backstop_only, bounded, operation_deadline
from .driver import CheckpointClient, CheckpointCollection, CheckpointDatabase, Document
from .engine_uri import is_engine_uri, open_engine

__all__ = [
    "DEFAULT_COLLECTION_NAME",
    "DEFAULT_DATABASE_NAME",
    "DEFAULT_WAIT_TIMEOUT",
    "MONGODB_URI_ENV",
    "CollectionSource",
    "close_client",
    "create_owned_client",
    "resolve_collection",
    "uri_options",
    "wait_for_server",
]

DEFAULT_DATABASE_NAME = "agent_framework"
DEFAULT_COLLECTION_NAME = "workflow_checkpoints"
MONGODB_URI_ENV = "MONGODB_URI"
DEFAULT_WAIT_TIMEOUT = 30.0
"""Seconds ``connect`` waits for a first answer; pymongo's own server selection default."""

_FIRST_RETRY_DELAY = 0.05
_MAX_RETRY_DELAY = 2.0
_LEAST_TIMEOUT = 0.001
_LOGGER = logging.getLogger("agent_framework_mongodb")

# https://www.mongodb.com/docs/manual/reference/limits/#naming-restrictions
# The Windows set is the stricter one; a name that works everywhere is the one to accept.
_FORBIDDEN_DATABASE_CHARACTERS = frozenset('/\\. "$*<>:|?\x00')
_MAX_DATABASE_NAME_BYTES = 63
_MAX_NAMESPACE_BYTES = 255


@dataclasses.dataclass(frozen=True, slots=True)
class CollectionSource:
    """The collection a storage uses, and the client it must close (``None`` when not its own)."""

    collection: CheckpointCollection
    owned_client: CheckpointClient | None


def resolve_collection(
    collection: CheckpointCollection | None,
    *,
    mongo_client: CheckpointClient | None,
    connection_string: str | None,
    database_name: str,
    collection_name: str,
    environ: Mapping[str, str] | None = None,
) -> CollectionSource:
    """Pick the one source of a collection, or raise ``MongoDBConfigurationError`` if ambiguous."""
    given = [
        name
        for name, value in (
            ("collection", collection),
            ("mongo_client", mongo_client),
            ("connection_string", connection_string),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise MongoDBConfigurationError(
            f"Pass exactly one of collection, mongo_client or connection_string; got {', '.join(given)}."
        )
    if collection is not None:
        if (database_name, collection_name) != (DEFAULT_DATABASE_NAME, DEFAULT_COLLECTION_NAME):
            raise MongoDBConfigurationError(
                "database_name and collection_name apply to a client or connection string, "
                "not to an injected collection."
            )
        return CollectionSource(collection, owned_client=None)

    _validate_namespace(database_name, collection_name)
    if mongo_client is not None:
        return CollectionSource(mongo_client[database_name][collection_name], owned_client=None)

    uri = connection_string if connection_string is not None else _uri_from_environment(environ)
    client = create_owned_client(uri)
    return CollectionSource(client[database_name][collection_name], owned_client=client)


def create_owned_client(
    connection_string: str, *, defaults: Mapping[str, Any] | None = None
) -> CheckpointClient:
    """Build the ``AsyncMongoClient`` a storage owns. The async client connects lazily: no I/O.

    An ``engine:PATH`` connection string gives the file-backed in-process engine instead, which
    reads its file here (:mod:`.engine_uri`); ``defaults`` do not apply to it.

    ``defaults`` are client options (pymongo's keyword names, such as ``serverSelectionTimeoutMS``)
    that apply only where the connection string does not set the same option: pymongo lets a
    keyword win over the URI, so an option the URI names is left out here and the URI's stands.
    """
    if not _is_nonempty_str(connection_string):
        raise MongoDBConfigurationError("connection_string must be a non-empty str.")
    if is_engine_uri(connection_string):
        return open_engine(connection_string)
    given = uri_options(connection_string)
    extra = {name: value for name, value in (defaults or {}).items() if name.lower() not in given}
    try:
        client: AsyncMongoClient[Document] = AsyncMongoClient(
            connection_string, driver=DriverInfo(name="agent-framework-mongodb"), **extra
        )
    except (PyMongoError, ValueError, TypeError) as error:
        # pymongo reports some malformed URIs (a port out of range) as plain ValueError.
        raise MongoDBConfigurationError(
            f"The connection string is not a valid MongoDB URI: {_redacted_reason(error, connection_string)} "
            f"({type(error).__name__})."
        ) from error
    return client


def uri_options(connection_string: str) -> Mapping[str, Any]:
    """The options a MongoDB URI sets in its query part, by lower-case name, as pymongo reads
    them (``serverselectiontimeoutms`` and ``timeoutms`` in seconds); no I/O, no DNS lookup.

    Empty when the URI sets none, or when its options do not parse: pymongo then refuses the URI
    itself when a client is built from it. Options a ``mongodb+srv`` TXT record adds are not seen
    (they are limited to ``authSource``, ``replicaSet`` and ``loadBalanced``).
    """
    _, separator, rest = connection_string.partition("://")
    if not separator:
        return {}
    # As pymongo splits it: hosts, then "/database?options"; "?options" may follow the hosts directly.
    hosts, slash, path = rest.partition("/")
    _, _, text = path.partition("?") if slash else hosts.partition("?")
    if not text:
        return {}
    try:
        parsed = split_options(text, validate=True, warn=False, normalize=False)
    except (PyMongoError, ValueError, TypeError):
        return {}
    return {str(name).lower(): value for name, value in parsed.items()}


_AUTHORITY = re.compile(r"^[A-Za-z0-9+.-]*://([^/?#]*)")
_SHORTEST_REDACTED = 3


def _redacted_reason(error: Exception, connection_string: str) -> str:
    """pymongo's reason, with every piece of the URI's credentials and hosts taken out of it: a
    connection string can carry a password, and errors and logs never show one (or a host)."""
    reason = str(error).strip() or "no reason given"
    authority = _AUTHORITY.match(connection_string)
    if authority is None:
        return reason
    userinfo, _, _ = authority.group(1).rpartition("@")
    if any(0 < len(piece) < _SHORTEST_REDACTED for piece in re.split(r"[:@]", userinfo)):
        return "the reason is withheld, as it could show the credentials"  # too short to find safely
    pieces = {authority.group(1), *re.split(r"[:@,]", authority.group(1))}
    for piece in sorted(pieces, key=len, reverse=True):
        if len(piece) >= _SHORTEST_REDACTED:
            for spelling in (piece, urllib.parse.unquote_plus(piece)):
                reason = reason.replace(spelling, "<redacted>")
    return reason


async def wait_for_server(database: CheckpointDatabase, *, timeout: float) -> None:
    """Ping until the server answers, retrying transient failures with backoff within ``timeout``.

    Each ping runs under ``pymongo.timeout`` with what remains of ``timeout``, so pymongo's
    server selection gives up at the deadline with an error of its own instead of waiting its
    default 30 seconds; ``deadlines.bounded`` abandons, without cancelling, a ping that still runs
    shortly after (pymongo's own error, which carries the reason, normally arrives first).

    Raises:
        MongoDBTimeoutError: The server did not answer within ``timeout`` seconds. The message
            says why in a fixed phrase (connection refused, host name not resolved, TLS
            handshake failed, timed out, unknown); ``__cause__`` is the last driver error.
        MongoDBIntegrationError: The server answered with a failure a retry will not clear
            (authentication, authorization, configuration); raised at once, with the reason.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = _FIRST_RETRY_DELAY
    last_error: PyMongoError | None = None
    reason = FailureReason.TIMED_OUT
    while deadline - loop.time() > 0:
        try:
            await _ping(database, deadline)
        except MongoDBTimeoutError:  # the driver did not end the ping by the deadline
            topology = _topology_of(database)
            reason = FailureReason.TIMED_OUT if topology is None else topology_failure_reason(topology)
            break
        except PyMongoError as error:
            if not (is_transient_driver_error(error) or error.timeout):
                raise _permanent_failure(error, _topology_of(database)) from error
            last_error = error
            reason = failure_reason(error, _topology_of(database))
        else:
            return
        # Jitter keeps a fleet of workers started together from pinging in lockstep.
        pause = delay * random.uniform(0.5, 1.0)  # noqa: S311 - not a security use
        await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
        delay = min(delay * 2, _MAX_RETRY_DELAY)
    raise MongoDBTimeoutError(
        f"MongoDB did not answer a ping within {timeout:g} seconds (reason: {reason.value})."
    ) from last_error


async def _ping(database: CheckpointDatabase, deadline: float) -> None:
    loop = asyncio.get_running_loop()
    client = _pymongo_client(database)
    if client is not None:
        # Open the client (start its monitor tasks) outside any pymongo deadline: pymongo 4.13.0's
        # background tasks copy the context they start in, so a pymongo.timeout around the first
        # operation would stay in its monitors and fail every heartbeat once it passed
        # (PYTHON-5406, fixed in 4.13.1, which the package requires; opening first still keeps
        # the client's start-up out of the ping's deadline). Returns at once on an open client.
        with backstop_only(max(0.0, deadline - loop.time())):
            await bounded(client.aconnect())
    # Opening resolves a mongodb+srv name, so the deadline is read after it.
    # At least a millisecond: pymongo reads a timeout of 0 as no limit at all.
    with operation_deadline(max(_LEAST_TIMEOUT, deadline - loop.time())):
        await bounded(database.command("ping"))


async def close_client(client: CheckpointClient, *, timeout: float) -> None:
    """Close ``client`` within ``timeout`` seconds (plus ``deadlines.DEADLINE_SLACK``), always.

    Bounded because pymongo's close first ends the client's server sessions with an ``endSessions``
    command, which would wait for ever on a server that accepted the connection and stopped
    answering. A close the driver does not finish by then is left to finish on its own and logged
    at WARNING; an error the close raises propagates. A caller cancelled meanwhile stops waiting at
    once.
    """
    try:
        with operation_deadline(timeout):
            await bounded(client.close())
    except MongoDBTimeoutError:
        _LOGGER.warning(
            "The MongoDB client did not close within %g seconds; it is left to close on its own.", timeout
        )


def _permanent_failure(error: PyMongoError, topology: TopologyDescription | None) -> MongoDBIntegrationError:
    reason = failure_reason(error, topology)
    action = "ping the server" if reason is FailureReason.UNKNOWN else f"ping the server: {reason.value}"
    return translate_driver_error(error, operation="read", action=action)


def _topology_of(database: CheckpointDatabase) -> TopologyDescription | None:
    """What pymongo's monitors last saw, for a real pymongo database; None for any other."""
    client = _pymongo_client(database)
    return None if client is None else client.topology_description


def _pymongo_client(database: CheckpointDatabase) -> AsyncMongoClient[Document] | None:
    if not isinstance(database, AsyncDatabase):
        return None
    return cast("AsyncDatabase[Document]", database).client


def validate_wait_timeout(timeout: object) -> float:
    """Return ``timeout`` as seconds if it is a positive finite number, else raise."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise MongoDBConfigurationError(
            f"wait_timeout must be a positive number of seconds, not {timeout!r}."
        )
    return float(timeout)


def _uri_from_environment(environ: Mapping[str, str] | None) -> str:
    uri = (os.environ if environ is None else environ).get(MONGODB_URI_ENV)
    if not uri:
        raise MongoDBConfigurationError(
            "No MongoDB source: pass collection, mongo_client or connection_string, "
            f"or set {MONGODB_URI_ENV}."
        )
    return uri


def _is_nonempty_str(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and bool(value)


def _validate_namespace(database_name: object, collection_name: object) -> None:
    if not _is_nonempty_str(database_name):
        raise MongoDBConfigurationError("database_name must be a non-empty str.")
    if _FORBIDDEN_DATABASE_CHARACTERS.intersection(database_name):
        raise MongoDBConfigurationError('database_name must not contain any of /\\. "$*<>:|? or NUL.')
    if len(database_name.encode("utf-8")) > _MAX_DATABASE_NAME_BYTES:
        raise MongoDBConfigurationError(f"database_name must be at most {_MAX_DATABASE_NAME_BYTES} bytes.")
    if not _is_nonempty_str(collection_name):
        raise MongoDBConfigurationError("collection_name must be a non-empty str.")
    if "$" in collection_name or "\x00" in collection_name or collection_name.startswith("system."):
        raise MongoDBConfigurationError(
            'collection_name must not contain "$" or NUL, nor start with "system.".'
        )
    namespace = f"{database_name}.{collection_name}"
    if len(namespace.encode("utf-8")) > _MAX_NAMESPACE_BYTES:
        raise MongoDBConfigurationError(
            f"database_name.collection_name must be at most {_MAX_NAMESPACE_BYTES} bytes."
        )
