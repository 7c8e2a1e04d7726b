"""The keyed-watermarks (F065) differential mix and the cases its traces must reach (TR-13).

The strategies themselves live in ``strategies.common`` (``keyed_watermark_traces``);
this module says which of them the differential run draws and counts what they reach.
Counting replays each trace through the oracle's tracker item by item (the idle and
activity state that the output tables only show at batch ends) and reads the rest from
the oracle's canonical output; it never steers generation. Some traces end (TR-14,
F065-R38): ``with_end`` puts an ``end`` item in them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace
from reference.keyed_watermarks import (
    COMPACT_KEYS,
    CompactKeyedWatermarkConfig,
    CompactKeyedWatermarkTracker,
    CompactShard,
    KeyedWatermarkTracker,
    config_from_trace,
    key_digest_words,
    run_trace,
)
from reference.traces import TraceClock
from strategies.common import LARGE_BATCH, LONG_TIE_RUN, keyed_watermark_traces
from strategies.generator_coverage import batch_shape_cases, end_cases, with_end

#: the differential run's traces: some end (TR-14, F065-R38)
ENDING_TRACES = with_end(keyed_watermark_traces(invalid_config_rate=10))

DIFFERENTIAL = ((ENDING_TRACES, 1.0),)

CASES: dict[str, str] = {
    "event_at_key_watermark": "an event exactly at its key's watermark, on time by `<` (F065-R3)",
    "event_1ms_below_watermark": "an event 1 ms below its key's watermark, late (F065-R3)",
    "late_event": "a late event, on the late side output (F065-R3, R22)",
    "window_end_equals_watermark": "a keyed window fires when its key's watermark equals its end (F065-R21)",
    "key_idle_by_timeout": "a clock item idles a key strictly past the idle timeout (F065-R10)",
    "clock_at_exact_idle_timeout": (
        "a clock item exactly idle_timeout after an active key's activity: stays active (F065-R10)"
    ),
    "key_idle_by_mark": "an idle item marks an active tracked key idle (F065-R9)",
    "idle_key_reactivated": "an event of an idle key makes it active again (F065-R11)",
    "event_after_long_silence": "an event of a key silent for longer than the idle timeout (F065-R10, R11)",
    "wake_then_short_clock_step": (
        "after such a reactivation, the next clock item within the timeout: the key stays active "
        "(F065-R10, R11)"
    ),
    "all_keys_idle": "a batch ends with every tracked key idle: the global is their maximum (F065-R7)",
    "global_watermark_goes_down": "the global watermark is lower than after the previous batch (F065-R6)",
    "key_removed": "remove_key of a tracked key (F065-R17)",
    "key_evicted": "max_keys evicts a key (F065-R12, R13, R14)",
    "new_key_rejected": "RejectNew refuses a new key (F065-R15)",
    "restart": "the run restarts between batches (F065-R24, TR-5)",
    "empty_batch": "a batch with no items still reports progress (F065-R22)",
    "tied_event_times": "two events of one batch with the same event time (F065-R16, R22)",
    "large_batch": f"a batch with at least {LARGE_BATCH} events (F065-R16, R22)",
    "long_tie_run": (
        f"at least {LONG_TIE_RUN} events with one event time in a batch of at least {LARGE_BATCH} events "
        "(F065-R16, R22)"
    ),
    "invalid_config": "a configuration refused with InvalidConfig (F065-R20, TR-6)",
    "error_row": "a malformed item answered with an error row (F065-R23)",
    "i64_bound": "an event time at the i64 bounds, where watermarks saturate (F065-R2, TR-2)",
    "compact_demotion": (
        "the compact tracker demotes an exact key to its sketch: state sketched (F065-R30, R35)"
    ),
    "compact_tie_keeps_incumbent": (
        "a candidate whose count equals the least recently active exact key's stays out of a full shard "
        "(F065-R30)"
    ),
    "compact_promotion_keeps_estimate": "a key enters the exact set with the estimate it had (F065-R30)",
    "compact_late_by_estimate": (
        "an event of a key outside the exact set is late by its estimate (F065-R29, R30)"
    ),
    "compact_late_only_for_compact": (
        "an event the keyed tracker calls on time is late for the compact tracker (F065-R32, R33)"
    ),
    "compact_aging": "a shard halves its frequency counts (F065-R28)",
    "compact_sketched_key_idle_or_removed": (
        "an idle or remove_key item names a key the stream has shown that is outside the exact set (F065-R31)"
    ),
    "compact_estimate_above_exact": (
        "estimated_keys is above total_keys: more keys shown than held (F065-R34, R36)"
    ),
    "compact_shards": "a compact stream with exact keys in two shards at once (F065-R27)",
    "compact_restart": "a compact stream restarts between batches (F065-R37)",
    "end_releases_held_data": "the end fires keyed windows no watermark had reached (F065-R38)",
    "item_after_end": "an item after the end, an after_end error row (F065-R23, R38, TR-14)",
}

RARE: dict[str, str] = {
    "i64_bound": (
        "differential traces go to Spark and stay in the bounded range (spec/traces.md TR-2); "
        "saturation is covered on the oracle by test_saturation_at_the_i64_bounds (near_i64_bounds_traces)"
    ),
}


def touches_i64_bounds(trace: Trace) -> bool:
    bounds = (I64_MIN, I64_MAX)
    return any(i.event_time in bounds or i.time in bounds for batch in trace.batches for i in batch)


def cases_reached(trace: Trace, output: Any) -> set[str]:
    """The CASES one trace reaches, from the trace and the oracle's output for it."""
    if isinstance(output, InvalidConfig):
        return {"invalid_config"}
    if not isinstance(output, dict):
        return set()
    errors = {(b, s) for b, s, _ in output["errors"]}
    compact = "exact_key_count" in trace.config
    reached = batch_shape_cases(trace, errors)
    if any(reason != "after_end" for _, _, reason in output["errors"]):
        reached.add("error_row")
    if touches_i64_bounds(trace):
        reached.add("i64_bound")
    for _, _, _, event_time, key_watermark, verdict in output["events"]:
        if key_watermark is not None and event_time == key_watermark:
            reached.add("event_at_key_watermark")
        if key_watermark is not None and event_time == key_watermark - 1:
            reached.add("event_1ms_below_watermark")
        if verdict == "late":
            reached.add("late_event")
        if verdict == "rejected":
            reached.add("new_key_rejected")
    previous_global = None
    for _, global_wm, total, active, _, evicted, _, _, _ in output["progress"]:
        if total and not active:
            reached.add("all_keys_idle")
        if evicted and not compact:  # a compact stream's evicted_keys counts demotions (F065-R35)
            reached.add("key_evicted")
        if previous_global is not None and global_wm is not None and global_wm < previous_global:
            reached.add("global_watermark_goes_down")
        previous_global = global_wm
    segment_ends = _replay(trace, errors, reached)
    if any((b, key, end) in segment_ends for b, key, _, end, _, _ in output["windows"]):
        reached.add("window_end_equals_watermark")
    if compact:
        reached |= _compact_output_cases(trace, output)
    return reached | end_cases(trace, output, _fired_windows)


