"""Moving a run onto signing: sign the checkpoints it holds, after proving each one loads.

Turning ``signing_keys`` on makes every checkpoint stored without them unloadable, by design: a
signed storage accepts nothing it cannot verify. Two ways across (``docs/adr/0020``):

* ``accept_unsigned_before`` (an option) loads unsigned checkpoints created before signing started,
  with the unsigned threat model, while every new save is signed;
* :func:`sign_run` (the CLI's ``sign-run``) signs a run's live checkpoints in place, so the option
  can be dropped. Signing is the operator's statement that the run's current contents are trusted.

What it signs, and what it never does:

* a checkpoint *without a current signature* (none, or the first release's format) is loaded through
  the restricted loader of a storage without keys, from the very document read (the bytes proved
  are the bytes whose checksum is signed), and signed in the run's current lifetime; the update
  matches every signed field as read, so a document changed meanwhile is not signed;
* a checkpoint whose current-format signature verifies in the run's lifetime is left as it is;
* a checkpoint whose current-format signature does *not* verify (edited, reordered, from another
  run) is refused and reported, never signed: re-signing it would launder the tampering;
* a checkpoint validly signed in *another* lifetime of the run (the counter was deleted by hand, or
  it is from before ``clear_run``) is signed only with ``adopt``, an operator's explicit statement
  that the counter was lost; the dry run lists them, and ``exclude`` keeps named ones out (a
  checkpoint deleted, pruned or put back before the counter was lost cannot be told apart). When
  one of them becomes the run's latest checkpoint, the result names it (``adopted_latest``).

What the operator vouches for (issue 30, ADR 0032): the run's unsigned documents are whatever a
collection writer left there, so signing them is bounded by a statement the operator makes:

* ``written_before``, required to write: only documents whose ``created_at`` is before it are signed
  (each later one, or one without a date, is refused), and it may not be later than the signing
  machine's clock;
* in a run that already holds signed checkpoints every unsigned document is refused unless
  ``beside_signed``: there, an unsigned document is what a writer without the key leaves (one field
  deleted from a signed checkpoint makes it unsigned); with ``beside_signed`` only documents whose
  sequence is below the run's first signed one are signed;
* a dry run decodes nothing: it lists every document with its sequence, dates, lifetime and the
  SHA-256 of its stored payload bytes (hashing parses nothing). Only documents about to be signed
  are decoded, to prove they load.

The counter a transition creates expires with the longest-lived checkpoint it covers (never, if
one is permanent), so the TTL monitor does not remove it while they remain.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Collection, Sequence
from datetime import datetime, timezone
from typing import Final

from .._telemetry import count_round_trip
from ..errors import MongoDBConfigurationError, MongoDBIntegrityError, translated_driver_errors
from .codec import CheckpointCodec
from .codec.chunks import CHUNK_FORMAT
from .codec.signing import PayloadSigner
from .documents import (
    PAYLOAD_FIELD,
    PAYLOAD_PROJECTION,
    UNSIGNED,
    SignaturePolicy,
    as_utc,
    verified_epoch,
)
from .driver import CheckpointCollection, Document
from .indexes import SIMPLE_COLLATION
from .ledger import LedgerCheck, new_epoch, read_ledger
from .options import MongoDBCheckpointStorageOptions
from .queries import ASCENDING_SEQUENCE, counter_filter, page_filter, run_filter
from .reading import CheckpointDecoder
from .scope import RunScope
from .sequences import RunActivity, allocate_sequence, sequence_of
from .signatures import (
    EPOCH_BYTES,
    EPOCH_FIELD,
    SIGNATURE_FIELD,
    SIGNED_FIELDS,
    sign_envelope,
    signed_message,
)

__all__ = ["SignRunCandidate", "SignRunResult", "sign_run"]

_PAGE: Final = 100


@dataclasses.dataclass(frozen=True, slots=True)
class SignRunCandidate:
    """One live document of the run as :func:`sign_run` found it, read without decoding its payload.

    Attributes:
        checkpoint_id: Its checkpoint id.
        sequence: Its stored sequence (``None`` when not an integer).
        created_at: Its stored ``created_at`` (the writing client's clock; unsigned, a writer's word).
        expires_at: Its stored ``expires_at``; ``None`` for a permanent checkpoint.
        lifetime: The hex run epoch its signature verifies in; ``None`` when it verifies in none.
        payload_sha256: The SHA-256 of its stored payload bytes (for a chunked checkpoint, of its
            root), to compare with what the operator vouches for.
        verdict: ``signed``, ``already_signed``, ``refused``, ``other_lifetime`` or ``excluded``.
        reason: Why, in a few words.
    """

    checkpoint_id: str
    sequence: int | None
    created_at: datetime | None
    expires_at: datetime | None
    lifetime: str | None
    payload_sha256: str
    verdict: str
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class SignRunResult:
    """What :func:`sign_run` did (or, without ``write``, would do), by checkpoint id, oldest first.

    Attributes:
        signed: Signed now (or, in a dry run, to be signed).
        already_signed: Already verified in the run's lifetime.
        refused: Carry a current-format signature that does not verify, an envelope no save
            writes, or changed between their proof and their signing: never signed.
        other_lifetime: Validly signed in another lifetime of the run; signed only with ``adopt``.
        written: Whether anything was written.
        candidates: Every live document of the run, oldest first, as the operator reviews it.
        adopted_latest: A checkpoint of another lifetime that ``adopt`` makes (or would make) the
            run's latest: from before a lost counter, or from before a ``clear_run``.
    """

    signed: tuple[str, ...]
    already_signed: tuple[str, ...]
    refused: tuple[str, ...]
    other_lifetime: tuple[str, ...]
    written: bool
    candidates: tuple[SignRunCandidate, ...] = ()
    adopted_latest: str | None = None


async def sign_run(
    collection: CheckpointCollection,
    options: MongoDBCheckpointStorageOptions,
    *,
    write: bool,
    adopt: bool = False,
    exclude: Collection[str] = (),
    written_before: datetime | None = None,
    beside_signed: bool = False,
) -> SignRunResult:
    """Sign the live checkpoints of the run ``options`` names with its first signing key.

    Args:
        collection: The checkpoint collection.
        options: The run, with ``signing_keys`` (and the ``allowed_checkpoint_types`` its
            checkpoints need to load).
        write: Sign; without it, only report what would be signed (decoding nothing).
        adopt: Also sign checkpoints validly signed in another lifetime of the run (its counter
            was deleted by hand). Never for a run that was cleared.
        exclude: Ids to leave as they are (neither signed nor counted).
        written_before: What the operator vouches for: documents created before this moment.
            Required to write; a dry run without it refuses nothing for its date.
        beside_signed: Sign, in a run that already holds signed checkpoints, the unsigned ones
            older (by sequence) than its first signed one; without it, no unsigned one of such a
            run is signed (each is refused, with why).

    Raises:
        MongoDBConfigurationError: ``options`` has no signing keys; ``write`` without
            ``written_before``, or with one later than now. Raised before any read.
        MongoDBMappingError: A checkpoint to be signed does not load through the restricted
            loader; nothing after it is signed (those before it are).
    """
    if not options.signing_keys:
        raise MongoDBConfigurationError("sign-run needs signing keys: the first one signs.")
    _check_cut_off(written_before, write=write)
    scope = RunScope.from_options(options)
    signer = PayloadSigner(tuple(options.signing_keys))
    codec = CheckpointCodec(options.allowed_checkpoint_types)
    codec.check_allowed_types()
    check = LedgerCheck(await read_ledger(collection, scope))
    epoch = check.ledger.epoch if check.ledger is not None else None
    documents = [
        document
        for document in await _live_documents(collection, scope, check)
        if str(document.get("checkpoint_id")) not in exclude
    ]
    reviewed = [_review(document, scope, signer, epoch, adopt=adopt) for document in documents]
    reviewed = _bounded(reviewed, written_before=written_before, beside_signed=beside_signed)
    if write:
        reviewed = await _sign_reviewed(
            collection,
            options=options,
            scope=scope,
            signer=signer,
            codec=codec,
            reviewed=reviewed,
            epoch=epoch,
        )
    candidates = tuple(candidate for _, candidate in reviewed)
    return SignRunResult(
        signed=_ids(candidates, "signed"),
        already_signed=_ids(candidates, "already_signed"),
        refused=_ids(candidates, "refused"),
        other_lifetime=_ids(candidates, "other_lifetime"),
        written=write and any(candidate.verdict == "signed" for candidate in candidates),
        candidates=candidates,
        adopted_latest=_adopted_latest(candidates),
    )


_Reviewed = tuple[Document, SignRunCandidate]


def _check_cut_off(written_before: datetime | None, *, write: bool) -> None:
    if written_before is None:
        if write:
            raise MongoDBConfigurationError(
                "sign-run signs only what you vouch for: name the moment before which the run's "
                "unsigned checkpoints were written (written_before, the CLI's --written-before)."
            )
        return
    if as_utc(written_before) > datetime.now(timezone.utc):
        raise MongoDBConfigurationError(
            f"written_before {written_before.isoformat()} is later than now: a cut-off vouches only "
            "for what has already been written."
        )


def _review(
    document: Document, scope: RunScope, signer: PayloadSigner, epoch: bytes | None, *, adopt: bool
) -> _Reviewed:
    """The document's verdict from its envelope alone: nothing of its payload is parsed."""
    verdict, lifetime = _verdict(document, scope, signer, epoch)
    reasons = {
        "sign": "unsigned",
        "already": "verifies in the run's lifetime",
        "refused": "its signature does not verify",
        "other": "signed in another lifetime of the run",
    }
    reason = reasons[verdict]
    if verdict == "other" and adopt:
        verdict, reason = "sign", "signed in another lifetime of the run; adopted"
    names = {"sign": "signed", "already": "already_signed", "refused": "refused", "other": "other_lifetime"}
    payload = document.get(PAYLOAD_FIELD)
    sequence = document.get("sequence")
    candidate = SignRunCandidate(
        checkpoint_id=str(document.get("checkpoint_id")),
        sequence=sequence if isinstance(sequence, int) and not isinstance(sequence, bool) else None,
        created_at=_date(document, "created_at"),
        expires_at=_date(document, "expires_at"),
        lifetime=None if lifetime is None else lifetime.hex(),
        payload_sha256=hashlib.sha256(payload if isinstance(payload, bytes) else b"").hexdigest(),
        verdict=names[verdict],
        reason=reason,
    )
    return document, candidate


