"""The conformance reports (harness/reports.py) on synthetic summaries.

* Every renderer puts each clause x engine status in its place.
* The HTML page's links resolve: every ``href="#x"`` has an ``id="x"``, ids are unique.
* Hostile names (``<``, ``&``, quotes, control characters) are escaped, never markup.
* The JUnit XML parses and its counts match its test cases.
* A summary of the older format (no format, clauses, failed_clauses, expectations) renders.
* summary_from_cases turns the command-line tool's case outcomes into the same schema.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.clauses import Clause
from harness.reports import FORMAT, STATUSES, html, junit_xml, markdown, summary_from_cases, write_reports
from harness.vector_check import CaseOutcome
from harness.vectors import ExpectedError, Vector

pytestmark = pytest.mark.oracle_alone  # no Spark: it may run beside the Spark pre-run

ROOT = Path(__file__).resolve().parent.parent

HOSTILE_ENGINE = 'pkg.<mod>:E&"x"'
HOSTILE_TITLE = '<script>alert("t")</script> & co'
HOSTILE_TEST = '<img src=x onerror="boom()"> & "quoted"'


def _row(clause: str, title: str, file: str, engine: str, status: str, **counts: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        "clause": clause,
        "title": title,
        "spec_file": file,
        "engine": engine,
        "status": status,
        "scenarios_passed": 0,
        "scenarios_failed": 0,
        "properties_passed": 0,
        "properties_failed": 0,
        "known_deviations": 0,
        "xfailed": 0,
        "oracle_only": 0,
        "skipped": 0,
        "scenarios": [],
        "properties": [],
    }
    row.update(counts)
    return row


def _test(nodeid: str, name: str, engine: str, clauses: list[str], outcome: str, **kw: Any) -> dict[str, Any]:
    failed = clauses if outcome in ("failed", "deviation") else []
    return {
        "nodeid": nodeid,
        "name": name,
        "engine": engine,
        "kind": kw.get("kind", "scenario"),
        "clauses": clauses,
        "failed_clauses": kw.get("failed_clauses", failed),
        "outcome": outcome,
        "detail": kw.get("detail", ""),
    }


CLAUSES = [
    ("F065-R7", "All keys idle", "keyed_watermarks.md"),
    ("F065-R21", "Windows fire at the key's watermark", "keyed_watermarks.md"),
    ("F065-R22", "Segments", "keyed_watermarks.md"),
    ("OXL-R3", HOSTILE_TITLE, "late_data.md"),
    ("OXL-R4", "Side outputs", "late_data.md"),
    ("TR-6", "Configuration errors", "traces.md"),
]

# (clause, engine) -> the status the summary gives
EXPECTED = {
    ("F065-R7", "reference"): "ok",
    ("F065-R7", "spark"): "FAIL",
    ("F065-R7", HOSTILE_ENGINE): "untested",
    ("F065-R21", "reference"): "ok",
    ("F065-R21", "spark"): "deviation",
    ("F065-R21", HOSTILE_ENGINE): "untested",
    ("F065-R22", "reference"): "ok",
    ("F065-R22", "spark"): "unexpected-pass",
    ("F065-R22", HOSTILE_ENGINE): "untested",
    ("OXL-R3", "reference"): "xfail",
    ("OXL-R3", "spark"): "oracle-only",
    ("OXL-R3", HOSTILE_ENGINE): "FAIL",
    ("OXL-R4", "reference"): "untested",
    ("OXL-R4", "spark"): "untested",
    ("OXL-R4", HOSTILE_ENGINE): "untested",
    ("TR-6", "reference"): "ok",
    ("TR-6", "spark"): "ok",  # a failure tagged TR-6 is charged to F065-R7 only
    ("TR-6", HOSTILE_ENGINE): "untested",
}

DETAIL = "AssertionError: windows differ\n" + "\n".join(f"line {i}" for i in range(2, 20))


def new_summary() -> dict[str, Any]:
    engines = ["reference", "spark", HOSTILE_ENGINE]
    tests = [
        _test("features/k.py::test_idle[reference]", "All keys idle", "reference", ["F065-R7"], "passed"),
        _test(
            "features/k.py::test_idle[spark]",
            "All keys idle",
            "spark",
            ["F065-R7", "TR-6"],
            "failed",
            failed_clauses=["F065-R7"],
            detail=DETAIL,
        ),
        _test("features/k.py::test_fire[reference]", "Fire", "reference", ["F065-R21"], "passed"),
        _test(
            "features/k.py::test_fire[spark]",
            "Fire",
            "spark",
            ["F065-R21"],
            "deviation",
            detail="known deviation, clause F065-R21: fires one batch late (https://example.org/i/12)",
        ),
        _test("features/k.py::test_seg[reference]", "Segments", "reference", ["F065-R22"], "passed"),
        _test("features/k.py::test_seg[spark]", "Segments", "spark", ["F065-R22"], "unexpected-pass"),
        _test(
            "features/l.py::test_x[reference]",
            HOSTILE_TEST,
            "reference",
            ["OXL-R3"],
            "xfailed",
            detail="not yet \x1b[31mred\x1b[0m\x07",
        ),
        _test(
            "features/l.py::test_x[spark]",
            HOSTILE_TEST,
            "spark",
            ["OXL-R3"],
            "oracle-only",
            detail="API-level",
        ),
        _test(
            f"features/l.py::test_x[{HOSTILE_ENGINE}]",
            HOSTILE_TEST,
            HOSTILE_ENGINE,
            ["OXL-R3"],
            "failed",
            detail='<b>bad</b> & "worse" ]]> \x00',
        ),
        _test(
            "properties/p.py::test_cfg[reference]",
            "test_cfg",
            "reference",
            ["TR-6"],
            "passed",
            kind="property",
        ),
        _test("properties/p.py::test_cfg[spark]", "test_cfg", "spark", ["TR-6"], "passed", kind="property"),
        _test(
            "properties/p.py::test_skip[spark]", "test_skip", "spark", ["OXL-R4"], "skipped", kind="property"
        ),
    ]
    rows = [_row(c, t, f, e, EXPECTED[(c, e)]) for c, t, f in CLAUSES for e in engines]
    return {
        "format": FORMAT,
        "generated": "2026-11-26T16:00:00+0000",
        "profile": "ci",
        "seed": 0,
        "engines": [
            {"id": "reference", "description": "the oracle"},
            {"id": "spark"},
            {"id": HOSTILE_ENGINE, "description": "a <third> party's & engine"},
        ],
        "clauses": [
            {
                "id": c,
                "title": t,
                "file": f,
                "text": f"The text of {c}: `code` and **bold** <tags> & more.\n\n- a\n- b\n\n"
                "| k | <v> |\n|---|---|\n| 1 | `<i>` |",
            }
            for c, t, f in CLAUSES
        ],
        "rows": rows,
        "tests": tests,
        "expectations": [
            {
                "engine": "spark",
                "file": "expectations/spark.toml",
                "entries": [
                    {
                        "clause": "F065-R21",
                        "reason": "fires one batch late",
                        "link": "https://example.org/i/12",
                        "status": "applied",
                        "tests": ["features/k.py::test_fire[spark]"],
                    },
                    {
                        "scenario": "Segments",
                        "reason": "was slow",
                        "link": "",
                        "status": "unexpected-pass",
                        "tests": ["features/k.py::test_seg[spark]"],
                    },
                    {
                        "clause": "F065-R99",
                        "reason": "stale <entry>",
                        "link": "javascript:alert(1)",
                        "status": "matches nothing",
                        "tests": [],
                    },
                ],
                "problems": ["entry 4: give exactly one of 'clause' or 'scenario' & <more>"],
            }
        ],
        "clause_tag_problems": ["features/x.py::test_y: names no clause"],
        "generator_coverage": {},
    }


def old_summary() -> dict[str, Any]:
    """The first format: no format, clauses, failed_clauses or expectations."""
    s = new_summary()
    for key in ("format", "clauses", "expectations"):
        del s[key]
    for t in s["tests"]:
        del t["failed_clauses"]
    s["engines"] = [{"id": e["id"], "engine_run_calls": 1} for e in s["engines"]]
    s["clause_tag_problems"] = []
    s["spec_found"] = True
    return s


# ---- HTML helpers ------------------------------------------------------------------------------


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.hrefs: list[str] = []
        self.cells: dict[tuple[str, str], tuple[str, str]] = {}  # (clause, engine) -> (status, href)
        self.tags: list[str] = []
        self._cell: tuple[str, str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "a" and a.get("href", "").startswith("#"):
            self.hrefs.append(a["href"][1:])
        if tag == "td" and "data-clause" in a:
            self._cell = (a["data-clause"], a["data-engine"], a["data-status"])
        if tag == "a" and self._cell is not None:
            clause, engine, status = self._cell
            self.cells[(clause, engine)] = (status, a["href"][1:])
            self._cell = None


def parse_page(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    return page


# ---- Markdown ----------------------------------------------------------------------------------


def _md_cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _md_matrix(text: str) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    engines: list[str] = []
    for line in text.split("\n## Engine")[0].splitlines():
        if line.startswith("| clause |"):
            engines = _md_cells(line)[1:]
        elif line.startswith("| **"):
            cells = _md_cells(line)
            clause = re.match(r"\*\*(.+?)\*\*", cells[0])
            assert clause, line
            for engine, status in zip(engines, cells[1:], strict=True):
                out[(clause.group(1), engine)] = status
    return out


def _md_unescape(text: str) -> str:
    text = re.sub(r"\\(.)", r"\1", text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def test_markdown_puts_each_status_in_its_cell() -> None:
    text = markdown(new_summary())
    matrix = {(c, _md_unescape(e)): s for (c, e), s in _md_matrix(text).items()}
    assert matrix == EXPECTED


def test_markdown_engine_sections() -> None:
    text = markdown(new_summary())
    spark = text.split("## Engine `spark`")[1].split("\n## ")[0]
    failing = spark.split("### Failing clauses")[1].split("\n### ")[0]
    assert "F065-R7 All keys idle" in failing
    assert "`features/k.py::test_idle[spark]`" in failing
    assert "AssertionError: windows differ" in failing
    assert "line 19" not in failing  # only the first lines of a detail
    assert "\n  line 8\n" in failing  # indented under its list item
    assert "TR-6" not in failing  # the failure is charged to F065-R7 only
    assert "fires one batch late ([https://example.org/i/12](https://example.org/i/12))" in spark
    assert "### Unexpected passes" in spark and "F065-R22" in spark.split("### Unexpected passes")[1]
    problems = spark.split("### Expectation problems")[1]
    assert "F065-R99" in problems and "matches no test" in problems
    assert "give exactly one of" in problems
    assert "OXL-R4" in spark.split("### Untested clauses")[1]
    assert "names no clause" in text


def test_markdown_escapes_hostile_text() -> None:
    text = markdown(new_summary())
    # outside code (where Markdown shows text as it is) no markup survives
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    prose = re.sub(r"(`+).*?\1", "", prose)
    assert "<script>" not in prose and "<img" not in prose and "<b>" not in prose
    assert '<b>bad</b> & "worse"' in text  # shown as it is, in a code block
    assert "&lt;script&gt;" in text
    assert "\x1b" not in text and "\x00" not in text and "\x07" not in text
    for line in text.splitlines():
        if line.startswith("| **"):
            assert len(_md_cells(line)) == 4, line  # a | in a name does not add a column


# ---- HTML --------------------------------------------------------------------------------------


def test_html_puts_each_status_in_its_cell() -> None:
    page = parse_page(html(new_summary()))
    assert {k: v[0] for k, v in page.cells.items()} == EXPECTED


def test_html_links_resolve_and_ids_are_unique() -> None:
    text = html(new_summary())
    page = parse_page(text)
    assert len(page.ids) == len(set(page.ids))
    missing = set(page.hrefs) - set(page.ids)
    assert not missing
    # every cell links to its own section, every clause id to the clause's text
    targets = [href for _, href in page.cells.values()]
    assert len(set(targets)) == len(EXPECTED)
    for c, _, _ in CLAUSES:
        assert f"The text of {c}" in text
    assert "matrix-table" in page.ids


def _cell_section(text: str, href: str) -> str:
    start = text.index(f'id="{href}"')
    ends = [text.find(marker, start + 1) for marker in ('<div class="cell', "</section>")]
    return text[start : min(e for e in ends if e > 0)]


def test_html_cell_section_lists_the_tests_of_that_engine() -> None:
    text = html(new_summary())
    page = parse_page(text)
    _, href = page.cells[("F065-R7", "spark")]
    section = _cell_section(text, href)
    assert "test_idle[spark]" in section and "test_idle[reference]" not in section
    assert "<details>" in section and "line 19" in section  # the whole detail, folded
    _, href = page.cells[("TR-6", "spark")]
    section = _cell_section(text, href)
    assert "failed (charged to F065-R7)" in section


def test_html_escapes_hostile_text_and_stays_self_contained() -> None:
    text = html(new_summary())
    page = parse_page(text)
    assert "script" not in page.tags and "img" not in page.tags and "b" not in page.tags
    assert "<script" not in text and "<img" not in text
    assert "<th>&lt;v&gt;</th>" in text and "<code>&lt;i&gt;</code>" in text  # a clause text's table
    assert "&lt;script&gt;alert(&quot;t&quot;)&lt;/script&gt;" in text
    assert "javascript:" not in re.findall(r'href="([^"]*)"', text).__str__()
    assert not re.search(r'(src|href)="(https?:)?//', text.replace('href="https://example.org/i/12"', ""))
    assert "\x1b" not in text and "\x00" not in text
    assert 'data-engine="pkg.&lt;mod&gt;:E&amp;&quot;x&quot;"' in text
    for word in STATUSES:
        assert word in text  # the legend


def test_html_shows_run_totals_and_expectations() -> None:
    text = html(new_summary())
    assert "generated 2026-11-26T16:00:00+0000, profile ci, seed 0" in text.replace("Generated", "generated")
    assert "fires one batch late" in text and "matches nothing" in text
    assert "give exactly one of" in text and "names no clause" in text
    assert '<a href="https://example.org/i/12"' in text


# ---- JUnit XML ---------------------------------------------------------------------------------


def test_junit_counts_and_cases() -> None:
    root = ET.fromstring(junit_xml(new_summary()))
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["reference", "spark", HOSTILE_ENGINE]
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for engine, suite in suites.items():
        cases = suite.findall("testcase")
        failures = [c for c in cases if c.find("failure") is not None]
        skipped = [c for c in cases if c.find("skipped") is not None]
        assert suite.get("tests") == str(len(cases)) == str(len(CLAUSES))
        assert suite.get("failures") == str(len(failures))
        assert suite.get("skipped") == str(len(skipped))
        assert suite.get("errors") == "0"
        for key, n in (("tests", len(cases)), ("failures", len(failures)), ("skipped", len(skipped))):
            totals[key] += n
        for case in cases:
            clause = str(case.get("name")).split(" ")[0]
            status = EXPECTED[(clause, str(engine))]
            file = next(f for c, _, f in CLAUSES if c == clause)
            assert case.get("classname") == f"{engine}.{Path(file).stem}"
            if status in ("FAIL", "unexpected-pass"):
                assert case.find("failure") is not None
            elif status == "ok":
                assert len(case) == 0
            else:
                assert case.find("skipped") is not None
    for key, n in totals.items():
        assert root.get(key) == str(n)


def test_junit_failure_text_and_hostile_names() -> None:
    root = ET.fromstring(junit_xml(new_summary()))
    spark = root.find("testsuite[@name='spark']")
    assert spark is not None
    case = spark.find("testcase[@name='F065-R7 All keys idle']")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None and "All keys idle" in str(failure.get("message"))
    assert "features/k.py::test_idle[spark]" in str(failure.text)
    cases = {c.get("name"): c for c in spark.iter("testcase")}
    dev = cases["F065-R21 Windows fire at the key's watermark"].find("skipped")
    assert dev is not None and "fires one batch late" in str(dev.get("message"))
    hostile = root.find(f"testsuite[@name='{HOSTILE_ENGINE}']")
    assert hostile is not None
    case = {c.get("name"): c for c in hostile.iter("testcase")}[f"OXL-R3 {HOSTILE_TITLE}"]
    failure = case.find("failure")
    assert failure is not None and '<b>bad</b> & "worse" ]]>' in str(failure.text)


# ---- the older format, files, the command-line runs ---------------------------------------------


def test_old_format_renders() -> None:
    old = old_summary()
    page = parse_page(html(old))
    assert {k: v[0] for k, v in page.cells.items()} == EXPECTED
    assert not set(page.hrefs) - set(page.ids)
    matrix = {(c, _md_unescape(e)): s for (c, e), s in _md_matrix(markdown(old)).items()}
    assert matrix == EXPECTED
    root = ET.fromstring(junit_xml(old))
    assert root.get("tests") == str(len(EXPECTED))
    # without failed_clauses a failure counts against every clause it names
    text = html(old)
    assert "charged to" not in text


def test_old_format_without_rows_derives_statuses_from_tests() -> None:
    s = old_summary()
    del s["rows"]
    page = parse_page(html(s))
    got = {k: v[0] for k, v in page.cells.items()}
    assert got[("F065-R7", "spark")] == "FAIL"
    assert got[("TR-6", "spark")] == "FAIL"  # failed_clauses defaults to clauses
    assert got[("F065-R21", "spark")] == "deviation"
    assert got[("OXL-R3", "reference")] == "xfail"
    assert got[("OXL-R4", "spark")] == "untested"
    ET.fromstring(junit_xml(s))
    markdown(s)


def test_empty_summary_renders() -> None:
    for render in (markdown, html, junit_xml):
        assert render({})
    assert ET.fromstring(junit_xml({})).get("tests") == "0"


def test_a_real_runs_summary_renders(tmp_path: Path) -> None:
    """A pytest run of one area on the oracle writes the summary and the three reports beside it."""
    report = tmp_path / "conformance.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "features/test_late_data.py", "--engine", "reference", "-q",
         "-p", "no:cacheprovider", "--conformance-report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(report.read_text(encoding="utf-8"))
    page = parse_page((tmp_path / "conformance.html").read_text(encoding="utf-8"))
    assert not set(page.hrefs) - set(page.ids)
    assert len(page.cells) == len(summary["rows"]) > 0
    suites = ET.fromstring((tmp_path / "conformance-junit.xml").read_text(encoding="utf-8"))
    assert int(suites.get("tests") or 0) == len(summary["rows"])
    assert "## Matrix" in (tmp_path / "conformance.md").read_text(encoding="utf-8")


def test_a_clause_only_spark_tests_name_is_spark_only_on_the_other_engines(tmp_path: Path) -> None:
    """OXE-R20 compares Spark's own operators: on the oracle it is spark-only, not untested."""
    report = tmp_path / "conformance.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "features/test_exactly_once_aggregation.py",
         "tests/test_spark_exactly_once_aggregation.py", "--engine", "reference", "-q",
         "-p", "no:cacheprovider", "--conformance-report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    status = {(r["clause"], r["engine"]): r["status"] for r in json.loads(report.read_text("utf-8"))["rows"]}
    assert status[("OXE-R20", "reference")] == "spark-only"
    assert status[("OXE-R1", "reference")] == "ok"  # a clause the scenarios show stays as it was
    assert "Clauses about Spark's own operators" in (tmp_path / "conformance.md").read_text("utf-8")


