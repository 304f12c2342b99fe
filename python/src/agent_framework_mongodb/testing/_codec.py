"""BSON round trips: what a document looks like on the wire, in storage, and back in the client."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timezone
from typing import Any, cast

import bson
from bson.codec_options import CodecOptions

MAX_BSON_SIZE = 16 * 1024 * 1024
"""The server's maxBsonObjectSize (16 MiB): the largest document it stores."""

_decode: Callable[..., dict[str, Any]] = getattr(bson, "decode")  # noqa: B009 - bson's overloads are partly untyped

# Documents are stored the way the server keeps them: BSON types, datetimes as naive UTC.
STORAGE_OPTIONS: CodecOptions[dict[str, Any]] = CodecOptions(tz_aware=False)


def client_options(*, tz_aware: bool) -> CodecOptions[dict[str, Any]]:
    """The codec options pymongo decodes replies with for a client built with ``tz_aware``."""
    return CodecOptions(tz_aware=tz_aware, tzinfo=timezone.utc if tz_aware else None)


def to_storage(document: Mapping[str, Any]) -> dict[str, Any]:
    """Encode ``document`` as pymongo would send it and decode it as the server would store it.

    Raises ``bson.errors.InvalidDocument`` for keys or values BSON cannot carry.
    """
    return _decode(bson.encode(document), codec_options=STORAGE_OPTIONS)


def to_storage_sized(document: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """Like :func:`to_storage`, with the document's encoded size (the size limits are ``_limits``)."""
    data = bson.encode(document)
    return _decode(data, codec_options=STORAGE_OPTIONS), len(data)


def wire_value(value: Any) -> Any:
    """Round-trip any BSON value (a filter, an update document or pipeline) through the wire format."""
    return to_storage({"v": value})["v"]


def to_client(document: Mapping[str, Any], options: CodecOptions[Any]) -> dict[str, Any]:
    """A fresh copy of a stored document, decoded with the client's codec options."""
    return _decode(bson.encode(document), codec_options=options)


def bson_size(document: Mapping[str, Any]) -> int:
    return len(bson.encode(document))


def same_bson(left: Mapping[str, Any], right: Mapping[str, Any]) -> bool:
    """Binary equality, as the server uses to decide whether an update modified a document."""
    return bson.encode(left) == bson.encode(right)


def as_mapping(value: Any) -> Mapping[str, Any] | None:
    """``value`` typed as a document when it is one."""
    return cast("Mapping[str, Any]", value) if isinstance(value, Mapping) else None


def as_list(value: Any) -> list[Any] | None:
    """``value`` typed as an array when it is one."""
    return cast("list[Any]", value) if isinstance(value, list) else None  # type: ignore[redundant-cast]
