"""The run a storage is bound to: its discriminator, its deterministic ids and its filters.

A checkpoint id alone never selects a document. Every filter the storage sends carries the
scope discriminator *and* the raw scope fields, so a query can only ever match the bound run,
and the raw fields keep the documents readable and the indexes selective.

The discriminator and ids are SHA-256 digests over length-prefixed UTF-8 fields with a domain
tag, so no two distinct scopes (or scope/id pairs) can produce the same input bytes, and
``application_id=None`` can never collide with any string.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from .options import MongoDBCheckpointStorageOptions

__all__ = ["CHECKPOINT_KIND", "CHUNK_KIND", "COUNTER_KIND", "RunListing", "RunScope"]

CHECKPOINT_KIND = "workflow_checkpoint"
COUNTER_KIND = "workflow_checkpoint_counter"
CHUNK_KIND = "workflow_checkpoint_chunk"

_SCOPE_TAG = b"agent-framework-mongodb/scope/v1"
_CHECKPOINT_ID_TAG = b"agent-framework-mongodb/checkpoint-id/v1"
_COUNTER_ID_TAG = b"agent-framework-mongodb/counter-id/v1"
_LISTING_TAG = b"agent-framework-mongodb/run-listing/v1"
_CHUNK_CONTEXT_TAG = b"agent-framework-mongodb/chunk-context/v1"


@dataclasses.dataclass(frozen=True, slots=True)
class RunScope:
    """The complete scope of one run, with its derived discriminator."""

    tenant_id: str
    application_id: str | None
    workflow_name: str
    session_id: str
    discriminator: str

    @classmethod
    def from_options(cls, options: MongoDBCheckpointStorageOptions) -> RunScope:
        """Derive the scope from validated options."""
        fields = (options.tenant_id, options.application_id, options.workflow_name, options.session_id)
        return cls(*fields, discriminator=_digest(_SCOPE_TAG, *fields))

    def checkpoint_document_id(self, checkpoint_id: str) -> str:
        """The ``_id`` of a checkpoint document: unique to this scope and checkpoint id."""
        return _digest(_CHECKPOINT_ID_TAG, self.discriminator, checkpoint_id)

    @property
    def counter_document_id(self) -> str:
        """The ``_id`` of this run's sequence counter document."""
        return _digest(_COUNTER_ID_TAG, self.discriminator)

    def chunk_context(self, payload_format: str) -> bytes:
        """What every chunk address of this run covers: a chunk of another run, tenant or
        format never has the same address, so it can neither be found nor verified here."""
        return _digest(_CHUNK_CONTEXT_TAG, self.discriminator, payload_format).encode("ascii")

    def fields(self) -> dict[str, Any]:
        """The scope fields as stored on every document, and as every filter states them."""
        return {
            "scope_discriminator": self.discriminator,
            "tenant_id": self.tenant_id,
            "application_id": self.application_id,
            "workflow_name": self.workflow_name,
            "session_id": self.session_id,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class RunListing:
    """What ``list_runs`` may see: the storage's tenant and application (``None`` is its own
    application: runs stored without one), optionally one workflow, with a discriminator that
    binds its cursors."""

    tenant_id: str
    application_id: str | None
    workflow_name: str | None
    discriminator: str

    @classmethod
    def of(cls, scope: RunScope, workflow_name: str | None) -> RunListing:
        """The listing of ``scope``'s tenant and application, filtered to ``workflow_name``."""
        return cls.of_tenant(scope.tenant_id, scope.application_id, workflow_name)

    @classmethod
    def of_tenant(cls, tenant_id: str, application_id: str | None, workflow_name: str | None) -> RunListing:
        """The listing of a tenant and application (validated identifiers), filtered to ``workflow_name``:
        the same listing, and cursors, whichever run's storage or catalog asks."""
        fields = (tenant_id, application_id, workflow_name)
        return cls(*fields, discriminator=_digest(_LISTING_TAG, *fields))


def _digest(tag: bytes, *fields: str | None) -> str:
    hasher = hashlib.sha256(tag)
    for field in fields:
        if field is None:
            hasher.update(b"\x00")
            continue
        encoded = field.encode("utf-8")
        hasher.update(b"\x01" + len(encoded).to_bytes(8, "big") + encoded)
    return hasher.hexdigest()
