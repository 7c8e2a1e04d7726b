"""Event-time reorder buffer (veloFlux): oracle invariants, and the engine-vs-oracle differential test.

The invariants run the oracle (reference/eventtime_buffer.py) on generated
disordered streams (strategies/eventtime_buffer.py), some of which
end (TR-14), and check the spec's promises on its output: the order key and
the watermark contract, the exact late rule, stable ties, conservation of
tuples, the end, restarts; batch cuts (VELO-R25): a re-cut twin changes only
which tuples are late and what follows from it, a split drops only more, on
the oracle and on every engine, with planted batch-dependent stages the
comparison must still convict. The differential test feeds
every engine chosen with ``--engine`` (except the reference) the generated
traces in ONE ``run`` call and compares each output with the oracle's.
"""

from __future__ import annotations

import math
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace, saturating_sub
from properties import batch_cuts
from properties.batch_cuts import batch_ends, draw_cuts, item_places, recut
from reference.eventtime_buffer import (
    BUILTIN_TYPES,
    PARSER_CATALOGUE,
    EventtimeParseError,
    EventtimeTypeRegistry,
    run_trace,
)
from strategies.common import check_generated, check_state_layouts
from strategies.eventtime_buffer import (
    DIFFERENTIAL,
    EMITTED_COLUMNS,
    ENDING_TRACES,
    INVALID_CONFIGS,
    emitted_order,
)
from strategies.generator_coverage import before_end, end_position

TRACES = ENDING_TRACES


