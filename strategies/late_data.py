"""Hypothesis strategies for late-data traces (spec/late_data.md).

Traces mix events of a few sources (the unnamed source included) with
watermark items that mostly rise and sometimes regress, clock items, and a
few malformed items; configurations cover every policy, with and without
windows, and some invalid ones. Times stay in a small positive range, so
verdicts, windows and budgets meet often; a few traces use the ends of the
i64 range.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from harness.outputs import TABLES
from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace
from strategies.common import LARGE_BATCH, LONG_TIE_RUN, i64_edge_times, restart_points
from strategies.generator_coverage import batch_shape_cases

AREA = "late_data"
SOURCES = st.sampled_from((None, None, 0, 1, 2))
TIMES = st.one_of(st.integers(0, 12_000), st.integers(0, 12).map(lambda n: n * 1000))


@st.composite
def late_data_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Valid settings (OXL-R15)."""
    config: dict[str, Any] = {}
    # SideOutput thrice: side outputs in two batches need a late event with a closed window in each
    policies = ("Drop", None, "Reassign", "Reassign", "SideOutput", "SideOutput", "SideOutput")
    policy = draw(st.sampled_from(policies))
    if policy is not None:
        config["policy"] = policy
    if policy == "Reassign":
        # budgets other than 0 and I64_MAX can be met exactly, so they come more often (OXL-R7)
        config["max_lateness"] = draw(st.sampled_from((0, 1, 1, 500, 500, 2000, 2000, 5000, 10_000, I64_MAX)))
    if policy == "SideOutput":
        config["channel"] = draw(st.sampled_from(("late", "side channel")))
    if draw(st.booleans()):
        config["window_size"] = draw(st.sampled_from((1, 7, 1000, 2500, 5000)))
        if draw(st.booleans()):
            config["allowed_lateness"] = draw(st.sampled_from((0, 1, 500, 3000, I64_MAX)))
    return config


INVALID_CONFIGS = st.sampled_from((
    {"policy": "Later"},
    {"policy": "Reassign"},
    {"policy": "SideOutput"},
    {"policy": "Drop", "max_lateness": 5},
    {"policy": "Drop", "channel": "late"},
    {"policy": "SideOutput", "channel": ""},
    {"policy": "Reassign", "max_lateness": -1},
    {"window_size": 0},
    {"allowed_lateness": 5},
    {"window_size": 10, "allowed_lateness": -5},
    {"lateness": 5},
))  # fmt: skip


def _close_threshold(event_time: int, config: dict[str, Any]) -> int:
    """OXL-R10, R12: the watermark that closes the window of ``event_time`` exactly."""
    size = config["window_size"]
    end = min(I64_MAX, event_time - event_time % size + size)
    return min(I64_MAX, end + config.get("allowed_lateness", 0))


def _has_windows(config: dict[str, Any]) -> bool:
    size, allowed = config.get("window_size"), config.get("allowed_lateness", 0)
    return isinstance(size, int) and size >= 1 and isinstance(allowed, int) and allowed >= 0


@st.composite
def _near_watermark(draw: st.DrawFn, watermark: int, config: dict[str, Any]) -> int:
    """An event time on a verdict boundary: at the watermark, 1 ms below, or max_lateness below."""
    offsets = [0, 0, 1, 1, -1]
    if config.get("policy") == "Reassign" and isinstance(config.get("max_lateness"), int):
        budget = config["max_lateness"]
        offsets += [budget] * 10 + [budget - 1, budget + 1]  # OXL-R7: lateness at the budget and next to it
    else:
        offsets += [700, 3000, 3000]  # late past most windows, so the policy decides (OXL-R6, R8, R11)
    return min(I64_MAX, max(I64_MIN, watermark - draw(st.sampled_from(offsets))))


