"""pytest plumbing of the conformance suites (loaded by ``-p harness.pytest_plugin``).

* ``--engine NAME`` (repeatable; default ``reference`` and ``spark``; NAME as
  ``harness.engine.load_engine`` accepts) parametrizes the ``engine`` fixture,
  so test ids carry the engine name: ``test_...[reference]``.
* Engine runs are session-wide and cached by the trace's JSON. The first time a
  scenario of an engine needs output, every collected scenario of that engine
  is replayed through the step library (Given/When only) and all their traces
  go to ONE ``engine.run`` call; later steps read the cache. Property tests
  use ``engine.run(traces)`` on the same cache. The tests that ask the
  oracle alone run first, and that call runs in a thread beside them; every
  other test waits for it. The engine starts, on its smallest scenario, while
  the main thread draws the differential tests' traces.
* Tags: clause tags (``@F065-R7``) become ``@pytest.mark.clauses(...)``, the
  marker property tests use; ``@oracle-only`` scenarios run on the reference
  engine only and are deselected, and counted as oracle-only, for the others.
* An engine that cannot be loaded ends the run with one message. Tests of the
  Spark implementation itself (``test_spark_*``, or ``@pytest.mark.spark_only``)
  are deselected when no engine named ``spark`` is chosen.
* ``expectations/<engine name>.toml`` (harness/expectations.py): a ``scenario``
  entry makes that test a strict xfail; a place entry excuses a failure whose
  every difference from the oracle lies in the tables and columns it names; a
  test whose traces differ only where the file's ``[shows]`` says the engine
  shows nothing passes. A failure is charged in the summary to the clauses of
  its unexcused differences (harness/output_clauses.py), a deviation to its
  entries' clauses, not to every clause the test names.
* One seed per run (TR-13): ``CONFORMANCE_SEED``, else 0 under the ``ci``
  profile and a fresh one otherwise; handed to Hypothesis as
  ``--hypothesis-seed`` would be, and printed in the header.
* A failing generated example of a Hypothesis property is saved under
  ``reports/failures/`` and the failure names the command that replays it;
  ``--replay FILE`` runs a property once on the file's arguments, and a
  differential test on the file's traces (harness/replay.py).
* Every test of ``properties/`` and scenario of ``features/`` must name a
  clause that ``spec/`` defines (TR-12): an id ``spec/`` lacks stops the run at
  collection, naming the tag's file and line and the nearest ids; a test that
  names no clause fails the run, listed at its end.
* A scenario step's mistake (a StepUsageError, a step no definition matches)
  or a failing Then comparison is reported as ``features/x.feature:LINE`` with
  the scenario, the step and the message, without the pytest-bdd traceback
  (``--full-trace`` keeps it).
* The terminal summary prints one row per clause of ``spec/*.md`` and engine
  (scenarios and properties passed/failed, known deviations, oracle-only) and
  writes the same as JSON to ``reports/conformance.json``, with the Markdown,
  HTML and JUnit XML reports beside it (harness/reports.py). It is built from
  the test reports of this run; nothing is run again for it.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import json
import os
import re
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness import expectations, replay
from harness.clauses import clause_sort_key, is_clause_id, load_clauses
from harness.engine import (
    BUILTIN_ENGINES,
    COMMAND_ENGINES,
    Engine,
    engine_provenance,
    load_engine,
    run_canonical,
)
from harness.expectations import (
    FAILING_ENTRY,
    Deviation,
    ExpectationFileError,
    Expectations,
    Judged,
    Ran,
    charged,
    entry_statuses,
    file_name,
    load_expectations,
    unknown_clause_problems,
)
from harness.hypothesis_profiles import (
    ENV_VAR,
    SEED_VAR,
    load_profile,
    profile_name,
    run_seed,
    set_run_seed,
)
from harness.output_clauses import clause_areas
from harness.outputs import Output, format_table
from harness.traces import Trace

DEFAULT_ENGINES = ("reference", "spark")
ORACLE_ENGINE = "reference"
ORACLE_ONLY_TAG = "oracle-only"


# ---- options and markers ----------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    # --engine goes to the anonymous group: a conftest that also tries to add it
    # then gets pytest's ValueError ("already added") rather than an argparse conflict.
    parser.addoption(
        "--engine",
        action="append",
        dest="engines",
        metavar="NAME",
        help="engine to run the suites against: reference, spark or package.module:attribute "
        f"(repeatable; default: {' and '.join(DEFAULT_ENGINES)})",
    )
    group = parser.getgroup("conformance")
    group.addoption(
        "--background-switch-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the interpreter's thread switch interval from the pre-run's start on (default: Python's, "
        "5 ms); the conformance job gives 0.0005, so the pre-run's thread is not starved beside the "
        "oracle's thousand-example tests",
    )
    group.addoption(
        "--conformance-report",
        default="reports/conformance.json",
        metavar="PATH",
        help="where the conformance summary JSON goes, relative to the rootdir (default: %(default)s)",
    )
    group.addoption(
        "--expectations-dir",
        default="expectations",
        metavar="DIR",
        help="folder of the per-engine expectation files <engine>.toml (default: %(default)s)",
    )
    group.addoption(
        "--replay",
        default=None,
        metavar="FILE",
        help="run the failing case saved in FILE (reports/failures/*.json) instead of generating; "
        "select the test it names",
    )


@pytest.hookimpl(tryfirst=True)  # before Hypothesis's plugin reads --hypothesis-seed
def pytest_configure(config: pytest.Config) -> None:
    _configure_seed(config)
    try:
        config.stash[_REPLAY_BEFORE] = replay.configure(
            Path(config.rootpath, replay.FAILURES_DIR),
            os.environ.get("TOX_ENV_NAME") or "conformance",
            config.getoption("replay"),
        )
    except replay.ReplayError as e:
        raise pytest.UsageError(str(e)) from None
    config.stash[_TAG_PROBLEMS] = []
    config.addinivalue_line(
        "markers", "clauses(*ids): the spec clauses a test shows, e.g. clauses('F065-R5', 'F065-R7')"
    )
    config.addinivalue_line("markers", "oracle_only(reason): an API-level scenario run on the reference only")
    config.addinivalue_line("markers", "feature_tag(name): a Gherkin tag, neither a clause nor oracle-only")
    config.addinivalue_line(
        "markers",
        "prerun_traces(function): function() gives traces the test will ask its engine for; the "
        "session's pre-run sends them with the scenarios' (PRERUN_TRACES)",
    )
    config.addinivalue_line(
        "markers",
        "conformance_job(reason): a test only the conformance job runs (the thorough profile): it "
        "costs minutes, and the reason names the tests that show the same in the test job, or says "
        "why none can; deselected under the other profiles unless its node id is on the command line",
    )
    config.addinivalue_line(
        "markers",
        "spark_only: a test of the Spark implementation (as a test_spark_* name), run when spark is chosen",
    )
    config.addinivalue_line(
        "markers",
        "oracle_alone: a test that asks no engine but the oracle (nor starts one), so it may run while "
        "another engine's pre-run runs",
    )
    config.addinivalue_line(
        "markers",
        "after_prerun(function): (given with .with_args) function() starts work in the background that "
        "the test reads later; called once, when the pre-runs are over: at the next oracle test's start "
        "if they ended beside the oracle's tests, else when the first test that may not run beside "
        "them and is not marked before_background starts",
    )
    config.addinivalue_line(
        "markers",
        "before_background: a test that waits on the wall clock: it runs first after the pre-runs, "
        "before the after_prerun functions start their background work (unless the pre-runs ended "
        "beside the oracle's tests, which started it)",
    )
    engines = list(dict.fromkeys(config.getoption("engines") or DEFAULT_ENGINES))
    config.stash[_RUNS] = EngineRuns(config, engines)
    config.stash[_RESULTS] = {}
    config.stash[_FAILURE_CAUSES] = Counter()


def _configure_seed(config: pytest.Config) -> None:
    """TR-13: one seed for Hypothesis and the differential traces alike."""
    profile = config.getoption("hypothesis_profile", default=None)
    if profile:
        os.environ[ENV_VAR] = profile  # so run_seed() and the property suites see the chosen profile
    try:
        # now, not at the first property module: Hypothesis loads its own "ci" where $CI is set
        load_profile()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    given = config.getoption("hypothesis_seed", default=None)
    if given is not None:
        try:
            set_run_seed(int(given))
        except ValueError:
            raise pytest.UsageError(f"--hypothesis-seed={given!r}: give a whole number") from None
    else:
        try:
            config.option.hypothesis_seed = str(run_seed())
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SWITCH_INTERVAL_BEFORE in config.stash:
        sys.setswitchinterval(config.stash[_SWITCH_INTERVAL_BEFORE])
    before = config.stash.get(_REPLAY_BEFORE, None)
    if before is not None:
        replay.restore(before)
    _write_failure_causes(config)


#: how many of the most frequent failure messages the run's last lines repeat
FAILURE_CAUSES_SHOWN = 5


def _write_failure_causes(config: pytest.Config) -> None:
    """After the counts line, the most frequent first lines of the failures' messages: a CI log
    that keeps only its tail still says why hundreds of tests failed."""
    causes = config.stash.get(_FAILURE_CAUSES, None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if not causes or reporter is None:
        return
    reporter.write_line(f"most frequent failure messages ({sum(causes.values())} failed reports):")
    for message, count in causes.most_common(FAILURE_CAUSES_SHOWN):
        reporter.write_line(f"  {count:5d} x {message}")
    runs = config.stash.get(_RUNS, None)
    for note in runs.prerun_notes if runs is not None else []:
        if " failed (" in note:  # a failed pre-run explains every scenario of its engine
            reporter.write_line(f"engine run: {note[:1000]}")


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)


def failure_cause(report: pytest.TestReport) -> str:
    """The first line of a failed report's message, at most 300 characters, its UUIDs (a query's
    id, a temporary folder) replaced so that one cause counts once whichever query it hit."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "(no message)")
    return _UUID.sub("<uuid>", first)[:300]


