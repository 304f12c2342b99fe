"""One name for the signing keys' environment variable across the code, the docs and the samples."""

from __future__ import annotations

import re
from pathlib import Path

from agent_framework_mongodb.cli._keys import KEYS_VARIABLE

REPOSITORY = Path(__file__).resolve().parents[4]
RETIRED = {"CHECKPOINT_SIGNING_KEY", "CHECKPOINT_SIGNING_KEY_PREVIOUS"}
"""Names an earlier docs example read; docs/cli.md records why they are no aliases (only it names them)."""
_DECISION = Path("docs") / "cli.md"
_KEY_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9_]*SIGNING_KEYS?[A-Z0-9_]*\b")


def _read_by_operators() -> list[Path]:
    """What an operator or an application author reads or runs: the docs, the specs, the samples,
    the README and the package's source."""
    files = [REPOSITORY / "README.md"]
    for folder, pattern in (("docs", "*.md"), ("specs", "*.md"), ("samples", "*.py")):
        files.extend(sorted((REPOSITORY / folder).rglob(pattern)))
    files.extend(sorted((REPOSITORY / "python" / "src").rglob("*.py")))
    files.extend(sorted((REPOSITORY / "python" / "src").rglob("*.md")))
    return files


def test_every_document_and_sample_names_the_variable_the_cli_reads() -> None:
    # issue 31: docs/security.md read CHECKPOINT_SIGNING_KEY and CHECKPOINT_SIGNING_KEY_PREVIOUS,
    # while the CLI reads AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS.
    assert KEYS_VARIABLE == "AGENT_FRAMEWORK_MONGODB_SIGNING_KEYS"
    named = {
        f"{path.relative_to(REPOSITORY)}: {name}"
        for path in _read_by_operators()
        for name in _KEY_VARIABLE.findall(path.read_text(encoding="utf-8"))
        if name != KEYS_VARIABLE and not (name in RETIRED and path.relative_to(REPOSITORY) == _DECISION)
    }
    assert not named, "a second name for the signing keys' variable"
    assert KEYS_VARIABLE in (REPOSITORY / "docs" / "security.md").read_text(encoding="utf-8")
    assert "not kept as aliases" in " ".join((REPOSITORY / _DECISION).read_text(encoding="utf-8").split())
