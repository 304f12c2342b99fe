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
  checkpoint deleted, pruned or put back before the counter was lost cannot be told apart).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from datetime import datetime
from typing import Final

from .._telemetry import count_round_trip
from ..errors import MongoDBConfigurationError, MongoDBIntegrityError, translated_driver_errors
from .codec import CheckpointCodec
from .codec.chunks import CHUNK_FORMAT
from .codec.signing import PayloadSigner
from .documents import PAYLOAD_PROJECTION, UNSIGNED, SignaturePolicy, verified_epoch
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

__all__ = ["SignRunResult", "sign_run"]

_PAGE: Final = 100


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
    """

    signed: tuple[str, ...]
    already_signed: tuple[str, ...]
    refused: tuple[str, ...]
    other_lifetime: tuple[str, ...]
    written: bool


async def sign_run(
    collection: CheckpointCollection,
    options: MongoDBCheckpointStorageOptions,
    *,
    write: bool,
    adopt: bool = False,
    exclude: Collection[str] = (),
) -> SignRunResult:
    """Sign the live checkpoints of the run ``options`` names with its first signing key.

    Args:
        collection: The checkpoint collection.
        options: The run, with ``signing_keys`` (and the ``allowed_checkpoint_types`` its
            checkpoints need to load).
        write: Sign; without it, only report what would be signed.
        adopt: Also sign checkpoints validly signed in another lifetime of the run (its counter
            was deleted by hand). Never for a run that was cleared.
        exclude: Ids to leave as they are (neither signed nor reported).

    Raises:
        MongoDBConfigurationError: ``options`` has no signing keys.
        MongoDBMappingError: A checkpoint to be signed does not load through the restricted
            loader; nothing after it is signed (those before it are).
    """
    if not options.signing_keys:
        raise MongoDBConfigurationError("sign-run needs signing keys: the first one signs.")
    scope = RunScope.from_options(options)
    signer = PayloadSigner(tuple(options.signing_keys))
    codec = CheckpointCodec(options.allowed_checkpoint_types)
    codec.check_allowed_types()
    decoder = CheckpointDecoder(
        collection,
        scope,
        codec,
        UNSIGNED,
        chunk_context=scope.chunk_context(CHUNK_FORMAT),
        max_checkpoint_bytes=options.max_checkpoint_bytes,
    )
    check = LedgerCheck(await read_ledger(collection, scope))
    epoch = check.ledger.epoch if check.ledger is not None else None
    outcome: dict[str, list[str]] = {"signed": [], "already": [], "refused": [], "other": []}
    for document in await _live_documents(collection, scope, check):
        checkpoint_id = str(document.get("checkpoint_id"))
        if checkpoint_id in exclude:
            continue
        verdict = _verdict(document, scope, signer, epoch)
        if verdict == "other" and adopt:
            verdict = "sign"
        if verdict != "sign":
            outcome[verdict].append(checkpoint_id)
            continue
        # Prove exactly the bytes read, so the checksum signed is that of a payload that loaded.
        proved = await decoder.decode([document], None)
        if not proved:  # removed while it was read
            continue
        if (
            signed_message(scope.discriminator, {**document, EPOCH_FIELD: epoch or bytes(EPOCH_BYTES)})
            is None
        ):
            outcome["refused"].append(checkpoint_id)  # an envelope field of a type no save writes
            continue
        outcome["signed"].append(checkpoint_id)
        if write:
            if epoch is None:
                waits = bool(proved[0].pending_request_info_events)
                epoch = await _lifetime(
                    collection, scope, options, RunActivity(checkpoint_id, waits), _latest_expiry(document)
                )
            if not await _sign_in_place(collection, scope, signer, document, epoch):
                outcome["signed"].pop()  # the document changed since it was read and proved
                outcome["refused"].append(checkpoint_id)
    return SignRunResult(
        signed=tuple(outcome["signed"]),
        already_signed=tuple(outcome["already"]),
        refused=tuple(outcome["refused"]),
        other_lifetime=tuple(outcome["other"]),
        written=write and bool(outcome["signed"]),
    )


def _verdict(document: Document, scope: RunScope, signer: PayloadSigner, epoch: bytes | None) -> str:
    """``already`` (verifies in the run's lifetime), ``other`` (verifies, another lifetime),
    ``refused`` (a current-format signature that does not verify) or ``sign`` (none current)."""
    try:
        signed_epoch = verified_epoch(document, scope, SignaturePolicy(signer))
    except MongoDBIntegrityError:
        current_format = document.get(SIGNATURE_FIELD) is not None and document.get(EPOCH_FIELD) is not None
        return "refused" if current_format else "sign"
    return "already" if epoch is not None and signed_epoch == epoch else "other"


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


def _latest_expiry(document: Document) -> datetime | None:
    moment = document.get("expires_at")
    return moment if isinstance(moment, datetime) else None


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
