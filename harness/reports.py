"""Conformance reports a person and a CI system read: Markdown, one HTML page, JUnit XML.

All three render the summary the pytest plugin writes to ``reports/conformance.json``
(``"format": "eventtime-conformance-summary/2"``), and older summaries without the
newer keys: a missing ``clauses`` or ``expectations`` is empty, a test without
``failed_clauses`` charges a failure to all of its ``clauses``.

* :func:`markdown`: the matrix of clauses x engines, then per engine its totals,
  failing clauses with their failing tests, deviations, unexpected passes,
  expectation problems and untested clauses.
* :func:`html`: one self-contained page (inline CSS, no scripts, no external
  resources): the matrix coloured by status, every cell linking to the tests of
  that clause on that engine, every clause id linking to the clause's text.
* :func:`junit_xml`: one ``<testsuite>`` per engine and one ``<testcase>`` per clause,
  for CI systems that show JUnit results.

:func:`summary_from_cases` builds the same summary from the command-line tool's case
outcomes (``harness.vector_check``), so a vectors run renders through the same functions.
"""

from __future__ import annotations

import html as _html
import re
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.clauses import clause_sort_key
from harness.expectations import FAILING_ENTRY

FORMAT = "eventtime-conformance-summary/2"

# Row statuses, worst first, and what each means.
STATUSES = (
    "FAIL", "unexpected-pass", "deviation", "xfail", "ok", "masked", "oracle-only", "spark-only",
    "not observable", "adapter", "declined", "untested",
)  # fmt: skip
#: the statuses a run over vectors gives a clause, worst first (the command-line tool's counts)
CLAUSE_STATUS_ORDER = (
    "FAIL",
    "unexpected-pass",
    "deviation",
    "ok",
    "masked",
    "not observable",
    "adapter",
    "declined",
    "untested",
)
STATUS_MEANING = {
    "FAIL": "a test of the clause failed",
    "unexpected-pass": "an expectation entry's witness (or the test it names) no longer fails there: "
    "remove the entry",
    "deviation": "a known deviation: an expectation file says the engine fails here, and it does",
    "xfail": "a test's own expected failure",
    "ok": "every test of the clause that ran passed",
    "oracle-only": "shown by the reference engine only (API-level scenarios, TR-10)",
    "spark-only": "a comparison with Spark's own operators: only tests of the Spark implementation show it",
    "masked": "every case of the clause differs where an entry of another clause excuses it, in a place "
    "this clause decides too: its answers neither show that the clause holds nor that it breaks",
    "not observable": "the engine shows no table or column that decides the clause (its expectation file's "
    "[shows]): nothing it answers could pass or fail it",
    "adapter": "only refused configurations showed it, and the adapter refuses them with this project's "
    "check, not the engine",
    "declined": "the engine declines the cases of the clause (it answered them as unsupported, or its "
    "expectation file shows none of the area's result tables)",
    "untested": "no test of the clause ran on the engine",
}
# Test outcomes, worst first.
OUTCOMES = (
    "failed", "unexpected-pass", "deviation", "xfailed", "passed", "oracle-only", "adapter", "declined",
    "skipped",
)  # fmt: skip
_CHARGED = ("failed", "deviation")  # outcomes charged to failed_clauses, not to every clause
DETAIL_LINES = 8  # lines of a test's detail the Markdown report and the JUnit failure text show
NO_FILE = ""  # the spec file of a clause only seen in test tags

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Characters XML 1.0 does not allow (ElementTree writes them and the result does not parse).
_NOT_XML_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _clean(value: Any) -> str:
    """Text for any of the reports: a string without terminal colour codes or control characters."""
    text = "" if value is None else str(value)
    return _NOT_XML_RE.sub("", _ANSI_RE.sub("", text))


def _str_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    try:
        return [_clean(v) for v in value]
    except TypeError:
        return [_clean(value)]


# ---- the summary, read once --------------------------------------------------------------------


@dataclass(frozen=True)
class _Test:
    nodeid: str
    name: str
    engine: str
    kind: str
    clauses: tuple[str, ...]
    failed_clauses: tuple[str, ...]
    outcome: str
    detail: str
    unobservable: tuple[str, ...] = ()  # named clauses no place the engine shows decides

    def counts_against(self, clause: str) -> bool:
        if clause in self.unobservable:
            return False
        if self.outcome in _CHARGED:
            return clause in self.failed_clauses
        return clause in self.clauses

    def shows(self, clause: str) -> bool:
        return clause in self.clauses or clause in self.failed_clauses

    def outcome_on(self, clause: str) -> str:
        """The outcome as shown under ``clause``: a failure charged elsewhere says so."""
        if clause in self.unobservable and self.outcome not in ("declined", "adapter"):
            return "not observable"
        if self.outcome in _CHARGED and not self.counts_against(clause):
            return f"{self.outcome} (charged to {', '.join(self.failed_clauses) or 'no clause'})"
        return self.outcome


@dataclass(frozen=True)
class _Clause:
    id: str
    title: str
    file: str
    text: str


