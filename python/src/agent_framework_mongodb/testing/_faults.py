"""Deterministic fault injection: make the next call of an operation raise a chosen error."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Fault:
    operation: str
    collection: str | None
    error: BaseException
    remaining: int


@dataclass
class FaultPlan:
    """Errors queued for upcoming operations of one :class:`InMemoryMongoClient`.

    An operation is named after the method called (``"insert_one"``, ``"find_one_and_update"``,
    ``"find"`` for the first fetch of a cursor, ``"command"`` ...). A queued error is raised after
    the operation has yielded to the event loop and before it touches any data, so a failed
    operation changes nothing, like a request that never reached the server.
    """

    _faults: list[_Fault] = field(default_factory=list[_Fault])

    def fail_next(
        self,
        operation: str,
        error: BaseException,
        *,
        collection: str | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``operation`` (on ``collection``, a full name such as
        ``"db.coll"``, or on any collection when None) raise ``error``."""
        if times < 1:
            raise ValueError("times must be at least 1")
        self._faults.append(_Fault(operation, collection, error, times))

    def clear(self) -> None:
        """Forget every queued fault."""
        self._faults.clear()

    @property
    def pending(self) -> int:
        """How many injected failures have not fired yet."""
        return sum(fault.remaining for fault in self._faults)

    def check(self, operation: str, collection: str | None) -> None:
        """Raise the first queued error that matches this call, if any."""
        for fault in self._faults:
            if fault.operation != operation:
                continue
            if fault.collection is not None and fault.collection != collection:
                continue
            fault.remaining -= 1
            if fault.remaining == 0:
                self._faults.remove(fault)
            raise fault.error