def pytest_report_header(config: pytest.Config) -> list[str]:
    seed = run_seed()
    lines = [f"conformance: profile {profile_name()}, seed {seed} ({SEED_VAR}={seed} repeats this run)"]
    if replay.replaying() is not None:
        lines.append(f"conformance: replaying {config.getoption('replay')}")
    return lines


def chosen_engines(config: pytest.Config) -> list[str]:
    """The engine names of this run, in --engine order (default reference and spark)."""
    return list(config.stash[_RUNS].engine_ids)


def session_scenario_traces(config: pytest.Config, engine_id: str) -> list[Trace]:
    """The distinct traces of this session's selected scenarios that run on ``engine_id``, in
    collection order (what its pre-run sends for the scenarios)."""
    return list(scenario_traces(config.stash[_RUNS].items, engine_id)[0].values())


_RUNS = pytest.StashKey["EngineRuns"]()
_RESULTS = pytest.StashKey[dict[str, "TestResult"]]()
_SPARK_ONLY_CLAUSES = pytest.StashKey[set[str]]()
_REPLAY_BEFORE = pytest.StashKey[tuple[Any, ...]]()
_FAILURE_CAUSES = pytest.StashKey["Counter[str]"]()
_TAG_PROBLEMS = pytest.StashKey[list[str]]()
_CONFORMANCE_JOB_ONLY = pytest.StashKey[int]()
#: what the judge's self-test (tests/test_judge.py) said of each expectation file, for the summary
JUDGE_SELFTEST = pytest.StashKey[list[str]]()


@pytest.hookimpl(tryfirst=True)
def pytest_bdd_apply_tag(tag: str, function: Any) -> Any:
    """Gherkin tags -> marks: clause ids, oracle-only, anything else as feature_tag."""
    if is_clause_id(tag):
        pytest.mark.clauses(tag)(function)
    elif tag == ORACLE_ONLY_TAG:
        pytest.mark.oracle_only(function)
    else:
        pytest.mark.feature_tag(tag)(function)
    return True


# ---- the engine fixture -----------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine" in metafunc.fixturenames:
        engines = metafunc.config.stash[_RUNS].engine_ids
        metafunc.parametrize("engine", engines, indirect=True, ids=engines)


def engine_for(request: pytest.FixtureRequest) -> EngineHandle:
    """Body of every ``engine`` fixture: the session's handle of the parametrized engine."""
    engine_id = getattr(request, "param", None)
    if engine_id is None:
        raise pytest.UsageError("the 'engine' fixture is parametrized by harness.pytest_plugin (--engine)")
    return request.config.stash[_RUNS].handle(engine_id)


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> EngineHandle:
    """The engine under test (parametrized by ``--engine``). ``features/conftest.py``
    overrides it with an autouse copy so that every scenario is multiplied."""
    return engine_for(request)


# ---- session-wide engine runs -----------------------------------------------


@dataclass
class EngineHandle:
    """One engine for the whole session: loaded lazily, outputs cached by trace JSON."""

    id: str
    runs: EngineRuns
    _engine: Engine | None = None
    _load_error: BaseException | None = None
    cache: dict[str, Output | Exception] = field(default_factory=dict)
    prepared: bool = False
    background: threading.Thread | None = None  # the pre-run, while it runs beside the oracle's tests
    ran_apart: bool = False  # whether the engine's run_apart answered a run (the pre-run's)
    calls: int = 0  # engine.run calls, for the summary
    traces_run: int = 0

    @property
    def name(self) -> str:
        return self.id

    def engine(self) -> Engine:
        if self._engine is None:
            if self._load_error is None:
                try:
                    self._engine = load_engine(self.id)
                except Exception as e:  # noqa: BLE001 - reported on every test of this engine
                    self._load_error = e
            if self._load_error is not None:
                pytest.fail(
                    f"engine {self.id!r} could not be loaded: {type(self._load_error).__name__}: "
                    f"{self._load_error}",
                    pytrace=False,
                )
        assert self._engine is not None
        return self._engine

    def prepare(self) -> None:
        """The session's pre-run of this engine, once, before its first answer (waiting for it
        when it runs in the background)."""
        if not self.prepared:
            self.prepared = True
            self.runs.prerun(self)
        if self.background is not None:
            self.background.join()
            self.background = None

    def prepare_in_background(self, beside: int) -> None:
        """Starts the pre-run's engine.run call in a thread, while the main thread runs the
        ``beside`` tests of the oracle, ordered first: an engine mostly waits on its own processes (a
        Spark query on its JVM and Python workers), which leaves a core for the oracle."""
        if self.prepared:
            return
        self.prepared = True
        starting: list[threading.Thread] = []

        def start_engine(scenarios: list[Trace]) -> None:
            # The engine starts on the smallest scenario while this thread draws the tests' traces:
            # the draw keeps one core busy, the engine's start mostly its own processes.
            if scenarios:
                start = threading.Thread(
                    target=self._start, args=(scenarios,), name=f"start-{self.id}", daemon=True
                )
                starting.append(start)
                start.start()

        # The engine's processes (Spark's JVM) keep the stdout they start with: start them under
        # pytest's capture, as a test would, not on the terminal.
        with _global_capture(self.runs.config):
            todo, scenarios = self.runs.prerun_traces(self, start_engine)
            if not starting:
                self._start(todo)
            for thread in starting:
                thread.join()
        if todo:
            note = f", in the background beside {beside} tests of the oracle, after one trace alone"
            _lower_switch_interval(self.runs.config)
            self.background = threading.Thread(
                target=self.runs.run_prerun, args=(self, todo, scenarios, note, True),
                name=f"prerun-{self.id}", daemon=True,
            )  # fmt: skip
            self.background.start()

    def _start(self, traces: list[Trace]) -> None:
        """Starts the engine's processes with the smallest of ``traces`` (its errors are noted
        when the pre-run meets them)."""
        if traces:
            with contextlib.suppress(Exception):
                self.run([min(traces, key=lambda t: sum(len(b) for b in t.batches))])

    def output(self, trace: Trace) -> Output | Exception:
        """Output of one trace: from the session pre-run, or run alone on a miss."""
        self.prepare()
        return self.run([trace])[0]

    def run(self, traces: Sequence[Trace], apart: bool = False) -> list[Output | Exception]:
        """Outputs of many traces in at most one engine.run call (cached). ``apart``: through the
        engine's ``run_apart`` when it has one that applies (the same answers from a process of its
        own, so the oracle's tests in this process do not hold up its Python)."""
        engine = self.engine()
        for t in traces:
            if t.area not in engine.areas:
                pytest.skip(f"engine {self.id!r} does not implement area {t.area!r}")
        keys = [t.dumps() for t in traces]
        missing: dict[str, Trace] = {}
        for k, t in zip(keys, traces, strict=True):
            if k not in self.cache:
                missing.setdefault(k, t)
        if missing:
            self.calls += 1
            self.traces_run += len(missing)
            runner = _Apart(engine) if apart else engine
            results = run_canonical(runner, list(missing.values()))
            self.ran_apart = self.ran_apart or (isinstance(runner, _Apart) and runner.answered_apart)
            self.cache.update(zip(missing.keys(), results, strict=True))
        return [self.cache[k] for k in keys]


