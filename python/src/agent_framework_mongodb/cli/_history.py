"""``history SESSION`` and ``diff SESSION A B``: what checkpoints changed, never what they hold.

Both decode checkpoints through the storage's restricted loader, as ``show`` does, and print
what ``show`` may print of them (names, type names, pickled sizes, counts), never a value.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator

import click
from agent_framework import WorkflowCheckpoint
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from ..checkpoints import (
    MongoDBCheckpointDiff,
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorage,
    MongoDBHistoryEntry,
    MongoDBValueChange,
    MongoDBValueSummary,
    checkpoint_history,
    diff_checkpoints,
)
from ._connection import Connection
from ._errors import CommandFailure, allow_type_hint, run
from ._options import allow_type_option, json_option, scope_options
from ._text import folded, printable, request_text, size_text, terminal_width

__all__ = ["diff", "history"]

_SIGNS = {"added": "+", "removed": "-", "changed": "~", "resolved": "-", "unchanged": "="}
_INDENT = "  "


def _value(summary: MongoDBValueSummary | None) -> str:
    """A value as it may be shown: its type and size, ``-`` when absent."""
    return "-" if summary is None else f"{summary.type_name}, {size_text(summary)}"


def _value_line(kind: str, change: MongoDBValueChange) -> str:
    before, after = change.before, change.after
    if before is not None and after is not None:
        types = (
            before.type_name
            if before.type_name == after.type_name
            else f"{before.type_name} -> {after.type_name}"
        )
        described = f"{types}, {size_text(before)} -> {size_text(after)}"
    else:
        described = _value(after if after is not None else before)
    return f"{_SIGNS[change.change]} {kind} {change.name}: {described}"


def change_lines(diff: MongoDBCheckpointDiff) -> Iterator[str]:
    """One line per change of ``diff`` (its ``unchanged`` entries are skipped)."""
    for change in diff.state:
        if change.change != "unchanged":
            yield _value_line("state", change)
    for change in diff.executors:
        if change.change != "unchanged":
            yield _value_line("executor", change)
    for count in diff.messages:
        if count.delta:
            sign = "+" if count.delta > 0 else "-"
            yield f"{sign} messages {count.source}: {count.before} -> {count.after}"
    for request in diff.pending_requests:
        if request.change == "added":
            yield f"+ request {request.request_id}: {request_text(request.request)}"
        elif request.change == "resolved":
            yield f"- request {request.request_id} resolved: {request_text(request.request)}"


def _iteration(diff: MongoDBCheckpointDiff) -> str:
    if diff.iteration_before is None or diff.iteration_before == diff.iteration_after:
        return f"iteration {diff.iteration_after}"
    return f"iteration {diff.iteration_before} -> {diff.iteration_after}"


def entry_lines(entry: MongoDBHistoryEntry) -> Iterator[str]:
    """The history's lines for one checkpoint, before wrapping."""
    yield entry.checkpoint_id
    sequence = "-" if entry.sequence is None else str(entry.sequence)
    created = "-" if entry.created_at is None else entry.created_at.isoformat(timespec="seconds")
    yield f"{_INDENT}sequence {sequence}, created {created}, {_iteration(entry.diff)}"
    compared = entry.diff.before_checkpoint_id
    if entry.previous_checkpoint_id != compared:
        yield (
            f"{_INDENT}parent {entry.previous_checkpoint_id or '-'}; compared with the checkpoint "
            f"before it, {compared or '-'}"
        )
    changes = list(change_lines(entry.diff))
    for line in changes or ["no changes"]:
        yield f"{_INDENT}{line}"


@click.command()
@scope_options
@click.option("--workflow", required=True, help="The run's workflow.")
@allow_type_option
@json_option("Print a JSON array of the checkpoints with their changes.")
@click.argument("session")
@click.pass_obj
def history(  # noqa: PLR0917 - Click passes every option
    connection: Connection,
    tenant: str,
    application: str | None,
    workflow: str,
    allowed_types: tuple[str, ...],
    as_json: bool,
    session: str,
) -> None:
    """List the checkpoints of the run SESSION, oldest first, with what each one changed.

    Each checkpoint is compared with the one before it: state keys, executor states, in-flight
    messages (counted per source) and pending requests added, removed or changed, by name, type
    and size; no value is printed. Payloads are decoded one page at a time, as a worker would load
    them, so the application classes they hold must be named with --allow-type.
    """

    width = terminal_width()

    async def walk() -> int:
        """Print each entry as it is read (one page of payloads in memory); the count printed."""
        printed = 0
        async with connection.storage(
            tenant=tenant,
            application=application,
            workflow=workflow,
            session=session,
            allowed_types=allowed_types,
        ) as storage:
            async for entry in checkpoint_history(storage):
                if as_json:
                    click.echo("[" if printed == 0 else ",")
                    click.echo(textwrap.indent(json.dumps(entry.to_dict(), indent=2), "  "), nl=False)
                else:
                    for line in entry_lines(entry):
                        for part in folded(printable(line), width):
                            click.echo(part)
                printed += 1
        return printed

    with allow_type_hint():
        printed = run(walk())
    if as_json:
        click.echo("[]" if printed == 0 else "\n]")
    elif printed == 0:
        click.echo(f"No checkpoints are stored for {workflow}/{session}.")


