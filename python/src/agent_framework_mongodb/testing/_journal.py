"""The file-backed mode: every change to stored state is appended to a journal and synced.

``InMemoryMongoClient(path=...)`` replays the file into a fresh engine, then writes a record for
each change at the few points where stored state changes (a document stored, replaced or removed;
an index added or dropped; a collection created, made to exist or dropped). Records of one
operation are written together and synced before the operation returns. When superseded records
outweigh the live documents, the file is rewritten as the current state, into a temporary file
that replaces it by rename. Why a journal and not a snapshot: docs/adr/0014-file-backed-engine.md;
the format: specs/engine-file-format.md.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Generator, Hashable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from pymongo.errors import OperationFailure

from ._file_errors import EngineFileCorruptedError, EngineFileError
from ._file_lock import FileLock
from ._indexes import ID_INDEX, index_entries
from ._journal_format import MAGIC, Corruption, frame, read_records

if TYPE_CHECKING:
    from ._client import InMemoryMongoClient

__all__ = ["Journal", "NamespaceLog"]

Namespace = tuple[str, str]

# Compaction waits until superseded records outweigh the live documents by this much, so a small
# file is never rewritten and the rewriting costs at most a constant per byte appended.
COMPACTION_SLACK = 1024 * 1024
_NO_BATCH = contextlib.nullcontext()


def _id_key(value: Any) -> Hashable:
    """Equal for two ``_id`` values exactly when the ``_id_`` index treats them as one."""
    return frozenset(index_entries(ID_INDEX, {"_id": value}))


def _sync_directory(directory: Path) -> None:
    """Make a file's creation or renaming durable, not only its contents."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` may write less than it is given (a signal, a nearly full disk); go on until all is out."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class NamespaceLog:
    """The records one collection's changes produce; does nothing when the journal is disabled."""

    __slots__ = ("_journal", "_namespace")

    def __init__(self, journal: Journal, namespace: Namespace) -> None:
        self._journal = journal
        self._namespace = namespace

    def put(self, document: Mapping[str, Any]) -> None:
        """``document`` was stored: inserted (last), or in place of the stored one with its ``_id``.

        One record for a replacement, not a delete and a put, so a torn append cannot lose it.
        """
        if self._journal.enabled:
            self._journal.append(self._namespace, {"op": "put", "doc": document})

    def delete(self, document_id: Any) -> None:
        """The document with ``document_id`` was removed."""
        if self._journal.enabled:
            self._journal.append(self._namespace, {"op": "delete", "id": document_id})

    def drop(self) -> None:
        """The collection was dropped: documents, indexes, default collation and existence."""
        if self._journal.enabled:
            self._journal.append(self._namespace, {"op": "drop"})

    def create(self, default_collation: Mapping[str, Any] | None) -> None:
        """The collection was created (``create_collection``) with this default collation."""
        if self._journal.enabled:
            self._journal.append(self._namespace, {"op": "create", "collation": default_collation})

    def exists(self) -> None:
        """The collection exists now (index creation makes it exist, even when it adds none)."""
        if self._journal.enabled:
            self._journal.append(self._namespace, {"op": "exists"})

    def add_index(self, spec: Mapping[str, Any]) -> None:
        """``spec``, as the catalog keeps it, was added."""
        if self._journal.enabled:
            self._journal.append(self._namespace, {"op": "index", "spec": spec})

    def drop_index(self, name: str) -> None:
        if self._journal.enabled:
            self._journal.append(self._namespace, {"op": "drop_index", "name": name})

    def drop_indexes(self) -> None:
        if self._journal.enabled:
            self._journal.append(self._namespace, {"op": "drop_indexes"})


def _framed(namespace: Namespace, record: Mapping[str, Any]) -> bytes:
    return frame({"op": record["op"], "db": namespace[0], "coll": namespace[1], **record})


