"""Every ```python block in README.md and docs/*.md type-checks strictly and runs, or says why it does not.

Each document is checked on its own (the tests are parametrized over them; a document without a
``python`` block has nothing to check, but README.md must have blocks and at least one must run). A
block's first line decides what happens to it (README.md, Development, says the same):

- ``# file: <path>``: a module of the reader's application (``my_app/models.py``) that other
  blocks of the same document import. It is written to that path and type-checked; it is not run
  on its own.
- ``# not run: <reason>``: type-checked, not run, and the reason is required (a secret, a
  server). ``test_every_block_is_run_or_says_why`` lists these, so none is skipped silently.
- anything else: a complete script. It is type-checked, then run as ``__main__`` on the
  in-process engine: a storage it builds from ``connection_string=`` (or ``MONGODB_URI``) gets a
  client of one in-process engine per connection string, which outlives the storage's ``close()``,
  so a later storage on the same string sees what an earlier one saved. A ``print(...)  # text``
  line promises what the script prints: the test checks that ``text`` was printed.

Each block is its own module in a temporary folder of its document, and each document's blocks are
checked in one ``mypy --strict`` run and one strict ``pyright`` run, with this interpreter's
packages. A canary module with one known error goes along, so a checker that read nothing cannot
pass: the canary's error must be reported, and nothing else.
"""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_framework_mongodb.checkpoints import connection
from agent_framework_mongodb.testing import InMemoryMongoClient

REPOSITORY = Path(__file__).resolve().parents[3]
README = REPOSITORY / "README.md"
PYTHON_DIR = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
_FILE = re.compile(r"# file: ([A-Za-z_][A-Za-z0-9_]*(?:/[A-Za-z_][A-Za-z0-9_]*)*\.py)")
_NOT_RUN = re.compile(r"# not run: (\S.*)")
_PROMISED_OUTPUT = re.compile(r"^\s*print\(.*\)\s+# (.+)$", re.MULTILINE)
_CANARY = "readme_canary.py"
_CANARY_SOURCE = 'number: int = "not a number"\n'


@dataclass(frozen=True)
class Block:
    document: str  # the document's path from the repository root: README.md, docs/testing.md
    index: int
    line: int  # where the block's code starts in its document
    source: str

    @property
    def first_line(self) -> str:
        return self.source.split("\n", 1)[0]

    @property
    def module_path(self) -> str:
        """Where the block is written in its document's workspace."""
        declared = _FILE.fullmatch(self.first_line)
        return declared.group(1) if declared else f"{_prefix(self.document)}_block_{self.index:02d}.py"

    @property
    def runs(self) -> bool:
        return not (_FILE.fullmatch(self.first_line) or _NOT_RUN.fullmatch(self.first_line))

    def __str__(self) -> str:
        return f"{self.document} block {self.index} (line {self.line}, {self.module_path})"


def _prefix(document: str) -> str:
    """readme for README.md, docs_testing for docs/testing.md: a module name's start."""
    return re.sub(r"\W", "_", document.removesuffix(".md")).lower()


def _read_blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    document = path.relative_to(REPOSITORY).as_posix()
    return [
        Block(document, index, text.count("\n", 0, match.start(1)) + 1, match.group(1))
        for index, match in enumerate(_BLOCK.finditer(text), start=1)
    ]


DOCUMENTS = {
    path.relative_to(REPOSITORY).as_posix(): _read_blocks(path)
    for path in [README, *sorted((REPOSITORY / "docs").glob("*.md"))]
}
CHECKED_DOCUMENTS = [document for document, blocks in DOCUMENTS.items() if blocks]
RUNNING_BLOCKS = [block for blocks in DOCUMENTS.values() for block in blocks if block.runs]


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per document, every block as a module, plus the canary, in one folder."""
    roots: dict[str, Path] = {}
    for document in CHECKED_DOCUMENTS:
        root = roots[document] = tmp_path_factory.mktemp(_prefix(document) + "_blocks")
        for block in DOCUMENTS[document]:
            path = root / block.module_path
            path.parent.mkdir(parents=True, exist_ok=True)
            for package in path.relative_to(root).parents:
                if package != Path():
                    (root / package / "__init__.py").touch()
            path.write_text(block.source, encoding="utf-8")
        (root / _CANARY).write_text(_CANARY_SOURCE, encoding="utf-8")
    return roots


def _checked_files(document: str) -> list[str]:
    return [block.module_path for block in DOCUMENTS[document]] + [_CANARY]


def test_the_readme_has_blocks_that_run() -> None:
    blocks = DOCUMENTS["README.md"]
    assert blocks, "README.md has no ```python block"
    assert any(block.runs for block in blocks), "no README block runs"


@pytest.mark.parametrize("document", list(DOCUMENTS))
def test_every_block_is_run_or_says_why(document: str) -> None:
    blocks = DOCUMENTS[document]
    paths = [block.module_path for block in blocks]
    assert len(set(paths)) == len(paths), f"two blocks of {document} declare the same file: {paths}"
    for block in blocks:
        comment = block.first_line
        if comment.startswith(("# file:", "# not run")):
            assert _FILE.fullmatch(comment) or _NOT_RUN.fullmatch(comment), (
                f"{block}: malformed first line {comment!r}; use '# file: pkg/module.py' or "
                "'# not run: <reason>'"
            )
    not_run = {str(block): block.first_line for block in blocks if _NOT_RUN.fullmatch(block.first_line)}
    print(f"{document} blocks type-checked but not run: {not_run}")


RUNNING_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
"""The blocks are checked for the interpreter that runs them, against the framework installed for it:
agent-framework-core 1.26 needs Python 3.11 and imports ``typing.Never``, which a check for 3.10 reads as
unknown. CI's run on Python 3.10 (with the oldest supported dependencies) checks them for 3.10."""


