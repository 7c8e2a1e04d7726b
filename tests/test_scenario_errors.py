"""What a person writing Gherkin scenarios reads when a step or a tag is wrong.

A step mistake (a column the table lacks, a step no definition matches, a cell that is not
a number, a step of another area) is reported as the feature file's line, the scenario and
the step, and the message, without pytest-bdd's traceback; a failing Then comparison keeps
its side-by-side tables and gains the same first line, with the line of the first expected
row the answer lacks. A clause tag that spec/ lacks stops
collection, naming its line and the nearest ids (TR-12).
"""

from __future__ import annotations

from pathlib import Path

import pytest

# Not oracle_alone: pytester's in-process runs restore sys.modules afterwards, which would drop
# modules a background pre-run imported meanwhile (then pyspark has two Column classes).

PLUGIN = ("-p", "harness.pytest_plugin", "--engine", "reference")
CONFTEST = Path(__file__).parents[1] / "features" / "conftest.py"

# Line numbers matter: the tests below name them.
FEATURE = """\
Feature: Mistakes a newcomer makes

  Scenario: A column the table does not have
    Given keyed watermarks with a bounded delay of 5000 ms
    When these events arrive in one batch:
      | key | event_time |
      | a   | 7000       |
    Then the key watermarks are:
      | key | watermark | colour |
      | a   | 2000      | red    |

  Scenario: A step no definition matches
    Given keyed watermarks with a bounded delay of 5000 ms
    When these evnets arrive in one batch:
      | key | event_time |
      | a   | 7000       |
    Then the global watermark is 2000

  Scenario: A cell that is not a number
    Given keyed watermarks with a bounded delay of 5000 ms
    When these events arrive in one batch:
      | key | event_time |
      | a   | orders     |
    Then the global watermark is 2000

  Scenario: A step of another area
    Given keyed watermarks with a bounded delay of 5000 ms
    When these events arrive in one batch:
      | key | event_time |
      | a   | 7000       |
    Then the partition watermarks are:
      | source | partition | watermark |
      | 0      | 0         | 1         |

  Scenario: A comparison that fails
    Given keyed watermarks with a bounded delay of 5000 ms
    When these events arrive in one batch:
      | key | event_time |
      | a   | 7000       |
    Then the key watermarks are:
      | key | watermark |
      | a   | 2001      |

  Scenario: A step with a bug
    Given keyed watermarks with a bounded delay of 5000 ms
    Then a step with a bug runs

  Scenario: The second expected row is missing
    Given keyed watermarks with a bounded delay of 5000 ms
    When these events arrive in one batch:
      | key | event_time |
      | a   | 7000       |
      | b   | 9000       |
    Then the key watermarks are:
      | key | watermark |
      | a   | 2000      |
      | b   | 4001      |

  Scenario: The answer has a row more
    Given keyed watermarks with a bounded delay of 5000 ms
    When these events arrive in one batch:
      | key | event_time |
      | a   | 7000       |
      | b   | 9000       |
    Then the key watermarks are:
      | key | watermark |
      | a   | 2000      |
"""

TEST_MODULE = """\
from pytest_bdd import scenarios, then

scenarios("errors.feature")


@then("a step with a bug runs")
def buggy_step():
    return {}["missing"]
"""

INTERNALS = ("Traceback", "pytest_bdd", "site-packages", ".py:", "def ", "E   ")  # no frame of a traceback


def _features(pytester: pytest.Pytester, feature: str, module: str) -> None:
    """A project whose features/ binds the step library as the suite's own conftest does."""
    pytester.makeini("[pytest]\n")
    pytester.mkdir("features")
    (pytester.path / "features" / "conftest.py").write_text(CONFTEST.read_text(encoding="utf-8"))
    (pytester.path / "features" / "errors.feature").write_text(feature)
    (pytester.path / "features" / "test_errors.py").write_text(module)


@pytest.fixture
def run(pytester: pytest.Pytester) -> pytest.RunResult:
    _features(pytester, FEATURE, TEST_MODULE)
    return pytester.runpytest(*PLUGIN)


def failure_section(result: pytest.RunResult, test: str) -> list[str]:
    """The lines pytest prints for one failing test, between its ``___ name ___`` title and
    the next title or summary bar."""
    lines = result.stdout.lines
    title = f" {test}[reference] "
    start = next(i for i, line in enumerate(lines) if line.startswith("__") and title in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(("__", "==")))
    return lines[start + 1 : end]


def assert_short(section: list[str], where: str, scenario: str, step: str) -> None:
    assert section[0] == f'features/errors.feature:{where}: scenario "{scenario}", step "{step}"', section
    assert len(section) == 2, section
    for internal in INTERNALS:
        assert internal not in "\n".join(section), section


def test_every_scenario_fails_on_its_mistake(run: pytest.RunResult) -> None:
    run.assert_outcomes(failed=8)


def test_a_column_the_table_lacks_names_its_line_in_two_lines(run: pytest.RunResult) -> None:
    section = failure_section(run, "test_a_column_the_table_does_not_have")
    assert_short(section, "8", "A column the table does not have", "Then the key watermarks are:")
    assert section[1] == (
        "the key watermarks are: unknown columns ['colour']; allowed: ['key', 'state', 'watermark']"
    )