@st.composite
def _item(
    draw: st.DrawFn,
    times: st.SearchStrategy[int],
    malformed: bool,
    last: dict[Any, int],
    config: dict[str, Any],
    recent: dict[Any, int],
) -> Item:
    """One item; watermarks of a source mostly rise from ``last`` and sometimes regress (OXL-R3);
    events often sit on their source's late boundary, watermarks on a window's close threshold."""
    kind = draw(st.sampled_from(("event",) * 6 + ("watermark",) * 3 + ("clock",)))
    if malformed and draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from((
            Item("event", source=draw(SOURCES)),
            Item("watermark", source=draw(SOURCES)),
            Item("clock"),
            Item("idle", key="a"),
        )))  # fmt: skip
    if kind == "clock":
        return Item("clock", time=draw(st.integers(0, 3)) * 1000)
    if kind == "watermark":
        source = draw(SOURCES)
        roll = draw(st.integers(0, 9))
        if _has_windows(config) and source in recent and roll < 3:
            time = _close_threshold(recent[source], config)
        elif source in last and roll:
            step = draw(st.sampled_from((-700, 0, 1, 250, 1000, 2500)))
            time = min(I64_MAX, max(0, last[source] + step))
        else:
            time = draw(times)
        last[source] = max(time, last.get(source, time))
        return Item("watermark", source=source, time=time)
    source = draw(SOURCES)
    if source in last and draw(st.integers(0, 2)):
        event_time = draw(_near_watermark(last[source], config))
    else:
        event_time = draw(times)
    recent[source] = event_time
    return Item("event", source=source, event_time=event_time, key=draw(st.sampled_from((None, "k"))))


@st.composite
def _large_batch(
    draw: st.DrawFn, times: st.SearchStrategy[int], last: dict[Any, int], config: dict[str, Any]
) -> list[Item]:
    """LARGE_BATCH or more events of one source with a run of LONG_TIE_RUN or more equal times,
    and a few of its watermark items among them (the order inside the batch decides verdicts)."""
    source = draw(SOURCES)
    base = last[source] if source in last else draw(times)
    tie_time = draw(_near_watermark(base, config)) if draw(st.booleans()) else base
    ties = [tie_time] * draw(st.integers(LONG_TIE_RUN, LONG_TIE_RUN + 4))
    others = [
        min(I64_MAX, max(I64_MIN, base + draw(st.integers(-4, 4)) * draw(st.sampled_from((1, 250, 1000)))))
        for _ in range(LARGE_BATCH - len(ties) + draw(st.integers(0, 6)))
    ]
    items = [Item("event", source=source, event_time=t) for t in ties + others]
    for _ in range(draw(st.integers(0, 3))):
        time = min(I64_MAX, max(I64_MIN, base + draw(st.sampled_from((-1, 0, 1, 500)))))
        last[source] = max(time, last.get(source, time))
        items.append(Item("watermark", source=source, time=time))
    return list(draw(st.permutations(items)))


@st.composite
def late_data_traces(
    draw: st.DrawFn, invalid_config_rate: int = 0, edge_rate: int = 10, large_batch_rate: int = 0
) -> Trace:
    """A trace of 1..6 batches; ``invalid_config_rate``, ``edge_rate`` and ``large_batch_rate``
    (one batch of LARGE_BATCH or more events with a tie run) are percentages."""
    if invalid_config_rate and draw(st.integers(0, 99)) < invalid_config_rate:
        config = draw(INVALID_CONFIGS)
    else:
        config = draw(late_data_configs())
    edges = edge_rate and draw(st.integers(0, 99)) < edge_rate
    times = st.one_of(TIMES, i64_edge_times()) if edges else TIMES
    malformed = draw(st.booleans())
    last: dict[Any, int] = {}
    recent: dict[Any, int] = {}
    n_batches = draw(st.integers(1, 6))
    large_at = draw(st.integers(0, n_batches - 1)) if draw(st.integers(0, 99)) < large_batch_rate else None
    batches = [
        draw(_large_batch(times, last, config)) if b == large_at
        else draw(st.lists(_item(times, malformed, last, config, recent), max_size=12))
        for b in range(n_batches)
    ]  # fmt: skip
    return Trace(AREA, config, tuple(tuple(b) for b in batches), draw(restart_points(len(batches))))


# ---- the differential mix and the cases it must reach (spec/traces.md TR-13) ----------

DIFFERENTIAL = ((late_data_traces(invalid_config_rate=12, edge_rate=18, large_batch_rate=12), 1.0),)