def _fired_windows(output: Any, batch: int) -> int:
    return sum(1 for row in output["windows"] if row[0] == batch)


def keyed_counterpart(config: Mapping[str, Any]) -> dict[str, Any]:
    """The keyed tracker's settings for a compact stream: the same delay and idle timeout (F065-R32)."""
    return {k: v for k, v in config.items() if k not in COMPACT_KEYS}


def _compact_output_cases(trace: Trace, output: dict[str, Any]) -> set[str]:
    """The compact cases read from the tables, and from the keyed tracker's verdicts on the same trace."""
    reached: set[str] = set()
    if trace.restart_after:
        reached.add("compact_restart")
    if any(state == "sketched" for _, _, _, state in output["keys"]):
        reached.add("compact_demotion")
    for _, _, total, _, _, _, _, _, estimated in output["progress"]:
        if estimated is not None and estimated > total:
            reached.add("compact_estimate_above_exact")
    keyed = run_trace(replace(trace, config=keyed_counterpart(trace.config)))
    for mine, theirs in zip(output["events"], keyed["events"], strict=True):
        if mine[5] == "late" and theirs[5] == "on_time":
            reached.add("compact_late_only_for_compact")
    return reached


class _CompactWatch:
    """Reads a compact tracker's shards around each item of the replay (the cases no table shows)."""

    def __init__(self, tracker: CompactKeyedWatermarkTracker, config: CompactKeyedWatermarkConfig) -> None:
        self.tracker = tracker
        self.config = config
        self.seen: set[Any] = set()

    def place(self, key: Any) -> tuple[CompactShard, list[int]]:
        words = key_digest_words(key)  # F065-R27: shard and cells from the digest words
        shard = self.tracker.shards[words[0] % self.config.shards]
        return shard, [words[2 + row] % self.config.width for row in range(self.config.sketch_depth)]

    def event(self, item: Item, reached: set[str]) -> None:
        shard, cells = self.place(item.key)
        exact_before = item.key in shard.exact
        full = len(shard.exact) >= self.config.exact_per_shard
        estimate = shard.estimate(cells)
        events_before = shard.events
        assert item.key is not None and item.event_time is not None  # errors are not replayed
        [outcome] = self.tracker.apply_batch([(item.key, item.event_time)]).outcomes
        self.seen.add(item.key)
        if shard.events // self.config.aging_period > events_before // self.config.aging_period:
            reached.add("compact_aging")
        if sum(1 for s in self.tracker.shards if s.exact) >= 2:
            reached.add("compact_shards")
        if exact_before:
            return
        if outcome.verdict == "late":
            reached.add("compact_late_by_estimate")
        if item.key in shard.exact:
            if estimate is not None:
                reached.add("compact_promotion_keeps_estimate")
        elif full:
            victim = min(
                shard.exact, key=lambda k: (shard.exact[k].last_activity, shard.exact[k].activity_order)
            )
            if shard.frequency_of(cells) == shard.frequency_of(self.place(victim)[1]):
                reached.add("compact_tie_keeps_incumbent")

    def control(self, item: Item, reached: set[str]) -> None:
        if item.kind in ("idle", "remove_key") and item.key in self.seen:
            shard, _ = self.place(item.key)
            if item.key not in shard.exact:
                reached.add("compact_sketched_key_idle_or_removed")


