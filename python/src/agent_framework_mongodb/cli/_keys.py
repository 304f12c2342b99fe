"""Signing keys from the environment: the storage's ``signing_keys``, base64 and comma-separated."""

from __future__ import annotations

import base64
import binascii
import os

import click

__all__ = ["KEYS_VARIABLE", "keys_from_environment"]

KEYS_VARIABLE = "AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS"


def keys_from_environment(*, required: bool) -> tuple[bytes, ...]:
    """The keys :data:`KEYS_VARIABLE` holds (none when unset, unless ``required``).

    With keys, the commands read as a signed storage does: an unsigned or forged checkpoint is
    refused, not shown.

    Raises:
        click.UsageError: The variable is unset and keys are ``required``, or a key is not base64.
    """
    text = os.environ.get(KEYS_VARIABLE, "")
    if not text.strip():
        if required:
            raise click.UsageError(
                f"Set {KEYS_VARIABLE} to the storage's signing keys (base64, comma-separated)."
            )
        return ()
    try:
        return tuple(
            base64.b64decode(part.strip(), validate=True) for part in text.split(",") if part.strip()
        )
    except (binascii.Error, ValueError):
        raise click.UsageError(f"{KEYS_VARIABLE} holds a key that is not base64.") from None
