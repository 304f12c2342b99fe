"""Server-level commands: ``ping``, ``buildInfo``, ``getParameter``, ``getDefaultRWConcern``,
``endSessions``, ``serverStatus``.

Shapes from https://www.mongodb.com/docs/manual/reference/command/ (each command's "Output"),
for the MongoDB 7.0 the engine reports.
"""

from __future__ import annotations

import os
from typing import Any

from .._client import SERVER_VERSION
from ._invocation import GENERIC_FIELDS, Invocation
from ._replies import CommandError

_FEATURE_COMPATIBILITY_VERSION = ".".join(SERVER_VERSION.split(".")[:2])


async def ping(_invocation: Invocation) -> dict[str, Any]:
    return {"ok": 1.0}


async def build_info(_invocation: Invocation) -> dict[str, Any]:
    parts = [int(part) for part in SERVER_VERSION.split(".")]
    return {
        "version": SERVER_VERSION,
        "gitVersion": "in-process-engine",
        "versionArray": [*parts, 0],
        "bits": 64,
        "debug": False,
        "maxBsonObjectSize": 16 * 1024 * 1024,
        "storageEngines": ["in-process-engine"],
        "ok": 1.0,
    }


async def get_parameter(invocation: Invocation) -> dict[str, Any]:
    reply: dict[str, Any] = {}
    if (
        invocation.option("featureCompatibilityVersion") is not None
        or invocation.command["getParameter"] == "*"
    ):
        reply["featureCompatibilityVersion"] = {"version": _FEATURE_COMPATIBILITY_VERSION}
    asked = [
        key
        for key in invocation.command
        if key not in GENERIC_FIELDS and key not in ("getParameter", "featureCompatibilityVersion")
    ]
    if asked:
        raise CommandError(72, f"no option found to get: {asked[0]}")
    reply["ok"] = 1.0
    return reply


async def get_default_rw_concern(_invocation: Invocation) -> dict[str, Any]:
    # A replica set's implicit defaults since 5.0: read concern local, write concern majority
    # (https://www.mongodb.com/docs/manual/reference/mongodb-defaults/#default-write-concern).
    return {
        "defaultReadConcern": {"level": "local"},
        "defaultWriteConcern": {"w": "majority", "wtimeout": 0},
        "defaultReadConcernSource": "implicit",
        "defaultWriteConcernSource": "implicit",
        "ok": 1.0,
    }


async def end_sessions(_invocation: Invocation) -> dict[str, Any]:
    return {"ok": 1.0}


async def server_status(invocation: Invocation) -> dict[str, Any]:
    return {
        "host": "127.0.0.1",
        "version": SERVER_VERSION,
        "process": "mongod",
        "pid": os.getpid(),
        "localTime": invocation.engine.server_now(),
        "ok": 1.0,
    }