@dataclass
class _Report:
    generated: str
    profile: str
    seed: Any
    format: str
    engines: list[tuple[str, str]]  # (id, description)
    provenance: dict[str, list[tuple[str, str]]]  # per engine: (what, value), the run's command and date last
    clauses: list[_Clause]
    rows: dict[tuple[str, str], Mapping[str, Any]]
    tests: list[_Test]
    expectations: list[Mapping[str, Any]]
    tag_problems: list[str]
    sources: list[str]
    _by_cell: dict[tuple[str, str], list[_Test]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        by_cell: dict[tuple[str, str], list[_Test]] = defaultdict(list)
        for t in self.tests:
            for c in dict.fromkeys(t.clauses + t.failed_clauses):
                by_cell[(c, t.engine)].append(t)
        self._by_cell = dict(by_cell)

    def tests_of(self, clause: str, engine: str) -> list[_Test]:
        """Every test of ``engine`` that names ``clause``, worst outcome first."""
        tests = self._by_cell.get((clause, engine), [])
        return sorted(tests, key=lambda t: (_outcome_rank(t.outcome_on(clause)), t.nodeid))

    def counting(self, clause: str, engine: str, *outcomes: str) -> list[_Test]:
        return [
            t
            for t in self.tests_of(clause, engine)
            if t.counts_against(clause) and (not outcomes or t.outcome in outcomes)
        ]

    def row(self, clause: str, engine: str) -> Mapping[str, Any]:
        return self.rows.get((clause, engine), {})

    def status(self, clause: str, engine: str) -> str:
        given = self.row(clause, engine).get("status")
        if given:
            return _clean(given)
        outcomes = {t.outcome for t in self.counting(clause, engine)}
        for outcome, status in (
            ("failed", "FAIL"),
            ("unexpected-pass", "unexpected-pass"),
            ("deviation", "deviation"),
            ("xfailed", "xfail"),
            ("passed", "ok"),
            ("oracle-only", "oracle-only"),
        ):
            if outcome in outcomes:
                return status
        shown = {t.outcome_on(clause) for t in self.tests_of(clause, engine)}
        for status in ("not observable", "adapter", "declined"):
            if status in shown:
                return status
        return "untested"

    def groups(self) -> list[tuple[str, list[_Clause]]]:
        """Clauses by spec file, in order of appearance; clauses without one last."""
        groups: dict[str, list[_Clause]] = {}
        for c in self.clauses:
            groups.setdefault(c.file, []).append(c)
        if NO_FILE in groups:
            groups[NO_FILE] = groups.pop(NO_FILE)
        return list(groups.items())

    def expectations_of(self, engine: str) -> list[Mapping[str, Any]]:
        return [e for e in self.expectations if _clean(e.get("engine")) == engine]

    def status_counts(self, engine: str) -> Counter[str]:
        return Counter(self.status(c.id, engine) for c in self.clauses)

    def outcome_counts(self, engine: str) -> Counter[str]:
        return Counter(t.outcome for t in self.tests if t.engine == engine)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _outcome_rank(outcome: str) -> int:
    base = outcome.split(" ")[0]
    return OUTCOMES.index(base) if base in OUTCOMES else len(OUTCOMES)


def _read(summary: Mapping[str, Any]) -> _Report:
    tests = []
    for t in summary.get("tests") or []:
        named = tuple(_str_list(t.get("clauses")))
        failed = t.get("failed_clauses")
        tests.append(
            _Test(
                nodeid=_clean(t.get("nodeid")),
                name=_clean(t.get("name") or t.get("nodeid")),
                engine=_clean(t.get("engine")),
                kind=_clean(t.get("kind")),
                clauses=named,
                failed_clauses=named if failed is None else tuple(_str_list(failed)),
                outcome=_clean(t.get("outcome") or "passed"),
                detail=_clean(t.get("detail")),
                unobservable=tuple(_str_list(t.get("unobservable"))),
            )
        )
    rows: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in summary.get("rows") or []:
        rows[(_clean(r.get("clause")), _clean(r.get("engine")))] = r

    engines: dict[str, str] = {}
    provenance: dict[str, list[tuple[str, str]]] = {}
    for e in summary.get("engines") or []:
        if isinstance(e, Mapping):
            engines.setdefault(_clean(e.get("id")), _clean(e.get("description")))
            provenance.setdefault(_clean(e.get("id")), _provenance_of(e))
        else:
            engines.setdefault(_clean(e), "")
    for engine in [e for _, e in rows] + [t.engine for t in tests]:
        engines.setdefault(engine, "")

    clauses: dict[str, _Clause] = {}
    for c in summary.get("clauses") or []:
        cid = _clean(c.get("id"))
        if cid and cid not in clauses:
            file = _clean(c.get("file") or c.get("spec_file"))
            clauses[cid] = _Clause(cid, _clean(c.get("title")), file, _clean(c.get("text")))
    for (cid, _), r in rows.items():
        known = clauses.get(cid)
        title, file = _clean(r.get("title")), _clean(r.get("spec_file"))
        if known is None:
            clauses[cid] = _Clause(cid, title, file, "")
        elif (not known.title and title) or (not known.file and file):
            clauses[cid] = _Clause(cid, known.title or title, known.file or file, known.text)
    seen = {c for t in tests for c in t.clauses + t.failed_clauses} - set(clauses)
    for cid in sorted(seen, key=clause_sort_key):
        clauses[cid] = _Clause(cid, "", NO_FILE, "")

    problems = summary.get("clause_tag_problems")
    return _Report(
        generated=_clean(summary.get("generated")),
        profile=_clean(summary.get("profile")),
        seed=summary.get("seed"),
        format=_clean(summary.get("format")),
        engines=list(engines.items()),
        provenance=provenance,
        clauses=list(clauses.values()),
        rows=rows,
        tests=tests,
        expectations=[e for e in summary.get("expectations") or [] if isinstance(e, Mapping)],
        tag_problems=_str_list(problems) if isinstance(problems, list | tuple) else [],
        sources=_str_list(summary.get("sources")),
    )


def _provenance_of(engine: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What an engine entry says of the engine's versions and settings, then the command and the
    date of its run."""
    given = engine.get("provenance")
    pairs = [(_clean(k), _clean(v)) for k, v in given.items()] if isinstance(given, Mapping) else []
    pairs += [(key, _clean(engine.get(key))) for key in ("command", "date") if engine.get(key)]
    return pairs


def _run_line(rep: _Report) -> str:
    parts = []
    if rep.generated:
        parts.append(f"generated {rep.generated}")
    if rep.profile:
        parts.append(f"profile {rep.profile}")
    if rep.seed is not None and rep.seed != "":
        parts.append(f"seed {_clean(rep.seed)}")
    if rep.sources:
        parts.append(f"vectors {', '.join(rep.sources)}")
    return ", ".join(parts)


def _first_lines(text: str, n: int = DETAIL_LINES) -> str:
    lines = text.strip("\n").splitlines()
    if len(lines) <= n:
        return "\n".join(lines)
    return "\n".join(lines[:n] + [f"... ({len(lines) - n} more lines)"])


def _counts_text(c: Counter[str], order: Sequence[str]) -> str:
    keys = [k for k in order if c.get(k)] + sorted(k for k in c if k not in order and c[k])
    return ", ".join(f"{c[k]} {k}" for k in keys) or "none"


def _entry_target(entry: Mapping[str, Any]) -> str:
    if entry.get("key"):
        return _clean(entry["key"])
    if entry.get("clause"):
        return f"clause {_clean(entry['clause'])}"
    if entry.get("scenario"):
        return f"scenario {_clean(entry['scenario'])!r}"
    return "(no clause or scenario)"


def _is_web_link(link: str) -> bool:
    return link.startswith(("https://", "http://"))


def _spec_label(file: str) -> str:
    return file if file else "not in spec/"


# ---- Markdown ----------------------------------------------------------------------------------


def _md(text: Any) -> str:
    """Text for a Markdown paragraph or table cell: one line, no HTML, no table breaks."""
    s = " ".join(_clean(text).split())
    s = s.replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "|*`[]":
        s = s.replace(ch, "\\" + ch)
    return s


def _md_code(text: Any) -> str:
    """An inline code span that holds any text (backticks included)."""
    s = " ".join(_clean(text).split())
    runs = [len(r) for r in re.findall("`+", s)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s else ""
    return f"{fence}{pad}{s}{pad}{fence}".replace("|", "\\|")


def _md_block(text: str) -> list[str]:
    runs = [len(r) for r in re.findall("`{3,}", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return [fence, text, fence]


def _md_link(link: str) -> str:
    if _is_web_link(link) and not re.search(r"[\s<>()]", link):
        return f"[{_md(link)}]({link})"
    return _md(link)


def markdown(summary: Mapping[str, Any]) -> str:
    """The report as Markdown: the matrix, then one section per engine."""
    rep = _read(summary)
    engines = [e for e, _ in rep.engines]
    lines = ["# Conformance report", ""]
    run = _run_line(rep)
    if run:
        lines += [_md(run[0].upper() + run[1:]) + ".", ""]
    lines += ["## Matrix", "", "One status per clause and engine:", ""]
    lines += [f"- **{s}**: {_md(STATUS_MEANING[s])}" for s in STATUSES]
    lines.append("")
    if not rep.clauses:
        lines += ["No clauses: the summary lists no clause and no test names one.", ""]
    for file, clauses in rep.groups():
        lines += [f"### {_md(_spec_label(file))}", ""]
        lines.append("| clause | " + " | ".join(_md(e) for e in engines) + " |")
        lines.append("|---|" + "---|" * len(engines))
        for c in clauses:
            name = f"**{_md(c.id)}** {_md(c.title)}".rstrip()
            cells = [rep.status(c.id, e) for e in engines]
            lines.append(f"| {name} | " + " | ".join(_md(s) for s in cells) + " |")
        lines.append("")

    for engine, description in rep.engines:
        lines += _md_engine(rep, engine, description)

    if rep.tag_problems:
        lines += ["## Clause tags (TR-12)", ""]
        lines += [f"- {_md(p)}" for p in rep.tag_problems]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _md_test(t: _Test, clause: str) -> list[str]:
    out = [f"- **{_md(t.name)}** ({_md(t.outcome_on(clause))}): {_md_code(t.nodeid)}"]
    if t.detail.strip():
        block = "\n".join(_md_block(_first_lines(t.detail))).splitlines()
        out += ["  " + line if line else "" for line in block]
    return out


def _md_engine(rep: _Report, engine: str, description: str) -> list[str]:
    clauses = rep.clauses
    statuses = rep.status_counts(engine)
    lines = [f"## Engine {_md_code(engine)}", ""]
    if description:
        lines += [_md(description), ""]
    if rep.provenance.get(engine):
        lines += ["| ran with | |", "|---|---|"]
        for k, v in rep.provenance[engine]:
            lines.append(f"| {_md(k)} | {_md_code(v) if k == 'command' else _md(v)} |")
        lines.append("")
    lines += [
        f"- clauses: {_counts_text(statuses, STATUSES)} (of {len(clauses)})",
        f"- tests: {_counts_text(rep.outcome_counts(engine), OUTCOMES)}",
        "",
    ]

    def with_status(status: str) -> list[_Clause]:
        return [c for c in clauses if rep.status(c.id, engine) == status]

    failing = with_status("FAIL")
    if failing:
        lines += ["### Failing clauses", ""]
        for c in failing:
            lines += [f"#### {_md(c.id)} {_md(c.title)}".rstrip(), ""]
            tests = rep.counting(c.id, engine, "failed") or rep.counting(c.id, engine)
            if not tests:
                lines.append("- (the summary lists no failing test of this clause)")
            for t in tests:
                lines += _md_test(t, c.id)
            lines.append("")

    entries = rep.expectations_of(engine)
    deviations = with_status("deviation")
    applied = [(f, e) for f, e in _entries(entries) if _clean(e.get("status")) == "applied"]
    if deviations or applied:
        lines += ["### Known deviations", ""]
        for file, e in applied:
            link = _clean(e.get("link"))
            nodeids = _str_list(e.get("tests"))
            lines.append(
                f"- {_md(_entry_target(e))}: {_md(e.get('reason'))}"
                + (f" ({_md_link(link)})" if link else "")
                + f"; {len(nodeids)} test{'s' if len(nodeids) != 1 else ''}"
                + (f", from {_md_code(file)}" if file else "")
            )
        for c in deviations:
            lines.append(f"- clause **{_md(c.id)}** {_md(c.title)}".rstrip())
            for t in rep.counting(c.id, engine, "deviation"):
                reason = t.detail.strip().splitlines()[0] if t.detail.strip() else ""
                lines.append(f"  - {_md(t.name)}: {_md(reason)}".rstrip(": "))
        lines.append("")

    unexpected = with_status("unexpected-pass")
    stale = [(f, e) for f, e in _entries(entries) if _clean(e.get("status")) in FAILING_ENTRY]
    if unexpected or stale:
        lines += [
            "### Unexpected passes",
            "",
            "A test an expectation file marks as a known deviation passed: the deviation looks fixed, "
            "so remove the entry.",
            "",
        ]
        for file, e in stale:
            lines.append(
                f"- entry {_md(_entry_target(e))} ({_md(e.get('reason'))})"
                + (f" in {_md_code(file)}" if file else "")
                + ": "
                + (", ".join(_md_code(n) for n in _str_list(e.get("tests"))) or "no test listed")
            )
        for c in unexpected:
            lines.append(f"- clause **{_md(c.id)}** {_md(c.title)}".rstrip())
            for t in rep.counting(c.id, engine, "unexpected-pass"):
                lines.append(f"  - {_md(t.name)}: {_md_code(t.nodeid)}")
        lines.append("")

    nothing = [(f, e) for f, e in _entries(entries) if _clean(e.get("status")) == "matches nothing"]
    problems = [(_clean(x.get("file")), p) for x in entries for p in _str_list(x.get("problems"))]
    if nothing or problems:
        lines += ["### Expectation problems", ""]
        for file, e in nothing:
            lines.append(
                f"- entry {_md(_entry_target(e))} ({_md(e.get('reason'))})"
                + (f" in {_md_code(file)}" if file else "")
                + " matches no test"
            )
        for file, p in problems:
            lines.append(f"- {_md_code(file) + ': ' if file else ''}{_md(p)}")
        lines.append("")

    for status, heading in (
        ("xfail", "Expected failures"),
        ("oracle-only", "Oracle-only clauses"),
        ("spark-only", "Clauses about Spark's own operators"),
        ("masked", "Masked: every case differs where another clause's entry excuses a place they decide too"),
        ("not observable", "Not observable: the engine shows no table or column that decides them"),
        ("adapter", "Shown only by refusals the adapter decides"),
        ("declined", "Declined by the engine"),
    ):
        found = with_status(status)
        if found:
            lines += [f"### {heading}", "", ", ".join(_md(c.id) for c in found), ""]

    untested = with_status("untested")
    if untested:
        lines += [f"### Untested clauses ({len(untested)})", ""]
        by_file: dict[str, list[str]] = defaultdict(list)
        for c in untested:
            by_file[c.file].append(c.id)
        for file, ids in by_file.items():
            lines.append(f"- {_md(_spec_label(file))}: " + ", ".join(_md(i) for i in ids))
        lines.append("")
    return lines


def _entries(expectations: Iterable[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    return [
        (_clean(x.get("file")), e)
        for x in expectations
        for e in x.get("entries") or []
        if isinstance(e, Mapping)
    ]


# ---- HTML --------------------------------------------------------------------------------------


def _h(text: Any) -> str:
    return _html.escape(_clean(text), quote=True)


class _Anchors:
    """Unique, safe ``id`` values for arbitrary keys (clause and engine names can hold anything)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[str, ...], str] = {}
        self._used: set[str] = set()

    def __call__(self, *key: str) -> str:
        if key not in self._ids:
            base = "-".join(re.sub(r"[^A-Za-z0-9_]+", "_", k).strip("_") or "x" for k in key)
            anchor, n = base, 1
            while anchor in self._used:
                n += 1
                anchor = f"{base}-{n}"
            self._used.add(anchor)
            self._ids[key] = anchor
        return self._ids[key]


_STATUS_CLASS = {s: "st-" + s.replace("-", "").replace(" ", "") for s in STATUSES}
_OUTCOME_STATUS = {
    "failed": "FAIL",
    "unexpected-pass": "unexpected-pass",
    "deviation": "deviation",
    "xfailed": "xfail",
    "passed": "ok",
    "oracle-only": "oracle-only",
    "not observable": "not observable",
    "adapter": "adapter",
    "declined": "declined",
    "skipped": "untested",
}

_CSS = """
:root { --fail:#f8c9c9; --failb:#c62828; --up:#ffcf9e; --upb:#d35400; --dev:#fff0b3; --devb:#b38600;
  --xf:#e6dcfa; --xfb:#6a4caf; --ok:#cdeccf; --okb:#2e7d32; --oo:#d6e6f8; --oob:#2f6aa3;
  --un:#ececec; --unb:#8a8a8a; --line:#d0d4da; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:#1d2125;
  margin: 0 auto; padding: 16px 24px 48px; max-width: 1280px; background:#fff; }
h1 { font-size: 24px; margin: 8px 0 4px; } h2 { font-size: 19px; margin: 28px 0 8px;
  border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 16px; margin: 18px 0 6px; } h4 { font-size: 14px; margin: 12px 0 4px; }
a { color: #0b57a4; }
code, pre { font: 12.5px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
pre { background:#f6f8fa; border:1px solid #e3e6ea; padding: 8px 10px; overflow-x: auto;
  white-space: pre-wrap; word-break: break-word; margin: 6px 0; }
.run { color:#555; margin: 0 0 12px; }
table { border-collapse: collapse; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
thead th { background:#f1f3f5; position: sticky; top: 0; z-index: 1; }
.scroll { overflow-x: auto; }
table.matrix { width: 100%; }
table.matrix td.clause { min-width: 420px; }
table.matrix th.engine, table.matrix td.cell { width: 120px; text-align: center; white-space: nowrap; }
table.matrix td.cell a { display: block; color: inherit; text-decoration: none; font-weight: 600; }
table.matrix td.cell a:hover { text-decoration: underline; }
table.matrix tr.group th { background:#e9edf2; font-size: 13px; text-align: left; }
a.cid { font-weight: 600; white-space: nowrap; margin-right: 6px; }
.st-FAIL { background: var(--fail); color:#7f1010; }
.st-unexpectedpass { background: var(--up); color:#7a3200; }
.st-deviation { background: var(--dev); color:#5c4500; } .st-xfail { background: var(--xf); color:#3d2a73; }
.st-ok { background: var(--ok); color:#1b4d1e; } .st-oracleonly { background: var(--oo); color:#1c3f63; }
.st-sparkonly { background: var(--oo); color:#1c3f63; }
.st-masked { background:#f6f0d8; color:#5c4500; }
.st-notobservable { background:#f3eee4; color:#5a4a2a; } .st-adapter { background:#e4eef3; color:#2a4a5a; }
.st-declined { background: var(--un); color:#333; font-style: italic; }
.st-untested { background: var(--un); color:#555; } .st-other { background:#fff; color:#000; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 14px; margin: 6px 0 12px; padding: 0; list-style: none; }
.legend li { display: flex; align-items: center; gap: 6px; }
.swatch { display: inline-block; min-width: 92px; white-space: nowrap; text-align: center;
  padding: 1px 6px; border-radius: 3px;
  font-weight: 600; font-size: 12.5px; }
.totals td.n { text-align: right; font-variant-numeric: tabular-nums; }
section.clause { border-top: 1px solid var(--line); margin-top: 18px; padding-top: 4px; }
h2 + section.clause { border-top: none; margin-top: 0; }
section.clause h3 .file { font-weight: normal; color:#666; font-size: 13px; margin-left: 8px; }
.text { max-width: 900px; } .text p { margin: 6px 0; } .text ul { margin: 4px 0 4px 18px; padding: 0; }
table.spec { margin: 6px 0; font-size: 13px; } table.spec thead th { position: static; }
.none { color:#777; font-style: italic; }
div.cell { margin: 8px 0 8px 0; padding: 4px 10px 6px; border-left: 6px solid var(--unb); }
div.cell.st-FAIL { border-left-color: var(--failb); }
div.cell.st-unexpectedpass { border-left-color: var(--upb); }
div.cell.st-deviation { border-left-color: var(--devb); } div.cell.st-xfail { border-left-color: var(--xfb); }
div.cell.st-ok { border-left-color: var(--okb); } div.cell.st-oracleonly { border-left-color: var(--oob); }
div.cell.st-sparkonly { border-left-color: var(--oob); }
div.cell { background: #fafbfc; color: inherit; }
div.cell h4 .swatch { margin-left: 6px; }
table.tests { width: 100%; margin: 4px 0; background:#fff; }
table.tests td.outcome { width: 170px; } table.tests td.name { width: 38%; }
table.tests .nodeid { color:#555; font-size: 12px; word-break: break-all; }
details summary { cursor: pointer; color:#333; }
details summary code { white-space: pre-wrap; word-break: break-word; }
ul.problems li { margin: 2px 0; }
.top { font-size: 12px; margin-left: 8px; font-weight: normal; }
"""


def _inline(escaped: str) -> str:
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)


