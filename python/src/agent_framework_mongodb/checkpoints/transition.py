"""Moving a run onto signing: sign the checkpoints it holds, after proving each one loads.

Turning ``signing_keys`` on makes every checkpoint stored without them unloadable, by design: a
signed storage accepts nothing it cannot verify. Two ways across (``docs/adr/0020``):

* ``accept_unsigned_before`` (an option) loads unsigned checkpoints created before signing started,
  with the unsigned threat model, while every new save is signed;
* :func:`sign_run` (the CLI's ``sign-run``) signs a run's live checkpoints in place, so the option
  can be dropped. Signing is the operator's statement that the run's current contents are trusted:
  each checkpoint is first loaded through the restricted loader of a storage without keys (so only
  a checkpoint a save could have written is signed), then its envelope is signed in the run's
  current lifetime. A checkpoint that already verifies is left as it is.

It is also how a run whose counter was deleted by hand is taken back: a new counter is created
(spending one sequence number, as any allocation does) and the checkpoints are signed in its epoch.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Final

from .._telemetry import count_round_trip
from ..errors import MongoDBConfigurationError, MongoDBIntegrityError, translated_driver_errors
from .codec.signing import PayloadSigner
from .documents import ENVELOPE_PROJECTION, SignaturePolicy, verified_epoch
from .driver import CheckpointCollection, Document
from .indexes import SIMPLE_COLLATION
from .ledger import LedgerCheck, new_epoch, read_ledger
from .options import MongoDBCheckpointStorageOptions
from .queries import ASCENDING_SEQUENCE, counter_filter, page_filter
from .scope import RunScope
from .sequences import RunActivity, allocate_sequence, sequence_of
from .signatures import EPOCH_FIELD, SIGNATURE_FIELD, sign_envelope
from .storage import MongoDBCheckpointStorage

__all__ = ["SignRunResult", "sign_run"]

_PAGE: Final = 100


@dataclasses.dataclass(frozen=True, slots=True)
class SignRunResult:
    """What :func:`sign_run` did (or, without ``write``, would do).

    Attributes:
        signed: Ids of the checkpoints signed now, oldest first.
        already_signed: Ids of the checkpoints that already verified in the run's lifetime.
        written: Whether anything was written (``False`` for a dry run).
    """

    signed: tuple[str, ...]
    already_signed: tuple[str, ...]
    written: bool


async def sign_run(
    collection: CheckpointCollection, options: MongoDBCheckpointStorageOptions, *, write: bool
) -> SignRunResult:
    """Sign every live checkpoint of the run ``options`` names with its first signing key.

    Args:
        collection: The checkpoint collection.
        options: The run, with ``signing_keys`` (and the ``allowed_checkpoint_types`` its
            checkpoints need to load).
        write: Sign; without it, only report what would be signed.

    Raises:
        MongoDBConfigurationError: ``options`` has no signing keys.
        MongoDBMappingError: A checkpoint does not load through the restricted loader; nothing
            after it is signed (those before it are).
    """
    if not options.signing_keys:
        raise MongoDBConfigurationError("sign-run needs signing keys: the first one signs.")
    scope = RunScope.from_options(options)
    signer = PayloadSigner(tuple(options.signing_keys))
    reader = MongoDBCheckpointStorage(
        collection, options=dataclasses.replace(options, signing_keys=(), accept_unsigned_before=None)
    )
    check = LedgerCheck(await read_ledger(collection, scope))
    documents = await _live_documents(collection, scope, check)
    epoch = check.ledger.epoch if check.ledger is not None else None
    signed: list[str] = []
    already: list[str] = []
    for document in documents:
        checkpoint_id = str(document.get("checkpoint_id"))
        if epoch is not None and _verifies(document, scope, signer, epoch):
            already.append(checkpoint_id)
            continue
        checkpoint = await reader.load(checkpoint_id)  # proves it loads, before anything is signed
        signed.append(checkpoint_id)
        if write:
            if epoch is None:
                waits = bool(checkpoint.pending_request_info_events)
                activity = RunActivity(checkpoint_id, waits)
                epoch = await _lifetime(collection, scope, options, activity, _latest_expiry(documents))
            await _sign_in_place(collection, scope, signer, document, epoch)
    return SignRunResult(tuple(signed), tuple(already), write and bool(signed))


async def _live_documents(
    collection: CheckpointCollection, scope: RunScope, check: LedgerCheck
) -> list[Document]:
    documents: list[Document] = []
    after: int | None = None
    while True:
        with translated_driver_errors(operation="read", action="read the run's checkpoints"):
            count_round_trip()
            cursor = collection.find(
                page_filter(scope, after, check.sequence_condition()),
                ENVELOPE_PROJECTION,
                sort=ASCENDING_SEQUENCE,
                limit=_PAGE,
                collation=SIMPLE_COLLATION,
            )
            page = await cursor.to_list(_PAGE)
        documents.extend(page)
        if len(page) < _PAGE:
            return documents
        after = sequence_of(page[-1])


def _verifies(document: Document, scope: RunScope, signer: PayloadSigner, epoch: bytes) -> bool:
    try:
        return verified_epoch(document, scope, SignaturePolicy(signer)) == epoch
    except MongoDBIntegrityError:
        return False


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


def _latest_expiry(documents: list[Document]) -> datetime | None:
    """What a new counter's retention must cover: ``None`` (permanent) if any checkpoint is."""
    expiries = [document.get("expires_at") for document in documents]
    dates = [moment for moment in expiries if isinstance(moment, datetime)]
    return max(dates) if dates and len(dates) == len(expiries) else None


async def _sign_in_place(
    collection: CheckpointCollection, scope: RunScope, signer: PayloadSigner, document: Document, epoch: bytes
) -> None:
    envelope = {**document, EPOCH_FIELD: epoch}
    signature = sign_envelope(signer, scope.discriminator, envelope)
    # Only the document as it was verified and loaded: a change meanwhile is not signed blindly.
    query = {
        **page_filter(scope, None),
        "_id": document["_id"],
        "payload_checksum": document["payload_checksum"],
    }
    with translated_driver_errors(operation="write", action="sign a checkpoint"):
        count_round_trip()
        await collection.find_one_and_update(
            query,
            {"$set": {EPOCH_FIELD: epoch, SIGNATURE_FIELD: signature}},
            {"_id": 1},
            upsert=False,
            return_document=False,
            collation=SIMPLE_COLLATION,
        )
