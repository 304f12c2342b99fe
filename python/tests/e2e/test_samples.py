"""The samples run on the in-process engine and tell their story (skipped with MONGODB_URI set)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from types import ModuleType
from typing import cast

import pytest

SAMPLES = Path(__file__).resolve().parents[3] / "samples"

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("MONGODB_URI")), reason="the samples' engine path runs only without MONGODB_URI"
)


@pytest.fixture
def load_sample(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], ModuleType]]:
    """Import a sample by file name; it is registered in sys.modules so its classes can be loaded.

    The samples folder goes on sys.path, as running a sample puts it there, so a sample imports its
    application classes (samples/expense_models.py) by the name they are stored under.
    """
    monkeypatch.syspath_prepend(str(SAMPLES))
    loaded: list[str] = []

    def load(file_name: str) -> ModuleType:
        name = f"e2e_sample_{Path(file_name).stem}"
        spec = importlib.util.spec_from_file_location(name, SAMPLES / file_name)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loaded.append(name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in loaded:
        sys.modules.pop(name, None)


async def run_main(module: ModuleType) -> None:
    main = cast("Callable[[], Awaitable[None]]", module.main)
    await main()


def test_demo_pauses_in_one_process_and_resumes_in_another(
    load_sample: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    sample = load_sample("workflow_checkpoint_resume.py")
    main = cast("Callable[[], None]", sample.main)
    main()
    lines = capsys.readouterr().out.splitlines()
    said = [re.fullmatch(r"\[process (\d+)\] (.*)", line) for line in lines]
    assert all(said), lines
    pids = [int(match.group(1)) for match in said if match]
    text = [match.group(2) for match in said if match]
    assert "in-process engine" in text[0]
    assert "waits for a manager" in text[1]
    assert "Resuming from checkpoint" in text[3]
    assert text[4] == "Run finished: E-1001 (conference travel, $1,240.00): approved"
    assert text[5].startswith("Cleared the run's ")
    # This process started the demo; the run paused in a second process and resumed in a third.
    assert pids[0] == os.getpid()
    assert pids[1] == pids[2] != pids[0]
    assert pids[3] == pids[4] == pids[5] not in (pids[0], pids[1])
    assert len(lines) == 6


def test_demo_resume_without_a_paused_run_says_so(
    load_sample: Callable[[str], ModuleType], tmp_path: Path
) -> None:
    sample = load_sample("workflow_checkpoint_resume.py")
    resume = cast("Callable[[str], Coroutine[None, None, None]]", sample.resume)
    with pytest.raises(SystemExit, match="No paused run"):
        asyncio.run(resume(str(tmp_path / "empty.engine")))


async def test_index_provisioning_names_the_indexes(
    load_sample: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    await run_main(load_sample("index_provisioning.py"))
    out = capsys.readouterr().out
    assert "in-process engine" in out
    assert "checkpoint_scope_sequence" in out
    assert "Validated" in out


async def test_run_cleanup_reports_what_it_deleted(
    load_sample: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    await run_main(load_sample("run_cleanup.py"))
    out = capsys.readouterr().out
    assert "in-process engine" in out
    assert "Checkpoints left for run 'run-7': 0." in out
