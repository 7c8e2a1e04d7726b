"""F065 keyed watermarks: invariants of the oracle, and engine-vs-oracle differential tests.

Invariants run on the oracle (reference/keyed_watermarks.py), through its API
(a Hypothesis state machine) and through its stream (``run_trace``). The
differential test feeds every engine chosen with ``--engine`` (except the
reference) a few hundred generated traces in ONE ``run`` call and compares
each output with the oracle's; a difference is shrunk and printed as a
scenario for features/keyed_watermarks.feature.

What "idling or removing a key does not lower the global watermark" means
precisely (the seed's third property), derived from F065-R5/R7:

* marking a key idle (``mark_idle``, or the idle timeout at a clock item)
  never lowers the global watermark: it removes a key from the set whose
  minimum is taken, and when that leaves no active key, the maximum over
  all keys is at least the idled key's own watermark, which was at least the
  old minimum;
* ``remove_key`` never lowers it while an active key remains after the
  removal; when the removal leaves no active key it may: the global becomes
  the maximum over the remaining (idle) keys, or None when none remain
  (``test_removing_the_last_active_key_may_lower_the_global``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.reference_engine import ReferenceEngine
from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace, saturating_add, saturating_sub
from properties.keyed_watermarks_strategies import DIFFERENTIAL
from properties.strategies import (
    ABSENT_KEY,
    check_generated,
    i64_edge_times,
    invalid_keyed_watermark_configs,
    keyed_watermark_configs,
    keyed_watermark_traces,
    near_i64_bounds_traces,
)
from reference.keyed_watermarks import (
    KeyedWatermarkConfig,
    KeyedWatermarkTracker,
    KeyEvictionPolicy,
    MaxKeysReached,
    run_trace,
)

STATE_KEYS = st.sampled_from(("a", "b", "c", "d", "e"))
STATE_TIMES = st.one_of(st.integers(0, 20_000), st.integers(0, 20).map(lambda n: n * 1000), i64_edge_times())


def _gt(after: int | None, before: int | None) -> bool:
    """F065-R8: strictly greater, None below everything."""
    return after is not None and (before is None or after > before)


def _ge(after: int | None, before: int | None) -> bool:
    return before is None or (after is not None and after >= before)


# ---- the tracker API as a state machine -----------------------------------------


class TrackerMachine(RuleBasedStateMachine):
    """Random calls of update / update_batch / clock / mark_idle / remove_key, checked call by call."""

    @initialize(
        config=keyed_watermark_configs(grid=1000).map(
            lambda c: {k: v for k, v in c.items() if k != "window_size"}
        )
    )
    def setup(self, config: dict[str, Any]) -> None:
        self.now = 0
        self.config = KeyedWatermarkConfig(**config)
        self.tracker = KeyedWatermarkTracker(self.config, clock=lambda: self.now)
        self.seen: dict[str, tuple[object, int]] = {}  # key -> (its state object, last watermark seen)

    # -- helpers

    def _snapshot(self) -> dict[str, Any]:
        return self.tracker.checkpoint()

    def _adv(self) -> int:
        return self.tracker.metrics().global_advances

    # -- rules

    @rule(key=STATE_KEYS, t=STATE_TIMES)
    def update(self, key: str, t: int) -> None:
        tr = self.tracker
        before_wm, before_g, adv = tr.watermark_for_key(key), tr.global_watermark(), self._adv()
        full = (
            self.config.max_keys is not None
            and key not in tr.key_states
            and len(tr.key_states) >= self.config.max_keys
        )
        snapshot = self._snapshot()
        victim = None
        if full and self.config.eviction_policy is not KeyEvictionPolicy.RejectNew:

            def recency(k: str) -> tuple[int, int]:  # F065-R13: oldest activity, then earliest arrival
                return (tr.key_states[k].last_activity, tr.key_states[k].activity_order)

            if self.config.eviction_policy is KeyEvictionPolicy.LowestWatermark:
                victim = min(tr.key_states, key=lambda k: (tr.key_states[k].watermark, *recency(k)))  # R14
            else:
                victim = min(tr.key_states, key=recency)
        others = set(tr.key_states) - {victim}
        evicted, key_adv = tr.metrics().evicted_keys, tr.metrics().key_advances
        outcome = tr.apply_batch([(key, t)]).outcomes[0]
        assert outcome.key_watermark == before_wm  # F065-R3: judged by its key's watermark before it
        if full and self.config.eviction_policy is KeyEvictionPolicy.RejectNew:
            assert outcome.verdict == "rejected"  # F065-R15
            assert self._snapshot() == snapshot  # F065-R15: no state change at all
            return
        # F065-R3: late iff tracked and strictly below; F065-R1: a new key is on time
        assert outcome.verdict == ("late" if before_wm is not None and t < before_wm else "on_time")
        assert key in tr.key_states and not tr.key_states[key].is_idle  # F065-R11
        assert tr.key_states[key].last_activity == self.now  # F065-R10/R11
        if victim is not None:  # F065-R12: exactly the victim goes, the new key comes in
            assert set(tr.key_states) == others | {key} and tr.metrics().evicted_keys == evicted + 1
        else:
            assert set(tr.key_states) == others | {key} and tr.metrics().evicted_keys == evicted
        rose = before_wm is None or tr.key_states[key].watermark > before_wm
        assert tr.metrics().key_advances - key_adv == (1 if rose else 0)  # F065-R19
        after_g = tr.global_watermark()
        assert self._adv() - adv == (1 if _gt(after_g, before_g) else 0)  # F065-R8

    @rule(events=st.lists(st.tuples(STATE_KEYS, STATE_TIMES), max_size=6))
    def update_batch(self, events: list[tuple[str, int]]) -> None:
        """F065-R16: update_batch leaves the state repeated update leaves, and counts one advance at most."""
        tr = self.tracker
        twin = KeyedWatermarkTracker.restore(tr.checkpoint(), clock=lambda: self.now)
        before_g, adv = tr.global_watermark(), self._adv()
        for k, t in events:
            try:
                twin.update(k, t)
            except MaxKeysReached:
                pass
        try:
            tr.update_batch(events)
        except MaxKeysReached as error:
            assert self.config.eviction_policy is KeyEvictionPolicy.RejectNew
            assert error.rejected
        assert tr.key_states == twin.key_states
        m, mt = tr.metrics(), twin.metrics()
        assert replace(m, global_advances=0) == replace(mt, global_advances=0)
        after_g = tr.global_watermark()
        assert m.global_advances - adv == (1 if _gt(after_g, before_g) else 0)  # R8, R16: one at most
        assert m.global_advances - adv <= mt.global_advances - adv

    @rule(gap=st.one_of(st.integers(0, 5000), st.sampled_from((0, 1, 1000, 5000, 60_000, 60_001))))
    def advance_clock(self, gap: int) -> None:
        tr = self.tracker
        self.now = min(I64_MAX, self.now + gap)
        was_idle = {k: s.is_idle for k, s in tr.key_states.items()}
        before_g, adv = tr.global_watermark(), self._adv()
        tr.check_idle_keys()
        for k, s in tr.key_states.items():
            # F065-R10: idle iff it already was, or its silence is strictly longer than the timeout
            assert s.is_idle == (was_idle[k] or self.now - s.last_activity > self.config.idle_timeout)
        after_g = tr.global_watermark()
        assert _ge(after_g, before_g)  # idling never lowers the global (module docstring)
        assert self._adv() - adv == (1 if _gt(after_g, before_g) else 0)

    @rule(key=STATE_KEYS)
    def mark_idle(self, key: str) -> None:
        tr = self.tracker
        before_g, adv, snapshot = tr.global_watermark(), self._adv(), self._snapshot()
        known = key in tr.key_states
        tr.mark_idle(key)
        if not known:
            assert self._snapshot() == snapshot  # F065-R9: unknown key, no change
            return
        assert tr.key_states[key].is_idle
        after_g = tr.global_watermark()
        assert _ge(after_g, before_g)  # idling never lowers the global
        assert self._adv() - adv == (1 if _gt(after_g, before_g) else 0)

    @precondition(lambda self: self.tracker.key_states)
    @rule(data=st.data())
    def remove_key(self, data: st.DataObject) -> None:
        tr = self.tracker
        key = data.draw(st.one_of(st.sampled_from(sorted(tr.key_states)), STATE_KEYS))
        before_g, adv = tr.global_watermark(), self._adv()
        was = tr.key_states.get(key)
        tr.remove_key(key)  # F065-R17
        assert key not in tr.key_states
        after_g = tr.global_watermark()
        if tr.active_key_count() > 0:
            assert _ge(after_g, before_g)  # removal with an active key left never lowers the global
            if was is not None and was.is_idle:
                assert after_g == before_g  # an idle key was not part of the minimum
        assert self._adv() - adv == (1 if _gt(after_g, before_g) else 0)

    # -- invariants

    @invariant()
    def global_is_min_over_active_keys(self) -> None:
        tr = self.tracker
        g = tr.global_watermark()
        states = tr.key_states.values()
        active = [s.watermark for s in states if not s.is_idle]
        if not tr.key_states:
            assert g is None  # F065-R5
        elif active:
            assert all(g <= wm for wm in active)  # the seed's: never above an active key's watermark
            assert g == min(active)  # F065-R5
        else:
            assert g == max(s.watermark for s in states)  # F065-R7

    @invariant()
    def global_is_never_cached(self) -> None:
        assert self.tracker.recalculate_global() == self.tracker.global_watermark()  # F065-R18

    @invariant()
    def key_watermark_is_max_minus_delay(self) -> None:
        for s in self.tracker.key_states.values():
            assert s.watermark == saturating_sub(s.max_event_time, self.config.bounded_delay)  # F065-R2
            assert I64_MIN <= s.watermark <= I64_MAX

    @invariant()
    def key_watermarks_never_decrease(self) -> None:
        """F065-R2, per key while it stays tracked (a removed or evicted key starts afresh, R1)."""
        for k, s in self.tracker.key_states.items():
            prev = self.seen.get(k)
            if prev is not None and prev[0] is s:
                assert s.watermark >= prev[1], (k, prev[1], s.watermark)
            self.seen[k] = (s, s.watermark)
        for k in set(self.seen) - set(self.tracker.key_states):
            del self.seen[k]

    @invariant()
    def gauges_add_up(self) -> None:
        m = self.tracker.metrics()
        assert m.total_keys == len(self.tracker.key_states) == m.active_keys + m.idle_keys  # F065-R19
        if self.config.max_keys is not None:
            assert m.total_keys <= self.config.max_keys  # F065-R12


TestTrackerMachine = pytest.mark.clauses(
    "F065-R1",
    "F065-R2",
    "F065-R3",
    "F065-R5",
    "F065-R7",
    "F065-R8",
    "F065-R9",
    "F065-R10",
    "F065-R11",
    "F065-R12",
    "F065-R13",
    "F065-R14",
    "F065-R15",
    "F065-R16",
    "F065-R17",
    "F065-R18",
    "F065-R19",
)(TrackerMachine.TestCase)
TestTrackerMachine.settings = settings(TrackerMachine.TestCase.settings, stateful_step_count=30)


@pytest.mark.clauses("F065-R6", "F065-R7", "F065-R17")
def test_removing_the_last_active_key_may_lower_the_global() -> None:
    """The exception to "removal never lowers the global": no active key left (R7: max over idle keys)."""
    tracker = KeyedWatermarkTracker(KeyedWatermarkConfig(bounded_delay=0))
    tracker.update("slow", 50)
    tracker.mark_idle("slow")
    tracker.update("fast", 100)
    assert tracker.global_watermark() == 100  # min over active keys: only "fast"
    tracker.remove_key("fast")
    assert tracker.global_watermark() == 50  # all idle: max over them, lower than before
    tracker.remove_key("slow")
    assert tracker.global_watermark() is None


@pytest.mark.clauses("F065-R20")
@given(invalid_keyed_watermark_configs(), keyed_watermark_traces(max_batches=2))
def test_invalid_configurations_are_refused(config: dict[str, Any], trace: Trace) -> None:
    """TR-6: refused before any item; the engine answers that trace with the error, the others run."""
    bad = replace(trace, config=config)
    with pytest.raises(InvalidConfig):
        run_trace(bad)
    results = ReferenceEngine().run([trace, bad, trace])
    assert isinstance(results[1], InvalidConfig)
    assert results[0] == results[2] == run_trace(trace)


# ---- the stream (run_trace) -----------------------------------------------------------


def _well_formed_events(trace: Trace) -> int:
    return sum(
        1
        for b in trace.batches
        for i in b
        if i.kind == "event" and i.key is not None and i.event_time is not None
    )


def _malformed(item: Item, clock_now: int) -> bool:
    if item.kind == "clock":
        return item.time is None or item.time < clock_now
    return item.key is None or (item.kind == "event" and item.event_time is None)


def _malformed_positions(trace: Trace) -> list[tuple[int, int]]:
    now, out = 0, []
    for b, batch in enumerate(trace.batches):
        for s, item in enumerate(batch):
            if _malformed(item, now):
                out.append((b, s))
            elif item.kind == "clock":
                now = item.time
    return out


@pytest.mark.clauses("F065-R22", "F065-R23")
@given(keyed_watermark_traces())
def test_one_progress_row_per_batch_and_one_row_per_item(trace: Trace) -> None:
    out = run_trace(trace)
    assert [r[0] for r in out["progress"]] == list(range(len(trace.batches)))  # empty batches too
    for r in out["progress"]:
        _, _, total, active, idle, *_ = r
        assert total == active + idle  # F065-R19
    assert len(out["events"]) == _well_formed_events(trace)
    assert [(b, s) for b, s, _ in out["errors"]] == _malformed_positions(trace)  # F065-R23


@pytest.mark.clauses("F065-R3", "F065-R15", "F065-R22")
@given(keyed_watermark_traces())
def test_verdict_is_late_iff_below_the_key_watermark_before_it(trace: Trace) -> None:
    out = run_trace(trace)
    policy = trace.config.get("eviction_policy", "LeastRecentlyActive")
    running: dict[str, int | None] = {}
    for _b, _s, key, t, wm, verdict in out["events"]:
        if verdict == "rejected":  # F065-R15: only a new key at the limit under RejectNew
            assert wm is None and trace.config.get("max_keys") and policy == "RejectNew"
        elif wm is None:
            assert verdict == "on_time"  # F065-R1/R3: a key's first event is on time
        else:
            assert verdict == ("late" if t < wm else "on_time")  # F065-R3: strict
        # F065-R2: the watermark a key's events are judged by never decreases while the key stays
        # tracked; a key that is tracked afresh (removed or evicted before) starts with None (R1)
        if wm is not None and running.get(key) is not None:
            assert wm >= running[key]
        if verdict != "rejected":
            running[key] = wm


@pytest.mark.clauses("F065-R24")
@given(keyed_watermark_traces(max_batches=7))
def test_restarts_do_not_change_the_output(trace: Trace) -> None:
    plain = run_trace(replace(trace, restart_after=frozenset()))
    assert run_trace(trace) == plain
    everywhere = frozenset(range(len(trace.batches) - 1))
    assert run_trace(replace(trace, restart_after=everywhere)) == plain


@pytest.mark.clauses("F065-R23")
@given(keyed_watermark_traces())
def test_malformed_items_change_nothing_but_the_errors_table(trace: Trace) -> None:
    """A malformed item acts as a no-op control item (it ends the segment) plus an error row."""
    bad = set(_malformed_positions(trace))
    noop = Item("idle", key=ABSENT_KEY)  # F065-R9: idling an unknown key changes nothing
    cleaned = replace(
        trace,
        batches=tuple(
            tuple(noop if (b, s) in bad else item for s, item in enumerate(batch))
            for b, batch in enumerate(trace.batches)
        ),
    )
    out, clean = run_trace(trace), run_trace(cleaned)
    assert clean["errors"] == []
    assert len(out["errors"]) == len(bad)
    assert {k: v for k, v in out.items() if k != "errors"} == {
        k: v for k, v in clean.items() if k != "errors"
    }


@pytest.mark.clauses("F065-R4", "F065-R21")
@given(
    keyed_watermark_traces().map(
        lambda t: replace(
            t, config={k: v for k, v in t.config.items() if k not in ("max_keys", "eviction_policy")}
        )
    )
)
def test_keys_are_independent(trace: Trace) -> None:
    """Without max_keys, a key's verdicts, judging watermarks and windows ignore every other key."""
    out = run_trace(trace)
    keys = {i.key for b in trace.batches for i in b if i.kind == "event" and i.key is not None}
    noop = Item("idle", key=ABSENT_KEY)
    for key in sorted(keys)[:4]:
        alone = replace(
            trace,
            batches=tuple(
                tuple(i if i.key == key or i.kind == "clock" else noop for i in batch)
                for batch in trace.batches
            ),
        )
        solo = run_trace(alone)
        assert [r for r in out["events"] if r[2] == key] == solo["events"]
        assert [r for r in out["windows"] if r[1] == key] == solo["windows"]


