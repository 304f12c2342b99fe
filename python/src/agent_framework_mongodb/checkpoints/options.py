"""``MongoDBCheckpointStorageOptions``: the run a storage is bound to, and how it pages and expires.

Agent Framework's ``CheckpointStorage`` protocol carries no tenant or run, so the storage binds
them here, once, at construction. Every value is validated when the options are built; an
invalid one raises :class:`~agent_framework_mongodb.errors.MongoDBConfigurationError` naming the
field, before any storage exists to do I/O with it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import unicodedata
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TypeGuard, cast

from ..errors import MongoDBConfigurationError
from .codec import DEFAULT_MAX_CHECKPOINT_BYTES
from .codec.signing import MIN_KEY_BYTES

__all__ = [
    "ABSOLUTE_MAX_PAGE_SIZE",
    "DEFAULT_MAX_CHECKPOINT_BYTES",
    "DEFAULT_MAX_PAGE_SIZE",
    "DEFAULT_OPERATION_TIMEOUT",
    "DEFAULT_PAGE_SIZE",
    "MAX_CHECKPOINT_BYTES_LIMIT",
    "MAX_IDENTIFIER_BYTES",
    "MAX_KEEP_LAST",
    "MAX_OPERATION_TIMEOUT",
    "MAX_TTL",
    "MIN_TTL",
    "MongoDBCheckpointStorageOptions",
    "validate_identifier",
    "validate_operation_timeout",
    "validate_type_keys",
]

DEFAULT_PAGE_SIZE = 100
DEFAULT_MAX_PAGE_SIZE = 1000
ABSOLUTE_MAX_PAGE_SIZE = 10_000
"""No configuration may page more than this many checkpoints (each up to 16 MiB) at once."""

MAX_IDENTIFIER_BYTES = 1024
"""Upper bound on a scope identifier's UTF-8 size; keeps scoped index keys small."""

MAX_TTL = timedelta(days=36_500)
"""A century: longer retention is "never expire", which ``ttl=None`` says plainly."""

MIN_TTL = timedelta(seconds=60)
"""MongoDB's TTL monitor runs every 60 seconds
(https://www.mongodb.com/docs/manual/core/index-ttl/#timing-of-the-delete-operation): a shorter
ttl promises an expiry the server does not keep, and would let TTL remove a run's counter while a
save is between allocating its number and inserting (docs/adr/0006-sequence-allocation.md)."""

MAX_KEEP_LAST = 10_000
"""The most checkpoints ``keep_last`` may keep: each prune's read skips ``keep_last - 1`` keys of
the sequence index, so the bound keeps that walk as small as the largest page."""

PRUNE_PERIOD_DIVISOR = 10
"""``keep_last`` prunes on every ``max(1, keep_last // 10)``-th sequence number, so a run holds at
most 10 % more than ``keep_last`` (docs/adr/0012-keep-last.md)."""

MAX_CHECKPOINT_BYTES_LIMIT = 16 * 1024**3
"""No configuration may allow checkpoints above 16 GiB: each save holds its checkpoint in memory
several times over (the tree, its pickle, the chunks)."""
_MIN_CHECKPOINT_BYTES = 1024 * 1024

DEFAULT_OPERATION_TIMEOUT = 30.0
"""Seconds each storage operation may take, every round trip included; pymongo's own default for
server selection, so a default client fails no later than it would anyway."""

MAX_OPERATION_TIMEOUT = 3600.0
"""An hour: an operation allowed longer is one nobody is waiting for."""

_RECHECK_GRACE_FACTOR = 2
"""A recreated counter re-reads the retained maximum for this many operation timeouts."""

