"""Rendering for the storage benchmark: machine facts, markdown tables, and writing the report."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

__all__ = ["machine_facts", "markdown_table", "write_report"]


def machine_facts() -> list[tuple[str, str]]:
    """What a reader needs to compare this run with another."""
    return [
        ("date (UTC)", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")),
        ("CPUs", str(os.cpu_count())),
        ("machine", f"{platform.machine()} {platform.processor() or ''}".strip()),
        ("OS", platform.platform()),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("agent-framework-core", version("agent-framework-core")),
        ("pymongo", version("pymongo")),
    ]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: int | None = None) -> str:
    """A markdown table; columns from index ``right`` on (none by default) are right-aligned."""
    first = len(header) if right is None else right
    align = ["---" if index < first else "---:" for index in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(lines)


def write_report(report: str, output: Path) -> None:
    """Write ``report`` to ``output`` (creating its folder), print it, and say where it went."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report, encoding="utf-8")
    print(report)
    print(f"written to {output}", file=sys.stderr)
