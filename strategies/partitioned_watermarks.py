"""The per-partition watermarks (F064) differential mix and the cases its traces must reach (TR-13).

The strategies themselves live in ``strategies.common`` (``partitioned_watermark_traces``);
this module says which of them the differential run draws and counts what they reach.
Counting replays each trace's accepted items through the oracle's tracker one by one (the
idle and activity state the output tables only show at batch ends) and reads the rest from
the oracle's canonical output; it never steers generation.
"""

from __future__ import annotations

from typing import Any

from harness.traces import InvalidConfig, Trace, saturating_sub
from reference.partitioned_watermarks import PartitionedWatermarkTracker, PartitionId, config_from_trace
from reference.traces import TraceClock
from strategies.common import LARGE_BATCH, LONG_TIE_RUN, partitioned_watermark_traces
from strategies.generator_coverage import batch_shape_cases
from strategies.keyed_watermarks import touches_i64_bounds

DIFFERENTIAL = ((partitioned_watermark_traces(invalid_config_rate=10), 1.0),)

CASES: dict[str, str] = {
    "partition_idle_by_timeout": "a clock item idles a partition strictly past the idle timeout (F064-R11)",
    "clock_at_exact_idle_timeout": (
        "a clock item exactly idle_timeout after an active partition's activity: stays active (F064-R11)"
    ),
    "partition_idle_by_mark": "an idle item marks an active partition idle (F064-R9)",
    "idle_partition_got_data": "an event or watermark of an idle partition makes it active (F064-R4)",
    "idle_partition_marked_active": "an active item on an idle partition (F064-R10)",
    "data_after_long_silence": (
        "an update of a partition silent for longer than the idle timeout (F064-R4, R11)"
    ),
    "marked_active_after_silence": (
        "an active item on a partition silent for longer than the idle timeout (F064-R10, R11)"
    ),
    "data_wake_then_short_step": (
        "after data ends such a silence, the next clock item within the timeout: still active (F064-R4, R11)"
    ),
    "mark_wake_then_short_step": (
        "after an active item ends such a silence, the next clock item within the timeout: still active "
        "(F064-R10, R11)"
    ),
    "all_partitions_idle": (
        "a batch ends with every partition idle: the combined follows their maximum (F064-R6)"
    ),
    "unreported_partition_holds": (
        "an active partition without a watermark holds the combined while others have one (F064-R8)"
    ),
    "watermark_behind_ignored": (
        "a watermark item below its partition's watermark changes no watermark (F064-R4)"
    ),
    "rebalance": "a partition added or removed, or a source resized (F064-R2, R12, R13)",
    "restart": "the run restarts between batches (F064-R23, TR-5)",
    "empty_batch": "a batch with no items still reports progress (F064-R21)",
    "tied_event_times": "two events of one batch with the same event time (F064-R20)",
    "large_batch": f"a batch with at least {LARGE_BATCH} events (F064-R20)",
    "long_tie_run": (
        f"at least {LONG_TIE_RUN} events with one event time in a batch of at least {LARGE_BATCH} events "
        "(F064-R20)"
    ),
    "invalid_config": "a configuration refused with InvalidConfig (F064-R24, TR-6)",
    "error_row": "a refused item answered with an error row (F064-R22)",
    "i64_bound": "an event or watermark time at the i64 bounds, where max_lateness saturates (F064-R5, TR-2)",
}

RARE: dict[str, str] = {
    "i64_bound": (
        "differential traces go to Spark and stay in the bounded range (spec/traces.md TR-2); "
        "saturation is covered on the oracle by TrackerMachine's update rules (i64_edge_times)"
    ),
}


def cases_reached(trace: Trace, output: Any) -> set[str]:
    """The CASES one trace reaches, from the trace and the oracle's output for it."""
    if isinstance(output, InvalidConfig):
        return {"invalid_config"}
    if not isinstance(output, dict):
        return set()
    errors = {(b, s) for b, s, _ in output["errors"]}
    reached = batch_shape_cases(trace, errors)
    if errors:
        reached.add("error_row")
    if touches_i64_bounds(trace):
        reached.add("i64_bound")
    for _, _, total, active, _, _, rebalances in output["progress"]:
        if total and not active:
            reached.add("all_partitions_idle")
        if rebalances:
            reached.add("rebalance")
    _replay(trace, errors, reached)
    return reached


def _replay(trace: Trace, errors: set[tuple[int, int]], reached: set[str]) -> None:
    """Replay the accepted items one by one through the oracle's tracker (per-partition state is
    the same as per step), adding the idle and activity cases to ``reached``."""
    timeout, lateness = config_from_trace(trace.config)
    clock = TraceClock()
    tracker = PartitionedWatermarkTracker.with_idle_timeout(timeout, clock)
    parts = tracker.partitions
    reactivated_at: dict[PartitionId, tuple[str, int]] = {}  # partition -> (how, clock) after a long silence

    def holds_back() -> bool:
        unreported = any(st.watermark is None and not st.is_idle for st in parts.values())
        return unreported and any(st.watermark is not None for st in parts.values())

    for b, batch in enumerate(trace.batches):
        for s, item in enumerate(batch):
            if (b, s) in errors:
                continue
            p = PartitionId(item.source, item.partition)  # type: ignore[arg-type]
            if item.kind in ("event", "watermark", "active"):
                state = parts[p]
                long_silence = clock.now - state.last_activity > timeout
                if item.kind == "active":
                    if state.is_idle:
                        reached.add("idle_partition_marked_active")
                    if long_silence:
                        reached.add("marked_active_after_silence")
                        reactivated_at[p] = ("mark", clock.now)
                    tracker.mark_partition_active(p)
                    continue
                if state.is_idle:
                    reached.add("idle_partition_got_data")
                if long_silence:
                    reached.add("data_after_long_silence")
                    reactivated_at[p] = ("data", clock.now)
                if item.kind == "event":
                    watermark = saturating_sub(item.event_time, lateness)  # type: ignore[arg-type]
                else:
                    watermark = item.time  # type: ignore[assignment]
                    if state.watermark is not None and watermark < state.watermark:
                        reached.add("watermark_behind_ignored")
                tracker.update_partitions([(p, watermark)])
            elif item.kind == "clock":
                clock.now = item.time  # type: ignore[assignment]
                active = [q for q, st in parts.items() if not st.is_idle]
                if any(clock.now - parts[q].last_activity == timeout for q in active):
                    reached.add("clock_at_exact_idle_timeout")
                for q, (how, t0) in reactivated_at.items():
                    if q in parts and clock.now - t0 <= timeout:
                        reached.add(f"{how}_wake_then_short_step")
                reactivated_at.clear()
                tracker.check_idle_partitions()
                if any(parts[q].is_idle for q in active):
                    reached.add("partition_idle_by_timeout")
            elif item.kind == "idle":
                if not parts[p].is_idle:
                    reached.add("partition_idle_by_mark")
                tracker.mark_partition_idle(p)
            elif item.kind == "register_source":
                tracker.register_source(item.source, item.count)  # type: ignore[arg-type]
            elif item.kind == "add_partition":
                tracker.add_partition(p)
            elif item.kind == "remove_partition":
                tracker.remove_partition(p)
                reactivated_at.pop(p, None)
            elif item.kind == "assign_core":
                tracker.assign_partition_to_core(p, item.core)  # type: ignore[arg-type]
            if holds_back():
                reached.add("unreported_partition_holds")


__all__ = ["CASES", "DIFFERENTIAL", "RARE", "cases_reached"]
