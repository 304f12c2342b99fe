#!/usr/bin/env python3
"""This distribution beside Microsoft's `agent-framework-mongodb`, which installs the same import package.

Builds this project's wheel once, downloads Microsoft's pinned wheel from the package index, and checks:

1. The two wheels share no path but `agent_framework_mongodb/__init__.py` and the empty `py.typed` marker.
2. In throwaway virtual environments, for both install orders and after uninstalling either distribution,
   exactly the documented imports work (docs/adr/0001-distribution-name.md):
   - `agent_framework_mongodb.checkpoints` whenever this distribution is installed;
   - `agent_framework_mongodb.MongoDBCheckpointStorage` and Microsoft's names whenever this
     distribution's `__init__.py` is the installed one;
   - Microsoft's names, not ours, at the top level when theirs is the installed one;
   - after an uninstall (which removes the shared `__init__.py`), `checkpoints` still imports, and
     `pip install --force-reinstall --no-deps` of the remaining distribution restores its top level.
3. `pip check` finds the two distributions' dependency ranges compatible.
4. `doctor`'s installation check (`checkpoints/diagnostics`) says ok, warn or fail in each of those states:
   ok when this distribution's `__init__.py` is in place, warn when Microsoft's is, fail when an uninstall
   deleted it.

Any other outcome fails the run. Needs the package index (pip's cache keeps reruns fast).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NoReturn

MICROSOFT_DISTRIBUTION = "agent-framework-mongodb"
MICROSOFT_VERSION = "1.0.0a261015"
OURS_DISTRIBUTION = "agent-framework-mongodb-checkpoints"
PACKAGE = "agent_framework_mongodb"
SHARED_PATHS = {f"{PACKAGE}/__init__.py", f"{PACKAGE}/py.typed"}

REPOSITORY = Path(__file__).resolve().parent.parent

# Run inside an environment: which of the three import paths work. Prints a JSON object.
PROBE = """
import importlib, json
results = {}
def probe(label, module, names):
    try:
        imported = importlib.import_module(module)
        for name in names:
            getattr(imported, name)
    except (ImportError, AttributeError) as error:
        results[label] = f"fails: {type(error).__name__}: {error}"
    else:
        results[label] = "works"
try:
    import agent_framework_mongodb.checkpoints as checkpoints
    ours = list(checkpoints.__all__)
except ImportError:
    ours = ["MongoDBCheckpointStorage", "MongoDBCheckpointStorageOptions"]
probe("ours from agent_framework_mongodb.checkpoints", "agent_framework_mongodb.checkpoints", ours)
probe("ours from agent_framework_mongodb", "agent_framework_mongodb", ours)
probe("Microsoft's from agent_framework_mongodb", "agent_framework_mongodb",
      ["MongoDBCollection", "MongoDBSettings", "MongoDBStore", "__version__"])
# What `doctor` says of the installation (None where this distribution is not installed).
try:
    from agent_framework_mongodb.checkpoints.diagnostics import check_installation
except ImportError:
    results["doctor installation"] = None
else:
    results["doctor installation"] = check_installation().status.value
