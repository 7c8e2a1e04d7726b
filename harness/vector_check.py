"""Checks an engine's answers against the vectors' expected outputs, and applies its expectation file.

A case passes when its answer equals the expected one (TR-8: every table equal
as a sorted list of rows; TR-6: a refused configuration answered with the same
error type). A failing case is shown with, per differing table, the first
diverging row of the sorted tables and the expected and actual tables side by
side.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.expectations import Expectations, Ran, excuses
from harness.expectations import entry_statuses as expectation_statuses
from harness.output_clauses import differences, refusal_differences
from harness.outputs import TABLES, Output
from harness.steps import side_by_side
from harness.vectors import CaseResult, ExpectedError, Vector

MAX_TABLE_ROWS = 30  # rows of a side-by-side table shown around the first divergence


@dataclass(frozen=True)
class CaseOutcome:
    vector: Vector
    status: str  # pass | fail | skip, then deviation | unexpected-pass once expectations apply
    reason: str = ""  # one line
    detail: str = ""  # the tables, for a failure
    # per difference from the expected answer, the clauses it is attributed to
    # (harness/output_clauses.py); None for a failure that is no answer (a crash, a timeout)
    differences: list[set[str]] | None = None

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
            differences=refusal_differences(vector.area),
        )
    diffs = table_differences(vector.area, expected, actual)
    if not diffs:
        return CaseOutcome(vector, "pass")
    names = ", ".join(repr(n) for n, _ in diffs)
    return CaseOutcome(
        vector,
        "fail",
        f"tables {names} differ",
        "\n\n".join(text for _, text in diffs),
        differences(vector.area, expected, actual),
    )


def apply_expectations(outcomes: Sequence[CaseOutcome], exp: Expectations) -> list[CaseOutcome]:
    """The engine's expectation entries on checked cases (harness/expectations.py): a case a
    ``scenario`` entry names (by case id) is expected to fail, and its pass is unexpected; a
    failing case whose every difference a ``clause`` entry explains is a deviation (an engine
    that crashed or gave no answer stays a failure whatever clause entries it has)."""
    out = []
    for o in outcomes:
        named = exp.for_test(o.id)
        if named:
            if o.status == "pass":
                o = replace(o, status="unexpected-pass", reason="; ".join(d.describe() for d in named))
            elif o.status == "fail":
                o = replace(
                    o, status="deviation", reason=f"{o.reason} ({'; '.join(d.describe() for d in named)})"
                )
        elif o.status == "fail" and o.differences is not None:  # a crash or no answer is never a deviation
            used = excuses(exp.clauses, o.differences, o.vector.clauses)
            if used:
                why = "; ".join(d.describe() for d in exp.for_clauses(used))
                o = replace(o, status="deviation", reason=f"{o.reason} ({why})")
        out.append(o)
    return out


def entry_statuses(outcomes: Sequence[CaseOutcome], exp: Expectations) -> list[dict[str, Any]]:
    """What the run made of each entry (harness/expectations.py ``entry_statuses``)."""
    words = {"pass": "passed", "fail": "failed"}
    ran = [Ran(o.id, o.id, o.vector.clauses, _involved(o), words.get(o.status, o.status)) for o in outcomes]
    return expectation_statuses(exp, ran)


def _involved(o: CaseOutcome) -> set[str]:
    return set().union(*o.differences) if o.differences else set(o.vector.clauses)


def check_all(vectors: Sequence[Vector], results: Mapping[str, CaseResult]) -> list[CaseOutcome]:
    return [check_case(v, results.get(v.id)) for v in vectors]


def failure_text(outcome: CaseOutcome) -> str:
    v = outcome.vector
    word = "UNEXPECTED PASS" if outcome.status == "unexpected-pass" else "FAIL"
    head = f"{word} {v.id}  [{v.area}; {', '.join(v.clauses) or 'no clause'}]\n  {outcome.reason}"
    where = f"\n  from {v.origin}" if v.origin else ""
    return head + where + ("\n" + outcome.detail if outcome.detail else "")


def counts(outcomes: Sequence[CaseOutcome]) -> Counter[str]:
    return Counter(o.status for o in outcomes)


def summary_line(outcomes: Sequence[CaseOutcome]) -> str:
    """``N passed, N failed, N skipped``: the closing line CI runners read."""
    c = counts(outcomes)
    return f"{c['pass']} passed, {c['fail'] + c['unexpected-pass']} failed, {c['skip']} skipped"
