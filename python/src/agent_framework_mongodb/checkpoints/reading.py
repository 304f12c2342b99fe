"""From stored checkpoint documents of one run to checkpoints: every check a read makes, in order.

For each document: its signature with keys (before anything else is believed), its version gates,
its place (the checkpoint asked for, under that checkpoint's ``_id``), and, against the run's
ledger, its lifetime and liveness; then the payload's checksum and, for a chunked checkpoint, its
leaves, fetched for the whole page in one bounded round trip and parsed only as far as the signed
root reaches; then the codec's validation and rebuild. ``MongoDBCheckpointStorage``'s reads and
``sign-run`` (``transition.py``) decode through this one path.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from agent_framework import WorkflowCheckpoint

from .._telemetry import count_payload_bytes, count_round_trip
from ..errors import (
    MongoDBCheckpointNotFoundError,
    MongoDBIntegrityError,
    MongoDBMappingError,
    translated_driver_errors,
)
from .chunk_store import CLOCK_MARGIN, fetch_chunks
from .codec import CheckpointCodec
from .codec.chunks import ChunkReader, MissingChunkError, references
from .documents import SignaturePolicy, StoredPayload, as_utc, stored_payload, utc_now, verified_epoch
from .driver import CheckpointCollection, Document
from .indexes import SIMPLE_COLLATION
from .ledger import LedgerCheck
from .queries import BY_ID, run_filter, unexpired
from .scope import RunScope

__all__ = ["CheckpointDecoder", "named_chunks"]

_ID_ONLY = {"_id": 1}


class CheckpointDecoder:
    """Decodes one run's stored documents (one per storage; safe to share across tasks).

    Args:
        collection: Where a chunked checkpoint's leaves are fetched from.
        scope: The run; every check uses it, never a document's own scope.
        codec: The run's codec.
        policy: The storage's signing keys and transition, or :data:`~.documents.UNSIGNED`.
        chunk_context: What the run's chunk addresses cover.
        max_checkpoint_bytes: Each checkpoint's budget: what its leaves may fetch and decompress.
    """

    __slots__ = ("_chunk_context", "_codec", "_collection", "_max_bytes", "_policy", "_scope")

    def __init__(
        self,
        collection: CheckpointCollection,
        scope: RunScope,
        codec: CheckpointCodec,
        policy: SignaturePolicy,
        *,
        chunk_context: bytes,
        max_checkpoint_bytes: int,
    ) -> None:
        self._collection = collection
        self._scope = scope
        self._codec = codec
        self._policy = policy
        self._chunk_context = chunk_context
        self._max_bytes = max_checkpoint_bytes

    @property
    def signed(self) -> bool:
        """Whether documents are checked against signing keys."""
        return self._policy.signer is not None

    def verified(self, documents: list[Document], check: LedgerCheck | None) -> list[Document]:
        """Envelopes whose place, signature, lifetime and liveness hold (listings without payloads).

        Raises:
            MongoDBIntegrityError: With keys, as :meth:`decode`.
            MongoDBMappingError: A document holds another checkpoint than its ``_id`` names.
        """
        for document in documents:
            epoch = verified_epoch(document, self._scope, self._policy)
            if check is not None:
                check.require_current(epoch)
                self._require_live(check, document.get("sequence"))
        return [document for document in documents if not self._expired(document)]

    def _expired(self, document: Document) -> bool:
        """With keys, a verified document whose signed ``expires_at`` passed more than
        ``CLOCK_MARGIN`` ago by this machine's clock: expired, whatever the server returned (a
        server or copy that ignores ``UNEXPIRED``, a checkpoint put back). Within the margin the
        server's clock decides, as its filter did. Without keys ``expires_at`` is a writer's word,
        and the server's filter is all there is."""
        moment = document.get("expires_at")
        if not self.signed or not isinstance(moment, datetime):
            return False
        return as_utc(moment) + CLOCK_MARGIN <= utc_now()

    async def decode(
        self,
        documents: list[Document],
        check: LedgerCheck | None,
        *,
        checkpoint_id: str | None = None,
    ) -> list[WorkflowCheckpoint]:
        """Decode stored documents, fetching the leaves of the chunked ones in one round trip.

        With ``checkpoint_id`` (a ``load``), the one document must hold that checkpoint, and one
        the ledger no longer holds is not found. A chunked checkpoint whose chunks are missing
        because it was removed while it was read (pruned, deleted, expired: its document is gone
        too) is left out of the result; one whose chunk is missing while it stays is corrupt.

        Raises:
            MongoDBCheckpointNotFoundError: ``load`` of a checkpoint the ledger no longer holds.
            MongoDBIntegrityError: With keys: unsigned, forged, of another lifetime, or a checkpoint
                the query returned although the ledger no longer holds it.
            MongoDBMappingError: A version, the place, the checksum or the payload is wrong.
        """
        return await self.decode_stored(self.stored(documents, check, checkpoint_id=checkpoint_id))

    def stored(
        self, documents: list[Document], check: LedgerCheck | None, *, checkpoint_id: str | None = None
    ) -> list[StoredPayload]:
        """The payloads of stored documents whose gates, place, signature, lifetime and liveness
        hold, the expired ones left out: :meth:`decode`'s checks before any payload byte is read.

        Raises:
            As :meth:`decode`, but for what only the payload shows.
        """
        stored: list[StoredPayload] = []
        for document in documents:
            item = stored_payload(document, self._scope, self._policy, checkpoint_id=checkpoint_id)
            if check is not None:
                check.require_current(item.epoch)
                if checkpoint_id is not None and not check.is_live(item.sequence):
                    raise MongoDBCheckpointNotFoundError("This run has no checkpoint with that id.")
                self._require_live(check, item.sequence)
            if self._expired(document):
                if checkpoint_id is not None:
                    raise MongoDBCheckpointNotFoundError("This run has no checkpoint with that id.")
                continue
            stored.append(item)
        return stored

    async def decode_stored(self, stored: list[StoredPayload]) -> list[WorkflowCheckpoint]:
        """Decode payloads :meth:`stored` passed, as :meth:`decode` does."""
        roots = {
            index: self._codec.open_chunked(item.payload, checksum=item.checksum)
            for index, item in enumerate(stored)
            if item.chunked
        }
        leaves = await self._fetch_leaves(stored, roots)
        checkpoints: list[WorkflowCheckpoint] = []
        incomplete: dict[str, MissingChunkError] = {}
        for index, item in enumerate(stored):
            count_payload_bytes(len(item.payload))
            if index in roots:
                reader = self._reader(roots[index], leaves)
                try:
                    checkpoint = self._codec.decode_chunked(reader, root_bytes=len(item.payload))
                except MissingChunkError as error:
                    incomplete[self._scope.checkpoint_document_id(item.checkpoint_id)] = error
                    continue
            else:
                checkpoint = self._codec.decode(item.payload, checksum=item.checksum)
            if (
                checkpoint.checkpoint_id != item.checkpoint_id
                or checkpoint.workflow_name != self._scope.workflow_name
            ):
                raise self._misplaced("A stored checkpoint's payload does not belong to its document.")
            checkpoints.append(checkpoint)
        if incomplete:
            await self._require_removed(incomplete)
        return checkpoints

    def chunk_addresses(self, stored: StoredPayload) -> set[bytes]:
        """Every chunk a chunked checkpoint names (its root's references and its hint)."""
        return named_chunks(stored, self._codec.open_chunked(stored.payload, checksum=stored.checksum))

    def _require_live(self, check: LedgerCheck, sequence: object) -> None:
        # The query asked the server for live checkpoints only; a document that comes back anyway
        # means the server and this client read the document differently: someone's doing.
        if isinstance(sequence, int) and not check.is_live(sequence):
            raise MongoDBIntegrityError(
                "A read returned a checkpoint the run's ledger no longer holds (deleted or pruned); the "
                "collection was modified outside this storage."
            )

    def _misplaced(self, message: str) -> MongoDBMappingError:
        # A signed envelope binds the checksum, so with keys a payload of another checkpoint under
        # a valid signature cannot arise from corruption: it is someone's doing.
        return MongoDBIntegrityError(message) if self.signed else MongoDBMappingError(message)

    async def _fetch_leaves(
        self, stored: list[StoredPayload], roots: Mapping[int, object]
    ) -> dict[bytes, object]:
        """Every leaf the chunked ``roots`` name, directly or through the hints, within what their
        loads may fetch: each checkpoint's budget (compressed leaves are at most about the size of
        what they decompress to, which the budget bounds)."""
        wanted: set[bytes] = set()
        for index, root in roots.items():
            wanted.update(named_chunks(stored[index], root))
        return await self.fetch_leaves(wanted, checkpoints=len(roots))

    async def fetch_leaves(self, addresses: set[bytes], *, checkpoints: int) -> dict[bytes, object]:
        """The stored leaves among ``addresses`` (unverified), in one bounded round trip: at most
        what ``checkpoints`` loads may fetch.

        Raises:
            MongoDBMappingError: The leaves are larger than that.
        """
        return await fetch_chunks(
            self._collection, self._scope, addresses, max_bytes=checkpoints * self._fetch_allowance()
        )

    def _fetch_allowance(self) -> int:
        # zlib grows incompressible data by at most 5 bytes per 16 KiB block and a few more per
        # stream; 1 % and a little per chunk cover any leaf a save writes.
        return self._max_bytes + self._max_bytes // 100 + (1 << 20)

    def _reader(self, root: object, leaves: Mapping[bytes, object]) -> ChunkReader:
        """A reader holding the fetched leaves ``root`` reaches; an absent one stays absent, so the
        join reports it missing, and a fetched one the root does not reach is never parsed."""
        reader = ChunkReader(self._chunk_context, root, budget=self._max_bytes)
        while present := sorted(address for address in reader.wanted() if address in leaves):
            for address in present:
                reader.add(address, leaves[address])
        return reader

    async def _require_removed(self, incomplete: Mapping[str, MissingChunkError]) -> None:
        """Raise the missing-chunk error of a checkpoint that is still stored and unexpired
        (corrupt); those that are gone, or expired (the TTL monitor may remove a root's chunks
        before the root), were removed while they were read, and are simply not in the result."""
        query = unexpired({**run_filter(self._scope), "_id": {"$in": sorted(incomplete)}})
        with translated_driver_errors(operation="read", action="check for removed checkpoints"):
            count_round_trip()  # find() sends nothing; to_list() sends the query
            cursor = self._collection.find(
                query, _ID_ONLY, sort=BY_ID, limit=len(incomplete), collation=SIMPLE_COLLATION
            )
            remaining = await cursor.to_list(len(incomplete))
        for document in remaining:
            # The package's mapping error, not the codec's internal subclass.
            error = incomplete[document["_id"]]
            raise MongoDBMappingError(str(error)) from error


def named_chunks(stored: StoredPayload, root: object) -> set[bytes]:
    """The chunks a chunked checkpoint names: its root's references and its nested hint."""
    return set(references(root)) | set(stored.nested)
