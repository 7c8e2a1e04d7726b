"""The declarations of harness/output_clauses.py: which clauses each output table and column shows.

* Every area and table of ``harness.outputs.TABLES`` is declared, key columns are columns
  of the table, ``columns`` names exactly the other columns, and every clause named is a
  heading of the area's own spec file.
* The keys name the oracle's rows uniquely over the committed vectors.
* ``differing_clauses`` on a real oracle output: one changed value is charged to that
  column's clauses, a missing row to the table's row clauses, equal outputs to nothing,
  a refusal against an output to the refusal clauses, a crash to None.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from harness.clauses import load_clauses
from harness.engine import run_canonical
from harness.output_clauses import SHOWN, differing_clauses, table_clauses
from harness.outputs import TABLES, Output
from harness.reference_engine import ReferenceEngine
from harness.traces import InvalidConfig, Trace
from harness.vectors import ExpectedError, Vector, read_vectors

ROOT = Path(__file__).resolve().parent.parent
FEATURE_VECTORS = ROOT / "vectors" / "features"
AREAS = sorted(TABLES)
AREA_TABLES = [(area, table) for area in AREAS for table in TABLES[area]]

pytestmark = [pytest.mark.clauses("TR-8"), pytest.mark.oracle_alone]  # oracle_alone: no Spark


def _clauses_of(area: str) -> set[str]:
    return {c for t in SHOWN[area].tables.values() for cs in (t.rows, *t.columns.values()) for c in cs} | set(
        SHOWN[area].refusal
    )


@cache
def _vectors() -> tuple[Vector, ...]:
    return tuple(read_vectors([FEATURE_VECTORS]).vectors)


_ORACLE: dict[str, Output | Exception] = {}


def _oracle(trace: Trace) -> Output | Exception:
    """The reference engine's canonical answer, run once per trace."""
    text = trace.dumps()
    if text not in _ORACLE:
        (_ORACLE[text],) = run_canonical(ReferenceEngine(), [trace])
    return _ORACLE[text]


def _output_with_rows(area: str, table: str) -> Output:
    """The oracle's output for the smallest committed trace whose `table` has rows."""
    found = [
        v
        for v in _vectors()
        if v.area == area and not isinstance(v.expected, ExpectedError) and v.expected.get(table)
    ]
    if not found:
        pytest.skip(f"no committed vector of {area} has {table} rows")
    vector = min(found, key=lambda v: (sum(len(b) for b in v.trace.batches), v.id))
    output = _oracle(vector.trace)
    assert not isinstance(output, Exception), output
    assert output == vector.expected  # the committed answer is the oracle's
    return output


def _changed(value: Any, others: list[Any]) -> Any:
    """A value of the column's type that differs from `value`."""
    sample = next((o for o in [value, *others] if o is not None), 0)
    if isinstance(sample, bool):
        return not sample if value is not None else sample
    if isinstance(sample, int):
        return 1 if value is None else value + 1
    if isinstance(sample, float):  # token levels (sla_admission)
        return 0.5 if value is None else value + 0.5
    if isinstance(sample, str):
        return "x" if value is None else value + "_changed"
    raise AssertionError(f"unexpected value {value!r}")


def _copy(output: Output) -> Output:
    return {t: list(rows) for t, rows in output.items()}


# ---- the declarations are complete and name real clauses ---------------------------------------


def test_every_area_is_declared() -> None:
    assert set(SHOWN) == set(TABLES)


@pytest.mark.parametrize(("area", "table"), AREA_TABLES)
def test_every_table_is_declared_with_all_its_columns(area: str, table: str) -> None:
    assert set(SHOWN[area].tables) == set(TABLES[area])
    columns = TABLES[area][table]
    decl = SHOWN[area].tables[table]
    assert decl.key, "a table needs key columns"
    assert len(set(decl.key)) == len(decl.key)
    assert set(decl.key) <= set(columns), set(decl.key) - set(columns)
    assert set(decl.columns) == set(columns) - set(decl.key)
    assert decl.rows, "some clause decides which rows exist"
    for column, clauses in decl.columns.items():
        assert clauses, f"{column} names no clause"
        assert len(set(clauses)) == len(clauses), f"{column} names a clause twice"


@pytest.mark.parametrize("area", AREAS)
def test_every_clause_named_is_a_clause_of_the_areas_spec(area: str) -> None:
    files = {c.id: c.file for c in load_clauses(ROOT / "spec")}
    assert SHOWN[area].refusal
    named = _clauses_of(area)
    unknown = sorted(c for c in named if c not in files)
    assert not unknown, unknown
    elsewhere = sorted(c for c in named if files[c] != f"{area}.md")
    assert not elsewhere, elsewhere


