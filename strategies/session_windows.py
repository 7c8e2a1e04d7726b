"""Hypothesis strategies for F017E session-window traces (spec/session_windows.md).

Keyed, disordered streams cut into micro-batches: event times drift upwards with
a disorder bound drawn relative to the watermark delay and the gap (none,
within the delay, beyond it), keys skewed towards a few hot ones, empty
batches, a few malformed items, and restarts at random batch boundaries.
Times stay in a small positive range so that Spark's native comparison can use
the same traces.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import strategies as st

from harness.traces import InvalidConfig, Item, Trace
from strategies.common import LARGE_BATCH, LONG_TIE_RUN
from strategies.generator_coverage import before_end, end_cases, output_before_end, with_end

AREA = "session_windows"
GAPS = (1, 10, 100, 250, 1000)
KEYS = ("a", "a", "a", "b", "b", "c", "d")  # skew: a is hot


@st.composite
def session_window_configs(draw: st.DrawFn) -> dict[str, Any]:
    """F017E-R18: valid settings; optional ones are sometimes left to their defaults."""
    config: dict[str, Any] = {"gap": draw(st.one_of(st.sampled_from(GAPS), st.integers(1, 2000)))}
    for name, values in (("bounded_delay", (0, 50, 300, 2000)), ("allowed_lateness", (0, 20, 400))):
        if draw(st.booleans()):
            config[name] = draw(st.sampled_from(values))
    strategy = draw(st.sampled_from((None, "OnWindowClose", "Final", "Final")))  # None: the default
    if strategy is not None:
        config["emit_strategy"] = strategy
    return config


@st.composite
def invalid_session_window_configs(draw: st.DrawFn) -> dict[str, Any]:
    """F017E-R18: one broken setting each."""
    config = draw(session_window_configs())
    broken = draw(
        st.sampled_from(("no_gap", "gap", "allowed_lateness", "bounded_delay", "emit_strategy", "extra"))
    )
    if broken == "no_gap":
        del config["gap"]
    elif broken == "emit_strategy":
        config["emit_strategy"] = draw(st.sampled_from(("OnUpdate", "final", 1)))
    elif broken == "extra":
        config["window_size"] = 10
    else:
        config[broken] = draw(st.sampled_from((-1, 0 if broken == "gap" else -5, "10", None, True)))
    return config


@st.composite
def session_window_traces(
    draw: st.DrawFn,
    *,
    max_batches: int = 6,
    max_items: int = 10,
    malformed: bool = True,
    restarts: bool = True,
    min_restarts: int = 0,
    invalid_config_rate: int = 0,
) -> Trace:
    """An out-of-order multi-key stream in micro-batches (F017E-R19), with restart points (R17).

    Boundaries are planted, not left to luck: some events land exactly on the late boundary
    (``t + allowed_lateness == watermark``) or 1 ms past it (R10); some batches end with an
    event of another key that puts the watermark exactly on the close threshold of the most
    recent session (R7); about one trace in six has a large batch (20..26 events) in which
    half the events share one on-time event time."""
    if invalid_config_rate and draw(st.integers(0, invalid_config_rate - 1)) == 0:
        config = draw(invalid_session_window_configs())
    else:
        config = draw(session_window_configs())
    # a refused configuration still needs a stream: its broken numbers do not shape it
    gap = config["gap"] if _is_count(config.get("gap")) and config["gap"] >= 1 else 100
    delay = config.get("bounded_delay", 0) if _is_count(config.get("bounded_delay")) else 0
    lateness = config.get("allowed_lateness", 0) if _is_count(config.get("allowed_lateness")) else 0
    disorder = draw(st.sampled_from((0, delay // 2, delay, delay + gap, 3 * (delay + gap))))
    step = draw(st.sampled_from((1, gap // 2 + 1, gap, 2 * gap)))
    now = draw(st.integers(0, 3)) * 1000 + disorder
    top: int | None = None  # the largest event time so far: the watermark is it minus the delay
    latest: dict[str, int] = {}  # each key's latest event time
    n_batches = draw(st.integers(min_restarts + 1 if min_restarts else 1, max_batches))
    large_batch = draw(st.integers(0, n_batches - 1)) if draw(st.integers(0, 5)) == 0 else None
    batches: list[tuple[Item, ...]] = []
    batch: list[Item] = []

    def event(key: str, t: int) -> None:
        nonlocal top
        batch.append(Item("event", key=key, event_time=t, value=draw(st.integers(-3, 9))))
        top = t if top is None else max(top, t)
        latest[key] = max(latest.get(key, t), t)

    for b in range(n_batches):
        batch = []
        if b == large_batch:
            now += draw(st.integers(0, step))
            tied = now  # the largest time of the batch, so every tied event is on time
            for _ in range(draw(st.integers(20, 26))):
                key = draw(st.sampled_from(KEYS))
                event(key, tied if draw(st.booleans()) else max(0, tied - draw(st.integers(0, disorder))))
        for _ in range(draw(st.integers(0, max_items))):
            roll = draw(st.integers(0, 99)) if malformed else 0
            now += draw(st.integers(0, step))
            t = max(0, now - draw(st.integers(0, disorder)))
            if roll < 89:
                event(draw(st.sampled_from(KEYS)), t)
            elif roll < 95:
                if top is None:
                    event(draw(st.sampled_from(KEYS)), t)
                else:  # on the late boundary or 1 ms past it (F017E-R10); the watermark stays
                    event(draw(st.sampled_from(KEYS)), max(0, top - delay - lateness - roll % 2))
            elif roll < 97:
                batch.append(Item("event", key=None, event_time=t))
            elif roll < 99:
                batch.append(Item("event", key=draw(st.sampled_from(KEYS))))
            else:
                batch.append(Item("remove_key", key="a"))
        if latest and draw(st.integers(0, 4)) == 0:
            # the watermark ends the batch exactly on the close threshold of the newest session
            newest = max(latest, key=lambda k: (latest[k], k))
            other = draw(st.sampled_from([k for k in KEYS if k != newest]))
            event(other, latest[newest] + gap + lateness + delay)
            now = max(now, latest[other])
        batches.append(tuple(batch))
    boundaries = list(range(n_batches - 1))
    restart_after: frozenset[int] = frozenset()
    if restarts and boundaries:
        chosen = draw(st.lists(st.sampled_from(boundaries), min_size=min(min_restarts, len(boundaries)),
                               max_size=len(boundaries), unique=True))  # fmt: skip
        restart_after = frozenset(chosen)
    return Trace(AREA, config, tuple(batches), restart_after=restart_after)


def _is_count(value: Any) -> bool:
    """An integer >= 0 that is not a bool: a setting the stream can be shaped by."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# ---- generator coverage (spec/traces.md TR-13, strategies/generator_coverage.py) -----------

