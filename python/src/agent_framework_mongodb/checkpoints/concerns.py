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
"""

from __future__ import annotations

from pymongo import ReadPreference

from ..errors import MongoDBConfigurationError
from .bounded import BoundedCollection
from .driver import CheckpointCollection

__all__ = ["bind_collection"]


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