print(json.dumps(results))
"""

SUBPACKAGE = "ours from agent_framework_mongodb.checkpoints"
OURS_TOP = "ours from agent_framework_mongodb"
THEIRS_TOP = "Microsoft's from agent_framework_mongodb"
DOCTOR = "doctor installation"


def fail(message: str) -> NoReturn:
    print(f"coexistence: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def run(*command: str | Path) -> str:
    # Our own fixed commands only.
    completed = subprocess.run(  # noqa: S603
        [str(part) for part in command], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        shown = " ".join(map(str, command))
        fail(f"{shown} exited {completed.returncode}:\n{completed.stdout}{completed.stderr}")
    return completed.stdout


def wheel_paths(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if ".dist-info/" not in name}


def check_shared_paths(ours: Path, theirs: Path) -> None:
    shared = wheel_paths(ours) & wheel_paths(theirs)
    if shared != SHARED_PATHS:
        fail(f"the wheels share {sorted(shared)}, expected exactly {sorted(SHARED_PATHS)}")
    for wheel in (ours, theirs):
        with zipfile.ZipFile(wheel) as archive:
            if archive.read(f"{PACKAGE}/py.typed"):
                fail(f"{wheel.name} ships a non-empty py.typed; the shared marker must be identical (empty)")
    print(f"shared paths: {sorted(shared)} (py.typed empty in both)")


class Environment:
    def __init__(self, root: Path, name: str, wheels: dict[str, Path]) -> None:
        self.name = name
        self.wheels = wheels
        self.python = root / name / "bin" / "python"
        self.log: list[str] = []
        # No pip inside (creating it is most of a venv's cost): this interpreter's pip installs into it.
        run(sys.executable, "-m", "venv", "--without-pip", root / name)

    def pip(self, *arguments: str | Path) -> None:
        run(
            sys.executable,
            "-m",
            "pip",
            "--python",
            self.python,
            "--disable-pip-version-check",
            "--quiet",
            *arguments,
        )

    def install(self, distribution: str, *options: str) -> None:
        self.pip("install", *options, self.wheels[distribution])

    def uninstall(self, distribution: str) -> None:
        self.pip("uninstall", "--yes", distribution)

    def expect(self, step: str, works: set[str], doctor: str | None) -> None:
        results: dict[str, str] = json.loads(run(self.python, "-c", PROBE))
        said = results.pop(DOCTOR)
        if said != doctor:
            fail(f"[{self.name}] after {step}: doctor's installation check says {said}, expected {doctor}")
        for label, outcome in results.items():
            if (outcome == "works") != (label in works):
                wanted = "works" if label in works else "fails"
                fail(f"[{self.name}] after {step}: {label} {outcome}, expected it {wanted}")
        self.log.append(
            f"[{self.name}] {step}: "
            + "; ".join(f"{k}: {v.split(':')[0]}" for k, v in results.items())
            + f"; doctor: {said}"
        )

    def pip_check(self, step: str) -> None:
        run(sys.executable, "-m", "pip", "--python", self.python, "check")
        self.log.append(f"[{self.name}] {step}: pip check passes")


def expected(installed: set[str], owner: str | None) -> set[str]:
    """The import paths that work, given the installed distributions and whose `__init__.py` is in place."""
    works = set()
    if OURS_DISTRIBUTION in installed:
        works.add(SUBPACKAGE)
    if owner == OURS_DISTRIBUTION:
        works.add(OURS_TOP)
    # Microsoft's own __init__, or ours re-exporting their names; none after an uninstall removed it.
    if MICROSOFT_DISTRIBUTION in installed and owner is not None:
        works.add(THEIRS_TOP)
    return works


def doctor_says(installed: set[str], owner: str | None) -> str | None:
    """`doctor`'s installation status: ok when this distribution's `__init__.py` is in place, warn when
    Microsoft's is, fail when an uninstall deleted it; None where this distribution is not installed."""
    if OURS_DISTRIBUTION not in installed:
        return None
    return {OURS_DISTRIBUTION: "ok", MICROSOFT_DISTRIBUTION: "warn", None: "fail"}[owner]


def scenario(env: Environment, first: str, second: str) -> list[str]:
    """Install `first` then `second`; uninstall each in turn, repairing the survivor in between."""
    both = {first, second}
    env.install(first)
    env.install(second)
    env.expect(f"installing {first} then {second}", expected(both, second), doctor_says(both, second))
    env.pip_check("both installed")
    # Uninstalling the last one also removes the shared __init__.py the first one relied on.
    env.uninstall(second)
    env.expect(f"uninstalling {second}", expected({first}, None), doctor_says({first}, None))
    env.install(first, "--force-reinstall", "--no-deps")
    env.expect(f"reinstalling {first} alone", expected({first}, first), doctor_says({first}, first))
    # Back to both, `second` last again; now uninstall the first one.
    env.install(second, "--no-deps")
    env.uninstall(first)
    step = f"installing {second} again, uninstalling {first}"
    env.expect(step, expected({second}, None), doctor_says({second}, None))
    env.install(second, "--force-reinstall", "--no-deps")
    env.expect(f"reinstalling {second} alone", expected({second}, second), doctor_says({second}, second))
    return env.log


def main() -> None:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="coexistence-") as directory:
        root = Path(directory)
        run(
            sys.executable,
            "-m",
            "uv",
            "build",
            "--wheel",
            "--quiet",
            "--out-dir",
            root / "ours",
            REPOSITORY / "python",
        )
        run(
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "download",
            "--quiet",
            "--no-deps",
            "--dest",
            root / "theirs",
            f"{MICROSOFT_DISTRIBUTION}=={MICROSOFT_VERSION}",
        )
        wheels = {
            OURS_DISTRIBUTION: next((root / "ours").glob("*.whl")),
            MICROSOFT_DISTRIBUTION: next((root / "theirs").glob("*.whl")),
        }
        check_shared_paths(wheels[OURS_DISTRIBUTION], wheels[MICROSOFT_DISTRIBUTION])
        orders = [(OURS_DISTRIBUTION, MICROSOFT_DISTRIBUTION), (MICROSOFT_DISTRIBUTION, OURS_DISTRIBUTION)]
        with ThreadPoolExecutor(max_workers=len(orders)) as pool:
            logs = pool.map(
                lambda order: scenario(Environment(root, f"{order[0]}-first", wheels), *order), orders
            )
            for log in logs:
                print("\n".join(log))
    print(f"coexistence: every scenario as documented ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
