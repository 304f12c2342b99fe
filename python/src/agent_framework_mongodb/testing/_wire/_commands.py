"""The commands the front serves, by name, and which of them write.

Command names match case-sensitively, as the server's registry does, with the legacy lower-case
aliases the server keeps (``buildinfo``, ``ismaster``).
"""

from __future__ import annotations

from typing import Final

from . import _admin, _namespaces, _reads, _writes
from ._invocation import Handler

HANDLERS: Final[dict[str, Handler]] = {
    "ping": _admin.ping,
    "buildInfo": _admin.build_info,
    "buildinfo": _admin.build_info,
    "getParameter": _admin.get_parameter,
    "getDefaultRWConcern": _admin.get_default_rw_concern,
    "endSessions": _admin.end_sessions,
    "serverStatus": _admin.server_status,
    "find": _reads.find,
    "aggregate": _reads.aggregate,
    "count": _reads.count,
    "getMore": _reads.get_more,
    "killCursors": _reads.kill_cursors,
    "insert": _writes.write,
    "update": _writes.write,
    "delete": _writes.write,
    "findAndModify": _writes.find_and_modify,
    "create": _namespaces.create,
    "drop": _namespaces.drop,
    "dropDatabase": _namespaces.drop_database,
    "listCollections": _namespaces.list_collections,
    "listDatabases": _namespaces.list_databases,
    "createIndexes": _namespaces.create_indexes,
    "listIndexes": _namespaces.list_indexes,
    "dropIndexes": _namespaces.drop_indexes,
    "explain": _reads.explain,
}

WRITES: Final = frozenset(
    {
        "insert",
        "update",
        "delete",
        "findAndModify",
        "create",
        "drop",
        "dropDatabase",
        "createIndexes",
        "dropIndexes",
    }
)
"""Commands only a primary accepts (NotWritablePrimary elsewhere)."""

WAITS_FOR_WRITE_CONCERN: Final = frozenset({"insert", "update", "delete", "findAndModify"})
"""Writes whose reply waits for their write concern (``_replication.py``)."""

SERVER_COMMANDS: Final = frozenset(
    {
        "ping",
        "buildInfo",
        "buildinfo",
        "getParameter",
        "getDefaultRWConcern",
        "endSessions",
        "serverStatus",
        "listDatabases",
        "configureFailPoint",
        "hello",
        "isMaster",
        "ismaster",
    }
)
"""Commands any member answers whatever its state."""
