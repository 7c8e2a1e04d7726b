"""Late data (oxirs): invariants of the oracle, and engine-vs-oracle differential tests.

Invariants run on the oracle's stream (reference/late_data.py ``run_trace``)
over generated traces, and on the SideOutputRouter's API. The differential
test feeds every engine chosen with ``--engine`` (except the reference) the
budget's generated traces in ONE ``run`` call and compares each output with
the oracle's; a difference is shrunk and printed as a scenario.

* batch cuts change nothing but the numbering, on the oracle and on every engine, and the
  comparison still convicts planted batch-dependent streams (OXL-R19).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.outputs import TABLES, Row
from harness.traces import I64_MAX, InvalidConfig, Item, Trace
from properties import batch_cuts
from properties.batch_cuts import batch_ends, draw_cuts, item_places, kept_differences
from reference.late_data import SideOutputRouter, config_from_trace, run_trace, window_of
from strategies.common import check_generated, check_state_layouts
from strategies.late_data import DIFFERENTIAL, INVALID_CONFIGS, late_data_traces

TRACES = late_data_traces(edge_rate=10)


def _rows(output: dict[str, list[Row]], table: str) -> list[dict[str, Any]]:
    return [dict(zip(TABLES["late_data"][table], r, strict=True)) for r in output[table]]


def _run(trace: Trace) -> dict[str, list[Row]] | None:
    try:
        return run_trace(trace)
    except InvalidConfig:
        return None


@pytest.mark.clauses("OXL-R4", "OXL-R5", "OXL-R9")
@given(TRACES)
def test_a_verdict_is_on_time_exactly_when_the_event_is_not_below_its_watermark(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    for e in _rows(out, "events"):
        below = e["watermark"] is not None and e["event_time"] < e["watermark"]
        assert (e["verdict"] == "on_time") == (not below), e
        if below:
            assert e["lateness"] == min(I64_MAX, e["watermark"] - e["event_time"]) > 0, e
        else:
            assert e["lateness"] is None and e["assigned_time"] == e["event_time"], e
        assert (e["channel"] is not None) == (e["verdict"] == "side_output"), e


@pytest.mark.clauses("OXL-R6", "OXL-R7", "OXL-R8", "OXL-R11")
@given(TRACES)
def test_policies_decide_only_what_no_open_window_keeps(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    cfg = config_from_trace(dict(trace.config))
    policy = trace.config.get("policy", "Drop")
    for e in _rows(out, "events"):
        v, wm, t = e["verdict"], e["watermark"], e["event_time"]
        if v == "on_time":
            continue
        window_open = False
        if cfg.window_size is not None:
            start, end = window_of(t, cfg.window_size)
            holds_the_top = start + cfg.window_size > I64_MAX  # OXL-R12: never closes
            window_open = holds_the_top or wm < min(I64_MAX, end + cfg.allowed_lateness)
        assert (v == "allowed_late") == window_open, e  # OXL-R11
        if v == "allowed_late":
            assert e["assigned_time"] == t
        elif policy == "Reassign":
            within = wm - t <= trace.config["max_lateness"]
            assert v == ("reassigned" if within else "dropped"), e
            assert e["assigned_time"] == (wm if within else None), e
        else:
            assert v == ("side_output" if policy == "SideOutput" else "dropped"), e
            assert e["assigned_time"] is None


@pytest.mark.clauses("OXL-R9", "OXL-R14", "OXL-R16", "OXL-R17")
@given(TRACES)
def test_nothing_is_lost_every_event_has_one_row_and_side_outputs_keep_arrival_order(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    events = _rows(out, "events")
    errors = {(r["batch"], r["seq"]) for r in _rows(out, "errors")}
    items = {
        (b, s) for b, batch in enumerate(trace.batches) for s, i in enumerate(batch) if i.kind == "event"
    }
    judged = [(e["batch"], e["seq"]) for e in events]
    assert len(judged) == len(set(judged))
    assert set(judged) == items - errors and not set(judged) & errors
    side = sorted(_rows(out, "side_outputs"), key=lambda r: r["position"])
    assert [r["position"] for r in side] == list(range(len(side)))
    routed = [(e["batch"], e["seq"], e["event_time"]) for e in events if e["verdict"] == "side_output"]
    assert [(r["batch"], r["seq"], r["event_time"]) for r in side] == sorted(routed)
    last = _rows(out, "progress")[-1]
    for verdict in ("on_time", "allowed_late", "reassigned", "dropped", "side_output"):
        assert last[verdict] == sum(1 for e in events if e["verdict"] == verdict)
    assert [p["batch"] for p in _rows(out, "progress")] == list(range(len(trace.batches)))


@pytest.mark.clauses("OXL-R10", "OXL-R12")
@given(TRACES)
def test_every_kept_event_is_counted_in_exactly_one_window(trace: Trace) -> None:
    out = _run(trace)
    if out is None or "window_size" not in trace.config:
        return
    cfg = config_from_trace(dict(trace.config))
    kept = [e for e in _rows(out, "events") if e["assigned_time"] is not None]
    closed = _rows(out, "windows")
    assert sum(w["count"] for w in closed) + _open_count(trace) == len(kept)
    for w in closed:
        assert w["watermark"] >= min(I64_MAX, w["window_end"] + cfg.allowed_lateness), w
    keys = [(w["source"], w["window_start"]) for w in closed]
    assert len(keys) == len(set(keys)), "a closed window was registered again"


def _open_count(trace: Trace) -> int:
    """Events in windows still open at the end: the oracle's own state after the trace."""
    from reference.late_data import LateDataStream

    stream = LateDataStream(dict(trace.config))
    for b, batch in enumerate(trace.batches):
        stream.run_batch(b, batch)
    return sum(stream.window_counts.values())


