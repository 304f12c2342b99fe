"""Side-effect markers: hostile payloads try to reach these; tests assert nothing was reached."""

from __future__ import annotations

TRIPPED: list[str] = []


def trip(reason: str = "called") -> None:
    TRIPPED.append(reason)


class Tripwire:
    """Instantiating it records a trip: a payload that resolves it has executed code."""

    def __init__(self) -> None:
        TRIPPED.append("Tripwire")
