"""The differential checker is tested too.

A deliberately broken engine (the oracle with ``<=`` instead of ``<`` in the
late test of F065-R3) goes through ``check_against_reference``: the checker
must fail, shrink the failing trace to a handful of items, and print a
Gherkin scenario that, replayed, still shows the difference. The same for
F064: the oracle with ``>=`` instead of ``>`` in the idle timeout (F064-R11).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Hashable, Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given

import reference.keyed_watermarks as kw
import reference.partitioned_watermarks as pw
from harness import replay
from harness.differential import (
    candidates,
    check_against_reference,
    compare,
    size,
    to_gherkin,
    trace_from_gherkin,
)
from harness.outputs import Output
from harness.reference_engine import ReferenceEngine
from harness.traces import Item, Trace
from strategies.common import (
    check_generated,
    generate,
    keyed_watermark_traces,
    partitioned_watermark_traces,
)


@pytest.fixture(autouse=True)
def _failure_files_in_tmp(tmp_path: Path) -> Iterator[None]:
    """These tests fail the checker on purpose: their failure files stay out of reports/."""
    with replay.failures_written_to(tmp_path):
        yield


class _LateAtTheWatermark(kw.KeyedWatermarkTracker):
    """The bug: an event exactly at its key's watermark is judged late (``<=``)."""

    def _apply_event(self, key: Hashable, event_time: int) -> kw.EventOutcome:
        outcome = super()._apply_event(key, event_time)
        if outcome.verdict == "on_time" and outcome.key_watermark == event_time:
            outcome.verdict = "late"
        return outcome


@contextlib.contextmanager
def _broken_tracker() -> Iterator[None]:
    saved = kw.KeyedWatermarkTracker
    kw.KeyedWatermarkTracker = _LateAtTheWatermark  # type: ignore[misc]
    try:
        yield
    finally:
        kw.KeyedWatermarkTracker = saved  # type: ignore[misc]


class OffByOneEngine(ReferenceEngine):
    name = "off-by-one"

    def __init__(self) -> None:
        self.runs = 0

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]:
        self.runs += 1
        with _broken_tracker():
            return super().run(traces)


class CrashingEngine(ReferenceEngine):
    name = "crashing"

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]:
        if any(i.kind == "remove_key" for t in traces for b in t.batches for i in b):
            raise RuntimeError("boom")
        return super().run(traces)


class _Handle:
    """The little the step library's Then steps need from an engine (harness.steps.EngineHandle)."""

    def __init__(self, engine: ReferenceEngine) -> None:
        self.engine = engine
        self.name = engine.name

    def output(self, trace: Trace) -> Output | Exception:
        return self.engine.run([trace])[0]


def run_scenario(text: str, engine: ReferenceEngine) -> None:
    """Runs every step of a printed scenario, Then steps included, through harness.steps.

    A failing Then step raises pytest's failure exception, as under pytest-bdd.
    """
    from harness.steps import LIBRARY, ScenarioState

    state = ScenarioState(engine=_Handle(engine), name="replayed")
    lines = [ln.strip() for ln in text.splitlines()]
    kind, n = "given", 0
    while n < len(lines):
        m = re.match(r"^(Given|When|Then|And|But)\s+(.*)$", lines[n])
        n += 1
        if not m:
            continue
        kind = m.group(1).lower() if m.group(1) in ("Given", "When", "Then") else kind
        table = []
        while n < len(lines) and lines[n].startswith("|"):
            table.append([c.strip() for c in lines[n].strip("|").split("|")])
            n += 1
        d = LIBRARY.find(kind, m.group(2))
        assert d is not None, lines[n - 1]
        d.call(state, m.group(2), table or None)


def _traces(n: int = 100, seed: int = 7) -> list[Trace]:
    return generate(keyed_watermark_traces(), n, seed)


def _scenario(message: str) -> str:
    m = re.search(
        r"Paste into features/keyed_watermarks\.feature:\n\n(.*?)\n\nTrace\.describe\(\):", message, re.S
    )
    assert m, message
    return m.group(1)


