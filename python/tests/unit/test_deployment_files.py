"""The files that run the integration suite against a real server: ``compose.yaml`` and the workflow.

Neither can run here (no Docker, no network, no MongoDB server), so these tests check what can be
checked without one: both parse as YAML and have the structure docs/development.md and
docs/deployment.md describe. Each check is a function returning the problems it finds; the tests
assert the real files have none, and that a copy broken in each way is reported, so no check
passes vacuously.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

REPOSITORY = Path(__file__).resolve().parents[3]
PYTHON_PROJECT = REPOSITORY / "python"
COMPOSE_FILE = REPOSITORY / "compose.yaml"
WORKFLOW_FILE = REPOSITORY / ".github" / "workflows" / "integration.yml"

SERVER_VERSIONS = ["5.0", "6.0", "7.0", "8.0"]
REPLICA_SET = "rs0"
SUITE_COMMAND = re.compile(r"uv run --directory python pytest (?P<path>\S+)")


def _load(path: Path) -> Any:
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _words(command: object) -> list[str]:
    """A command given as a YAML list or as one string, as separate words."""
    if isinstance(command, list):
        return [str(word) for word in command]
    if isinstance(command, str):
        return command.split()
    return []


def _replica_set_name(words: list[str]) -> str | None:
    if "--replSet" in words and words.index("--replSet") + 1 < len(words):
        return words[words.index("--replSet") + 1]
    return None


def _uri_problems(uri: object) -> list[str]:
    if not isinstance(uri, str):
        return ["MONGODB_URI is not set"]
    parts = urlsplit(uri)
    query = parse_qs(parts.query)
    problems: list[str] = []
    if parts.scheme != "mongodb" or parts.netloc != "localhost:27017":
        problems.append("MONGODB_URI does not name mongodb://localhost:27017")
    if query.get("replicaSet") != [REPLICA_SET]:
        problems.append(f"MONGODB_URI does not name replica set {REPLICA_SET}")
    if query.get("directConnection") != ["true"]:
        problems.append("MONGODB_URI does not connect directly")
    return problems


def compose_problems(document: Any) -> list[str]:
    """What is missing from a compose file meant to start MongoDB 8 as a replica set."""
    if not isinstance(document, dict) or not isinstance(document.get("services"), dict):
        return ["no services"]
    services = [service for service in document["services"].values() if isinstance(service, dict)]
    mongo = [service for service in services if re.fullmatch(r"mongo:8(\.\d+)*", str(service.get("image")))]
    if len(mongo) != 1:
        return ["no single service with a mongo:8 image"]
    service = mongo[0]
    problems: list[str] = []
    if _replica_set_name(_words(service.get("command"))) != REPLICA_SET:
        problems.append(f"mongod is not started with --replSet {REPLICA_SET}")
    if "27017:27017" not in [str(port) for port in service.get("ports") or []]:
        problems.append("port 27017 is not published")
    healthcheck = service.get("healthcheck")
    test = " ".join(_words(healthcheck.get("test"))) if isinstance(healthcheck, dict) else ""
    if "rs.initiate" not in test or f"'{REPLICA_SET}'" not in test:
        problems.append("the healthcheck does not initiate the replica set")
    if "isWritablePrimary" not in test:
        problems.append("the healthcheck does not wait for a writable primary")
    return problems


def workflow_problems(document: Any) -> list[str]:
    """What is missing from a workflow meant to run the integration suite on every server version."""
    if not isinstance(document, dict) or not isinstance(document.get("jobs"), dict):
        return ["no jobs"]
    # PyYAML reads the bare key `on` as the boolean True (YAML 1.1).
    problems: list[str] = [] if ("on" in document or True in document) else ["no trigger (on:)"]
    jobs = [job for job in document["jobs"].values() if isinstance(job, dict)]
    matrixed = [job for job in jobs if isinstance((job.get("strategy") or {}).get("matrix"), dict)]
    if len(matrixed) != 1:
        return [*problems, "no single job with a matrix"]
    job = matrixed[0]
    versions = job["strategy"]["matrix"].get("mongodb")
    if versions != SERVER_VERSIONS:
        problems.append(f"the matrix lists {versions!r}, not exactly {SERVER_VERSIONS}")
    steps = [step for step in job.get("steps") or [] if isinstance(step, dict)]
    environment: dict[str, Any] = dict(job.get("env") or {})
    for step in steps:
        environment.update(step.get("env") or {})
    problems.extend(_uri_problems(environment.get("MONGODB_URI")))
    scripts = [str(step.get("run", "")) for step in steps]
    server = [script for script in scripts if "docker run" in script]
    if not server or "mongo:${{ matrix.mongodb }}" not in server[0]:
        problems.append("no step starts the matrix's mongo image")
    elif _replica_set_name(server[0].replace("\\\n", " ").split()) != REPLICA_SET:
        problems.append(f"the server is not started with --replSet {REPLICA_SET}")
    elif "rs.initiate" not in server[0]:
        problems.append("the replica set is never initiated")
    if not any("pip install uv" in script for script in scripts):
        problems.append("uv is not installed with pip")
    suites = [match for script in scripts if (match := SUITE_COMMAND.search(script))]
    if not suites:
        problems.append("no step runs pytest with uv run --directory python")
    elif not (PYTHON_PROJECT / suites[0]["path"] / "conftest.py").is_file():
        problems.append(f"the suite path {suites[0]['path']!r} is not a test directory under python/")
    elif Path(suites[0]["path"]).as_posix() != "tests/integration_persistence":
        problems.append("the step does not run the integration suite")
    return problems


def test_compose_file_starts_mongodb_8_as_a_replica_set() -> None:
    assert compose_problems(_load(COMPOSE_FILE)) == []


def test_workflow_runs_the_integration_suite_on_every_supported_server() -> None:
    assert workflow_problems(_load(WORKFLOW_FILE)) == []


def test_both_files_name_the_replica_set_the_uri_names() -> None:
    compose = _load(COMPOSE_FILE)
    workflow = _load(WORKFLOW_FILE)
    (service,) = compose["services"].values()
    (job,) = workflow["jobs"].values()
    uri_set = parse_qs(urlsplit(job["env"]["MONGODB_URI"]).query)["replicaSet"]
    assert _replica_set_name(_words(service["command"])) == uri_set[0] == REPLICA_SET


def _compose_without(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    document: dict[str, Any] = copy.deepcopy(_load(COMPOSE_FILE))
    change(document["services"]["mongodb"])
    return document


def _set(mapping: dict[str, Any], key: str, value: object) -> None:
    mapping[key] = value


COMPOSE_BREAKAGES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "older image": (lambda service: _set(service, "image", "mongo:7.0"), "mongo:8"),
    "standalone": (lambda service: _set(service, "command", ["--bind_ip_all"]), "--replSet"),
    "other set name": (lambda service: _set(service, "command", ["--replSet", "rs1"]), "--replSet"),
    "no port": (lambda service: _set(service, "ports", ["27018:27017"]), "port 27017"),
    "no healthcheck": (lambda service: service.pop("healthcheck"), "initiate"),
    "ping only": (
        lambda service: _set(service, "healthcheck", {"test": ["CMD", "mongosh", "--eval", "db.ping()"]}),
        "writable primary",
    ),
}


@pytest.mark.parametrize("breakage", sorted(COMPOSE_BREAKAGES))
def test_each_compose_check_can_fail(breakage: str) -> None:
    change, expected = COMPOSE_BREAKAGES[breakage]
    problems = compose_problems(_compose_without(change))
    assert any(expected in problem for problem in problems), problems


def _workflow_without(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    document: dict[str, Any] = copy.deepcopy(_load(WORKFLOW_FILE))
    (job,) = document["jobs"].values()
    change(job)
    return document


def _edit_runs(job: dict[str, Any], old: str, new: str) -> None:
    for step in job["steps"]:
        if "run" in step:
            step["run"] = step["run"].replace(old, new)


def _set_matrix(job: dict[str, Any], versions: object) -> None:
    job["strategy"]["matrix"]["mongodb"] = versions


WORKFLOW_BREAKAGES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "missing version": (lambda job: _set_matrix(job, ["6.0", "7.0", "8.0"]), "matrix"),
    "extra version": (lambda job: _set_matrix(job, [*SERVER_VERSIONS, "4.4"]), "matrix"),
    "unquoted versions": (lambda job: _set_matrix(job, [5.0, 6.0, 7.0, 8.0]), "matrix"),
    "no uri": (lambda job: job.pop("env"), "MONGODB_URI is not set"),
    "uri without set": (
        lambda job: _set(job, "env", {"MONGODB_URI": "mongodb://localhost:27017/?directConnection=true"}),
        "replica set",
    ),
    "standalone": (lambda job: _edit_runs(job, "--replSet rs0", ""), "--replSet"),
    "never initiated": (lambda job: _edit_runs(job, "rs.initiate", "rs.conf"), "initiated"),
    "fixed image": (lambda job: _edit_runs(job, "mongo:${{ matrix.mongodb }}", "mongo:8.0"), "image"),
    "no uv": (lambda job: _edit_runs(job, "pip install uv", "pip install pytest"), "uv is not installed"),
    "missing path": (
        lambda job: _edit_runs(job, "tests/integration_persistence", "tests/integration"),
        "not a test directory",
    ),
    "unit suite": (lambda job: _edit_runs(job, "tests/integration_persistence", "tests/unit"), "integration"),
    "no suite": (lambda job: _edit_runs(job, "uv run --directory python pytest", "uv run pytest"), "pytest"),
}


@pytest.mark.parametrize("breakage", sorted(WORKFLOW_BREAKAGES))
def test_each_workflow_check_can_fail(breakage: str) -> None:
    change, expected = WORKFLOW_BREAKAGES[breakage]
    problems = workflow_problems(_workflow_without(change))
    assert any(expected in problem for problem in problems), problems


def test_a_workflow_without_trigger_or_jobs_is_reported() -> None:
    document = _load(WORKFLOW_FILE)
    document.pop(True, None)
    document.pop("on", None)
    assert "no trigger (on:)" in workflow_problems(document)
    assert workflow_problems({"name": "empty"}) == ["no jobs"]
    assert compose_problems({"services": None}) == ["no services"]
