"""The judge of other engines (spec/traces.md TR-11): what an engine shows, entries that excuse
one thing, and the self-test that proves every committed expectation file can still convict.

All on the oracle: an engine here is the oracle's answers, cut or changed as the test says.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli import EXIT_FAILED, EXIT_OK, main
from harness.expectations import (
    RESULT_TABLES,
    AreaShown,
    Deviation,
    ExpectationFileError,
    Expectations,
    expectations_from,
    read_file,
)
from harness.output_clauses import ROWS
from harness.outputs import TABLES, Output
from harness.pytest_plugin import JUDGE_SELFTEST
from harness.reference_engine import ReferenceEngine
from harness.reports import summary_from_cases
from harness.selftest import selftest
from harness.vector_check import CaseOutcome, apply_expectations, check_all, check_case, entry_statuses
from harness.vectors import CaseResult, ExpectedError, Vector, read_vectors

pytestmark = pytest.mark.oracle_alone  # no Spark: it may run beside the Spark pre-run

ROOT = Path(__file__).resolve().parents[1]
VECTORS = read_vectors([ROOT / "vectors"]).vectors
FILES = sorted((ROOT / "expectations").glob("*.toml"))


def _case(case_id: str) -> Vector:
    return next(v for v in VECTORS if v.id == case_id)


def _oracle(vector: Vector) -> Output:
    [answer] = ReferenceEngine().run([vector.trace])
    assert not isinstance(answer, Exception)
    return {t: list(rows) for t, rows in answer.items()}


def _judged(vector: Vector, change: Callable[[Output], Output], exp: Expectations) -> CaseOutcome:
    answer = change(_oracle(vector))
    [outcome] = apply_expectations([check_case(vector, CaseResult(vector.id, output=answer), exp)], exp)
    return outcome


def _set(table: str, column: str, value: object, area: str) -> Callable[[Output], Output]:
    """An answer with one column of one table set to ``value`` in every row."""
    i = TABLES[area][table].index(column)

    def change(out: Output) -> Output:
        return {**out, table: [(*r[:i], value, *r[i + 1 :]) for r in out[table]]}

    return change


# ---- the self-test on every committed file -----------------------------------------------------


@pytest.mark.clauses("TR-11")
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_committed_expectation_file_can_still_convict(
    path: Path, request: pytest.FixtureRequest
) -> None:
    """A mute oracle passes without an entry, an oracle that loses every result fails in every
    area the file expresses, and in each of them a planted bug fails; the sensitivity is printed
    under the conformance summary."""
    deviations, shows = read_file(path)
    result = selftest(expectations_from(path, path.stem), VECTORS)
    result.file = str(path.relative_to(ROOT))
    request.config.stash.setdefault(JUDGE_SELFTEST, []).extend(result.lines())
    assert result.sound, "\n".join(result.lines())
    if shows is None and not deviations:  # an engine that must show everything convicts every bug
        assert result.sensitivity == 1.0, "\n".join(result.lines())


@pytest.mark.clauses("TR-11")
def test_the_selftest_command_prints_each_files_sensitivity(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["selftest", *map(str, FILES)]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.count("planted bugs caught") == len(FILES)
    assert out.strip().splitlines()[-1] == f"selftest: {len(FILES)} passed, 0 failed"


@pytest.mark.clauses("TR-11")
def test_the_selftest_convicts_a_file_that_excuses_lost_results(tmp_path: Path) -> None:
    """Entries for which rows exist in every result table of an area excuse an engine that loses
    them all: the self-test says so, and the command fails."""
    area = "late_data"
    witness = next(v.id for v in VECTORS if v.area == area and not isinstance(v.expected, ExpectedError))
    every = [
        Deviation("rows differ", clause=_rows_clause(area, t), table=t, columns=(ROWS,), witness=witness)
        for t in RESULT_TABLES[area]
    ]
    result = selftest(Expectations("lax", None, every), [v for v in VECTORS if v.area == area])
    assert not result.sound and result.losing_failed == {area: 0}, result.lines()
    assert any("NOT CONVICTED: loses results in late_data" in line for line in result.lines())

    path = tmp_path / "lax.toml"
    path.write_text(
        "".join(
            f'[[deviation]]\nclause = "{d.clause}"\ntable = "{d.table}"\ncolumns = ["rows"]\n'
            f'witness = "{witness}"\nreason = "rows differ"\n\n'
            for d in every
        ),
        encoding="utf-8",
    )
    assert main(["selftest", str(path)]) == EXIT_FAILED


@pytest.mark.clauses("TR-11")
def test_entries_that_cover_a_bug_everywhere_leave_the_area_unconvicted() -> None:
    """Excusing every column a keyed-watermark verdict bug changes, in every case, hides every
    planted bug of the area: the sensitivity drops and the area is unconvicted."""
    area = "keyed_watermarks"
    mine = [v for v in VECTORS if v.area == area]
    witness = mine[0].id
    blind = Expectations(
        "blind",
        None,
        [
            Deviation("x", clause="F065-R3", table="events", columns=("verdict", "key_watermark"),
                      witness=witness),
            Deviation("x", clause="F065-R21", table="windows", columns=(ROWS, "window_end", "count", "sum"),
                      witness=witness),
            Deviation("x", clause="F065-R5", table="progress", columns=("global_watermark",),
                      witness=witness),
            Deviation("x", clause="F065-R19", table="progress", columns=("global_advances", "key_advances"),
                      witness=witness),
            Deviation("x", clause="F065-R2", table="keys", columns=(ROWS, "watermark"), witness=witness),
        ],
        shows={area: AreaShown({t: TABLES[area][t] for t in ("events", "windows", "progress", "keys")})},
    )  # fmt: skip
    result = selftest(blind, mine)
    assert result.unconvicted_areas() == [area], result.lines()
    assert result.sensitivity == 0.0 and not result.sound


def _rows_clause(area: str, table: str) -> str:
    from harness.output_clauses import SHOWN

    return SHOWN[area].tables[table].rows[0]


# ---- what an engine shows ---------------------------------------------------------------------------

LATE = "late_data/an-event-at-the-watermark-is-on-time-one-millisecond-below-it-is-late"
SHOWS_EVENTS = {"late_data": AreaShown({t: TABLES["late_data"][t] for t in RESULT_TABLES["late_data"]})}


@pytest.mark.clauses("TR-11", "TR-8")
def test_a_column_or_table_the_engine_does_not_show_is_not_compared() -> None:
    cut = {
        "late_data": AreaShown(
            {
                "events": ("batch", "seq", "source", "event_time", "verdict"),
                "side_outputs": TABLES["late_data"]["side_outputs"],
                "windows": TABLES["late_data"]["windows"],
            }
        )
    }
    exp = Expectations("cut", None, [], shows=cut)
    vector = _case(LATE)
    hidden = _judged(vector, _set("events", "lateness", None, "late_data"), exp)
    assert hidden.status == "pass"  # lateness is not shown, and progress is not a shown table
    assert _judged(vector, lambda o: {**o, "progress": []}, exp).status == "pass"
    assert _judged(vector, _set("events", "verdict", "dropped", "late_data"), exp).status == "fail"
    # a clause only hidden places decide is not observable, in the case and in the summary
    assert "OXL-R5" in hidden.unobservable and "OXL-R4" not in hidden.unobservable
    summary = summary_from_cases([hidden], "cut", [], [], judged_by=exp)
    status = {r["clause"]: r["status"] for r in summary["rows"]}
    assert status["OXL-R5"] == "not observable" and status["OXL-R4"] == "ok"


@pytest.mark.clauses("TR-11")
def test_an_area_without_its_result_tables_is_declined_not_untested() -> None:
    """Declaring less cannot turn lost data into 'not observable': an area whose result tables
    the file leaves out is declined, whatever the engine answers."""
    exp = Expectations(
        "half", None, [], shows={"late_data": AreaShown({"windows": TABLES["late_data"]["windows"]})}
    )
    vector = _case(LATE)
    outcome = _judged(vector, lambda o: {t: [] for t in o}, exp)
    assert outcome.status == "declined" and "shows no events, side_outputs table" in outcome.reason
    summary = summary_from_cases([outcome], "half", [], [], judged_by=exp)
    assert {r["status"] for r in summary["rows"]} == {"declined"}
    other = next(v for v in VECTORS if v.area == "session_windows")
    assert check_case(other, CaseResult(other.id, output=_oracle(other)), exp).status == "declined"


@pytest.mark.clauses("TR-11", "TR-6")
def test_a_refusal_the_adapter_decides_counts_for_the_adapter_not_for_the_engine() -> None:
    refused = next(v for v in VECTORS if v.area == "late_data" and isinstance(v.expected, ExpectedError))
    assert isinstance(refused.expected, ExpectedError)
    answer = CaseResult(refused.id, error=ExpectedError(refused.expected.type))
    by_engine = check_case(refused, answer, Expectations("e", None, [], shows=SHOWS_EVENTS))
    assert by_engine.status == "pass"
    adapter = {"late_data": AreaShown(SHOWS_EVENTS["late_data"].tables, config_checked_by="adapter")}
    exp = Expectations("a", None, [], shows=adapter)
    by_adapter = check_case(refused, answer, exp)
    assert by_adapter.status == "adapter"
    summary = summary_from_cases([by_adapter], "a", [], [], judged_by=exp)
    assert {r["status"] for r in summary["rows"]} == {"adapter"}
    # the adapter letting a refused configuration through is still a failure
    assert check_case(refused, CaseResult(refused.id, output=_oracle(_case(LATE))), exp).status == "fail"


# ---- entries that excuse one thing ---------------------------------------------------------------------


@pytest.mark.clauses("TR-11")
def test_an_entry_excuses_its_columns_only_even_where_its_clause_decides_more() -> None:
    """OXL-R4 decides both the lateness and the verdict column; an entry naming lateness does
    not excuse a wrong verdict."""
    entry = Deviation("lateness off", clause="OXL-R4", table="events", columns=("lateness",), witness=LATE)
    exp = Expectations("e", None, [entry])
    vector = _case(LATE)
    excused = _judged(vector, _set("events", "lateness", 7, "late_data"), exp)
    assert excused.status == "deviation" and excused.excused_by == (entry,)
    # charged to the entry's clause; OXL-R5 decides lateness too, so this case says nothing of it
    summary = summary_from_cases([excused], "e", [], [], judged_by=exp)
    status = {r["clause"]: r["status"] for r in summary["rows"]}
    assert (status["OXL-R4"], status["OXL-R5"], status["OXL-R6"]) == ("deviation", "masked", "ok"), status
    assert _judged(vector, _set("events", "verdict", "dropped", "late_data"), exp).status == "fail"
    both = _judged(vector, lambda o: _set("events", "verdict", "dropped", "late_data")(
        _set("events", "lateness", 7, "late_data")(o)), exp)  # fmt: skip
    assert both.status == "fail" and "not excused: events.verdict" in both.reason


SESSION = "session_windows/the-seed-s-end-to-end-example-a-session-closes-when-an-event-moves-the-watermark"


@pytest.mark.clauses("TR-11")
def test_an_entry_on_a_key_column_pairs_rows_without_it_so_a_lost_row_still_fails() -> None:
    """A session emitted a batch late is excused by an entry on sessions.batch; a session never
    emitted is not."""
    entry = Deviation(
        "one batch late", clause="F017E-R7", table="sessions", columns=("batch",), witness=SESSION
    )
    exp = Expectations("e", None, [entry])
    vector = _case(SESSION)
    assert _oracle(vector)["sessions"], "the case must close a session"
    late = _judged(vector, lambda o: {**o, "sessions": [(r[0] + 1, *r[1:]) for r in o["sessions"]]}, exp)
    assert late.status == "deviation"
    lost = _judged(vector, lambda o: {**o, "sessions": o["sessions"][1:]}, exp)
    assert lost.status == "fail" and "sessions.rows" in lost.reason


@pytest.mark.clauses("TR-11")
def test_a_one_way_rows_entry_excuses_rows_added_or_left_out_never_both() -> None:
    """An engine that emits too much (extra_rows) or too little (missing_rows): an entry for the
    one never excuses the other, so an entry for an engine that keeps late sessions still convicts
    an engine that loses a session, and "rows" excuses both."""
    vector = _case(SESSION)
    sessions = _oracle(vector)["sessions"]
    assert sessions, "the case must close a session"
    extra = lambda o: {**o, "sessions": [*o["sessions"], (9, "ghost", 0, 10, 1, 1, None)]}  # noqa: E731
    lost = lambda o: {**o, "sessions": o["sessions"][1:]}  # noqa: E731
    swapped = lambda o: lost(extra(o))  # noqa: E731  # one lost, one added

    def judged(columns: tuple[str, ...], change: Callable[[Output], Output]) -> str:
        entry = Deviation("x", clause="F017E-R14", table="sessions", columns=columns, witness=SESSION)
        return _judged(vector, change, Expectations("e", None, [entry])).status

    assert (judged(("extra_rows",), extra), judged(("extra_rows",), lost)) == ("deviation", "fail")
    assert (judged(("missing_rows",), lost), judged(("missing_rows",), extra)) == ("deviation", "fail")
    assert judged(("extra_rows",), swapped) == judged(("missing_rows",), swapped) == "fail"
    assert judged((ROWS,), swapped) == "deviation"
    # a one-way entry with a column: the column is left out first, then the rows compared one way
    late_extra = lambda o: {**extra(o), "sessions": [(r[0] + 1, *r[1:]) for r in extra(o)["sessions"]]}  # noqa: E731
    assert judged(("extra_rows", "batch"), late_extra) == "deviation"
    assert judged(("extra_rows",), late_extra) == "fail"


@pytest.mark.clauses("TR-11")
def test_an_entry_limited_to_cases_or_settings_excuses_nothing_elsewhere() -> None:
    vector = _case(LATE)
    other = next(v for v in VECTORS if v.area == "late_data" and v.id != LATE and _oracle(v)["events"])
    wrong = _set("events", "lateness", 7, "late_data")
    in_case = Deviation(
        "x", clause="OXL-R4", table="events", columns=("lateness",), cases=(LATE,), witness=LATE
    )
    exp = Expectations("e", None, [in_case])
    assert _judged(vector, wrong, exp).status == "deviation"
    assert _judged(other, wrong, exp).status == "fail"
    setting = ("policy", "no-such-policy")
    limited = Deviation(
        "x", clause="OXL-R4", table="events", columns=("lateness",), config=(setting,), witness=LATE
    )
    assert _judged(vector, wrong, Expectations("e", None, [limited])).status == "fail"


@pytest.mark.clauses("TR-11")
def test_a_witness_that_no_longer_differs_or_is_missing_fails_the_run() -> None:
    vector = _case(LATE)
    entry = Deviation("x", clause="OXL-R4", table="events", columns=("lateness",), witness=LATE)
    exp = Expectations("e", None, [entry])
    wrong_answer = _set("events", "lateness", 7, "late_data")(_oracle(vector))
    wrong = check_all([vector], {LATE: CaseResult(LATE, output=wrong_answer)}, exp)
    right = check_all([vector], {LATE: CaseResult(LATE, output=_oracle(vector))}, exp)
    assert [e["status"] for e in entry_statuses(wrong, exp, {"late_data"})] == ["applied"]
    assert [e["status"] for e in entry_statuses(right, exp, {"late_data"})] == ["unexpected-pass"]
    gone = Deviation(
        "x", clause="OXL-R4", table="events", columns=("lateness",), witness="late_data/no-such-case"
    )
    missing = Expectations("e", None, [gone])
    outcomes = check_all([vector], {LATE: CaseResult(LATE, output=_oracle(vector))}, missing)
    assert [e["status"] for e in entry_statuses(outcomes, missing, {"late_data"})] == ["witness missing"]
    # a run of some cases only cannot say the witness is missing
    assert [e["status"] for e in entry_statuses(outcomes, missing, None)] == ["matches nothing"]


@pytest.mark.clauses("TR-11")
@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('clause = "OXL-R12"\ntable = "events"\ncolumns = ["verdict"]\nwitness = "w"',
         "does not decide events.verdict"),
        ('clause = "OXL-R4"\ntable = "sessions"\ncolumns = ["count"]\nwitness = "w"',
         "has no table 'sessions'"),
        ('clause = "OXL-R4"\ntable = "events"\ncolumns = ["verdict"]', "missing: witness"),
        ('clause = "OXL-R4"\ntable = "events"\ncolumns = ["verdict"]\nwitness = "w"\ncases = ["c"]',
         "is not one of its cases"),
        ('clause = "OXL-R4"\nreason = "x"', "give 'scenario'"),
        ('scenario = "s"\ntable = "events"', "takes no ['table']"),
    ],
)  # fmt: skip
def test_an_entry_that_could_excuse_the_wrong_thing_is_refused(
    tmp_path: Path, entry: str, message: str
) -> None:
    path = tmp_path / "e.toml"
    path.write_text(
        f'[[deviation]]\n{entry}\nreason = "x"\n' if "reason" not in entry else f"[[deviation]]\n{entry}\n"
    )
    with pytest.raises(ExpectationFileError, match=message.replace("[", r"\[").replace("(", r"\(")):
        read_file(path)


@pytest.mark.clauses("TR-11")
def test_a_declaration_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    for text, message in (
        ('[shows.nowhere]\nx = "all"\n', "not an area"),
        ('[shows.late_data]\nevents = ["nope"]\n', "has no columns"),
        ('[shows.late_data]\nevents = []\n', "non-empty list"),
        ('[shows.late_data]\nevents = "all"\nconfig_checked_by = "me"\n', "config_checked_by"),
        ('[shows.late_data]\nevents = ["batch", "seq"]\n\n[[deviation]]\nclause = "OXL-R4"\n'
         'table = "events"\ncolumns = ["verdict"]\nwitness = "w"\nreason = "x"\n', "are not shown"),
    ):  # fmt: skip
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ExpectationFileError, match=message):
            read_file(path)