def _table_html(lines: list[str]) -> str:
    """A Markdown table as an HTML table; anything else that starts with | as preformatted text."""

    def cells(line: str) -> list[str]:
        parts = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())]
        return parts[1:-1] if line.strip().endswith("|") else parts[1:]

    if len(lines) < 2 or not re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*", lines[1].strip()):
        return "<pre>" + _h("\n".join(lines)) + "</pre>"
    head = "".join(f"<th>{_inline(_h(c))}</th>" for c in cells(lines[0]))
    body = "".join(
        "<tr>" + "".join(f"<td>{_inline(_h(c))}</td>" for c in cells(line)) + "</tr>" for line in lines[2:]
    )
    return f'<table class="spec"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _text_html(text: str) -> str:
    """A clause's Markdown body as minimal safe HTML: paragraphs, lists and preformatted blocks."""
    out: list[str] = []
    para: list[str] = []
    items: list[list[str]] = []
    pre: list[str] | None = None
    table: list[str] = []

    def flush() -> None:
        if para:
            out.append("<p>" + _inline(_h(" ".join(para))) + "</p>")
            para.clear()
        if items:
            out.append("<ul>" + "".join("<li>" + _inline(_h(" ".join(i))) + "</li>" for i in items) + "</ul>")
            items.clear()
        if table:
            out.append(_table_html(table))
            table.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if pre is not None:
            if stripped.startswith("```"):
                out.append("<pre>" + _h("\n".join(pre)) + "</pre>")
                pre = None
            else:
                pre.append(line)
            continue
        if stripped.startswith("```"):
            flush()
            pre = []
        elif not stripped:
            flush()
        elif stripped.startswith("|"):
            if para or items:
                flush()
            table.append(stripped)
        elif re.match(r"^\s*([-*+]|\d+[.)])\s+", line):
            if para or table:
                flush()
            items.append([re.sub(r"^\s*([-*+]|\d+[.)])\s+", "", line)])
        elif items and line.startswith((" ", "\t")):
            items[-1].append(stripped)
        else:
            if items or table:
                flush()
            para.append(stripped)
    if pre is not None:
        out.append("<pre>" + _h("\n".join(pre)) + "</pre>")
    flush()
    return "\n".join(out)