class _Replay:
    """Applies records to a fresh client; documents are loaded once, at the end, in stored order."""

    def __init__(self, client: InMemoryMongoClient) -> None:
        self._client = client
        # Assigning to a present key keeps its place, as replacing a stored document does.
        self._documents: dict[Namespace, dict[Hashable, dict[str, Any]]] = {}

    def apply(self, namespace: Namespace, record: Mapping[str, Any]) -> None:
        state = self._client.collection_state(*namespace)
        documents = self._documents.setdefault(namespace, {})
        op = record["op"]
        if op == "put":
            document = dict(record["doc"])
            documents[_id_key(document["_id"])] = document
            state.created = True
        elif op == "delete":
            documents.pop(_id_key(record["id"]), None)
        elif op == "drop":
            documents.clear()
            state.reset()
        elif op == "create":
            state.create(record["collation"])
        elif op == "exists":
            state.created = True
        elif op == "index":
            state.catalog.add(dict(record["spec"]))
        elif op == "drop_index":
            state.catalog.drop(str(record["name"]))
        elif op == "drop_indexes":
            state.catalog.drop_all()
        else:
            raise ValueError(f"unknown record kind {op!r}")

    def finish(self) -> None:
        for (database, name), documents in self._documents.items():
            collection = self._client.get_database(database).get_collection(name)
            collection.restore_documents(list(documents.values()))


def _current_state(client: InMemoryMongoClient, namespace: Namespace) -> Iterator[dict[str, Any]]:
    """Records that rebuild what ``namespace`` holds now (compaction's content)."""
    state = client.collection_state(*namespace)
    if state.created:
        yield {"op": "create", "collation": state.catalog.default_collation}
    for spec in state.catalog.specs():
        if spec["name"] != "_id_":
            yield {"op": "index", "spec": spec}
    collection = client.get_database(namespace[0]).get_collection(namespace[1])
    for document in collection.stored_documents():
        yield {"op": "put", "doc": document}


