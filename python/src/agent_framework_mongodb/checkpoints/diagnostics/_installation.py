"""The installation: this distribution, and Microsoft's ``agent-framework-mongodb`` beside it.

Both install the import package ``agent_framework_mongodb`` and so share its ``__init__.py``:
whichever installed last owns it, and uninstalling either deletes it (docs/adr/0001-distribution-name.md,
``.ci/coexistence.py``). Which one owns it is read from the file itself: its hash is compared with
the hash each distribution's ``RECORD`` lists for it. Nothing is imported and nothing is written.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import cast

from ._model import Check, Status

__all__ = ["MICROSOFT_DISTRIBUTION", "OUR_DISTRIBUTION", "SHARED_INIT", "check_installation"]

OUR_DISTRIBUTION = "agent-framework-mongodb-checkpoints"
MICROSOFT_DISTRIBUTION = "agent-framework-mongodb"
SHARED_INIT = "agent_framework_mongodb/__init__.py"
_PACKAGE = "agent_framework_mongodb/"
_NAME = "installation"
_MISSING_SHOWN = 3


def check_installation(*, path: Sequence[str] | None = None) -> Check:
    """Which of the two distributions are installed, which owns the shared ``__init__.py``, whether
    this distribution's files are all in place, and what an uninstall of either would break.

    ``path`` is where to look for installed distributions (``sys.path`` by default).
    """
    ours = _find(OUR_DISTRIBUTION, path)
    theirs = _find(MICROSOFT_DISTRIBUTION, path)
    details: dict[str, object] = {
        OUR_DISTRIBUTION: None if ours is None else _describe(ours),
        MICROSOFT_DISTRIBUTION: None if theirs is None else _describe(theirs),
    }
    if ours is None:
        return Check(
            _NAME,
            Status.WARN,
            f"{OUR_DISTRIBUTION} has no installed metadata: the package is imported from a source tree.",
            f"pip install {OUR_DISTRIBUTION} (from a clone: pip install -e ./python).",
            details,
        )
    if _editable(ours):
        return _editable_check(ours, theirs, details)
    if not Path(str(ours.locate_file(SHARED_INIT))).is_file():
        return _ownership_check(ours, theirs, details)  # says what the deleted __init__.py breaks
    missing = _missing_files(ours)
    if missing:
        details["missing_files"] = missing
        shown = ", ".join(missing[:_MISSING_SHOWN]) + (", ..." if len(missing) > _MISSING_SHOWN else "")
        return Check(
            _NAME,
            Status.FAIL,
            f"{len(missing)} file(s) that {OUR_DISTRIBUTION} installed are missing ({shown}).",
            f"pip install --force-reinstall --no-deps {OUR_DISTRIBUTION}",
            details,
        )
    return _ownership_check(ours, theirs, details)


def _ownership_check(
    ours: metadata.Distribution, theirs: metadata.Distribution | None, details: dict[str, object]
) -> Check:
    init = Path(str(ours.locate_file(SHARED_INIT)))
    reinstall_ours = f"pip install --force-reinstall --no-deps {OUR_DISTRIBUTION}"
    if not init.is_file():
        lost = "our top-level names" if theirs is None else "our and Microsoft's top-level names"
        return Check(
            _NAME,
            Status.FAIL,
            f"{SHARED_INIT} is missing (an uninstall of either distribution deletes it): {lost} do "
            "not import from agent_framework_mongodb; agent_framework_mongodb.checkpoints still works.",
            reinstall_ours + (" (its __init__.py also re-exports Microsoft's names)" if theirs else ""),
            details,
        )
    digest = _file_hash(init)
    owner = (
        OUR_DISTRIBUTION
        if digest == _recorded_hash(ours)
        else MICROSOFT_DISTRIBUTION
        if theirs is not None and digest == _recorded_hash(theirs)
        else None
    )
    details["shared_init_owner"] = owner
    if owner is None:
        return Check(
            _NAME,
            Status.WARN,
            f"{SHARED_INIT} is not the file either distribution installed (edited by hand, or left by "
            "another package).",
            reinstall_ours,
            details,
        )
    if theirs is None:
        return Check(
            _NAME,
            Status.OK,
            f"{OUR_DISTRIBUTION} {ours.version}; {MICROSOFT_DISTRIBUTION} is not installed.",
            None,
            details,
        )
    details["after_uninstalling"] = {
        OUR_DISTRIBUTION: f"{SHARED_INIT} is deleted: Microsoft's names stop importing until "
        f"pip install --force-reinstall --no-deps {MICROSOFT_DISTRIBUTION}",
        MICROSOFT_DISTRIBUTION: f"{SHARED_INIT} is deleted: agent_framework_mongodb.MongoDBCheckpointStorage "
        f"stops importing (agent_framework_mongodb.checkpoints works) until {reinstall_ours}",
    }
    if owner == OUR_DISTRIBUTION:
        return Check(
            _NAME,
            Status.OK,
            f"{OUR_DISTRIBUTION} {ours.version} installed after {MICROSOFT_DISTRIBUTION} {theirs.version}: "
            f"it owns {SHARED_INIT}, which re-exports Microsoft's names. Uninstalling either deletes that "
            "file; then force-reinstall the other with --no-deps.",
            None,
            details,
        )
    return Check(
        _NAME,
        Status.WARN,
        f"{MICROSOFT_DISTRIBUTION} {theirs.version} installed after {OUR_DISTRIBUTION} {ours.version}: it "
        f"owns {SHARED_INIT}, so `from agent_framework_mongodb import MongoDBCheckpointStorage` fails "
        "(agent_framework_mongodb.checkpoints works). Uninstalling either deletes that file.",
        f"Import from agent_framework_mongodb.checkpoints, or {reinstall_ours} (keeps Microsoft's names).",
        details,
    )


def _editable_check(
    ours: metadata.Distribution, theirs: metadata.Distribution | None, details: dict[str, object]
) -> Check:
    if theirs is None:
        return Check(
            _NAME, Status.OK, f"{OUR_DISTRIBUTION} {ours.version}, an editable install.", None, details
        )
    return Check(
        _NAME,
        Status.WARN,
        f"{OUR_DISTRIBUTION} is an editable install beside {MICROSOFT_DISTRIBUTION} {theirs.version}: "
        "the agent_framework_mongodb directory first on sys.path hides the other's modules.",
        f"Install {OUR_DISTRIBUTION} from a wheel when Microsoft's package is installed too.",
        details,
    )


def _find(name: str, path: Sequence[str] | None) -> metadata.Distribution | None:
    found: Iterable[metadata.Distribution] = (
        metadata.distributions(name=name)
        if path is None
        else metadata.distributions(name=name, path=list(path))
    )
    return next(iter(found), None)


def _describe(distribution: metadata.Distribution) -> dict[str, object]:
    return {"version": distribution.version, "editable": _editable(distribution)}


def _editable(distribution: metadata.Distribution) -> bool:
    text = distribution.read_text("direct_url.json")
    if not text:
        return False
    try:
        info: object = json.loads(text)
    except ValueError:
        return False
    if not isinstance(info, dict):
        return False
    directory: object = cast("dict[str, object]", info).get("dir_info")
    return isinstance(directory, dict) and cast("dict[str, object]", directory).get("editable") is True


def _missing_files(distribution: metadata.Distribution) -> list[str]:
    """This distribution's package files its RECORD lists that are not on disk (the shared
    ``__init__.py`` is judged separately; compiled files come and go; the shared, empty
    ``py.typed`` goes with the ``__init__.py`` in an uninstall)."""
    missing: list[str] = []
    for name, _ in _record(distribution):
        if not name.startswith(_PACKAGE) or name == SHARED_INIT or "/__pycache__/" in name:
            continue
        if not Path(str(distribution.locate_file(name))).is_file():
            missing.append(name)
    return missing


def _recorded_hash(distribution: metadata.Distribution) -> str | None:
    for name, digest in _record(distribution):
        if name == SHARED_INIT:
            return digest
    return None


def _record(distribution: metadata.Distribution) -> list[tuple[str, str | None]]:
    """Every file the distribution's RECORD lists, with its sha256 (``None`` if it states none).

    Read from RECORD itself: from Python 3.13, ``Distribution.files`` leaves out the files that
    are not on disk, which are exactly the ones this check looks for.
    """
    text = distribution.read_text("RECORD")
    rows: list[tuple[str, str | None]] = []
    for row in csv.reader((text or "").splitlines()):
        if not row:
            continue
        mode, _, value = (row[1] if len(row) > 1 else "").partition("=")
        rows.append((row[0], value if mode == "sha256" and value else None))
    return rows


def _file_hash(path: Path) -> str:
    """The file's sha256 as a RECORD states it: urlsafe base64 without padding."""
    digest = hashlib.sha256(path.read_bytes()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