NEAR_BOUNDS = 10**12  # a time this close to either i64 end is an edge time

CASES: dict[str, str] = {
    "event_at_watermark": "an event exactly at its source's watermark is on time (OXL-R4)",
    "event_just_below_watermark": "an event 1 ms below its source's watermark is late (OXL-R4, R5)",
    "reassign_at_max_lateness": "a late event exactly max_lateness late is reassigned (OXL-R7)",
    "close_threshold": "a watermark exactly at window_end + allowed_lateness closes a window (OXL-R10, R12)",
    "allowed_late": "a late event kept by its still open window (OXL-R11)",
    "policy_drop": "a late event dropped under Drop (OXL-R6)",
    "policy_reassign": "a late event reassigned under Reassign (OXL-R7)",
    "policy_side_output": "a late event routed under SideOutput (OXL-R8)",
    "side_outputs_across_batches": "side-output rows in two batches: positions continue (OXL-R13, R14)",
    "no_watermark_yet": "an event of a source without a watermark is on time (OXL-R3, R4)",
    "near_i64_bounds": "times at the i64 ends, saturating lateness and windows (OXL-R5, R10, R12, TR-2)",
    "restart": "a restart point between batches (OXL-R18, TR-5)",
    "empty_batch": "an empty batch still has its progress row (OXL-R17, TR-5)",
    "large_batch": f">= {LARGE_BATCH} events in one batch (OXL-R3, R4: vectorised running maxima)",
    "tied_event_times": "two events of one batch with the same event time (OXL-R12, R14)",
    "long_tie_run": f">= {LONG_TIE_RUN} events of one time in a batch of >= {LARGE_BATCH} (OXL-R12, R14)",
    "invalid_config": "a refused configuration (OXL-R15, TR-6)",
    "error_rows": "a malformed item or a regressed watermark gives an error row (OXL-R3, R16, TR-7)",
}

RARE: dict[str, str] = {}


def cases_reached(trace: Trace, output: Any) -> set[str]:
    """The CASES one trace reaches, from the trace and the oracle's canonical output."""
    if isinstance(output, InvalidConfig):
        return {"invalid_config"}
    if not isinstance(output, dict):
        return set()
    reached = batch_shape_cases(trace, {(b, s) for b, s, _ in output["errors"]})
    times = [t for b in trace.batches for i in b for t in (i.time, i.event_time) if t is not None]
    if any(abs(t) > I64_MAX - NEAR_BOUNDS for t in times):
        reached.add("near_i64_bounds")
    if output["errors"]:
        reached.add("error_rows")
    columns = TABLES[AREA]["events"]
    events = [dict(zip(columns, row, strict=True)) for row in output["events"]]
    verdicts = {e["verdict"] for e in events}
    max_lateness = trace.config.get("max_lateness")
    for e in events:
        wm, t = e["watermark"], e["event_time"]
        if wm is None:
            reached.add("no_watermark_yet")
        elif t == wm:
            reached.add("event_at_watermark")
        elif wm - t == 1:
            reached.add("event_just_below_watermark")
        if e["verdict"] == "reassigned" and wm - t == max_lateness:
            reached.add("reassign_at_max_lateness")
    for verdict, case in (("allowed_late", "allowed_late"), ("reassigned", "policy_reassign"),
                          ("side_output", "policy_side_output")):  # fmt: skip
        if verdict in verdicts:
            reached.add(case)
    if "dropped" in verdicts and trace.config.get("policy", "Drop") == "Drop":
        reached.add("policy_drop")
    if len({row[0] for row in output["side_outputs"]}) >= 2:
        reached.add("side_outputs_across_batches")
    allowed = trace.config.get("allowed_lateness", 0)
    window_columns = TABLES[AREA]["windows"]
    for row in output["windows"]:
        w = dict(zip(window_columns, row, strict=True))
        if w["watermark"] == min(I64_MAX, w["window_end"] + allowed):
            reached.add("close_threshold")
    return reached


__all__ = [
    "AREA",
    "CASES",
    "DIFFERENTIAL",
    "INVALID_CONFIGS",
    "RARE",
    "cases_reached",
    "late_data_configs",
    "late_data_traces",
]
