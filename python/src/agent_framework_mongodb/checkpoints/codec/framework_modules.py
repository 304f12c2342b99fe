"""Agent Framework's own modules, imported by the codec once, before any payload is read.

Agent Framework imports its workflow modules lazily: ``import agent_framework`` leaves
``WorkflowEvent``, ``WorkflowMessage`` and the executors' request types unimported until
something touches them. The codec resolves framework class names only in modules already
imported (a payload must never be the reason a module is imported), so a process that only reads
checkpoints (an approvals inbox, the CLI) could not load a run waiting for input. The codec
therefore imports a fixed list of the framework's own modules itself, once per process, when the
first codec is built: the modules are the framework's code, chosen by this package and never by
a payload. See ``docs/adr/0023-framework-modules-imported-by-the-codec.md``.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import pkgutil
import threading
from typing import Final

__all__ = ["FRAMEWORK_MODULES", "FRAMEWORK_PACKAGES", "SKIPPED_MODULES", "import_framework_modules"]

FRAMEWORK_MODULES: Final = ("agent_framework._types",)
"""Single modules whose classes checkpoints hold (messages and their contents)."""

FRAMEWORK_PACKAGES: Final = ("agent_framework._workflows", "agent_framework_orchestrations")
"""Packages whose every submodule is imported: the workflow runtime (events, messages, executor
requests) and, where installed, Agent Framework's orchestrations. Measured on core 1.23: about
0.35 s for the workflow modules and 0.4 s more for the orchestrations in a process that had
imported neither (a process that runs workflows has imported them already)."""

SKIPPED_MODULES: Final = frozenset({"agent_framework._workflows._viz"})
"""Not imported: workflow visualisation (graphviz), which no checkpoint holds and a run never imports."""

_LOGGER: Final = logging.getLogger("agent_framework_mongodb")
_lock = threading.Lock()
_imported: tuple[str, ...] | None = None


def import_framework_modules() -> tuple[str, ...]:
    """Import :data:`FRAMEWORK_MODULES` and every module of :data:`FRAMEWORK_PACKAGES` (once).

    A package that is not installed is skipped, and so is a module that fails to import (an
    optional dependency of the framework's missing, say): checkpoints naming its classes are then
    refused on load as before, naming the class. Returns the modules imported.
    """
    global _imported  # noqa: PLW0603 - one import pass per process
    with _lock:
        if _imported is None:
            _imported = tuple(_import_all())
        return _imported


def _import_all() -> list[str]:
    imported: list[str] = []
    for name in (*FRAMEWORK_MODULES, *_package_modules()):
        try:
            importlib.import_module(name)
        except Exception as error:
            _LOGGER.debug("Agent Framework module %s was not imported: %s", name, type(error).__name__)
            continue
        imported.append(name)
    return imported


def _package_modules() -> list[str]:
    names: list[str] = []
    for package in FRAMEWORK_PACKAGES:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or spec.submodule_search_locations is None:
            continue
        names.append(package)
        for module in pkgutil.iter_modules(spec.submodule_search_locations):
            name = f"{package}.{module.name}"
            if name not in SKIPPED_MODULES:
                names.append(name)
    return names
