"""``checkpoints RUN``: one run's checkpoints from their envelopes (no payload is fetched)."""

from __future__ import annotations

import json
from datetime import datetime

import click

from ..checkpoints import MongoDBCheckpointSummary
from ._connection import Connection
from ._errors import run
from ._hints import empty_checkpoints
from ._options import allow_type_option, scope_options
from ._tables import print_listing

__all__ = ["checkpoints"]


async def all_checkpoints(
    connection: Connection,
    *,
    tenant: str,
    application: str | None,
    workflow: str,
    session: str,
    allowed_types: tuple[str, ...] = (),
) -> list[MongoDBCheckpointSummary]:
    """Every checkpoint summary of the run, in sequence order, one bounded page at a time."""
    summaries: list[MongoDBCheckpointSummary] = []
    async with connection.storage(
        tenant=tenant,
        application=application,
        workflow=workflow,
        session=session,
        allowed_types=allowed_types,
    ) as storage:
        cursor: str | None = None
        while True:
            page = await storage.list_checkpoint_summaries(
                workflow_name=workflow, cursor=cursor, limit=storage.options.max_page_size
            )
            summaries.extend(page.checkpoints)
            cursor = page.next_cursor
            if cursor is None:
                return summaries


_HEADERS = ("sequence", "checkpoint", "parent", "created", "expires", "payload bytes")


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def summary_json(summary: MongoDBCheckpointSummary) -> dict[str, object]:
    """A checkpoint summary as a JSON object (times in ISO 8601, ``null`` when absent)."""
    return {
        "sequence": summary.sequence,
        "checkpoint_id": summary.checkpoint_id,
        "parent_checkpoint_id": summary.parent_checkpoint_id,
        "created_at": _iso(summary.created_at),
        "expires_at": _iso(summary.expires_at),
        "payload_bytes": summary.payload_bytes,
    }


def checkpoint_rows(summaries: list[MongoDBCheckpointSummary]) -> list[tuple[str, ...]]:
    """The checkpoints' cells under the headers; ``-`` marks what a checkpoint does not have."""
    return [
        (
            str(summary.sequence),
            summary.checkpoint_id,
            summary.parent_checkpoint_id or "-",
            summary.created_at.isoformat(timespec="seconds"),
            "-" if summary.expires_at is None else summary.expires_at.isoformat(timespec="seconds"),
            "-" if summary.payload_bytes is None else f"{summary.payload_bytes:,}",
        )
        for summary in summaries
    ]


@click.command()
@scope_options
@click.option("--workflow", required=True, help="The run's workflow.")
@allow_type_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.argument("session")
@click.pass_obj
def checkpoints(  # noqa: PLR0917 - Click passes every option
    connection: Connection,
    tenant: str,
    application: str | None,
    workflow: str,
    allowed_types: tuple[str, ...],
    as_json: bool,
    session: str,
) -> None:
    """List the checkpoints of the run SESSION, oldest first, without reading their payloads.

    --allow-type configures the storage as the run's workers do (each entry is checked to name a
    class); listing reads envelopes only, so no payload is decoded.
    """
    summaries = run(
        all_checkpoints(
            connection,
            tenant=tenant,
            application=application,
            workflow=workflow,
            session=session,
            allowed_types=allowed_types,
        )
    )
    if as_json:
        click.echo(json.dumps([summary_json(summary) for summary in summaries], indent=2))
    elif summaries:
        print_listing(_HEADERS, checkpoint_rows(summaries))
    if not summaries:  # why, and what to try: in place of the table, or on stderr beside the JSON
        hint = empty_checkpoints(
            connection, tenant=tenant, application=application, workflow=workflow, session=session
        )
        click.echo(hint, err=as_json)