@dataclass
class _Apart:
    """An engine whose ``run`` is its ``run_apart`` when it has one and it applies (it returns
    answers, not None), else its own ``run``."""

    engine: Engine
    answered_apart: bool = False
    name: str = field(init=False)
    areas: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.name, self.areas = self.engine.name, self.engine.areas

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]:
        apart = getattr(self.engine, "run_apart", None)
        answers = apart(traces) if apart is not None else None
        self.answered_apart = answers is not None
        return self.engine.run(traces) if answers is None else answers


# The pre-run's thread drives its engine over sockets (Spark: py4j) and needs the GIL for a moment
# after each reply; beside an oracle test that holds it, each moment waits up to the switch interval.
_SWITCH_INTERVAL_BEFORE = pytest.StashKey[float]()


def _lower_switch_interval(config: pytest.Config) -> None:
    """From the first background work on, the interpreter's switch interval is the one
    ``--background-switch-interval`` gives, if any (restored when the session ends)."""
    wanted = config.getoption("background_switch_interval", default=None)
    if wanted is None or _SWITCH_INTERVAL_BEFORE in config.stash:
        return
    if wanted <= 0:
        raise pytest.UsageError(f"--background-switch-interval={wanted}: give a number of seconds above 0")
    config.stash[_SWITCH_INTERVAL_BEFORE] = sys.getswitchinterval()
    sys.setswitchinterval(wanted)


@contextlib.contextmanager
def _global_capture(config: pytest.Config) -> Iterator[None]:
    """pytest's session-wide capture resumed (what it captures goes to the next test's report)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is None or not capture.is_globally_capturing():
        yield
        return
    capture.resume_global_capture()
    try:
        yield
    finally:
        capture.suspend_global_capture()


@dataclass
class PrerunEngine:
    """An engine that answers from the session's pre-run (then from its cache, then by running
    what is missing): what a test that asks for traces it registered under ``PRERUN_TRACES``
    is given, so those traces share the scenarios' engine.run call."""

    handle: EngineHandle

    @property
    def name(self) -> str:
        return self.handle.engine().name

    @property
    def areas(self) -> frozenset[str]:
        return self.handle.engine().areas

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]:
        self.handle.prepare()
        return self.handle.run(traces)


# On a test item: the traces it will ask its engine for (a differential test's generated ones).
# The pre-run sends them with the scenarios' in one engine.run call, so each area's query runs
# its micro-batches once for both.
PRERUN_TRACES = pytest.StashKey[Callable[[], Sequence[Trace]]]()


def prerun_engine(config: pytest.Config, engine_id: str) -> PrerunEngine:
    """The engine ``engine_id`` of this session, answering from its pre-run."""
    return PrerunEngine(config.stash[_RUNS].handle(engine_id))


class EngineRuns:
    def __init__(self, config: pytest.Config, engine_ids: list[str]) -> None:
        self.config = config
        self.engine_ids = engine_ids
        self.handles = {e: EngineHandle(e, self) for e in engine_ids}
        self.items: list[pytest.Item] = []
        self.prerun_notes: list[str] = []
        self.prerun_skipped: dict[str, int] = {}
        self.expectations: dict[str, Expectations] = {}
        self.unused_files: list[str] = []

    def handle(self, engine_id: str) -> EngineHandle:
        return self.handles[engine_id]

    def load_all(self) -> None:
        """Every chosen engine, before any test: one that cannot be imported or built ends the
        run with one message, rather than failing each of its tests."""
        for handle in self.handles.values():
            try:
                handle.engine()
            except pytest.fail.Exception as e:
                raise pytest.UsageError(
                    f"{e.msg}\n(--engine takes reference, spark or package.module:attribute; "
                    "the module must be importable from the current directory or PYTHONPATH)"
                ) from None

    def load_expectations(self, directory: Path) -> None:
        known = {c.id for c in load_clauses(Path(self.config.rootpath, "spec"))}
        self.expectations = {}
        for engine_id, handle in self.handles.items():
            try:
                exp = load_expectations(directory, engine_id, handle.engine().name)
            except ExpectationFileError as e:
                raise pytest.UsageError(str(e)) from None
            exp.problems += unknown_clause_problems(exp, known)
            self.expectations[engine_id] = exp
        used = {e.path.name for e in self.expectations.values() if e.path is not None}
        known = {file_name(name) for name in (*BUILTIN_ENGINES, *COMMAND_ENGINES)}  # not a misspelt file
        self.unused_files = (
            sorted(p.name for p in directory.glob("*.toml") if p.name not in used | known)
            if directory.is_dir()
            else []
        )

    def prerun(self, handle: EngineHandle) -> None:
        """Collects the traces of every selected scenario of this engine, and those the selected
        tests registered (``PRERUN_TRACES``), and runs them once."""
        todo, scenarios = self.prerun_traces(handle)
        if todo:
            self.run_prerun(handle, todo, scenarios)

    def prerun_traces(
        self, handle: EngineHandle, scenarios_ready: Callable[[list[Trace]], None] | None = None
    ) -> tuple[list[Trace], int]:
        """The pre-run's traces of this engine and how many of them are scenarios'. Runs in the
        main thread: replaying scenarios and drawing registered traces use pytest and Hypothesis.
        ``scenarios_ready`` is given the engine's scenario traces before the draw begins."""
        traces, skipped = scenario_traces(self.items, handle.id)
        self.prerun_skipped[handle.id] = skipped
        scenarios = len(traces)
        if scenarios_ready is not None:
            areas = handle.engine().areas
            scenarios_ready([t for t in traces.values() if t.area in areas])
        for item in self.items:
            registered = item.stash.get(PRERUN_TRACES, None)
            if registered is None or _engine_of(item) != handle.id:
                continue
            try:
                generated = registered()
            except Exception:  # noqa: BLE001 - the test itself meets the error and reports it
                continue
            for t in generated:
                traces.setdefault(t.dumps(), t)
        engine = handle.engine()
        return [t for t in traces.values() if t.area in engine.areas], scenarios

    def run_prerun(
        self, handle: EngineHandle, todo: list[Trace], scenarios: int, beside: str = "", apart: bool = False
    ) -> None:
        """The engine.run call of the pre-run (thread-safe towards the main thread as long as no
        test of this engine runs: ``EngineHandle.prepare`` waits for it); ``apart``: beside the
        oracle's tests, through the engine's ``run_apart`` where it has one."""
        engine = handle.engine()
        started = time.monotonic()
        try:
            handle.run(todo, apart=apart)
        except Exception as e:  # noqa: BLE001 - fall back to one run per trace
            self.prerun_notes.append(
                f"{handle.id}: the combined run of {len(todo)} traces failed ({type(e).__name__}: {e}); "
                "each scenario runs its trace alone"
            )
            return
        where = getattr(engine, "description", "")  # e.g. classic Spark or Spark Connect
        where += ", in a process of its own" if handle.ran_apart else ""
        label = f"{handle.id} ({where.lstrip(', ')})" if where else handle.id
        skipped = self.prerun_skipped.get(handle.id, 0)
        self.prerun_notes.append(
            f"{label}: {len(todo)} traces ({scenarios} of scenarios, {len(todo) - scenarios} registered "
            f"by tests) in one engine.run call, {time.monotonic() - started:.1f} s{beside}"
            + (f" ({skipped} scenarios could not be replayed)" if skipped else "")
        )
        # where the run's time went, query by query (an engine that says: SparkEngine does)
        self.prerun_notes.extend(f"{handle.id} query {q}" for q in getattr(engine, "last_run_queries", ()))