@pytest.mark.clauses("OXL-R1", "OXL-R3")
@given(TRACES)
def test_the_watermark_of_a_source_never_goes_down_and_events_never_move_it(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    seen: dict[Any, int] = {}
    for e in sorted(_rows(out, "events"), key=lambda r: (r["batch"], r["seq"])):
        if e["watermark"] is None:
            assert e["source"] not in seen
            continue
        assert e["watermark"] >= seen.get(e["source"], e["watermark"])
        seen[e["source"]] = e["watermark"]
    wm_times = {
        (b, s): i.time
        for b, batch in enumerate(trace.batches)
        for s, i in enumerate(batch)
        if i.kind == "watermark"
    }
    for e in _rows(out, "events"):
        assert e["watermark"] is None or e["watermark"] in wm_times.values()


@pytest.mark.clauses("OXL-R2")
@given(TRACES, st.sampled_from((None, 0, 1, 2)))
def test_a_source_is_judged_by_its_own_watermark_alone(trace: Trace, removed: int | None) -> None:
    """Removing every event and watermark of another source changes no verdict of this one."""
    out = _run(trace)
    if out is None:
        return
    without = replace(
        trace,
        batches=tuple(
            tuple(i for i in b if not (i.kind in ("event", "watermark") and i.source == removed))
            for b in trace.batches
        ),
    )
    reduced = _run(without)
    assert reduced is not None

    def verdicts(o: dict[str, list[Row]]) -> list[tuple[Any, ...]]:
        rows = sorted(_rows(o, "events"), key=lambda r: (r["batch"], r["seq"]))
        return [(r["batch"], r["source"], r["event_time"], r["watermark"], r["verdict"], r["assigned_time"])
                for r in rows if r["source"] != removed]  # fmt: skip

    assert verdicts(out) == verdicts(reduced)


@pytest.mark.clauses("OXL-R18")
@given(TRACES)
def test_restart_points_change_nothing(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    assert run_trace(replace(trace, restart_after=frozenset())) == out
    every = frozenset(range(len(trace.batches) - 1))
    assert run_trace(replace(trace, restart_after=every)) == out


Output = dict[str, list[Row]]


def _what_a_cut_keeps(trace: Trace, out: Output) -> dict[str, Any]:
    """OXL-R19: the events, side-output, window and error rows with each (batch, seq) read as the
    item's place in the whole trace, and the progress rows keyed by how many items the trace had
    seen at the end of their batch (every row of the batches that end there: an empty batch
    repeats the row before it)."""
    at = item_places(trace)
    events = sorted((at[(r[0], r[1])], *r[2:]) for r in out["events"])
    side = sorted((at[(r[0], r[3])], r[1], r[2], *r[4:]) for r in out["side_outputs"])
    windows = sorted((at[(r[0], r[1])], *r[2:]) for r in out["windows"])
    errors = sorted((at[(r[0], r[1])], r[2]) for r in out["errors"])
    ends = batch_ends(trace)
    progress: dict[int, set[tuple[Any, ...]]] = {}
    for r in out["progress"]:
        progress.setdefault(ends[r[0]], set()).add(r[1:])
    return {"events": events, "side_outputs": side, "windows": windows, "errors": errors,
            "progress": progress}  # fmt: skip


def _cut_differences(trace: Trace, out: Output, twin: Trace, again: Output) -> list[str]:
    """Where two cuts' answers differ beyond the numbering: every row table item for item, and
    progress wherever both cuts end a batch after the same items."""
    one, other = _what_a_cut_keeps(trace, out), _what_a_cut_keeps(twin, again)
    return kept_differences(one, other, ("events", "side_outputs", "windows", "errors"), ("progress",))


@pytest.mark.clauses("OXL-R19", "OXL-R14", "OXL-R17", "OXL-R18", "TR-5")
@given(TRACES, st.data())
def test_batch_cuts_change_nothing_but_the_numbering(trace: Trace, data: st.DataObject) -> None:
    """The same items cut into other batches (empty ones and moved restarts included): the same
    events, side outputs, windows and errors item for item, and the same progress wherever both
    cuts end a batch."""
    twin = draw_cuts(data, trace)
    assert not _cut_differences(trace, run_trace(trace), twin, run_trace(twin))


RECUT_TRACES = 8


def recut_pairs() -> list[tuple[Trace, Trace]]:
    """The differential mix's traces (large batches, refused configurations) and each one's re-cut
    twin (properties.batch_cuts)."""
    return batch_cuts.recut_pairs(DIFFERENTIAL[0][0], RECUT_TRACES, salt=11)


def recut_traces() -> list[Trace]:
    return [t for pair in recut_pairs() for t in pair]


# the traces and their twins join the session's pre-run
@pytest.mark.prerun_traces.with_args(recut_traces)  # with_args: the one argument is a function
@pytest.mark.clauses("OXL-R19", "OXL-R14", "OXL-R17", "OXL-R18", "TR-5")
def test_batch_cuts_change_nothing_but_the_numbering_on_the_engine(engine_under_test: Any) -> None:
    """The engine's answer to a trace and to its re-cut twin: the same events, side outputs,
    windows and errors item for item, and the same progress wherever both cuts end a batch."""
    pairs = recut_pairs()
    assert len(pairs) == RECUT_TRACES
    batch_cuts.check_twins_on_the_engine(engine_under_test, pairs, _cut_differences)


def _positions_numbered_per_batch(trace: Trace, out: Output) -> Output:
    """A router whose positions start again at 0 in every drain (the next position not stored)."""
    first: dict[int, int] = {}
    for r in out["side_outputs"]:
        first[r[0]] = min(first.get(r[0], r[2]), r[2])
    return {**out, "side_outputs": [(*r[:2], r[2] - first[r[0]], *r[3:]) for r in out["side_outputs"]]}


def _verdicts_counted_per_batch(trace: Trace, out: Output) -> Output:
    """A stream whose progress counts the verdicts of its batch only (counters not carried over)."""
    progress, before = [], (0,) * 5
    for r in sorted(out["progress"]):
        progress.append((r[0], *(n - m for n, m in zip(r[1:6], before, strict=True)), r[6]))
        before = r[1:6]
    return {**out, "progress": progress}


def _first_events_of_batches_lost(trace: Trace, out: Output) -> Output:
    """A stream that loses the event a batch starts with (its source's state read after it)."""
    return {**out, "events": [r for r in out["events"] if r[1] != 0]}


def _judged_against_the_batch_start(trace: Trace, out: Output) -> Output:
    """A stream that reports each event against its source's watermark as it stood when the batch
    began, as one that folds a batch's watermark items only at its end would."""
    refused = {(r[0], r[1]) for r in out["errors"]}
    marks: dict[Any, int] = {}
    start_of: list[dict[Any, int]] = []
    for b, batch in enumerate(trace.batches):
        start_of.append(dict(marks))
        for s, item in enumerate(batch):
            if item.kind == "watermark" and (b, s) not in refused and item.time is not None:
                marks[item.source] = max(item.time, marks.get(item.source, item.time))
    return {**out, "events": [(*r[:4], start_of[r[0]].get(r[2]), *r[5:]) for r in out["events"]]}


def _convicts(planted: Any, trace: Trace, twin: Trace) -> bool:
    outputs = [_run(t) for t in (trace, twin)]
    if outputs[0] is None or outputs[1] is None:
        return False
    return bool(_cut_differences(trace, planted(trace, outputs[0]), twin, planted(twin, outputs[1])))


@pytest.mark.clauses("OXL-R19", "OXL-R9", "OXL-R17", "TR-5")
@pytest.mark.parametrize("planted", [_verdicts_counted_per_batch, _first_events_of_batches_lost])
def test_the_batch_cut_comparison_convicts_a_stream_that_depends_on_its_batches(planted: Any) -> None:
    """The comparison above drops the numbering and reads progress only where both cuts end a
    batch; it still catches a stream whose answer depends on where its batches end."""
    caught = [trace.name for trace, twin in recut_pairs() if _convicts(planted, trace, twin)]
    assert caught, f"{planted.__name__}: no re-cut twin shows it"


@pytest.mark.clauses("OXL-R19", "OXL-R3", "OXL-R14", "TR-5")
@pytest.mark.parametrize("planted", [_positions_numbered_per_batch, _judged_against_the_batch_start])
def test_the_batch_cut_comparison_convicts_a_stream_that_depends_on_its_batches_by_hand(planted: Any) -> None:
    """Few generated traces route late events in two batches, and some seeds draw no event whose
    batch starts at another watermark in the twin: the restart scenario's items and the cut of
    its twin scenario (after the first watermark) show both."""

    def event(t: int) -> Item:
        return Item("event", source=1, event_time=t)

    def mark(t: int) -> Item:
        return Item("watermark", source=1, time=t)

    config = {"policy": "SideOutput", "channel": "late", "window_size": 1000, "allowed_lateness": 100}
    items = (
        Item("clock", time=700), event(500), mark(1050), event(10), mark(2000), event(1999), event(20),
        Item("clock", time=600), mark(1999), event(500), mark(3100),
    )  # fmt: skip
    trace = Trace("late_data", config, (items[:7], items[7:]), frozenset({0}), "restart scenario")
    twin = batch_cuts.recut(trace, [3], frozenset({0}))
    assert not _convicts(lambda _, out: out, trace, twin)  # the honest stream passes
    assert _convicts(planted, trace, twin)


@pytest.mark.clauses("OXL-R15")
@given(INVALID_CONFIGS)
def test_invalid_configurations_are_refused(config: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfig):
        run_trace(Trace("late_data", config, ((),)))


@pytest.mark.clauses("OXL-R13")
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers()), max_size=30), st.sampled_from("abcd"))
def test_the_router_drains_a_channel_in_routing_order_and_leaves_the_others(
    routed: list[tuple[str, int]], drained: str
) -> None:
    router = SideOutputRouter()
    for channel, event in routed:
        router.route(channel, event)
    assert router.drain(drained) == [e for c, e in routed if c == drained]
    assert router.drain(drained) == []
    for channel in "abc":
        if channel != drained:
            assert router.pending(channel) == sum(1 for c, _ in routed if c == channel)


