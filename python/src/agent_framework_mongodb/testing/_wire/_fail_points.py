"""The ``failCommand`` fail point, configured with ``configureFailPoint`` as MongoDB's drivers test with it.

Semantics from the server (src/mongo/db/commands.cpp, ``CommandHelpers::evaluateFailCommandFailPoint``
and ``shouldActivateFailCommandFailPoint``) and mongodb/specifications
(source/transactions/tests/README.md and source/unified-test-format/unified-test-format.md,
"failCommand"): the fail point activates only for a command named in ``data.failCommands`` (never
``configureFailPoint`` itself; ``hello``/``isMaster`` only when listed) sent by a client whose
``appName`` matches when ``data.appName`` is given. ``mode`` counts activations, not commands:
``{times: n}`` fires n times then turns off, ``{skip: n}`` lets n activations pass then fires on
every later one, ``"alwaysOn"`` and ``"off"``. An activation blocks for ``blockTimeMS`` when
``blockConnection`` is true, then closes the connection without a reply (``closeConnection``), or
fails before running with ``errorCode`` ("Failing command due to 'failCommand' failpoint"), or runs
the command and adds ``writeConcernError`` to its reply. ``errorLabels``, when given, replace the
labels the server would add. ``failInternalCommands`` is accepted: every client of the front is
external.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from ._replies import CommandError

FAIL_COMMAND: Final = "failCommand"
FAIL_MESSAGE: Final = "Failing command due to 'failCommand' failpoint"


@dataclass(frozen=True)
class FailCommand:
    """What an activation does (``data`` of the fail point)."""

    commands: frozenset[str]
    error_code: int | None = None
    error_labels: tuple[str, ...] | None = None
    close_connection: bool = False
    block_ms: int = 0
    write_concern_error: Mapping[str, Any] | None = None
    app_name: str | None = None

    def applies(self, command: str, app_name: str | None) -> bool:
        if command not in self.commands:
            return False
        return self.app_name is None or self.app_name == app_name

    @property
    def acts(self) -> bool:
        return (
            self.error_code is not None
            or self.close_connection
            or self.block_ms > 0
            or self.write_concern_error is not None
        )


def _parse_data(data: Mapping[str, Any]) -> FailCommand:
    commands = data.get("failCommands")
    if not isinstance(commands, list):
        raise CommandError(2, "'failCommands' must be an array of command names")
    labels = data.get("errorLabels")
    error_code = data.get("errorCode")
    block = bool(data.get("blockConnection"))
    block_ms = data.get("blockTimeMS", 0)
    if block and (isinstance(block_ms, bool) or not isinstance(block_ms, int) or block_ms < 0):
        raise CommandError(2, "'blockTimeMS' must be a non-negative integer when 'blockConnection' is true")
    write_concern_error = data.get("writeConcernError")
    app_name = data.get("appName")
    return FailCommand(
        commands=frozenset(str(name) for name in cast("list[Any]", commands)),  # type: ignore[redundant-cast]
        error_code=None if error_code is None else int(error_code),
        error_labels=None if labels is None else tuple(str(label) for label in cast("list[Any]", labels)),
        close_connection=bool(data.get("closeConnection")),
        block_ms=int(block_ms) if block else 0,
        write_concern_error=None
        if write_concern_error is None
        else dict(cast("Mapping[str, Any]", write_concern_error)),
        app_name=None if app_name is None else str(app_name),
    )


class FailPoints:
    """One server's ``failCommand`` state."""

    def __init__(self) -> None:
        self._data: FailCommand | None = None
        self._times: int | None = None  # None: unlimited
        self._skip = 0
        self._entered = 0

    def configure(self, command: Mapping[str, Any]) -> dict[str, Any]:
        name = command.get("configureFailPoint")
        if name != FAIL_COMMAND:
            raise CommandError(2, f"the front has only the 'failCommand' fail point, not {name!r}")
        mode = command.get("mode")
        entered = self._entered
        if mode == "off":
            self._data, self._times, self._skip = None, None, 0
            return {"count": entered, "ok": 1.0}
        data = _parse_data(cast("Mapping[str, Any]", command.get("data") or {}))
        if mode == "alwaysOn":
            times, skip = None, 0
        elif isinstance(mode, Mapping) and "times" in mode:
            times, skip = int(cast("Mapping[str, Any]", mode)["times"]), 0
        elif isinstance(mode, Mapping) and "skip" in mode:
            times, skip = None, int(cast("Mapping[str, Any]", mode)["skip"])
        else:
            raise CommandError(2, f"unknown fail point mode {mode!r}")
        self._data, self._times, self._skip, self._entered = data, times, skip, 0
        return {"count": entered, "ok": 1.0}

    def take(self, command: str, app_name: str | None) -> FailCommand | None:
        """The activation this command triggers, if any (counting it against ``times``/``skip``)."""
        data = self._data
        if (
            data is None
            or command == "configureFailPoint"
            or not data.acts
            or not data.applies(command, app_name)
        ):
            return None
        if self._skip:
            self._skip -= 1
            return None
        if self._times is not None:
            if self._times <= 0:
                return None
            self._times -= 1
            if self._times == 0:
                self._data = None
        self._entered += 1
        return data