def scenario_traces(items: Sequence[pytest.Item], engine_id: str) -> tuple[dict[str, Trace], int]:
    """The distinct traces of the selected scenarios run on ``engine_id`` (oracle-only ones left
    out), by their JSON text, and how many scenarios could not be replayed into traces."""
    from harness.steps import traces_of_scenario

    traces: dict[str, Trace] = {}
    skipped = 0
    for item in items:
        if _engine_of(item) != engine_id or item.get_closest_marker("skip") is not None:
            continue
        if item.get_closest_marker("oracle_only") is not None:
            continue
        scenario = scenario_of(item)
        if scenario is None:
            continue
        try:
            for t in traces_of_scenario(scenario.steps, scenario.name):
                traces.setdefault(t.dumps(), t)
        except Exception:  # noqa: BLE001 - the scenario's own run reports it
            skipped += 1
    return traces, skipped


ENGINE_PARAMS = ("engine", "engine_under_test")  # the latter: properties' differential tests


def _engine_of(item: pytest.Item) -> str | None:
    """The engine id an item runs against (its parametrization), None if none."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for name in ENGINE_PARAMS:
        value = callspec.params.get(name)
        if isinstance(value, str):
            return value
    return None


def scenario_of(item: pytest.Item) -> Any:
    """The rendered pytest-bdd scenario of an item, or None for other tests."""
    template = _template_of(item)
    if template is None:
        return None
    callspec = getattr(item, "callspec", None)
    example = callspec.params.get("_pytest_bdd_example", {}) if callspec is not None else {}
    return template.render(example)


def _template_of(item: pytest.Item) -> Any:
    from pytest_bdd.scenario import scenario_wrapper_template_registry

    func = getattr(item, "obj", None)
    if func is None:
        return None
    try:
        return scenario_wrapper_template_registry.get(func)
    except TypeError:  # not weak-referenceable: not a scenario
        return None


def item_clauses(item: pytest.Item) -> list[str]:
    out: list[str] = []
    for mark in item.iter_markers("clauses"):
        out.extend(str(a) for a in mark.args)
    return sorted(set(out), key=clause_sort_key)


def item_name(item: pytest.Item) -> str:
    """Scenario name for a scenario, function name for other tests."""
    template = _template_of(item)
    if template is not None:
        return template.name
    name = getattr(item, "originalname", item.name)
    if name == "runTest" and item.parent is not None:
        return item.parent.name  # a Hypothesis state machine: its TestCase class names it
    return name


# ---- collection: oracle-only and expectations -------------------------------


SPARK_ONLY_PREFIX = "test_spark_"  # a test of the Spark implementation itself, whatever --engine says


def _is_spark_only(item: pytest.Item) -> bool:
    name = getattr(item, "originalname", item.name)
    return name.startswith(SPARK_ONLY_PREFIX) or item.get_closest_marker("spark_only") is not None


def spark_only_clauses(items: list[pytest.Item]) -> set[str]:
    """Clauses that only tests of the Spark implementation name: comparisons with Spark's own
    operators, which no other engine can be asked about (shown as spark-only, not untested)."""
    spark = {c for i in items if _is_spark_only(i) for c in item_clauses(i)}
    return spark - {c for i in items if not _is_spark_only(i) for c in item_clauses(i)}


@pytest.hookimpl(tryfirst=True)  # before the suites' own orderings (a conftest may put tests last)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    unknown = unknown_clause_tags(config, items)
    if unknown:  # TR-12: a misspelt id stops the run here, with the ids it may have meant
        raise pytest.UsageError(
            "clause tags (TR-12): no heading of spec/*.md defines these ids\n" + "\n".join(unknown)
        )
    config.stash[_CONFORMANCE_JOB_ONLY] = _deselect_conformance_job_tests(config, items)
    runs = config.stash[_RUNS]
    runs.load_all()  # an engine that cannot be loaded stops the run once, here
    exp_dir = Path(config.rootpath, config.getoption("expectations_dir"))
    runs.load_expectations(exp_dir)
    config.stash[_SPARK_ONLY_CLAUSES] = spark_only_clauses(items)
    if not any(h.engine().name == "spark" for h in runs.handles.values()):
        spark_only = [i for i in items if _is_spark_only(i)]
        if spark_only:
            items[:] = [i for i in items if not _is_spark_only(i)]
            config.hook.pytest_deselected(items=spark_only)
    oracle_only: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("prerun_traces")
        if marker is not None and PRERUN_TRACES not in item.stash:
            item.stash[PRERUN_TRACES] = marker.args[0]
        engine_id = _engine_of(item)
        if engine_id is None:
            continue
        if item.get_closest_marker("oracle_only") is not None and engine_id != ORACLE_ENGINE:
            # TR-10: not run on other engines, and shown as oracle-only in the summary.
            oracle_only.append(item)
            config.stash[_RESULTS][item.nodeid] = TestResult(
                item.nodeid,
                item_name(item),
                engine_id,
                _kind(item),
                item_clauses(item),
                "oracle-only",
                oracle_only_reason(item),
            )
            continue
        matched = runs.expectations[engine_id].for_test(item_name(item))
        if matched:
            item.add_marker(pytest.mark.xfail(strict=True, reason="; ".join(d.describe() for d in matched)))
            item.user_properties.append(("deviation", [_dev_json(d) for d in matched]))
    config.stash[_TAG_PROBLEMS] = clause_tag_problems(config, items)
    if oracle_only:
        items[:] = [i for i in items if i not in oracle_only]
        config.hook.pytest_deselected(items=oracle_only)
    # The oracle's tests first: the other engines' pre-runs run beside them (pytest_runtestloop).
    # Then the tests that wait on the wall clock, before the after_prerun work starts.
    items[:] = sorted(items, key=lambda i: (not _beside_prerun(config, i), not _waits_on_the_clock(i)))


def _deselect_conformance_job_tests(config: pytest.Config, items: list[pytest.Item]) -> int:
    """Outside the thorough profile, leaves out the tests marked ``conformance_job`` (but those
    named by node id on the command line); returns how many it left out."""
    unexplained = [i.nodeid for i in items if _conformance_job_without_reason(i)]
    if unexplained:  # the reason is what shows the move loses nothing
        raise pytest.UsageError(
            "conformance_job needs a reason: the test job's tests that show the same, or why none can:\n"
            + "\n".join(unexplained)
        )
    if profile_name() == "thorough":
        return 0
    named = [a.replace(os.sep, "/") for a in config.args if "::" in a]
    left_out = [
        i
        for i in items
        if i.get_closest_marker("conformance_job") is not None
        and not any(i.nodeid == a or i.nodeid.startswith(a + "[") for a in named)
    ]
    if left_out:
        items[:] = [i for i in items if i not in left_out]
        config.hook.pytest_deselected(items=left_out)
    return len(left_out)


def _conformance_job_without_reason(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("conformance_job")
    return marker is not None and not (marker.args and str(marker.args[0]).strip())


BESIDE_SUITES = ("features", "properties")  # where a test that names no engine asks the oracle alone


def _beside_prerun(config: pytest.Config, item: pytest.Item) -> bool:
    """Whether a test may run while another engine's pre-run runs: it asks the oracle alone
    (its engine parameter, a suite's property without one that is not a Spark test, or the
    ``oracle_alone`` marker)."""
    engine_id = _engine_of(item)
    if engine_id is not None:
        return engine_id == ORACLE_ENGINE
    if item.get_closest_marker("oracle_alone") is not None:
        return True
    try:
        suite = item.path.relative_to(config.rootpath).parts[0]
    except ValueError:
        return False
    return suite in BESIDE_SUITES and not _is_spark_only(item)


def _waits_on_the_clock(item: pytest.Item) -> bool:
    return item.get_closest_marker("before_background") is not None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    beside = sum(1 for i in session.items if _beside_prerun(session.config, i))
    session.config.stash[_BESIDE_PACE] = _BesidePace(beside)
    if beside and not session.config.option.collectonly:
        for handle in session.config.stash[_RUNS].handles.values():
            if handle.id != ORACLE_ENGINE and any(_engine_of(i) == handle.id for i in session.items):
                handle.prepare_in_background(beside)
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Only the oracle's tests run beside a background pre-run: any other test may use its engine.
    if not _beside_prerun(item.config, item):
        for handle in item.config.stash[_RUNS].handles.values():
            if handle.background is not None:
                handle.prepare()
        if not _waits_on_the_clock(item):
            # a wall-clock test beside the background work would take most of a minute longer
            _start_after_prerun(item.session)
    elif _BESIDE_PACE in item.config.stash:
        left = item.config.stash[_BESIDE_PACE].note_start()
        if left >= EARLY_BACKGROUND_SECONDS and _prerun_over(item.config):
            # The pre-runs ended well before the oracle's tests will (the conformance job's thousand
            # examples each): the background work takes the core they leave, rather than wait.
            _start_after_prerun(item.session)


# The after_prerun work starts beside the oracle's tests only when they will go on this long, at
# the pace they have kept: else the wall-clock tests after them would run beside it for nothing.
EARLY_BACKGROUND_SECONDS = 120.0


@dataclass
class _BesidePace:
    """How far the tests that run beside the pre-runs have got, and how fast."""

    total: int
    first_start: float = 0.0
    started: int = 0

    def note_start(self) -> float:
        """Counts one more of them as started; the seconds the rest will take at the pace so far."""
        now = time.monotonic()
        self.started += 1
        if self.started == 1:
            self.first_start = now
            return 0.0
        return (now - self.first_start) / (self.started - 1) * (self.total - self.started + 1)


_BESIDE_PACE = pytest.StashKey[_BesidePace]()


def _prerun_over(config: pytest.Config) -> bool:
    """Whether every engine but the oracle has run its pre-run, none still in its thread."""
    handles = [h for h in config.stash[_RUNS].handles.values() if h.id != ORACLE_ENGINE]
    return bool(handles) and all(
        h.prepared and (h.background is None or not h.background.is_alive()) for h in handles
    )


_STARTED = pytest.StashKey[bool]()


def _start_after_prerun(session: pytest.Session) -> None:
    """Once the pre-runs are over: each ``after_prerun`` function of the selected tests, once."""
    if session.config.stash.get(_STARTED, False):
        return
    session.config.stash[_STARTED] = True
    started: list[Any] = []
    for i in session.items:
        for mark in i.iter_markers("after_prerun"):
            function = mark.args[0]
            if function not in started:
                started.append(function)
                function()


TAGGED_SUITES = ("features", "properties")  # TR-12: every test in these folders names its clauses


def _tagged(config: pytest.Config, item: pytest.Item) -> bool:
    try:
        return item.path.relative_to(config.rootpath).parts[0] in TAGGED_SUITES
    except ValueError:
        return False


def clause_tag_problems(config: pytest.Config, items: Sequence[pytest.Item]) -> list[str]:
    """TR-12: the tests of features/ and properties/ that name no clause (a clause spec/ lacks
    stops collection: unknown_clause_tags)."""
    if not load_clauses(Path(config.rootpath, "spec")):
        return []  # no spec here (a third party's checkout): nothing to check against
    problems: dict[str, str] = {}
    for item in items:
        if _tagged(config, item) and not item_clauses(item):
            test = item.nodeid.split("[")[0]  # one line per test, not per engine
            problems.setdefault(test, f"{test}: names no clause")
    return sorted(problems.values())


def unknown_clause_tags(config: pytest.Config, items: Sequence[pytest.Item]) -> list[str]:
    """TR-12: one line per clause id a collected test names that no heading of spec/ defines
    (in any folder: a misspelt id would count for a clause that does not exist): where it is
    written (the tag's line of the feature file, or the test's ``def``) and the nearest ids."""
    known = [c.id for c in load_clauses(Path(config.rootpath, "spec"))]
    if not known:
        return []
    problems: dict[str, str] = {}
    for item in items:
        for clause in item_clauses(item):
            if clause in known:
                continue
            nearest = difflib.get_close_matches(clause, known, n=3, cutoff=0.6)
            hint = f"nearest: {', '.join(nearest)}" if nearest else "no id of spec/ is close"
            template = _template_of(item)
            if template is not None:
                where = f"{_feature_path(config, template.feature)}:{_tag_line(template, clause)}"
                what = f'@{clause} (scenario "{template.name}")'
            else:
                path, line, _ = item.location
                where = f"{path}:{line + 1}" if line is not None else path
                what = f"{clause} (test {item_name(item)})"
            problems.setdefault(f"{where} {clause}", f"  {where}: {what} is not a clause of spec/; {hint}")
    return sorted(problems.values())


def _feature_path(config: pytest.Config, feature: Any) -> str:
    """A feature file's path as the user runs it: relative to the rootdir."""
    try:
        return Path(feature.filename).relative_to(config.rootpath).as_posix()
    except ValueError:
        return str(feature.rel_filename)


