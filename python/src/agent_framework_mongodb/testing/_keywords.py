"""Keyword arguments: the engine's methods accept exactly those pymongo's methods accept.

The engine's methods take the keywords they act on and collect the rest in ``**extra``; those pass
only when pymongo's own method (or ``AsyncCursor``, which ``find`` hands its arguments to) takes
them, so a storage that misspells an option fails here as it would with pymongo, with Python's
``TypeError``. Where pymongo itself takes ``**kwargs`` and sends them to the server as command
fields (``find_one_and_update``, ``count_documents``, ``create_index`` ...), the server decides;
the engine does not check those (DIVERGENCES.md entry 8).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.cursor import AsyncCursor

# Options pymongo takes that change what an operation returns or does, which the engine does not
# simulate: refused when set rather than silently ignored.
_UNSIMULATED = frozenset({"let", "min", "max", "return_key", "show_record_id", "max_scan", "snapshot"})
_UNSIMULATED_UNLESS_ZERO = frozenset({"cursor_type"})  # 0 is CursorType.NON_TAILABLE


@functools.cache
def _accepted(method: str) -> frozenset[str] | None:
    """The keyword names pymongo's ``method`` takes; None when it takes any."""
    owner: type = AsyncCursor if method in ("find", "find_one") else AsyncCollection
    target: Callable[..., Any] = getattr(owner, "__init__" if owner is AsyncCursor else method)
    parameters = inspect.signature(target).parameters.values()
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return None
    keyword_kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = {parameter.name for parameter in parameters if parameter.kind in keyword_kinds}
    return frozenset(names - {"self", "collection"})


def check_keywords(method: str, extra: Mapping[str, Any]) -> None:
    """Raise the ``TypeError`` pymongo's ``method`` raises for a keyword it does not take, and
    ``NotImplementedError`` for a set option the engine does not simulate; the rest (``comment``,
    ``bypass_document_validation``, ``max_time_ms``, ``allow_disk_use`` ...) change nothing here."""
    accepted = _accepted(method)
    for name, value in extra.items():
        if accepted is not None and name not in accepted:
            raise TypeError(f"{method}() got an unexpected keyword argument '{name}'")
        if (name in _UNSIMULATED and value not in (None, False)) or (
            name in _UNSIMULATED_UNLESS_ZERO and value not in (None, 0)
        ):
            raise NotImplementedError(f"InMemoryCollection does not simulate {name!r} (DIVERGENCES.md)")
