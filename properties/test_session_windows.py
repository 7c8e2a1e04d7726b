"""F017E session windows: invariants of the oracle, and engine-vs-oracle differential tests.

Invariants run on the oracle (reference/session_windows.py), through its API
(a Hypothesis state machine with checkpoints and restores) and through its
stream (``run_trace``, on traces some of which end, TR-14); each recomputes a
clause from the trace itself. The
pure core of the Spark operator (``process_rows``, no Spark) is checked
against the oracle on rows in shuffled order. The differential tests feed
every engine chosen with ``--engine`` (except the reference) generated traces
in ONE ``run`` call: the general one with restarts at random boundaries, and
the restart property (every trace has a restart; the output must equal the
uninterrupted run, on the engine itself and on the oracle).

* batch cuts change nothing but the numbering, on the oracle and on every engine, and the
  comparison still convicts planted batch-dependent streams (F017E-R24).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from harness.engine import run_canonical
from harness.hypothesis_profiles import run_seed
from harness.outputs import TABLES, canonical, diff
from harness.traces import I64_MAX, InvalidConfig, Item, Trace
from properties import batch_cuts
from properties.batch_cuts import batch_ends, draw_cuts, item_places
from reference.session_windows import (
    BoundedOutOfOrdernessGenerator,
    Event,
    OperatorContext,
    SessionResult,
    SessionWindowOperator,
    SessionWindowStream,
    TimerService,
    run_trace,
    timer_key,
)
from strategies.common import check_generated, generate
from strategies.generator_coverage import before_end, end_position, with_end
from strategies.session_windows import (
    DIFFERENTIAL,
    ENDING_TRACES,
    invalid_session_window_configs,
    session_window_configs,
    session_window_traces,
)

AREA = "session_windows"


def _events(trace: Trace) -> list[tuple[int, int, Item]]:
    """The well-formed events (F017E-R20) before an end (R23), with their batch and seq, in arrival order."""
    return [
        (b, s, i)
        for b, batch in enumerate(before_end(trace).batches)
        for s, i in enumerate(batch)
        if i.kind == "event" and i.key is not None and i.event_time is not None
    ]


def _settings(trace: Trace) -> tuple[int, int, int]:
    c = trace.config
    return c["gap"], c.get("bounded_delay", 0), c.get("allowed_lateness", 0)


def _watermarks(trace: Trace) -> list[int]:
    """F017E-R5/R6: the watermark just after each well-formed event."""
    _, delay, _ = _settings(trace)
    out, top = [], None
    for _, _, i in _events(trace):
        assert i.event_time is not None
        top = i.event_time if top is None else max(top, i.event_time)
        out.append(top - delay)
    return out


def _final_open_sessions(trace: Trace) -> list[tuple[str, int, int, int, int]]:
    """(key, start, last, count, sum) of the sessions still open after the trace."""
    stream = SessionWindowStream(dict(trace.config))
    for b, batch in enumerate(trace.batches):
        stream.run_batch(b, batch)
    return [(k, s.start, s.last, s.accs[0], s.accs[1]) for k, s in stream.operator.open_sessions()]


# ---- configuration ----------------------------------------------------------------------


@pytest.mark.clauses("F017E-R18")
@given(invalid_session_window_configs(), session_window_configs())
def test_spark_refuses_every_configuration_the_oracle_refuses(
    bad: dict[str, Any], good: dict[str, Any]
) -> None:
    from spark_impl.session_windows import validate_config

    with pytest.raises(InvalidConfig):
        run_trace(Trace(AREA, bad, ((Item("event", key="a", event_time=0),),)))
    with pytest.raises(InvalidConfig):
        validate_config(bad)
    validate_config(good)
    run_trace(Trace(AREA, good, ((),)))


# ---- the stream -------------------------------------------------------------------------------


@pytest.mark.clauses("F017E-R17", "F017E-R15", "F017E-R16", "F017E-R23")
@given(with_end(session_window_traces(max_batches=7)))
def test_restarts_do_not_change_the_output(trace: Trace) -> None:
    plain = run_trace(replace(trace, restart_after=frozenset()))
    assert run_trace(trace) == plain
    everywhere = frozenset(range(len(trace.batches) - 1))
    assert run_trace(replace(trace, restart_after=everywhere)) == plain


Output = dict[str, list[tuple[Any, ...]]]


def _what_a_cut_keeps(trace: Trace, out: Output) -> dict[str, Any]:
    """F017E-R24: late and error rows with each (batch, seq) read as the item's place in the whole
    trace; sessions with their batch read as the places it spans; progress rows and timers
    snapshots keyed by how many items the trace had seen at the end of their batch."""
    at, ends = item_places(trace), batch_ends(trace)
    spans = list(zip([0, *ends[:-1]], ends, strict=True))
    late = sorted((at[(r[0], r[1])], *r[2:]) for r in out["late"])
    errors = sorted((at[(r[0], r[1])], r[2]) for r in out["errors"])
    # a row of a batch the trace does not have (a planted bug's) spans no item
    sessions = sorted((*r[1:], *(spans[r[0]] if r[0] < len(spans) else (ends[-1], ends[-1])))
                      for r in out["sessions"])  # fmt: skip
    progress: dict[int, set[tuple[Any, ...]]] = {}
    timers: dict[int, set[tuple[Any, ...]]] = {}
    for r in out["progress"]:
        progress.setdefault(ends[r[0]], set()).add(r[1:])
    for b, end in enumerate(ends):  # an empty snapshot is a snapshot too
        timers.setdefault(end, set()).add(tuple(sorted(r[1:] for r in out["timers"] if r[0] == b)))
    return {"late": late, "errors": errors, "sessions": sessions, "progress": progress, "timers": timers}


def _cut_differences(trace: Trace, out: Output, twin: Trace, again: Output) -> list[str]:
    """Where two cuts' answers differ beyond the numbering: late and error rows item for item, the
    sessions apart from their batch, each emitted in batches of the two cuts that share an item,
    and progress and timers wherever both cuts end a batch after the same items."""
    one, other = _what_a_cut_keeps(trace, out), _what_a_cut_keeps(twin, again)
    problems = [f"{table}: {one[table]} against {other[table]}" for table in ("late", "errors")
                if one[table] != other[table]]  # fmt: skip
    if [r[:-2] for r in one["sessions"]] != [r[:-2] for r in other["sessions"]]:
        problems.append(f"sessions: {one['sessions']} against {other['sessions']}")
    else:
        problems += [f"session {a[:-2]} emitted after items {a[-2:]} against {b[-2:]}"
                     for a, b in zip(one["sessions"], other["sessions"], strict=True)
                     if max(a[-2], b[-2]) >= min(a[-1], b[-1])]  # fmt: skip
    for table in ("progress", "timers"):
        common = sorted(one[table].keys() & other[table].keys())
        problems += [f"{table} after {n} items: {one[table][n]} against {other[table][n]}"
                     for n in common if one[table][n] != other[table][n]]  # fmt: skip
    return problems


@pytest.mark.clauses("F017E-R24", "F017E-R7", "F017E-R8", "F017E-R17", "F017E-R23", "TR-5")
@given(ENDING_TRACES, st.data())
def test_batch_cuts_change_nothing_but_the_numbering(trace: Trace, data: st.DataObject) -> None:
    """The same items cut into other batches (empty ones and moved restarts included): the same
    late and error rows item for item, the same sessions in batches that share the item that
    closed them, and the same progress and timers wherever both cuts end a batch."""
    twin = draw_cuts(data, trace)
    assert not _cut_differences(trace, run_trace(trace), twin, run_trace(twin))


RECUT_TRACES = 8


def recut_pairs() -> list[tuple[Trace, Trace]]:
    """The differential run's traces, some of which end, and each one's re-cut twin
    (properties.batch_cuts)."""
    return batch_cuts.recut_pairs(ENDING_TRACES, RECUT_TRACES, salt=12)


def recut_traces() -> list[Trace]:
    return [t for pair in recut_pairs() for t in pair]


# the traces and their twins join the session's pre-run
@pytest.mark.prerun_traces.with_args(recut_traces)  # with_args: the one argument is a function
@pytest.mark.clauses("F017E-R24", "F017E-R7", "F017E-R8", "F017E-R17", "F017E-R23", "TR-5")
def test_batch_cuts_change_nothing_but_the_numbering_on_the_engine(engine_under_test: Any) -> None:
    """The engine's answer to a trace and to its re-cut twin: the same late and error rows item
    for item, the same sessions in batches that share the item that closed them, and the same
    progress and timers wherever both cuts end a batch."""
    pairs = recut_pairs()
    assert len(pairs) == RECUT_TRACES
    batch_cuts.check_twins_on_the_engine(engine_under_test, pairs, _cut_differences)


def _sessions_emitted_a_batch_late(out: Output) -> Output:
    """A stream whose watermark moves between batches only: a passed session is emitted in the
    next batch, and one passed in the last batch not at all."""
    last = max((r[0] for r in out["progress"]), default=-1)
    return {**out, "sessions": [(r[0] + 1, *r[1:]) for r in out["sessions"] if r[0] < last]}


def _late_judged_at_the_batch_start(out: Output) -> Output:
    """A stream that reports each late event with the watermark as it stood when its batch began."""
    before = {r[0] + 1: r[1] for r in out["progress"]}
    return {**out, "late": [(*r[:4], before.get(r[0]), r[5]) for r in out["late"]]}


def _closings_counted_per_batch(out: Output) -> Output:
    """A stream whose progress counts the sessions closed and the late events of its batch only
    (counters not carried over)."""
    progress, before = [], (0, 0, 0)
    for r in sorted(out["progress"]):
        progress.append((*r[:3], *(n - m for n, m in zip(r[3:], before, strict=True))))
        before = r[3:]
    return {**out, "progress": progress}


def _convicts(planted: Any, trace: Trace, twin: Trace) -> bool:
    try:
        out, again = run_trace(trace), run_trace(twin)
    except InvalidConfig:
        return False
    return bool(_cut_differences(trace, planted(out), twin, planted(again)))


@pytest.mark.clauses("F017E-R24", "F017E-R7", "F017E-R9", "TR-5")
@pytest.mark.parametrize("planted", [_sessions_emitted_a_batch_late, _closings_counted_per_batch])
def test_the_batch_cut_comparison_convicts_a_stream_that_depends_on_its_batches(planted: Any) -> None:
    """The comparison above drops the numbering, reads a session's batch only as the items it
    spans and progress and timers only where both cuts end a batch; it still catches a stream
    whose answer depends on where its batches end."""
    caught = [trace.name for trace, twin in recut_pairs() if _convicts(planted, trace, twin)]
    assert caught, f"{planted.__name__}: no re-cut twin shows it"


@pytest.mark.clauses("F017E-R24", "F017E-R10", "TR-5")
def test_the_batch_cut_comparison_convicts_late_events_judged_at_the_batch_start() -> None:
    """Some seeds draw no late event whose batch starts at another watermark in the twin, so the
    restart outline's items and the cut of its twin scenario show this one: a at 2000 starts
    batch 3 in both, after the watermark 2000 in one and 7000 in the other."""

    def event(key: str, t: int, value: int) -> Item:
        return Item("event", key=key, event_time=t, value=value)

    config = {"gap": 1000, "bounded_delay": 2000, "allowed_lateness": 200}
    batches = (
        (event("a", 0, 1), event("b", 100, 2), event("a", 2500, 3)),
        (event("a", 1000, 4), event("b", 1100, 5), event("c", 4000, 6)),
        (),
        (event("c", 9000, 7), event("a", 2000, 8)),
    )
    trace = Trace(AREA, config, batches, frozenset({0, 1, 2}), "restart outline")
    twin = batch_cuts.recut(trace, [2, 6, 7], frozenset({0, 2}))
    assert not _convicts(lambda out: out, trace, twin)  # the honest stream passes
    assert _convicts(_late_judged_at_the_batch_start, trace, twin)


@pytest.mark.clauses("F017E-R1", "F017E-R2", "F017E-R3", "F017E-R4", "F017E-R10", "F017E-R22", "F017E-R23")
@given(with_end(session_window_traces(restarts=False)))
def test_sessions_are_the_components_of_the_on_time_events(trace: Trace) -> None:
    """Every on-time event is in exactly one session, emitted or open, and the sessions are the
    groups of each key's on-time events no more than gap apart (R3, R22): no session is split,
    merged wrongly, lost or emitted twice."""
    gap, _, _ = _settings(trace)
    out = run_trace(trace)
    late = {(b, s) for b, s, *_ in out["late"]}
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for b, s, i in _events(trace):
        if (b, s) not in late:
            assert i.key is not None and i.event_time is not None
            by_key[i.key].append((i.event_time, i.value))
    expected = []
    for key, evs in by_key.items():
        evs.sort()
        group = [evs[0]]
        for t, v in evs[1:]:
            if t - group[-1][0] > gap:  # F017E-R3: more than gap apart starts a new session
                expected.append((key, group[0][0], group[-1][0], len(group), sum(x for _, x in group)))
                group = []
            group.append((t, v))
        expected.append((key, group[0][0], group[-1][0], len(group), sum(x for _, x in group)))
    emitted = [(k, start, end - gap, n, total) for _, k, start, end, n, total, _ in out["sessions"]]
    assert sorted(emitted + _final_open_sessions(trace)) == sorted(expected)


@pytest.mark.clauses(
    "F017E-R5", "F017E-R6", "F017E-R7", "F017E-R8", "F017E-R9", "F017E-R12", "F017E-R14", "F017E-R23"
)
@given(with_end(session_window_traces(restarts=False)))
def test_a_session_closes_in_the_batch_the_watermark_passes_it_and_says_why(trace: Trace) -> None:
    """A session closes in the batch of the first event whose watermark passes it (by the watermark
    when that event is of its key), or, when no event passes it, at the end, by its timer (R23)."""
    gap, delay, lateness = _settings(trace)
    out = run_trace(trace)
    events, marks = _events(trace), _watermarks(trace)
    end = end_position(trace)
    progress = {row[0]: row for row in out["progress"]}
    assert sorted(progress) == list(range(len(trace.batches)))  # F017E-R19: one row per batch
    by_reason = {"timer": 0, "watermark": 0}
    for b, key, _start, end_time, _n, _sum, reason in sorted(out["sessions"]):
        deadline = end_time + lateness
        passing = next((n for n, w in enumerate(marks) if w > deadline), None)  # F017E-R7: strictly greater
        if passing is None:  # F017E-R23: the end of time passes it
            assert end is not None and b == end[0] and reason == "timer"
        else:
            assert events[passing][0] == b  # emitted in the batch of the first passing event
            assert reason == ("watermark" if events[passing][2].key == key else "timer")  # F017E-R8
        by_reason[reason] += 1
        assert progress[b][3] >= by_reason["timer"] and progress[b][4] >= by_reason["watermark"]
    last = progress[len(trace.batches) - 1]
    assert (last[3], last[4]) == (by_reason["timer"], by_reason["watermark"])  # F017E-R9
    timers = defaultdict(list)
    for b, key, start, trigger in out["timers"]:
        timers[b].append((key, start, trigger))
        assert marks and trigger >= progress[b][1]  # F017E-R7: no open session is passed
    for b, row in progress.items():
        assert row[2] == len(timers[b])  # F017E-R12: one pending timer per open session
        seen = [w for (eb, _, _), w in zip(events, marks, strict=True) if eb <= b]
        if end is not None and b >= end[0]:
            assert row[1] == I64_MAX  # F017E-R23: the end of time
        else:
            assert row[1] == (seen[-1] if seen else None)  # F017E-R5: max event time minus delay
    for key, start, last_t, _n, _s in _final_open_sessions(trace):  # F017E-R12: at end + lateness
        assert (key, start, last_t + gap + lateness) in timers[len(trace.batches) - 1]
    assert delay >= 0


@pytest.mark.clauses("F017E-R10", "F017E-R11")
@given(with_end(session_window_traces(restarts=False)))
def test_late_iff_older_than_the_watermark_minus_the_lateness(trace: Trace) -> None:
    _, _, lateness = _settings(trace)
    strategy = trace.config.get("emit_strategy", "OnWindowClose")
    out = run_trace(trace)
    late = {(b, s): (w, v) for b, s, _k, _t, w, v in out["late"]}
    for (b, s, i), w in zip(_events(trace), _watermarks(trace), strict=True):
        assert i.event_time is not None
        is_late = i.event_time + lateness < w  # F017E-R10
        assert ((b, s) in late) == is_late
        if is_late:
            assert late[(b, s)] == (w, "late_output" if strategy == "OnWindowClose" else "dropped")
    other = "Final" if strategy == "OnWindowClose" else "OnWindowClose"
    twin = run_trace(replace(trace, config={**trace.config, "emit_strategy": other}))
    assert {k: v for k, v in twin.items() if k != "late"} == {k: v for k, v in out.items() if k != "late"}
    assert [r[:5] for r in twin["late"]] == [r[:5] for r in out["late"]]  # F017E-R11: only the route differs


@pytest.mark.clauses("F017E-R20", "F017E-R23")
@given(with_end(session_window_traces()))
def test_malformed_items_change_nothing_but_the_errors_table(trace: Trace) -> None:
    """Removing the malformed items and every item after the end changes only the error rows."""
    end = end_position(trace)
    bad = {(b, s) for b, batch in enumerate(trace.batches) for s, i in enumerate(batch)
           if (end is not None and (b, s) > end)
           or (i.kind != "end" and (i.kind != "event" or i.key is None or i.event_time is None))}  # fmt: skip
    cleaned = replace(trace, batches=tuple(
        tuple(i for s, i in enumerate(batch) if (b, s) not in bad) for b, batch in enumerate(trace.batches)
    ))  # fmt: skip
    out, clean = run_trace(trace), run_trace(cleaned)
    assert sorted((b, s) for b, s, _ in out["errors"]) == sorted(bad)
    # seq numbers shift when items are removed: compare the late table without them
    assert [r[:1] + r[2:] for r in out["late"]] == [r[:1] + r[2:] for r in clean["late"]]
    assert {k: v for k, v in out.items() if k not in ("errors", "late")} == {
        k: v for k, v in clean.items() if k not in ("errors", "late")
    }


@pytest.mark.clauses("F017E-R23", "F017E-R7", "F017E-R8", "F017E-R9", "F017E-R20", "TR-14")
@given(with_end(session_window_traces()))
def test_after_an_end_only_sessions_timed_at_the_end_of_time_stay_open(trace: Trace) -> None:
    """The end closes, by their timers and in its batch, exactly the sessions open before it whose
    timer is below I64_MAX; from then on the watermark is I64_MAX, nothing closes and nothing is
    late, and every item after the end is an after_end error row."""
    end = end_position(trace)
    if end is None:
        return
    out, cut = run_trace(trace), run_trace(before_end(trace))
    assert all(r in out["sessions"] for r in cut["sessions"])  # the input before the end: the same
    ended = [r for r in out["sessions"] if r not in cut["sessions"]]
    assert all(r[0] == end[0] and r[6] == "timer" for r in ended)
    open_before = {(k, start) for b, k, start, t in cut["timers"] if b == end[0] and t < I64_MAX}
    assert sorted((r[1], r[2]) for r in ended) == sorted(open_before)
    _, _, open_cut, by_timer_cut, by_watermark_cut, late_cut = max(cut["progress"])
    for b, watermark, open_n, by_timer, by_watermark, late_n in sorted(out["progress"])[end[0] :]:
        timers = [t for tb, _k, _s, t in out["timers"] if tb == b]
        assert watermark == I64_MAX and all(t == I64_MAX for t in timers) and open_n == len(timers)
        assert open_n == open_cut - len(ended)
        assert (by_timer, by_watermark, late_n) == (by_timer_cut + len(ended), by_watermark_cut, late_cut)
    assert sorted(out["late"]) == sorted(cut["late"])
    after = {(b, s) for b, batch in enumerate(trace.batches) for s in range(len(batch)) if (b, s) > end}
    assert {(b, s) for b, s, reason in out["errors"] if reason == "after_end"} == after


# ---- the object API with checkpoints and restores ----------------------------------------------


class OperatorMachine(RuleBasedStateMachine):
    """Process events; checkpoint and restore into a new operator (new or same timer service);
    a twin operator that is never restarted must emit exactly the same, call by call."""

    @initialize(config=session_window_configs())
    def setup(self, config: dict[str, Any]) -> None:
        self.gap = config["gap"]
        self.lateness = config.get("allowed_lateness", 0)
        self.delay = config.get("bounded_delay", 0)
        self.strategy = config.get("emit_strategy", "OnWindowClose")
        self.op, self.ctx = self._new(), self._ctx(None)
        self.twin, self.twin_ctx = self._new(), self._ctx(None)
        self.now = 0

    def _new(self) -> SessionWindowOperator:
        return SessionWindowOperator(self.gap, None, self.lateness, "op", self.strategy)

    def _ctx(self, max_timestamp: int | None) -> OperatorContext:
        return OperatorContext(TimerService(), BoundedOutOfOrdernessGenerator(self.delay, max_timestamp))

    @rule(
        key=st.sampled_from("abc"), step=st.integers(0, 400), back=st.integers(0, 1500), v=st.integers(-3, 9)
    )
    def process(self, key: str, step: int, back: int, v: int) -> None:
        self.now += step
        event = Event(key, max(0, self.now - back), v)
        assert self.op.process(event, self.ctx) == self.twin.process(event, self.twin_ctx)  # F017E-R16
        watermark = self.ctx.watermark_generator.current_watermark()
        assert watermark is not None
        for _, s in self.op.open_sessions():
            assert not self.op.trigger_time(s) < watermark  # F017E-R7/R8: nothing passed stays open

    @rule(same_service=st.booleans())
    def restart(self, same_service: bool) -> None:
        state = self.op.checkpoint()
        max_ts = self.ctx.watermark_generator.max_timestamp
        ctx = self.ctx if same_service else self._ctx(max_ts)
        self.op = self._new()
        self.op.restore(state, ctx)  # F017E-R16
        self.ctx = ctx
        if not same_service:  # F017E-R16: exactly the pending timers are registered again
            expected = sorted((t, timer_key(k, sid)) for (k, sid), t in self.op.pending_timers.items())
            assert [(t.timestamp, t.key) for t in ctx.timers.list_timers()] == expected

    @invariant()
    def one_pending_timer_per_open_session_and_registered(self) -> None:
        if not hasattr(self, "op"):
            return
        op = self.op
        sessions = op.open_sessions()
        assert len(op.pending_timers) == len(sessions)  # F017E-R12
        registered = {(t.timestamp, t.key) for t in self.ctx.timers.list_timers()}
        for key, s in sessions:
            when = op.pending_timers[(key, s.session_id)]
            assert when == op.trigger_time(s)
            assert (when, timer_key(key, s.session_id)) in registered  # F017E-R13
        assert op.metrics() == self.twin.metrics()


TestOperatorMachine = OperatorMachine.TestCase
TestOperatorMachine = pytest.mark.clauses("F017E-R12", "F017E-R13", "F017E-R15", "F017E-R16", "F017E-R7")(
    TestOperatorMachine
)


@pytest.mark.clauses("F017E-R13")
def test_a_stale_timer_fired_by_hand_closes_nothing() -> None:
    op = SessionWindowOperator(1000)
    ctx = OperatorContext(TimerService(), BoundedOutOfOrdernessGenerator(0))
    op.process(Event("a", 0), ctx)
    op.process(Event("a", 500), ctx)
    stale, current = ctx.timers.list_timers()
    assert op.on_timer(stale, ctx) == [] and op.on_timer(current, ctx) != []
    assert op.on_timer(current, ctx) == []  # closed already: stale too
    assert isinstance(op.process(Event("a", 9000), ctx), list) and op.metrics().sessions_closed_by_timer == 1
    assert not any(isinstance(o, SessionResult) for o in op.on_timer(current, ctx))


# ---- the Spark operator's pure core (no Spark) ------------------------------------------------


def _core_run(trace: Trace, shuffle_seed: int, timers: bool) -> dict[str, list[tuple[Any, ...]]]:
    """spark_impl.session_windows.process_rows batch by batch, state through its stored form."""
    from spark_impl.session_windows import StreamState, process_rows, validate_config

    cfg = validate_config(trace.config)
    stored = None
    out: dict[str, list[tuple[Any, ...]]] = {t: [] for t in TABLES[AREA]}
    for b, batch in enumerate(trace.batches):
        rows = [
            {"sw_batch": b, "sw_seq": s, "sw_kind": "batch_end" if i is None else i.kind,
             "sw_key": None if i is None else i.key,
             "sw_et": 0 if i is None or i.event_time is None else i.event_time,
             "sw_et_null": i is None or i.event_time is None, "sw_value": 0 if i is None else i.value}
            for s, i in enumerate([*batch, None])
        ]  # fmt: skip
        pdf = pd.DataFrame(rows).sample(frac=1, random_state=shuffle_seed + b)  # physical order is no order
        st_ = StreamState.from_tuple(stored) if stored is not None else StreamState()
        result = process_rows(st_, pdf, cfg, "s", has_batch=True, report_timers=timers)
        stored = st_.to_tuple()
        for r in result.to_dict("records"):
            out[r["output"]].append(tuple(None if pd.isna(r[c]) else r[c] for c in TABLES[AREA][r["output"]]))
    return canonical(AREA, out)


@pytest.mark.spark_only  # the Spark operator's processors, run without Spark
@pytest.mark.clauses("F017E-R22", "F017E-R3", "F017E-R8", "F017E-R15", "F017E-R23")
@given(with_end(session_window_traces(restarts=False)), st.integers(0, 1000), st.booleans())
def test_the_vectorised_spark_core_equals_the_event_by_event_oracle(
    trace: Trace, shuffle_seed: int, timers: bool
) -> None:
    """Without the timers table a bucket reads only the blocks its events or passed timers name."""
    expected = canonical(AREA, run_trace(trace))
    if not timers:
        expected["timers"] = []
    actual = _core_run(trace, shuffle_seed, timers)
    assert expected == actual, diff(AREA, expected, actual)


@pytest.mark.clauses("F017E-R15")
def test_spark_state_layout_is_versioned() -> None:
    """A checkpoint of another layout version is refused with both versions named, never misread."""
    from spark_impl.session_windows import LAYOUT_VERSION, StreamState

    stored = StreamState().to_tuple()
    assert StreamState.from_tuple(stored).to_tuple() == stored
    with pytest.raises(RuntimeError, match=f"version {LAYOUT_VERSION + 1}.*version {LAYOUT_VERSION} only"):
        StreamState.from_tuple((LAYOUT_VERSION + 1, *stored[1:]))


# ---- engine versus oracle --------------------------------------------------------------------


ALL_CLAUSES = tuple(f"F017E-R{n}" for n in range(1, 24) if n != 21)


@pytest.mark.clauses(*ALL_CLAUSES)
def test_engine_agrees_with_the_oracle(engine_under_test: Any) -> None:
    """All generated traces in ONE engine.run call; a difference is shrunk and printed as Gherkin."""
    check_generated(engine_under_test, *DIFFERENTIAL)


RESTART_TRACES = 24


def restart_traces() -> list[Any]:
    """The generated traces of the restart test, each with a restart (the same on every call)."""
    strategy = with_end(session_window_traces(min_restarts=1, max_batches=4))
    return generate(strategy, RESTART_TRACES, run_seed() + 1)


def restart_traces_and_twins() -> list[Any]:
    """The restart test's traces and their uninterrupted twins: all of them join the session's
    pre-run, so the twins cost no query of their own (about 30 s on Spark)."""
    traces = restart_traces()
    return [*traces, *(replace(t, restart_after=frozenset()) for t in traces)]


@pytest.mark.prerun_traces.with_args(restart_traces_and_twins)  # with_args: the one argument is a function
@pytest.mark.clauses("F017E-R14", "F017E-R15", "F017E-R16", "F017E-R17")
def test_restarts_change_nothing_on_the_engine(engine_under_test: Any) -> None:
    """At least 20 generated traces, each with a restart: the engine's output equals its own
    uninterrupted run and the oracle's (no session lost, none emitted twice)."""
    traces = restart_traces()
    assert len(traces) >= 20 and all(t.restart_after for t in traces)
    restarted = run_canonical(engine_under_test, traces)
    plain = [replace(t, restart_after=frozenset()) for t in traces]
    uninterrupted = run_canonical(engine_under_test, plain)
    for t, r, u in zip(plain, restarted, uninterrupted, strict=True):
        oracle = canonical(AREA, run_trace(t))
        assert r == u == oracle, f"{t.describe()}\n{diff(AREA, oracle, r if r != oracle else u)}"  # type: ignore[arg-type]