def _tag_line(template: Any, tag: str) -> int:
    """The line of a scenario's tag: the nearest above the scenario for its own tags, else the
    first (a feature's or rule's tag); the scenario's line when the file cannot be read."""
    try:
        lines = Path(template.feature.filename).read_text(encoding="utf-8").splitlines()
    except OSError:
        return int(template.line_number)
    found = [n for n, line in enumerate(lines, 1) if f"@{tag}" in line.split()]
    if tag in template.tags:
        above = [n for n in found if n < template.line_number]
        return above[-1] if above else int(template.line_number)
    return found[0] if found else int(template.line_number)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if exitstatus != pytest.ExitCode.OK:
        return
    if session.config.stash.get(_TAG_PROBLEMS, None):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif _RUNS in session.config.stash and any(
        e["status"] in FAILING_ENTRY for b in expectation_entries(session.config) for e in b["entries"]
    ):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a fixed deviation must leave its file


# ---- failing generated examples: saved, and replayed (TR-13) ----------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    before = replay.set_current_test(item.nodeid)
    handler: Any = getattr(getattr(item, "obj", None), "hypothesis", None)
    original = getattr(handler, "inner_test", None)
    if original is not None and replay.replaying() is None:
        # Hypothesis documents inner_test as replaceable: the wrapper sees every example's arguments.
        handler.inner_test = _saving_failures(item, original)
    runs = item.config.stash[_RUNS]
    engine_id = _engine_of(item)
    try:
        # what a differential run may excuse: the place entries of the engine's file
        with expectations.activated(
            runs.expectations.get(engine_id or ""), item_clauses(item), item_name(item)
        ):
            return (yield)
    finally:
        if original is not None:
            handler.inner_test = original
        replay.set_current_test(before)


def _given_names(item: pytest.Item, inner: Any) -> list[str]:
    """The arguments Hypothesis supplies: the inner test's parameters the wrapper hides."""
    shown = set(inspect.signature(item.obj).parameters)  # type: ignore[attr-defined]
    return [n for n in inspect.signature(inner).parameters if n not in shown]


def _saving_failures(item: pytest.Item, inner: Any) -> Any:
    names = _given_names(item, inner)

    def run_example(*args: Any, **kwargs: Any) -> Any:
        try:
            return inner(*args, **kwargs)
        except (pytest.skip.Exception, pytest.xfail.Exception):
            raise
        except Exception as error:
            if _final_example():
                error.add_note(_save_example(item.nodeid, {n: kwargs[n] for n in names if n in kwargs}))
            raise

    return run_example