#: the traces of the differential run and of most properties: some end (TR-14, F017E-R23)
ENDING_TRACES = with_end(session_window_traces())

# a fixed share of refused configurations, so even a short run has its 10% (F017E-R18)
DIFFERENTIAL = ((ENDING_TRACES, 0.9), (session_window_traces(invalid_config_rate=1), 0.1))

CASES: dict[str, str] = {
    "watermark_at_close_threshold": (
        "a batch ends with the watermark exactly at an open session's end + allowed_lateness (F017E-R7, R12)"
    ),
    "event_at_late_boundary": "an event with t + allowed_lateness == its watermark: on time (F017E-R10)",
    "event_just_late": "an event with t + allowed_lateness == its watermark - 1: late (F017E-R10)",
    "closed_by_watermark": "a session closed by an event of its own key (F017E-R8)",
    "timer_closes_quiet_key": "a session closed by its timer, its key silent from then on (F017E-R8, R14)",
    "restart_with_pending_timers": "a restart after a batch that leaves sessions open (F017E-R15, R16, R17)",
    "late_on_window_close": "a late event routed to the late output under OnWindowClose (F017E-R11)",
    "late_dropped_by_final": "a late event dropped under Final (F017E-R11)",
    "empty_batch": "a batch with no item (F017E-R19, TR-5)",
    "large_batch": ">= 20 events in one batch (F017E-R22)",
    "long_tie_run": ">= 8 on-time events of one time in a batch of >= 20 events (F017E-R3, R22)",
    "invalid_config": "a configuration refused before any item (F017E-R18, TR-6)",
    "error_rows": "a malformed item answered by an error row (F017E-R20)",
    "end_releases_held_data": "the end closes sessions its batch would have left open (F017E-R23)",
    "item_after_end": "an item after the end, an after_end error row (F017E-R20, R23, TR-14)",
}

