"""Listings whole, wherever they go: a table on a terminal wide enough for it, one block per row on a
narrower terminal, tab-separated lines in a pipe or a file."""

from __future__ import annotations

from collections.abc import Sequence

import click
from rich.console import Console
from rich.table import Column, Table

__all__ = ["print_listing"]

_UNBOUNDED = 1_000_000


def print_listing(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print ``rows`` under ``headers``, never cutting a value short ("…") or folding it.

    - Standard output a terminal at least as wide as the table: a Rich table.
    - A narrower terminal: one block per row, ``header: value`` lines, a blank line between rows.
    - Not a terminal (a pipe, a file): a header line, then one line per row, tab-separated, for
      ``cut -f2`` or ``grep``.

    Ids and dates are copied into further commands, so each arrives whole.
    """
    console = Console(soft_wrap=True)
    if not console.is_terminal:
        for line in (headers, *rows):
            click.echo("\t".join(line))
        return
    table = Table(*(Column(header, no_wrap=True) for header in headers))
    for row in rows:
        table.add_row(*row)
    # Measured without the console's width, which a table's measure is clamped to: its natural width.
    natural = console.measure(table, options=console.options.update_width(_UNBOUNDED)).maximum
    if natural <= console.width:
        console.print(table)
        return
    label = max(len(header) for header in headers)
    for index, row in enumerate(rows):
        if index:
            click.echo()
        for header, value in zip(headers, row, strict=True):
            click.echo(f"{header + ':':<{label + 1}} {value}")
