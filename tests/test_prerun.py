"""The session's pre-run: scenarios and differential tests share one engine.run call.

An engine other than the oracle is asked, before its first test, for the traces of every
selected scenario and of every selected differential test (which register them); the tests
then read their answers from that run, so an expensive engine pays its fixed costs once.
That call runs in a thread while the oracle's tests run, and no other test starts before it
has finished; one scenario's trace runs first, alone and under pytest's capture, so that
whatever the engine's processes print is captured rather than written to the terminal. It runs
in a thread of its own, while the main thread draws the differential tests' traces.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.hypothesis_profiles import differential_budget

# Not oracle_alone: pytester's in-process runs restore sys.modules afterwards, which would drop
# modules a background pre-run imported meanwhile (then pyspark has two Column classes).

ROOT = Path(__file__).resolve().parent.parent
# the oracle under another name: an engine the differential tests compare with the oracle
OTHER = "harness.reference_engine:ReferenceEngine"


@pytest.mark.clauses("TR-9")
def test_a_differential_test_and_a_scenario_share_the_engines_one_run(tmp_path: Path) -> None:
    report = tmp_path / "conformance.json"
    selected = "engine_agrees_with_the_oracle or at_the_watermark_is_on_time"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--engine", OTHER, "-k", selected,
         "features/test_late_data.py", "properties/test_late_data.py", "--conformance-report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout, done.stdout[-2000:]
    engine = next(e for e in json.loads(report.read_text(encoding="utf-8"))["engines"] if e["id"] == OTHER)
    generated = differential_budget().traces  # the profile's, which the child process loads too
    assert engine["engine_run_calls"] == 1, engine
    assert engine["traces_run"] == generated + 1, engine  # and the scenario's one trace
    assert f"(1 of scenarios, {generated} registered by tests) in one engine.run call" in done.stdout


FEATURES_CONFTEST = ROOT / "features" / "conftest.py"

FEATURE = """\
Feature: Two scenarios

  Scenario: One key
    Given keyed watermarks with a bounded delay of 5000 ms
    When these events arrive in one batch:
      | key | event_time |
      | a   | 7000       |
    Then the global watermark is 2000

  Scenario: Two keys
    Given keyed watermarks with a bounded delay of 5000 ms
    When these events arrive in one batch:
      | key | event_time |
      | a   | 7000       |
      | b   | 9000       |
    Then the global watermark is 2000
"""

TEST_MODULE = """\
from pytest_bdd import scenarios

scenarios("two.feature")
"""

SLOW_ENGINE = """\
import threading
import time

from harness.engine import load_engine

LOG = "events.log"


