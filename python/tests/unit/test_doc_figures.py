"""Every benchmark figure README.md and docs/*.md quote equals the committed results, so none goes stale.

The committed results are the files in ``python/benchmarks/results/`` (``storage_benchmark.md``,
``long_runs.md``, ``unreachable_servers.md``). A document quotes them in one of three marked forms,
which render as nothing:

- a table: ``<!-- figures: FILE#SECTION -->``, a Markdown table, ``<!-- /figures -->``. Its header
  is some of the columns of one table in SECTION, in the same order, and each of its rows equals,
  in those columns, a row of that table (rows may be left out).
- a cell: ``<!-- figure: FILE#SECTION | ROW | COLUMN -->TEXT<!-- /figure -->``. ROW selects exactly
  one row of a table in SECTION that has COLUMN: either the row's first cell, or conditions
  ``column=value; column=value``. TEXT equals the cell, or the cell's text before its first space
  (``194.5`` for ``194.5 (994-1000)``).
- a list item: ``<!-- figure: FILE#SECTION | KEY -->TEXT<!-- /figure -->``. TEXT equals the value of
  the item ``- KEY: value`` in SECTION.

The multiplication sign in a document reads as the results' ``x``. SECTION is a heading's text,
or ``Parent > Child`` (the heading and its direct parents) where the text alone names more than
one heading; a section is the text under its heading up to the next heading.

Besides, README.md's Performance section and docs/performance.md quote no figure with a unit (the
multiplication sign, ``x``, ``ms``, ``µs``, ``%``) outside a marker, unless it is a target's bound
(after ``≤`` or ``<=``) or in code. Each check is a function returning the problems it finds; the tests assert
the real documents have none, and that a copy altered in each way is reported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[3]
RESULTS_DIR = REPOSITORY / "python" / "benchmarks" / "results"
README = REPOSITORY / "README.md"
PERFORMANCE_PAGE = REPOSITORY / "docs" / "performance.md"
DOCUMENTS = [README, *sorted((REPOSITORY / "docs").glob("*.md"))]
TIMES = "\N{MULTIPLICATION SIGN}"  # as the documents write a ratio; the results write "x"

_TABLE_QUOTE = re.compile(
    r"<!-- figures: (?P<source>[^#\s]+)#(?P<section>[^\n]+?) -->\n(?P<body>.*?)<!-- /figures -->", re.DOTALL
)
_FIGURE_QUOTE = re.compile(
    r"<!-- figure: (?P<source>[^#\s]+)#(?P<reference>[^\n]+?) -->(?P<text>[^\n]*?)<!-- /figure -->"
)
_ANY_MARKER = re.compile(r"<!-- /?figures?\b")
_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
_CODE_BLOCK = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_UNMARKED_FIGURE = re.compile(rf"(?<![\w.,])(\d[\d,]*(?:\.\d+)?) ?({TIMES}|x\b|ms\b|µs\b|%)")
_BOUND = re.compile(r"(\N{LESS-THAN OR EQUAL TO}|<=) ?$")


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Section:
    path: tuple[str, ...]  # the heading's text, after its parents'
    lines: tuple[str, ...]

    @property
    def tables(self) -> list[Table]:
        return parse_tables(self.lines)

    def __str__(self) -> str:
        return " > ".join(self.path)


def _cells(line: str) -> tuple[str, ...]:
    return tuple(cell.strip() for cell in line.strip().strip("|").split("|"))


def parse_tables(lines: tuple[str, ...] | list[str]) -> list[Table]:
    """The Markdown tables among ``lines``: runs of ``|`` lines, a header, a separator, rows."""
    tables: list[Table] = []
    run: list[str] = []
    for line in [*lines, ""]:
        if line.lstrip().startswith("|"):
            run.append(line)
            continue
        if len(run) >= 2 and set(run[1].replace("|", "").strip()) <= set("-: "):
            tables.append(Table(_cells(run[0]), tuple(_cells(row) for row in run[2:])))
        run = []
    return tables


def parse_sections(text: str) -> list[Section]:
    """Each heading's own text (up to the next heading), outside code blocks."""
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    lines: list[str] = []
    path: tuple[str, ...] = ()
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = None if in_code else _HEADING.match(line)
        if heading is None:
            lines.append(line)
            continue
        sections.append(Section(path, tuple(lines)))
        level = len(heading.group(1))
        stack = [(depth, title) for depth, title in stack if depth < level] + [(level, heading.group(2))]
        path, lines = tuple(title for _, title in stack), []
    sections.append(Section(path, tuple(lines)))
    return [section for section in sections if section.path]


def find_section(results: Mapping[str, str], source: str, reference: str) -> Section | str:
    """The one section ``reference`` names in results file ``source``, or why there is none."""
    if source not in results:
        return f"no results file {source!r} in {RESULTS_DIR.relative_to(REPOSITORY)} (have {sorted(results)})"
    wanted = tuple(part.strip() for part in reference.split(" > "))
    found = [section for section in parse_sections(results[source]) if section.path[-len(wanted) :] == wanted]
    if len(found) != 1:
        named = [str(section) for section in found]
        return f"{source}#{reference} names {len(found)} sections {named}; exactly one is needed"
    return found[0]


