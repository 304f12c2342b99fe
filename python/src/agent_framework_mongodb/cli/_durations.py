"""Parsing ``--older-than`` durations such as ``30d``, ``12h``, ``1d12h`` or ``90m``."""

from __future__ import annotations

import re
from datetime import timedelta

import click

__all__ = ["parse_duration"]

_PART = re.compile(r"(\d+)([wdhms])")
_UNITS = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_duration(context: click.Context, parameter: click.Parameter, value: str) -> timedelta:
    """A Click callback: a positive duration of ``<number><unit>`` parts, units ``w d h m s``."""
    text = value.strip().lower()
    parts: list[tuple[str, str]] = _PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise click.BadParameter(
            f"{value!r} is not a duration such as 30d, 12h, 1d12h or 90m.", context, parameter
        )
    duration = timedelta()
    for number, unit in parts:
        duration += timedelta(**{_UNITS[unit]: int(number)})
    if duration <= timedelta():
        raise click.BadParameter("the duration must be positive.", context, parameter)
    return duration
