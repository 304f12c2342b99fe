"""Pages of a run's checkpoints: the page-size bounds and the opaque, scope-bound cursor.

A page holds checkpoints in ``(sequence, checkpoint_id)`` order. Sequences are unique within a
run, so a page continues strictly after the last sequence it returned. The cursor carries that
position, a format version, and a tag derived from the run's scope discriminator: a cursor
from another run, another version, or with any byte changed is rejected rather than reinterpreted.
The tag is not a secret signature; the storage's scope filter, not the cursor, decides what a
caller may read (docs/adr/0008-cursor-format.md).

``list_runs`` cursors have the same format with another tag context, bound to the listing (tenant,
application, workflow filter) instead of a run: they carry the last run's counter allocation
time (epoch milliseconds, the server's precision) and counter ``_id``. A cursor of one kind is
never accepted as the other.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
from datetime import datetime, timedelta, timezone
from typing import Any, Final

from ..errors import MongoDBConfigurationError
from .documents import MAX_SEQUENCE
from .options import MongoDBCheckpointStorageOptions
from .scope import RunListing, RunScope

__all__ = [
    "CURSOR_VERSION",
    "PagePosition",
    "RunPosition",
    "decode_cursor",
    "decode_run_cursor",
    "encode_cursor",
    "encode_run_cursor",
    "resolve_limit",
]

CURSOR_VERSION: Final = 1
_PREFIX: Final = f"v{CURSOR_VERSION}"
_TAG_CONTEXT: Final = b"agent-framework-mongodb/cursor/v1"
_RUN_TAG_CONTEXT: Final = b"agent-framework-mongodb/run-cursor/v1"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_MILLIS: Final = 2**62
_TAG_LENGTH: Final = 32
_MAX_CURSOR_LENGTH: Final = 4096
_CURSOR_PARTS: Final = 3


@dataclasses.dataclass(frozen=True, slots=True)
class PagePosition:
    """The last checkpoint a page returned; the next page starts after it."""

    sequence: int
    checkpoint_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class RunPosition:
    """The last run a ``list_runs`` page returned: its counter's allocation time and ``_id``."""

    allocated_at: datetime
    counter_id: str


def resolve_limit(limit: object, options: MongoDBCheckpointStorageOptions) -> int:
    """The page size for a request: ``options.page_size`` when ``limit`` is ``None``."""
    if limit is None:
        return options.page_size
    if type(limit) is not int or not 1 <= limit <= options.max_page_size:
        raise MongoDBConfigurationError(
            f"limit must be an int from 1 to max_page_size ({options.max_page_size}), not {limit!r}."
        )
    return limit


def encode_cursor(scope: RunScope, position: PagePosition) -> str:
    """An opaque cursor for the page after ``position``, valid only for ``scope``."""
    return _seal(_TAG_CONTEXT, scope.discriminator, [position.sequence, position.checkpoint_id])


def decode_cursor(scope: RunScope, cursor: object) -> PagePosition:
    """The position a cursor names; fails closed on anything this run did not issue."""
    match _open(_TAG_CONTEXT, scope.discriminator, cursor, "run"):
        case [int() as sequence, str() as checkpoint_id] if (
            not isinstance(sequence, bool) and 0 <= sequence <= MAX_SEQUENCE and checkpoint_id
        ):
            return PagePosition(sequence, checkpoint_id)
        case _:
            raise _invalid("its position cannot be read")


def encode_run_cursor(listing: RunListing, position: RunPosition) -> str:
    """An opaque ``list_runs`` cursor for the page after ``position``, valid only for ``listing``
    (its tenant, application and workflow filter)."""
    at = position.allocated_at
    millis = (at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)) - _EPOCH
    return _seal(
        _RUN_TAG_CONTEXT, listing.discriminator, [millis // timedelta(milliseconds=1), position.counter_id]
    )


def decode_run_cursor(listing: RunListing, cursor: object) -> RunPosition:
    """The run position a cursor names; fails closed on anything this listing did not issue."""
    match _open(_RUN_TAG_CONTEXT, listing.discriminator, cursor, "listing"):
        case [int() as millis, str() as counter_id] if (
            not isinstance(millis, bool) and 0 <= millis <= _MAX_MILLIS and counter_id
        ):
            return RunPosition(_EPOCH + timedelta(milliseconds=millis), counter_id)
        case _:
            raise _invalid("its position cannot be read")


def _seal(context: bytes, discriminator: str, body: list[Any]) -> str:
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=True)
    encoded = base64.urlsafe_b64encode(text.encode("ascii")).decode("ascii").rstrip("=")
    return f"{_PREFIX}.{encoded}.{_tag(context, discriminator, encoded)}"


def _open(context: bytes, discriminator: str, cursor: object, owner: str) -> object:
    if not isinstance(cursor, str) or not cursor or len(cursor) > _MAX_CURSOR_LENGTH or not cursor.isascii():
        raise _invalid("it is not a cursor this storage issued")
    parts = cursor.split(".")
    if len(parts) != _CURSOR_PARTS:
        raise _invalid("it is not a cursor this storage issued")
    version, encoded, tag = parts
    if version != _PREFIX:
        raise _invalid(f"its format {version!r} is not {_PREFIX!r}")
    if not hmac.compare_digest(tag, _tag(context, discriminator, encoded)):
        raise _invalid(f"it was issued for another {owner}, or altered")
    try:
        return json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (binascii.Error, ValueError) as error:
        raise _invalid("its position cannot be read") from error


def _tag(context: bytes, discriminator: str, encoded: str) -> str:
    digest = hashlib.sha256(context + b"\x00" + discriminator.encode("ascii") + b"\x00")
    digest.update(encoded.encode("ascii"))
    return digest.hexdigest()[:_TAG_LENGTH]


def _invalid(reason: str) -> MongoDBConfigurationError:
    return MongoDBConfigurationError(f"The page cursor is not valid for this storage: {reason}.")