def _stream(out: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The emitted rows in the output's order (VELO-R17's sort key), as dicts."""
    return [dict(zip(EMITTED_COLUMNS, r, strict=True)) for r in emitted_order(out["emitted"])]


def _events(trace: Trace) -> list[tuple[int, int, Item]]:
    """The events the stage ingests: those before an end (VELO-R21: later ones are error rows)."""
    return [
        (b, s, i)
        for b, batch in enumerate(before_end(trace).batches)
        for s, i in enumerate(batch)
        if i.kind == "event"
    ]


def _run(trace: Trace) -> dict[str, list[Any]] | None:
    try:
        return run_trace(trace)
    except InvalidConfig:
        return None


# ---- the contract of the output stream (VELO-R17, R18, R23) -------------------------------


@pytest.mark.clauses("VELO-R16", "VELO-R17", "VELO-R18", "VELO-R9", "VELO-R21", "VELO-R23")
@given(TRACES)
def test_the_order_key_gives_the_emission_order_and_the_watermark_contract(trace: Trace) -> None:
    """R17: sorting the rows by the order key reproduces the order the oracle emitted them in (it
    appends them as it emits); R18: in that order no tuple at or below a watermark follows it."""
    out = _run(trace)
    if out is None:
        return
    assert emitted_order(out["emitted"]) == [tuple(r) for r in out["emitted"]]
    stream = _stream(out)
    watermark: int | None = None
    last_tuple: int | None = None
    for r in stream:
        if r["kind"] == "watermark":
            assert watermark is None or r["watermark"] > watermark  # strictly increasing
            watermark = r["watermark"]
        elif r["kind"] == "tuple":
            assert watermark is None or r["event_time"] > watermark  # R18
            assert last_tuple is None or r["event_time"] >= last_tuple  # non-decreasing
            last_tuple = r["event_time"]


# Found by the conformance profile when the strategy still gave cell-less events value 0: in
# processing-time mode such an event is a tuple stamped with the clock, tied with the one before.
_CELL_LESS_TIE = Trace(
    "eventtime_buffer",
    {"columns": ["id", "ts"], "eventtime_column": "ts", "eventtime_type": "unixtimestamp_ms",
     "eventtime_enabled": False, "late_tolerance": 0},
    ((Item("clock", time=0), Item("event", key="a", value=1, raw=0), Item("event", key="z", value=2)),),
)  # fmt: skip


@pytest.mark.clauses("VELO-R15")
@given(TRACES)
def test_the_strategy_keeps_its_promise_that_values_grow_with_arrival(trace: Trace) -> None:
    """The tie property below reads arrival order from values: every ingested event must raise it."""
    values = [i.value for _, _, i in _events(trace)]
    assert values == sorted(set(values))


@pytest.mark.clauses("VELO-R15", "VELO-R9")
@given(TRACES)
@example(_CELL_LESS_TIE)
def test_tuples_with_equal_times_leave_in_arrival_order(trace: Trace) -> None:
    """Generated values grow with arrival (every event, a cell-less one too), so arrival order
    is visible in the order the oracle emits, without the arrival columns."""
    out = _run(trace)
    if out is None:
        return
    tuples = [dict(zip(EMITTED_COLUMNS, r, strict=True)) for r in out["emitted"] if r[1] == "tuple"]
    for before, after in zip(tuples, tuples[1:]):
        if before["event_time"] == after["event_time"]:
            assert before["value"] < after["value"]


@pytest.mark.clauses("VELO-R15", "VELO-R23", "VELO-R12")
@given(TRACES)
def test_arrival_columns_name_the_event_of_each_tuple_and_error_item(trace: Trace) -> None:
    """R23: a tuple or error row carries the batch and seq of its event (R15: its arrival), and a
    tuple leaves in a batch at or after it arrived; watermark rows carry no arrival."""
    out = _run(trace)
    if out is None:
        return
    seen = set()
    for r in _stream(out):
        if r["kind"] == "watermark":
            assert r["arrival_batch"] is None and r["arrival_seq"] is None
            continue
        event = trace.batches[r["arrival_batch"]][r["arrival_seq"]]
        assert event.kind == "event" and (event.key, event.value) == (r["key"], r["value"])
        assert r["arrival_batch"] <= r["batch"] and (r["kind"] == "tuple" or r["arrival_batch"] == r["batch"])
        assert (r["arrival_batch"], r["arrival_seq"]) not in seen  # one output item per event
        seen.add((r["arrival_batch"], r["arrival_seq"]))


@pytest.mark.clauses("VELO-R12", "VELO-R14", "VELO-R21", "VELO-R22")
@given(TRACES)
def test_every_event_is_released_dropped_refused_or_still_buffered(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    stream = _stream(out)
    last = max(out["progress"])  # the row of the last batch
    released = sum(1 for r in stream if r["kind"] == "tuple")
    refused = sum(1 for r in stream if r["kind"] == "error")
    assert released + len(out["late"]) + refused + last[3] == len(_events(trace))
    assert last[4] == len(out["late"])  # late_dropped_count
    assert last[5] == sum(1 for r in stream if r["kind"] == "watermark")  # watermark_emitted_count
    assert sum(1 for _, _, reason in out["errors"] if reason in _TUPLE_REASONS) == refused  # R12


_TUPLE_REASONS = {
    "null_eventtime", "unparsable_eventtime", "eventtime_out_of_range", "unknown_stream",
    "no_eventtime_message",
}  # fmt: skip


@pytest.mark.clauses("VELO-R21", "VELO-R22", "VELO-R23", "VELO-R9", "TR-14")
@given(TRACES)
def test_after_an_end_nothing_is_buffered_and_every_later_item_is_after_end(trace: Trace) -> None:
    """From the end's batch on: the watermark is the end of time, nothing is buffered, the counters
    and max_timestamp_seen are those of the input before the end; the end's batch emits exactly
    one watermark, I64_MAX, after the clock watermarks before the end (processing time) or instead
    of its own target (event time), none if the watermark was already I64_MAX; later batches emit
    nothing; every item after the end is an after_end error row."""
    end = end_position(trace)
    out = _run(trace)
    if out is None or end is None:
        return
    cut = _run(before_end(trace))
    assert cut is not None
    progress = sorted(out["progress"])
    last_before = max(cut["progress"])  # the end's batch cut just before the end
    for row in progress[end[0] :]:
        assert row[1] == I64_MAX and row[3] == 0
        assert (row[2], row[4]) == (last_before[2], last_before[4])  # max_timestamp_seen, late count
    stream = _stream(out)
    assert all(r["batch"] <= end[0] for r in stream)
    marks = [r["watermark"] for r in stream if r["batch"] == end[0] and r["kind"] == "watermark"]
    before = progress[end[0] - 1][1] if end[0] > 0 else None
    clock_marks = [] if trace.config.get("eventtime_enabled") else [w for w in marks if w < I64_MAX]
    assert marks == clock_marks + ([] if before == I64_MAX else [I64_MAX])
    after = {(b, s) for b, batch in enumerate(trace.batches) for s in range(len(batch)) if (b, s) > end}
    assert {(b, s) for b, s, reason in out["errors"] if reason == "after_end"} == after
    assert not {(b, s) for b, s, reason in out["errors"] if reason != "after_end"} & after


@pytest.mark.clauses("VELO-R13", "VELO-R14", "VELO-R16", "VELO-R19", "VELO-R20", "VELO-R21")
@given(TRACES)
def test_late_exactly_at_or_below_the_watermark_of_the_batch_start(trace: Trace) -> None:
    """R14/R19: judged against the watermark before the batch, which is at most the earlier
    maximum minus the tolerance; R16: after a batch it is max(before, max_seen - tolerance),
    until the end's batch, from which on it is the end of time (R21)."""
    out = _run(trace)
    if out is None or not trace.config.get("eventtime_enabled"):
        return
    tolerance = trace.config.get("late_tolerance", 0)
    end = end_position(trace)
    progress = sorted(out["progress"])
    before: dict[int, tuple[int | None, int | None]] = {}
    previous: tuple[int | None, int | None] = (None, None)
    for row in progress:
        before[row[0]] = previous
        watermark, max_seen = row[1], row[2]
        if end is not None and row[0] >= end[0]:
            assert watermark == I64_MAX
        elif max_seen is not None:
            target = saturating_sub(max_seen, tolerance)
            assert watermark == (target if previous[0] is None else max(previous[0], target))
        previous = (watermark, max_seen)
    for b, _, _, ts, wm in out["late"]:
        watermark_before, max_before = before[b]
        assert wm == watermark_before and wm is not None and ts <= wm
        assert max_before is not None and wm <= saturating_sub(max_before, tolerance)
    if all(p[1] is None for p in progress):
        assert not out["late"] and all(p[1] is None for p in progress)  # R13