_TYPE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MongoDBCheckpointStorageOptions:
    """The scope a storage reads and writes, and its paging and retention settings.

    Attributes:
        tenant_id: The tenant that owns the run. Required.
        workflow_name: The workflow definition's name; ``save`` and the listing methods
            require the same value. Required.
        session_id: The run (one workflow execution) whose checkpoints this storage holds.
            Required.
        application_id: Optional application within the tenant.
        ttl: How long after saving a checkpoint MongoDB may delete it, or ``None`` to keep it
            until ``delete``/``clear_run``. MongoDB's TTL monitor deletes eventually, not on time.
            At least 60 seconds (the monitor's period) and at least twice
            ``operation_timeout``.
        keep_last: Keep at most this many of the run's checkpoints, the newest by sequence, or
            ``None`` to keep all. A save whose sequence is a multiple of ``prune_period`` deletes
            the older ones (two more round trips), so a run holds at most
            ``keep_last + prune_period - 1`` once its saves return; the checkpoint a save
            stored is never removed by that save. A failed prune is logged at WARNING, never
            raised: the checkpoint is stored, and the next prune catches up. Combines with
            ``ttl``. From 1 to 10,000. See docs/adr/0012-keep-last.md.
        page_size: Checkpoints per page when listing, and the default ``limit``.
        max_page_size: The largest ``limit`` a caller may ask for.
        allowed_checkpoint_types: Application classes that checkpoints may hold besides
            standard values and Agent Framework's own types: classes, or their
            ``"module:qualname"`` names, from any iterable. Stored as names.
        operation_timeout: Seconds each storage operation may take, all of its round trips
            included, applied as pymongo's client-side operation timeout (``pymongo.timeout``);
            expiry raises ``MongoDBTimeoutError``. It replaces the client's ``timeoutMS`` for
            the storage's operations; a caller's enclosing ``pymongo.timeout`` block still
            shortens it. Every writer of a run should use the same value (it also bounds how
            long a recreated sequence counter stays under re-check; see ADR 0006).
        signing_keys: Secret keys (``bytes``, at least 32 each) for signed payloads: the first
            signs every save, any of them verifies a load, so keys rotate. With keys set, an
            unsigned, edited or moved payload is refused before it is decoded. Never shown in
            ``repr``.
        accept_unsigned_before: With ``signing_keys``, also load checkpoints that carry no
            current signature (written without keys, or by a release whose signatures did not
            bind the envelope) if they were created before this time (timezone-aware): the
            transition of existing runs onto signing. Such checkpoints get the unsigned threat
            model (specs/codec.md); re-sign runs with ``agent-framework-mongodb sign-run`` and
            drop the option. ``None`` (the default) accepts none.
        max_checkpoint_bytes: The largest checkpoint (its encoded tree) a save stores and a load
            reads, from 1 MiB to 16 GiB; 256 MiB by default. A checkpoint above 16 KiB is stored
            as chunks that the run keeps once (docs/adr/0018-chunked-payloads.md), so MongoDB's
            16 MiB document limit does not bound it; a larger one is refused with
            ``MongoDBSerializationError`` before any I/O.
        strict_saves: Make a failed ``save`` stop the workflow run. Agent Framework catches
            every ``Exception`` a save raises, logs a warning and carries on, so by default a
            misconfigured storage can finish a run with no checkpoints. With ``True``, ``save``
            raises ``MongoDBStrictSaveFailure`` instead (a ``BaseException`` carrying the
            package error as ``error`` and ``__cause__``), which ends ``workflow.run(...)``;
            direct callers of ``save`` get it too. See docs/adr/0011-strict-saves.md.

    Identifiers are taken exactly as given: one with surrounding white space or control
    characters is rejected, never trimmed, so two spellings can never share a run.
    """

    tenant_id: str
    workflow_name: str
    session_id: str
    application_id: str | None = None
    ttl: timedelta | None = None
    keep_last: int | None = None
    page_size: int = DEFAULT_PAGE_SIZE
    max_page_size: int = DEFAULT_MAX_PAGE_SIZE
    allowed_checkpoint_types: Iterable[str | type] = ()
    operation_timeout: float = DEFAULT_OPERATION_TIMEOUT
    signing_keys: Iterable[bytes] = dataclasses.field(default=(), repr=False)
    accept_unsigned_before: datetime | None = None
    strict_saves: bool = False
    max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES

    def __post_init__(self) -> None:
        validate_identifier("tenant_id", self.tenant_id)
        validate_identifier("workflow_name", self.workflow_name)
        validate_identifier("session_id", self.session_id)
        if self.application_id is not None:
            validate_identifier("application_id", self.application_id)
        validate_operation_timeout(self.operation_timeout)
        _validate_ttl(self.ttl, self.counter_recheck_grace)
        _validate_keep_last(self.keep_last)
        _validate_page_bounds(self.page_size, self.max_page_size)
        # Accept any iterable of keys (a list is the natural literal) but store a tuple, so the
        # options stay hashable and immutable.
        object.__setattr__(
            self, "allowed_checkpoint_types", validate_type_keys(self.allowed_checkpoint_types)
        )
        object.__setattr__(self, "signing_keys", _validate_signing_keys(self.signing_keys))
        _validate_accept_unsigned_before(self.accept_unsigned_before, bool(self.signing_keys))
        _validate_strict_saves(self.strict_saves)
        _validate_max_checkpoint_bytes(self.max_checkpoint_bytes)

    @property
    def counter_recheck_grace(self) -> timedelta:
        """How long a newly created run counter re-reads the retained maximum on every allocation.

        Longer than any save can take (twice ``operation_timeout``), so a save that allocated from
        a counter that was then deleted has inserted, or failed, before the grace ends.
        """
        return timedelta(seconds=self.operation_timeout * _RECHECK_GRACE_FACTOR)

    @property
    def prune_period(self) -> int:
        """Every how many sequence numbers a save prunes to ``keep_last``: ``max(1, keep_last // 10)``."""
        return max(1, (self.keep_last or 1) // PRUNE_PERIOD_DIVISOR)

    def with_session(self, session_id: str) -> MongoDBCheckpointStorageOptions:
        """Return the same options bound to another run of the same workflow."""
        return dataclasses.replace(self, session_id=session_id)

    def with_workflow(self, workflow_name: str, session_id: str) -> MongoDBCheckpointStorageOptions:
        """Return the same options bound to a run of another workflow (same tenant and application)."""
        return dataclasses.replace(self, workflow_name=workflow_name, session_id=session_id)


def validate_identifier(field: str, value: object) -> str:
    """Return ``value`` if it is a usable scope identifier, else raise naming ``field``."""
    if not isinstance(value, str):
        raise MongoDBConfigurationError(f"{field} must be a str, not {type(value).__name__}.")
    if not value:
        raise MongoDBConfigurationError(f"{field} must not be empty.")
    if value != value.strip():
        raise MongoDBConfigurationError(
            f"{field} has leading or trailing white space; identifiers are used exactly as given."
        )
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in value):
        raise MongoDBConfigurationError(f"{field} contains a control or surrogate character.")
    if len(value.encode("utf-8")) > MAX_IDENTIFIER_BYTES:
        raise MongoDBConfigurationError(f"{field} is longer than {MAX_IDENTIFIER_BYTES} UTF-8 bytes.")
    return value


