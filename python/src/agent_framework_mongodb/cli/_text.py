"""Lines the commands print from names found in checkpoints: escaped, folded to the terminal."""

from __future__ import annotations

import shutil
import textwrap

from ..checkpoints.history import MongoDBPendingRequestSummary, MongoDBValueSummary

__all__ = ["data_text", "folded", "payload_text", "printable", "request_text", "size_text", "terminal_width"]

FIELDS_SHOWN = 8
"""A request's field names printed on a line before ``+N more`` (``--json`` lists them all)."""


def printable(text: str) -> str:
    """``text`` with each character that is not printable (a newline, a terminal escape) escaped:
    names come from the checkpoints, and must not move the cursor or restyle the terminal."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text
    )


def terminal_width() -> int:
    """The terminal's columns (``COLUMNS``, else 80 when there is no terminal), at least 40."""
    return max(40, shutil.get_terminal_size((80, 24)).columns)


def folded(line: str, width: int) -> list[str]:
    """``line`` folded to ``width``, its continuation indented under its text; never cut short."""
    indent = " " * (len(line) - len(line.lstrip()) + 4)
    return textwrap.wrap(
        line,
        width=width,
        subsequent_indent=indent,
        break_long_words=True,
        break_on_hyphens=False,
        drop_whitespace=True,
    ) or [line]


def size_text(summary: MongoDBValueSummary) -> str:
    return "unpicklable" if summary.size < 0 else f"{summary.size:,} bytes"


def _fields_text(fields: tuple[str, ...]) -> str:
    shown = ", ".join(fields[:FIELDS_SHOWN])
    hidden = len(fields) - FIELDS_SHOWN
    return f"{shown} (+{hidden} more)" if hidden > 0 else shown


def data_text(request: MongoDBPendingRequestSummary) -> str:
    """The request data's class and size (``ApprovalRequest, 213 bytes``); ``-`` without data."""
    return "-" if request.data is None else f"{request.data.type_name}, {size_text(request.data)}"


def payload_text(request: MongoDBPendingRequestSummary) -> str:
    """:func:`data_text` and the data's field names: ``ApprovalRequest, 213 bytes, fields a, b``."""
    text = data_text(request)
    return f"{text}, fields {_fields_text(request.data_fields)}" if request.data_fields else text


def request_text(request: MongoDBPendingRequestSummary) -> str:
    """One line naming a pending request, for ``history`` and ``diff``.

    ``ApprovalRequest from reviewer, expects bool; payload 213 bytes, fields amount, reason``: the
    request's class, the executor that asked, the answer's class, and the payload's size and field
    names (its class too when it is not the request's). An event that is no request (it names no
    request class) is named by its own class.
    """
    kind = request.request_type or request.event_type
    text = kind
    if request.source_executor_id is not None:
        text += f" from {request.source_executor_id}"
    if request.response_type is not None:
        text += f", expects {request.response_type}"
    if request.data is not None:
        payload = payload_text(request)
        if request.data.type_name == kind:  # said once: "dict ...; payload 51 bytes", not "payload dict, ..."
            payload = payload.removeprefix(f"{kind}, ")
        text += f"; payload {payload}"
    return text