@pytest.mark.clauses("VELO-R24", "VELO-R21")
@given(TRACES)
def test_a_restarted_run_reports_what_an_uninterrupted_run_reports(trace: Trace) -> None:
    assert _run(trace) == _run(replace(trace, restart_after=frozenset()))


# ---- batch cuts (VELO-R25) -------------------------------------------------------------------

Output = dict[str, list[Any]]


def _what_a_cut_keeps(trace: Trace, out: Output) -> dict[str, Any]:
    """What VELO-R25 leaves alone when the items are cut into other batches, every (batch, seq)
    read as the item's place in the whole trace: the error rows and error items; each tuple's fate
    (dropped with its watermark, or released with its key, time and value) beside the watermark it
    was judged by (none in processing-time mode, R9); and, after every batch, keyed by how many
    items the trace had seen, the progress columns a cut leaves alone (all of them in
    processing-time mode), the tuples released or dropped by then and, in processing-time mode,
    the watermarks emitted by then."""
    at, ends = item_places(trace), batch_ends(trace)
    batch_of = {place: b for (b, _), place in at.items()}
    event_time = bool(trace.config.get("eventtime_enabled"))
    wm_after = {r[0]: r[1] for r in out["progress"]}
    judged_by = {p: wm_after.get(b - 1) if event_time else None for p, b in batch_of.items()}
    fates: dict[int, tuple[Any, ...]] = {}
    left: list[tuple[int, int]] = []  # (batch, place) of every tuple released or dropped
    for r in out["emitted"]:
        if r[1] == "tuple":
            fates[at[(r[7], r[8])]] = ("released", r[2], r[3], r[4])
            left.append((r[0], at[(r[7], r[8])]))
    for b, s, key, ts, wm in out["late"]:
        fates[at[(b, s)]] = ("dropped", key, ts, wm)
        left.append((b, at[(b, s)]))
    marks = [(r[0], r[5]) for r in out["emitted"] if r[1] == "watermark"]
    by_end: dict[int, Any] = {}
    for b, n in enumerate(ends):
        # event time: watermark, max_timestamp_seen and buffer_size; processing time: every column
        rows = frozenset(tuple(r[1:4] if event_time else r[1:]) for r in out["progress"] if r[0] == b)
        done = frozenset(p for lb, p in left if lb <= b)
        emitted = () if event_time else tuple(sorted(w for mb, w in marks if mb <= b))
        by_end.setdefault(n, set()).add((rows, done, emitted))
    return {
        "errors": sorted((at[(b, s)], reason) for b, s, reason in out["errors"]),
        "error items": sorted(  # place, key, value, reason
            (at[(r[7], r[8])], r[2], r[4], r[6]) for r in out["emitted"] if r[1] == "error"
        ),
        "fates": fates,
        "judged by": judged_by,
        "after": by_end,
    }