@pytest.mark.clauses("F065-R2", "F065-R21", "F065-R24")
@given(near_i64_bounds_traces())
def test_saturation_at_the_i64_bounds(trace: Trace) -> None:
    """Oracle only (TR-2): watermarks and window ends saturate instead of leaving the i64 range."""
    out = run_trace(trace)
    delay = trace.config["bounded_delay"]
    key_max: dict[str, int] = {}
    for _, _, key, t, wm, _verdict in out["events"]:
        if key in key_max:
            assert wm == saturating_sub(key_max[key], delay)  # F065-R2, saturating
            key_max[key] = max(key_max[key], t)
        else:
            assert wm is None
            key_max[key] = t
    for row in out["progress"]:
        assert row[1] is None or I64_MIN <= row[1] <= I64_MAX
    for _, _, wm, _ in out["keys"]:
        assert wm is None or I64_MIN <= wm <= I64_MAX
    size = trace.config.get("window_size")
    for _, _key, start, end, count, total in out["windows"]:
        assert I64_MIN <= total <= I64_MAX  # TR-3: 32-bit values keep window sums in i64
        # F065-R21: the window keeps its place in the grid of multiples of size, cut to the range
        aligned = start - start % size
        # start == end only for the window cut to [I64_MAX, I64_MAX) (size 1 or an event at I64_MAX)
        assert I64_MIN <= start <= end <= I64_MAX and count >= 1
        assert start < end or start == I64_MAX
        assert start == aligned or start == I64_MIN
        assert end == saturating_add(aligned, size)
    assert run_trace(replace(trace, restart_after=frozenset())) == out  # F065-R24 at the bounds too


