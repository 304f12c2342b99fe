"""Errors of the engine's file-backed mode (``InMemoryMongoClient(path=...)``); each names the file."""

from __future__ import annotations

__all__ = ["EngineFileCorruptedError", "EngineFileError", "EngineFileLockedError"]


class EngineFileError(Exception):
    """The engine's file cannot be opened or written; the message names the file."""


class EngineFileLockedError(EngineFileError):
    """Another live ``InMemoryMongoClient`` (in this process or another) has the file open."""


class EngineFileCorruptedError(EngineFileError):
    """The file is not an engine file, or a record before its last one fails its checksum."""