class Journal:
    """An engine's journal file, or (built without a path) a journal that records nothing."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        """A journal for ``path``; nothing is opened until :meth:`load`."""
        # Resolved, so two spellings of one file (a symlink, a relative path) share one lock.
        self.path = None if path is None else Path(os.fspath(path)).resolve()
        self._client: InMemoryMongoClient | None = None
        self._lock: FileLock | None = None
        self._fd: int | None = None
        self._size = 0
        self._pending: list[bytes] = []
        self._depth = 0
        self._failed = False
        # Per namespace, the framed size of each live document's latest record (compaction's measure).
        self._live: dict[Namespace, dict[Hashable, int]] = {}
        self._live_bytes = 0
        self._retry_compaction_at = 0
        self._logs: dict[Namespace, NamespaceLog] = {}

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def load(self, client: InMemoryMongoClient) -> None:
        """Lock the file, replay it into ``client`` (creating it when missing), keep it for appends.

        ``client`` must already hold this journal: the collections the replay builds log to it.
        """
        if self.path is None:
            raise ValueError("a journal without a path has nothing to load")
        if not self.path.parent.is_dir():
            missing = str(self.path.parent)
            raise FileNotFoundError(errno.ENOENT, "no such directory for the engine file", missing)
        self._client = client
        self._lock = FileLock(self.path)
        try:
            self._open_file()
            self._maybe_compact()
        except BaseException:
            self.close()
            raise

    def namespace(self, database: str, collection: str) -> NamespaceLog:
        key = (database, collection)
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = NamespaceLog(self, key)
        return log

    # -- writing ------------------------------------------------------------------------------------
    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Write the records made inside as one append, synced once, when the outermost batch ends.

        The records are written even when the block raises: they describe changes already made
        to the engine's memory (an ``insert_many`` that stopped half-way stored its first half).
        """
        return self._batch() if self.enabled else _NO_BATCH

    @contextlib.contextmanager
    def _batch(self) -> Generator[None]:
        self._check_usable()
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._flush()

    def append(self, namespace: Namespace, record: Mapping[str, Any]) -> None:
        """Frame ``record`` for ``namespace``; write it now unless a batch is open."""
        self._check_usable()
        data = _framed(namespace, record)
        self._pending.append(data)
        self._account(namespace, record, len(data))
        if self._depth == 0:
            self._flush()

    def _account(self, namespace: Namespace, record: Mapping[str, Any], size: int) -> None:
        live = self._live.setdefault(namespace, {})
        op = record["op"]
        if op == "put":
            key = _id_key(record["doc"]["_id"])
            self._live_bytes += size - live.get(key, 0)
            live[key] = size
        elif op == "delete":
            self._live_bytes -= live.pop(_id_key(record["id"]), 0)
        elif op == "drop":
            self._live_bytes -= sum(live.values())
            live.clear()

    def _check_usable(self) -> None:
        if self._failed:
            raise EngineFileError(
                f"an earlier write to {self.path} failed, so the file no longer matches this client;"
                " close it and open the file again"
            )

    def _flush(self) -> None:
        if not self._pending or self._fd is None:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        try:
            _write_all(self._fd, data)
            os.fsync(self._fd)
        except OSError as error:
            self._failed = True
            raise EngineFileError(f"could not write {self.path}: {error.strerror}") from error
        self._size += len(data)
        self._maybe_compact()

    # -- opening and compaction ---------------------------------------------------------------------
    def _bound(self) -> tuple[Path, InMemoryMongoClient]:
        if self.path is None or self._client is None:
            raise RuntimeError("the journal is not loaded")
        return self.path, self._client

    def _open_file(self) -> None:
        path, _ = self._bound()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._fd = fd
        size = os.fstat(fd).st_size
        with os.fdopen(os.dup(fd), "rb") as stream:
            head = stream.read(len(MAGIC))
            if head != MAGIC:
                if not MAGIC.startswith(head):
                    raise EngineFileCorruptedError(
                        f"{path} is not an InMemoryMongoClient file (it does not start with {MAGIC!r})"
                    )
                # Empty, or the magic line torn while the file was created: start it afresh.
                os.ftruncate(fd, 0)
                os.pwrite(fd, MAGIC, 0)
                os.fsync(fd)
                _sync_directory(path.parent)
                os.lseek(fd, 0, os.SEEK_END)
                self._size = len(MAGIC)
                return
            end = self._replay(stream, size)
        if end < size:
            os.ftruncate(fd, end)  # drop the torn tail so the next record follows a whole one
            os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_END)
        self._size = end

    def _replay(self, stream: BinaryIO, size: int) -> int:
        """Apply every whole record to the client; return the offset where the whole records end."""
        path, client = self._bound()
        replay = _Replay(client)
        end = len(MAGIC)
        try:
            for record, start, end in read_records(stream, size):
                namespace = (str(record["db"]), str(record["coll"]))
                replay.apply(namespace, record)
                self._account(namespace, record, end - start)
            replay.finish()
        except Corruption as error:
            raise EngineFileCorruptedError(f"{path} is damaged: {error}; it was left as it is") from error
        except (KeyError, TypeError, ValueError, OperationFailure) as error:
            raise EngineFileCorruptedError(
                f"{path} holds a record this engine cannot apply ({error}); it was left as it is"
            ) from error
        return end

    def _maybe_compact(self) -> None:
        threshold = 2 * self._live_bytes + len(MAGIC) + COMPACTION_SLACK
        if self._size > max(threshold, self._retry_compaction_at):
            self._compact()

    def _compact(self) -> None:
        """Rewrite the file as the current state: a temporary file, synced, renamed over it.

        A failed compaction leaves the file as it was, holding every write, so it is not an error
        of the operation that triggered it; it is tried again once the file has doubled.
        """
        path, client = self._bound()
        temporary = path.with_name(path.name + ".compacting")
        live: dict[Namespace, dict[Hashable, int]] = {}
        size = len(MAGIC)
        try:
            with temporary.open("wb") as out:
                out.write(MAGIC)
                for namespace in list(self._live):
                    live[namespace] = {}
                    for record in _current_state(client, namespace):
                        data = _framed(namespace, record)
                        out.write(data)
                        size += len(data)
                        if record["op"] == "put":
                            live[namespace][_id_key(record["doc"]["_id"])] = len(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except OSError:
            with contextlib.suppress(OSError):
                temporary.unlink()
            self._retry_compaction_at = 2 * self._size
            return
        old, self._fd = self._fd, os.open(path, os.O_RDWR | os.O_APPEND)
        if old is not None:
            os.close(old)
        self._size = size
        self._live = live
        self._live_bytes = sum(sum(sizes.values()) for sizes in live.values())
        with contextlib.suppress(OSError):  # the rename is already visible to this process
            _sync_directory(path.parent)

    def close(self) -> None:
        """Close the file and release its lock; closing again does nothing."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None
