"""What a diagnostic check reports: a status, a one-line summary, and a one-line fix."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

__all__ = ["Check", "Status"]


class Status(str, enum.Enum):
    """A check's outcome. Only ``FAIL`` means something is wrong; ``SKIP``: nothing to check here."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One check's outcome.

    Attributes:
        name: What was checked (``"indexes"``, ``"write concern"`` ...), stable across releases.
        status: The outcome.
        summary: What was found, in one line; never hosts, credentials or key material.
        fix: How to fix it, in one line; ``None`` when there is nothing to fix.
        details: What was found, for machines (JSON-compatible values).
    """

    name: str
    status: Status
    summary: str
    fix: str | None = None
    details: Mapping[str, object] = dataclasses.field(default_factory=dict[str, object])

    def to_json(self) -> dict[str, object]:
        """The check as a JSON object."""
        return {
            "name": self.name,
            "status": self.status.value,
            "summary": self.summary,
            "fix": self.fix,
            "details": dict(self.details),
        }