@pytest.mark.clauses("F065-R3")
def test_checker_catches_and_shrinks_an_off_by_one_late_test() -> None:
    engine = OffByOneEngine()
    traces = _traces()
    with pytest.raises(AssertionError) as failure:
        check_against_reference(engine, traces, shrink_seconds=30, context="negative test")
    message = str(failure.value)

    # the generated traces went to the engine in one run call, the shrink rounds added a few
    assert "differs from the oracle" in message
    scenario = _scenario(message)
    assert "Given keyed watermarks with a bounded delay of" in scenario
    assert "When these events arrive in one batch:" in scenario
    assert "Then the verdicts are:" in scenario

    shrunk = trace_from_gherkin(scenario)
    items = sum(len(b) for b in shrunk.batches)
    assert len(shrunk.batches) <= 2 and items <= 4, scenario
    assert len(shrunk.restart_after) == 0 and set(shrunk.config) <= {"bounded_delay"}, scenario

    # the printed scenario, replayed, still shows the bug: same trace, same difference
    expected, actual = ReferenceEngine().run([shrunk])[0], OffByOneEngine().run([shrunk])[0]
    difference = compare(shrunk.area, expected, actual)
    assert difference and "late" in difference
    assert difference in message
    # run as a scenario through the shared step library: green on the oracle, red on the bug
    run_scenario(scenario, ReferenceEngine())
    with pytest.raises(pytest.fail.Exception, match="verdict"):
        run_scenario(scenario, OffByOneEngine())
    # and its Then steps are the oracle's rows
    assert [r for r in expected["events"] if r[5] == "on_time" and r[3] == r[4]], scenario

    # TR-13: the shrunk trace, then the generated one, are saved; the message names the replay
    where = re.search(r"Traces saved to (\S+) ", message)
    assert where, message
    saved = Path(where.group(1))
    traces = [Trace.from_json(t) for t in json.loads(saved.read_text())["traces"]]
    assert traces[0].batches == shrunk.batches and traces[-1].name.startswith("generated #")
    assert saved.with_suffix(".feature").read_text().strip() == scenario.strip()
    assert f"-- {replay.current_test()} --replay {saved}" in message


@pytest.mark.clauses("F065-R3")
def test_checker_passes_a_correct_engine() -> None:
    report = check_against_reference(ReferenceEngine(), _traces(50, seed=3))
    assert report.failing == [] and report.traces == 50


@pytest.mark.clauses("TR-13")
def test_checker_reports_a_crash_as_a_difference() -> None:
    traces = _traces(40, seed=5)
    assert any(i.kind == "remove_key" for t in traces for b in t.batches for i in b)
    with pytest.raises(AssertionError) as failure:
        check_against_reference(CrashingEngine(), traces, shrink_seconds=10)
    scenario = _scenario(str(failure.value))
    assert "is removed" in scenario or "remove_key" in scenario
    assert "engine crashing raised RuntimeError: boom" in str(failure.value)
    assert sum(len(b) for b in trace_from_gherkin(scenario).batches) == 1


@pytest.mark.clauses("TR-13")
def test_candidates_are_smaller_and_well_formed() -> None:
    for t in _traces(20, seed=11):
        for c in candidates(t):
            assert size(c) < size(t)
            assert all(0 <= r < len(c.batches) - 1 for r in c.restart_after)


@pytest.mark.clauses("TR-13")
@given(keyed_watermark_traces(invalid_config_rate=4))
def test_gherkin_round_trip(trace: Trace) -> None:
    """A printed scenario replays, through the shared step library, to the same trace, and its
    Then steps (the oracle's tables) pass on the oracle: the printer speaks the step vocabulary."""
    expected = ReferenceEngine().run([trace])[0]
    text = to_gherkin(trace, expected)
    replayed = trace_from_gherkin(text)
    assert replayed.batches == trace.batches
    assert replayed.restart_after == trace.restart_after
    assert not compare(trace.area, expected, ReferenceEngine().run([replayed])[0])
    run_scenario(text, ReferenceEngine())


@pytest.mark.clauses("TR-13")
def test_gherkin_of_a_mixed_batch() -> None:
    trace = Trace(
        "keyed_watermarks",
        {"bounded_delay": 1000, "idle_timeout": 500, "max_keys": 2, "window_size": 100},
        (
            (
                Item("event", key="a", event_time=5000, value=3),
                Item("clock", time=600),
                Item("idle", key=None),
            ),
            (),
            (Item("clock", time=700),),
            (Item("idle", key="a"),),
            (Item("remove_key", key="a"),),
        ),
        frozenset({1}),
    )
    text = to_gherkin(trace, *ReferenceEngine().run([trace]) * 1)
    assert "And at most 2 keys evicting LeastRecentlyActive" in text
    assert "When these items arrive in one batch:" in text
    assert "When an empty batch passes\n    When the engine restarts from its checkpoint" in text
    assert "When key a is marked idle" in text and "When key a is removed" in text
    assert "When the processing clock advances to 700 ms" in text
    assert trace_from_gherkin(text).batches == trace.batches


