"""A new ``features/*.feature`` file runs with no Python written for it.

features/conftest.py collects a feature file that no Python file beside it names, with
every area's steps bound; a file a test module names (the nine area files) is collected
through that module only.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.oracle_alone  # no Spark: it may run beside the Spark pre-run

FEATURES = Path(__file__).parents[1] / "features"

NEW_FEATURE = """\
@OXL
Feature: A user's own scenarios, two areas in one file

  @OXL-R1
  Scenario: An event one millisecond below the watermark is dropped
    Given late data configured with:
      | setting | value |
      | policy  | Drop  |
    When source 1 reports watermark 10000 ms
    And these events arrive in the next batch:
      | source | event_time |
      | 1      | 9999       |
    Then the verdicts in the last batch are:
      | source | event_time | verdict |
      | 1      | 9999       | dropped |

  @F065-R3
  Scenario: A key's first event is on time
    Given keyed watermarks with a bounded delay of 5000 ms
    When these events arrive in one batch:
      | key      | event_time |
      | tenant_a | 10000      |
    Then the verdicts in the last batch are:
      | key      | event_time | verdict |
      | tenant_a | 10000      | on_time |

  @F065-R3
  Scenario: A wrong expectation fails
    Given keyed watermarks with a bounded delay of 5000 ms
    When these events arrive in one batch:
      | key      | event_time |
      | tenant_a | 10000      |
    Then the verdicts in the last batch are:
      | key      | event_time | verdict |
      | tenant_a | 10000      | late    |
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """This project's features/ (conftest, two areas' files) and a new feature file."""
    pytester.makeini("[pytest]\nbdd_features_base_dir = features\n")
    features = pytester.mkdir("features")
    for area in ("late_data", "keyed_watermarks"):
        shutil.copy(FEATURES / f"test_{area}.py", features)
        shutil.copy(FEATURES / f"{area}.feature", features)
    shutil.copy(FEATURES / "conftest.py", features)
    (features / "mine.feature").write_text(NEW_FEATURE)
    return pytester


ARGS = (
    "-p",
    "harness.pytest_plugin",
    "--engine",
    "reference",
    "-p",
    "no:cacheprovider",
    "--conformance-report",
    "out/c.json",
)


def test_a_new_feature_file_runs_with_every_areas_steps(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(*ARGS, "features/mine.feature")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*FAILED features/mine.feature::test_a_wrong_expectation_fails*"])


def test_a_feature_file_a_module_names_is_collected_once(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(*ARGS, "--collect-only", "-q", "features")
    files = Counter(line.split("::")[0] for line in result.stdout.lines if "::" in line)
    modules = {"features/test_late_data.py", "features/test_keyed_watermarks.py"}
    assert set(files) == {"features/mine.feature", *modules}
    assert files["features/mine.feature"] == 3