def validate_operation_timeout(timeout: object, field: str = "operation_timeout") -> float:
    """Return ``timeout`` as seconds if it is a usable operation deadline, else raise naming ``field``."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or not 0 < timeout <= MAX_OPERATION_TIMEOUT
    ):
        raise MongoDBConfigurationError(
            f"{field} must be a number of seconds above 0 and at most {MAX_OPERATION_TIMEOUT:g}, "
            f"not {timeout!r}."
        )
    return float(timeout)


def _validate_ttl(ttl: object, recheck_grace: timedelta) -> None:
    if ttl is None:
        return
    if not isinstance(ttl, timedelta):
        raise MongoDBConfigurationError(
            f"ttl must be a datetime.timedelta or None, not {type(ttl).__name__}."
        )
    if ttl < MIN_TTL:
        raise MongoDBConfigurationError(
            "ttl must be at least 60 seconds, the period of MongoDB's TTL monitor; use None to never expire."
        )
    if ttl < recheck_grace:
        raise MongoDBConfigurationError(
            "ttl must be at least twice operation_timeout, so TTL cannot remove a run's sequence "
            "counter while a save is using it."
        )
    if ttl > MAX_TTL:
        raise MongoDBConfigurationError(f"ttl must be at most {MAX_TTL.days} days; use None to never expire.")


def _validate_keep_last(keep_last: object) -> None:
    if keep_last is not None and (not _is_exact_int(keep_last) or not 1 <= keep_last <= MAX_KEEP_LAST):
        raise MongoDBConfigurationError(
            f"keep_last must be None or an int from 1 to {MAX_KEEP_LAST}, not {keep_last!r}."
        )


def _validate_strict_saves(strict_saves: object) -> None:
    # Only a bool: a truthy string such as "false" must not switch strict saves on.
    if not isinstance(strict_saves, bool):
        raise MongoDBConfigurationError(f"strict_saves must be True or False, not {strict_saves!r}.")


def _validate_max_checkpoint_bytes(value: object) -> None:
    if not _is_exact_int(value) or not _MIN_CHECKPOINT_BYTES <= value <= MAX_CHECKPOINT_BYTES_LIMIT:
        raise MongoDBConfigurationError(
            f"max_checkpoint_bytes must be an int from {_MIN_CHECKPOINT_BYTES:,} to "
            f"{MAX_CHECKPOINT_BYTES_LIMIT:,}, not {value!r}."
        )


def _validate_page_bounds(page_size: object, max_page_size: object) -> None:
    if not _is_exact_int(max_page_size) or not 1 <= max_page_size <= ABSOLUTE_MAX_PAGE_SIZE:
        raise MongoDBConfigurationError(
            f"max_page_size must be an int from 1 to {ABSOLUTE_MAX_PAGE_SIZE}, not {max_page_size!r}."
        )
    if not _is_exact_int(page_size) or not 1 <= page_size <= max_page_size:
        raise MongoDBConfigurationError(
            f"page_size must be an int from 1 to max_page_size ({max_page_size}), not {page_size!r}."
        )


def _is_exact_int(value: object) -> TypeGuard[int]:
    # bool is an int subclass; True is not a page size.
    return type(value) is int


def validate_type_keys(keys: object) -> tuple[str, ...]:
    """Return ``allowed_checkpoint_types`` as ``"module:qualname"`` names, or raise naming the bad entry."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise MongoDBConfigurationError(
            'allowed_checkpoint_types must be an iterable of classes or "module:qualname" strings, '
            f"not a {type(keys).__name__}."
        )
    validated: list[str] = []
    for entry in cast("Iterable[object]", keys):
        key = _type_key_of(entry) if isinstance(entry, type) else entry
        if not isinstance(key, str) or not _is_type_key(key):
            raise MongoDBConfigurationError(
                f'allowed_checkpoint_types entry {entry!r} is not a class or of the form "module:qualname", '
                'for example "my_app.models:OrderState"; classes defined inside functions cannot be named.'
            )
        if key.startswith("__main__:"):
            raise MongoDBConfigurationError(
                f"allowed_checkpoint_types entry {key!r} is a class of the script Python was started with: "
                "'__main__' names another module in every other entry point (a worker started differently, "
                "a test, the CLI), so a checkpoint holding it would save here and load nowhere else. Move "
                "the class into a module both import, and list it from there (for example "
                "'my_app.models:OrderState')."
            )
        validated.append(key)
    return tuple(validated)


