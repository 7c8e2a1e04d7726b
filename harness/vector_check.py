"""Checks an engine's answers against the vectors' expected outputs, and the Markdown report.

A case passes when its answer equals the expected one (TR-8: every table equal
as a sorted list of rows; TR-6: a refused configuration answered with the same
error type). A failing case is shown with, per differing table, the first
diverging row of the sorted tables and the expected and actual tables side by
side.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.clauses import clause_sort_key
from harness.outputs import TABLES, Output
from harness.steps import side_by_side
from harness.vectors import CaseResult, ExpectedError, Vector

MAX_TABLE_ROWS = 30  # rows of a side-by-side table shown around the first divergence


@dataclass(frozen=True)
class CaseOutcome:
    vector: Vector
    status: str  # pass | fail | skip
    reason: str = ""  # one line
    detail: str = ""  # the tables, for a failure

    @property
    def id(self) -> str:
        return self.vector.id


def _describe(answer: Output | ExpectedError) -> str:
    if isinstance(answer, ExpectedError):
        return f"the configuration refused ({answer.type})"
    rows = ", ".join(f"{name}: {len(rows)}" for name, rows in answer.items())
    return f"an output ({rows} rows)"


def _row_text(columns: Sequence[str], row: tuple[Any, ...] | None, other: tuple[Any, ...] | None) -> str:
    if row is None:
        return "(no row)"
    cells = []
    for i, (c, v) in enumerate(zip(columns, row, strict=True)):
        mark = "*" if other is not None and other[i] != v else ""
        cells.append(f"{mark}{c}={'-' if v is None else v}")
    return ", ".join(cells)


def _window(rows: Sequence[tuple[Any, ...]], first: int) -> tuple[list[tuple[Any, ...]], int]:
    start = max(0, min(first - MAX_TABLE_ROWS // 3, len(rows) - MAX_TABLE_ROWS))
    return list(rows[start : start + MAX_TABLE_ROWS]), start


def table_differences(area: str, expected: Output, actual: Output) -> list[tuple[str, str]]:
    """(table, text) for every table that differs: the first diverging row, then both tables."""
    out = []
    for name, columns in TABLES[area].items():
        e, a = expected.get(name, []), actual.get(name, [])
        if e == a:
            continue
        first = next((i for i, (x, y) in enumerate(zip(e, a, strict=False)) if x != y), min(len(e), len(a)))
        e_row = e[first] if first < len(e) else None
        a_row = a[first] if first < len(a) else None
        lines = [
            f"table {name!r}: {len(e)} rows expected, {len(a)} actual; first diverging row "
            f"(row {first} of the sorted table; * marks the cells that differ):",
            f"  expected: {_row_text(columns, e_row, a_row)}",
            f"  actual:   {_row_text(columns, a_row, e_row)}",
        ]
        e_part, start = _window(e, first)
        a_part, _ = _window(a, first)
        if start or len(e_part) < len(e) or len(a_part) < len(a):
            lines.append(f"  (rows {start} to {start + MAX_TABLE_ROWS - 1} of the sorted tables)")
        lines += ["  " + line for line in side_by_side(columns, e_part, a_part).splitlines()]
        out.append((name, "\n".join(lines)))
    return out


def check_case(vector: Vector, result: CaseResult | None) -> CaseOutcome:
    if result is None:
        return CaseOutcome(vector, "fail", "no answer for this case")
    if result.unsupported is not None:
        return CaseOutcome(vector, "skip", f"unsupported by the engine: {result.unsupported}")
    if result.failure is not None:
        kind, detail = result.failure
        first, *rest = detail.splitlines() or [""]
        return CaseOutcome(vector, "fail", f"{kind}: {first}", "\n".join(rest))
    actual: Output | ExpectedError
    if result.error is not None:
        actual = result.error
    else:
        assert result.output is not None
        actual = result.output
    expected = vector.expected
    if isinstance(expected, ExpectedError) or isinstance(actual, ExpectedError):
        if isinstance(expected, ExpectedError) and isinstance(actual, ExpectedError):
            if expected.type == actual.type:
                return CaseOutcome(vector, "pass")
        message = f" ({actual.message})" if isinstance(actual, ExpectedError) and actual.message else ""
        return CaseOutcome(
            vector,
            "fail",
            f"expected {_describe(expected)}, the engine answered {_describe(actual)}{message}",
        )
    diffs = table_differences(vector.area, expected, actual)
    if not diffs:
        return CaseOutcome(vector, "pass")
    names = ", ".join(repr(n) for n, _ in diffs)
    return CaseOutcome(vector, "fail", f"tables {names} differ", "\n\n".join(text for _, text in diffs))


def check_all(vectors: Sequence[Vector], results: Mapping[str, CaseResult]) -> list[CaseOutcome]:
    return [check_case(v, results.get(v.id)) for v in vectors]


def failure_text(outcome: CaseOutcome) -> str:
    v = outcome.vector
    head = f"FAIL {v.id}  [{v.area}; {', '.join(v.clauses) or 'no clause'}]\n  {outcome.reason}"
    where = f"\n  from {v.origin}" if v.origin else ""
    return head + where + ("\n" + outcome.detail if outcome.detail else "")


def counts(outcomes: Sequence[CaseOutcome]) -> Counter[str]:
    return Counter(o.status for o in outcomes)


def summary_line(outcomes: Sequence[CaseOutcome]) -> str:
    """``N passed, N failed, N skipped``: the closing line CI runners read."""
    c = counts(outcomes)
    return f"{c['pass']} passed, {c['fail']} failed, {c['skip']} skipped"


def _status(c: Mapping[str, int]) -> str:
    if c.get("fail"):
        return "FAIL"
    return "ok" if c.get("pass") else "skipped"


def markdown_report(outcomes: Sequence[CaseOutcome], engine: str, sources: Sequence[str]) -> str:
    """The conformance report of one run: totals, per area, per clause, then every failing case."""
    by_area: dict[str, Counter[str]] = defaultdict(Counter)
    by_clause: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        by_area[o.vector.area][o.status] += 1
        for clause in o.vector.clauses:
            by_clause[clause][o.status] += 1
    total = counts(outcomes)
    lines = [
        f"# Conformance report: {engine}",
        "",
        f"Vectors: {', '.join(f'`{s}`' for s in sources)}. "
        f"**{total['pass']} passed, {total['fail']} failed, {total['skip']} skipped** "
        f"of {len(outcomes)} cases.",
        "",
        "## Per area",
        "",
        "| area | cases | passed | failed | skipped | status |",
        "|---|---|---|---|---|---|",
    ]
    for area in sorted(by_area):
        c = by_area[area]
        lines.append(
            f"| {area} | {sum(c.values())} | {c['pass']} | {c['fail']} | {c['skip']} | {_status(c)} |"
        )
    lines += [
        "",
        "## Per clause",
        "",
        "A clause fails when one of the cases that show it fails.",
        "",
        "| clause | cases | passed | failed | skipped | status |",
        "|---|---|---|---|---|---|",
    ]
    for clause in sorted(by_clause, key=clause_sort_key):
        c = by_clause[clause]
        lines.append(
            f"| {clause} | {sum(c.values())} | {c['pass']} | {c['fail']} | {c['skip']} | {_status(c)} |"
        )
    failed = [o for o in outcomes if o.status == "fail"]
    if failed:
        lines += ["", "## Failing cases", ""]
        for o in failed:
            lines += [
                f"### `{o.id}`",
                "",
                f"{o.reason}" + (f" (from {o.vector.origin})" if o.vector.origin else ""),
            ]
            if o.detail:
                lines += ["", "```", o.detail, "```"]
            lines.append("")
    skipped = [o for o in outcomes if o.status == "skip"]
    if skipped:
        reasons = Counter(o.reason for o in skipped)
        lines += ["", "## Skipped cases", ""]
        lines += [f"- {n} case{'s' if n > 1 else ''}: {reason}" for reason, n in reasons.most_common()]
    return "\n".join(lines).rstrip() + "\n"
