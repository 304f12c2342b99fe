"""Checks of this process's configuration: framework types, application types, signing keys.

The framework check loads a checkpoint of a waiting run (a ``request_info`` event and an in-flight
message) in a child process that imports only this package's codec, and so Agent Framework's top
level, nothing else: that is what a read-only service (an approvals inbox, the command line) does,
and the framework imports its workflow modules lazily, so loading in this process, where building
the checkpoint imported them, would prove nothing.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import cast

from ...errors import MongoDBConfigurationError, MongoDBIntegrationError
from ..codec import CheckpointCodec
from ..options import MongoDBCheckpointStorageOptions
from ._model import Check, Status

__all__ = [
    "DEFAULT_CHILD_TIMEOUT",
    "check_allowed_types",
    "check_framework_types",
    "check_signing_keys",
    "waiting_run_checkpoint_payload",
]

DEFAULT_CHILD_TIMEOUT = 60.0
"""Seconds the child process may take to start, import and load."""

_CHILD = """
import base64, json, sys
try:
    from agent_framework_mongodb.checkpoints.codec import CheckpointCodec
    request = json.loads(sys.stdin.read())
    loaded = CheckpointCodec().decode(base64.b64decode(request["payload"]), checksum=request["checksum"])
    found = [type(value).__module__ + ":" + type(value).__qualname__
             for value in [*loaded.pending_request_info_events.values(),
                           *(message for messages in loaded.messages.values() for message in messages)]]
    result = {"loaded": True, "types": found}
except Exception as error:
    result = {"loaded": False, "error": type(error).__name__ + ": " + str(error)}
print(json.dumps(result))
"""

_FRAMEWORK = "framework types"
_FRAMEWORK_FIX = (
    "Install an agent-framework-core release this package supports (README, Compatibility): the codec "
    "imports the framework's workflow modules itself (ADR 0023), and a module that fails to import is "
    "skipped: `python -c 'import MODULE'`, with the module the summary names, shows why."
)


def waiting_run_checkpoint_payload() -> tuple[bytes, str, list[str]]:
    """A checkpoint of a run waiting for input, encoded: its payload, checksum and the classes
    (``module:qualname``) of the request and the message it holds."""
    from agent_framework import (  # noqa: PLC0415 - these imports are what the child must not need
        WorkflowCheckpoint,
        WorkflowEvent,
        WorkflowMessage,
    )

    request = WorkflowEvent.request_info("doctor-request", "doctor-executor", "approve?", str)
    message = WorkflowMessage(data="in flight", source_id="doctor-executor", target_id="doctor-reviewer")
    checkpoint = WorkflowCheckpoint(
        workflow_name="doctor",
        graph_signature_hash="doctor",
        messages={"doctor-executor": [message]},
        pending_request_info_events={"doctor-request": request},
    )
    encoded = CheckpointCodec().encode(checkpoint)
    expected = [f"{type(value).__module__}:{type(value).__qualname__}" for value in (request, message)]
    return encoded.payload, encoded.payload_checksum, expected


def check_framework_types(*, timeout: float = DEFAULT_CHILD_TIMEOUT) -> Check:
    """Whether a process that imported only Agent Framework and this package loads a waiting run.

    The child runs with this interpreter, environment and working directory.
    """
    framework = _version("agent-framework-core")
    details: dict[str, object] = {"agent-framework-core": framework}
    try:
        payload, checksum, expected = waiting_run_checkpoint_payload()
    except (MongoDBIntegrationError, ImportError, TypeError, ValueError, AttributeError) as error:
        details["error"] = f"{type(error).__name__}: {error}"
        return Check(
            _FRAMEWORK,
            Status.FAIL,
            f"A waiting run's checkpoint cannot be built and saved with agent-framework-core {framework}: "
            f"{details['error']}",
            "Install an agent-framework-core release this package supports (README, Compatibility).",
            details,
        )
    request = json.dumps({"payload": base64.b64encode(payload).decode("ascii"), "checksum": checksum})
    try:
        completed = subprocess.run(  # noqa: S603 - this interpreter and the module's own code
            [sys.executable, "-c", _CHILD],
            input=request,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (subprocess.TimeoutExpired, OSError) as error:
        return Check(
            _FRAMEWORK,
            Status.FAIL,
            f"The loading process did not run to its end ({type(error).__name__}).",
            None,
            details,
        )
    answer = _answer(completed.stdout)
    if answer is None:
        details["stderr"] = completed.stderr[-2000:]
        return Check(
            _FRAMEWORK,
            Status.FAIL,
            f"The loading process exited with status {completed.returncode} without an answer.",
            "Run `python -c 'import agent_framework_mongodb.checkpoints'` to see why it does not import.",
            details,
        )
    if answer.get("loaded") is True and answer.get("types") == expected:
        details["types"] = expected
        return Check(
            _FRAMEWORK,
            Status.OK,
            f"A waiting run's checkpoint (request event, in-flight message) loads in a process that "
            f"imported only agent_framework and this package (agent-framework-core {framework}).",
            None,
            details,
        )
    details["error"] = str(answer.get("error", f"loaded as {answer.get('types')!r}, not {expected!r}"))
    return Check(
        _FRAMEWORK,
        Status.FAIL,
        "A waiting run's checkpoint does not load in a process that imported only agent_framework "
        f"and this package: {details['error']}",
        _FRAMEWORK_FIX,
        details,
    )


def _answer(stdout: str) -> dict[str, object] | None:
    """The child's JSON answer (its last line of output), or None."""
    lines = stdout.strip().splitlines()
    try:
        answer: object = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return cast("dict[str, object]", answer) if isinstance(answer, dict) else None