def _bounded(
    reviewed: list[_Reviewed], *, written_before: datetime | None, beside_signed: bool
) -> list[_Reviewed]:
    """Refuse each unsigned candidate the operator's statement does not cover."""
    signed_sequences = [
        candidate.sequence
        for _, candidate in reviewed
        if candidate.lifetime is not None and candidate.sequence is not None
    ]
    holds_signed = any(candidate.verdict != "signed" or candidate.lifetime for _, candidate in reviewed)
    first_signed = min(signed_sequences, default=None)
    bounded: list[_Reviewed] = []
    for document, candidate in reviewed:
        reason = _outside(candidate, written_before, first_signed)
        if holds_signed and not beside_signed and candidate.lifetime is None:
            reason = _IN_A_SIGNED_RUN
        outside = candidate.verdict == "signed" and reason is not None
        bounded.append((document, _refused(candidate, str(reason)) if outside else candidate))
    return bounded


_IN_A_SIGNED_RUN: Final = (
    "the run already holds signed checkpoints, where an unsigned one is what a writer without the key "
    "leaves; --beside-signed signs those older than the first signed checkpoint"
)


def _outside(
    candidate: SignRunCandidate, written_before: datetime | None, first_signed: int | None
) -> str | None:
    """Why an unsigned candidate is outside what the operator vouches for, if it is."""
    if candidate.lifetime is not None:
        return None  # adopted: its signature vouches for its envelope
    if written_before is not None and (
        candidate.created_at is None or as_utc(candidate.created_at) >= as_utc(written_before)
    ):
        return f"not created before {written_before.isoformat()}"
    if first_signed is not None and (candidate.sequence is None or candidate.sequence >= first_signed):
        return "not older than the run's first signed checkpoint"
    return None