def _final_example() -> bool:
    """True while Hypothesis replays the shrunk failing example one last time."""
    from hypothesis.control import current_build_context

    try:
        return bool(current_build_context().is_final)
    except Exception:  # noqa: BLE001 - no build context: not inside Hypothesis
        return False


def _save_example(test_id: str, arguments: dict[str, Any]) -> str:
    seed = run_seed()
    traces = [v for v in arguments.values() if isinstance(v, Trace)]
    gherkin = "\n\n".join(g for g in map(_scenario_text, traces) if g) or None
    if not replay.encodable(arguments):
        return f"Replay this failing example: {replay.seed_command(test_id, seed)}"
    path = replay.write_failure(
        test_id, profile=profile_name(), seed=seed, arguments=arguments, gherkin=gherkin
    )
    beside = f" (and {path.with_suffix('.feature')})" if gherkin else ""
    return f"Failing example saved to {path}{beside}.\nReplay it: {replay.replay_command(test_id, path)}"


def _scenario_text(trace: Trace) -> str | None:
    """The trace as a scenario, the oracle's tables as its Then steps; None if it cannot be said."""
    from harness.differential import to_gherkin
    from harness.reference_engine import ReferenceEngine

    try:
        expected = run_canonical(ReferenceEngine(), [trace])[0]
        return to_gherkin(trace, expected, title="a failing generated example")
    except Exception:  # noqa: BLE001 - an oracle crash is the failure itself; the JSON still replays
        return None


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """``--replay FILE``: a Hypothesis property runs once on the file's arguments."""
    handler = getattr(pyfuncitem.obj, "hypothesis", None)
    if handler is None or replay.replaying() is None:
        return None
    names = _given_names(pyfuncitem, handler.inner_test)
    fixtures = {n: pyfuncitem.funcargs[n] for n in pyfuncitem._fixtureinfo.argnames}
    try:
        arguments = replay.replay_arguments(names)
    except replay.ReplayError as e:
        pytest.fail(str(e), pytrace=False)
    handler.inner_test(**fixtures, **arguments)
    return True


def oracle_only_reason(item: pytest.Item) -> str:
    template = _template_of(item)
    reason = (template.description or "").strip() if template is not None else ""
    mark = item.get_closest_marker("oracle_only")
    if not reason and mark is not None and mark.args:
        reason = str(mark.args[0])
    return " ".join(reason.split()) or "no reason given"


def _dev_json(d: Deviation) -> dict[str, Any]:
    return {"clause": d.clause, "scenario": d.scenario, "key": d.key, "reason": d.reason, "link": d.link}


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[_RUNS].items = list(session.items)


# ---- recording results ------------------------------------------------------


@dataclass
class TestResult:
    nodeid: str
    name: str
    engine: str
    kind: str  # scenario | property
    clauses: list[str]
    # passed | failed | deviation (expectation file) | unexpected-pass | xfailed (the test's own xfail)
    # | oracle-only | skipped
    outcome: str = "passed"
    detail: str = ""
    failed_clauses: list[str] = field(default_factory=list)  # what a failure is charged to
    involved: list[str] = field(default_factory=list)  # every clause its differences are attributed to
    excused_by: list[str] = field(default_factory=list)  # the keys of the place entries that excuse it
    unexcused: list[dict[str, Any]] = field(default_factory=list)  # the places no entry excuses
    unobservable: list[str] = field(default_factory=list)  # named clauses the engine shows nothing of


def _kind(item: pytest.Item) -> str:
    return "scenario" if _template_of(item) is not None else "property"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    results = item.config.stash[_RESULTS]
    res = results.get(item.nodeid)
    if res is None:
        res = results[item.nodeid] = TestResult(
            item.nodeid,
            item_name(item),
            # a test of the Spark implementation itself counts for spark, not for the oracle
            _engine_of(item) or ("spark" if _is_spark_only(item) else ORACLE_ENGINE),
            _kind(item),
            item_clauses(item),
        )
        res.unobservable = _unobservable(item.config.stash[_RUNS].expectations.get(res.engine), res.clauses)
    if report.failed and report.when == "call" and "XPASS(strict)" not in str(report.longrepr):
        _attribute_failure(item, call, report, res)
    if report.failed:
        res.outcome = "failed"
        item.config.stash[_FAILURE_CAUSES][failure_cause(report)] += 1
        if "XPASS(strict)" in str(report.longrepr):
            res.outcome = "unexpected-pass"
            res.detail = str(report.longrepr)
    elif report.skipped and res.outcome != "failed":
        if hasattr(report, "wasxfail"):
            from_file = res.excused_by or any(k == "deviation" for k, _ in item.user_properties)
            res.outcome = "deviation" if from_file else "xfailed"
            res.detail = str(report.wasxfail)
        else:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            oracle_only = "oracle-only" in reason
            res.outcome = "oracle-only" if oracle_only else "skipped"
            res.detail = reason.removeprefix("Skipped: ")
    if report.failed and report.when == "call":
        _report_step_failure(item, call, report)
    return report


def _attribute_failure(item: pytest.Item, call: pytest.CallInfo[None], report: Any, res: TestResult) -> None:
    """Which clauses a failure is charged to, and whether the engine's place entries excuse it
    (then the report becomes an expected failure, as a strict xfail would)."""
    error = call.excinfo.value if call.excinfo is not None else None
    runs = item.config.stash[_RUNS]
    exp = runs.expectations.get(res.engine)
    judged: list[Judged] | None
    if error is not None and hasattr(error, "judged"):  # a differential run placed its differences
        judged = error.judged
    else:
        judged = _scenario_judged(item, exp)
    joined = _joined(judged)
    if exp is not None and exp.shows is not None and joined is not None and not joined.differences:
        report.outcome = "passed"  # its traces differ only in tables or columns the engine does not show
        return
    res.failed_clauses = charged(joined, res.clauses)
    res.involved = sorted(
        set().union(*(d.clauses for d in joined.differences)) if joined else res.clauses, key=clause_sort_key
    )
    res.unexcused = [
        {"table": d.table, "place": d.place, "clauses": sorted(d.clauses, key=clause_sort_key)}
        for d in (joined.unexcused if joined else [])
    ]
    if exp is None or joined is None or joined.unexcused or not joined.excused_by:
        return
    res.excused_by = [d.key for d in joined.excused_by]
    report.outcome = "skipped"
    report.wasxfail = "; ".join(d.describe() for d in joined.excused_by)


def _unobservable(exp: Expectations | None, clauses: Sequence[str]) -> list[str]:
    """The clauses a test names that no table or column the engine's file shows decides."""
    if exp is None or exp.shows is None:
        return []
    areas = clause_areas()
    return [c for c in clauses if c in areas and c not in exp.observable(areas[c])]


def _joined(judged: list[Judged] | None) -> Judged | None:
    """The judgements of a test's traces as one: every difference, every unexcused one, every entry."""
    if not judged:
        return None
    return Judged(
        [d for j in judged for d in j.differences],
        [d for j in judged for d in j.unexcused],
        tuple(dict.fromkeys(e for j in judged for e in j.excused_by)),
    )


def _scenario_judged(item: pytest.Item, exp: Expectations | None) -> list[Judged] | None:
    """A failing scenario's traces judged: this engine's answers against the oracle's, placed by
    harness/output_clauses.py, the engine's place entries applied; None when that cannot be said."""
    from harness.differential import run_safely
    from harness.reference_engine import ReferenceEngine
    from harness.steps import traces_of_scenario

    engine_id = _engine_of(item)
    scenario = scenario_of(item)
    if scenario is None or engine_id is None or engine_id == ORACLE_ENGINE:
        return None
    handle = item.config.stash[_RUNS].handles[engine_id]
    try:
        traces = traces_of_scenario(scenario.steps, scenario.name)
    except Exception:  # noqa: BLE001 - a scenario the step library cannot replay
        return None
    found: list[Judged] = []
    for t in traces:
        actual = handle.cache.get(t.dumps())
        if actual is None:
            return None
        expected = run_safely(ReferenceEngine(), [t])[0]
        j = expectations.judge(t.area, t.config, expected, actual, exp, item_name(item))
        if j is None:
            return None
        found.append(j)
    return found