def _normalise(text: str) -> str:
    return text.strip().replace(TIMES, "x")


def _select_rows(table: Table, row: str) -> list[tuple[str, ...]]:
    if "=" not in row:
        return [cells for cells in table.rows if cells and cells[0] == row]
    conditions: list[tuple[int, str]] = []
    for condition in row.split(";"):
        column, _, value = condition.partition("=")
        if column.strip() not in table.header:
            return []
        conditions.append((table.header.index(column.strip()), value.strip()))
    return [cells for cells in table.rows if all(cells[index] == value for index, value in conditions)]


def cell_problem(section: Section, row: str, column: str, text: str) -> str | None:
    candidates = [
        (table, cells)
        for table in section.tables
        if column in table.header
        for cells in _select_rows(table, row)
    ]
    if len(candidates) != 1:
        found = len(candidates)
        return f"row {row!r} with column {column!r} matches {found} rows in {section}; exactly one is needed"
    table, cells = candidates[0]
    cell = cells[table.header.index(column)]
    if _normalise(text) not in (cell, cell.split(" ", 1)[0]):
        return f"quotes {text!r} for {section} | {row} | {column}, but the committed results say {cell!r}"
    return None


def item_problem(section: Section, key: str, text: str) -> str | None:
    values = [line.split(":", 1)[1].strip() for line in section.lines if line.startswith(f"- {key}:")]
    if len(values) != 1:
        return f"{len(values)} list items '- {key}: ...' in {section}; exactly one is needed"
    if _normalise(text) != values[0]:
        return f"quotes {text!r} for {section} | {key}, but the committed results say {values[0]!r}"
    return None


def table_problems(section: Section, body: str) -> list[str]:
    quoted = parse_tables(body.strip().splitlines())
    if len(quoted) != 1 or not quoted[0].rows:
        return [f"the quote of {section} is not one Markdown table with rows"]
    quote = quoted[0]
    for table in section.tables:
        if all(column in table.header for column in quote.header):
            indexes = [table.header.index(column) for column in quote.header]
            if indexes != sorted(indexes):
                continue
            projected = {tuple(cells[index] for index in indexes) for cells in table.rows}
            return [
                f"quotes the row {' | '.join(cells)} of {section}, which the committed results do not hold"
                for cells in quote.rows
                if tuple(_normalise(cell) for cell in cells) not in projected
            ]
    return [f"no table in {section} has the columns {list(quote.header)} in this order"]


def _blank(text: str, *patterns: re.Pattern[str]) -> str:
    """``text`` with what ``patterns`` match replaced by spaces, lines kept."""
    for pattern in patterns:
        text = pattern.sub(lambda match: re.sub(r"[^\n]", " ", match[0]), text)
    return text


def figure_problems(text: str, results: Mapping[str, str]) -> list[str]:
    """What a document quotes from the results and the results do not say, with the line of each.

    Markers in code (a block, or a span such as this module's syntax in docs/development.md) are text.
    """
    text = _blank(text, _CODE_BLOCK, _CODE_SPAN)
    problems: list[str] = []

    def at(position: int, problem: str) -> None:
        problems.append(f"line {text.count(chr(10), 0, position) + 1}: {problem}")

    consumed: list[tuple[int, int]] = []
    for match in _TABLE_QUOTE.finditer(text):
        consumed.append(match.span())
        section = find_section(results, match["source"], match["section"])
        if isinstance(section, str):
            at(match.start(), section)
            continue
        for problem in table_problems(section, match["body"]):
            at(match.start(), problem)
    for match in _FIGURE_QUOTE.finditer(text):
        consumed.append(match.span())
        reference, *selectors = (part.strip() for part in match["reference"].split(" | "))
        section = find_section(results, match["source"], reference)
        if isinstance(section, str):
            at(match.start(), section)
            continue
        wrong: str | None
        if len(selectors) == 2:
            wrong = cell_problem(section, selectors[0], selectors[1], match["text"])
        elif len(selectors) == 1:
            wrong = item_problem(section, selectors[0], match["text"])
        else:
            wrong = f"{match[0]!r} names neither 'ROW | COLUMN' nor 'KEY'"
        if wrong:
            at(match.start(), wrong)
    for match in _ANY_MARKER.finditer(text):
        if not any(start <= match.start() < end for start, end in consumed):
            marker = text[match.start() : match.start() + 60]
            at(match.start(), f"a malformed or unclosed figure marker: {marker!r}")
    return problems


def unmarked_figure_problems(text: str) -> list[str]:
    """Figures with a unit that no marker ties to the results (a target's bound and code excepted)."""
    text = _blank(text, _CODE_BLOCK, _CODE_SPAN, _TABLE_QUOTE, _FIGURE_QUOTE)
    return [
        f"line {text.count(chr(10), 0, match.start()) + 1}: {match[0]!r} is not marked as quoted from results"
        for match in _UNMARKED_FIGURE.finditer(text)
        if not _BOUND.search(text[max(0, match.start() - 3) : match.start()])
    ]


