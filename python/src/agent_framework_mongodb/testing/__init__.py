"""An in-process MongoDB engine for tests, samples and users' own tests.

``InMemoryMongoClient`` stands in for ``pymongo.AsyncMongoClient`` wherever a checkpoint storage
takes a client: same awaited methods, pymongo's own result and error types, documents round-tripped
through BSON. It is built on mongomock_ng with small shims; every known difference from MongoDB's
documented behaviour is listed, with the test that pins it, in ``DIVERGENCES.md`` beside this file.
``InMemoryMongoClient(path=...)`` keeps the data in a file, so another process can open it later.
"""

from ._client import InMemoryDatabase, InMemoryMongoClient
from ._collection import InMemoryCollection
from ._cursor import InMemoryCommandCursor, InMemoryCursor
from ._faults import FaultPlan, HeldOperation
from ._file_errors import EngineFileCorruptedError, EngineFileError, EngineFileLockedError
from ._scheduling import Scheduling
from ._ttl import expire_documents
from ._wire import CommandRecord, WireProtocolServer

__all__ = [
    "CommandRecord",
    "EngineFileCorruptedError",
    "EngineFileError",
    "EngineFileLockedError",
    "FaultPlan",
    "HeldOperation",
    "InMemoryCollection",
    "InMemoryCommandCursor",
    "InMemoryCursor",
    "InMemoryDatabase",
    "InMemoryMongoClient",
    "Scheduling",
    "WireProtocolServer",
    "expire_documents",
]
