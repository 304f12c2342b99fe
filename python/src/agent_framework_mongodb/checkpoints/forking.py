"""Forking a run: copy a run's checkpoints up to a chosen one into another session of the same workflow.

The copy keeps every checkpoint's id and ``previous_checkpoint_id``: ids are unique per run
(``checkpoint_scope_identity`` is keyed by the run's scope and the id), so the same id in another
session is another document, and an application resumes the copy with the very id it would have
resumed the source with, on the copy's storage (``docs/adr/0036-fork-a-run.md``).

**Why the copy is re-encoded.** A chunk's address (its ``_id``) is a SHA-256 over the *run's* chunk
context and its bytes (ADR 0018), so the same leaf in two runs is two documents: a chunk can be
neither found nor verified from another run, ``clear_run`` and the collection of one run never touch
another's, and ``_id`` stays unique in the collection. The copy therefore cannot reference the
source's chunks, and MongoDB has no SHA-256 to re-address them on the server. Each selected checkpoint
is read through the source storage's own loader (verified, with signing keys, before anything is
parsed; a page's chunks in one fetch) and saved through the target storage's own ``save``: the
target writes each distinct leaf once (its chunk memory spans the whole fork), signs with its first
key, allocates sequences in the copy's order and sets chunk expiry and touches as for any save.

**Order and retries.** The selection is copied oldest first, one save at a time, so the target always
holds a prefix of it; a chunked checkpoint's chunks are stored before its root, so a reader never
loads a half-copied checkpoint. A fork that stopped part way, or a retried one, finds that prefix,
checks that each copied checkpoint has the source's identity hash, and copies the rest; a target
holding anything else is refused before any write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, Literal

from .._telemetry import completion_log, count_round_trip, target_of
from ..errors import (
    MongoDBCheckpointNotFoundError,
    MongoDBConcurrencyError,
    MongoDBConfigurationError,
    MongoDBIntegrityError,
    MongoDBMappingError,
    translated_driver_errors,
)
from .codec import CHUNKED_PAYLOAD_FORMAT, CheckpointCodec, EncodedCheckpoint
from .codec.chunks import MissingChunkError
from .codec.signing import PayloadSigner
from .codec.transplant import NotTransplantable, RootHeading, Transplanter, root_heading
from .deadlines import operation_deadline
from .documents import (
    ENVELOPE_PROJECTION,
    MAX_SEQUENCE,
    PAYLOAD_BYTES_FIELD,
    SignaturePolicy,
    StoredPayload,
)
from .driver import CheckpointCollection, Document
from .indexes import SIMPLE_COLLATION
from .ledger import LedgerCheck, read_ledger
from .options import MongoDBCheckpointStorageOptions, validate_identifier
from .paging import PagePosition, encode_cursor
from .queries import ASCENDING_SEQUENCE, page_filter
from .reading import CheckpointDecoder
from .scope import RunScope
from .strict import MongoDBStrictSaveFailure
from .summaries import checkpoint_id_of

if TYPE_CHECKING:
    from agent_framework import WorkflowCheckpoint

__all__ = ["ForkAccess", "ForkKeep", "MongoDBForkResult", "fork_run"]

ForkKeep = Literal["latest", "chain"] | int
"""What a fork copies: ``"latest"`` (the chosen checkpoint alone), ``"chain"`` (it and every
ancestor the run still holds) or ``N`` (it and its ``N - 1`` nearest ancestors)."""

_ENVELOPE_PAGE: Final = 1_000
"""Envelopes (no payload, a few hundred bytes each) read per round trip while planning."""
_COPY_PAGE: Final = 20
"""Checkpoints decoded per page while copying: a page's chunks are fetched in one round trip, and
only one page of decoded checkpoints is held at a time."""


@dataclasses.dataclass(frozen=True, slots=True)
class MongoDBForkResult:
    """What :meth:`MongoDBCheckpointStorage.fork_run` copied.

    Attributes:
        workflow_name: The workflow of both runs.
        source_session_id: The run copied from (unchanged).
        session_id: The run copied into; resume it with ``storage.for_session(session_id)``.
        checkpoint_id: The checkpoint forked at: the copy's latest, to resume with
            ``run(checkpoint_id=...)``.
        checkpoint_ids: The copied checkpoints, oldest first (the same ids as in the source).
        copied: Checkpoints saved into the target by this call: ``transplanted + reencoded``.
        already_copied: Checkpoints an earlier, interrupted or repeated fork had already copied
            (found in the target with the source's identity hash); ``copied + already_copied`` is
            ``len(checkpoint_ids)``.
        payload_bytes: The encoded size of the copied checkpoints' state, summed (each whole, as
            ``payload_bytes`` records it); what a copy without shared chunks would send.
        signed: Whether the copy was signed (the storage has signing keys, and every source
            checkpoint verified first).
        transplanted: Of ``copied``, the chunked checkpoints whose stored root and leaves were
            moved into the copy's chunk context as stored (ADR 0040), without decoding them.
        reencoded: Of ``copied``, those loaded and saved again: stored whole (small), or declined
            by the transplant.
    """

    workflow_name: str
    source_session_id: str
    session_id: str
    checkpoint_id: str
    checkpoint_ids: tuple[str, ...]
    copied: int
    already_copied: int
    payload_bytes: int
    signed: bool
    transplanted: int = 0
    reencoded: int = 0

    def to_dict(self) -> dict[str, object]:
        """The result as JSON-ready values."""
        return {
            "workflow_name": self.workflow_name,
            "source_session_id": self.source_session_id,
            "session_id": self.session_id,
            "checkpoint_id": self.checkpoint_id,
            "checkpoint_ids": list(self.checkpoint_ids),
            "copied": self.copied,
            "already_copied": self.already_copied,
            "payload_bytes": self.payload_bytes,
            "signed": self.signed,
            "transplanted": self.transplanted,
            "reencoded": self.reencoded,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class _Envelope:
    """What a fork decides with, from one checkpoint document's envelope (no payload), checked."""

    checkpoint_id: str
    parent_checkpoint_id: str | None
    sequence: int
    payload_hash: str
    payload_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    selection: tuple[_Envelope, ...]
    """The source envelopes to copy, oldest first."""
    done: int
    """How many of them the target already holds (a prefix)."""
    before_first: PagePosition | None
    """The source checkpoint just before the first one still to copy, as a page cursor's position."""
    span: int = 0
    """How many source checkpoints lie from the first one still to copy to the one forked at: the
    copy reads no further, so nothing after the fork point is decoded."""


