"""Hypothesis strategies for event-time buffer traces (spec/eventtime_buffer.md).

A trace is a disordered stream: a base time that advances batch by batch,
each event at the base minus a disorder drawn up to a bound (sometimes far
beyond it, so late drops happen), duplicates of earlier times (ties), cells
written in every form a parser meets (integers, integer strings, fractions,
nulls, junk, values out of range), sometimes tuples of several messages,
clock items, malformed items, empty batches and restart points. Tolerances
include 0 and the disorder bound itself, so the `<=` boundary of VELO-R14 is
hit often. Configurations cover both modes, the built-in and catalogue
parsers and joined streams; a few are invalid (VELO-R2, R7).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

from harness.outputs import TABLES, emitted_order
from harness.traces import I64_MAX, InvalidConfig, Item, Trace
from reference.eventtime_buffer import BUILTIN_TYPES, PARSER_CATALOGUE, EventtimeParseError
from strategies.common import LARGE_BATCH, LONG_TIE_RUN, restart_points
from strategies.generator_coverage import before_end, end_cases, with_end

PARSERS = {**BUILTIN_TYPES, **PARSER_CATALOGUE}

AREA = "eventtime_buffer"
KEYS = st.sampled_from(("a", "b", "c", None))
JOINED = {
    "orders": {"columns": ["ts"], "eventtime_column": "ts", "eventtime_type": "unixtimestamp_s"},
    "users": {"columns": ["name"]},
}
TYPES = ("unixtimestamp_ms", "unixtimestamp_ms", "unixtimestamp_s", "unixtimestamp", "unixtimestamp_us")
MS_PER_UNIT = {
    "unixtimestamp_ms": 1,
    "unixtimestamp_s": 1000,
    "unixtimestamp": 1000,
    "unixtimestamp_us": 0.001,
}


@st.composite
def eventtime_buffer_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Valid settings (VELO-R1, R3, R7): mostly event time, with every parser and tolerance 0 often."""
    type_name = draw(st.sampled_from(TYPES))
    config: dict[str, Any] = {
        "columns": ["id", "ts"],
        "eventtime_column": "ts",
        "eventtime_type": type_name,
        "eventtime_enabled": draw(st.sampled_from((True, True, True, False))),
        "late_tolerance": draw(st.sampled_from((0, 0, 1, 10, 50, 100, 1000, I64_MAX))),
    }
    if type_name in ("unixtimestamp", "unixtimestamp_us"):
        config["register_parsers"] = [type_name]
    if draw(st.integers(0, 2)) == 0:
        config["joined_streams"] = JOINED
    return config


INVALID_CONFIGS: st.SearchStrategy[dict[str, Any]] = st.sampled_from((
    {"columns": ["id"], "eventtime_column": "ts", "eventtime_type": "unixtimestamp_ms"},
    {"columns": ["ts"], "eventtime_column": "ts", "eventtime_type": "unixtimestamp"},
    {"columns": ["ts"], "eventtime_column": "ts"},
    {"columns": ["ts"], "eventtime_enabled": True},
    {"columns": ["ts"], "eventtime_column": "ts", "eventtime_type": "unixtimestamp_s", "late_tolerance": -1},
    {"register_parsers": ["unixtimestamp_ms"]},
    {"joined_streams": {"input": {"columns": []}}},
    {"late_tolerance_ms": 5},
))  # fmt: skip


