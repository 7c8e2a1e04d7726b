"""Benchmark: the Spark session-window operator against Spark's native ``session_window``.

Both read the same events (default 1,000,000 in 10 micro-batches) from the
``trace`` source and write to the ``noop`` sink with Trigger.AvailableNow:

- ours: ``session_windows(df, key_col="key", event_time_col="event_time", gap_ms=GAP,
  bounded_delay_ms=DELAY, value_col="value", seq_col="seq", batch_col="batch",
  report_timers=False)``: one stream, its keys spread over the operator's
  buckets (its default: 4 per shuffle partition); the per-batch snapshot of
  pending timers is off (``--timers`` turns it on), since the native query
  reports closed sessions only;
- native: ``withWatermark("ts", DELAY).groupBy("key", session_window("ts", GAP))
  .agg(count("*"), sum("value"))``, append mode.

Event time grows with arrival (10 ms per event) with up to 10 s of disorder,
the watermark delay is 10 s (nothing is late for either) and the gap 30 s.
Runs the two alternately (``--repeats``, default 3) and prints the median
events/s of each (whole run, and without the first micro-batch, which carries
the start-up cost), the median ratio of paired runs and the sessions emitted.
A benchmark reports figures; it asserts nothing.

    python bench/session_windows.py                      # 1M events, 1,000 and 100,000 keys
    python bench/session_windows.py --events 100000      # a quick run
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402 - bench/measure.py, the shared timing helpers

GAP_MS = 30_000
DELAY_MS = 10_000


def make_events(path: str, events: int, keys: int, batches: int, seed: int) -> None:
    import numpy as np
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    rng = np.random.default_rng(seed)
    per = events // batches
    batch = np.repeat(np.arange(batches, dtype=np.int64), per)
    n = len(batch)
    seq = np.tile(np.arange(per, dtype=np.int64), batches)
    names = np.char.add("key-", rng.integers(0, keys, n).astype(str)).astype(object)
    event_time = 1_700_000_000_000 + np.arange(n, dtype=np.int64) * 10 - rng.integers(0, DELAY_MS, n)
    table = pa.table(
        {
            "batch": pa.array(batch),
            "seq": pa.array(seq),
            "key": pa.array(names, type=pa.string()),
            "event_time": pa.array(event_time),
            "value": pa.array(rng.integers(0, 100, n)),
        }
    )
    write_trace_file(path, table)


def bench(
    spark: Any, events: int, keys: int, batches: int, partitions: int, repeats: int, work: str, timers: bool
) -> None:
    from pyspark.sql import functions as F

    from spark_impl.session_windows import session_windows

    path = os.path.join(work, f"events-{events}-{keys}.parquet")
    make_events(path, events, keys, batches, seed=keys)

    def start_native(attempt: int) -> measure.Run:
        native = (
            measure.trace_stream(spark, path, partitions).withColumn("ts", F.timestamp_millis("event_time"))
            .withWatermark("ts", f"{DELAY_MS} milliseconds")
            .groupBy("key", F.session_window("ts", f"{GAP_MS} milliseconds"))
            .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
        )  # fmt: skip
        return measure.run_query(native, "append", os.path.join(work, f"ckpt-n-{keys}-{attempt}"))

    def start_ours(attempt: int) -> measure.Run:
        ours = session_windows(
            measure.trace_stream(spark, path, partitions), key_col="key", event_time_col="event_time",
            gap_ms=GAP_MS, bounded_delay_ms=DELAY_MS, value_col="value", seq_col="seq", batch_col="batch",
            report_timers=timers,
        )  # fmt: skip
        return measure.run_query(ours.output, "append", os.path.join(work, f"ckpt-o-{keys}-{attempt}"))

    runs = measure.alternate({"native": start_native, "ours": start_ours}, repeats)

    title = (
        f"{events:,} events, {keys:,} keys, {batches} micro-batches, {partitions} input partitions, "
        f"gap {GAP_MS} ms, delay {DELAY_MS} ms, timers table {'on' if timers else 'off'}"
    )
    measure.print_summary(title, runs, "native", counts=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=2, help="input partitions per micro-batch")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per operator")
    parser.add_argument("--timers", action="store_true", help="also report the pending timers per batch")
    args = parser.parse_args()

    with measure.spark_workdir("sw-bench-") as (spark, work):
        for keys in args.keys:
            bench(spark, args.events, keys, args.batches, args.partitions, args.repeats, work, args.timers)


if __name__ == "__main__":
    main()
