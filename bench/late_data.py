"""Benchmark: the Spark late-data routing against a plain Spark streaming aggregation.

All queries read the same rows (default 1,000,000 events in 10 micro-batches,
from 64 sources, with one watermark row per source every 1,000 events: the
source's maximum event time so far minus 2 s) from the ``trace`` source and
write to the ``noop`` sink with Trigger.AvailableNow:

- late: ``late_data(df, event_time_col="event_time", source_col="source",
  kind_col="kind", seq_col="seq", time_col="time", batch_col="batch",
  policy="SideOutput", channel="late", window_size_ms=2_000,
  allowed_lateness_ms=500)``: the sources spread over the wide stage's
  buckets (4 per shuffle partition); the side-output rows cross to the one
  narrow group of the stream, which numbers them (OXL-R14);
- drop: the same with ``policy="Drop"``: the same verdict work, but no row
  but the summaries reaches the narrow group, so late minus drop is the cost
  of the side-output positions;
- plain: ``groupBy("source").agg(max("event_time"), count("*"))``, update mode.

Runs the queries alternately (``--repeats``, default 3) and prints the median
events/s of each (whole run, and without the first micro-batch, which carries
the start-up cost), the median ratio of paired runs and the verdict mix. A
benchmark reports figures; it asserts nothing.

    python bench/late_data.py                    # 1M events
    python bench/late_data.py --events 200000   # a quick run
    python bench/late_data.py --lag-ms 0 --no-windows   # many side outputs: their path's cost
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402 - bench/measure.py, the shared timing helpers

SOURCES = 64
WATERMARK_EVERY = 1_000


def make_rows(path: str, events: int, batches: int, seed: int, lag_ms: int = 2_000) -> None:
    """Events with up to 5 s of disorder, and watermark rows interleaved in arrival order: the
    stream's maximum event time so far minus ``lag_ms`` (a smaller lag makes more events late)."""
    import numpy as np
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    rng = np.random.default_rng(seed)
    n = events
    source = rng.integers(0, SOURCES, n)
    event_time = 1_700_000_000_000 + np.arange(n, dtype=np.int64) * 10 - rng.integers(0, 5_000, n)
    running = np.maximum.accumulate(event_time)  # the stream's max so far: every source is close to it
    marks = np.arange(WATERMARK_EVERY - 1, n, WATERMARK_EVERY)
    kind = np.concatenate([np.full(n, "event", object), np.full(len(marks) * SOURCES, "watermark", object)])
    wm_source = np.tile(np.arange(SOURCES), len(marks))
    wm_time = np.repeat(running[marks] - lag_ms, SOURCES)
    order_key = np.concatenate([np.arange(n) * 2.0, np.repeat(marks * 2.0 + 1, SOURCES)])
    order = np.argsort(order_key, kind="stable")
    position = np.arange(len(order))
    batch = np.minimum(position * batches // len(order), batches - 1)
    first_of_batch = np.searchsorted(batch, np.arange(batches))
    table = pa.table(
        {
            "batch": pa.array(batch.astype(np.int64)),
            "seq": pa.array((position - first_of_batch[batch]).astype(np.int64)),
            "kind": pa.array(kind[order], type=pa.string()),
            "source": pa.array(np.concatenate([source, wm_source])[order].astype(np.int64)),
            "event_time": pa.array(
                np.concatenate([event_time, np.zeros(len(wm_time), np.int64)])[order],
                mask=(kind[order] != "event"),
            ),
            "time": pa.array(
                np.concatenate([np.zeros(n, np.int64), wm_time])[order], mask=(kind[order] != "watermark")
            ),
        }
    )
    write_trace_file(path, table)


def bench(
    spark: Any,
    events: int,
    batches: int,
    partitions: int,
    repeats: int,
    work: str,
    lag_ms: int,
    windows: bool,
) -> None:
    from pyspark.sql import functions as F

    path = os.path.join(work, f"rows-{events}.parquet")
    make_rows(path, events, batches, seed=events, lag_ms=lag_ms)
    window_ms = 2_000 if windows else None

    def start_plain(attempt: int) -> measure.Run:
        plain_events = measure.trace_stream(spark, path, partitions).filter(F.col("kind") == "event")
        plain = plain_events.groupBy("source").agg(F.max("event_time").alias("m"), F.count("*").alias("n"))
        return measure.run_query(plain, "update", os.path.join(work, f"ckpt-plain-{attempt}"))

    def start_late(attempt: int) -> measure.Run:
        ld = _route(measure.trace_stream(spark, path, partitions), window_ms=window_ms)
        return measure.run_query(ld.output, "append", os.path.join(work, f"ckpt-late-{attempt}"))

    def start_drop(attempt: int) -> measure.Run:
        ld = _route(measure.trace_stream(spark, path, partitions), policy="Drop", window_ms=window_ms)
        return measure.run_query(ld.output, "append", os.path.join(work, f"ckpt-drop-{attempt}"))

    runs = measure.alternate({"plain": start_plain, "late": start_late, "drop": start_drop}, repeats)

    # Both queries read the same rows (events and watermark rows): events/s is rows/s times this share.
    event_share = events / (events + events // WATERMARK_EVERY * SOURCES)

    title = (
        f"{events:,} events + {events // WATERMARK_EVERY * SOURCES:,} watermark rows, {SOURCES} sources, "
        f"{batches} micro-batches, {partitions} input partitions"
    )
    measure.print_summary(title, runs, "plain", share=event_share, unit="events/s")
    mix = (
        spark.read.parquet(_verdict_sample(spark, path, work, window_ms))
        .groupBy("verdict").count().orderBy("verdict").collect()
    )  # fmt: skip
    print("verdicts (one extra batch run):", ", ".join(f"{r['verdict']}={r['count']:,}" for r in mix))


def _route(df: Any, policy: str = "SideOutput", window_ms: int | None = 2_000) -> Any:
    """The late-data operator as benchmarked, over the rows of ``df``."""
    from spark_impl.late_data import late_data

    return late_data(
        df, event_time_col="event_time", source_col="source", kind_col="kind", seq_col="seq",
        time_col="time", batch_col="batch", policy=policy, channel="late" if policy == "SideOutput" else None,
        window_size_ms=window_ms, allowed_lateness_ms=None if window_ms is None else 500,
    )  # fmt: skip


def _verdict_sample(spark: Any, path: str, work: str, window_ms: int | None) -> str:
    """Runs the operator once more into parquet to report the verdict mix (not timed)."""
    ld = _route(measure.trace_stream(spark, path), window_ms=window_ms)
    out = os.path.join(work, "verdicts")
    q = (
        ld.events.writeStream.format("parquet").option("path", out)
        .option("checkpointLocation", os.path.join(work, "ckpt-verdicts")).trigger(availableNow=True).start()
    )  # fmt: skip
    q.awaitTermination()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=2, help="input partitions per micro-batch")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per operator")
    parser.add_argument("--sources", type=int, default=SOURCES, help="sources (units of the wide stage)")
    parser.add_argument(
        "--lag-ms", type=int, default=2_000, help="watermark lag behind the maximum event time"
    )
    parser.add_argument("--no-windows", action="store_true", help="every late event goes to the policy")
    args = parser.parse_args()
    globals()["SOURCES"] = args.sources  # make_rows reads the module's count

    with measure.spark_workdir("ld-bench-") as (spark, work):
        bench(
            spark,
            args.events,
            args.batches,
            args.partitions,
            args.repeats,
            work,
            args.lag_ms,
            not args.no_windows,
        )


if __name__ == "__main__":
    main()