def _cut_differences(trace: Trace, out: Output, twin: Trace, again: Output) -> list[str]:
    """Where two cuts' answers differ in what VELO-R25 says no cut changes."""
    one, other = _what_a_cut_keeps(trace, out), _what_a_cut_keeps(twin, again)
    problems = [f"{name}: {one[name]} against {other[name]}" for name in ("errors", "error items")
                if one[name] != other[name]]  # fmt: skip
    # R14 may give a tuple another fate only when its batch starts at another watermark
    same_judge = [p for p, w in one["judged by"].items() if other["judged by"].get(p, w) == w]
    problems += [f"the tuple at place {p}: {one['fates'].get(p)} against {other['fates'].get(p)}"
                 for p in same_judge if one["fates"].get(p) != other["fates"].get(p)]  # fmt: skip
    problems += [f"after {n} items: {one['after'][n]} against {other['after'][n]}"
                 for n in sorted(one["after"].keys() & other["after"].keys())
                 if one["after"][n] != other["after"][n]]  # fmt: skip
    return problems


@pytest.mark.clauses("VELO-R25", "VELO-R14", "VELO-R16", "VELO-R9", "VELO-R20", "VELO-R24", "TR-5")
@given(TRACES, st.data())
def test_batch_cuts_change_only_which_tuples_are_late_and_the_watermarks_in_between(
    trace: Trace, data: st.DataObject
) -> None:
    """The same items cut into other batches (split, merged, empty ones added, restarts moved): the
    same errors and error items item for item, the same fate for every tuple judged by the same
    watermark, and wherever both cuts end a batch the same watermark, maximum, buffer and tuples
    done with (in processing-time mode every progress column and watermark)."""
    twin = draw_cuts(data, trace)
    out, again = _run(trace), _run(twin)
    assert (out is None) == (again is None)
    if out is not None and again is not None:
        assert not _cut_differences(trace, out, twin, again)


@pytest.mark.clauses("VELO-R25", "VELO-R14", "VELO-R19", "VELO-R13", "VELO-R16")
@given(TRACES, st.data())
def test_splitting_batches_can_only_drop_more_tuples_and_one_batch_drops_none(
    trace: Trace, data: st.DataObject
) -> None:
    """A split starts some batches after more items, at a watermark as high or higher (R14): every
    tuple the trace drops, its split drops too; the whole trace in one batch starts without a
    watermark and drops nothing (R13); and the split emits no fewer watermarks (R16)."""
    ends = batch_ends(trace)[:-1]
    items = sum(len(batch) for batch in trace.batches)
    extra = data.draw(st.lists(st.integers(0, items), max_size=4), label="splits")
    split = recut(trace, sorted([*ends, *extra]))
    out, finer, whole = _run(trace), _run(split), _run(recut(trace, []))
    if out is None or finer is None or whole is None:
        return
    dropped = {item_places(trace)[(b, s)] for b, s, *_ in out["late"]}
    assert dropped <= {item_places(split)[(b, s)] for b, s, *_ in finer["late"]}
    assert not whole["late"]
    # R16: one target per collection, so a split emits no fewer watermarks and one batch no more
    emitted = [max(o["progress"])[5] for o in (whole, out, finer)]
    assert emitted == sorted(emitted)


RECUT_TRACES = 8


def recut_pairs() -> list[tuple[Trace, Trace]]:
    """Generated streams, some ending, and each one's re-cut twin (properties.batch_cuts)."""
    return batch_cuts.recut_pairs(ENDING_TRACES, RECUT_TRACES, salt=15)


def recut_traces() -> list[Trace]:
    return [t for pair in recut_pairs() for t in pair]


# the traces and their twins join the session's pre-run
@pytest.mark.prerun_traces.with_args(recut_traces)  # with_args: the one argument is a function
@pytest.mark.clauses("VELO-R25", "VELO-R14", "VELO-R16", "VELO-R9", "VELO-R20", "VELO-R24", "TR-5")
def test_batch_cuts_change_only_which_tuples_are_late_and_the_watermarks_in_between_on_the_engine(
    engine_under_test: Any,
) -> None:
    """The engine's answer to a stream and to its re-cut twin, compared as on the oracle above."""
    pairs = recut_pairs()
    assert len(pairs) == RECUT_TRACES
    batch_cuts.check_twins_on_the_engine(engine_under_test, pairs, _cut_differences)