# ---- differential ---------------------------------------------------------------------------


@pytest.mark.clauses(
    "OXL-R1", "OXL-R2", "OXL-R3", "OXL-R4", "OXL-R5", "OXL-R6", "OXL-R7", "OXL-R8", "OXL-R9", "OXL-R10",
    "OXL-R11", "OXL-R12", "OXL-R14", "OXL-R15", "OXL-R16", "OXL-R17", "OXL-R18",
)  # fmt: skip
def test_engine_agrees_with_the_oracle(engine_under_test: Any) -> None:
    """All generated traces in ONE engine.run call; a difference is shrunk and printed as Gherkin."""
    check_generated(engine_under_test, *DIFFERENTIAL)


# ---- the Spark operator's state layout (OXL-R18: versioned state) -------------------


@pytest.mark.clauses("OXL-R18")
def test_spark_state_layout_is_versioned() -> None:
    """A checkpoint of another layout version, or of another bucket count, is refused with both
    values named, never misread; a source's entry keeps its watermark and open windows."""
    import numpy as np

    from spark_impl.late_data import LAYOUT_VERSION, BucketState, StreamState, pack_source, unpack_sources

    bucket = BucketState(3, clock=5).to_tuple()
    stream = StreamState(3, np.arange(5, dtype=np.int64), open_windows=2, position=7).to_tuple()
    assert bucket[0] == stream[0] == LAYOUT_VERSION
    check_state_layouts(BucketState, bucket, StreamState, stream, buckets=3)
    windows = np.array([[0, 1000, 3], [I64_MAX - 7, I64_MAX, 1]], np.int64)
    loaded = unpack_sources(
        [(1, False), (0, True), (2, False)],
        [pack_source(I64_MAX, windows), pack_source(None, windows[:1]), None],
        9,
    )
    assert loaded.clock == 9
    assert loaded.sources.tolist() == [[1, 0, I64_MAX]]
    assert loaded.windows.tolist() == [
        [1, 0, 0, 1000, 3],
        [1, 0, I64_MAX - 7, I64_MAX, 1],
        [0, 1, 0, 1000, 3],
    ]