@pytest.mark.clauses("F065-R21")
def test_the_first_window_starts_at_the_lower_bound() -> None:
    """t - t % size is below I64_MIN for t near it: the first window is cut to the range (R21, TR-2)."""
    trace = Trace(
        "keyed_watermarks",
        {"bounded_delay": 0, "window_size": 3},
        ((Item("event", key="a", event_time=I64_MIN, value=1), Item("event", key="a", event_time=0)),),
    )
    out = run_trace(trace)
    aligned = I64_MIN - I64_MIN % 3
    assert aligned < I64_MIN
    assert out["windows"] == [(0, "a", I64_MIN, aligned + 3, 1, 1)]


# ---- engine versus oracle --------------------------------------------------------------


@pytest.mark.clauses(
    "F065-R1",
    "F065-R2",
    "F065-R3",
    "F065-R4",
    "F065-R5",
    "F065-R6",
    "F065-R7",
    "F065-R8",
    "F065-R9",
    "F065-R10",
    "F065-R11",
    "F065-R12",
    "F065-R13",
    "F065-R14",
    "F065-R15",
    "F065-R16",
    "F065-R17",
    "F065-R19",
    "F065-R20",
    "F065-R21",
    "F065-R22",
    "F065-R23",
    "F065-R24",
)
def test_engine_agrees_with_the_oracle(engine_under_test: Any) -> None:
    """All generated traces in ONE engine.run call; a difference is shrunk and printed as Gherkin."""
    check_generated(engine_under_test, *DIFFERENTIAL)


