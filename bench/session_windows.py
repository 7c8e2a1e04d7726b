"""Benchmark: the Spark session-window operator against Spark's native ``session_window``.

Both read the same events (default 1,000,000 in 10 micro-batches) from the
``trace`` source and write to the ``noop`` sink with Trigger.AvailableNow:

- ours: ``session_windows(df, key_col="key", event_time_col="event_time", gap_ms=GAP,
  bounded_delay_ms=DELAY, value_col="value", seq_col="seq", batch_col="batch",
  report_timers=False)``: one stream (one group) holding every key's sessions;
  the per-batch snapshot of pending timers is off (``--timers`` turns it on),
  since the native query reports closed sessions only;
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
import shutil
import statistics
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keyed_watermarks import run_query  # noqa: E402 - the sibling benchmark's query runner

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
    from spark_impl.trace_source import SOURCE_NAME

    path = os.path.join(work, f"events-{events}-{keys}.parquet")
    make_events(path, events, keys, batches, seed=keys)

    def source() -> Any:
        return (
            spark.readStream.format(SOURCE_NAME)
            .option("path", path)
            .option("partitions", str(partitions))
            .load()
        )

    runs: dict[str, list[dict[str, float]]] = {"native": [], "ours": []}
    for attempt in range(repeats):
        native = (
            source().withColumn("ts", F.timestamp_millis("event_time"))
            .withWatermark("ts", f"{DELAY_MS} milliseconds")
            .groupBy("key", F.session_window("ts", f"{GAP_MS} milliseconds"))
            .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
        )  # fmt: skip
        runs["native"].append(
            run_query(spark, native, "append", os.path.join(work, f"ckpt-n-{keys}-{attempt}"))
        )
        ours = session_windows(
            source(), key_col="key", event_time_col="event_time", gap_ms=GAP_MS, bounded_delay_ms=DELAY_MS,
            value_col="value", seq_col="seq", batch_col="batch", report_timers=timers,
        )  # fmt: skip
        runs["ours"].append(
            run_query(spark, ours.output, "append", os.path.join(work, f"ckpt-o-{keys}-{attempt}"))
        )

    def rate(r: dict[str, float]) -> float:
        return r["rows"] / r["wall"]

    def warm_rate(r: dict[str, float]) -> float:
        return r["warm_rows"] / r["warm_busy"] if r["warm_busy"] else float("nan")

    print(
        f"\n== {events:,} events, {keys:,} keys, {batches} micro-batches, {partitions} input partitions, "
        f"gap {GAP_MS} ms, delay {DELAY_MS} ms, timers table {'on' if timers else 'off'}, "
        f"median of {repeats} alternating runs =="
    )
    for name in ("native", "ours"):
        rs = runs[name]
        print(
            f"{name:6s}: {rs[0]['rows']:,.0f} rows in {rs[0]['batches']:.0f} batches, "
            f"wall {statistics.median(r['wall'] for r in rs):.1f} s, "
            f"{statistics.median(map(rate, rs)):,.0f} ev/s (wall), "
            f"{statistics.median(map(warm_rate, rs)):,.0f} ev/s (batches 2.., trigger time)"
        )
    ratio_wall = statistics.median(rate(o) / rate(n) for o, n in zip(runs["ours"], runs["native"]))
    ratio_warm = statistics.median(warm_rate(o) / warm_rate(n) for o, n in zip(runs["ours"], runs["native"]))
    print(f"ratio ours/native (median of paired runs): {ratio_wall:.2f}x (wall), {ratio_warm:.2f}x (warm)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=2, help="input partitions per micro-batch")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per operator")
    parser.add_argument("--timers", action="store_true", help="also report the pending timers per batch")
    args = parser.parse_args()

    from spark_impl.session import get_spark

    spark = get_spark()
    work = tempfile.mkdtemp(prefix="sw-bench-")
    try:
        print(f"spark {spark.version}, remote={os.environ.get('SPARK_REMOTE', '-')}")
        for keys in args.keys:
            bench(spark, args.events, keys, args.batches, args.partitions, args.repeats, work, args.timers)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