def _swatch(status: str) -> str:
    return f'<span class="swatch {_STATUS_CLASS.get(status, "st-other")}">{_h(status)}</span>'


def _link_html(link: str) -> str:
    if _is_web_link(link):
        return f'<a href="{_h(link)}" rel="noopener noreferrer">{_h(link)}</a>'
    return _h(link)


def html(summary: Mapping[str, Any]) -> str:
    """The report as one self-contained HTML page."""
    rep = _read(summary)
    ids = _Anchors()
    engines = [e for e, _ in rep.engines]
    for name in ("top", "legend", "totals", "matrix", "clauses", "expectations", "tag-problems"):
        ids(name)
    out: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Conformance report</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        '<body id="top">',
        "<h1>Conformance report</h1>",
    ]
    run = _run_line(rep)
    fmt = f" (summary format {rep.format})" if rep.format else " (summary format 1)"
    out.append(f'<p class="run">{_h(run[:1].upper() + run[1:])}{_h(fmt)}</p>')

    # legend
    out.append('<ul class="legend" id="legend">')
    for s in STATUSES:
        out.append(f"<li>{_swatch(s)} {_h(STATUS_MEANING[s])}</li>")
    out.append("</ul>")

    # totals per engine
    out += [
        '<h2 id="totals">Totals per engine</h2>',
        '<div class="scroll"><table class="totals">',
        "<thead><tr>",
    ]
    out.append("<th>engine</th>" + "".join(f"<th>{_swatch(s)}</th>" for s in STATUSES) + "<th>tests</th>")
    out.append("</tr></thead><tbody>")
    for engine, description in rep.engines:
        per_status = rep.status_counts(engine)
        desc = f'<div class="nodeid">{_h(description)}</div>' if description else ""
        out.append(
            f'<tr><td><a href="#{ids("engine", engine)}">{_h(engine)}</a>{desc}</td>'
            + "".join(f'<td class="n">{per_status.get(s, 0) or ""}</td>' for s in STATUSES)
            + f"<td>{_h(_counts_text(rep.outcome_counts(engine), OUTCOMES))}</td></tr>"
        )
    out.append("</tbody></table></div>")

    # the matrix
    out += [
        '<h2 id="matrix">Clauses &times; engines</h2>',
        '<div class="scroll"><table class="matrix" id="matrix-table">',
        "<thead><tr><th>clause</th>"
        + "".join(f'<th class="engine">{_h(e)}</th>' for e in engines)
        + "</tr></thead>",
        "<tbody>",
    ]
    if not rep.clauses:
        out.append(f'<tr><td colspan="{len(engines) + 1}" class="none">no clauses</td></tr>')
    for file, clauses in rep.groups():
        out.append(
            f'<tr class="group"><th colspan="{len(engines) + 1}" id="{ids("file", file)}">'
            f'{_h(_spec_label(file))} <span class="top">{_plural(len(clauses), "clause")}</span></th></tr>'
        )
        for c in clauses:
            cells = []
            for e in engines:
                status = rep.status(c.id, e)
                cells.append(
                    f'<td class="cell {_STATUS_CLASS.get(status, "st-other")}" data-clause="{_h(c.id)}" '
                    f'data-engine="{_h(e)}" data-status="{_h(status)}">'
                    f'<a href="#{ids("cell", c.id, e)}">{_h(status)}</a></td>'
                )
            out.append(
                f'<tr class="clause-row"><td class="clause"><a class="cid" href="#{ids("clause", c.id)}">'
                f"{_h(c.id)}</a>{_h(c.title)}</td>" + "".join(cells) + "</tr>"
            )
    out.append("</tbody></table></div>")

    # expectations and problems
    out += _html_expectations(rep, ids)
    if rep.tag_problems:
        out += ['<h2 id="tag-problems">Clause tags (TR-12)</h2>', '<ul class="problems">']
        out += [f"<li>{_h(p)}</li>" for p in rep.tag_problems]
        out.append("</ul>")

    # one section per clause: its text, then its tests on each engine
    out.append('<h2 id="clauses">Clauses and their tests</h2>')
    for c in rep.clauses:
        out.append(f'<section class="clause" id="{ids("clause", c.id)}">')
        file = f'<span class="file">{_h(c.file)}</span>' if c.file else ""
        out.append(
            f"<h3>{_h(c.id)} {_h(c.title)}{file}"
            f' <a class="top" href="#{ids("file", c.file)}">&uarr; matrix</a></h3>'
        )
        if c.text.strip():
            out.append(f'<div class="text">{_text_html(c.text)}</div>')
        else:
            out.append('<p class="none">(no clause text in the summary)</p>')
        for e in engines:
            status = rep.status(c.id, e)
            out.append(
                f'<div class="cell {_STATUS_CLASS.get(status, "st-other")}" id="{ids("cell", c.id, e)}">'
                f"<h4>{_h(e)} {_swatch(status)}</h4>"
            )
            tests = rep.tests_of(c.id, e)
            if not tests:
                out.append('<p class="none">No test of this clause on this engine.</p>')
            else:
                out.append('<table class="tests"><tbody>')
                for t in tests:
                    shown = t.outcome_on(c.id)
                    st = _OUTCOME_STATUS.get(t.outcome, "other") if t.counts_against(c.id) else "other"
                    out.append(
                        f'<tr><td class="outcome {_STATUS_CLASS.get(st, "st-other")}">{_h(shown)}</td>'
                        f'<td class="name">{_h(t.name)}<div class="nodeid">{_h(t.nodeid)}</div></td>'
                        f"<td>{_html_detail(t.detail)}</td></tr>"
                    )
                out.append("</tbody></table>")
            out.append("</div>")
        out.append("</section>")
    out += ["</body>", "</html>", ""]
    return "\n".join(out)