# ---- the Spark operator on its own: sources spread over buckets, a fixed bucket count -------


def _spread_trace() -> Trace:
    """Twelve sources and the unnamed one; windows close per source, late events of even sources
    go to the side channel while odd sources keep their window open."""
    from harness.traces import Item

    sources: list[int | None] = [*range(12), None]
    first = [Item("clock", time=10)]
    for s in sources:
        first += [Item("event", source=s, event_time=50 + (s or 0)), Item("watermark", source=s, time=1000)]
        first += [Item("event", source=s, event_time=500)]
    second = [Item("clock", time=5)]
    for s in sources:
        if (s or 0) % 2 == 0:
            second.append(Item("watermark", source=s, time=1600))
        second += [Item("event", source=s, event_time=200), Item("event", source=s, event_time=1700)]
    third = [
        i
        for s in sources
        for i in (Item("event", source=s, event_time=300), Item("watermark", source=s, time=2600))
    ]
    fourth = [Item("event", source=0, event_time=3000)]
    config = {"policy": "SideOutput", "channel": "late", "window_size": 1000, "allowed_lateness": 500}
    return Trace("late_data", config, (tuple(first), tuple(second), tuple(third), tuple(fourth)))


@pytest.mark.clauses("OXL-R2", "OXL-R12", "OXL-R14", "OXL-R17", "OXL-R18")
def test_spark_spreads_sources_over_buckets_and_refuses_another_bucket_count(tmp_path: Any) -> None:
    """``late_data`` on the trace source with 4 buckets and no ``batch_col`` (the batch is the
    micro-batch's start instant): its tables equal the oracle's, side-output positions running
    on across buckets and batches; a restart on its checkpoint with 5 buckets is refused."""
    import pyarrow as pa
    from pyspark.errors import StreamingQueryException

    from spark_impl.late_data import late_data
    from spark_impl.session import get_spark
    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    trace = _spread_trace()
    rows: dict[str, list[Any]] = {c: [] for c in ("batch", "seq", "kind", "source", "event_time", "time")}
    for b, batch in enumerate(trace.batches):
        for seq, item in enumerate(batch):
            for c, v in zip(rows, (b, seq, item.kind, item.source, item.event_time, item.time), strict=True):
                rows[c].append(v)
    path = str(tmp_path / "rows.parquet")
    write_trace_file(path, pa.table(rows, schema=pa.schema([(c, pa.string() if c == "kind" else pa.int64())
                                                              for c in rows])))  # fmt: skip
    spark = get_spark()
    sink, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run(end_batch: int, buckets: int) -> None:
        df = spark.readStream.format(SOURCE_NAME).option("path", path).option("end_batch", end_batch).load()
        ld = late_data(df, event_time_col="event_time", source_col="source", kind_col="kind", seq_col="seq",
                       time_col="time", policy="SideOutput", channel="late", window_size_ms=1000,
                       allowed_lateness_ms=500, buckets=buckets)  # fmt: skip
        query = (
            ld.output.drop("stream_id").writeStream.format("parquet").option("path", sink)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination()

    run(2, 4)
    got = [r.asDict() for r in spark.read.parquet(sink).collect()]
    instants = sorted({r["batch"] for r in got})
    assert len(instants) == 3  # one instant per micro-batch, the same in all its rows
    expected = run_trace(replace(trace, batches=trace.batches[:3]))
    for table, columns in TABLES["late_data"].items():
        rows_of = [
            tuple(instants.index(r[c]) if c == "batch" else r[c] for c in columns)
            for r in got
            if r["output"] == table
        ]
        assert sorted(rows_of, key=repr) == sorted(expected[table], key=repr), table
    assert len(expected["side_outputs"]) == 14 and len(expected["windows"]) == 26  # what the trace is for

    with pytest.raises(StreamingQueryException, match="holds buckets 4; this release reads buckets 5 only"):
        run(3, 5)
