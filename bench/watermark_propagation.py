"""Benchmark: watermark generation + propagation on Spark against a plain Spark aggregation.

The same events (default 200,000 in 10 micro-batches, four sources with
bounded disorder) are read from the ``trace`` source and written to the
``noop`` sink with Trigger.AvailableNow by:

- propagation: ``watermark_propagation(df, nodes, edges, node_col="source",
  event_time_col="event_time", seq_col="seq", batch_col="batch",
  advance_threshold=T, max_out_of_order_ms=1000)`` over an 8-node graph
  (four sources, two joins, a map and a sink), one stream (one group); run
  for each threshold T (default 1 and 100: every event emits, or one in 100);
- plain: ``groupBy("source").agg(max("event_time"), count("*"))``, update mode;
- and the oracle (reference/watermark_propagation.py, pure Python) on the
  first ``--oracle-events`` events.

The Spark queries run alternately (``--repeats``, default 3); printed: median
events/s (whole run, and without the first micro-batch, which carries the
start-up cost) and the median ratio of paired runs. A benchmark reports
figures; it asserts nothing.

    python bench/watermark_propagation.py
    python bench/watermark_propagation.py --events 50000 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402 - bench/measure.py, the shared timing helpers

SOURCES = ["s0", "s1", "s2", "s3"]
NODES = [*SOURCES, "join_a", "join_b", "map", "sink"]
EDGES = [
    ["s0", "join_a"], ["s1", "join_a"], ["s2", "join_b"], ["s3", "join_b"],
    ["join_a", "map"], ["map", "sink"], ["join_b", "sink"],
]  # fmt: skip


def make_events(events: int, batches: int, seed: int) -> Any:
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    per = events // batches
    n = per * batches
    # event time grows with arrival, with up to 2 s of disorder
    event_time = 1_700_000_000_000 + np.arange(n, dtype=np.int64) * 10 - rng.integers(0, 2_000, n)
    return pa.table({
        "batch": pa.array(np.repeat(np.arange(batches, dtype=np.int64), per)),
        "seq": pa.array(np.tile(np.arange(per, dtype=np.int64), batches)),
        "source": pa.array(np.asarray(SOURCES, dtype=object)[rng.integers(0, len(SOURCES), n)], pa.string()),
        "event_time": pa.array(event_time),
    })  # fmt: skip


def oracle_rate(table: Any, events: int, batches: int, threshold: int) -> float:
    from harness.traces import Item
    from reference.watermark_propagation import WatermarkPropagationStream

    t = table.slice(0, events).to_pydict()
    per_batch: list[list[Item]] = [[] for _ in range(batches)]
    for b, s, et in zip(t["batch"], t["source"], t["event_time"], strict=True):
        per_batch[b].append(Item("event", key=s, event_time=et))
    stream = WatermarkPropagationStream(
        {"nodes": NODES, "edges": EDGES, "advance_threshold": threshold, "max_out_of_order_ms": 1000}
    )
    started = time.perf_counter()
    for b, batch in enumerate(per_batch):
        stream.run_batch(b, batch)
    return events / (time.perf_counter() - started)


def bench(spark: Any, args: argparse.Namespace, work: str) -> None:
    from pyspark.sql import functions as F

    from spark_impl.trace_source import write_trace_file
    from spark_impl.watermark_propagation import watermark_propagation

    table = make_events(args.events, args.batches, seed=6)
    path = os.path.join(work, "events.parquet")
    write_trace_file(path, table)

    def start_plain(attempt: int) -> measure.Run:
        plain = measure.trace_stream(spark, path, 2).groupBy("source")
        plain = plain.agg(F.max("event_time").alias("m"), F.count("*").alias("n"))
        return measure.run_query(plain, "update", os.path.join(work, f"ckpt-plain-{attempt}"))

    def start_propagation(t: int) -> Callable[[int], measure.Run]:
        def start(attempt: int) -> measure.Run:
            wp = watermark_propagation(
                measure.trace_stream(spark, path, 2), nodes=NODES, edges=EDGES, node_col="source",
                event_time_col="event_time", seq_col="seq", batch_col="batch", advance_threshold=t,
                max_out_of_order_ms=1000,
            )  # fmt: skip
            return measure.run_query(wp.output, "append", os.path.join(work, f"ckpt-wp-{t}-{attempt}"))

        return start

    queries = {"plain": start_plain, **{f"propagation T={t}": start_propagation(t) for t in args.thresholds}}
    runs = measure.alternate(queries, args.repeats)  # alternate, so every query sees the same machine state
    title = (
        f"{args.events:,} events, {len(SOURCES)} sources, {len(NODES)} nodes, {args.batches} micro-batches"
    )
    measure.print_summary(title, runs, "plain")
    n = min(args.oracle_events, args.events)
    for t in args.thresholds:
        print(f"oracle T={t}: {oracle_rate(table, n, args.batches, t):,.0f} ev/s on {n:,} events")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--thresholds", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per query")
    parser.add_argument("--oracle-events", type=int, default=50_000)
    args = parser.parse_args()

    with measure.spark_workdir("wp-bench-") as (spark, work):
        bench(spark, args, work)


if __name__ == "__main__":
    main()
