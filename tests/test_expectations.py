"""Expectation files as a new user meets them (spec/traces.md TR-11), through real pytest runs.

``examples/buggy_engine.py`` is the oracle with one bug: keyed-watermark verdicts use
``<=`` where F065-R3 says ``<``. A run without expectations fails exactly the tests that
show the bug, charged to the clauses whose columns differ; the file the command-line
tool writes from that run, with only the F065-R3 entry kept, turns exactly those tests
into expected failures and nothing else; a stale entry is an unexpected pass that fails
the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cli import EXIT_OK, main
from harness.expectations import PLACEHOLDER_REASON, Expectations, parse_file

pytestmark = pytest.mark.oracle_alone  # no Spark: it may run beside the Spark pre-run

ROOT = Path(__file__).resolve().parent.parent
BUGGY = "examples.buggy_engine:BuggyEngine"
SUITES = ("features/test_keyed_watermarks.py", "properties/test_keyed_watermarks.py")


def run_suites(
    tmp: Path, name: str, engine: str, env: dict[str, str] | None = None, also: str = ""
) -> tuple[int, str, dict[str, Any]]:
    """The keyed suites' tests of ``engine`` alone (and those ``also`` names, a ``-k`` term): the
    oracle's own properties would take three quarters of the run and tell nothing of the engine."""
    report = tmp / f"{name}.json"
    cmd = [
        sys.executable, "-m", "pytest", *SUITES, "-q", "-p", "no:cacheprovider",
        "-k", f"[{engine}]" + (f" or {also}" if also else ""), "--engine", engine,
        "--expectations-dir", str(tmp), "--conformance-report", str(report),
    ]  # fmt: skip
    full_env = {**os.environ, "HYPOTHESIS_PROFILE": "dev", "CONFORMANCE_SEED": "0", **(env or {})}
    done = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=600)
    summary = json.loads(report.read_text()) if report.exists() else {}
    return done.returncode, done.stdout + done.stderr, summary


def outcomes(summary: dict[str, Any], engine: str) -> dict[str, str]:
    return {t["nodeid"]: t["outcome"] for t in summary["tests"] if t["engine"] == engine}


def statuses(summary: dict[str, Any], engine: str) -> dict[str, str]:
    return {r["clause"]: r["status"] for r in summary["rows"] if r["engine"] == engine}


@pytest.mark.clauses("TR-11")
def test_a_clause_entry_turns_exactly_the_failing_tests_into_expected_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, first = run_suites(tmp_path, "first", BUGGY)
    assert code == 1, out
    before = outcomes(first, BUGGY)
    failing = {n for n, o in before.items() if o == "failed"}
    assert any("test_engine_agrees_with_the_oracle" in n for n in failing)
    assert any("exactly_at_its_keys_watermark" in n for n in failing)
    # one bug in F065-R3 is charged to R3 and the clauses sharing its column, not to F065-R1..R24
    failed_clauses = {c for c, s in statuses(first, BUGGY).items() if s == "FAIL"}
    assert "F065-R3" in failed_clauses and len(failed_clauses) <= 4, failed_clauses
    assert statuses(first, BUGGY)["F065-R5"] == "ok"

    # the tool writes placeholder place entries covering every place the failures differ in:
    # here one, the verdict column of the events table, under the clause that decides it
    assert main(["expectations", str(tmp_path / "first.json"), "--directory", str(tmp_path)]) == EXIT_OK
    written = parse_file(tmp_path / "buggy.toml")
    assert [(d.clause, d.table, d.columns) for d in written] == [("F065-R3", "events", ("verdict",))]
    assert {d.reason for d in written} == {PLACEHOLDER_REASON}
    names = {t["name"] for t in first["tests"] if t["engine"] == BUGGY and t["outcome"] == "failed"}
    assert written[0].witness in names
    capsys.readouterr()

    # the user says why, and adds an entry whose witness does not fail (a stale one)
    passing = sorted(
        t["name"] for t in first["tests"]
        if t["engine"] == BUGGY and t["outcome"] == "passed" and "F065-R21" in t["clauses"]
    )  # fmt: skip
    (tmp_path / "buggy.toml").write_text(
        f'[[deviation]]\nclause = "F065-R3"\ntable = "events"\ncolumns = ["verdict"]\n'
        f'witness = "{written[0].witness}"\nreason = "verdicts use <= at the watermark"\n\n'
        f'[[deviation]]\nclause = "F065-R21"\ntable = "windows"\ncolumns = ["count"]\n'
        f'witness = "{passing[0]}"\nreason = "windows were wrong once"\n',
        encoding="utf-8",
    )
    code, out, second = run_suites(tmp_path, "second", BUGGY)
    after = outcomes(second, BUGGY)
    assert {n for n, o in after.items() if o == "deviation"} == failing
    assert {n: o for n, o in after.items() if n not in failing} == {
        n: o for n, o in before.items() if n not in failing
    }
    entries = {e["clause"]: e for e in second["expectations"][0]["entries"]}
    assert entries["F065-R3"]["status"] == "applied"
    assert set(entries["F065-R3"]["tests"]) == failing
    assert entries["F065-R21"]["status"] == "unexpected-pass"
    assert statuses(second, BUGGY)["F065-R21"] == "unexpected-pass"
    assert code == 1, out  # the stale entry fails the run

    # the stale entry removed by the tool: the run is green
    assert main(["expectations", str(tmp_path / "second.json"), "--directory", str(tmp_path)]) == EXIT_OK
    assert [d.clause for d in parse_file(tmp_path / "buggy.toml")] == ["F065-R3"]
    code, out, _ = run_suites(tmp_path, "third", BUGGY)
    assert code == 0, out