# ---- the Spark operator's state layout (F065-R24: versioned state) ---------------


@pytest.mark.clauses("F065-R24")
def test_spark_state_layout_is_versioned() -> None:
    """A checkpoint of another layout version, or of another bucket count, is refused with
    both values named, never misread."""
    from spark_impl.keyed_watermarks import LAYOUT_VERSION, BucketState, StreamState

    bucket = BucketState(8, level=3, split=2, clock=5, activity=3).to_tuple()
    assert BucketState.from_tuple(bucket, 8).to_tuple() == bucket
    stream = StreamState(8, global_advances=2).to_tuple()
    assert StreamState.from_tuple(stream, 8).to_tuple() == stream
    newer = LAYOUT_VERSION + 1
    with pytest.raises(RuntimeError, match=f"version {newer}.*version {LAYOUT_VERSION} only"):
        BucketState.from_tuple((newer, *bucket[1:]), 8)
    with pytest.raises(RuntimeError, match=f"version {newer}.*version {LAYOUT_VERSION} only"):
        StreamState.from_tuple((newer, *stream[1:]), 8)
    with pytest.raises(RuntimeError, match="buckets 8.*buckets 4 only"):
        BucketState.from_tuple(bucket, 4)
    with pytest.raises(RuntimeError, match="buckets 8.*buckets 16 only"):
        StreamState.from_tuple(stream, 16)


