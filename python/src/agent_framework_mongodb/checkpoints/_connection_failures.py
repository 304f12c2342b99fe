"""Why pymongo could not reach the server, as a fixed phrase safe to put in a message.

pymongo's connection errors quote hosts and ports, and their causes can quote TLS or DNS
details: none of that text may reach a message. What is kept is a :class:`FailureReason`,
derived from structure first and from known text only when the structure is gone:

1. a ``ServerSelectionTimeoutError`` carries no cause and no details, only text; the reasons
   live in the client's topology description, one ``error`` per server description;
2. those stored errors are *sanitized* by pymongo's monitor (``__cause__`` and ``__context__``
   cleared), so for them only the class (``NetworkTimeout``) and the text pymongo built in
   ``_raise_connection_failure`` remain: ``"SSL handshake failed: host:port: ..."`` for TLS,
   ``"host:port: [Errno N] ..."`` for a socket error, ``"host:port: timed out"``;
3. errors raised to the caller keep their chain: ``socket.gaierror``, ``ssl.SSLError``,
   ``ConnectionRefusedError``, ``TimeoutError``, dnspython's ``DNSException`` behind an SRV
   ``ConfigurationError``, an ``OperationFailure`` with code 18.

The classification never returns or logs the text it reads.
"""

from __future__ import annotations

import asyncio
import enum
import errno
import re
import socket
import ssl
from collections.abc import Iterator

from dns.exception import DNSException
from pymongo.errors import NetworkTimeout, OperationFailure, ServerSelectionTimeoutError
from pymongo.topology_description import TopologyDescription

__all__ = ["FailureReason", "failure_reason", "topology_failure_reason"]


class FailureReason(enum.Enum):
    """Why the last attempt failed; the value is the phrase a message shows."""

    AUTHENTICATION = "authentication failed"
    TLS = "TLS handshake failed"
    NOT_RESOLVED = "host name not resolved"
    REFUSED = "connection refused"
    TIMED_OUT = "timed out (server did not answer)"
    UNKNOWN = "unknown"


_PRECEDENCE = tuple(FailureReason)
"""When servers fail differently, the most actionable reason wins: the declaration order."""

_AUTHENTICATION_CODES = frozenset({18})
"""AuthenticationFailed. Code 13 (Unauthorized) is a missing privilege, not a failed login."""

_AUTHENTICATION_CODE_NAMES = frozenset({"AuthenticationFailed"})

_RESOLUTION_ERRNOS = frozenset(
    value
    for name in ("EAI_NONAME", "EAI_AGAIN", "EAI_FAIL", "EAI_NODATA", "EAI_ADDRFAMILY")
    if (value := getattr(socket, name, None)) is not None
)
"""getaddrinfo's codes for a name that does not resolve (negative on Linux, 11001... on Windows)."""

_ERRNO_REASONS: dict[int, FailureReason] = {
    **dict.fromkeys(_RESOLUTION_ERRNOS, FailureReason.NOT_RESOLVED),
    # Socket codes last: on macOS the EAI_* values are small positive numbers.
    errno.ECONNREFUSED: FailureReason.REFUSED,
    errno.ETIMEDOUT: FailureReason.TIMED_OUT,
}

_ERRNO_IN_TEXT = re.compile(r"\[errno (-?\d+)\]", re.IGNORECASE)
"""How ``str(OSError)`` shows its code; pymongo embeds that text in its own errors."""

_TEXT_FRAGMENTS: tuple[tuple[str, FailureReason], ...] = (
    # pymongo's msg_prefix for any failure while wrapping the socket, then OpenSSL's forms.
    ("ssl handshake failed", FailureReason.TLS),
    ("[ssl", FailureReason.TLS),
    ("certificate verify failed", FailureReason.TLS),
    ("authentication failed", FailureReason.AUTHENTICATION),
    ("connection refused", FailureReason.REFUSED),
    ("name or service not known", FailureReason.NOT_RESOLVED),
    ("nodename nor servname", FailureReason.NOT_RESOLVED),
    ("getaddrinfo failed", FailureReason.NOT_RESOLVED),
    ("temporary failure in name resolution", FailureReason.NOT_RESOLVED),
    ("no address associated with hostname", FailureReason.NOT_RESOLVED),
    # dnspython's messages, which pymongo 4.13 re-raises as ConfigurationError text only.
    ("dns query name does not exist", FailureReason.NOT_RESOLVED),
    ("all nameservers failed", FailureReason.NOT_RESOLVED),
    ("dns operation timed out", FailureReason.NOT_RESOLVED),
    ("timed out", FailureReason.TIMED_OUT),
    # A selection that ended before any monitor check finished: nothing answered.
    ("no servers found yet", FailureReason.TIMED_OUT),
)
"""Known fragments, the fallback when no class or code decides; matched case-insensitively."""