@pytest.mark.clauses("TR-9")
def test_an_engine_that_cannot_be_loaded_stops_the_run_once(tmp_path: Path) -> None:
    code, out, _ = run_suites(tmp_path, "broken", "no_such_module_here:Engine")
    assert code == pytest.ExitCode.USAGE_ERROR, out
    assert out.count("could not be loaded") == 1, out
    assert "PASSED" not in out and "FAILED" not in out


@pytest.mark.clauses("TR-9")
def test_an_engine_module_on_the_users_path_is_found_and_spark_tests_are_left_out(tmp_path: Path) -> None:
    (tmp_path / "my_engine.py").write_text(
        "from examples.buggy_engine import BuggyEngine\n\nclass Mine(BuggyEngine):\n    name = 'mine'\n",
        encoding="utf-8",
    )
    # the Spark tests selected too: the run itself must leave them out
    code, out, summary = run_suites(
        tmp_path, "mine", "my_engine:Mine", env={"PYTHONPATH": str(tmp_path)}, also="test_spark_"
    )
    assert summary, out
    ran = outcomes(summary, "my_engine:Mine")
    assert ran and not any("test_spark_" in n for n in summary_nodeids(summary)), out
    assert [e["name"] for e in summary["engines"] if e["id"] == "my_engine:Mine"] == ["mine"]


def summary_nodeids(summary: dict[str, Any]) -> list[str]:
    return [t["nodeid"] for t in summary["tests"]]


@pytest.mark.clauses("TR-11")
def test_a_case_the_engine_crashed_on_is_never_excused_by_clause_entries() -> None:
    """Place entries explain differences in an answer; a crash or a missing answer has none, so
    it stays a failure even when entries cover every table and column of the area."""
    from harness.expectations import Deviation
    from harness.output_clauses import ROWS, SHOWN
    from harness.outputs import TABLES
    from harness.vector_check import apply_expectations, check_case
    from harness.vectors import CaseResult, read_vectors

    vector = read_vectors([ROOT / "vectors" / "features" / "late_data.jsonl"]).vectors[0]
    area = vector.area
    every = [
        Deviation(
            "stated", clause=SHOWN[area].tables[t].rows[0], table=t, columns=(*cols, ROWS), witness=vector.id
        )
        for t, cols in TABLES[area].items()
    ]
    exp = Expectations("x", None, every)
    assert not isinstance(vector.expected, Exception)
    emptied = {t: [] for t in TABLES[area]}
    crashed = check_case(vector, CaseResult(vector.id, failure=("engine_error", "worker lost")), exp)
    compared = check_case(vector, CaseResult(vector.id, output=emptied), exp)
    assert [o.status for o in apply_expectations([crashed, compared], exp)] == ["fail", "deviation"]