@st.composite
def _cell(draw: st.DrawFn, ms: int, type_name: str) -> Any:
    """The cell of a tuple at ``ms`` in the parser's unit and JSON form, or a cell that fails (VELO-R5)."""
    form = draw(st.integers(0, 21))
    unit = MS_PER_UNIT[type_name]
    exact = ms / unit if unit != 0.001 else ms * 1000
    whole = int(exact) if unit <= 1 else ms // unit
    if form < 10:
        return whole
    if form < 13:
        return str(whole)
    if form < 15:
        return round(exact + draw(st.sampled_from((0.0, 0.25, 0.5, 0.999))), 3)
    if form == 15:
        return None
    if form < 18:
        return draw(st.sampled_from(("", "1.5", "abc", " 7", "+3", "0x10")))
    if form < 20:  # just outside i64 once in ms, in each unit (VELO-R5)
        return draw(st.sampled_from((2**63, -(2**63) - 1, 10**19, 9223372036854776, -9223372036854776)))
    if form == 20:
        return -whole
    return draw(st.sampled_from((2e3, 1e-3, -0.5, 123456789.125)))


def _exact_cell(ms: int, type_name: str) -> int | float:
    """A cell that parses to exactly ``ms`` under ``type_name`` (VELO-R5): a fraction when needed."""
    if type_name == "unixtimestamp_us":
        return ms * 1000
    if MS_PER_UNIT[type_name] == 1000:
        return ms // 1000 if ms % 1000 == 0 else ms / 1000  # its shortest decimal is exact
    return ms


def _read_time(item: Item, config: Mapping[str, Any]) -> int | None:
    """The time the oracle reads from ``item`` in event-time mode, or None (VELO-R10, R11)."""
    input_stream = config.get("stream_name", "input")
    types = {name: conf.get("eventtime_type") for name, conf in config.get("joined_streams", {}).items()}
    types[input_stream] = config.get("eventtime_type")
    messages = item.messages if item.messages is not None else ((input_stream, item.raw),)
    for stream, cell in messages:
        if types.get(stream) in PARSERS:
            try:
                return PARSERS[types[stream]](cell)
            except EventtimeParseError:
                return None
    return None


