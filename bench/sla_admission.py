"""Benchmark: SLA admission on Spark, beside the oracle and a plain Spark streaming aggregation.

For each SLA stream count (default 10 and 10,000) the same events (default
1,000,000 in 10 micro-batches) are judged three ways in one run of this script:

- spark: ``sla_admission(df, stream_col="stream", event_time_col="event_time",
  now_col="arrived", load_col="load", priority_col="priority", seq_col="seq",
  batch_col="batch", ...)`` on the ``trace`` source, its progress rows to a
  parquet sink (every decision is made and crosses both stages; only the
  progress rows are written, and their totals are checked against the
  oracle's);
- oracle: ``reference.sla_admission.SlaAdmissionStream`` fed batch by batch
  with the events as items (a clock item where the arrival time moves, a load
  item where the score changes, ``cpu`` = score / 10); only ``run_batch`` is
  timed, not building the items;
- plain: ``groupBy("stream").count()`` in update mode to the noop sink.

The events: arrival times spread evenly over ``--span-s`` seconds (1 ms apart
at the defaults), event times up to 700 ms behind their arrival (some beyond
the Gold lag budget of 500 ms), streams drawn uniformly, even streams Gold
and odd ones Silver with a 5 s jitter budget, priorities 0..3 or null, and a
load score per block of 1,000 events (0..1000, multiples of 10) with a
shedder at threshold 700 (policy Strict).

Printed per stream count: decisions per second of each (whole run on the
wall clock, and without the first micro-batch, whose cost is start-up), the
decision mix, and from Spark's event log the shuffle records each task of the
wide stateful stage read (min / median / max against the fair share) and what
the narrow stage read per batch. A benchmark reports figures; it asserts
nothing.

    python bench/sla_admission.py                 # 1M events, 10 and 10,000 streams
    python bench/sla_admission.py --quick         # 100k events in 5 batches
    python bench/sla_admission.py --streams 10 --events 200000
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # the project, for spark_impl when not installed
import measure  # noqa: E402 - bench/measure.py, the shared timing helpers
import scaleout  # noqa: E402 - bench/scaleout.py: a session with an event log, and its readers

T0 = 1_700_000_000_000  # arrival time of the first event, ms
SHEDDER = {"threshold": 700, "seed": 42}
DECISION_COLUMNS = {"admit": "admitted", "reject": "rejected", "shed": "shed", "throttle": "throttled"}


def name_of(i: int) -> str:
    return f"s{i:05d}"


def config_for(streams: int) -> dict[str, Any]:
    """Even streams Gold; odd ones Silver with a 5 s jitter budget (OXS-R1, R7)."""
    agreements = {
        name_of(i): {"class": "Gold"} if i % 2 == 0 else {"class": "Silver", "jitter_budget_ms": 5_000}
        for i in range(streams)
    }
    return {"streams": agreements, "policy": "Strict", "shedder": SHEDDER}


def make_events(events: int, batches: int, streams: int, span_s: int, seed: int) -> dict[str, Any]:
    """The benchmark's events as numpy columns, in arrival order (priority -1: null)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    position = np.arange(events, dtype=np.int64)
    arrived = T0 + position * span_s * 1000 // events
    batch = np.minimum(position * batches // events, batches - 1)
    first_of_batch = np.searchsorted(batch, np.arange(batches))
    block_scores = rng.integers(0, 101, events // 1000 + 1) * 10
    priority = rng.integers(0, 5, events)  # 4 stands for null: about a fifth carry no priority
    names = np.array([name_of(i) for i in range(streams)], dtype=object)
    return {
        "batch": batch,
        "seq": position - first_of_batch[batch],
        "stream": names[rng.integers(0, streams, events)],
        "event_time": arrived - rng.integers(0, 700, events),
        "arrived": arrived,
        "load": block_scores[position // 1000],
        "priority": np.where(priority == 4, -1, priority),
    }


def write_events(path: str, ev: dict[str, Any]) -> None:
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    columns = {c: pa.array(v, type=pa.string() if c == "stream" else pa.int64()) for c, v in ev.items()}
    columns["priority"] = pa.array(ev["priority"], mask=ev["priority"] < 0, type=pa.int64())
    write_trace_file(path, pa.table(columns))


def run_oracle(ev: dict[str, Any], batches: int, config: dict[str, Any]) -> tuple[float, dict[str, int]]:
    """Seconds spent in the oracle's run_batch over the same events, and its decision totals."""
    from harness.traces import Item
    from reference.sla_admission import SlaAdmissionStream

    stream = SlaAdmissionStream(config)
    seconds = 0.0
    clock = load = None
    cols = [ev[c].tolist() for c in ("batch", "stream", "event_time", "arrived", "load", "priority")]
    rows = list(zip(*cols, strict=True))
    start = 0
    for b in range(batches):
        items = []
        while start < len(rows) and rows[start][0] == b:
            _, name, et, arrived, score, priority = rows[start]
            if arrived != clock:
                items.append(Item("clock", time=arrived))
                clock = arrived
            if score != load:
                items.append(Item("load", metrics={"cpu": score // 10}))
                load = score
            items.append(Item("event", key=name, event_time=et, priority=None if priority < 0 else priority))
            start += 1
        began = time.perf_counter()
        stream.run_batch(b, items)
        seconds += time.perf_counter() - began
    return seconds, dict(collections.Counter(d[5] for d in stream.out["decisions"]))


def spark_progress(spark: Any, path: str, config: dict[str, Any], partitions: int) -> Any:
    """The operator over the events; only its progress rows go on to the sink."""
    from pyspark.sql import functions as F

    from spark_impl.sla_admission import sla_admission

    sla = sla_admission(
        measure.trace_stream(spark, path, partitions), stream_col="stream", event_time_col="event_time",
        now_col="arrived", load_col="load", priority_col="priority", seq_col="seq", batch_col="batch",
        **config,
    )  # fmt: skip
    return sla.output.filter(F.col("output") == "progress")


def bench_one(spark: Any, work: str, args: argparse.Namespace, streams: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    n = args.events
    path = os.path.join(work, f"events-{streams}.parquet")
    ev = make_events(n, args.batches, streams, args.span_s, seed=streams)
    write_events(path, ev)
    config = config_for(streams)
    print(f"\n== {streams:,} SLA streams: {n:,} events in {args.batches} micro-batches ==", flush=True)

    ckpt = os.path.join(work, f"ckpt-spark-{streams}")
    ours = measure.run_query(
        spark_progress(spark, path, config, args.input_partitions), "append", ckpt, "parquet"
    )
    plain_df = measure.trace_stream(spark, path, args.input_partitions).groupBy("stream").count()
    plain = measure.run_query(plain_df, "update", os.path.join(work, f"ckpt-plain-{streams}"))
    oracle_s, mix = run_oracle(ev, args.batches, config)

    last = spark.read.parquet(ckpt + "-out").orderBy(F.col("batch").desc()).first()
    totals = {d: int(last[c]) for d, c in DECISION_COLUMNS.items()}
    agree = all(totals[d] == mix.get(d, 0) for d in totals)
    print(
        f"spark : wall {ours.wall:6.1f} s, {ours.rate():>9,.0f} decisions/s (wall), "
        f"{ours.warm_rate():>9,.0f} decisions/s (batches 2.., trigger time)"
    )
    print(f"oracle: run_batch {oracle_s:6.1f} s, {n / oracle_s:>9,.0f} decisions/s")
    print(
        f"plain : wall {plain.wall:6.1f} s, {plain.rate():>9,.0f} events/s (wall), "
        f"{plain.warm_rate():>9,.0f} events/s (batches 2.., trigger time)"
    )
    print(
        f"spark / plain (batches 2..): {ours.warm_rate() / plain.warm_rate():.2f}x; "
        f"spark (batches 2..) / oracle: {ours.warm_rate() * oracle_s / n:.2f}x"
    )
    shares = ", ".join(f"{d}={mix.get(d, 0):,}" for d in DECISION_COLUMNS)
    verdict = "agree" if agree else f"DIFFER: {totals}"
    print(f"decisions (oracle): {shares}; spark's progress totals {verdict}", flush=True)
    return {"streams": streams}


def print_shapes(log_dir: str, results: list[dict[str, Any]], events_per_batch: int) -> None:
    """The stateful stages of every query, from the event log; the queries ran in the order
    spark, plain per stream count, so the order of their first stages says which is which."""
    found = scaleout.stateful_stages(scaleout.event_log_file(log_dir))
    by_start = sorted(found, key=lambda q: min(s["stage"] for stages in found[q].values() for s in stages))
    pairs = zip(by_start[::2], by_start[1::2], strict=True)
    for r, (ours_id, plain_id) in zip(results, pairs, strict=True):
        print(f"\n== shuffle records per task, {r['streams']:,} SLA streams (Spark's event log) ==")
        for engine, qid in (("spark", ours_id), ("plain", plain_id)):
            shapes = scaleout.stage_shapes(found[qid])
            for k in range(len(shapes)):
                scaleout.print_stage(engine, k, shapes, events_per_batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--streams", type=int, nargs="+", default=[10, 10_000], help="SLA stream counts")
    parser.add_argument("--span-s", type=int, default=1_000, help="seconds of arrival time the events cover")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--input-partitions", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="100,000 events in 5 micro-batches")
    args = parser.parse_args()
    if args.quick:
        args.events, args.batches = 100_000, 5
    work = tempfile.mkdtemp(prefix="sla-bench-")
    log_dir = os.path.join(work, "eventlog")
    os.makedirs(log_dir)
    try:
        spark = scaleout.start_session(args.master, args.shuffle_partitions, log_dir)
        print(
            f"spark {spark.version}, {args.master}, {args.shuffle_partitions} shuffle partitions "
            f"({4 * args.shuffle_partitions} buckets), machine {measure.machine()}"
        )
        results = [bench_one(spark, work, args, s) for s in args.streams]
        spark.stop()  # closes the event log
        print_shapes(log_dir, results, args.events // args.batches)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