@pytest.mark.parametrize(("area", "table"), AREA_TABLES)
def test_the_keys_name_the_oracles_rows_uniquely(area: str, table: str) -> None:
    columns = TABLES[area][table]
    idx = [columns.index(k) for k in SHOWN[area].tables[table].key]
    for v in _vectors():
        if v.area != area or isinstance(v.expected, ExpectedError):
            continue
        counts = Counter(tuple(r[i] for i in idx) for r in v.expected.get(table, []))
        assert all(n == 1 for n in counts.values()), (v.id, [k for k, n in counts.items() if n > 1])


# ---- attribution -----------------------------------------------------------------------------


@pytest.mark.parametrize(("area", "table"), AREA_TABLES)
def test_one_changed_value_is_charged_to_its_columns_clauses(area: str, table: str) -> None:
    output = _output_with_rows(area, table)
    columns = TABLES[area][table]
    decl = SHOWN[area].tables[table]
    for i, column in enumerate(columns):
        if column in decl.key:
            continue
        changed = _copy(output)
        row = changed[table][0]
        others = [r[i] for r in changed[table]]
        changed[table][0] = (*row[:i], _changed(row[i], others), *row[i + 1 :])
        assert differing_clauses(area, output, changed) == set(decl.columns[column]), column
        assert differing_clauses(area, changed, output) == set(decl.columns[column]), column


@pytest.mark.parametrize(("area", "table"), AREA_TABLES)
def test_a_missing_row_is_charged_to_the_tables_row_clauses(area: str, table: str) -> None:
    output = _output_with_rows(area, table)
    rows = set(SHOWN[area].tables[table].rows)
    dropped = _copy(output)
    del dropped[table][0]
    assert differing_clauses(area, output, dropped) == rows  # keys are unique: nothing else differs
    assert differing_clauses(area, dropped, output) == rows
    doubled = _copy(output)
    doubled[table].append(output[table][0])
    assert rows <= differing_clauses(area, output, doubled)  # type: ignore[operator]


def test_a_row_under_another_key_is_a_missing_and_an_extra_row() -> None:
    output = _output_with_rows("keyed_watermarks", "events")
    moved = _copy(output)
    batch, seq, *rest = moved["events"][0]
    moved["events"][0] = (batch, seq + 1000, *rest)
    assert differing_clauses("keyed_watermarks", output, moved) == set(
        SHOWN["keyed_watermarks"].tables["events"].rows
    )


@pytest.mark.parametrize("area", AREAS)
def test_equal_outputs_are_charged_to_nothing(area: str) -> None:
    table = next(iter(TABLES[area]))
    output = _output_with_rows(area, table)
    assert differing_clauses(area, output, _copy(output)) == set()
    for t in TABLES[area]:
        assert table_clauses(area, t, output.get(t, []), output.get(t, [])) == set()


@pytest.mark.parametrize("area", AREAS)
def test_a_refusal_against_an_output_is_charged_to_the_refusal_clauses(area: str) -> None:
    output = _output_with_rows(area, next(iter(TABLES[area])))
    refusal = set(SHOWN[area].refusal)
    error = InvalidConfig("some setting")
    assert differing_clauses(area, error, output) == refusal
    assert differing_clauses(area, output, error) == refusal
    assert differing_clauses(area, error, InvalidConfig("another message")) == set()


def test_a_refused_trace_of_the_oracle_against_an_output() -> None:
    refused = next(
        v for v in _vectors() if v.area == "keyed_watermarks" and isinstance(v.expected, ExpectedError)
    )
    error = _oracle(refused.trace)
    assert isinstance(error, InvalidConfig)
    output = _output_with_rows("keyed_watermarks", "events")
    assert differing_clauses("keyed_watermarks", error, output) == {"F065-R20", "F065-R26"}


@pytest.mark.parametrize("area", AREAS)
def test_a_crash_is_not_attributed(area: str) -> None:
    output = _output_with_rows(area, next(iter(TABLES[area])))
    crash = RuntimeError("engine died")
    assert differing_clauses(area, crash, output) is None
    assert differing_clauses(area, output, crash) is None
    assert differing_clauses(area, InvalidConfig("x"), crash) is None
    assert differing_clauses(area, crash, crash) is None


def test_a_wrong_verdict_is_charged_to_the_lateness_clauses_only() -> None:
    output = _output_with_rows("keyed_watermarks", "events")
    columns = TABLES["keyed_watermarks"]["events"]
    v = columns.index("verdict")
    wrong = _copy(output)
    wrong["events"] = [
        (*r[:v], "late" if r[v] == "on_time" else "on_time", *r[v + 1 :]) for r in wrong["events"]
    ]
    # R30: the compact tracker's verdict rule; a test charges only the clauses it names (expectations.charged)
    lateness = {"F065-R3", "F065-R4", "F065-R15", "F065-R30"}
    assert differing_clauses("keyed_watermarks", output, wrong) == lateness
