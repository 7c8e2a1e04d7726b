"""Checks an engine's answers against the vectors' expected outputs, and applies its expectation file.

A case passes when its answer equals the expected one (TR-8: every table equal
as a sorted list of rows; TR-6: a refused configuration answered with the same
error type). A failing case is shown with, per differing table, the first
diverging row of the sorted tables and the expected and actual tables side by
side.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.clauses import clause_sort_key
from harness.expectations import Deviation, Expectations, Judged, Ran, charged, judge
from harness.expectations import entry_statuses as expectation_statuses
from harness.output_clauses import Difference, project_rows, refusal_differences
from harness.outputs import TABLES, Output
from harness.steps import side_by_side
from harness.vectors import CaseResult, ExpectedError, Vector

MAX_TABLE_ROWS = 30  # rows of a side-by-side table shown around the first divergence


@dataclass(frozen=True)
class CaseOutcome:
    vector: Vector
    # pass | fail | declined (the engine, or its file, does not answer the case) | adapter (a refusal
    # the adapter decides) | deviation, then unexpected-pass once scenario entries apply
    status: str
    reason: str = ""  # one line
    detail: str = ""  # the tables, for a failure
    # the answers compared (harness/expectations.py ``judge``): every place they differ, what no
    # entry excuses and the entries that excuse the rest; None for a failure that is no answer
    judged: Judged | None = None
    unobservable: tuple[str, ...] = ()  # the clauses it names that no place the engine shows decides

    @property
    def id(self) -> str:
        return self.vector.id

    @property
    def differences(self) -> list[Difference] | None:
        return None if self.judged is None else self.judged.differences

    @property
    def excused_by(self) -> tuple[Deviation, ...]:
        return () if self.judged is None or self.judged.unexcused else self.judged.excused_by


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


def table_differences(
    area: str, expected: Output, actual: Output, shown: Mapping[str, Sequence[str]] | None = None
) -> list[tuple[str, str]]:
    """(table, text) for every table that differs, cut to ``shown`` (the tables and columns an
    engine shows; all by default): the first diverging row, then both tables."""
    out = []
    for name, every in TABLES[area].items():
        if shown is not None and name not in shown:
            continue
        columns = tuple(c for c in every if shown is None or c in shown[name])
        e = project_rows(area, name, columns, expected.get(name, []))
        a = project_rows(area, name, columns, actual.get(name, []))
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


def _places(found: Sequence[Difference]) -> str:
    return ", ".join(f"{d.table}.{d.place}" for d in found)


def check_case(vector: Vector, result: CaseResult | None, exp: Expectations | None = None) -> CaseOutcome:
    """One case judged through the engine's declaration and place entries (``exp``; none: every
    table and column, nothing excused). Scenario entries apply after (``apply_expectations``)."""
    area = vector.area
    if result is not None and result.unsupported is not None:
        return CaseOutcome(vector, "declined", f"unsupported by the engine: {result.unsupported}")
    declined = exp.declined(area) if exp is not None else None
    if declined is not None:  # whatever the engine answered: the file says it does not answer the area
        return CaseOutcome(vector, "declined", f"declined: {declined}")
    if result is None:
        return CaseOutcome(vector, "fail", "no answer for this case")
    if result.failure is not None:
        kind, detail = result.failure
        first, *rest = detail.splitlines() or [""]
        return CaseOutcome(vector, "fail", f"{kind}: {first}", "\n".join(rest))
    unobservable = (
        tuple(c for c in vector.clauses if c not in exp.observable(area)) if exp and exp.shows else ()
    )
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
                if exp is not None and exp.refusals_by_adapter(area):
                    why = "refused by the adapter's check of the settings (config_checked_by = adapter)"
                    return CaseOutcome(vector, "adapter", why, unobservable=tuple(vector.clauses))
                return CaseOutcome(vector, "pass", unobservable=unobservable)
        message = f" ({actual.message})" if isinstance(actual, ExpectedError) and actual.message else ""
        found = refusal_differences(area)
        return CaseOutcome(
            vector,
            "fail",
            f"expected {_describe(expected)}, the engine answered {_describe(actual)}{message}",
            judged=None if found is None else Judged(found, found),
            unobservable=unobservable,
        )
    judged = judge(area, vector.trace.config, expected, actual, exp, vector.id)
    if judged is not None and not judged.differences:
        return CaseOutcome(vector, "pass", unobservable=unobservable)
    shown = exp.shown(area) if exp is not None else None
    diffs = table_differences(area, expected, actual, shown)
    detail = "\n\n".join(text for _, text in diffs)
    if judged is not None and not judged.unexcused:
        why = "; ".join(d.describe() for d in judged.excused_by)
        return CaseOutcome(
            vector, "deviation", f"{_places(judged.differences)} differ ({why})", detail, judged, unobservable
        )
    left = f"; not excused: {_places(judged.unexcused)}" if judged is not None and judged.unexcused else ""
    names = ", ".join(repr(n) for n, _ in diffs)
    return CaseOutcome(vector, "fail", f"tables {names} differ{left}", detail, judged, unobservable)


def apply_expectations(outcomes: Sequence[CaseOutcome], exp: Expectations) -> list[CaseOutcome]:
    """The engine's scenario entries on checked cases: a case one names (by case id) is expected
    to fail, and its pass is unexpected (place entries already applied in ``check_case``; an
    engine that crashed or gave no answer stays a failure whatever entries it has)."""
    out = []
    for o in outcomes:
        named = exp.for_test(o.id)
        if named:
            if o.status == "pass":
                o = replace(o, status="unexpected-pass", reason="; ".join(d.describe() for d in named))
            elif o.status in ("fail", "deviation") and o.judged is not None:
                o = replace(
                    o, status="deviation", reason=f"{o.reason} ({'; '.join(d.describe() for d in named)})"
                )
        out.append(o)
    return out


def charged_to(o: CaseOutcome, exp: Expectations | None = None) -> list[str]:
    """The clauses a failing or excused case is charged to: its entries' clauses for a deviation
    (a scenario entry without a clause: its differences'), else its unexcused differences'."""
    named = list(o.vector.clauses)
    if o.status == "deviation" and exp is not None:
        mine = [d for d in exp.for_test(o.id) if d.clause]
        if mine:
            return sorted({d.clause for d in mine if d.clause}, key=clause_sort_key)
    if o.status == "deviation" and not o.excused_by and o.judged is not None:
        return charged(Judged(o.judged.differences, o.judged.differences), named)  # a scenario entry
    return charged(o.judged, named)


def entry_statuses(
    outcomes: Sequence[CaseOutcome], exp: Expectations, areas: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """What the run made of each entry (harness/expectations.py ``entry_statuses``); ``areas``:
    the areas whose every case ran, where a witness that is not a case is reported missing."""
    words = {"pass": "passed", "fail": "failed"}
    ran = [
        Ran(
            o.id,
            o.id,
            o.vector.clauses,
            words.get(o.status, o.status),
            [d.key for d in o.excused_by],
            o.vector.area,
        )
        for o in outcomes
    ]
    return expectation_statuses(exp, ran, areas)


def check_all(
    vectors: Sequence[Vector], results: Mapping[str, CaseResult], exp: Expectations | None = None
) -> list[CaseOutcome]:
    return [check_case(v, results.get(v.id), exp) for v in vectors]


def failure_text(outcome: CaseOutcome) -> str:
    v = outcome.vector
    word = "UNEXPECTED PASS" if outcome.status == "unexpected-pass" else "FAIL"
    head = f"{word} {v.id}  [{v.area}; {', '.join(v.clauses) or 'no clause'}]\n  {outcome.reason}"
    where = f"\n  from {v.origin}" if v.origin else ""
    return head + where + ("\n" + outcome.detail if outcome.detail else "")


def counts(outcomes: Sequence[CaseOutcome]) -> Counter[str]:
    return Counter(o.status for o in outcomes)


def fixed_witnesses(
    outcomes: Sequence[CaseOutcome], entries: Sequence[Mapping[str, Any]]
) -> list[CaseOutcome]:
    """``outcomes`` with every passing witness of a place entry the run found fixed (status
    ``unexpected-pass``, ``entry_statuses``) turned into an unexpected pass, so the case that
    shows the fix is counted once, there, and not also as passed."""
    fixed: dict[str, list[str]] = {}
    for e in entries:
        if e["status"] == "unexpected-pass" and not e.get("scenario") and e.get("witness"):
            fixed.setdefault(str(e["witness"]), []).append(str(e["key"]))
    return [
        replace(o, status="unexpected-pass", reason=f"no longer differs where {', '.join(fixed[o.id])} says")
        if o.status == "pass" and o.id in fixed
        else o
        for o in outcomes
    ]


@dataclass(frozen=True)
class RunCounts:
    """The closing line's figures. ``passed``, ``deviations`` and ``skipped`` (declined, or
    decided by the adapter) count cases; ``failed`` counts failing cases plus place entries whose
    witness the run lacks; ``unexpected`` counts unexpected passes plus place entries found fixed
    whose witness is excused by other entries (so it is a deviation, not a pass)."""

    passed: int
    failed: int
    deviations: int
    unexpected: int
    skipped: int

    @property
    def ok(self) -> bool:
        """The run passes: nothing failed and nothing passed that an entry says fails."""
        return not self.failed and not self.unexpected

    def line(self) -> str:
        return (
            f"{self.passed} passed, {self.failed} failed, {self.deviations} deviations, "
            f"{self.unexpected} unexpected passes, {self.skipped} skipped"
        )


def run_counts(outcomes: Sequence[CaseOutcome], entries: Sequence[Mapping[str, Any]] = ()) -> RunCounts:
    """``outcomes`` after ``fixed_witnesses``; ``entries`` the expectation file's entry statuses."""
    c = counts(outcomes)
    cases = {o.id: o.status for o in outcomes}
    place = [e for e in entries if not e.get("scenario")]
    missing = sum(1 for e in place if e["status"] == "witness missing")
    fixed = [e for e in place if e["status"] == "unexpected-pass"]
    excused = sum(1 for e in fixed if cases.get(str(e.get("witness"))) != "unexpected-pass")
    return RunCounts(
        passed=c["pass"], failed=c["fail"] + missing, deviations=c["deviation"],
        unexpected=c["unexpected-pass"] + excused, skipped=c["declined"] + c["adapter"],
    )  # fmt: skip


def skip_reasons(outcomes: Sequence[CaseOutcome]) -> list[tuple[str, int]]:
    """The reasons of the skipped cases (declined, or decided by the adapter), most cases first."""
    reasons = Counter(o.reason or o.status for o in outcomes if o.status in ("declined", "adapter"))
    return sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
