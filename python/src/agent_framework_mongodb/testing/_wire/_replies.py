"""Reply documents: success, command errors, and the engine's exceptions turned back into replies.

The engine raises pymongo's own exceptions with the ``details`` pymongo would have read from a
server reply (``../_errors.py``), so a failed command's reply is mostly those details again. A
reply's shape follows MongoDB's error reference (https://www.mongodb.com/docs/manual/reference/error-codes/):
``ok: 0``, ``errmsg``, ``code``, ``codeName``, and ``errorLabels`` where the server adds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import bson.errors
from mongomock_ng import InvalidName
from pymongo.errors import (
    ConfigurationError,
    ExecutionTimeout,
    InvalidOperation,
    NetworkTimeout,
    OperationFailure,
)

from .._errors import CODE_NAMES as _ENGINE_CODE_NAMES

CODE_NAMES: Final[Mapping[int, str]] = {
    **_ENGINE_CODE_NAMES,
    6: "HostUnreachable",
    7: "HostNotFound",
    9: "FailedToParse",
    13: "Unauthorized",
    16: "InvalidLength",
    43: "CursorNotFound",
    48: "NamespaceExists",
    50: "MaxTimeMSExpired",
    64: "WriteConcernFailed",
    73: "InvalidNamespace",
    89: "NetworkTimeout",
    91: "ShutdownInProgress",
    100: "UnsatisfiableWriteConcern",
    189: "PrimarySteppedDown",
    225: "TransactionTooOld",
    238: "NotImplemented",
    262: "ExceededTimeLimit",
    9001: "SocketException",
    10107: "NotWritablePrimary",
    11600: "InterruptedAtShutdown",
    11602: "InterruptedDueToReplStateChange",
    13435: "NotPrimaryNoSecondaryOk",
    13436: "NotPrimaryOrSecondary",
}

RETRYABLE_WRITE_CODES: Final = frozenset({6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436})
"""The codes after which a retryable write may be retried (mongodb/specifications,
source/retryable-writes/retryable-writes.md, "Determining Retryable Errors"); a 4.4+ server
labels such an error ``RetryableWriteError`` itself when the command was a retryable write."""

MAX_TIME_MS_EXPIRED: Final = 50
NOT_IMPLEMENTED: Final = 238
BAD_VALUE: Final = 2


class CommandError(Exception):
    """A command's failure, carried to the reply as ``ok: 0`` with these fields."""

    def __init__(self, code: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra

    def reply(self) -> dict[str, Any]:
        return error_reply(self.code, self.message, **self.extra)


def error_reply(code: int, message: str, **extra: Any) -> dict[str, Any]:
    reply: dict[str, Any] = {"ok": 0.0, "errmsg": message, "code": code, "codeName": code_name(code)}
    reply.update(extra)
    return reply


def code_name(code: int) -> str:
    return CODE_NAMES.get(code, f"Location{code}")


def not_implemented(what: str) -> CommandError:
    """Something the engine does not simulate: refused, never ignored (DIVERGENCES.md, wire entries)."""
    return CommandError(NOT_IMPLEMENTED, f"the in-process engine's wire front does not simulate {what}")


def reply_for(error: BaseException) -> dict[str, Any]:
    """The reply a server sends where the engine raised ``error``."""
    if isinstance(error, CommandError):
        return error.reply()
    if isinstance(error, (ExecutionTimeout, NetworkTimeout)):
        # The engine's deadline came from the command's maxTimeMS (``_deadlines.py``): the server
        # answers MaxTimeMSExpired (https://www.mongodb.com/docs/manual/reference/method/cursor.maxTimeMS/).
        return error_reply(MAX_TIME_MS_EXPIRED, "operation exceeded time limit")
    if isinstance(error, OperationFailure):
        details = dict(error.details or {})
        code = error.code if error.code is not None else BAD_VALUE
        message = str(details.get("errmsg") or error)
        extra = {
            key: value for key, value in details.items() if key not in ("ok", "errmsg", "code", "codeName")
        }
        return error_reply(code, message, **extra)
    if isinstance(error, NotImplementedError):
        return error_reply(NOT_IMPLEMENTED, str(error))
    if isinstance(error, InvalidName):
        return error_reply(73, str(error))
    if isinstance(
        error, (ValueError, TypeError, KeyError, InvalidOperation, ConfigurationError, bson.errors.BSONError)
    ):
        # The engine's client-side argument checks: the server refuses such a command as BadValue
        # or FailedToParse; the code here is always BadValue (DIVERGENCES.md, wire entries).
        return error_reply(BAD_VALUE, f"{type(error).__name__}: {error}")
    raise error


def add_label(reply: dict[str, Any], label: str) -> None:
    labels: list[str] = list(reply.get("errorLabels", []))
    if label not in labels:
        labels.append(label)
    reply["errorLabels"] = labels
