"""pymongo error objects shaped like the ones pymongo builds from a server reply."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo.errors import DuplicateKeyError, OperationFailure, WriteError

CODE_NAMES = {
    2: "BadValue",
    26: "NamespaceNotFound",
    27: "IndexNotFound",
    59: "CommandNotFound",
    66: "ImmutableField",
    67: "CannotCreateIndex",
    72: "InvalidOptions",
    85: "IndexOptionsConflict",
    86: "IndexKeySpecsConflict",
    197: "InvalidIndexSpecificationOption",
    11000: "DuplicateKey",
    15956: "Location15956",
    15958: "Location15958",
    10334: "BSONObjectTooLarge",
    17419: "Location17419",
    17420: "Location17420",
}


@dataclass(frozen=True)
class DuplicateKey:
    """Where a unique index rejected a document."""

    namespace: str
    index_name: str
    key_pattern: dict[str, Any]
    key_value: dict[str, Any]

    @property
    def message(self) -> str:
        shown = ", ".join(f"{name}: {_shell(value)}" for name, value in self.key_value.items())
        return (
            f"E11000 duplicate key error collection: {self.namespace} index: {self.index_name}"
            f" dup key: {{ {shown} }}"
        )


def _shell(value: Any) -> str:
    """Render a key value roughly as the server's error message does."""
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return f"new Date({int(value.timestamp() * 1000)})"
    if isinstance(value, Mapping):
        inner = ", ".join(f"{k}: {_shell(v)}" for k, v in value.items())  # pyright: ignore[reportUnknownVariableType]
        return f"{{ {inner} }}"
    return repr(value)


def duplicate_write_error(dup: DuplicateKey, *, index: int = 0) -> DuplicateKeyError:
    """As pymongo raises for a write error (insert, update, delete commands)."""
    details = {
        "index": index,
        "code": 11000,
        "errmsg": dup.message,
        "keyPattern": dup.key_pattern,
        "keyValue": dup.key_value,
    }
    return DuplicateKeyError(dup.message, 11000, details)


def duplicate_command_error(dup: DuplicateKey, *, prefix: str = "") -> DuplicateKeyError:
    """As pymongo raises for a failed command (findAndModify, createIndexes)."""
    message = prefix + dup.message
    details = {
        "ok": 0.0,
        "errmsg": message,
        "code": 11000,
        "codeName": "DuplicateKey",
        "keyPattern": dup.key_pattern,
        "keyValue": dup.key_value,
    }
    return DuplicateKeyError(message, 11000, details)


def command_error(code: int, message: str) -> OperationFailure:
    details = {"ok": 0.0, "errmsg": message, "code": code, "codeName": CODE_NAMES.get(code, "")}
    return OperationFailure(message, code, details)


def write_error(code: int, message: str, *, index: int = 0) -> WriteError:
    details = {"index": index, "code": code, "errmsg": message}
    return WriteError(message, code, details)