@st.composite
def eventtime_buffer_traces(draw: st.DrawFn, invalid_config_rate: int = 0) -> Trace:
    """A disordered stream in 1..6 batches; ``invalid_config_rate`` percent get an invalid config.

    About one trace in four has one large batch (20..28 events) in which half the events share
    one time, so a sort that is not stable reorders them (VELO-R15). From the second batch on,
    some events land exactly on the watermark the batch is judged by, or 1 ms above it (R14)."""
    config: dict[str, Any]
    if invalid_config_rate and draw(st.integers(0, 99)) < invalid_config_rate:
        config = draw(INVALID_CONFIGS)
    else:
        config = draw(eventtime_buffer_configs())
    type_name = config.get("eventtime_type", "unixtimestamp_ms")
    type_name = type_name if type_name in MS_PER_UNIT else "unixtimestamp_ms"
    tolerance = config.get("late_tolerance", 0)
    tolerance = tolerance if isinstance(tolerance, int) and tolerance >= 0 else 0
    bound = draw(st.sampled_from((0, 10, 100, 1000)))
    base, clock, value = draw(st.integers(0, 5000)), 0, 0
    seen: list[int] = []
    latest_read: int | None = None  # the largest time read so far: the watermark is it minus the tolerance
    n_batches = draw(st.integers(1, 6))
    large_batch = draw(st.integers(0, n_batches - 1)) if draw(st.integers(0, 3)) == 0 else None
    batches: list[tuple[Item, ...]] = []
    for b in range(n_batches):
        base += draw(st.sampled_from((0, 1, 10, 100, 500, 1000)))
        # VELO-R14, R16: the watermark this batch is judged by, when the generator can know it
        judged_by = None if latest_read is None else latest_read - tolerance
        if judged_by is not None and abs(judged_by) > 10**12:
            judged_by = None  # no exact cell far out of the time range (tolerance I64_MAX)
        batch: list[Item] = []
        if b == large_batch:
            tie_ms = base - draw(st.integers(0, bound))
            for _ in range(draw(st.integers(20, 28))):
                value += 1
                ms = tie_ms if draw(st.booleans()) else base - draw(st.integers(0, bound))
                seen.append(ms)
                batch.append(Item("event", key=draw(KEYS), value=value, raw=_exact_cell(ms, type_name)))
            # later times past the tolerance release the tie (VELO-R17)
            base += draw(st.sampled_from((bound + min(tolerance, 2000), 2000, 0)))
        for _ in range(draw(st.integers(0, 8))):
            roll = draw(st.integers(0, 29))
            if roll < 22:
                value += 1
                if judged_by is not None and roll in (9, 10, 11):
                    at = judged_by + (0 if roll == 9 else 1)  # on the boundary, late, or 1 ms above it
                    batch.append(Item("event", key=draw(KEYS), value=value, raw=_exact_cell(at, type_name)))
                    continue
                if seen and roll < 4:
                    ms = draw(st.sampled_from(seen))  # a tie with an earlier tuple
                elif roll < 6:
                    ms = base - bound - draw(st.integers(0, 2000))  # beyond the bound: late
                else:
                    ms = base - draw(st.integers(0, bound))
                seen.append(ms)
                if "joined_streams" in config and roll in (7, 8):
                    messages: tuple[tuple[str, Any], ...] = (
                        (("users", "x"), ("orders", ms // 1000)) if roll == 7 else (("users", 1),)
                    )
                    batch.append(Item("event", key=draw(KEYS), value=value, messages=messages))
                else:
                    batch.append(Item("event", key=draw(KEYS), value=value, raw=draw(_cell(ms, type_name))))
            elif roll < 27:
                clock += draw(st.sampled_from((0, 1, 100, 1000)))
                batch.append(Item("clock", time=clock))
            elif roll == 27:
                batch.append(Item("clock", time=draw(st.sampled_from((None, max(0, clock - 1))))))
            elif roll == 28:
                batch.append(Item("idle", key="a"))
            else:
                value += 1  # every event's value grows with arrival, a cell-less one too
                batch.append(Item("event", key="z", value=value))  # no cell at all: a null cell
        read = [t for t in (_read_time(i, config) for i in batch if i.kind == "event") if t is not None]
        latest_read = max([*read, *([] if latest_read is None else [latest_read])], default=None)
        batches.append(tuple(batch))
    return Trace(AREA, config, tuple(batches), draw(restart_points(len(batches))))


# ---- the order of the output (VELO-R17) ------------------------------------------------------

EMITTED_COLUMNS = TABLES[AREA]["emitted"]


# ---- generator coverage (spec/traces.md TR-13, strategies/generator_coverage.py) -----------

#: the traces of the properties and of the differential run: some end (TR-14, VELO-R21)
ENDING_TRACES = with_end(eventtime_buffer_traces())

# a fixed share of refused configurations, so even a short run has its 10% (VELO-R2, R7)
DIFFERENTIAL = ((ENDING_TRACES, 0.9), (eventtime_buffer_traces(invalid_config_rate=100), 0.1))

CASES: dict[str, str] = {
    "event_at_late_boundary": "an event exactly at the watermark of its batch start: late (VELO-R14, R19)",
    "event_just_above_late_boundary": "an event 1 ms above that watermark, kept (VELO-R14, R19)",
    "tolerance_zero": "event time with late_tolerance 0 that emits a watermark (VELO-R16, R19)",
    "processing_time_mode": "processing-time mode emitting a clock watermark (VELO-R9)",
    "null_cell": "a null event-time cell, an error item (VELO-R5, R10, R12)",
    "junk_cell": "an unparsable event-time cell, an error item (VELO-R5, R12)",
    "out_of_i64_range_cell": "a cell outside i64 once in ms, an error item (VELO-R5, R12)",
    "restart_with_buffered_tuples": "a restart after a batch that leaves tuples buffered (VELO-R21, R24)",
    "empty_batch": "a batch with no item (VELO-R20, TR-5)",
    "tied_tuples": "two released tuples with one event time (VELO-R15)",
    "joined_streams": "a tuple of several messages from joined streams (VELO-R11)",
    "large_batch": ">= 20 events in one batch (VELO-R15, R17)",
    "long_tie_run": ">= 8 released tuples of one time arriving in a batch of >= 20 events (VELO-R15)",
    "invalid_config": "a configuration refused before any item (VELO-R2, R7, TR-6)",
    "malformed_item": "an error row for a clock without time or going back, or another kind (VELO-R23)",
    "end_releases_held_data": "the end releases tuples its batch would have kept buffered (VELO-R21)",
    "item_after_end": "an item after the end, an after_end error row (VELO-R21, R23, TR-14)",
}

RARE: dict[str, str] = {}

_CELL_CASES = {
    "null_eventtime": "null_cell", "unparsable_eventtime": "junk_cell",
    "eventtime_out_of_range": "out_of_i64_range_cell",
}  # fmt: skip
_MALFORMED_REASONS = {"missing_time", "clock_went_backwards", "unsupported_item"}


def cases_reached(trace: Trace, output: Any) -> set[str]:
    """The CASES one trace reaches, read from the trace and the oracle's canonical output."""
    if isinstance(output, InvalidConfig):
        return {"invalid_config"}
    reached: set[str] = set()
    config = trace.config
    event_time_mode = bool(config.get("eventtime_enabled"))
    ingested = before_end(trace).batches  # VELO-R21: the items after an end are error rows
    events_per_batch = [sum(1 for i in batch if i.kind == "event") for batch in ingested]
    progress = sorted(output["progress"])
    watermarks = [None] + [row[1] for row in progress]  # watermarks[b]: before batch b
    emitted = [dict(zip(EMITTED_COLUMNS, r, strict=True)) for r in output["emitted"]]
    tuples = [r for r in emitted if r["kind"] == "tuple"]
    emits_watermark = any(r["kind"] == "watermark" and r["watermark"] < I64_MAX for r in emitted)
    for _, _, reason in output["errors"]:
        reached |= {_CELL_CASES[reason]} if reason in _CELL_CASES else set()
        reached |= {"malformed_item"} if reason in _MALFORMED_REASONS else set()
    if event_time_mode:
        for b, batch in enumerate(ingested):
            before = watermarks[b]
            for item in batch:
                t = _read_time(item, config) if item.kind == "event" and before is not None else None
                if t is not None and t == before:
                    reached.add("event_at_late_boundary")
                elif t is not None and t == before + 1:
                    reached.add("event_just_above_late_boundary")
        if config.get("late_tolerance", 0) == 0 and emits_watermark:
            reached.add("tolerance_zero")
    elif emits_watermark:
        reached.add("processing_time_mode")
    if any(progress[b][3] > 0 for b in trace.restart_after):
        reached.add("restart_with_buffered_tuples")
    if any(not batch for batch in trace.batches):
        reached.add("empty_batch")
    times = Counter(r["event_time"] for r in tuples)
    if any(n >= 2 for n in times.values()):
        reached.add("tied_tuples")
    if "joined_streams" in config and any(i.messages for batch in ingested for i in batch):
        reached.add("joined_streams")
    if any(n >= LARGE_BATCH for n in events_per_batch):
        reached.add("large_batch")
    ties = Counter((r["arrival_batch"], r["event_time"]) for r in tuples)  # (arrival batch, time) -> tuples
    if any(n >= LONG_TIE_RUN and events_per_batch[b] >= LARGE_BATCH for (b, _), n in ties.items()):
        reached.add("long_tie_run")
    return reached | end_cases(trace, output, _released_tuples)


def _released_tuples(output: Any, batch: int) -> int:
    return sum(1 for r in output["emitted"] if r[0] == batch and r[1] == "tuple")


__all__ = [
    "AREA", "CASES", "DIFFERENTIAL", "EMITTED_COLUMNS", "ENDING_TRACES", "INVALID_CONFIGS", "RARE",
    "cases_reached", "emitted_order", "eventtime_buffer_configs", "eventtime_buffer_traces",
]  # fmt: skip
