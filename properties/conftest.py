"""Fixtures of the property suites.

* Loads the Hypothesis profile named by ``$HYPOTHESIS_PROFILE`` (``dev``,
  ``ci`` (default), ``thorough``; see harness/hypothesis_profiles.py).
* ``engine_under_test``: every engine chosen with ``--engine`` (option of
  harness.pytest_plugin) except the reference, which the differential tests
  compare it with. With the reference alone there is nothing to compare, and
  those tests are deselected rather than skipped. It answers from the session's
  pre-run: each selected differential test registers its generated traces
  (``PRERUN_TRACES``; another test names a function giving its traces with
  ``@pytest.mark.prerun_traces``), so they go to the engine in the same
  engine.run call as the scenarios' and each area's query runs its
  micro-batches once for both.
"""

from __future__ import annotations

import functools

import pytest

from harness.engine import Engine
from harness.hypothesis_profiles import load_profile
from harness.pytest_plugin import ORACLE_ENGINE, PRERUN_TRACES, chosen_engines, prerun_engine
from harness.replay import replaying
from strategies.common import differential_traces
from strategies.generator_coverage import start_background_count, stop_background_count

load_profile()

_NOTHING_TO_COMPARE = "no-engine-besides-reference"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine_under_test" in metafunc.fixturenames:
        others = [e for e in chosen_engines(metafunc.config) if e != ORACLE_ENGINE]
        metafunc.parametrize(
            "engine_under_test", others or [None], indirect=True, ids=others or [_NOTHING_TO_COMPARE]
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    idle = [i for i in items if f"[{_NOTHING_TO_COMPARE}" in i.nodeid]
    if idle:
        items[:] = [i for i in items if i not in idle]
        config.hook.pytest_deselected(items=idle)
    # The coverage tests read the background count: last, so it has the whole run to finish;
    # the kill tests read the background killed run, the hostile-row tests the query and the
    # layout tests the child started once the pre-run was over: just before them, for the same reason.
    counting = [i for i in items if i.path.name == COVERAGE_TESTS]
    killing = [i for i in items if i.path.name == FAULT_TESTS]
    hostile = [i for i in items if getattr(i, "originalname", "") == HOSTILE_SPARK_TEST]
    layouts = [i for i in items if i.path.name == LAYOUT_TESTS]
    if layouts:  # their child starts once the pre-run is over, from the session's scenario traces
        from properties.test_layouts import LOST_EXECUTOR_TEST, start_layout_runs, start_lost_executor_run

        start = functools.partial(start_layout_runs, config)
        lost = functools.partial(start_lost_executor_run, config)
        for item in layouts:
            own = lost if getattr(item, "originalname", "") == LOST_EXECUTOR_TEST else start
            item.add_marker(pytest.mark.after_prerun.with_args(own))
    late = {*counting, *killing, *hostile, *layouts}
    items[:] = [i for i in items if i not in late] + layouts + hostile + killing + counting
    if replaying() is not None:
        return  # --replay: the differential tests run the file's traces instead
    for item in items:
        parts = getattr(getattr(item, "module", None), "DIFFERENTIAL", None)
        if getattr(item, "originalname", "") == DIFFERENTIAL_TEST and parts is not None:
            item.stash[PRERUN_TRACES] = functools.partial(differential_traces, tuple(parts))


COVERAGE_TESTS = "test_generator_coverage.py"
FAULT_TESTS = "test_faults.py"
LAYOUT_TESTS = "test_layouts.py"
HOSTILE_SPARK_TEST = "test_spark_hostile_rows_give_the_oracles_answer"  # properties/test_hostile_rows.py


# Each area's differential test: check_generated(engine_under_test, *DIFFERENTIAL) of its module.
DIFFERENTIAL_TEST = "test_engine_agrees_with_the_oracle"


def pytest_collection_finish(session: pytest.Session) -> None:
    # The generator-coverage draws start now, at the lowest priority: on what the Spark suites
    # leave idle.
    areas = [
        i.callspec.params["area"]
        for i in session.items
        if i.path.name == COVERAGE_TESTS and hasattr(i, "callspec")
    ]
    if areas and not session.config.option.collectonly:
        start_background_count(areas)


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop_background_count()  # a run stopped early (-x, Ctrl-C) leaves no drawing process behind


@pytest.fixture
def engine_under_test(request: pytest.FixtureRequest) -> Engine:
    return prerun_engine(request.config, request.param)