# ---- the Spark operator on a real source, processing time from the data (F065-R10) ---------


@pytest.mark.clauses("F065-R5", "F065-R10")
@pytest.mark.parametrize("processing_time_col", ["current_timestamp", "timestamp"])
def test_spark_on_the_rate_source_an_idle_key_stops_holding_the_global_watermark(
    tmp_path: Any, processing_time_col: str
) -> None:
    """Spark's ``rate`` source, no clock rows: processing time is each micro-batch's start
    (``"current_timestamp"``) or the source's own arrival column (``"timestamp"``, the time
    the rate source made the row). Key ``quiet`` sends the first rows, then
    only ``busy`` does; once processing time passes quiet's last row by more than the idle
    timeout, quiet is idle and the global watermark follows busy (F065-R5, R10)."""
    import time

    from pyspark.sql import functions as F

    from spark_impl.keyed_watermarks import keyed_watermarks
    from spark_impl.session import get_spark

    spark = get_spark()
    delay, timeout, quiet_rows = 1000, 1500, 5
    source = spark.readStream.format("rate").option("rowsPerSecond", 10).load()
    source = source.select(
        F.when(F.col("value") < quiet_rows, "quiet").otherwise("busy").alias("key"),
        (F.col("value") * 1000).alias("event_time"),
        "timestamp",
    )
    kw = keyed_watermarks(
        source, key_col="key", event_time_col="event_time", bounded_delay_ms=delay,
        idle_timeout_ms=timeout, processing_time_col=processing_time_col, buckets=4,
    )  # fmt: skip
    sink, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    query = (
        kw.output.writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds").start()
    )  # fmt: skip
    quiet_wm = (quiet_rows - 1) * 1000 - delay
    try:
        deadline = time.monotonic() + 120
        progress: list[Any] = []
        while time.monotonic() < deadline:
            time.sleep(2)
            try:
                rows = spark.read.parquet(sink).filter(F.col("output") == "progress").collect()
            except Exception:  # no file written yet
                continue
            progress = sorted(rows, key=lambda r: r["batch"])
            if any(r["idle_keys"] == 1 and r["global_watermark"] > quiet_wm for r in progress):
                break
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    held = [r for r in progress if r["total_keys"] == 2 and r["idle_keys"] == 0]
    released = [r for r in progress if r["idle_keys"] == 1]
    assert held, f"no micro-batch with both keys active: {progress}"
    assert all(r["global_watermark"] == quiet_wm for r in held)  # quiet holds it down while active
    assert released, f"quiet never went idle: {progress}"
    assert all(r["global_watermark"] > quiet_wm for r in released)  # F065-R5: min over active keys
    keys = spark.read.parquet(sink).filter(F.col("output") == "keys").collect()
    assert any(r["key"] == "quiet" and r["state"] == "idle" for r in keys)
