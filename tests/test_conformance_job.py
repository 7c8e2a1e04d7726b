"""Tests marked ``conformance_job``: only the thorough profile's run (tox -e conformance) runs
them; the test job leaves them out and says how many, unless one is named by its node id."""

from __future__ import annotations

import pytest

# child processes of the oracle alone: they may run beside the Spark pre-run
pytestmark = pytest.mark.oracle_alone

SUITE = """\
import pytest

@pytest.mark.conformance_job("test_kept shows the same")
def test_moved():
    pass

SLOW = pytest.param("slow", marks=pytest.mark.conformance_job("the fast case shows it"))

@pytest.mark.parametrize("case", [SLOW, "fast"])
def test_cases(case):
    pass

def test_kept():
    pass
"""


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, profile: str, *args: str
) -> pytest.RunResult:
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("HYPOTHESIS_PROFILE", profile)  # the child pytest's profile
    return pytester.runpytest_subprocess("-p", "harness.pytest_plugin", "--engine", "reference", *args)


def test_the_test_job_leaves_them_out_and_says_how_many(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(pytester, monkeypatch, "ci", "-v")
    result.assert_outcomes(passed=2, deselected=2)
    result.stdout.fnmatch_lines(["*test_cases?fast? PASSED*", "*test_kept PASSED*"])
    result.stdout.no_fnmatch_line("*test_moved*PASSED*")
    result.stdout.fnmatch_lines(
        ["conformance job only: 2 tests left out under profile ci*tox -e conformance*"]
    )


@pytest.mark.parametrize("ci_variable", [None, "true"], ids=["local", "CI-set"])
def test_the_thorough_profile_runs_them(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci_variable: str | None
) -> None:
    # Hypothesis loads its own profile named ci on import where $CI is set (CI machines do)
    if ci_variable is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci_variable)
    result = _run(pytester, monkeypatch, "thorough")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["conformance: profile thorough, seed *"])


def test_a_test_named_by_its_node_id_runs_in_any_job(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(
        pytester, monkeypatch, "ci", "test_suite.py::test_moved", "test_suite.py::test_cases"
    ).assert_outcomes(passed=3)


def test_a_move_without_a_reason_stops_the_run(pytester: pytest.Pytester) -> None:
    bare = "import pytest\n\n@pytest.mark.conformance_job\ndef test_moved():\n    pass\n"
    pytester.makepyfile(test_bare=bare)
    result = pytester.runpytest_subprocess("-p", "harness.pytest_plugin", "--engine", "reference")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*conformance_job needs a reason*", "*test_bare.py::test_moved*"])