@dataclasses.dataclass(frozen=True, slots=True)
class ForkAccess:
    """The steps of the two storages a fork runs below their public methods, handed over by
    :meth:`MongoDBCheckpointStorage.fork_run`, so this module reaches into no storage's internals.

    Attributes:
        read_stored: One page of the source run's stored payloads after a cursor, checked as a
            read checks them before decoding, and the next page's cursor.
        decoder: The source's loader (leaves fetched by address; payloads decoded, verified first).
        store_transplanted: Stores a transplanted checkpoint into the target, as its save stores.
        store_reencoded: Saves a decoded checkpoint into the target, refusing it before any write
            unless its identity hash is the given one.
    """

    read_stored: Callable[[str | None, int], Awaitable[tuple[list[StoredPayload], str | None]]]
    decoder: CheckpointDecoder
    store_transplanted: Callable[[RootHeading, EncodedCheckpoint], Awaitable[str]]
    store_reencoded: Callable[[WorkflowCheckpoint, str], Awaitable[str]]


async def fork_run(
    collection: CheckpointCollection,
    options: MongoDBCheckpointStorageOptions,
    target_options: MongoDBCheckpointStorageOptions,
    access: ForkAccess,
    *,
    checkpoint_id: str | None = None,
    keep: ForkKeep = "latest",
) -> MongoDBForkResult:
    """Copy the run of ``options`` up to ``checkpoint_id`` (its latest by default) into the run of
    ``target_options``, another session of the same workflow (``options.with_session(...)``).

    Planning reads envelopes only, under one ``operation_timeout``; each page read and each save of
    the copy is then an operation of its own, with its own deadline.

    Raises:
        MongoDBConfigurationError: An argument is invalid, the target is the source, or the target
            holds checkpoints that are not this fork's prefix; nothing was written.
        MongoDBCheckpointNotFoundError: The source run has no live checkpoint with that id (or none).
        MongoDBIntegrityError: With signing keys, a selected source checkpoint (or one the target
            already holds) does not verify; nothing was written.
        MongoDBMappingError: A stored envelope is malformed (nothing was written), or a checkpoint
            read names another parent than its envelope (the copy holds the ones before it).
        MongoDBConcurrencyError: A checkpoint read is not the one planned (the run changed, or its
            document was modified), or another writer saved into the target while it was copied.
    """
    if checkpoint_id is not None:
        validate_identifier("checkpoint_id", checkpoint_id)
    limit = _limit_of(keep)
    if target_options.session_id == options.session_id:
        raise MongoDBConfigurationError("fork_run copies a run into another session, not into itself.")
    keys = tuple(options.signing_keys)
    signer = PayloadSigner(keys) if keys else None
    source_scope = RunScope.from_options(options)
    target_scope = RunScope.from_options(target_options)
    with completion_log("fork_run", target_of(collection)) as record:
        with operation_deadline(options.operation_timeout):
            plan = await _plan(
                collection,
                source_scope,
                target_scope,
                signer,
                checkpoint_id=checkpoint_id,
                limit=limit,
                max_bytes=options.max_checkpoint_bytes,
            )
        copied = await _copy(options, target_options, access, plan)
        record.result_count = copied.transplanted + copied.reencoded
        with operation_deadline(options.operation_timeout):
            await _require_only_the_copy(collection, target_scope, signer, plan, options.max_checkpoint_bytes)
    selection = plan.selection
    return MongoDBForkResult(
        workflow_name=options.workflow_name,
        source_session_id=options.session_id,
        session_id=target_options.session_id,
        checkpoint_id=selection[-1].checkpoint_id,
        checkpoint_ids=tuple(envelope.checkpoint_id for envelope in selection),
        copied=copied.transplanted + copied.reencoded,
        already_copied=plan.done,
        payload_bytes=sum(envelope.payload_bytes for envelope in selection),
        signed=signer is not None,
        transplanted=copied.transplanted,
        reencoded=copied.reencoded,
    )


