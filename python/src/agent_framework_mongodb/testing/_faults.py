"""Deterministic fault injection: make the next call of an operation raise a chosen error, wait, or
lose its connection around the write (``network_error_next``, carried out by ``_network.py``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class _Fault:
    operation: str
    collection: str | None
    error: BaseException
    remaining: int


NETWORK_FAULT_OPERATIONS = frozenset(
    {"insert_one", "insert_many", "update_one", "update_many", "find_one_and_update"}
    | {"delete_one", "delete_many", "bulk_write"}
)
"""The writes ``network_error_next`` applies to: every write a storage sends."""


@dataclass(frozen=True)
class NetworkFault:
    """How one attempt of a write loses its connection."""

    applied: bool
    """Whether the server applied the write before the connection broke (the reply is lost)."""
    timeout: bool
    """A socket timeout (``NetworkTimeout``) rather than a closed connection (``AutoReconnect``)."""


@dataclass
class _NetworkFaults:
    operation: str
    collection: str | None
    fault: NetworkFault
    remaining: int


class HeldOperation:
    """One upcoming call of an operation, paused until :meth:`release` (from ``FaultPlan.hold``).

    The first call matching the hold pauses after it has yielded to the event loop (and, with
    ``scheduling``, after its request's latency) and before it touches any data, like a request the
    server has not yet run; tests use it to interleave
    operations deterministically ("writer A is slow while others run"). Each hold catches one
    call. Released before any call reaches it, the hold still catches the next matching call,
    which then goes straight on. Under a client-side operation timeout the paused call waits at
    most until its deadline and then fails with ``NetworkTimeout``, having changed nothing.
    """

    def __init__(self, operation: str, collection: str | None) -> None:
        self.operation = operation
        self.collection = collection
        self._reached = asyncio.Event()
        self._released = asyncio.Event()
        self._held = False

    def __repr__(self) -> str:
        state = "held" if self._held else "released" if self.is_released else "armed"
        return f"HeldOperation({self.operation!r}, collection={self.collection!r}, {state})"

    async def reached(self) -> None:
        """Wait until a matching call has reached the hold (it may still be paused there)."""
        await self._reached.wait()

    def release(self) -> None:
        """Let the paused call go on (or the next matching one pass straight through)."""
        self._released.set()

    @property
    def is_reached(self) -> bool:
        """Whether a matching call has reached the hold."""
        return self._reached.is_set()

    @property
    def is_held(self) -> bool:
        """Whether a call is paused at the hold right now."""
        return self._held

    @property
    def is_released(self) -> bool:
        return self._released.is_set()

    def matches(self, operation: str, collection: str | None) -> bool:
        return self.operation == operation and self.collection in (None, collection)

    async def pause(self, timeout: float | None) -> bool:
        """Pause the calling operation until released; False when ``timeout`` seconds pass first."""
        self._reached.set()
        if self._released.is_set():
            return True
        self._held = True
        try:
            await asyncio.wait_for(self._released.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        finally:
            self._held = False
        return True


@dataclass
class FaultPlan:
    """Errors queued for upcoming operations of one :class:`InMemoryMongoClient`.

    An operation is named after the method called (``"insert_one"``, ``"find_one_and_update"``,
    ``"find"`` for the first fetch of a cursor, ``"command"`` ...). A queued error is raised after
    the operation has yielded to the event loop (with ``scheduling``, after its request's latency;
    the error then reaches the caller after the reply's) and before it touches any data, so a
    failed operation changes nothing, like a request the server refused before running it. A hold
    (:meth:`hold`) pauses a call at the same point; a call both held and failed fails when released.
    A queued error reaches the caller as it is, like the error pymongo raises once its own retries
    are spent; :meth:`network_error_next` instead models the lost connection itself, and pymongo's
    and the server's answer to it.
    """

    _faults: list[_Fault] = field(default_factory=list[_Fault])
    _holds: list[HeldOperation] = field(default_factory=list[HeldOperation])
    _network: list[_NetworkFaults] = field(default_factory=list[_NetworkFaults])

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

    def network_error_next(
        self,
        operation: str,
        *,
        applied: bool = False,
        timeout: bool = False,
        collection: str | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` attempts of the write ``operation`` lose their connection.

        ``applied``: the server applied the write before the connection broke, so only its reply
        is lost; otherwise the request never ran. ``timeout``: the socket read timed out
        (``NetworkTimeout``; under a client-side operation timeout, at the deadline) rather than
        the connection closing (``AutoReconnect``). The engine then does what pymongo and the
        server do (``_network.py``): pymongo retries a retryable write once, or under a
        client-side operation timeout until its deadline, and the server applies it once (its
        ``txnNumber``); a write that is not retryable raises the error, applied or not as set.
        Each attempt, the retries included, takes one of ``times``. ``operation`` is a write:
        ``fail_next`` models a read's error, which reaches the caller after pymongo's retry.
        """
        if operation not in NETWORK_FAULT_OPERATIONS:
            raise ValueError(
                f"network_error_next models writes ({', '.join(sorted(NETWORK_FAULT_OPERATIONS))}),"
                f" not {operation!r}; use fail_next for other operations"
            )
        if times < 1:
            raise ValueError("times must be at least 1")
        self._network.append(_NetworkFaults(operation, collection, NetworkFault(applied, timeout), times))

    def take_network_fault(self, operation: str, collection: str | None) -> NetworkFault | None:
        """The network fault of this attempt, which it consumes; None when the attempt gets through."""
        for queued in self._network:
            if queued.operation == operation and queued.collection in (None, collection):
                queued.remaining -= 1
                if queued.remaining == 0:
                    self._network.remove(queued)
                return queued.fault
        return None

    def hold(self, operation: str, *, collection: str | None = None) -> HeldOperation:
        """Pause the next call of ``operation`` (on ``collection``, a full name such as
        ``"db.coll"``, or on any collection when None) until the returned hold is released."""
        held = HeldOperation(operation, collection)
        self._holds.append(held)
        return held

    def clear(self) -> None:
        """Forget every queued fault and every hold no call has reached yet."""
        self._faults.clear()
        self._holds.clear()
        self._network.clear()

    def take_hold(self, operation: str, collection: str | None) -> HeldOperation | None:
        """The first hold waiting for this call, which it now owns; None when there is none."""
        for held in self._holds:
            if held.matches(operation, collection):
                self._holds.remove(held)
                return held
        return None

    @property
    def pending(self) -> int:
        """How many injected failures (network faults' attempts included) have not fired yet."""
        return sum(fault.remaining for fault in self._faults) + sum(q.remaining for q in self._network)

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