def test_a_step_no_definition_matches_names_its_line_and_the_nearest_step(run: pytest.RunResult) -> None:
    section = failure_section(run, "test_a_step_no_definition_matches")
    assert_short(section, "14", "A step no definition matches", "When these evnets arrive in one batch:")
    assert section[1].startswith("no When step definition matches")
    assert section[1].endswith('did you mean "When these events arrive in one batch:"?')


def test_a_cell_that_is_not_a_number_names_its_line(run: pytest.RunResult) -> None:
    section = failure_section(run, "test_a_cell_that_is_not_a_number")
    assert_short(section, "21", "A cell that is not a number", "When these events arrive in one batch:")
    assert section[1] == "'orders' is not a number of milliseconds"


def test_a_step_of_another_area_names_its_line(run: pytest.RunResult) -> None:
    section = failure_section(run, "test_a_step_of_another_area")
    assert_short(section, "31", "A step of another area", "Then the partition watermarks are:")
    assert "belongs to area 'partitioned_watermarks'; this scenario is 'keyed_watermarks'" in section[1]


def test_a_failing_comparison_points_at_the_first_expected_row_it_lacks(run: pytest.RunResult) -> None:
    section = failure_section(run, "test_the_second_expected_row_is_missing")
    assert section[0] == (
        'features/errors.feature:57: scenario "The second expected row is missing", '
        'step "Then the key watermarks are:", expected row 2 of 2 not in the answer'
    )


def test_a_failing_comparison_with_every_expected_row_found_points_at_its_step(run: pytest.RunResult) -> None:
    section = failure_section(run, "test_the_answer_has_a_row_more")
    assert section[0] == (
        'features/errors.feature:65: scenario "The answer has a row more", '
        'step "Then the key watermarks are:"'
    )
    assert "| b   | 4000      |" in "\n".join(section)


def test_a_failing_comparison_keeps_its_tables_and_gains_its_line(run: pytest.RunResult) -> None:
    section = failure_section(run, "test_a_comparison_that_fails")
    assert section[0] == (
        'features/errors.feature:42: scenario "A comparison that fails", '
        'step "Then the key watermarks are:", expected row 1 of 1 not in the answer'
    )
    assert section[1] == (
        "Then the key watermarks are (engine 'reference', after batch 0): expected and actual differ"
    )
    assert "| a   | 2001      |  ≠  | a   | 2000      |" in section
    assert len(section) <= 12, section
    for internal in INTERNALS:
        assert internal not in "\n".join(section), section


def test_the_short_summary_gives_the_message(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # room for the message after the test id
    _features(pytester, FEATURE, TEST_MODULE)
    result = pytester.runpytest(*PLUGIN)
    result.stdout.fnmatch_lines(
        ["FAILED *test_a_cell_that_is_not_a_number[[]reference[]] - 'orders' is not a number*"]
    )


def test_a_bug_in_a_step_keeps_its_traceback_and_names_the_step(run: pytest.RunResult) -> None:
    """Not a scenario mistake: the traceback is what its author needs; the step's line is added."""
    section = failure_section(run, "test_a_step_with_a_bug")
    text = "\n".join(section)
    assert "KeyError" in text and "buggy_step" in text
    step = 'features/errors.feature:46: scenario "A step with a bug", step "Then a step with a bug runs"'
    assert step in section


SPEC = "### AB-R1 A rule\n\nText.\n\n### AB-R2 Another rule\n\nText.\n"

TAGGED = """\
@AB-R1
Feature: Tags

  @AB-R2
  Scenario: A known clause
    Given keyed watermarks with a bounded delay of 5000 ms

  @AB-R2 @AB-R11
  Scenario: A misspelt clause
    Given keyed watermarks with a bounded delay of 5000 ms
"""


@pytest.mark.clauses("TR-12")
def test_an_unknown_clause_tag_stops_collection_naming_its_line_and_the_nearest_id(
    pytester: pytest.Pytester,
) -> None:
    pytester.mkdir("spec")
    (pytester.path / "spec" / "rules.md").write_text(SPEC)
    _features(pytester, TAGGED, 'from pytest_bdd import scenarios\n\nscenarios("errors.feature")\n')
    result = pytester.runpytest(*PLUGIN)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.assert_outcomes()  # collection stopped: nothing ran
    assert result.stderr.lines[:2] == [
        "ERROR: clause tags (TR-12): no heading of spec/*.md defines these ids",
        '  features/errors.feature:8: @AB-R11 (scenario "A misspelt clause") is not a clause of spec/; '
        "nearest: AB-R1, AB-R2",
    ]
    assert "Traceback" not in result.stderr.str()


def test_the_last_lines_count_the_most_frequent_failure_messages(pytester: pytest.Pytester) -> None:
    """A CI log that keeps only its tail still says why many tests failed: after the counts line,
    each frequent first line of a failure's message with how many reports share it."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        test_broken=(
            "import pytest\n\n"
            "@pytest.mark.parametrize('n', range(3))\n"
            "def test_engine(n):\n"
            "    raise RuntimeError(f'query 0000000{n}-89db-4199-be94-a555bc0714ef failed\\nsecond line')\n\n"
            "def test_compare():\n"
            "    assert 1 == 2\n\n"
            "def test_fine():\n"
            "    pass\n"
        )
    )
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1, failed=4)
    lines = result.stdout.lines
    start = lines.index("most frequent failure messages (4 failed reports):")
    assert "4 failed, 1 passed" in lines[start - 1]
    assert lines[start + 1 :] == [
        "      3 x RuntimeError: query <uuid> failed",
        "      1 x assert 1 == 2",
    ]