def _replay(trace: Trace, errors: set[tuple[int, int]], reached: set[str]) -> set[tuple[int, Any, int]]:
    """Replay the accepted items through the oracle's tracker, adding the idle and activity
    cases to ``reached``; returns (batch, key, watermark) at the end of every segment."""
    config, _ = config_from_trace(trace.config)
    timeout = config.idle_timeout
    clock = TraceClock()
    tracker: KeyedWatermarkTracker | CompactKeyedWatermarkTracker
    watch = None
    if isinstance(config, CompactKeyedWatermarkConfig):
        tracker = CompactKeyedWatermarkTracker(config, clock)
        watch = _CompactWatch(tracker, config)
    else:
        tracker = KeyedWatermarkTracker(config, clock)
    segment_ends: set[tuple[int, Any, int]] = set()
    reactivated_at: dict[Any, int] = {}  # key -> clock of a reactivation after a long silence

    def end_segment(b: int, keys: Iterable[Any]) -> None:
        states = tracker.key_states  # the compact tracker builds this view afresh at each read
        segment_ends.update((b, k, states[k].watermark) for k in keys if k in states)

    for b, batch in enumerate(trace.batches):
        segment: set[Any] = set()
        for s, item in enumerate(batch):
            states = tracker.key_states
            if (b, s) in errors:
                end_segment(b, segment)
                segment = set()
                continue
            if item.kind == "event":
                state = states.get(item.key)
                if state is not None:
                    if state.is_idle:
                        reached.add("idle_key_reactivated")
                    if clock.now - state.last_activity > timeout:
                        reached.add("event_after_long_silence")
                        reactivated_at[item.key] = clock.now
                if watch is not None:
                    watch.event(item, reached)
                else:
                    tracker.apply_batch([(item.key, item.event_time)])
                segment.add(item.key)
                continue
            end_segment(b, segment)
            segment = set()
            if watch is not None:
                watch.control(item, reached)
            if item.kind == "clock":
                clock.now = item.time  # type: ignore[assignment]
                active = [k for k, st in states.items() if not st.is_idle]
                if any(clock.now - states[k].last_activity == timeout for k in active):
                    reached.add("clock_at_exact_idle_timeout")
                if any(k in states and clock.now - t0 <= timeout for k, t0 in reactivated_at.items()):
                    reached.add("wake_then_short_clock_step")
                reactivated_at.clear()
                tracker.check_idle_keys()
                if any(states[k].is_idle for k in active):
                    reached.add("key_idle_by_timeout")
            elif item.kind == "idle":
                if item.key in states and not states[item.key].is_idle:
                    reached.add("key_idle_by_mark")
                tracker.mark_idle(item.key)
            elif item.kind == "remove_key":
                if item.key in states:
                    reached.add("key_removed")
                tracker.remove_key(item.key)
        end_segment(b, segment)
    return segment_ends


__all__ = [
    "CASES",
    "DIFFERENTIAL",
    "ENDING_TRACES",
    "RARE",
    "batch_shape_cases",
    "cases_reached",
    "keyed_counterpart",
    "touches_i64_bounds",
]
