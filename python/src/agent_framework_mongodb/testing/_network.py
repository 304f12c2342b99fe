"""A write's connection lost around it, and what pymongo and the server then do.

pymongo retries a retryable write after a network error (pymongo 4.20,
``_ClientConnectionRetryable.run`` and ``_write`` in pymongo/asynchronous/mongo_client.py): the
failed attempt's error gets the ``RetryableWriteError`` label (``_add_retryable_write_error`` in
pymongo/mongo_client_shared.py: every ``ConnectionFailure`` does), and the write is sent again on a
new connection, once (``_max_retries`` 1), or under a client-side operation timeout as often as
the deadline allows (``_max_retries`` infinite, ``_check_last_error(check_csot=True)`` giving up
once nothing remains). The retry carries the same ``lsid`` and ``txnNumber``, so a server that
already applied the write answers from its record without applying it again
(https://www.mongodb.com/docs/manual/core/retryable-writes/). A write that is not retryable
(``update_many``, ``delete_many``, a bulk with an ``UpdateMany`` or ``DeleteMany``, any
unacknowledged write: see ``_retries.py``) is not retried and its error carries no label, whether
or not the server applied it. Unacknowledged, pymongo reads no reply, so a connection lost after
the write was sent goes unnoticed and the call returns.

The engine runs the write's server-side work (the body of ``InMemoryMongoClient.round_trip``) at
most once, where the server would: at the first attempt that reaches it, whichever that is.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, Awaitable, Callable

from pymongo.errors import AutoReconnect, PyMongoError

from ._faults import FaultPlan, NetworkFault
from ._retries import WriteAttempts
from ._timeouts import ADDRESS, Deadline


@contextlib.asynccontextmanager
async def attempts(
    plan: FaultPlan,
    operation: str,
    collection: str | None,
    write: WriteAttempts | None,
    *,
    deadline: Callable[[], Deadline],
    retry_wait: Callable[[], Awaitable[None]],
) -> AsyncGenerator[None]:
    """The attempts of one write; the body is the server applying it, run at most once.

    ``deadline`` reads the operation's deadline now; ``retry_wait`` is a retry's own request
    latency (a new connection, a new request).
    """
    fault = plan.take_network_fault(operation, collection) if write is not None else None
    if fault is None or write is None:
        yield
        return
    retries = math.inf if deadline().timeout is not None else 1
    applied = False
    server_error: Exception | None = None
    while fault is not None:
        if fault.applied and not applied:
            applied = True
            try:
                yield  # the server applies the write; its reply is then lost
            except Exception as failure:  # the server's own error, lost with the reply
                server_error = failure
            if not write.acknowledged:
                return  # pymongo read no reply, so it never saw the connection go
        error = await _network_error(fault, deadline())
        if not write.retryable:
            raise error
        error._add_error_label("RetryableWriteError")  # pyright: ignore[reportPrivateUsage] - as pymongo adds it
        remaining = deadline().remaining
        if retries < 1 or (remaining is not None and remaining <= 0):
            raise error
        retries -= 1
        await retry_wait()
        fault = plan.take_network_fault(operation, collection)
    if not applied:
        yield  # the attempt that got through applies it
    elif server_error is not None:
        raise server_error  # the retry re-runs a statement that failed, and fails again


async def _network_error(fault: NetworkFault, deadline: Deadline) -> PyMongoError:
    """The error pymongo raises for this lost connection (``_raise_connection_failure`` in
    pymongo/pool_shared.py: "<host>:<port>: <socket error>" plus the configured timeouts)."""
    if not fault.timeout:
        return AutoReconnect(f"{ADDRESS}: connection closed{deadline.details()}")
    if deadline.remaining is not None:
        # Under an operation timeout the socket waits out the deadline before it times out.
        await asyncio.sleep(max(deadline.remaining, 0.0))
    return deadline.read_timeout_error()
