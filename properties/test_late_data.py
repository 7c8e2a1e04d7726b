"""Late data (oxirs): invariants of the oracle, and engine-vs-oracle differential tests.

Invariants run on the oracle's stream (reference/late_data.py ``run_trace``)
over generated traces, and on the SideOutputRouter's API. The differential
test feeds every engine chosen with ``--engine`` (except the reference) the
budget's generated traces in ONE ``run`` call and compares each output with
the oracle's; a difference is shrunk and printed as a scenario.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.outputs import TABLES, Row
from harness.traces import I64_MAX, InvalidConfig, Trace
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