def _type_key_of(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _validate_accept_unsigned_before(moment: object, keys: bool) -> None:
    if moment is None:
        return
    if not isinstance(moment, datetime):
        raise MongoDBConfigurationError(
            f"accept_unsigned_before must be a datetime or None, not {type(moment).__name__}."
        )
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise MongoDBConfigurationError(
            "accept_unsigned_before must be timezone-aware (for example datetime(..., tzinfo=timezone.utc))."
        )
    if not keys:
        raise MongoDBConfigurationError(
            "accept_unsigned_before needs signing_keys: without keys every checkpoint is read unsigned."
        )


def _validate_signing_keys(keys: object) -> tuple[bytes, ...]:
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise MongoDBConfigurationError(
            f"signing_keys must be a sequence of bytes keys, not a {type(keys).__name__}."
        )
    validated: list[bytes] = []
    for position, key in enumerate(keys):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        # Never echo a key, not even a wrong one: it may be a real secret in the wrong type.
        if not isinstance(key, (bytes, bytearray)):
            raise MongoDBConfigurationError(
                f"signing_keys[{position}] is a {type(key).__name__}, not bytes; decode a text secret "  # pyright: ignore[reportUnknownArgumentType]
                "first, for example with base64.b64decode or bytes.fromhex."
            )
        if len(key) < MIN_KEY_BYTES:
            raise MongoDBConfigurationError(
                f"signing_keys[{position}] has {len(key)} bytes; keys need at least {MIN_KEY_BYTES}."
            )
        validated.append(bytes(key))
    return tuple(validated)


def _is_type_key(key: str) -> bool:
    module, separator, qualname = key.partition(":")
    return bool(separator) and bool(_TYPE_KEY.fullmatch(module)) and bool(_TYPE_KEY.fullmatch(qualname))
