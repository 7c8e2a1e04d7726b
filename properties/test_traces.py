"""The harness's own rules (spec/traces.md): known deviations are strict expected failures (TR-11),
every test names its clauses (TR-12), failing generated examples are saved and replay (TR-13)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from harness.traces import Trace
from strategies.common import generate, keyed_watermark_traces

DEVIATION = """
[[deviation]]
scenario = "test_still_deviates"
clause = "F065-R3"
reason = "a deliberately recorded deviation"

[[deviation]]
clause = "F065-R3"
table = "events"
columns = ["verdict"]
witness = "test_fails_where_another_clause_may_be_at_fault"
reason = "a place entry: it excuses no failure that no table places"

[[deviation]]
scenario = "test_named_and_fixed"
reason = "one test named by its function"

[[deviation]]
clause = "F065-R9"
table = "progress"
columns = ["idle_keys"]
witness = "test_of_the_fixed_clause"
reason = "a deviation that was fixed"
"""

TESTS = """
import pytest

@pytest.mark.clauses("F065-R3")
def test_still_deviates(engine):
    assert False

@pytest.mark.clauses("F065-R3")
def test_passes_though_its_clause_has_an_entry(engine):
    pass

@pytest.mark.clauses("F065-R3", "F065-R5")
def test_fails_where_another_clause_may_be_at_fault(engine):
    assert False

@pytest.mark.clauses("F065-R5")
def test_named_and_fixed(engine):
    pass

@pytest.mark.clauses("F065-R9")
def test_of_the_fixed_clause(engine):
    pass
"""


@pytest.mark.clauses("TR-11")
def test_known_deviations_excuse_only_what_they_explain(pytester: pytest.Pytester) -> None:
    pytester.mkdir("expectations")
    (pytester.path / "expectations" / "reference.toml").write_text(DEVIATION)
    pytester.makepyfile(test_deviation=TESTS)
    result = pytester.runpytest("-p", "harness.pytest_plugin", "--engine", "reference")
    # A failure no table places (a test's own assertion) is excused by a scenario entry only, never
    # by a place entry, whose witness then fails elsewhere; a passing test of a clause with an
    # entry stays a pass; a test named by a `scenario` entry is a strict xfail, so its pass fails;
    # a place entry whose witness passes is an unexpected pass.
    result.assert_outcomes(xfailed=1, failed=2, passed=2)
    result.stdout.fnmatch_lines(["FAILED *test_named_and_fixed*XPASS(strict)*"])
    result.stdout.fnmatch_lines(["*test_fails_where_another_clause_may_be_at_fault*"])
    result.stdout.fnmatch_lines(["    F065-R3 at events.verdict: WITNESS DIFFERS ELSEWHERE*"])
    result.stdout.fnmatch_lines(["    F065-R9 at progress.idle_keys: UNEXPECTED PASS*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.clauses("TR-11")
def test_an_unexpected_pass_alone_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.mkdir("expectations")
    (pytester.path / "expectations" / "reference.toml").write_text(
        '[[deviation]]\nclause = "F065-R9"\ntable = "progress"\ncolumns = ["idle_keys"]\n'
        'witness = "test_fixed"\nreason = "fixed since"\n'
    )
    pytester.makepyfile(test_deviation=TESTS.split('@pytest.mark.clauses("F065-R9")')[0])
    pytester.makepyfile(
        test_fixed='import pytest\n\n@pytest.mark.clauses("F065-R9")\ndef test_fixed(engine):\n    pass\n'
    )
    result = pytester.runpytest(
        "-p", "harness.pytest_plugin", "--engine", "reference", "-k", "fixed and not named"
    )
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED


SPEC = "### AB-R1 A rule\n\nText.\n"

TAGGING = """
import pytest

def test_names_nothing():
    pass

@pytest.mark.clauses("AB-R9")
def test_names_an_unknown_clause():
    pass

@pytest.mark.clauses("AB-R1")
def test_names_a_clause():
    pass