# ---- F064 ---------------------------------------------------------------------------


class _IdleAtTheTimeout(pw.PartitionedWatermarkTracker):
    """The bug: a partition silent for exactly the idle timeout goes idle (``>=``, F064-R11 says ``>``)."""

    def check_idle_partitions(self) -> int | None:
        now = self.clock()
        for state in self.partitions.values():
            if not state.is_idle and now - state.last_activity >= self.idle_timeout:
                state.is_idle = True
        return self._advance()


class IdleAtTheTimeoutEngine(ReferenceEngine):
    name = "idle-at-the-timeout"

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]:
        saved = pw.PartitionedWatermarkTracker
        pw.PartitionedWatermarkTracker = _IdleAtTheTimeout  # type: ignore[misc]
        try:
            return super().run(traces)
        finally:
            pw.PartitionedWatermarkTracker = saved  # type: ignore[misc]


def _f064_scenario(message: str) -> str:
    m = re.search(
        r"Paste into features/partitioned_watermarks\.feature:\n\n(.*?)\n\nTrace\.describe\(\):",
        message,
        re.S,
    )
    assert m, message
    return m.group(1)


@pytest.mark.clauses("F064-R11")
def test_checker_catches_and_shrinks_an_idle_timeout_that_fires_at_the_timeout() -> None:
    traces = generate(partitioned_watermark_traces(), 100, 7)
    with pytest.raises(AssertionError) as failure:
        check_against_reference(IdleAtTheTimeoutEngine(), traces, shrink_seconds=30, context="negative test")
    message = str(failure.value)
    scenario = _f064_scenario(message)
    assert scenario.startswith("  @F064") and "Given partitioned watermarks with" in scenario, scenario
    shrunk = trace_from_gherkin(scenario)
    # the minimum: a registration and one clock item exactly at the timeout
    assert sum(len(b) for b in shrunk.batches) <= 2 and not shrunk.restart_after, scenario
    clock_times = [i.time for b in shrunk.batches for i in b if i.kind == "clock"]
    assert clock_times == [shrunk.config.get("idle_timeout", 60_000)], scenario
    expected, actual = ReferenceEngine().run([shrunk])[0], IdleAtTheTimeoutEngine().run([shrunk])[0]
    assert compare(shrunk.area, expected, actual) in message
    run_scenario(scenario, ReferenceEngine())
    with pytest.raises(pytest.fail.Exception):
        run_scenario(scenario, IdleAtTheTimeoutEngine())


@pytest.mark.clauses("TR-13")
@given(partitioned_watermark_traces(invalid_config_rate=4))
def test_f064_gherkin_round_trip(trace: Trace) -> None:
    """F064 traces print as scenarios of the shared step library and replay to the same trace."""
    expected = ReferenceEngine().run([trace])[0]
    text = to_gherkin(trace, expected)
    replayed = trace_from_gherkin(text)
    assert replayed.batches == trace.batches and replayed.restart_after == trace.restart_after
    assert dict(replayed.config) == dict(trace.config)
    run_scenario(text, ReferenceEngine())


@pytest.mark.clauses("TR-13")
def test_a_differential_test_replays_the_saved_traces_instead_of_generating(tmp_path: Path) -> None:
    with pytest.raises(AssertionError) as failure:
        check_against_reference(OffByOneEngine(), _traces(), shrink_seconds=5)
    where = re.search(r"Traces saved to (\S+) ", str(failure.value))
    assert where, failure.value
    saved = json.loads(Path(where.group(1)).read_text())["traces"]
    before = replay.configure(tmp_path, "conformance", where.group(1))
    try:
        strategy = (keyed_watermark_traces(), 1.0)
        with pytest.raises(AssertionError, match=f"differs from the oracle on {len(saved)} of {len(saved)} "):
            check_generated(OffByOneEngine(), strategy)
        assert check_generated(ReferenceEngine(), strategy).traces == len(saved)
    finally:
        replay.restore(before)
