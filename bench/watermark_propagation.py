"""Benchmark: watermark generation + propagation on Spark against a plain Spark aggregation.

The same events (default 200,000 in 10 micro-batches, ``--sources`` sources
(default 4) with bounded disorder) are read from the ``trace`` source and
written to the ``noop`` sink with Trigger.AvailableNow by:

- propagation: ``watermark_propagation(df, nodes, edges, node_col="source",
  event_time_col="event_time", seq_col="seq", batch_col="batch",
  advance_threshold=T, max_out_of_order_ms=1000, buckets=B)`` over a graph of
  the sources, a join per pair of sources, a map after the first join and a
  sink (8 nodes for 4 sources), one stream; the wide stage spreads the
  sources over ``B`` buckets (``--buckets``, default 4 per shuffle partition),
  the narrow stage gets the accepted updates only; run for each threshold T
  (default 1 and 100: every event emits, or one in 100);
- plain: ``groupBy("source").agg(max("event_time"), count("*"))``, update mode;
- and the oracle (reference/watermark_propagation.py, pure Python) on the
  first ``--oracle-events`` events.

``--narrow-memory`` first measures, without Spark, the narrow stage alone
(``propagate_batch``) on the accepted updates of ``--events`` events at T=1
in one batch: its time and its peak memory (tracemalloc), which stays at the
updates plus one block of ``BLOCK_CELLS`` numbers, not updates x graph size.

The Spark queries run alternately (``--repeats``, default 3); printed: median
events/s (whole run, and without the first micro-batch, which carries the
start-up cost) and the median ratio of paired runs. A benchmark reports
figures; it asserts nothing.

    python bench/watermark_propagation.py
    python bench/watermark_propagation.py --events 50000 --repeats 1
    python bench/watermark_propagation.py --sources 32 --events 100000 --narrow-memory --repeats 0
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


def graph(sources: int) -> tuple[list[str], list[str], list[list[str]]]:
    """Sources, a join per pair of sources, a map after the first join, one sink."""
    names = [f"s{i}" for i in range(sources)]
    joins = [f"join{i}" for i in range((sources + 1) // 2)]
    edges = [[s, joins[i // 2]] for i, s in enumerate(names)]
    edges += [[joins[0], "map"], ["map", "sink"], *([j, "sink"] for j in joins[1:])]
    return names, [*names, *joins, "map", "sink"], edges


def make_events(events: int, batches: int, seed: int, sources: list[str]) -> Any:
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
        "source": pa.array(np.asarray(sources, dtype=object)[rng.integers(0, len(sources), n)], pa.string()),
        "event_time": pa.array(event_time),
    })  # fmt: skip


def oracle_rate(table: Any, events: int, batches: int, threshold: int, nodes: Any, edges: Any) -> float:
    from harness.traces import Item
    from reference.watermark_propagation import WatermarkPropagationStream

    t = table.slice(0, events).to_pydict()
    per_batch: list[list[Item]] = [[] for _ in range(batches)]
    for b, s, et in zip(t["batch"], t["source"], t["event_time"], strict=True):
        per_batch[b].append(Item("event", key=s, event_time=et))
    stream = WatermarkPropagationStream(
        {"nodes": nodes, "edges": edges, "advance_threshold": threshold, "max_out_of_order_ms": 1000}
    )
    started = time.perf_counter()
    for b, batch in enumerate(per_batch):
        stream.run_batch(b, batch)
    return events / (time.perf_counter() - started)


def bench(spark: Any, args: argparse.Namespace, work: str) -> None:
    from pyspark.sql import functions as F

    from spark_impl.trace_source import write_trace_file
    from spark_impl.watermark_propagation import watermark_propagation

    sources, nodes, edges = graph(args.sources)
    table = make_events(args.events, args.batches, seed=6, sources=sources)
    path = os.path.join(work, "events.parquet")
    write_trace_file(path, table)

    def start_plain(attempt: int) -> measure.Run:
        plain = measure.trace_stream(spark, path, 2).groupBy("source")
        plain = plain.agg(F.max("event_time").alias("m"), F.count("*").alias("n"))
        return measure.run_query(plain, "update", os.path.join(work, f"ckpt-plain-{attempt}"))

    def start_propagation(t: int) -> Callable[[int], measure.Run]:
        def start(attempt: int) -> measure.Run:
            wp = watermark_propagation(
                measure.trace_stream(spark, path, 2), nodes=nodes, edges=edges, node_col="source",
                event_time_col="event_time", seq_col="seq", batch_col="batch", advance_threshold=t,
                max_out_of_order_ms=1000, buckets=args.buckets,
            )  # fmt: skip
            return measure.run_query(wp.output, "append", os.path.join(work, f"ckpt-wp-{t}-{attempt}"))

        return start

    if args.repeats == 0:
        return
    queries = {"plain": start_plain, **{f"propagation T={t}": start_propagation(t) for t in args.thresholds}}
    runs = measure.alternate(queries, args.repeats)  # alternate, so every query sees the same machine state
    title = (
        f"{args.events:,} events, {len(sources)} sources, {len(nodes)} nodes, {args.batches} micro-batches"
    )
    measure.print_summary(title, runs, "plain")
    n = min(args.oracle_events, args.events)
    for t in args.thresholds:
        rate = oracle_rate(table, n, args.batches, t, nodes, edges)
        print(f"oracle T={t}: {rate:,.0f} ev/s on {n:,} events")


def narrow_memory(events: int, sources_count: int) -> None:
    """The narrow stage alone on the accepted updates of ``events`` events (T=1, one batch)."""
    import tracemalloc

    from spark_impl import watermark_propagation as wp
    from spark_impl.common import OutputRows

    sources, nodes, edges = graph(sources_count)
    cfg = wp.validate_config({"nodes": nodes, "edges": edges, "max_out_of_order_ms": 1000})
    t = make_events(events, 1, seed=6, sources=sources).to_pandas()
    rows = pd_rows(t)
    wide = wp._WideOut("s")
    wp.process_bucket_batch(wp.BucketState(1, cfg.sources_digest), rows, cfg, 0, 0, True, wide)
    frame = wide.masked_frame("nulls")  # as the second stage gets it: plain int64 columns
    summaries = frame[frame["output"] == "summary"]
    updates = int((summaries["s_final"] == 0).sum())
    state = wp.StreamState(1, cfg.sources)
    tracemalloc.start()
    started = time.perf_counter()
    changes = 0
    out = OutputRows("s", wp.OUTPUT_COLUMNS, wp.STRING_COLS)
    for _ in wp.propagate_batch(state, summaries, cfg, 0, True, out):
        changes += sum(n for n, _ in out.pieces)
        out.pieces.clear()
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    dense = updates * (len(sources) + len(nodes)) * 8
    print(
        f"narrow stage: {events:,} events, {len(sources)} sources, {len(nodes)} nodes -> {updates:,} "
        f"accepted updates, {changes:,} output rows in {seconds:.2f} s; peak {peak / 2**20:.1f} MiB "
        f"(one dense updates x (sources + nodes) matrix: {dense / 2**20:.1f} MiB)"
    )


def pd_rows(t: Any) -> Any:
    """The wide stage's normalised columns for events of the benchmark table."""
    import numpy as np

    n = len(t)
    return t.assign(
        wp_seq=t["seq"].to_numpy(np.int64), wp_kind="event", wp_node=t["source"].to_numpy(object),
        wp_et=t["event_time"].to_numpy(np.int64), wp_et_null=np.zeros(n, bool), wp_time=np.zeros(n, np.int64),
        wp_time_null=np.ones(n, bool),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--thresholds", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per query")
    parser.add_argument("--oracle-events", type=int, default=50_000)
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--buckets", type=int, default=None, help="wide-stage groups per stream")
    parser.add_argument("--narrow-memory", action="store_true", help="measure the narrow stage first")
    args = parser.parse_args()
    if args.narrow_memory:
        narrow_memory(args.events, args.sources)
    if args.repeats == 0:
        return

    with measure.spark_workdir("wp-bench-") as (spark, work):
        bench(spark, args, work)


if __name__ == "__main__":
    main()