def _limit_of(keep: object) -> int | None:
    """How many checkpoints ``keep`` asks for, ``None`` for the whole chain."""
    if keep == "latest":
        return 1
    if keep == "chain":
        return None
    if type(keep) is int and keep >= 1:
        return keep
    raise MongoDBConfigurationError(f"keep must be 'latest', 'chain' or an int of at least 1, not {keep!r}.")


async def _plan(
    collection: CheckpointCollection,
    source_scope: RunScope,
    target_scope: RunScope,
    signer: PayloadSigner | None,
    *,
    checkpoint_id: str | None,
    limit: int | None,
    max_bytes: int,
) -> _Plan:
    """Read both runs' envelopes (no payload), choose the selection and check the target."""
    source = await _envelopes(collection, source_scope, signer, max_bytes)
    if not source:
        raise MongoDBCheckpointNotFoundError("The run to fork has no checkpoints.")
    by_id = {envelope.checkpoint_id: envelope for envelope in source}
    point = source[-1] if checkpoint_id is None else by_id.get(checkpoint_id)
    if point is None:
        raise MongoDBCheckpointNotFoundError("The run to fork has no checkpoint with that id.")
    selection = _ancestors(point, by_id, limit)
    done = _copied_prefix(selection, await _envelopes(collection, target_scope, signer, max_bytes))
    first = selection[done].sequence if done < len(selection) else None
    earlier = [envelope for envelope in source if first is not None and envelope.sequence < first]
    before_first = PagePosition(earlier[-1].sequence, earlier[-1].checkpoint_id) if earlier else None
    end = selection[-1].sequence
    span = sum(1 for envelope in source if first is not None and first <= envelope.sequence <= end)
    return _Plan(selection, done, before_first, span)


