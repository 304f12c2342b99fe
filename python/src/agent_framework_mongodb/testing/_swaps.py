"""Process-wide swaps of mongomock_ng internals that requests in flight together share.

The engine evaluates some operators as the server does by swapping mongomock_ng's own handlers
while a request runs server-side (``_dates.py``, ``_extremes.py``). Requests may enter and leave
in any order at their awaits, so a swap is counted: the first to enter installs it and the last
to leave restores the originals.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator

__all__ = ["CountedSwap"]


class CountedSwap:
    """One swap, installed while at least one request holds it."""

    __slots__ = ("_active", "_install", "_restore")

    def __init__(self, install: Callable[[], None], restore: Callable[[], None]) -> None:
        self._install = install
        self._restore = restore
        self._active = 0

    @contextlib.contextmanager
    def held(self) -> Generator[None]:
        """Hold the swap for the block: installed by the first holder, restored by the last."""
        if self._active == 0:
            self._install()
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            if self._active == 0:
                self._restore()
