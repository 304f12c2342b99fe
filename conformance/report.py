"""Run the conformance suite against four storages and write conformance/REPORT.md.

The four: this repository's ``MongoDBCheckpointStorage`` on the in-process engine
(``InMemoryMongoClient``) and through pymongo's ``AsyncMongoClient`` against the engine's
wire-protocol front (``WireProtocolServer``), and Agent Framework's ``InMemoryCheckpointStorage``
and ``FileCheckpointStorage``. Not part of the installed suite: it needs agent_framework_mongodb,
so it runs from the project's environment::

    python3 -m uv run --directory python python ../conformance/report.py          # rewrite REPORT.md
    python3 -m uv run --directory python python ../conformance/report.py --check  # CI

``--check`` writes nothing: it fails when the MongoDB storage fails a check, or when the status
table differs from the committed REPORT.md's (the details below the table name random run ids and
directory orders, so only the table is compared). ``--ours-only`` runs the two MongoDB storages
alone and only fails on their failures (for the oldest supported dependencies, whose framework
storages differ from the newest's).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from agent_framework import CheckpointStorage, FileCheckpointStorage, InMemoryCheckpointStorage
from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.driver import CheckpointClient
from agent_framework_mongodb.testing import InMemoryMongoClient, WireProtocolServer
from pymongo import AsyncMongoClient

from agent_framework_checkpoint_conformance import (
    Capabilities,
    ConformanceReport,
    StorageScope,
    check_names,
    validate,
)

REPORT = Path(__file__).with_name("REPORT.md")
TABLE_START = "<!-- status table: compared by report.py --check -->"
TABLE_END = "<!-- end of status table -->"

# What the factory configures, so that optional.ttl and optional.signing find the settings; the
# key is a test key for this report only.
TTL = timedelta(days=30)
SIGNING_KEY = b"conformance-report-test-key-0123456789"

MONGODB_CAPABILITIES = Capabilities(shared_between_instances=True, concurrent_writers=True)
FILE_CAPABILITIES = Capabilities(shared_between_instances=True, concurrent_writers=True)

# Why Agent Framework's own storages fail what they fail, as observed; stated, not judged. Keyed
# by (storage, check); shown only for a check the storage failed in this run.
FRAMEWORK_NOTES: dict[tuple[str, str], str] = {
    ("FileCheckpointStorage", "list.save_order"): (
        "`FileCheckpointStorage` lists `Path.glob('*.json')` in the order the filesystem returns the "
        "directory's entries (on ext4, an order of name hashes), not the order saved. The protocol does "
        "not state an order, and the framework's `get_latest` chooses by timestamp and lineage, not by "
        "position in the listing."
    ),
    ("FileCheckpointStorage", "save.idempotent"): (
        "A second save of one checkpoint replaces its file (`os.replace`), which can move the entry in "
        "the directory's order on filesystems that list by creation (tmpfs), and so in the listing."
    ),
    ("InMemoryCheckpointStorage", "load.copies"): (
        "In agent-framework-core 1.13 `load` (and the listings, and `get_latest`) return the stored "
        "object itself, so a caller's change to a loaded checkpoint changes the stored one; 1.26 returns "
        "copies."
    ),
    ("InMemoryCheckpointStorage", "get_latest.shared_timestamp"): (
        "In agent-framework-core 1.13 `get_latest` takes the greatest timestamp and, among equal ones, "
        "the first saved; later versions prefer the checkpoint that names the other as its previous."
    ),
    ("FileCheckpointStorage", "get_latest.shared_timestamp"): (
        "As `InMemoryCheckpointStorage` in agent-framework-core 1.13: the greatest timestamp, the first "
        "listed among equal ones."
    ),
}

OLDEST_FAILURES = (
    ("InMemoryCheckpointStorage", "load.copies"),
    ("InMemoryCheckpointStorage", "get_latest.shared_timestamp"),
    ("FileCheckpointStorage", "get_latest.shared_timestamp"),
)
"""What the framework's storages fail with agent-framework-core 1.13.0 beyond the newest's failures."""

Factory = Callable[[StorageScope], Awaitable[CheckpointStorage]]


@dataclass(frozen=True)
class Subject:
    """One storage the report runs: its column name, factory and claims."""

    name: str
    factory: Factory
    capabilities: Capabilities
    ours: bool


def mongodb_factory(client: CheckpointClient, database_name: str) -> Factory:
    """Storages for one database of ``client``: one run per scope, indexes made on first use."""
    ensured: list[bool] = []

    async def factory(scope: StorageScope) -> CheckpointStorage:
        options = MongoDBCheckpointStorageOptions(
            tenant_id="conformance",
            workflow_name=scope.workflow_name,
            session_id=scope.run_id,
            allowed_checkpoint_types=scope.allowed_checkpoint_types,
            ttl=TTL,
            signing_keys=(SIGNING_KEY,),
        )
        storage = MongoDBCheckpointStorage(mongo_client=client, options=options, database_name=database_name)
        if not ensured:
            await storage.ensure_indexes()
            ensured.append(True)
        return storage

    return factory


def file_factory(root: Path) -> Factory:
    """A ``FileCheckpointStorage`` per scope, in a directory of its own run (shared by its storages)."""

    async def factory(scope: StorageScope) -> CheckpointStorage:
        return FileCheckpointStorage(
            root / scope.run_id, allowed_checkpoint_types=list(scope.allowed_checkpoint_types)
        )

    return factory


async def in_memory(scope: StorageScope) -> CheckpointStorage:
    return InMemoryCheckpointStorage()


@asynccontextmanager
async def subjects(*, ours_only: bool) -> AsyncGenerator[list[Subject], None]:
    """The storages to run, with the engine, the wire front and the directory they need."""
    engine = InMemoryMongoClient()
    wire_engine = InMemoryMongoClient()
    with tempfile.TemporaryDirectory(prefix="conformance-") as directory:
        async with WireProtocolServer(wire_engine) as server:
            client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(server.uri)
            try:
                found = [
                    Subject(
                        "MongoDBCheckpointStorage (engine)",
                        mongodb_factory(engine, "conformance"),
                        MONGODB_CAPABILITIES,
                        ours=True,
                    ),
                    Subject(
                        "MongoDBCheckpointStorage (wire front, pymongo)",
                        mongodb_factory(client, "conformance"),
                        MONGODB_CAPABILITIES,
                        ours=True,
                    ),
                ]
                if not ours_only:
                    found.append(Subject("InMemoryCheckpointStorage", in_memory, Capabilities(), ours=False))
                    found.append(
                        Subject(
                            "FileCheckpointStorage",
                            file_factory(Path(directory)),
                            FILE_CAPABILITIES,
                            ours=False,
                        )
                    )
                yield found
            finally:
                await client.close()
        await engine.close()
        await wire_engine.close()


def status_table(subjects_run: list[Subject], reports: list[ConformanceReport]) -> str:
    header = "| Check | " + " | ".join(s.name for s in subjects_run) + " |"
    rule = "| --- |" + " --- |" * len(subjects_run)
    rows = [
        f"| `{name}` | " + " | ".join(r.result(name).status.value for r in reports) + " |"
        for name in check_names()
    ]
    return "\n".join([TABLE_START, "", header, rule, *rows, "", TABLE_END])


def framework_notes(subjects_run: list[Subject], reports: list[ConformanceReport]) -> list[str]:
    lines: list[str] = []
    for subject, report in zip(subjects_run, reports, strict=True):
        if subject.ours:
            continue
        for failure in report.failures:
            note = FRAMEWORK_NOTES.get(
                (subject.name, failure.name), "(not yet explained: see the check's message below)"
            )
            lines.append(f"- **{subject.name}**, `{failure.name}`: {note}")
    return lines


def render(subjects_run: list[Subject], reports: list[ConformanceReport]) -> str:
    framework = reports[0].framework_version
    notes = framework_notes(subjects_run, reports)
    parts = [
        "# Conformance report",
        "",
        "Written by `conformance/report.py` (`python3 -m uv run --directory python python "
        "../conformance/report.py`) with agent-framework-core "
        f"{framework} and agent-framework-checkpoint-conformance {reports[0].suite_version}. "
        "`passed`: the storage did what the check asks; `failed`: it did not (the message says what "
        "happened); `skipped`: a claimed-only check the factory did not claim, or a package not "
        "installed; `not offered`: an optional capability the storage does not have.",
        "",
        "Claims: both MongoDB runs claim `shared_between_instances` and `concurrent_writers` and "
        f"configure a TTL ({TTL.days} days) and a signing key; `FileCheckpointStorage` (one directory "
        "per run) claims both too; `InMemoryCheckpointStorage` (a new instance per request) claims "
        "neither.",
        "",
        status_table(subjects_run, reports),
        "",
        "## Where Agent Framework's storages differ",
        "",
        "What each failure of the framework's own storages comes from, as observed. These are "
        "statements of behaviour, not defects of this project's storage: the protocol leaves some of "
        "these points open.",
        "",
        *(notes or ["None with this agent-framework-core."]),
        "",
        "With agent-framework-core 1.13.0 (the oldest this project supports; observed when the suite was "
        "written, and allowed by `conformance/tests/test_framework_storages.py`), the framework's storages "
        "also fail:",
        "",
        *(
            f"- **{storage}**, `{check}`: {FRAMEWORK_NOTES[storage, check]}"
            for storage, check in OLDEST_FAILURES
        ),
        "",
        "## Every result",
        "",
    ]
    for subject, report in zip(subjects_run, reports, strict=True):
        named = ConformanceReport(
            subject.name, report.framework_version, report.suite_version, report.results
        )
        parts.append(named.to_markdown(heading_level=3))
    return "\n".join(parts).rstrip() + "\n"


def committed_table() -> str | None:
    text = REPORT.read_text(encoding="utf-8") if REPORT.exists() else ""
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    return None if start < 0 or end < 0 else text[start : end + len(TABLE_END)]


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="compare with REPORT.md; write nothing")
    parser.add_argument("--ours-only", action="store_true", help="run only the two MongoDB storages")
    arguments = parser.parse_args(argv)
    async with subjects(ours_only=arguments.ours_only) as subjects_run:
        reports = [await validate(s.factory, capabilities=s.capabilities, name=s.name) for s in subjects_run]
    for report in reports:
        print(report.summary())
    failed = [str(f) for s, r in zip(subjects_run, reports, strict=True) if s.ours for f in r.failures]
    if failed:
        print("MongoDBCheckpointStorage fails the suite:\n" + "\n".join(failed), file=sys.stderr)
        return 1
    if arguments.ours_only:
        return 0
    if arguments.check:
        if committed_table() != status_table(subjects_run, reports):
            print(
                "conformance/REPORT.md's status table is not this run's: rerun conformance/report.py "
                "and commit REPORT.md",
                file=sys.stderr,
            )
            return 1
        return 0
    REPORT.write_text(render(subjects_run, reports), encoding="utf-8")
    print(f"wrote {REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
