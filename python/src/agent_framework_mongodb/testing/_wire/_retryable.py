"""Retryable writes: each (lsid, txnNumber) runs once, and a retry gets the recorded reply.

mongodb/specifications source/retryable-writes/retryable-writes.md: a driver sends a retryable
write with the session's ``lsid`` and a ``txnNumber`` and, after a retryable error, sends the same
command again with the same pair; the server applies the write at most once and answers the
retry with the first attempt's outcome. A ``txnNumber`` below the session's highest is refused
with TransactionTooOld (225). The records live with the replica set, as ``config.transactions``
is replicated, so a retry on a new primary is recognised too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .._codec import as_mapping
from ._replies import CommandError

RETRYABLE_WRITES: Final = frozenset({"insert", "update", "delete", "findAndModify"})
_TRANSACTION_TOO_OLD: Final = 225


@dataclass(frozen=True)
class TxnKey:
    session: bytes
    txn_number: int


def txn_key(command: Mapping[str, Any]) -> TxnKey | None:
    """The retryable-write key of ``command``, when it is a retryable write."""
    lsid = as_mapping(command.get("lsid"))
    txn_number = command.get("txnNumber")
    if next(iter(command), "") not in RETRYABLE_WRITES or txn_number is None or lsid is None:
        return None
    session = lsid.get("id")
    return TxnKey(bytes(session) if isinstance(session, bytes) else repr(session).encode(), int(txn_number))


@dataclass
class TransactionTable:
    """The highest txnNumber seen per session and the reply its write produced."""

    _highest: dict[bytes, int] = field(default_factory=dict[bytes, int])
    _replies: dict[TxnKey, dict[str, Any]] = field(default_factory=dict[TxnKey, dict[str, Any]])

    def recorded(self, key: TxnKey) -> dict[str, Any] | None:
        """The reply recorded for ``key``; raises TransactionTooOld for an older txnNumber."""
        highest = self._highest.get(key.session)
        if highest is not None and key.txn_number < highest:
            raise CommandError(
                _TRANSACTION_TOO_OLD,
                f"Retryable write with txnNumber {key.txn_number} is prohibited on session because a"
                f" newer retryable write with txnNumber {highest} has already started on this session.",
            )
        reply = self._replies.get(key)
        return None if reply is None else copy.deepcopy(reply)

    def record(self, key: TxnKey, reply: Mapping[str, Any]) -> None:
        self._highest[key.session] = max(self._highest.get(key.session, key.txn_number), key.txn_number)
        self._replies = {k: v for k, v in self._replies.items() if k.session != key.session}
        self._replies[key] = copy.deepcopy(dict(reply))

    def begin(self, key: TxnKey) -> None:
        self._highest[key.session] = max(self._highest.get(key.session, key.txn_number), key.txn_number)