def _first_row_of_each_batch_lost(trace: Trace, out: Output) -> Output:
    """A stage that loses whatever the first row of each batch gives (an offset read one past)."""
    return {
        **out,
        "emitted": [r for r in out["emitted"] if r[8] != 0],
        "late": [r for r in out["late"] if r[1] != 0],
        "errors": [r for r in out["errors"] if r[1] != 0],
    }


def _progress_from_the_batch_start(trace: Trace, out: Output) -> Output:
    """A progress row that carries the watermark its batch started with (read before the batch)."""
    progress, before = [], None
    for r in sorted(out["progress"]):
        progress.append((r[0], before, *r[2:]))
        before = r[1]
    return {**out, "progress": progress}


def _stamped_with_the_clock_at_the_batch_start(trace: Trace, out: Output) -> Output:
    """Processing-time tuples stamped with the clock as it stood when the batch began (a clock
    read per micro-batch, as Spark's batch timestamp is): R9 stamps each at its arrival. The
    clock at a batch's start is one past the last clock watermark of the batches before it."""
    if trace.config.get("eventtime_enabled"):
        return out
    clock_marks = sorted((r[0], r[5]) for r in out["emitted"] if r[1] == "watermark" and r[5] < I64_MAX)
    emitted = []
    for r in out["emitted"]:
        before = [w for b, w in clock_marks if b < r[0]]
        emitted.append((*r[:3], before[-1] + 1 if before else 0, *r[4:]) if r[1] == "tuple" else r)
    return {**out, "emitted": emitted}


def _in_processing_time(trace: Trace) -> Trace:
    return replace(trace, config={**trace.config, "eventtime_enabled": False})


PLANTED = [
    _first_row_of_each_batch_lost,
    _progress_from_the_batch_start,
    _stamped_with_the_clock_at_the_batch_start,
]


@pytest.mark.clauses("VELO-R25", "VELO-R9", "VELO-R14", "VELO-R22")
@pytest.mark.parametrize("planted", PLANTED)
def test_the_batch_cut_comparison_convicts_a_buffer_that_depends_on_its_batches(planted: Any) -> None:
    """The comparison above excuses late rows, counters and release batches; it still catches a
    stage whose answer depends on where its batches end in a way VELO-R25 forbids. Each pair also
    runs in processing-time mode, where the clock bug shows."""
    pairs = recut_pairs()
    pairs += [(_in_processing_time(trace), _in_processing_time(twin)) for trace, twin in pairs]
    caught = [
        trace.name for trace, twin in pairs
        if _cut_differences(trace, planted(trace, run_trace(trace)), twin, planted(twin, run_trace(twin)))
    ]  # fmt: skip
    assert caught, f"{planted.__name__}: no re-cut twin shows it"


@pytest.mark.clauses("VELO-R9")
@given(TRACES)
def test_processing_time_stamps_tuples_with_the_clock_and_buffers_nothing(trace: Trace) -> None:
    trace = replace(trace, config={**trace.config, "eventtime_enabled": False})
    out = _run(trace)
    if out is None:
        return
    clock, stamps = 0, []
    for batch in before_end(trace).batches:
        for item in batch:
            if item.kind == "clock" and item.time is not None and item.time >= clock:
                clock = item.time
            elif item.kind == "event":
                stamps.append(clock)
    assert [r["event_time"] for r in _stream(out) if r["kind"] == "tuple"] == stamps
    assert not out["late"] and all(p[3] == 0 for p in out["progress"])


@pytest.mark.clauses("VELO-R2", "VELO-R7", "VELO-R1")
@given(INVALID_CONFIGS)
def test_bad_configurations_are_refused_before_any_item(config: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfig):
        run_trace(Trace("eventtime_buffer", config, ((Item("event", raw=1),),)))


# ---- parsers (VELO-R3..R5) -----------------------------------------------------------------

UNITS = {"unixtimestamp_ms": 1, "unixtimestamp_s": 1000, "unixtimestamp": 1000}


@pytest.mark.clauses("VELO-R5", "VELO-R4")
@given(st.sampled_from(sorted(UNITS)), st.integers(-(10**20), 10**20))
def test_integers_and_integer_strings_parse_alike(name: str, v: int) -> None:
    parser = {**BUILTIN_TYPES, **PARSER_CATALOGUE}[name]
    ms = v * UNITS[name]
    for cell in (v, str(v)):
        if I64_MIN <= ms <= I64_MAX:
            assert parser(cell) == ms
        else:
            with pytest.raises(EventtimeParseError, match="eventtime_out_of_range"):
                parser(cell)