_MAX_CHAIN = 16


def failure_reason(error: BaseException, topology: TopologyDescription | None = None) -> FailureReason:
    """Classify ``error``; for a server selection timeout, ``topology`` holds the real reasons."""
    if isinstance(error, ServerSelectionTimeoutError) and topology is not None:
        reason = topology_failure_reason(topology)
        if reason is not FailureReason.UNKNOWN:
            return reason
    return _classify(error, hide=())


def topology_failure_reason(topology: TopologyDescription) -> FailureReason:
    """The reason the servers of ``topology`` are unusable, from their last checks' errors."""
    reasons: list[FailureReason] = []
    unanswered = 0
    descriptions = topology.server_descriptions()
    for (host, port), description in descriptions.items():
        stored = description.error
        if stored is not None:
            hide = (f"{host}:{port}", str(host)) if port is not None else (str(host),)
            reasons.append(_classify(stored, hide=hide))
        elif not description.is_server_type_known:
            unanswered += 1
    if reasons:
        return min(reasons, key=_PRECEDENCE.index)
    if descriptions and unanswered == len(descriptions):
        # Every monitor is still waiting for its first reply.
        return FailureReason.TIMED_OUT
    return FailureReason.UNKNOWN


def _classify(error: BaseException, *, hide: tuple[str, ...]) -> FailureReason:
    chain = list(_chain(error))
    for link in chain:
        reason = _by_structure(link)
        if reason is not None:
            return reason
    for link in chain:
        reason = _by_text(link, hide)
        if reason is not None:
            return reason
    return FailureReason.UNKNOWN


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what caused it; ``__context__`` too, which ``raise ... from None`` keeps."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen and len(seen) < _MAX_CHAIN:
        seen.add(id(link))
        yield link
        link = link.__cause__ if link.__cause__ is not None else link.__context__


def _by_structure(error: BaseException) -> FailureReason | None:  # noqa: PLR0911 - one per reason
    if isinstance(error, OperationFailure):
        code_name = (error.details or {}).get("codeName")
        if error.code in _AUTHENTICATION_CODES or code_name in _AUTHENTICATION_CODE_NAMES:
            return FailureReason.AUTHENTICATION
        return None
    if isinstance(error, NetworkTimeout):
        return FailureReason.TIMED_OUT
    if isinstance(error, DNSException):
        return FailureReason.NOT_RESOLVED
    # Before OSError: both are OSError subclasses whose errno means something else.
    if isinstance(error, socket.gaierror):
        return FailureReason.NOT_RESOLVED
    if isinstance(error, ssl.SSLError):
        return FailureReason.TLS
    if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        return FailureReason.TIMED_OUT
    if isinstance(error, OSError) and error.errno in (errno.ECONNREFUSED, errno.ETIMEDOUT):
        return _ERRNO_REASONS[error.errno]
    return None


def _by_text(error: BaseException, hide: tuple[str, ...]) -> FailureReason | None:
    text = str(error)
    for fragment in hide:
        text = text.replace(fragment, "")
    text = text.lower()
    # pymongo puts its TLS prefix before the socket error it wraps: the prefix decides.
    if "ssl handshake failed" in text:
        return FailureReason.TLS
    match = _ERRNO_IN_TEXT.search(text)
    if match is not None:
        reason = _ERRNO_REASONS.get(int(match.group(1)))
        if reason is not None:
            return reason
    for fragment, reason in _TEXT_FRAGMENTS:
        if fragment in text:
            return reason
    return None