async def _sign_reviewed(
    collection: CheckpointCollection,
    *,
    options: MongoDBCheckpointStorageOptions,
    scope: RunScope,
    signer: PayloadSigner,
    codec: CheckpointCodec,
    reviewed: list[_Reviewed],
    epoch: bytes | None,
) -> list[_Reviewed]:
    """Prove, then sign, each candidate to sign; the others as they are."""
    decoder = CheckpointDecoder(
        collection,
        scope,
        codec,
        UNSIGNED,
        chunk_context=scope.chunk_context(CHUNK_FORMAT),
        max_checkpoint_bytes=options.max_checkpoint_bytes,
    )
    covered = [document for document, candidate in reviewed if candidate.verdict == "signed"]
    outcome: list[_Reviewed] = []
    for document, candidate in reviewed:
        if candidate.verdict != "signed":
            outcome.append((document, candidate))
            continue
        # Prove exactly the bytes read, so the checksum signed is that of a payload that loaded.
        proved = await decoder.decode([document], None)
        if not proved:  # removed while it was read
            continue
        if (
            signed_message(scope.discriminator, {**document, EPOCH_FIELD: epoch or bytes(EPOCH_BYTES)})
            is None
        ):
            outcome.append((document, _refused(candidate, "an envelope field of a type no save writes")))
            continue
        if epoch is None:
            waits = bool(proved[0].pending_request_info_events)
            activity = RunActivity(candidate.checkpoint_id, waits)
            epoch = await _lifetime(collection, scope, options, activity, _longest_expiry(covered))
        if await _sign_in_place(collection, scope, signer, document, epoch):
            outcome.append((document, candidate))
        else:
            outcome.append((document, _refused(candidate, "changed since it was read")))
    return outcome


def _refused(candidate: SignRunCandidate, reason: str) -> SignRunCandidate:
    return dataclasses.replace(candidate, verdict="refused", reason=reason)