@pytest.mark.clauses("VELO-R5")
@given(st.floats(-1e12, 1e12, allow_nan=False), st.sampled_from(sorted(UNITS) + ["unixtimestamp_us"]))
def test_numbers_with_fractions_are_read_from_their_decimal_text_and_rounded_down(
    x: float, name: str
) -> None:
    per_unit = Decimal(UNITS.get(name, "0.001"))
    parser = {**BUILTIN_TYPES, **PARSER_CATALOGUE}[name]
    assert parser(x) == math.floor(Decimal(repr(x)) * per_unit)


@pytest.mark.clauses("VELO-R3")
def test_the_registry_starts_with_exactly_the_two_built_ins() -> None:
    assert EventtimeTypeRegistry().list() == ["unixtimestamp_ms", "unixtimestamp_s"]


# ---- engine versus oracle ------------------------------------------------------------------


@pytest.mark.clauses(*(f"VELO-R{n}" for n in range(1, 25) if n != 6))
def test_engine_agrees_with_the_oracle(engine_under_test: Any) -> None:
    """All generated traces in ONE engine.run call; a difference is shrunk and printed as Gherkin."""
    check_generated(engine_under_test, *DIFFERENTIAL)


# ---- the Spark operator's state layout (VELO-R24) -------------------------------------------


@pytest.mark.clauses("VELO-R24")
def test_spark_state_layout_is_versioned() -> None:
    """A checkpoint of another layout version, or of another bucket count, is refused with both
    values named, never misread."""
    from spark_impl.eventtime_buffer import LAYOUT_VERSION, BucketState, StreamState

    bucket = BucketState(8, clock=5, watermark=-3, max_seen=7, ended=True, batches=2).to_tuple()
    stream = StreamState(8, late_dropped=2, watermarks_emitted=1, max_seen=7, watermark=-3).to_tuple()
    assert bucket[0] == stream[0] == LAYOUT_VERSION
    check_state_layouts(BucketState, bucket, StreamState, stream)


# ---- the Spark operator's typed columns (the public function, VELO-R5) ----------------------

I64_CELLS = st.one_of(
    st.integers(-(10**6), 10**6), st.sampled_from((I64_MIN, I64_MAX, I64_MAX // 1000, I64_MAX // 1000 + 1))
)


@pytest.mark.clauses("VELO-R5", "VELO-R10")
@given(
    st.lists(st.one_of(st.none(), I64_CELLS), max_size=12),
    st.sampled_from(("unixtimestamp_ms", "unixtimestamp_s")),
    st.sampled_from((0, 5, 1000)),
)
def test_spark_reads_integer_and_string_columns_as_the_oracle_reads_json_cells(
    cells: list[int | None], type_name: str, tolerance: int
) -> None:
    """The pure code of spark_impl.eventtime_buffer (what runs in the workers, here without Spark)
    in its input modes: ``long`` (an integer column) and ``text`` (a string column) of the public
    function."""
    import numpy as np
    import pandas as pd

    from spark_impl.eventtime_buffer import LocalRun

    config = {
        "columns": ["ts"], "eventtime_column": "ts", "eventtime_type": type_name, "eventtime_enabled": True,
        "late_tolerance": tolerance,
    }  # fmt: skip
    items = tuple(Item("event", key="k", value=i, raw=c) for i, c in enumerate(cells))
    expected = emitted_order(run_trace(Trace("eventtime_buffer", config, (items,)))["emitted"])
    n = len(cells)
    texts = pd.Series([None if c is None else str(c) for c in cells], dtype=object)
    rows = pd.DataFrame({
        "eb_sid": ["s"] * n, "eb_batch": np.zeros(n, np.int64), "eb_seq": np.arange(n, dtype=np.int64),
        "eb_kind": ["event"] * n, "eb_key": ["k"] * n, "eb_value": np.arange(n, dtype=np.int64),
        "eb_raw": texts, "eb_raw_null": texts.isna().to_numpy(),
        "eb_raw_long": np.array([0 if c is None else c for c in cells], np.int64),
    })  # fmt: skip
    for mode in ("long", "text"):
        out = LocalRun(config, mode).micro_batch(rows)
        emitted = out[out["output"] == "emitted"][list(EMITTED_COLUMNS)]
        plain = (tuple(None if pd.isna(v) else v for v in r) for r in emitted.itertuples(index=False))
        got = emitted_order(plain)
        assert got == expected, mode
