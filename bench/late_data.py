"""Benchmark: the Spark late-data routing against a plain Spark streaming aggregation.

Both read the same rows (default 1,000,000 events in 10 micro-batches, from
4 sources, with one watermark row per source every 1,000 events: the
source's maximum event time so far minus 2 s) from the ``trace`` source and
write to the ``noop`` sink with Trigger.AvailableNow:

- late: ``late_data(df, event_time_col="event_time", source_col="source",
  kind_col="kind", seq_col="seq", time_col="time", batch_col="batch",
  policy="SideOutput", channel="late", window_size_ms=2_000,
  allowed_lateness_ms=500)``: one stream (one group);
- plain: ``groupBy("source").agg(max("event_time"), count("*"))``, update mode.

Runs the two alternately (``--repeats``, default 3) and prints the median
events/s of each (whole run, and without the first micro-batch, which carries
the start-up cost), the median ratio of paired runs and the verdict mix. A
benchmark reports figures; it asserts nothing.

    python bench/late_data.py                    # 1M events
    python bench/late_data.py --events 200000   # a quick run
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402 - bench/measure.py, the shared timing helpers

SOURCES = 4
WATERMARK_EVERY = 1_000


def make_rows(path: str, events: int, batches: int, seed: int) -> None:
    """Events with up to 5 s of disorder, and watermark rows interleaved in arrival order."""
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
    wm_time = np.repeat(running[marks] - 2_000, SOURCES)
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


def bench(spark: Any, events: int, batches: int, partitions: int, repeats: int, work: str) -> None:
    from pyspark.sql import functions as F

    path = os.path.join(work, f"rows-{events}.parquet")
    make_rows(path, events, batches, seed=events)

    def start_plain(attempt: int) -> measure.Run:
        plain_events = measure.trace_stream(spark, path, partitions).filter(F.col("kind") == "event")
        plain = plain_events.groupBy("source").agg(F.max("event_time").alias("m"), F.count("*").alias("n"))
        return measure.run_query(plain, "update", os.path.join(work, f"ckpt-plain-{attempt}"))

    def start_late(attempt: int) -> measure.Run:
        ld = _route(measure.trace_stream(spark, path, partitions))
        return measure.run_query(ld.output, "append", os.path.join(work, f"ckpt-late-{attempt}"))

    runs = measure.alternate({"plain": start_plain, "late": start_late}, repeats)

    # Both queries read the same rows (events and watermark rows): events/s is rows/s times this share.
    event_share = events / (events + events // WATERMARK_EVERY * SOURCES)

    title = (
        f"{events:,} events + {events // WATERMARK_EVERY * SOURCES:,} watermark rows, {SOURCES} sources, "
        f"{batches} micro-batches, {partitions} input partitions"
    )
    measure.print_summary(title, runs, "plain", share=event_share, unit="events/s")
    mix = (
        spark.read.parquet(_verdict_sample(spark, path, work))
        .groupBy("verdict").count().orderBy("verdict").collect()
    )  # fmt: skip
    print("verdicts (one extra batch run):", ", ".join(f"{r['verdict']}={r['count']:,}" for r in mix))


def _route(df: Any) -> Any:
    """The late-data operator as benchmarked, over the rows of ``df``."""
    from spark_impl.late_data import late_data

    return late_data(
        df, event_time_col="event_time", source_col="source", kind_col="kind", seq_col="seq",
        time_col="time", batch_col="batch", policy="SideOutput", channel="late",
        window_size_ms=2_000, allowed_lateness_ms=500,
    )  # fmt: skip


def _verdict_sample(spark: Any, path: str, work: str) -> str:
    """Runs the operator once more into parquet to report the verdict mix (not timed)."""
    ld = _route(measure.trace_stream(spark, path))
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
    args = parser.parse_args()

    with measure.spark_workdir("ld-bench-") as (spark, work):
        bench(spark, args.events, args.batches, args.partitions, args.repeats, work)


if __name__ == "__main__":
    main()