def _html_detail(detail: str) -> str:
    text = detail.strip("\n")
    if not text.strip():
        return ""
    first = text.strip().splitlines()[0]
    if len(first) > 160:
        first = first[:157] + "..."
    return f"<details><summary><code>{_h(first)}</code></summary><pre>{_h(text)}</pre></details>"


def _html_expectations(rep: _Report, ids: _Anchors) -> list[str]:
    out = ['<h2 id="expectations">Engines: expectation files</h2>']
    for engine, _ in rep.engines:
        out.append(f'<h3 id="{ids("engine", engine)}">{_h(engine)}</h3>')
        out.append(
            f"<p>Clauses: {_h(_counts_text(rep.status_counts(engine), STATUSES))}. "
            f"Tests: {_h(_counts_text(rep.outcome_counts(engine), OUTCOMES))}.</p>"
        )
        if rep.provenance.get(engine):
            out.append('<table class="provenance"><tbody>')
            for k, v in rep.provenance[engine]:
                out.append(f"<tr><th>{_h(k)}</th><td><code>{_h(v)}</code></td></tr>")
            out.append("</tbody></table>")
        files = rep.expectations_of(engine)
        if not files:
            out.append('<p class="none">No expectation file entries in the summary.</p>')
            continue
        for x in files:
            file = _clean(x.get("file"))
            out.append(f"<h4>{_h(file or 'expectation file')}</h4>")
            entries = [e for e in x.get("entries") or [] if isinstance(e, Mapping)]
            if entries:
                out.append(
                    '<table class="tests"><thead><tr><th>entry</th><th>reason</th><th>link</th>'
                    "<th>status</th><th>tests</th></tr></thead><tbody>"
                )
                for e in entries:
                    status = _clean(e.get("status"))
                    cls = {"applied": "st-deviation", "unexpected-pass": "st-unexpectedpass"}.get(
                        status, "st-FAIL" if status == "matches nothing" else "st-other"
                    )
                    tests = "".join(f'<div class="nodeid">{_h(n)}</div>' for n in _str_list(e.get("tests")))
                    out.append(
                        f"<tr><td>{_h(_entry_target(e))}</td><td>{_h(e.get('reason'))}</td>"
                        f"<td>{_link_html(_clean(e.get('link')))}</td>"
                        f'<td class="{cls}">{_h(status)}</td><td>{tests or "&mdash;"}</td></tr>'
                    )
                out.append("</tbody></table>")
            else:
                out.append('<p class="none">No entries.</p>')
            problems = _str_list(x.get("problems"))
            if problems:
                out.append('<ul class="problems">' + "".join(f"<li>{_h(p)}</li>" for p in problems) + "</ul>")
    return out