MUTE_ENGINE = '''
from harness.engine import run_canonical
from harness.outputs import TABLES
from harness.reference_engine import ReferenceEngine

class Mute:
    """The oracle, except that it cannot show a key's watermark per event."""
    name = "mute"
    areas = frozenset(TABLES)

    def run(self, traces):
        answers = run_canonical(ReferenceEngine(), traces)
        for t, a in zip(traces, answers):
            if t.area == "keyed_watermarks" and not isinstance(a, Exception):
                a["events"] = [(*r[:4], None, r[5]) for r in a["events"]]
        return answers
'''


@pytest.mark.clauses("TR-11")
def test_a_column_an_engine_does_not_show_fails_no_test_once_its_file_says_so(tmp_path: Path) -> None:
    """The pytest suites apply an engine's [shows] too: a scenario or differential test whose only
    difference lies in a column the engine does not show passes; without the declaration it fails."""
    (tmp_path / "mute_engine.py").write_text(MUTE_ENGINE, encoding="utf-8")
    env = {"PYTHONPATH": str(tmp_path)}
    code, out, summary = run_suites(tmp_path, "undeclared", "mute_engine:Mute", env=env)
    assert code == 1 and any(o == "failed" for o in outcomes(summary, "mute_engine:Mute").values()), out
    (tmp_path / "mute.toml").write_text(
        '[shows.keyed_watermarks]\nevents = ["batch", "seq", "key", "event_time", "verdict"]\n'
        'progress = "all"\nkeys = "all"\nwindows = "all"\nerrors = "all"\n',
        encoding="utf-8",
    )
    code, out, summary = run_suites(tmp_path, "declared", "mute_engine:Mute", env=env)
    assert code == 0, out
    assert set(outcomes(summary, "mute_engine:Mute").values()) <= {"passed", "oracle-only", "skipped"}


@pytest.mark.clauses("TR-11")
def test_the_closing_line_counts_every_case_once_and_decides_the_exit() -> None:
    """``run_counts``: a passing witness of a fixed entry is an unexpected pass, not also a pass;
    a fixed entry whose witness other entries excuse, and an entry whose witness is missing,
    each count once; the run passes only with nothing failed and nothing passed unexpectedly."""
    from harness.vector_check import CaseOutcome, fixed_witnesses, run_counts
    from harness.vectors import read_vectors

    v = read_vectors([ROOT / "vectors"]).vectors[:6]
    outcomes = [
        CaseOutcome(x, s) for x, s in zip(v, ["pass", "pass", "fail", "deviation", "declined", "adapter"])
    ]
    entry = {"scenario": None, "key": "OXL-R4 at events.verdict", "status": "applied", "witness": v[3].id}
    assert run_counts(outcomes, [entry]).line() == (
        "2 passed, 1 failed, 1 deviations, 0 unexpected passes, 2 skipped"
    )
    fixed = {**entry, "status": "unexpected-pass", "witness": v[0].id}
    shown = fixed_witnesses(outcomes, [fixed])
    assert [o.status for o in shown][:2] == ["unexpected-pass", "pass"]
    tally = run_counts(shown, [fixed])
    assert (tally.passed, tally.unexpected, tally.ok) == (1, 1, False)
    behind_others = {**fixed, "witness": v[3].id}  # its witness is a deviation of other entries
    missing = {**entry, "status": "witness missing", "witness": "late_data/gone"}
    tally = run_counts(fixed_witnesses(outcomes, [behind_others, missing]), [behind_others, missing])
    assert tally.line() == "2 passed, 2 failed, 1 deviations, 1 unexpected passes, 2 skipped"
    ok = [CaseOutcome(x, s) for x, s in zip(v, ["pass", "deviation", "declined"])]
    assert run_counts(ok).ok