RARE: dict[str, str] = {}


def cases_reached(trace: Trace, output: Any) -> set[str]:
    """The CASES one trace reaches, read from the trace and the oracle's canonical output."""
    if isinstance(output, InvalidConfig):
        return {"invalid_config"}
    reached: set[str] = set()
    config = trace.config
    delay, lateness = config.get("bounded_delay", 0), config.get("allowed_lateness", 0)
    late = {(b, s) for b, s, *_ in output["late"]}
    top: int | None = None
    key_batches: dict[str, list[int]] = {}
    for b, batch in enumerate(before_end(trace).batches):  # F017E-R23: later items are error rows
        well_formed = [(s, i) for s, i in enumerate(batch)
                       if i.kind == "event" and i.key is not None and i.event_time is not None]  # fmt: skip
        on_time: Counter[int] = Counter()
        for s, i in well_formed:
            assert i.event_time is not None and i.key is not None
            top = i.event_time if top is None else max(top, i.event_time)
            watermark = top - delay  # F017E-R5/R6: just after this event
            key_batches.setdefault(i.key, []).append(b)
            if i.event_time + lateness == watermark:
                reached.add("event_at_late_boundary")
            elif i.event_time + lateness == watermark - 1:
                reached.add("event_just_late")
            if (b, s) not in late:
                on_time[i.event_time] += 1
        if len(well_formed) >= LARGE_BATCH:
            reached.add("large_batch")
            if any(n >= LONG_TIE_RUN for n in on_time.values()):
                reached.add("long_tie_run")
        if not batch:
            reached.add("empty_batch")
    progress = {row[0]: row for row in output["progress"]}
    # closed before the end: the end closes by timer whatever the other keys do (F017E-R23)
    for b, key, _start, _end, _n, _sum, reason in output_before_end(trace, output)["sessions"]:
        if reason == "watermark":
            reached.add("closed_by_watermark")
        elif max(key_batches.get(key, [-1])) < b:
            reached.add("timer_closes_quiet_key")
    # at a batch end, so a `>=` closing rule would lose the session from the timers table
    if any(progress[b][1] == trigger for b, _key, _start, trigger in output["timers"]):
        reached.add("watermark_at_close_threshold")
    if any(progress[b][2] > 0 for b in trace.restart_after):
        reached.add("restart_with_pending_timers")
    verdicts = {row[5] for row in output["late"]}
    reached |= {"late_on_window_close"} if "late_output" in verdicts else set()
    reached |= {"late_dropped_by_final"} if "dropped" in verdicts else set()
    if any(reason != "after_end" for _, _, reason in output["errors"]):
        reached.add("error_rows")
    return reached | end_cases(trace, output, _closed_sessions)


def _closed_sessions(output: Any, batch: int) -> int:
    return sum(1 for row in output["sessions"] if row[0] == batch)


__all__ = [
    "CASES", "DIFFERENTIAL", "ENDING_TRACES", "RARE", "cases_reached", "invalid_session_window_configs",
    "session_window_configs", "session_window_traces",
]  # fmt: skip