def _ancestors(point: _Envelope, by_id: Mapping[str, _Envelope], limit: int | None) -> tuple[_Envelope, ...]:
    """``point`` and its nearest ancestors the run holds (at most ``limit``), oldest first.

    The walk follows ``parent_checkpoint_id``, not the sequence order, so a run resumed from an
    older checkpoint forks along its own branch. A parent must be older by sequence, which also ends
    any cycle a damaged envelope could make."""
    chain = [point]
    while limit is None or len(chain) < limit:
        parent_id = chain[-1].parent_checkpoint_id
        parent = None if parent_id is None else by_id.get(parent_id)
        if parent is None or parent.sequence >= chain[-1].sequence:
            break
        chain.append(parent)
    return tuple(reversed(chain))


def _copied_prefix(selection: Sequence[_Envelope], target: Sequence[_Envelope]) -> int:
    """How many of ``selection`` the target already holds, refusing any other content.

    "The same content" is the same identity hash (``payload_hash``), as for a save's idempotent
    retry. With keys both runs' hashes are signed; without, they are the writer's word
    (ADR 0036, "Limits")."""
    held = [envelope.checkpoint_id for envelope in target]
    wanted = [envelope.checkpoint_id for envelope in selection]
    # Only a prefix, in order: the copy's sequences must follow the source's order, and the
    # checkpoint forked at must be the copy's latest.
    if held != wanted[: len(held)]:
        raise MongoDBConfigurationError(
            "The session to fork into already holds checkpoints that are not this fork's: fork into a "
            "new session, or clear that one first (clear_run)."
        )
    for stored, original in zip(target, selection, strict=False):  # target is a prefix
        if stored.payload_hash != original.payload_hash:
            raise MongoDBConfigurationError(
                "The session to fork into holds a checkpoint of the same id with other content: fork "
                "into a new session, or clear that one first (clear_run)."
            )
    return len(held)


async def _envelopes(
    collection: CheckpointCollection, scope: RunScope, signer: PayloadSigner | None, max_bytes: int
) -> list[_Envelope]:
    """The run's live, unexpired envelopes, oldest first; with keys each one verified, strictly.

    ``accept_unsigned_before`` is not honoured here: a fork signs what it copies, and signs only
    what verified (an unsigned checkpoint would have its state signed unseen)."""
    policy = SignaturePolicy(signer)
    decoder = CheckpointDecoder(
        collection,
        scope,
        CheckpointCodec(),  # unused: only envelopes are verified, no payload is read
        policy,
        chunk_context=scope.chunk_context(CHUNKED_PAYLOAD_FORMAT),
        max_checkpoint_bytes=max_bytes,
    )
    check = LedgerCheck(await read_ledger(collection, scope)) if signer is not None else None
    live = None if check is None else check.sequence_condition()
    envelopes: list[_Envelope] = []
    after: int | None = None
    while True:
        with translated_driver_errors(operation="read", action="read the run's checkpoints"):
            count_round_trip()  # find() sends nothing; to_list() sends the query
            cursor = collection.find(
                page_filter(scope, after, live, unexpired=True),
                ENVELOPE_PROJECTION,
                sort=ASCENDING_SEQUENCE,
                limit=_ENVELOPE_PAGE,
                collation=SIMPLE_COLLATION,
            )
            page = await cursor.to_list(_ENVELOPE_PAGE)
        try:
            envelopes.extend(_envelope_of(document) for document in decoder.verified(page, check))
        except MongoDBIntegrityError as error:
            raise MongoDBIntegrityError(
                "A checkpoint of the run to fork (or one already in the session to fork into) does not "
                "verify with this storage's keys; a fork signs only what verified, so nothing was "
                "copied. Sign the run first (`agent-framework-mongodb sign-run`)."
            ) from error
        if len(page) < _ENVELOPE_PAGE:
            return envelopes
        after = _sequence_of(page[-1])


@dataclasses.dataclass(frozen=True, slots=True)
class _Copied:
    """How many checkpoints a copy saved, by how."""

    transplanted: int = 0
    reencoded: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class _Transplant:
    """A source checkpoint moved into the target's chunk context, ready to store."""

    heading: RootHeading
    encoded: EncodedCheckpoint
    payload_hash: str | None
    """The identity hash its source document records as read (checked against the planned one)."""


