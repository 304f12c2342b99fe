"""``engine:PATH`` connection strings: the package's in-process engine, kept in a file.

A storage built from ``connection_string="engine:checkpoints.engine"`` keeps its run in the
file-backed engine of :mod:`agent_framework_mongodb.testing` instead of on a MongoDB server, so the
same code runs on a laptop without MongoDB and, with a ``mongodb://`` URI in place of this one,
against a server (docs/adr/0037-engine-connection-strings.md). The engine is for trials, samples
and tests: one process at a time holds its file, and it is not a database server.

The engine lives in the ``testing`` extra; without it such a connection string is refused with the
command that installs it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

from ..errors import MongoDBConfigurationError
from .driver import CheckpointClient

__all__ = ["ENGINE_SCHEME", "engine_uri_path", "is_engine_uri", "open_engine"]

ENGINE_SCHEME: Final = "engine:"
"""What starts a connection string that names an engine file rather than a MongoDB server."""

_INSTALL_HINT: Final = 'pip install "agent-framework-mongodb-checkpoints[testing]"'
_LOGGER = logging.getLogger("agent_framework_mongodb")


def is_engine_uri(connection_string: str) -> bool:
    """Whether ``connection_string`` names an engine file (``engine:PATH``)."""
    return connection_string.startswith(ENGINE_SCHEME)


def engine_uri_path(connection_string: str) -> str:
    """The file an ``engine:PATH`` connection string names; refuses an empty one.

    Raises:
        MongoDBConfigurationError: The path is empty.
    """
    path = connection_string.removeprefix(ENGINE_SCHEME)
    if not path.strip():
        raise MongoDBConfigurationError(
            "An engine connection string names a file: engine:PATH, as in engine:checkpoints.engine."
        )
    return path


def open_engine(connection_string: str) -> CheckpointClient:
    """The file-backed engine an ``engine:PATH`` connection string names, opened (its file read).

    ``PATH`` is a file system path, relative to the working directory unless absolute; the file
    is created by the engine's first write. The caller owns the engine and closes it, which
    writes what is pending and lets another process open the file.

    Raises:
        MongoDBConfigurationError: The path is empty, the ``testing`` extra is not installed, or
            the file cannot be opened (another process holds it, it is not an engine file, or
            the file system refuses it).
    """
    path = engine_uri_path(connection_string)
    try:
        from ..testing import EngineFileError, InMemoryMongoClient  # noqa: PLC0415 - the testing extra
    except ImportError as error:
        if not (error.name or "").startswith("mongomock_ng"):
            raise
        raise MongoDBConfigurationError(
            f"An engine: connection string needs the in-process engine, in the testing extra: {_INSTALL_HINT}"
        ) from None
    try:
        engine = InMemoryMongoClient(path=Path(path))
    except EngineFileError as error:
        raise MongoDBConfigurationError(f"The engine file cannot be used: {error}") from error
    except OSError as error:
        raise MongoDBConfigurationError(
            f"The engine file {path!r} cannot be opened ({error.strerror or error})."
        ) from error
    _LOGGER.info("Checkpoints are kept in the in-process engine (an engine: connection string), not MongoDB.")
    return engine