# ---- a scenario step's failure: its feature file and line, not a traceback ----


@dataclass
class StepFailure:
    """The step of a scenario that raised, as pytest-bdd's hooks name it."""

    where: str  # features/x.feature:LINE
    scenario: str
    step: str  # as written: "Then the key watermarks are:"
    type: str  # given | when | then ("And" steps take the type before them)
    error: BaseException
    hint: str = ""
    row_note: str = ""  # which expected row of the step's table the answer lacks


_STEP_FAILURE = pytest.StashKey[StepFailure]()


def _step_failure(request: Any, feature: Any, scenario: Any, step: Any, error: BaseException) -> StepFailure:
    line, row_note = step.line_number, ""
    row = getattr(error, "expected_row", None)  # set by harness.steps.assert_rows
    table = getattr(step, "datatable", None)
    if row is not None and table is not None and len(table.rows) == row[1] + 1:
        # the first expected row the answer lacks, not the step above its table
        line = table.rows[row[0] + 1].location.line
        row_note = f", expected row {row[0] + 1} of {row[1]} not in the answer"
    where = f"{_feature_path(request.config, feature)}:{line}"
    text = f"{step.keyword.strip()} {step.name}"
    return StepFailure(where, scenario.name, text, step.type, error, row_note=row_note)


def pytest_bdd_step_error(request: Any, feature: Any, scenario: Any, step: Any, exception: Exception) -> None:
    request.node.stash[_STEP_FAILURE] = _step_failure(request, feature, scenario, step, exception)


def pytest_bdd_step_func_lookup_error(
    request: Any, feature: Any, scenario: Any, step: Any, exception: Exception
) -> None:
    failure = _step_failure(request, feature, scenario, step, exception)
    nearest = _nearest_step(request.config, step)
    failure.hint = f'; did you mean "{nearest}"?' if nearest else ""
    request.node.stash[_STEP_FAILURE] = failure


def _nearest_step(config: pytest.Config, step: Any) -> str | None:
    """The closest text of a step of the same type that this session's scenarios use and the
    step library matches."""
    from harness.steps import LIBRARY, StepUsageError

    texts: set[str] = set()
    templates = {id(t): t for t in map(_template_of, config.stash[_RUNS].items) if t is not None}
    for template in templates.values():
        texts.update(s.name for s in template.steps if s.type == step.type and s.name != step.name)

    def matched(text: str) -> bool:
        try:
            return LIBRARY.find(step.type, text) is not None
        except StepUsageError:
            return False

    found = difflib.get_close_matches(step.name, sorted(t for t in texts if matched(t)), n=1, cutoff=0.6)
    return f"{step.keyword.strip()} {found[0]}" if found else None


class StepErrorRepr:
    """A failing step as the report shows it: file:line, scenario and step, then the message
    (a pytest longrepr: ``toterminal``, and ``reprcrash`` for the short summary and JUnit)."""

    def __init__(self, failure: StepFailure, message: str) -> None:
        step = f'step "{failure.step}"{failure.row_note}'
        self.lines = [f'{failure.where}: scenario "{failure.scenario}", {step}']
        self.lines += message.splitlines() or [""]
        self.reprcrash = _CrashLine(failure.where, self.lines[1])

    def toterminal(self, tw: Any) -> None:
        for line in self.lines:
            tw.line(line)

    def __str__(self) -> str:
        return "\n".join(self.lines)


@dataclass
class _CrashLine:
    where: str
    message: str

    def __str__(self) -> str:  # --tb=line
        return f"{self.where}: {self.message}"


def _report_step_failure(item: pytest.Item, call: pytest.CallInfo[None], report: Any) -> None:
    """A step mistake (StepUsageError, no matching step) or a failing Then comparison
    (pytest.fail without traceback) loses pytest-bdd's traceback and gains the feature file's
    line; any other error of a step keeps its traceback, the step's line added below it."""
    from pytest_bdd.exceptions import StepDefinitionNotFoundError

    from harness.steps import StepUsageError

    failure = item.stash.get(_STEP_FAILURE, None)
    error = call.excinfo.value if call.excinfo is not None else None
    if failure is None or error is None or error is not failure.error:
        return
    if isinstance(error, StepDefinitionNotFoundError):
        message = (
            f"no {failure.type.title()} step definition matches (harness/steps.py, features/test_<area>.py)"
            + failure.hint
        )
    elif isinstance(error, StepUsageError):
        message = str(error)
    elif isinstance(error, pytest.fail.Exception) and not error.pytrace:
        message = error.msg or ""
    else:
        message = ""
    if not message or item.config.getoption("fulltrace", False):
        report.sections.append(("scenario step", str(StepErrorRepr(failure, message or repr(error)))))
        return
    report.longrepr = StepErrorRepr(failure, message)


# ---- the conformance summary ------------------------------------------------

COUNTS = (
    "scenarios_passed",
    "scenarios_failed",
    "properties_passed",
    "properties_failed",
    "known_deviations",
    "unexpected_passes",
    "xfailed",
    "oracle_only",
    "masked",
    "not_observable",
    "skipped",
)


_PLURAL = {"scenario": "scenarios", "property": "properties"}


def build_summary(config: pytest.Config) -> dict[str, Any]:
    runs = config.stash[_RUNS]
    results = list(config.stash[_RESULTS].values())
    spec_clauses = load_clauses(Path(config.rootpath, "spec"))
    titles = {c.id: (c.title, c.file) for c in spec_clauses}
    seen = {c for r in results for c in r.clauses}
    # the spec files of the tests that ran: one file's run lists its area, not every clause
    ran_files = {titles[c][1] for c in seen if c in titles}
    clause_ids = [c.id for c in spec_clauses if c.file in ran_files] + sorted(
        seen - set(titles), key=clause_sort_key
    )
    engines = list(runs.engine_ids)
    for r in results:
        if r.engine not in engines:
            engines.append(r.engine)

    table: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(COUNTS, 0))
    covered_by: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(
        lambda: {"scenarios": set(), "properties": set()}
    )
    for r in results:
        for c in r.clauses:
            covered_by[(c, r.engine)][_PLURAL[r.kind]].add(r.name)
            counts = table[(c, r.engine)]
            outcome = r.outcome
            if outcome == "deviation" and c not in r.failed_clauses and c in r.involved:
                outcome = "masked"  # a place it decides differs, excused by another clause's entry
            elif outcome in ("failed", "deviation") and r.failed_clauses and c not in r.failed_clauses:
                outcome = "passed"  # no difference of this failure lies in what the clause decides
            if outcome == "passed" and c in r.unobservable:
                outcome = "not observable"  # the engine shows nothing that could fail it
            if outcome == "masked":
                counts["masked"] += 1
            elif outcome == "not observable":
                counts["not_observable"] += 1
            elif outcome == "unexpected-pass":
                counts["unexpected_passes"] += 1
            elif outcome in ("passed", "failed"):
                counts[f"{_PLURAL[r.kind]}_{outcome}"] += 1
            elif outcome == "deviation":
                counts["known_deviations"] += 1
            elif r.outcome == "xfailed":
                counts["xfailed"] += 1
            elif r.outcome == "oracle-only":
                counts["oracle_only"] += 1
            else:
                counts["skipped"] += 1

    entries = expectation_entries(config)
    for block in entries:
        for entry in block["entries"]:
            if entry.get("clause") and entry["status"] == "unexpected-pass":
                table[(entry["clause"], block["engine"])]["unexpected_passes"] += 1
    spark_only = config.stash.get(_SPARK_ONLY_CLAUSES, set())
    rows = []
    for cid in clause_ids:
        title, file = titles.get(cid, ("", ""))
        for e in engines:
            counts = table.get((cid, e), dict.fromkeys(COUNTS, 0))
            status = _status(counts)
            if status == "untested" and cid in spark_only and e != "spark":
                status = "spark-only"
            rows.append(
                {
                    "clause": cid,
                    "title": title,
                    "spec_file": file,
                    "engine": e,
                    "status": status,
                    **counts,
                    **{k: sorted(v) for k, v in covered_by[(cid, e)].items()},
                }
            )
    return {
        "format": SUMMARY_FORMAT,
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "profile": profile_name(),
        "seed": run_seed(),
        "clause_tag_problems": _tag_problems(config),
        "generator_coverage": _generator_coverage(),
        "engines": [_engine_json(runs, e) for e in engines],
        "spec_found": bool(spec_clauses),
        "clauses": [
            {"id": c.id, "title": c.title, "file": c.file, "text": c.text}
            for c in spec_clauses
            if c.file in ran_files
        ],
        "rows": rows,
        "tests": [vars(r) for r in sorted(results, key=lambda r: r.nodeid)],
        "expectations": entries,
    }


