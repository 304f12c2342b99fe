"""Create and check the checkpoint collection's indexes without a storage or a run.

Indexes belong to the collection, not to a run, so a deploy job or a worker's start-up check
needs only the collection: no tenant, workflow or session to invent. The storage's
``ensure_indexes()`` and ``validate_indexes()`` run the same steps (:func:`create_indexes`,
:func:`check_indexes`) inside their own operation.

Creating costs two round trips, list then create: the listing is needed anyway to refuse a
collection with a default collation, and it names an index of a required name that differs
before anything is sent. A conflict the listing cannot see (the server refuses a required index
because one with its signature exists under another name, code 85, or because one of its name
appeared after the listing, 85 or 86; the text names neither cleanly) is named by creating the
indexes again one at a time, only then.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from typing import Any, Final

from pymongo.errors import OperationFailure

from .._telemetry import completion_log, count_round_trip, target_of
from ..errors import (
    DRIVER_ERRORS,
    MongoDBIndexMismatchError,
    MongoDBIndexMissingError,
    MongoDBIntegrationError,
    translate_driver_error,
    translated_driver_errors,
)
from .bounded import BoundedCollection
from .concerns import bind_collection
from .deadlines import operation_deadline
from .driver import CheckpointCollection
from .indexes import CHECKPOINT_INDEXES, IndexSpec, collation_conflict, index_differences
from .options import DEFAULT_OPERATION_TIMEOUT, validate_operation_timeout

__all__ = [
    "build_timeout",
    "check_indexes",
    "create_indexes",
    "ensure_checkpoint_indexes",
    "looked_at_unique_indexes",
    "report_missing_unique_indexes",
    "validate_checkpoint_indexes",
]

_LOGGER: Final = logging.getLogger("agent_framework_mongodb")

_looked_at: weakref.WeakSet[object] = weakref.WeakSet()
"""Collections whose indexes this process has listed or provisioned. pymongo's collections compare
equal by client and namespace, so every handle on one collection counts as one; a collection that
cannot be weakly referenced is looked at on every storage's first save."""

_UNIQUE_INDEXES: Final = tuple(spec for spec in CHECKPOINT_INDEXES if spec.unique)

_CONFLICT_CODES: Final = frozenset({85, 86})
"""IndexOptionsConflict (an index of the same signature exists, under this name with other options
or under another name) and IndexKeySpecsConflict (an index of this name has another signature)."""


async def ensure_checkpoint_indexes(
    collection: CheckpointCollection, *, timeout: float | None = None
) -> tuple[str, ...]:
    """Create the checkpoint indexes on ``collection`` (a deploy-time step); returns their names.

    What ``MongoDBCheckpointStorage.ensure_indexes()`` does, without a storage. Creating an
    index that already exists with the same definition does nothing.

    Args:
        collection: The checkpoint collection (pymongo ``AsyncCollection`` or compatible).
        timeout: Seconds for the whole call, all round trips included (``pymongo.timeout``).
            None by default: an index build over a populated collection takes as long as it
            takes (docs/deployment.md, "Indexes", says how long and how to watch it), and since
            MongoDB 4.4 a ``createIndexes`` cut short by its deadline aborts its own build
            (SERVER-46595), so a save-sized deadline could make the upgrade fail every time. A
            client-wide ``timeoutMS`` still applies when none is given.

    Raises:
        MongoDBIndexMismatchError: A required index conflicts with an existing one (the required
            index is named; nothing of it is created), or the collection has a non-simple
            default collation (nothing is created).
        MongoDBIndexError: An index could not be built, for example a unique one over
            documents that already repeat its key.
        MongoDBConfigurationError: ``timeout`` is invalid, or the write concern is ``w=0``.
    """
    with completion_log("ensure_indexes", target_of(collection)) as record:
        bound = bind_collection(collection)
        with operation_deadline(build_timeout(timeout)):
            names = await create_indexes(bound)
        record.result_count = len(names)
        return names