async def _copy(
    options: MongoDBCheckpointStorageOptions,
    target_options: MongoDBCheckpointStorageOptions,
    access: ForkAccess,
    plan: _Plan,
) -> _Copied:
    """Save the rest of the selection into ``target``, oldest first; how many were saved, and how.

    Each page is read as stored and made ready whole before any of it is saved: a chunked
    checkpoint is transplanted (``codec/transplant.py``), any other one, or one the transplant
    declines, decoded through the source's loader (its leaves in one fetch for the page). Each is
    checked against its planned envelope first: its lineage and its identity hash."""
    remaining = plan.selection[plan.done :]
    if not remaining:
        return _Copied()
    wanted = {envelope.checkpoint_id: envelope for envelope in remaining}
    point = remaining[-1].checkpoint_id
    scope = RunScope.from_options(options)
    transplanter = Transplanter(
        scope.chunk_context(CHUNKED_PAYLOAD_FORMAT),
        RunScope.from_options(target_options).chunk_context(CHUNKED_PAYLOAD_FORMAT),
        max_checkpoint_bytes=options.max_checkpoint_bytes,
    )
    cursor = None if plan.before_first is None else encode_cursor(scope, plan.before_first)
    copied = _Copied()
    left = plan.span
    while True:
        limit = max(1, min(_COPY_PAGE, left))
        page, following = await access.read_stored(cursor, limit)
        left -= len(page)
        selected = [(item, wanted[item.checkpoint_id]) for item in page if item.checkpoint_id in wanted]
        for copy, planned in await _ready(options.workflow_name, access.decoder, transplanter, selected):
            if isinstance(copy, _Transplant):
                _require_planned_lineage(copy.heading.previous_checkpoint_id, planned)
                _require_planned_identity(copy.payload_hash, planned)
                await _saved(access.store_transplanted(copy.heading, copy.encoded))
                copied = dataclasses.replace(copied, transplanted=copied.transplanted + 1)
            else:
                _require_planned_lineage(copy.previous_checkpoint_id, planned)
                await _saved(access.store_reencoded(copy, planned.payload_hash))
                copied = dataclasses.replace(copied, reencoded=copied.reencoded + 1)
            del wanted[planned.checkpoint_id]
        cursor = following
        if not wanted:
            return copied
        # Past the checkpoint forked at, nothing selected can follow.
        if cursor is None or any(item.checkpoint_id == point for item in page):
            raise MongoDBCheckpointNotFoundError(
                "A checkpoint of the run to fork was removed while it was copied (expired, pruned or "
                "deleted); the copy holds the checkpoints before it. Fork again from a checkpoint the "
                "run still holds."
            )


async def _ready(
    workflow_name: str,
    decoder: CheckpointDecoder,
    transplanter: Transplanter,
    selected: Sequence[tuple[StoredPayload, _Envelope]],
) -> list[tuple[_Transplant | WorkflowCheckpoint, _Envelope]]:
    """A page's selected checkpoints, in order, ready to save: transplanted where they can be,
    else decoded. One that is removed meanwhile is left out (the copy reports it missing)."""
    roots = {
        item.checkpoint_id: transplanter.open(item.payload, item.checksum)
        for item, _ in selected
        if item.chunked
    }
    leaves: set[bytes] = set()
    for item, _ in selected:
        if item.checkpoint_id in roots:
            leaves |= transplanter.wanted(roots[item.checkpoint_id], item.nested)
    if leaves:
        transplanter.offer(await decoder.fetch_leaves(leaves, checkpoints=len(roots)))
    moved: dict[str, _Transplant] = {}
    for item, planned in selected:
        root = roots.get(item.checkpoint_id)
        if root is None:
            continue
        heading = root_heading(root)
        if heading.checkpoint_id != item.checkpoint_id or heading.workflow_name != workflow_name:
            message = "A stored checkpoint's payload does not belong to its document."
            raise MongoDBIntegrityError(message) if decoder.signed else MongoDBMappingError(message)
        try:
            encoded = transplanter.transplant(
                item.payload, root, payload_hash=planned.payload_hash, logical_bytes=planned.payload_bytes
            )
        except (NotTransplantable, MissingChunkError):
            # Re-encoded instead: the loader tells a checkpoint removed meanwhile from a corrupt one.
            continue
        moved[item.checkpoint_id] = _Transplant(heading, encoded, item.payload_hash)
    rest = [item for item, _ in selected if item.checkpoint_id not in moved]
    decoded = {checkpoint.checkpoint_id: checkpoint for checkpoint in await decoder.decode_stored(rest)}
    ready: list[tuple[_Transplant | WorkflowCheckpoint, _Envelope]] = []
    for item, planned in selected:
        copy = moved.get(item.checkpoint_id) or decoded.get(item.checkpoint_id)
        if copy is not None:
            ready.append((copy, planned))
    return ready


