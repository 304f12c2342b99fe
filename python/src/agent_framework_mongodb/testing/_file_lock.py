"""One writer per engine file: an exclusive ``flock`` on a lock file beside it.

The lock lives on a separate file because compaction replaces the engine file by rename, and a
lock on the replaced inode would no longer exclude anybody. ``flock`` belongs to the open file
description, so a second client in the same process is refused like one in another process, and
the operating system releases the lock when the holder's process ends, however it ends. The lock
file is never deleted: unlinking it while another process waits on it would let two holders in.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ._file_errors import EngineFileLockedError

if sys.platform != "win32":
    import fcntl

__all__ = ["FileLock"]


class FileLock:
    """An exclusive lock held on ``<file>.lock`` until :meth:`release`."""

    def __init__(self, target: Path) -> None:
        """Take the lock for ``target`` or raise :class:`EngineFileLockedError` naming it."""
        if sys.platform == "win32":
            raise NotImplementedError("InMemoryMongoClient(path=...) needs POSIX file locks (fcntl.flock)")
        self.path = target.with_name(target.name + ".lock")
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(self._fd, 64).decode("ascii", "replace").strip() or "unknown"
            os.close(self._fd)
            self._fd = None
            raise EngineFileLockedError(
                f"{target} is open in another InMemoryMongoClient (process {holder}); close that client"
                " or let its process end before opening the file again"
            ) from None
        # The holder's pid, only for the message above; the lock itself is the flock.
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode("ascii"), 0)

    def release(self) -> None:
        """Release the lock; releasing again does nothing."""
        if self._fd is not None and sys.platform != "win32":
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
        self._fd = None