"""


def _project(pytester: pytest.Pytester, **tests: str) -> None:
    pytester.makeini("[pytest]\n")
    pytester.mkdir("spec")
    (pytester.path / "spec" / "rules.md").write_text(SPEC)
    pytester.mkdir("properties")
    for name, text in tests.items():
        (pytester.path / "properties" / f"{name}.py").write_text(text)


@pytest.mark.clauses("TR-12")
def test_a_test_that_names_no_clause_fails_the_run(pytester: pytest.Pytester) -> None:
    _project(pytester, test_tagging=TAGGING.replace('"AB-R9"', '"AB-R1"'))
    result = pytester.runpytest("-p", "harness.pytest_plugin", "--engine", "reference")
    result.assert_outcomes(passed=3)  # the tests themselves pass; the run does not
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "clause tags (TR-12): 1 tests name no clause; the run fails",
        "    properties/test_tagging.py::test_names_nothing: names no clause",
    ])  # fmt: skip


@pytest.mark.clauses("TR-12")
def test_a_clause_the_spec_lacks_stops_collection_naming_the_nearest(pytester: pytest.Pytester) -> None:
    _project(pytester, test_tagging=TAGGING)
    result = pytester.runpytest("-p", "harness.pytest_plugin", "--engine", "reference")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.assert_outcomes()  # nothing ran
    result.stderr.fnmatch_lines([
        "ERROR: clause tags (TR-12): no heading of spec/*.md defines these ids",
        "  properties/test_tagging.py:7: AB-R9 (test test_names_an_unknown_clause) is not a clause of spec/; "
        "nearest: AB-R1",
    ])  # fmt: skip


@pytest.mark.clauses("TR-12")
def test_a_clause_the_spec_lacks_stops_collection_in_any_folder(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_elsewhere.py").write_text(
        'import pytest\n\n@pytest.mark.clauses("AB-R12")\ndef test_elsewhere():\n    pass\n'
    )
    result = pytester.runpytest("-p", "harness.pytest_plugin", "--engine", "reference")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*tests/test_elsewhere.py:3: AB-R12 (test test_elsewhere) is not a clause of spec/; nearest: AB-R1"]
    )


PROPERTY = """
import pytest
from hypothesis import given, settings, strategies as st
from harness.traces import Item, Trace

@st.composite
def traces(draw):
    t = draw(st.integers(0, 50))
    return Trace("keyed_watermarks", {"bounded_delay": 100}, ((Item("event", key="a", event_time=t),),))

@pytest.mark.clauses("AB-R1")
@settings(max_examples=300, database=None)
@given(traces(), st.integers(0, 3))
def test_times_stay_small(trace, extra):
    assert trace.batches[0][0].event_time < LIMIT
"""


@pytest.mark.clauses("TR-13")
def test_a_failing_generated_example_is_saved_and_replays_from_its_file(pytester: pytest.Pytester) -> None:
    _project(pytester, test_property=PROPERTY.replace("LIMIT", "20"))
    test_id = "properties/test_property.py::test_times_stay_small"
    first = pytester.runpytest("-p", "harness.pytest_plugin", "--engine", "reference", test_id)
    first.assert_outcomes(failed=1)
    saved_line = first.stdout.str().split("Failing example saved to ", 1)[1].split()[0]
    saved = pytester.path / saved_line
    data = json.loads(saved.read_text())
    assert data["test"] == test_id and data["arguments"]["extra"] == {"value": 0}
    trace = Trace.from_json(data["arguments"]["trace"]["trace"])
    assert trace.batches[0][0].event_time == 20  # Hypothesis shrank it to the boundary
    assert "Scenario: a failing generated example" in saved.with_suffix(".feature").read_text()
    replay_line = f"*Replay it: .bootstrap-venv/bin/tox -e * -- {test_id} --replay {saved_line}"
    first.stdout.fnmatch_lines([replay_line])

    plugin = ("-p", "harness.pytest_plugin", "--engine", "reference")
    replayed = pytester.runpytest(*plugin, test_id, "--replay", saved_line)
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines(["*assert 20 < 20*"])
    # the fixed test passes on the saved example
    (pytester.path / "properties" / "test_property.py").write_text(PROPERTY.replace("LIMIT", "21"))
    pytester.runpytest(*plugin, test_id, "--replay", saved_line).assert_outcomes(passed=1)


@pytest.mark.clauses("TR-13")
def test_a_replay_file_that_cannot_be_read_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _project(pytester, test_property=PROPERTY.replace("LIMIT", "20"))
    (pytester.path / "broken.json").write_text("{not json")
    result = pytester.runpytest("-p", "harness.pytest_plugin", "--replay", "broken.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--replay broken.json: not JSON*"])


@pytest.mark.clauses("TR-13")
def test_one_seed_draws_the_same_traces_whatever_the_run_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hypothesis would mix the literals of newly imported local modules into its draws."""
    strategy = keyed_watermark_traces()
    before = generate(strategy, 60, seed_value=5)
    (tmp_path / "literal_rich_module.py").write_text(
        "NUMBERS = (" + ", ".join(str(7919 * n + 13) for n in range(400)) + ")\n"
        "WORDS = (" + ", ".join(f"'key{n}'" for n in range(200)) + ")\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("literal_rich_module")
    assert generate(strategy, 60, seed_value=5) == before