def _side_by_side(title: str, name: str, rows: list[tuple[str, str, str, str]]) -> Table:
    """A titled table of ``name``, A, B and the change; one row of ``-`` when there is none."""
    table = Table(
        Column(name, overflow="fold"),
        Column("A", overflow="fold"),
        Column("B", overflow="fold"),
        Column("change", overflow="fold"),
        title=title,
    )
    for row in rows:
        table.add_row(*(Text(printable(cell)) for cell in row))
    if not rows:
        table.add_row("-", "-", "-", "-")
    return table


def _value_rows(changes: tuple[MongoDBValueChange, ...]) -> list[tuple[str, str, str, str]]:
    return [(change.name, _value(change.before), _value(change.after), change.change) for change in changes]


def print_diff(diff: MongoDBCheckpointDiff, first: WorkflowCheckpoint, second: WorkflowCheckpoint) -> None:
    """``diff`` as tables, A beside B; names, types, sizes and counts only."""
    console = Console(soft_wrap=False, highlight=False)
    for label, checkpoint in (("A", first), ("B", second)):
        console.print(printable(f"{label}: {checkpoint.checkpoint_id}"), markup=False, overflow="fold")
        console.print(
            printable(f"{_INDENT}iteration {checkpoint.iteration_count}, timestamp {checkpoint.timestamp}"),
            markup=False,
            overflow="fold",
        )
    console.print(_side_by_side("State", "key", _value_rows(diff.state)))
    console.print(_side_by_side("Executors", "executor", _value_rows(diff.executors)))
    console.print(
        _side_by_side(
            "Messages",
            "source",
            [
                (
                    count.source,
                    str(count.before),
                    str(count.after),
                    "unchanged" if not count.delta else f"{count.delta:+d}",
                )
                for count in diff.messages
            ],
        )
    )
    console.print(
        _side_by_side(
            "Pending requests",
            "request",
            [
                (
                    request.request_id,
                    "-" if request.change == "added" else request_text(request.request),
                    "-" if request.change == "resolved" else request_text(request.request),
                    request.change,
                )
                for request in diff.pending_requests
            ],
        )
    )


async def _load(storage: MongoDBCheckpointStorage, label: str, checkpoint_id: str) -> WorkflowCheckpoint:
    """The checkpoint, or a ``[not_found]`` failure saying which argument named no checkpoint."""
    try:
        return await storage.load(checkpoint_id)
    except MongoDBCheckpointNotFoundError as error:
        raise CommandFailure(error.category, f"{label} {checkpoint_id!r}: {error}") from error


@click.command()
@scope_options
@click.option("--workflow", required=True, help="The run's workflow.")
@allow_type_option
@json_option("Print the comparison as JSON.")
@click.argument("session")
@click.argument("checkpoint_a")
@click.argument("checkpoint_b")
@click.pass_obj
def diff(  # noqa: PLR0917 - Click passes every option
    connection: Connection,
    tenant: str,
    application: str | None,
    workflow: str,
    allowed_types: tuple[str, ...],
    as_json: bool,
    session: str,
    checkpoint_a: str,
    checkpoint_b: str,
) -> None:
    """Compare checkpoints CHECKPOINT_A and CHECKPOINT_B of the run SESSION, side by side.

    Every state key, executor state, message source and pending request of either checkpoint is
    listed with its type and size (or count) in each, and whether it was added, removed or changed
    from A to B; no value is printed. Both are loaded as a worker would load them: name the
    application classes they hold with --allow-type.
    """

    async def load_both() -> tuple[WorkflowCheckpoint, WorkflowCheckpoint]:
        async with connection.storage(
            tenant=tenant,
            application=application,
            workflow=workflow,
            session=session,
            allowed_types=allowed_types,
        ) as storage:
            return (
                await _load(storage, "CHECKPOINT_A", checkpoint_a),
                await _load(storage, "CHECKPOINT_B", checkpoint_b),
            )

    with allow_type_hint():
        first, second = run(load_both())
    compared = diff_checkpoints(first, second)
    if as_json:
        click.echo(json.dumps(compared.to_dict(), indent=2))
    else:
        print_diff(compared, first, second)
