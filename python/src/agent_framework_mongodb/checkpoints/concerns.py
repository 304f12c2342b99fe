"""What the storage requires of its collection's read preference and write concern.

- **Reads go to the primary.** The idempotency read after a duplicate key, the retained-maximum
  read of sequence recovery and ``get_latest`` decide correctness: a stale secondary turns a
  legitimate retry into a conflict, lets a recovered counter restart below retained sequences and
  hides the latest checkpoint. The storage derives its collection with a primary read
  preference, whatever the client's, so every read sees every acknowledged write (read your
  writes; https://www.mongodb.com/docs/manual/core/read-preference/).
- **Writes are acknowledged.** With ``w: 0`` a save could not learn of a duplicate key, so it
  could neither keep its idempotency nor recover a collision, and pymongo refuses the collation
  every storage query passes on an unacknowledged write ("Collation is unsupported for
  unacknowledged writes", ``pymongo/asynchronous/collection.py``). Such a write concern is refused
  at construction. Any acknowledged write concern is accepted; MongoDB's implicit default since
  5.0 is ``w: "majority"`` (https://www.mongodb.com/docs/manual/reference/write-concern/).
- **Only a stated majority vouches for a chunk across a failover.** A save leaves out the touches of
  chunks it wrote in the same window only when the collection says ``w: "majority"``
  (:func:`majority_acknowledged`, ADR 0031); the server's implicit default is not asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from pymongo import ReadPreference

from ..errors import MongoDBConfigurationError
from .bounded import BoundedCollection
from .driver import CheckpointCollection

__all__ = ["bind_collection", "majority_acknowledged"]


def bind_collection(collection: CheckpointCollection) -> CheckpointCollection:
    """The collection the storage uses: ``collection`` read from the primary, each request ending by
    its operation's deadline (``bounded.py``).

    Raises:
        MongoDBConfigurationError: The collection's write concern is unacknowledged.
    """
    if not collection.write_concern.acknowledged:
        raise MongoDBConfigurationError(
            "The collection's write concern is unacknowledged (w=0); checkpoint storage needs "
            'acknowledged writes. Use the default or w="majority".'
        )
    return BoundedCollection(collection.with_options(read_preference=ReadPreference.PRIMARY))


def majority_acknowledged(collection: CheckpointCollection) -> bool:
    """Whether the collection's own write concern says ``w: "majority"``: an acknowledged write
    then survives a failover (https://www.mongodb.com/docs/manual/core/replica-set-rollbacks/).
    A write concern that states no ``w`` takes the server's default, which may be ``w: 1``."""
    document: object = getattr(collection.write_concern, "document", None)
    if not isinstance(document, Mapping):
        return False
    w: object = cast("Mapping[str, object]", document).get("w")
    return w == "majority"