def _ids(candidates: Sequence[SignRunCandidate], verdict: str) -> tuple[str, ...]:
    return tuple(candidate.checkpoint_id for candidate in candidates if candidate.verdict == verdict)


def _adopted_latest(candidates: Sequence[SignRunCandidate]) -> str | None:
    """The adopted checkpoint that is the run's latest afterwards, if one is."""
    live = [candidate for candidate in candidates if candidate.verdict in {"signed", "already_signed"}]
    numbered = [candidate for candidate in live if candidate.sequence is not None]
    if not numbered:
        return None
    latest = max(numbered, key=lambda candidate: candidate.sequence or 0)
    adopted = latest.verdict == "signed" and latest.lifetime is not None
    return latest.checkpoint_id if adopted else None


def _date(document: Document, name: str) -> datetime | None:
    moment = document.get(name)
    return moment if isinstance(moment, datetime) else None


def _verdict(
    document: Document, scope: RunScope, signer: PayloadSigner, epoch: bytes | None
) -> tuple[str, bytes | None]:
    """``already`` (verifies in the run's lifetime), ``other`` (verifies, another lifetime),
    ``refused`` (a current-format signature that does not verify) or ``sign`` (none current); with
    the lifetime its signature verifies in."""
    try:
        signed_epoch = verified_epoch(document, scope, SignaturePolicy(signer))
    except MongoDBIntegrityError:
        current_format = document.get(SIGNATURE_FIELD) is not None and document.get(EPOCH_FIELD) is not None
        return ("refused" if current_format else "sign"), None
    return ("already" if epoch is not None and signed_epoch == epoch else "other"), signed_epoch


async def _live_documents(
    collection: CheckpointCollection, scope: RunScope, check: LedgerCheck
) -> list[Document]:
    documents: list[Document] = []
    after: int | None = None
    while True:
        with translated_driver_errors(operation="read", action="read the run's checkpoints"):
            count_round_trip()
            cursor = collection.find(
                page_filter(scope, after, check.sequence_condition(), unexpired=True),
                PAYLOAD_PROJECTION,
                sort=ASCENDING_SEQUENCE,
                limit=_PAGE,
                collation=SIMPLE_COLLATION,
            )
            page = await cursor.to_list(_PAGE)
        documents.extend(page)
        if len(page) < _PAGE:
            return documents
        after = sequence_of(page[-1])


async def _lifetime(
    collection: CheckpointCollection,
    scope: RunScope,
    options: MongoDBCheckpointStorageOptions,
    activity: RunActivity,
    expires_at: datetime | None,
) -> bytes:
    """The run's epoch, creating a counter (one allocation) when the run has none, or drawing an
    epoch on a counter from before epochs."""
    with translated_driver_errors(operation="write", action="give the run a lifetime"):
        count_round_trip()
        counter = await collection.find_one_and_update(
            counter_filter(scope),
            [{"$set": {EPOCH_FIELD: {"$ifNull": [f"${EPOCH_FIELD}", {"$literal": new_epoch()}]}}}],
            {"_id": 0, EPOCH_FIELD: 1},
            upsert=False,
            return_document=True,
            collation=SIMPLE_COLLATION,
        )
    if counter is not None and isinstance(counter.get(EPOCH_FIELD), bytes):
        return bytes(counter[EPOCH_FIELD])
    allocation = await allocate_sequence(
        collection,
        scope,
        activity=activity,
        expires_at=expires_at,
        recheck_grace=options.counter_recheck_grace,
    )
    return allocation.epoch


def _longest_expiry(documents: Sequence[Document]) -> datetime | None:
    """When the last of ``documents`` expires: ``None`` (never) if any is permanent."""
    moments = [_date(document, "expires_at") for document in documents]
    if not moments or None in moments:
        return None
    return max(moment for moment in moments if moment is not None)


async def _sign_in_place(
    collection: CheckpointCollection, scope: RunScope, signer: PayloadSigner, document: Document, epoch: bytes
) -> bool:
    """Sign ``document`` in place; ``False`` when it no longer is as it was read."""
    signature = sign_envelope(signer, scope.discriminator, {**document, EPOCH_FIELD: epoch})
    # Only the document exactly as it was proved: every signed field as read (the payload through
    # its checksum), so a document changed since is not signed.
    query = {
        **run_filter(scope),
        "_id": document["_id"],
        **{name: document.get(name) for name in SIGNED_FIELDS},
    }
    with translated_driver_errors(operation="write", action="sign a checkpoint"):
        count_round_trip()
        before = await collection.find_one_and_update(
            query,
            {"$set": {EPOCH_FIELD: epoch, SIGNATURE_FIELD: signature}},
            {"_id": 1},
            upsert=False,
            return_document=False,
            collation=SIMPLE_COLLATION,
        )
    return before is not None