def readme_section(text: str, title: str) -> str:
    """The README's ``## title`` section, up to the next ``## `` heading."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _committed_results() -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(RESULTS_DIR.glob("*.md"))}


RESULTS = _committed_results()


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.relative_to(REPOSITORY).as_posix())
def test_quoted_figures_equal_the_committed_results(document: Path) -> None:
    assert figure_problems(document.read_text(encoding="utf-8"), RESULTS) == []


@pytest.mark.parametrize(
    ("document", "section"),
    [(README, "Performance"), (PERFORMANCE_PAGE, None)],
    ids=["README.md", "docs/performance.md"],
)
def test_performance_pages_quote_only_marked_figures(document: Path, section: str | None) -> None:
    text = document.read_text(encoding="utf-8")
    if section is not None:
        text = readme_section(text, section)
    assert _TABLE_QUOTE.search(text) or _FIGURE_QUOTE.search(text), f"{document.name} quotes no marked figure"
    assert unmarked_figure_problems(text) == []


# The checks themselves: each alteration of a real document must be reported.


def test_an_altered_figure_is_reported() -> None:
    text = README.read_text(encoding="utf-8")
    ratios = [match for match in _FIGURE_QUOTE.finditer(text) if match["text"].endswith(TIMES)]
    assert ratios, "README.md quotes no marked ratio"
    figure = ratios[0][0]
    stale = figure.replace(f"-->{ratios[0]['text']}<!--", f"-->9.99{TIMES}<!--")
    problems = figure_problems(text.replace(figure, stale, 1), RESULTS)
    assert len(problems) == 1, problems
    assert f"quotes '9.99{TIMES}'" in problems[0], problems
    assert "the committed results say" in problems[0], problems


def test_an_altered_table_row_is_reported() -> None:
    text = PERFORMANCE_PAGE.read_text(encoding="utf-8")
    quote = _TABLE_QUOTE.search(text)
    assert quote is not None
    last_row = quote["body"].strip().splitlines()[-1]
    altered_row = re.sub(r"\d+\.\d+", "0.01", last_row, count=1)
    assert altered_row != last_row, f"the row {last_row!r} holds no decimal figure to alter"
    problems = figure_problems(text.replace(last_row, altered_row, 1), RESULTS)
    assert len(problems) == 1, problems
    assert "do not hold" in problems[0], problems


def test_changed_results_are_reported() -> None:
    """A new benchmark run committed without the documents following it fails."""
    text = PERFORMANCE_PAGE.read_text(encoding="utf-8")
    rerun = {name: re.sub(r"\b0\.(\d\d)x\b", r"0.\1 x", result) for name, result in RESULTS.items()}
    assert figure_problems(text, rerun), "a re-run with different ratios went unnoticed"


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ("nowhere.md#Latency | load | ratio -->1", "no results file 'nowhere.md'"),
        ("storage_benchmark.md#Targets | target | ratio -->1", "names 2 sections"),
        ("storage_benchmark.md#Latency | messages=7 | client/file -->1", "0 rows"),
        ("storage_benchmark.md#Latency | messages=200 | client/file -->1", "4 rows"),
        ("storage_benchmark.md#Latency | messages=200; operation=load | client/file -->9x", "say '0."),
        ("long_runs.md#Long-run benchmark | CPUs -->3", "say '2'"),
        ("long_runs.md#Long-run benchmark | cores -->2", "0 list items"),
        ("long_runs.md#Long-run benchmark | a | b | c -->2", "names neither"),
    ],
)
def test_a_bad_marker_is_reported(marker: str, expected: str) -> None:
    problems = figure_problems(f"Some text <!-- figure: {marker}<!-- /figure --> more text.\n", RESULTS)
    assert len(problems) == 1, problems
    assert expected in problems[0], problems


def test_an_unclosed_marker_is_reported() -> None:
    problems = figure_problems(
        "It stores <!-- figure: long_runs.md#Long runs (issue 13) | x | y -->6.95x.\n", RESULTS
    )
    assert len(problems) == 1, problems
    assert "malformed or unclosed" in problems[0], problems


def test_an_unmarked_figure_is_reported() -> None:
    bound = f"\N{LESS-THAN OR EQUAL TO} 0.9{TIMES}"
    text = f"It stores 501{TIMES} that; a save costs 12.7 ms, 26 % more (save {bound}).\n"
    problems = unmarked_figure_problems(text)
    assert [problem.split("'")[1] for problem in problems] == [f"501{TIMES}", "12.7 ms", "26 %"], problems


def test_a_marker_in_code_is_not_a_quote() -> None:
    text = "Write `<!-- figure: FILE#SECTION | KEY -->TEXT<!-- /figure -->` before a figure.\n"
    assert figure_problems(text, RESULTS) == []