@pytest.mark.parametrize("document", CHECKED_DOCUMENTS)
def test_blocks_pass_mypy_strict(document: str, workspaces: dict[str, Path]) -> None:
    completed = subprocess.run(  # noqa: S603 - this interpreter, fixed arguments
        [
            sys.executable, "-m", "mypy", "--strict", "--python-version", RUNNING_PYTHON, "--config-file", "",
            "--cache-dir", str(PYTHON_DIR / ".mypy_cache" / "readme_blocks"), "--no-error-summary",
            *_checked_files(document),
        ],
        cwd=workspaces[document], capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    errors = [line for line in completed.stdout.splitlines() if ": error:" in line]
    canary = [line for line in errors if line.startswith(_CANARY)]
    assert canary, f"mypy did not report the canary's error, so it checked nothing:\n{completed.stdout}"
    assert errors == canary, _explain(document, "mypy --strict", completed.stdout + completed.stderr)


@pytest.mark.parametrize("document", CHECKED_DOCUMENTS)
def test_blocks_pass_pyright_strict(document: str, workspaces: dict[str, Path]) -> None:
    workspace = workspaces[document]
    config = {"typeCheckingMode": "strict", "pythonVersion": RUNNING_PYTHON, "include": ["."]}
    (workspace / "pyrightconfig.json").write_text(json.dumps(config), encoding="utf-8")
    completed = subprocess.run(  # noqa: S603 - this interpreter, fixed arguments
        [
            sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable,
            "--project", str(workspace / "pyrightconfig.json"),
        ],
        cwd=workspace, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    try:
        report = json.loads(completed.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright did not report:\n{completed.stdout}\n{completed.stderr}")
    errors = [
        f"{Path(item['file']).relative_to(workspace)}:{item['range']['start']['line'] + 1}: {item['message']}"
        for item in report["generalDiagnostics"]
        if item["severity"] == "error"
    ]
    canary = [error for error in errors if error.startswith(_CANARY)]
    assert canary, f"pyright did not report the canary's error, so it checked nothing:\n{completed.stdout}"
    assert errors == canary, _explain(document, "pyright (strict)", "\n".join(errors))


def _explain(document: str, checker: str, output: str) -> str:
    where = ", ".join(f"{block.module_path} = {block}" for block in DOCUMENTS[document])
    return f"a block of {document} fails {checker} ({_CANARY}'s one error is expected; {where}):\n{output}"


class _SharedEngineClient:
    """An owned client for a storage: the shared engine, which the storage's close() leaves open."""

    def __init__(self, engine: InMemoryMongoClient) -> None:
        self._engine = engine

    def __getitem__(self, name: str) -> Any:
        return self._engine[name]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def close(self) -> None:
        return None


@pytest.fixture
def engines_by_connection_string(monkeypatch: pytest.MonkeyPatch) -> dict[str, InMemoryMongoClient]:
    engines: dict[str, InMemoryMongoClient] = {}

    def create_owned_client(connection_string: str) -> Any:
        return _SharedEngineClient(engines.setdefault(connection_string, InMemoryMongoClient()))

    monkeypatch.setattr(connection, "create_owned_client", create_owned_client)
    return engines


@pytest.mark.parametrize("block", RUNNING_BLOCKS, ids=str)
def test_block_runs_on_the_in_process_engine(
    block: Block,
    workspaces: dict[str, Path],
    engines_by_connection_string: dict[str, InMemoryMongoClient],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    workspace = workspaces[block.document]
    monkeypatch.syspath_prepend(str(workspace))
    modules_before = set(sys.modules)
    try:
        runpy.run_path(str(workspace / block.module_path), run_name="__main__")
    finally:
        # The reader's modules (my_app, ...) came from the workspace; later tests must not see them.
        for name in set(sys.modules) - modules_before:
            module_file = getattr(sys.modules[name], "__file__", None) or ""
            if module_file.startswith(str(workspace)):
                del sys.modules[name]
    printed = capsys.readouterr().out
    for promised in _PROMISED_OUTPUT.findall(block.source):
        assert promised in printed, f"{block} promises to print {promised!r}; it printed:\n{printed}"
