"""The ``agent-framework-mongodb`` command line: provision indexes and inspect or clear runs.

Needs the ``cli`` extra (Click and Rich); without it, the command says how to install it and
exits with status 2. The core package never imports this module.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["INSTALL_HINT", "main"]

INSTALL_HINT = (
    "The agent-framework-mongodb command line needs its optional dependencies:\n"
    '    pip install "agent-framework-mongodb-checkpoints[cli]"'
)
MISSING_EXTRA_STATUS = 2


def main(args: Sequence[str] | None = None) -> None:
    """Run the command line (the console script's entry point)."""
    try:
        from ._app import cli  # noqa: PLC0415 - Click and Rich are optional: import them only here
    except ImportError as error:
        if error.name not in {"click", "rich"}:
            raise
        print(INSTALL_HINT, file=sys.stderr)
        raise SystemExit(MISSING_EXTRA_STATUS) from None
    cli.main(args=None if args is None else list(args), prog_name="agent-framework-mongodb")