SUMMARY_FORMAT = "eventtime-conformance-summary/2"


def _engine_json(runs: EngineRuns, engine_id: str) -> dict[str, Any]:
    handle = runs.handles.get(engine_id)
    if handle is None:
        return {"id": engine_id}
    out: dict[str, Any] = {"id": engine_id, "engine_run_calls": handle.calls, "traces_run": handle.traces_run}
    if handle._engine is not None:
        out["name"] = handle._engine.name
        if handle.calls:  # Spark's description starts a session: only for an engine that ran
            description = getattr(handle._engine, "description", "")
            if description:
                out["description"] = description
            provenance = engine_provenance(handle._engine)
            if provenance:
                out["provenance"] = provenance
    return out


def expectation_entries(config: pytest.Config) -> list[dict[str, Any]]:
    """Per engine, every entry of its expectation file with what this run made of it:
    ``applied`` (a failure involves it), ``unexpected-pass`` (tests that name it ran and
    none failed through it) or ``matches nothing``; and the file's problems."""
    runs = config.stash[_RUNS]
    results = list(config.stash[_RESULTS].values())
    out: list[dict[str, Any]] = []
    for engine_id, exp in runs.expectations.items():
        mine = [r for r in results if r.engine == engine_id]
        ran = [Ran(r.nodeid, r.name, r.clauses, r.outcome, r.excused_by) for r in mine]
        entries = entry_statuses(exp, ran)
        problems = list(exp.problems)
        if not out:  # files of engines not in this run are reported once, with the first engine
            problems += [f"expectations/{name} matches no engine of this run" for name in runs.unused_files]
        out.append(
            {
                "engine": engine_id,
                "file": str(exp.path) if exp.path else "",
                "entries": entries,
                "problems": problems,
            }
        )
    return out


def _tag_problems(config: pytest.Config) -> list[str]:
    problems: list[str] = config.stash.get(_TAG_PROBLEMS, [])
    return problems


def _generator_coverage() -> dict[str, Any]:
    """What properties/test_generator_coverage.py counted in this run (nothing if it did not run)."""
    counted = sys.modules.get("strategies.generator_coverage")
    if counted is None:
        return {}
    return {
        area: {"traces": c.traces, "seed": c.seed, "counts": c.counts, "rare": c.rare}
        for area, c in counted.RECORDED.items()
    }


def _status(c: dict[str, int]) -> str:
    if c["scenarios_failed"] or c["properties_failed"]:
        return "FAIL"
    if c["unexpected_passes"]:
        return "unexpected-pass"
    if c["known_deviations"]:
        return "deviation"
    if c["xfailed"]:
        return "xfail"
    if c["scenarios_passed"] or c["properties_passed"]:
        return "ok"
    if c["masked"]:
        return "masked"
    if c["oracle_only"]:
        return "oracle-only"
    if c["not_observable"]:
        return "not observable"
    return "untested"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS, {})
    if not results:
        return
    summary = build_summary(config)
    tr = terminalreporter
    tr.section("conformance summary")
    for note in config.stash[_RUNS].prerun_notes:
        tr.write_line(f"engine run: {note}")
    left_out = config.stash.get(_CONFORMANCE_JOB_ONLY, 0)
    if left_out:
        tr.write_line(
            f"conformance job only: {left_out} test{'s' * (left_out != 1)} left out under profile "
            f"{profile_name()} "
            "(the thorough profile runs them: tox -e conformance)"
        )
    if not summary["spec_found"]:
        tr.write_line("no clause headings found in spec/*.md; listing the clauses seen in tags")
    columns = (
        "clause",
        "engine",
        "scen ok",
        "scen fail",
        "prop ok",
        "prop fail",
        "deviation",
        "xfail",
        "oracle-only",
        "status",
    )
    rows = [
        (
            r["clause"],
            r["engine"],
            r["scenarios_passed"],
            r["scenarios_failed"],
            r["properties_passed"],
            r["properties_failed"],
            r["known_deviations"],
            r["xfailed"],
            r["oracle_only"],
            r["status"],
        )
        for r in summary["rows"]
    ]
    tr.write_line(format_table(columns, rows))
    tr.write_line("")
    tr.write_line("covered by (the same tests on every engine; per-engine outcomes above):")
    seen: set[str] = set()
    for r in summary["rows"]:
        if r["clause"] in seen or not (r["scenarios"] or r["properties"]):
            continue
        seen.add(r["clause"])
        tr.write_line(f"{r['clause']}:")
        for name in r["scenarios"]:
            tr.write_line(f"    scenario: {name}")
        for name in r["properties"]:
            tr.write_line(f"    property: {name}")
    counted = sys.modules.get("strategies.generator_coverage")
    if counted is not None and counted.RECORDED:
        tr.write_line("")
        tr.write_line(
            f"generator coverage (TR-13): generated traces reaching each case; the strategies aim at "
            f"{100 * counted.THRESHOLD:g}% each"
        )
        for area in sorted(counted.RECORDED):
            for line in counted.RECORDED[area].lines():
                tr.write_line(line)
    for block in summary["expectations"]:
        if not (block["entries"] or block["problems"]):
            continue
        tr.write_line("")
        tr.write_line(f"expectations of {block['engine']} ({block['file'] or 'no file'}):")
        for e in block["entries"]:
            note = {
                "applied": f"excuses or names {len(e['tests'])} failing tests",
                "unexpected-pass": "UNEXPECTED PASS: its witness or test no longer fails there; remove it "
                "(the run fails)",
                "witness missing": "WITNESS MISSING: no case of its area has that name (the run fails)",
                "witness differs elsewhere": "WITNESS DIFFERS ELSEWHERE: its witness fails where the entry "
                "excuses nothing (the run fails)",
                "matches nothing": "matches no test of this run",
            }[e["status"]]
            tr.write_line(f"    {e.get('key') or e['clause'] or e['scenario']}: {note}")
        for problem in block["problems"]:
            tr.write_line(f"    problem: {problem}")
    selftest = config.stash.get(JUDGE_SELFTEST, [])
    if selftest:  # the sensitivity of each expectation file: can it still convict?
        tr.write_line("")
        tr.write_line("judge self-test (TR-11), per expectation file:")
        for line in selftest:
            tr.write_line(f"    {line}")
    problems = summary["clause_tag_problems"]
    if problems:
        tr.write_line("")
        tr.write_line(f"clause tags (TR-12): {len(problems)} tests name no clause; the run fails")
        for line in problems:
            tr.write_line(f"    {line}")
    tr.write_line("")
    seed = summary["seed"]
    tr.write_line(f"seed {seed} (profile {summary['profile']}): {SEED_VAR}={seed} repeats this run")
    path = Path(config.rootpath, config.getoption("conformance_report"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
        from harness.reports import write_reports

        written = write_reports(summary, path.parent, stem=path.stem)
        tr.write_line(f"conformance report: {', '.join(str(p) for p in [path, *written])}")
    except OSError as e:  # pragma: no cover - read-only checkouts
        print(f"could not write {path}: {e}", file=sys.stderr)