def test_write_reports(tmp_path: Path) -> None:
    summary = new_summary()
    before = copy.deepcopy(summary)
    paths = write_reports(summary, tmp_path / "out", stem="run")
    assert [p.name for p in paths] == ["run.md", "run.html", "run-junit.xml"]
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    assert paths[1].read_text(encoding="utf-8") == html(summary)
    assert summary == before  # the renderers do not change the summary


def _vector(case_id: str, clauses: tuple[str, ...], area: str = "late_data") -> Vector:
    trace: Any = SimpleNamespace(area=area)
    return Vector(id=case_id, trace=trace, expected=ExpectedError("InvalidConfig"), clauses=clauses)


def test_summary_from_cases() -> None:
    outcomes = [
        CaseOutcome(_vector("late_data/a", ("OXL-R3",)), "pass"),
        CaseOutcome(
            _vector("late_data/b", ("OXL-R3", "TR-6")), "fail", "tables 'out' differ", "expected\nactual"
        ),
        CaseOutcome(_vector("late_data/c", ("OXL-R4",)), "declined", "unsupported by the engine: x"),
        CaseOutcome(_vector("late_data/d", ("ZZ-R1",)), "pass"),
    ]
    clauses = [
        Clause("OXL-R3", "Late <events>", "late_data.md"),
        Clause("OXL-R4", "Side outputs", "late_data.md"),
        Clause("OXL-R5", "Never shown", "late_data.md"),
        Clause("TR-6", "Configuration errors", "traces.md"),
    ]
    s = summary_from_cases(outcomes, "my-engine", ["vectors/"], clauses, texts={"OXL-R3": "Body of R3."})
    assert s["format"] == FORMAT
    assert [c["id"] for c in s["clauses"]] == ["OXL-R3", "OXL-R4", "OXL-R5", "TR-6", "ZZ-R1"]
    assert s["clauses"][0]["text"] == "Body of R3."
    tests = {t["nodeid"]: t for t in s["tests"]}
    assert {t["outcome"] for t in tests.values()} == {"passed", "failed", "declined"}
    assert all(t["kind"] == "case" and t["engine"] == "my-engine" for t in tests.values())
    assert tests["late_data/b"]["failed_clauses"] == ["OXL-R3", "TR-6"]
    assert tests["late_data/a"]["failed_clauses"] == []
    assert "tables 'out' differ" in tests["late_data/b"]["detail"]
    status = {r["clause"]: r["status"] for r in s["rows"]}
    assert status == {
        "OXL-R3": "FAIL",
        "OXL-R4": "declined",  # the engine said it cannot: not the same as nobody tried
        "OXL-R5": "untested",
        "TR-6": "FAIL",
        "ZZ-R1": "ok",
    }
    row = next(r for r in s["rows"] if r["clause"] == "OXL-R3")
    assert (row["scenarios_passed"], row["scenarios_failed"]) == (1, 1)
    # and it renders through the same functions
    page = parse_page(html(s))
    assert page.cells[("OXL-R3", "my-engine")][0] == "FAIL"
    assert not set(page.hrefs) - set(page.ids)
    assert "Body of R3." in html(s)
    root = ET.fromstring(junit_xml(s))
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("5", "2", "2")
    assert "late_data/b" in markdown(s)
    json.dumps(s)  # the same JSON the plugin writes


def test_summary_from_cases_without_clauses() -> None:
    outcomes = [CaseOutcome(_vector("a", ("TR-6",)), "fail", "no answer for this case")]
    s = summary_from_cases(outcomes, "e", [], [])
    assert [(c["id"], c["file"]) for c in s["clauses"]] == [("TR-6", "")]
    assert "FAIL" in markdown(s)
