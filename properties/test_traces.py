"""The harness's own rules (spec/traces.md): known deviations are strict expected failures."""

from __future__ import annotations

import pytest

DEVIATION = """
[[deviation]]
clause = "F065-R3"
reason = "a deliberately recorded deviation"
"""

TESTS = """
import pytest

@pytest.mark.clauses("F065-R3")
def test_still_deviates(engine):
    assert False

@pytest.mark.clauses("F065-R3")
def test_deviation_fixed(engine):
    pass

@pytest.mark.clauses("F065-R5")
def test_unaffected(engine):
    pass
"""


@pytest.mark.clauses("TR-11")
def test_a_known_deviation_is_a_strict_expected_failure(pytester: pytest.Pytester) -> None:
    pytester.mkdir("expectations")
    (pytester.path / "expectations" / "reference.toml").write_text(DEVIATION)
    pytester.makepyfile(test_deviation=TESTS)
    result = pytester.runpytest("-p", "harness.pytest_plugin", "--engine", "reference")
    # The failing test is expected; the passing one is XPASS(strict), a failure;
    # the test of another clause is untouched.
    result.assert_outcomes(xfailed=1, failed=1, passed=1)
    result.stdout.fnmatch_lines(["FAILED *test_deviation_fixed*XPASS(strict)*"])