async def validate_checkpoint_indexes(
    collection: CheckpointCollection, *, timeout: float | None = None
) -> None:
    """Check, read-only, that every checkpoint index exists on ``collection`` as defined.

    What ``MongoDBCheckpointStorage.validate_indexes()`` does, without a storage; one round trip.

    Raises:
        MongoDBIndexMissingError: A required index does not exist (it is named).
        MongoDBIndexMismatchError: A required index differs (it and the options are named),
            or the collection has a non-simple default collation.
        MongoDBConfigurationError: ``timeout`` is invalid, or the write concern is ``w=0``.
    """
    with completion_log("validate_indexes", target_of(collection)) as record:
        bound = bind_collection(collection)
        with operation_deadline(_seconds(timeout)):
            await check_indexes(bound)
        record.result_count = len(CHECKPOINT_INDEXES)


async def create_indexes(collection: CheckpointCollection) -> tuple[str, ...]:
    """The creating step, under the caller's deadline and completion record."""
    listed = await _listed_indexes(collection)
    _require_simple_collection_collation(listed)
    for spec in CHECKPOINT_INDEXES:
        _require_same_if_present(spec, listed)
    count_round_trip()
    try:
        names = tuple(await collection.create_indexes([spec.model() for spec in CHECKPOINT_INDEXES]))
    except OperationFailure as error:
        if error.code not in _CONFLICT_CODES:
            raise translate_driver_error(error, operation="provision", action="create indexes") from error
        names = await _create_one_at_a_time(collection)
    except DRIVER_ERRORS as error:
        raise translate_driver_error(error, operation="provision", action="create indexes") from error
    _remember(collection)
    return names


async def check_indexes(collection: CheckpointCollection) -> None:
    """The checking step, under the caller's deadline and completion record."""
    listed = await _listed_indexes(collection)
    _require_simple_collection_collation(listed)
    for spec in CHECKPOINT_INDEXES:
        if spec.name not in listed:
            raise MongoDBIndexMissingError(
                f"Index {spec.name!r} is missing; run ensure_indexes() at deploy time."
            )
        _require_same_if_present(spec, listed)
    _remember(collection)


def looked_at_unique_indexes(collection: CheckpointCollection) -> bool:
    """Whether this process already listed or provisioned the indexes of ``collection``, so
    :func:`report_missing_unique_indexes` would send nothing."""
    return _seen(collection)


async def report_missing_unique_indexes(collection: CheckpointCollection, *, strict: bool = False) -> None:
    """Log at ERROR (or, ``strict``, raise), once per collection and process, when the unique
    indexes a save relies on are missing or differ: one ``listIndexes`` round trip, on a storage's
    first save.

    Without them nothing refuses a second checkpoint of the same id or sequence, so an identical
    retry is stored twice and racing writers can share a sequence. Refusing every save instead
    would lose every checkpoint of such a deployment (Agent Framework logs a failed save and carries
    on), so by default the storage says what is wrong and how to fix it, and saves. A storage with
    ``strict_saves`` asked for a run that stops rather than go on unprotected: its save raises,
    and each later save looks again until the indexes are there. A listing that fails is not
    reported (the save meets the same failure) and is tried again on the next save. Provisioning
    or validating the indexes counts as having looked.

    Raises:
        MongoDBIndexMissingError: ``strict``, and a unique index is missing or differs.
    """
    if _seen(collection):
        return
    try:
        listed = await _listed_indexes(collection)
    except MongoDBIntegrationError:
        return
    problems = [problem for spec in _UNIQUE_INDEXES if (problem := _unique_index_problem(spec, listed))]
    if problems and strict:
        raise MongoDBIndexMissingError(
            "The checkpoint collection lacks the unique indexes that keep saves idempotent and ordered: "
            f"{'; '.join(problems)}. Run ensure_indexes() (or `agent-framework-mongodb indexes ensure`) "
            "at deploy time."
        )
    _remember(collection)
    if problems:
        _LOGGER.error(
            "checkpoint_storage save: the checkpoint collection lacks the unique indexes that keep saves "
            "idempotent and ordered: %s; saves go on without them. Run ensure_indexes() (or "
            "`agent-framework-mongodb indexes ensure`) at deploy time.",
            "; ".join(problems),
        )


