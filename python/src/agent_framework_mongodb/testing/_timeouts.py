"""The client-side operation timeout (CSOT) pymongo applies, and the errors it raises when it runs out.

``with pymongo.timeout(seconds):`` keeps its deadline in context variables of pymongo's private
``pymongo._csot`` module, and pymongo offers no public way to read them. This module is the only
place the engine touches ``_csot``, through two functions whose names and meaning are the same in
every pymongo this package supports (checked in the 4.13.0 and 4.20.1 sources; the module dates
from 4.2): ``get_timeout()`` is the innermost block's timeout in seconds (None outside any block,
0 for "no limit") and ``remaining()`` the seconds left before its deadline (None when unlimited).

Outside a ``pymongo.timeout`` block pymongo applies the client's ``timeoutMS`` to each operation
(``_csot.apply``); a timeout of 0 means no limit there too.
"""

from __future__ import annotations

from dataclasses import dataclass

from pymongo import _csot  # private, read here only: see the module docstring
from pymongo.errors import ExecutionTimeout, NetworkTimeout

_CONNECT_TIMEOUT_MS = 20000.0
"""pymongo's default ``connectTimeoutMS``, which its timeout messages list."""

ADDRESS = "localhost:27017"
"""The address pymongo names in a network error; the engine has none, so pymongo's default."""

_MAX_WIRE_VERSION = 21
"""The wire version of the MongoDB 7.0 the engine reports."""


@dataclass(frozen=True)
class Deadline:
    """How long the operation being entered may take."""

    timeout: float | None
    """The timeout in force in seconds (the block's or ``timeoutMS``); None when there is none."""
    remaining: float | None
    """Seconds left now; None when unlimited."""

    @property
    def expired(self) -> bool:
        """pymongo refuses to send once nothing is left (``remaining - rtt < 0``, the engine's rtt 0)."""
        return self.remaining is not None and self.remaining < 0

    def expired_error(self) -> ExecutionTimeout:
        """What pymongo raises for an operation entered after its deadline, before sending it.

        ``AsyncConnection.apply_timeout`` (``pool_shared.py`` in 4.20, ``asynchronous/pool.py``
        in 4.13) raises ``ExecutionTimeout`` with code 50, whose ``timeout`` is True.
        """
        remaining = self.remaining if self.remaining is not None else 0.0
        message = (
            f"operation would exceed time limit, remaining timeout:{remaining:.5f} <= "
            f"network round trip time:{0.0:.5f} {self.details()}"
        )
        return ExecutionTimeout(message, 50, {"ok": 0, "errmsg": message, "code": 50}, _MAX_WIRE_VERSION)

    def read_timeout_error(self) -> NetworkTimeout:
        """What pymongo raises when the reply does not arrive before the deadline.

        The socket read times out (``TimeoutError("timed out")`` in ``network_layer.py``) and
        ``_raise_connection_failure`` turns it into ``NetworkTimeout`` ("<host>:<port>: timed out"
        plus the configured timeouts); a retry is not attempted once the deadline has passed.
        """
        return NetworkTimeout(f"{ADDRESS}: timed out{self.details()}")

    def details(self) -> str:
        """pymongo's ``format_timeout_details``: the block's ``timeoutMS`` if any, then
        ``connectTimeoutMS`` (the engine has no ``socketTimeoutMS``)."""
        parts = [f"connectTimeoutMS: {_CONNECT_TIMEOUT_MS}ms"]
        if self.timeout:
            parts.insert(0, f"timeoutMS: {self.timeout * 1000}ms")
        return f" (configured timeouts: {', '.join(parts)})"


def current_deadline(client_timeout: float | None) -> Deadline:
    """The deadline of an operation entered now, from the ``pymongo.timeout`` block or ``timeoutMS``."""
    block = _csot.get_timeout()
    if block is None:
        return Deadline(client_timeout, client_timeout or None)
    return Deadline(block, _csot.remaining())