def _require_planned_identity(payload_hash: str | None, planned: _Envelope) -> None:
    """The checkpoint read records the identity hash its envelope recorded when the fork chose it
    (a transplant keeps the hash; a re-encoded one is checked again by its save)."""
    if payload_hash != planned.payload_hash:
        raise MongoDBConcurrencyError(
            "A checkpoint of the run to fork is not the one the fork planned from its document "
            "(its content's identity hash differs): the run was changed while it was copied, or "
            "its document was modified outside this storage. Nothing of it was written."
        )


def _require_planned_lineage(previous_checkpoint_id: str | None, planned: _Envelope) -> None:
    """The checkpoint read names the parent its envelope named when the fork chose it: the
    selection followed the envelopes, the copy keeps the payloads' lineage, and the two must agree."""
    if previous_checkpoint_id != planned.parent_checkpoint_id:
        raise MongoDBMappingError(
            "A checkpoint of the run to fork names another previous checkpoint than its document's "
            "parent_checkpoint_id: the document was modified outside this storage (or the run changed "
            "while it was copied); the copy holds the checkpoints before it."
        )


async def _require_only_the_copy(
    collection: CheckpointCollection,
    scope: RunScope,
    signer: PayloadSigner | None,
    plan: _Plan,
    max_bytes: int,
) -> None:
    """After the copy, nothing but the selection precedes the checkpoint forked at in the target:
    another writer's save into it while it was copied would sit among the copies (and make every
    retry refuse it). What ``keep_last`` pruned is simply absent; a save after the last copy is
    the copy's own continuation."""
    held = [envelope.checkpoint_id for envelope in await _envelopes(collection, scope, signer, max_bytes)]
    wanted = {envelope.checkpoint_id for envelope in plan.selection}
    point = plan.selection[-1].checkpoint_id
    before_point = held[: held.index(point)] if point in held else held
    if any(checkpoint_id not in wanted for checkpoint_id in before_point):
        raise MongoDBConcurrencyError(
            "Another writer saved into the session to fork into while the fork copied into it: that "
            "session now holds its checkpoints among the copies. Clear it (clear_run) and fork again, "
            "or fork into a new session."
        )


async def _saved(save: Awaitable[str]) -> None:
    """One save into the copy; a strict storage's failure is raised as the error it carries (the
    fork is no workflow run to stop)."""
    try:
        await save
    except MongoDBStrictSaveFailure as failure:
        raise failure.error from failure


def _envelope_of(document: Document) -> _Envelope:
    """The fields a fork decides with, each of the type a save writes, else the document is not a
    checkpoint's (``MongoDBMappingError``): a writer's other types never reach a comparison."""
    parent = document.get("parent_checkpoint_id")
    payload_hash = document.get("payload_hash")
    if parent is not None and not isinstance(parent, str):
        raise MongoDBMappingError(
            "A stored checkpoint document's parent_checkpoint_id is not a checkpoint id."
        )
    if not isinstance(payload_hash, str):
        raise MongoDBMappingError("A stored checkpoint document has no payload_hash.")
    return _Envelope(
        checkpoint_id=checkpoint_id_of(document),
        parent_checkpoint_id=parent,
        sequence=_sequence_of(document),
        payload_hash=payload_hash,
        payload_bytes=_payload_bytes(document),
    )


def _sequence_of(document: Document) -> int:
    sequence = document.get("sequence")
    if isinstance(sequence, bool) or not isinstance(sequence, int) or not 0 <= sequence <= MAX_SEQUENCE:
        raise MongoDBMappingError("A stored checkpoint document has no valid sequence.")
    return int(sequence)


def _payload_bytes(document: Document) -> int:
    """The recorded encoded size; 0 when absent (older documents) or not a size."""
    size = document.get(PAYLOAD_BYTES_FIELD)
    return int(size) if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0