# ---- JUnit XML ---------------------------------------------------------------------------------


def _junit_tests_text(tests: Sequence[_Test], clause: str) -> str:
    parts = []
    for t in tests:
        part = f"{t.name} [{t.outcome_on(clause)}]\n  {t.nodeid}"
        if t.detail.strip():
            part += "\n" + "\n".join("    " + line for line in _first_lines(t.detail).splitlines())
        parts.append(part)
    return "\n".join(parts)


def junit_xml(summary: Mapping[str, Any]) -> str:
    """JUnit XML: one testsuite per engine, one testcase per clause."""
    rep = _read(summary)
    root = ET.Element("testsuites", name="eventtime-conformance")
    totals: Counter[str] = Counter()
    for engine, description in rep.engines:
        suite = ET.SubElement(root, "testsuite", name=engine)
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("generated", rep.generated),
            ("profile", rep.profile),
            ("seed", "" if rep.seed is None else _clean(rep.seed)),
            ("description", description),
            *((f"provenance.{k}", v) for k, v in rep.provenance.get(engine, [])),
        ):
            if value:
                ET.SubElement(props, "property", name=key, value=value)
        counts: Counter[str] = Counter()
        for c in rep.clauses:
            stem = Path(c.file).stem if c.file else "unspecified"
            case = ET.SubElement(
                suite, "testcase", classname=f"{engine}.{stem}", name=f"{c.id} {c.title}".strip(), time="0"
            )
            status = rep.status(c.id, engine)
            counts["tests"] += 1
            if status in ("FAIL", "unexpected-pass"):
                counts["failures"] += 1
                if status == "FAIL":
                    tests = rep.counting(c.id, engine, "failed") or rep.counting(c.id, engine)
                    message = f"{len(tests)} failing test{'s' if len(tests) != 1 else ''}: " + "; ".join(
                        t.name for t in tests
                    )
                else:
                    tests = rep.counting(c.id, engine, "unexpected-pass")
                    message = (
                        "unexpected pass: a known deviation of an expectation file no longer fails; "
                        "remove the entry"
                    )
                failure = ET.SubElement(case, "failure", message=_clip(message), type=status)
                failure.text = _junit_tests_text(tests, c.id)
            elif status == "ok":
                pass
            else:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=_clip(_skip_message(rep, c.id, engine, status)))
        suite.set("tests", str(counts["tests"]))
        suite.set("failures", str(counts["failures"]))
        suite.set("errors", "0")
        suite.set("skipped", str(counts["skipped"]))
        suite.set("time", "0")
        if rep.generated:
            suite.set("timestamp", rep.generated)
        if len(props) == 0:
            suite.remove(props)
        totals.update(counts)
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", "0")
    root.set("skipped", str(totals["skipped"]))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _clip(text: str, n: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _skip_message(rep: _Report, clause: str, engine: str, status: str) -> str:
    if status == "untested":
        skipped = [t for t in rep.tests_of(clause, engine) if t.outcome == "skipped"]
        if skipped:
            return f"untested: {len(skipped)} test{'s' if len(skipped) != 1 else ''} skipped"
        return "untested: no test of this clause ran on this engine"
    if status == "spark-only":
        return "spark-only: the clause compares Spark's own operators, which only Spark's tests can run"
    if status in ("masked", "not observable", "adapter", "declined"):
        return f"{status}: {STATUS_MEANING[status]}"
    outcome = {"deviation": "deviation", "xfail": "xfailed", "oracle-only": "oracle-only"}.get(status)
    tests = rep.counting(clause, engine, outcome) if outcome else []
    reasons = list(dict.fromkeys(t.detail.strip().splitlines()[0] for t in tests if t.detail.strip()))
    label = {"deviation": "known deviation", "xfail": "expected failure"}.get(status, status)
    return f"{label}: {'; '.join(reasons)}" if reasons else label


# ---- files -------------------------------------------------------------------------------------


def write_reports(summary: Mapping[str, Any], directory: str | Path, stem: str = "conformance") -> list[Path]:
    """Write ``<stem>.md``, ``<stem>.html`` and ``<stem>-junit.xml`` into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, render in ((f"{stem}.md", markdown), (f"{stem}.html", html), (f"{stem}-junit.xml", junit_xml)):
        path = directory / name
        path.write_text(render(summary), encoding="utf-8")
        paths.append(path)
    return paths


# ---- the command-line tool's runs --------------------------------------------------------------

#: a clause's status from its cases, the first whose outcome any case has (``_case_on``)
_CLAUSE_FROM_CASES = (
    ("FAIL", "failed"), ("unexpected-pass", "unexpected-pass"), ("deviation", "deviation"), ("ok", "passed"),
    ("masked", "masked"), ("not observable", "not observable"), ("adapter", "adapter"),
    ("declined", "declined"),
)  # fmt: skip


def _case_on(test: Mapping[str, Any], clause: str) -> str:
    """What one case says of one clause it names: its own outcome where it is charged to the
    clause; not observable where the engine shows nothing deciding it; passed where a failure
    or deviation lies in other clauses' places."""
    outcome = str(test["outcome"])
    if outcome in ("declined", "adapter"):
        return outcome
    if clause in test.get("unobservable", ()):
        return "not observable"
    if outcome == "deviation" and clause not in test["failed_clauses"] and clause in test.get("masked", ()):
        return "masked"  # a place it decides differs, excused by another clause's entry
    if outcome in ("failed", "deviation") and clause not in test["failed_clauses"]:
        return "passed"
    return outcome


_CASE_OUTCOME = {"pass": "passed", "fail": "failed"}


def summary_from_cases(
    outcomes: Sequence[Any],
    engine: str,
    sources: Sequence[str],
    clauses: Sequence[Any],
    *,
    texts: Mapping[str, str] | None = None,
    expectations: Sequence[Mapping[str, Any]] = (),
    judged_by: Any = None,
    name: str | None = None,
    provenance: Mapping[str, str] | None = None,
    command: str | None = None,
    date: str | None = None,
) -> dict[str, Any]:
    """A summary of the plugin's schema from ``harness.vector_check.CaseOutcome`` objects.

    ``clauses`` is ``harness.clauses.load_clauses(...)`` (or dicts with id/title/file/text) or [];
    ``texts`` optionally maps clause ids to their text, for clauses that carry none;
    ``judged_by`` the engine's ``Expectations``, whose entries a deviation is charged to;
    ``name`` the engine's name for its expectation file (default: ``engine``); ``provenance``
    what the engine said of itself (versions, settings), ``command`` and ``date`` the engine's
    run (default: now), all shown with the engine. A case is a test
    of kind ``case`` and counts as a scenario in the rows. A clause's status: FAIL,
    unexpected-pass (its entry's witness no longer differs), deviation, ok (a case that could
    have failed it passed), not observable, adapter, declined, untested; worst first.
    """
    from harness.vector_check import charged_to

    texts = texts or {}
    listed: dict[str, dict[str, str]] = {}
    for c in clauses:
        get = c.get if isinstance(c, Mapping) else lambda k, c=c: getattr(c, k, "")
        cid = str(get("id"))
        listed.setdefault(
            cid,
            {
                "id": cid,
                "title": str(get("title") or ""),
                "file": str(get("file") or ""),
                "text": texts.get(cid) or str(get("text") or ""),
            },
        )
    tests = []
    for o in outcomes:
        v = o.vector
        outcome = _CASE_OUTCOME.get(o.status, o.status)
        detail = "\n".join(
            part for part in (o.reason, f"from {v.origin}" if v.origin else "", o.detail) if part
        )
        judged = getattr(o, "judged", None)
        tests.append(
            {
                "nodeid": v.id,
                "name": v.id,
                "engine": engine,
                "kind": "case",
                "clauses": list(v.clauses),
                "failed_clauses": charged_to(o, judged_by) if outcome in ("failed", "deviation") else [],
                "unobservable": list(getattr(o, "unobservable", ())),
                "unexcused": [
                    {"table": d.table, "place": d.place, "clauses": sorted(d.clauses, key=clause_sort_key)}
                    for d in (judged.unexcused if judged is not None else [])
                ],
                "excused_by": [d.key for d in getattr(o, "excused_by", ())],
                "masked": sorted(
                    set().union(*(d.clauses for d in judged.differences)) if judged is not None else set(),
                    key=clause_sort_key,
                ),
                "outcome": outcome,
                "detail": detail,
                "area": v.area,
            }
        )
    seen = {c for t in tests for c in t["clauses"]} - set(listed)
    for cid in sorted(seen, key=clause_sort_key):
        listed[cid] = {"id": cid, "title": "", "file": "", "text": texts.get(cid, "")}

    rows = []
    for c in listed.values():
        mine = [t for t in tests if c["id"] in t["clauses"] or c["id"] in t["failed_clauses"]]
        n = Counter(_case_on(t, c["id"]) for t in mine)
        n["unexpected-pass"] += sum(
            1 for b in expectations for e in b.get("entries", [])
            if e.get("clause") == c["id"] and e.get("status") in FAILING_ENTRY
        )  # fmt: skip
        status = next((s for s, o in _CLAUSE_FROM_CASES if n[o]), "untested")
        rows.append(
            {
                "clause": c["id"],
                "title": c["title"],
                "spec_file": c["file"],
                "engine": engine,
                "status": status,
                "scenarios_passed": n["passed"],
                "scenarios_failed": n["failed"],
                "properties_passed": 0,
                "properties_failed": 0,
                "known_deviations": n["deviation"],
                "unexpected_passes": n["unexpected-pass"],
                "xfailed": 0,
                "oracle_only": 0,
                "skipped": n["declined"] + n["adapter"],
                "not_observable": n["not observable"],
                "adapter": n["adapter"],
                "declined": n["declined"],
                "scenarios": sorted(t["name"] for t in mine),
                "properties": [],
            }
        )
    listed_sources = ", ".join(str(s) for s in sources)
    generated = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return {
        "format": FORMAT,
        "generated": generated,
        "profile": "",
        "seed": None,
        "sources": [str(s) for s in sources],
        "engines": [
            {
                "id": engine,
                "name": name or engine,
                "description": "test vectors: " + listed_sources,
                **({"provenance": dict(provenance)} if provenance else {}),
                **({"command": command} if command else {}),
                "date": date or generated,
            }
        ],
        "clauses": list(listed.values()),
        "rows": rows,
        "tests": tests,
        "expectations": [dict(b) for b in expectations],
        "clause_tag_problems": [],
        "generator_coverage": {},
    }