def _remembered_as(collection: object) -> object:
    """The caller's own collection: it lives as long as the caller keeps it, while the bounded view
    of it goes with the storage that made it."""
    return collection.unbounded if isinstance(collection, BoundedCollection) else collection


def _unique_index_problem(spec: IndexSpec, listed: Mapping[str, Mapping[str, Any]]) -> str | None:
    index = listed.get(spec.name)
    if index is None:
        return f"{spec.name} (missing)"
    differences = index_differences(spec, index)
    return f"{spec.name} (differs: {', '.join(differences)})" if differences else None


def _seen(collection: object) -> bool:
    try:
        return _remembered_as(collection) in _looked_at
    except TypeError:
        return False


def _remember(collection: object) -> None:
    try:
        _looked_at.add(_remembered_as(collection))
    except TypeError:
        return  # not weakly referable: looked at again by the next storage


async def _create_one_at_a_time(collection: CheckpointCollection) -> tuple[str, ...]:
    """After a conflict the listing did not show: find, and name, the index the server refuses."""
    names: list[str] = []
    for spec in CHECKPOINT_INDEXES:
        names.extend(await _create_one(collection, spec))
    # The conflicting index went away in between (dropped by someone else): every index exists.
    return tuple(names)


async def _create_one(collection: CheckpointCollection, spec: IndexSpec) -> list[str]:
    count_round_trip()
    try:
        return await collection.create_indexes([spec.model()])
    except DRIVER_ERRORS as error:
        translated = translate_driver_error(
            error, operation="provision", action=f"create index {spec.name!r}"
        )
        if isinstance(translated, MongoDBIndexMismatchError):
            raise MongoDBIndexMismatchError(
                f"Index {spec.name!r} conflicts with an existing index: one of another name with the "
                "same keys, uniqueness, sparseness, partial filter and collation or, below "
                "featureCompatibilityVersion 5.0, any on the same keys and collation; or one of its "
                "name created meanwhile (docs/deployment.md). Drop that index, or raise the FCV, and "
                "run ensure_indexes() again."
            ) from error
        raise translated from error


async def _listed_indexes(collection: CheckpointCollection) -> dict[str, Mapping[str, Any]]:
    with translated_driver_errors(operation="provision", action="list indexes"):
        count_round_trip()  # the listing's first batch comes with the command's reply
        cursor = await collection.list_indexes()
        return {str(index.get("name")): index for index in await cursor.to_list(None)}


def _require_simple_collection_collation(listed: Mapping[str, Mapping[str, Any]]) -> None:
    conflict = collation_conflict(listed)
    if conflict is not None:
        raise MongoDBIndexMismatchError(conflict)


def _require_same_if_present(spec: IndexSpec, listed: Mapping[str, Mapping[str, Any]]) -> None:
    index = listed.get(spec.name)
    differences = [] if index is None else index_differences(spec, index)
    if differences:
        raise MongoDBIndexMismatchError(
            f"Index {spec.name!r} differs in {', '.join(differences)}; drop it and run ensure_indexes()."
        )


def build_timeout(timeout: float | None) -> float | None:
    """An index build's own deadline: none unless given (see :func:`ensure_checkpoint_indexes`)."""
    return None if timeout is None else validate_operation_timeout(timeout, "timeout")


def _seconds(timeout: float | None) -> float:
    return DEFAULT_OPERATION_TIMEOUT if timeout is None else validate_operation_timeout(timeout, "timeout")
