"""Benchmark: the window joins on Spark against Spark's own stream-stream join.

Both queries read the same rows from the ``trace`` source (default 1,000,000
events per side in 10 micro-batches, event times spread evenly over 1,000 s,
each up to 5 s behind its place in the arrival order, keys drawn uniformly)
and write to the ``noop`` sink with Trigger.AvailableNow, at 1,000 and at
100,000 keys, for each join (``--joins``): tumbling x tumbling (``tt``: panes
of 10 s), tumbling x sliding (``ts``: left panes of 10 s, right panes of 10 s
sliding by 5 s) and session x session (``ss``: gap 2 s):

- ours: ``window_join_rows(df, ..., seq_unique=True)`` (spark_impl/window_joins/)
  with its default buckets, its ``pairs`` table. Each batch starts with a
  watermark row equal to the watermark Spark drops rows by in that micro-batch
  (each input's greatest event time minus the 5 s delay, the smaller of the
  two, as Spark computed it two batches earlier: spec/window_joins.md OXJ-R22),
  so both queries drop the same rows; the last batch ends with a watermark row
  at i64 max, the end of the input, so that every session pair is emitted;
- native: the formulations ``properties/test_window_joins_native.py`` checks
  against Spark's rules (``withWatermark(ts, 5 s)`` on both inputs and an inner
  join: on the key and ``window()`` for tumbling x tumbling, on the key with a
  condition on the event times for tumbling x sliding, and for sessions each
  side's ``session_window`` sessions joined on the key and their overlap, then
  expanded into the pairs of their events), append mode.

The queries alternate (``--repeats``, default 3); for each the median events/s
(both sides' events) over the whole run and over batches 2.. (the first carries
the start-up cost), the median ratio of paired runs, and the pairs each query
wrote in its last run (the sink's output rows). The pair counts agree for the
tumbling joins (unless a sliding case of OXJ-R22 occurs). For sessions Spark
pairs every event of overlapping sessions too, and these rows have no late
event in either query (the watermark trails them by two batches), so the
sessions are the same (OXJ-R22 item 9); but Spark emits a session only once its
own watermark, the greatest event time minus 5 s, reaches the session's end
(item 10): the last sessions, which only the i64-max row closes, are never
emitted by Spark, and ours has their pairs more. With Spark's
event log on, the per-task shuffle records of each stateful stage of the last
run of each query. A benchmark reports figures; it asserts nothing.

    python bench/window_joins.py                                        # 1M events per side, 1k and 100k keys
    python bench/window_joins.py --events 20000 --keys 100 --repeats 1  # a quick run
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402 - bench/measure.py, the shared timing helpers
import scaleout  # noqa: E402 - bench/scaleout.py: the session with an event log, its reading

from harness.traces import I64_MAX  # noqa: E402

SPAN_MS = 1_000_000  # event times spread over 1,000 s
DISORDER_MS = 5_000  # an event is up to 5 s behind its place in the arrival order
DELAY_MS = 5_000  # Spark's withWatermark delay: the disorder
JOINS = {
    "tt": {"join": "tumbling_tumbling", "size_ms": 10_000},
    "ts": {
        "join": "tumbling_sliding",
        "left_size_ms": 10_000,
        "right_size_ms": 10_000,
        "right_slide_ms": 5_000,
    },
    "ss": {"join": "session_session", "gap_ms": 2_000},
}


def late_watermarks(batch: Any, side: Any, event_time: Any, batches: int) -> list[int]:
    """Per micro-batch, the watermark Spark drops rows by (OXJ-R22): each side's greatest event
    time so far minus the delay (0 before its first row), the smaller of the two, never
    decreasing, as it stood after the batch two before."""
    import numpy as np

    unseen = np.iinfo(np.int64).min
    per_side = []
    for s in ("left", "right"):
        highest = np.full(batches, unseen)
        mine = side == s
        np.maximum.at(highest, batch[mine], event_time[mine])
        highest = np.maximum.accumulate(highest)
        per_side.append(np.where(highest > unseen, highest, DELAY_MS) - DELAY_MS)  # no row yet: 0
    ended_with = np.maximum.accumulate(np.maximum(0, np.minimum(*per_side)))
    return [0, 0, *ended_with[: max(0, batches - 2)].tolist()][:batches]


def make_rows(path: str, events: int, batches: int, keys: int, seed: int) -> dict[str, int]:
    """``events`` per side in arrival order, ``batches`` micro-batches; each batch starts (seq 0)
    with its watermark row, and the last one ends with a watermark row at i64 max."""
    import numpy as np
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    rng = np.random.default_rng(seed)
    place = np.concatenate([np.arange(events) * SPAN_MS // events] * 2)
    side = np.repeat(np.array(["left", "right"], dtype=object), events)
    order = np.argsort(place, kind="stable")
    place, side = place[order], side[order]
    event_time = place + DISORDER_MS - rng.integers(0, DISORDER_MS + 1, 2 * events)  # none below 0
    per_batch = -(-2 * events // batches)
    position = np.arange(2 * events)
    batch, seq = position // per_batch, position % per_batch + 1
    key = np.char.add("k", rng.integers(0, keys, 2 * events).astype(str)).astype(object)
    # each batch's watermark first; the input's end last (closes every pane and session)
    marks = [*late_watermarks(batch, side, event_time, batches), I64_MAX]
    places = [*range(batches), batches - 1], [0] * batches + [int(seq[-1]) + 1]
    none = [None] * len(marks)
    columns = {
        "batch": [*places[0], *batch.tolist()],
        "seq": [*places[1], *seq.tolist()],
        "kind": ["watermark"] * len(marks) + ["event"] * (2 * events),
        "side": none + side.tolist(),
        "key": none + key.tolist(),
        "event_time": none + event_time.tolist(),
        "value": none + rng.integers(0, 1_000, 2 * events).tolist(),
        "time": marks + [None] * (2 * events),
    }
    text = ("kind", "side", "key")
    table = pa.table({c: pa.array(v, pa.string() if c in text else pa.int64()) for c, v in columns.items()})
    write_trace_file(path, table)
    return {"events_per_side": events, "keys": int(len(np.unique(key))), "last_batch_watermark_ms": marks[-2]}


def ours(df: Any, config: dict[str, Any]) -> Any:
    from spark_impl.window_joins import window_join_rows

    return window_join_rows(
        df, side_col="side", key_col="key", time_col="event_time", value_col="value", kind_col="kind",
        watermark_col="time", seq_col="seq", batch_col="batch", seq_unique=True, **config,
    ).pairs  # fmt: skip


def native(df: Any, config: dict[str, Any]) -> Any:
    from properties.test_window_joins_native import native_join

    return native_join(df, config, delay_ms=DELAY_MS)


def run(df: Any, checkpoint: str, events_in: dict[int, int], ids: list[str], pairs: list[int]) -> measure.Run:
    """One query to the noop sink, timed; events/s count the events of each micro-batch (the
    native query reads the source once per input, so its input rows count them twice)."""
    started = time.perf_counter()
    query = (
        df.writeStream.format("noop").outputMode("append").option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    wall = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    ids.append(str(query.id))
    progress = list(query.recentProgress)
    pairs.append(sum(max(0, p.sink.numOutputRows) for p in progress))
    busy = [p for p in progress if events_in.get(p.batchId, 0) > 0]
    rows = [float(events_in[p.batchId]) for p in busy]
    durations = [p.durationMs["triggerExecution"] / 1000 for p in busy]
    return measure.Run(wall, sum(rows), len(busy), sum(rows[1:]), sum(durations[1:]), 0, {})


def print_shapes(log: str, names: dict[str, str]) -> None:
    """Per query, per stateful stage: shuffle records per task summed over the batches."""
    found = scaleout.stateful_stages(log)
    for query, name in names.items():
        if query not in found:
            continue
        print(f"\n-- {name}: stateful stages, shuffle records read per task (summed over batches) --")
        for k, shape in enumerate(scaleout.stage_shapes(found[query])):
            summed = shape["records_summed"]
            print(
                f"stage {k} {'+'.join(shape['ops'])}: {shape['tasks_per_batch']} tasks x "
                f"{shape['batches']} batches, records min {summed['min']:,.0f} / median "
                f"{summed['median']:,.0f} / max {summed['max']:,.0f}, total {summed['total']:,.0f}, "
                f"busiest task {summed['max_over_fair']:.2f}x its fair share"
            )


def compare(
    spark: Any, args: argparse.Namespace, work: str, path: str, keys: int, join: str, names: dict[str, str]
) -> None:
    """Ours and native on one join, alternating; prints the rates and the pairs each wrote."""
    config = JOINS[join]
    per_batch = -(-2 * args.events // args.batches)
    events_in = {b: min(per_batch, 2 * args.events - b * per_batch) for b in range(args.batches)}
    ids: dict[str, list[str]] = {"ours": [], "native": []}
    pairs: dict[str, list[int]] = {"ours": [], "native": []}

    def start(name: str, build: Any) -> Any:
        def go(attempt: int) -> measure.Run:
            df = measure.trace_stream(spark, path, args.input_partitions)
            checkpoint = os.path.join(work, f"{name}-{join}-{keys}-{attempt}")
            return run(build(df, config), checkpoint, events_in, ids[name], pairs[name])

        return go

    runs = measure.alternate({"ours": start("ours", ours), "native": start("native", native)}, args.repeats)
    measure.print_summary(f"{config['join']}, {args.events:,} events per side, {keys:,} keys", runs, "native")
    print(f"pairs written (last run): ours {pairs['ours'][-1]:,}, native {pairs['native'][-1]:,}")
    names[ids["ours"][-1]] = f"ours, {join}, {keys:,} keys"
    names[ids["native"][-1]] = f"native, {join}, {keys:,} keys"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000, help="events per side")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--joins", nargs="+", choices=sorted(JOINS), default=list(JOINS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--input-partitions", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    log_dir = tempfile.mkdtemp(prefix="wj-eventlog-")
    spark = scaleout.start_session(args.master, args.shuffle_partitions, log_dir)
    print(f"spark {spark.version}, {args.master}, {args.shuffle_partitions} shuffle partitions")
    print(f"machine: {measure.machine()}")
    names: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="wj-bench-") as work:
        for keys in args.keys:
            path = os.path.join(work, f"rows-{keys}.parquet")
            print(f"\n{make_rows(path, args.events, args.batches, keys, args.seed)}")
            for join in args.joins:
                compare(spark, args, work, path, keys, join, names)
    spark.stop()
    print_shapes(scaleout.event_log_file(log_dir), names)


if __name__ == "__main__":
    main()