def note(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


class Slow:
    name = "slow"

    def __init__(self):
        self.inner = load_engine("reference")
        self.areas = self.inner.areas
        self.started = False

    def run(self, traces):
        if not self.started:  # as a process the engine starts would, on the stdout it inherits
            print("the slow engine starts")
            self.started = True
        note(f"run start {len(traces)} {threading.current_thread().name}")
        time.sleep(1.0)
        try:
            return self.inner.run(traces)
        finally:
            note("run end")


ENGINE = Slow()


# An engine with run_apart: the pre-run beside the oracle's tests asks it, not run; one that
# declines returns None, and run answers instead.
class Apart(Slow):

    def __init__(self, declines):
        super().__init__()
        self.declines = declines

    def run_apart(self, traces):
        note(f"run_apart {len(traces)} {threading.current_thread().name}")
        return None if self.declines else self.inner.run(traces)


APART = Apart(declines=False)
DECLINES = Apart(declines=True)
"""

PLAIN_TESTS = """\
import pytest


def note(name):
    with open("events.log", "a") as f:
        f.write("test " + name + "\\n")


@pytest.mark.oracle_alone
def test_marked():
    note("test_marked")


def start():
    with open("events.log", "a") as f:
        f.write("after_prerun start\\n")


@pytest.mark.after_prerun.with_args(start)
def test_unmarked():
    note("test_unmarked")


@pytest.mark.after_prerun.with_args(start)
def test_second_reader():
    note("test_second_reader")


@pytest.mark.before_background
def test_on_the_clock():
    note("test_on_the_clock")
"""

# Each test takes 50 ms, as a real one takes milliseconds or more: on a loaded machine, tests
# that take none could all finish before the pre-run's thread is first scheduled.
LOGGING_CONFTEST = """\
import time


def pytest_runtest_call(item):
    with open("events.log", "a") as f:
        f.write("test " + item.name + "\\n")
    time.sleep(0.05)
"""


# Beside the oracle: two scenarios run on the oracle and on a toy engine whose run takes a
# second and logs its start and end; the project's conftest logs each test as it starts.


@pytest.fixture
def log(pytester: pytest.Pytester) -> list[str]:
    return _run(pytester, passed=8)


def _run(
    pytester: pytest.Pytester, passed: int, *options: str, engine: str = "slow_engine:ENGINE"
) -> list[str]:
    pytester.makeini("[pytest]\n")
    pytester.mkdir("features")
    (pytester.path / "features" / "conftest.py").write_text(
        FEATURES_CONFTEST.read_text(encoding="utf-8") + LOGGING_CONFTEST
    )
    (pytester.path / "features" / "two.feature").write_text(FEATURE)
    (pytester.path / "features" / "test_two.py").write_text(TEST_MODULE)
    (pytester.path / "slow_engine.py").write_text(SLOW_ENGINE)
    (pytester.path / "tests").mkdir(exist_ok=True)
    (pytester.path / "tests" / "test_plain.py").write_text(PLAIN_TESTS)
    pytester.syspathinsert()
    result = pytester.runpytest(
        "-p", "harness.pytest_plugin", "--engine", "reference", "--engine", engine, *options
    )  # fmt: skip
    result.assert_outcomes(passed=passed)
    assert "the slow engine starts" not in result.stdout.str()  # captured, as in a test
    (pytester.path / "stdout.txt").write_text(result.stdout.str())
    return (pytester.path / "events.log").read_text().splitlines()


def test_the_engine_starts_with_one_trace_before_any_test(log: list[str]) -> None:
    assert log[:2] == ["run start 1 start-slow_engine:ENGINE", "run end"], log


def test_the_pre_run_runs_in_a_thread_beside_the_oracles_tests(log: list[str]) -> None:
    start = log.index("run start 1 prerun-slow_engine:ENGINE")
    end = log.index("run end", start)
    beside = [line for line in log[start:end] if line.startswith("test ")]
    assert beside and all(line.endswith("[reference]") or line == "test test_marked" for line in beside), log
    assert "test test_marked" in beside, log  # an oracle_alone test runs beside it too


def test_no_test_of_the_engine_starts_before_its_pre_run_ends(log: list[str]) -> None:
    end = log.index("run end", log.index("run start 1 prerun-slow_engine:ENGINE"))
    engine_tests = [i for i, line in enumerate(log) if line.startswith("test ") and "[slow_engine" in line]
    assert len(engine_tests) == 2 and min(engine_tests) > end, log
    assert log.index("test test_unmarked") > end, log  # it may use the engine
    assert sum(line.startswith("run start") for line in log) == 2, log  # the cache answered them


def test_an_after_prerun_function_is_called_once_when_the_pre_run_is_over(log: list[str]) -> None:
    """Two tests name it; it runs once, after the pre-run and before the first test that waited."""
    end = log.index("run end", log.index("run start 1 prerun-slow_engine:ENGINE"))
    assert log.count("after_prerun start") == 1, log
    waiting = [i for i, line in enumerate(log) if line.startswith("test ") and i > end]
    first_after = min(i for i in waiting if log[i] != "test test_on_the_clock")
    assert end < log.index("after_prerun start") < first_after, log


def test_a_wall_clock_test_runs_after_the_pre_run_and_before_the_background_work(log: list[str]) -> None:
    """``before_background``: first after the pre-run, and the after_prerun functions wait for it."""
    end = log.index("run end", log.index("run start 1 prerun-slow_engine:ENGINE"))
    clock = log.index("test test_on_the_clock")
    assert end < clock < log.index("after_prerun start"), log
    # the oracle's tests are queued first: on a loaded machine some start only after the pre-run ended
    beside = {"test test_one_key[reference]", "test test_two_keys[reference]", "test test_marked"}
    waited = [i for i, line in enumerate(log) if line.startswith("test ") and i > end and line not in beside]
    assert clock == min(waited), log


def test_the_pre_run_beside_the_oracles_tests_asks_the_engines_run_apart(pytester: pytest.Pytester) -> None:
    """An engine with ``run_apart`` (Spark's: a process of its own) answers the background
    pre-run through it; the warm-up trace before it and later misses go through ``run``."""
    log = _run(pytester, 8, engine="slow_engine:APART")
    assert log[:2] == ["run start 1 start-slow_engine:APART", "run end"], log
    assert "run_apart 1 prerun-slow_engine:APART" in log, log
    assert not any(line.startswith("run start 1 prerun-") for line in log), log
    assert "in a process of its own" in (pytester.path / "stdout.txt").read_text()


def test_a_run_apart_that_declines_leaves_the_pre_run_to_run(pytester: pytest.Pytester) -> None:
    log = _run(pytester, 8, engine="slow_engine:DECLINES")
    # the oracle's tests log beside the pre-run's thread, so only that thread's own lines keep an order
    prerun = [line for line in log if line.endswith(" prerun-slow_engine:DECLINES")]
    assert prerun == ["run_apart 1 prerun-slow_engine:DECLINES", "run start 1 prerun-slow_engine:DECLINES"], (
        log
    )
    assert "in a process of its own" not in (pytester.path / "stdout.txt").read_text()


SLOW_ORACLE_TESTS = """\
import sys
import time

import pytest


@pytest.mark.oracle_alone
@pytest.mark.parametrize("n", range(8))
def test_slow(n):
    time.sleep(0.4)
    with open("events.log", "a") as f:
        f.write(f"switch interval {sys.getswitchinterval()}\\n")
"""


@pytest.fixture
def early_log(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """As ``log``, with eight oracle tests of 0.4 s each that outlast the pre-run, the early
    start's threshold at 1 s instead of minutes, and the conformance job's switch interval."""
    from harness import pytest_plugin

    monkeypatch.setattr(pytest_plugin, "EARLY_BACKGROUND_SECONDS", 1.0)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_slow_oracle.py").write_text(SLOW_ORACLE_TESTS)
    before = sys.getswitchinterval()
    log = _run(pytester, 16, "--background-switch-interval", "0.0005")
    assert sys.getswitchinterval() == before  # restored when the session ends
    return log


def test_after_a_pre_run_that_ends_beside_long_oracle_tests_the_background_work_starts_beside_them(
    early_log: list[str],
) -> None:
    log = early_log
    end = log.index("run end", log.index("run start 1 prerun-slow_engine:ENGINE"))
    start = log.index("after_prerun start")
    oracle = [i for i, line in enumerate(log) if line.startswith("switch interval")]
    assert end < start < max(oracle), log  # while oracle tests were still to run
    assert start < log.index("test test_on_the_clock"), log  # which the wall-clock test accepts
    assert log.count("after_prerun start") == 1, log


def test_the_switch_interval_given_holds_beside_the_oracles_tests(early_log: list[str]) -> None:
    intervals = {line for line in early_log if line.startswith("switch interval")}
    assert intervals == {"switch interval 0.0005"}, early_log