def check_allowed_types(allowed_types: Sequence[str]) -> Check:
    """Whether every ``module:qualname`` entry imports and names a class (as a storage checks)."""
    name = "application types"
    if not allowed_types:
        return Check(
            name,
            Status.SKIP,
            "No application classes listed (--allow-type MODULE:QUALNAME checks each one imports).",
        )
    try:
        CheckpointCodec(allowed_types).check_allowed_types()
    except MongoDBConfigurationError as error:
        return Check(
            name,
            Status.FAIL,
            str(error),
            "Correct the entry, or install the package that defines it where the storage runs.",
            {"allowed_types": list(allowed_types)},
        )
    return Check(
        name,
        Status.OK,
        f"{len(allowed_types)} application class(es) import and name classes.",
        None,
        {"allowed_types": list(allowed_types)},
    )


def check_signing_keys(keys: Sequence[bytes], *, source: str) -> Check:
    """Whether ``keys`` (from ``source``, for the messages) would configure a signed storage."""
    name = "signing"
    fix = (
        f"Set {source} to base64 keys of at least 32 random bytes, comma-separated (the first signs, all "
        "verify), and the same signing_keys in every worker; move existing runs with sign-run."
    )
    if not keys:
        return Check(
            name,
            Status.WARN,
            f"{source} is not set: checkpoints are neither signed nor verified, so whoever can write the "
            "collection can make a load fail or cost memory (specs/codec.md, threat model).",
            fix,
            {"keys": 0},
        )
    try:
        MongoDBCheckpointStorageOptions(
            tenant_id="doctor", workflow_name="doctor", session_id="doctor", signing_keys=keys
        )
    except MongoDBConfigurationError as error:
        return Check(name, Status.FAIL, f"{source}: {error}", fix, {"keys": len(keys)})
    verb = "signs and verifies" if len(keys) == 1 else f"signs; all {len(keys)} verify"
    return Check(
        name,
        Status.OK,
        f"{source} holds {len(keys)} key(s): the first {verb}.",
        None,
        {"keys": len(keys)},
    )


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
