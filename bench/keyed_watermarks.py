"""Benchmark: the Spark keyed-watermark operator against a plain Spark streaming aggregation.

Both read the same events (default 1,000,000 in 10 micro-batches) from the
``trace`` source and write to the ``noop`` sink with Trigger.AvailableNow:

- keyed: ``keyed_watermarks(df, key_col="key", event_time_col="event_time",
  seq_col="seq", batch_col="batch")``, one stream (one group) holding all keys;
- plain: ``groupBy("key").agg(max("event_time"), count("*"))``, update mode.

Runs the two alternately (``--repeats``, default 3) and prints the median
events/s of each (whole run, and without the first micro-batch, which carries
the start-up cost), the median ratio of paired runs, and state bytes per key (the
operator's state value, and the RocksDB ``state/`` folder of each checkpoint).
A benchmark reports figures; it asserts nothing.

    python bench/keyed_watermarks.py                      # 1M events, 1,000 and 100,000 keys
    python bench/keyed_watermarks.py --events 100000      # a quick run
    SPARK_REMOTE=local[2] python bench/keyed_watermarks.py --events 100000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Any


def make_events(path: str, events: int, keys: int, batches: int, seed: int) -> None:
    import numpy as np
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    rng = np.random.default_rng(seed)
    per = events // batches
    batch = np.repeat(np.arange(batches, dtype=np.int64), per)
    n = len(batch)
    seq = np.tile(np.arange(per, dtype=np.int64), batches)
    key_ids = rng.integers(0, keys, n)
    # event time grows with arrival, with up to 10 s of disorder
    event_time = 1_700_000_000_000 + np.arange(n, dtype=np.int64) * 10 - rng.integers(0, 10_000, n)
    names = np.char.add("key-", key_ids.astype(str)).astype(object)
    table = pa.table(
        {
            "batch": pa.array(batch),
            "seq": pa.array(seq),
            "key": pa.array(names, type=pa.string()),
            "event_time": pa.array(event_time),
        }
    )
    write_trace_file(path, table)


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def run_query(spark: Any, df: Any, mode: str, checkpoint: str) -> dict[str, float]:
    started = time.perf_counter()
    q = (
        df.writeStream.format("noop")
        .outputMode(mode)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    wall = time.perf_counter() - started
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    progress = [p for p in q.recentProgress if p.numInputRows > 0]  # properties work through Connect too
    durations = [p.durationMs["triggerExecution"] / 1000 for p in progress]
    rows = [p.numInputRows for p in progress]
    return {
        "wall": wall,
        "rows": float(sum(rows)),
        "batches": float(len(progress)),
        "busy": sum(durations),
        "warm_rows": float(sum(rows[1:])),
        "warm_busy": sum(durations[1:]),
    }


def bench(spark: Any, events: int, keys: int, batches: int, partitions: int, repeats: int, work: str) -> None:
    from pyspark.sql import functions as F

    from spark_impl.keyed_watermarks import keyed_watermarks
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

    # Alternate the two operators so that both see the same machine state; report medians.
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "keyed": []}
    for attempt in range(repeats):
        ckpt_plain = os.path.join(work, f"ckpt-plain-{keys}-{attempt}")
        plain = source().groupBy("key").agg(F.max("event_time").alias("max_et"), F.count("*").alias("n"))
        runs["plain"].append(run_query(spark, plain, "update", ckpt_plain))

        ckpt_kw = os.path.join(work, f"ckpt-kw-{keys}-{attempt}")
        kw = keyed_watermarks(
            source(), key_col="key", event_time_col="event_time", seq_col="seq", batch_col="batch"
        )
        runs["keyed"].append(run_query(spark, kw.output, "append", ckpt_kw))

    # The operator's state value as stored (read back with the statestore reader).
    try:
        value = (
            spark.read.format("statestore")
            .option("stateVarName", "keyed_watermarks")
            .load(ckpt_kw)
            .select(F.sum(F.length("value.keys") + F.length("value.windows")).alias("b"))
            .collect()[0]["b"]
        )
        blob = int(value or 0)
    except Exception as error:  # the reader is a convenience; the dir sizes below still count
        print(f"(statestore reader failed: {str(error).splitlines()[0]})")
        blob = 0

    def rate(r: dict[str, float]) -> float:
        return r["rows"] / r["wall"]

    def warm_rate(r: dict[str, float]) -> float:
        return r["warm_rows"] / r["warm_busy"] if r["warm_busy"] else float("nan")

    print(
        f"\n== {events:,} events, {keys:,} keys, {batches} micro-batches, {partitions} input partitions, "
        f"median of {repeats} alternating runs =="
    )
    for name in ("plain", "keyed"):
        rs = runs[name]
        print(
            f"{name:6s}: {rs[0]['rows']:,.0f} rows in {rs[0]['batches']:.0f} batches, "
            f"wall {statistics.median(r['wall'] for r in rs):.1f} s, "
            f"{statistics.median(map(rate, rs)):,.0f} ev/s (wall), "
            f"{statistics.median(map(warm_rate, rs)):,.0f} ev/s (batches 2.., trigger time)"
        )
    ratio_wall = statistics.median(rate(k) / rate(p) for k, p in zip(runs["keyed"], runs["plain"]))
    ratio_warm = statistics.median(warm_rate(k) / warm_rate(p) for k, p in zip(runs["keyed"], runs["plain"]))
    print(f"ratio keyed/plain (median of paired runs): {ratio_wall:.2f}x (wall), {ratio_warm:.2f}x (warm)")
    state_kw = dir_bytes(os.path.join(ckpt_kw, "state"))
    state_plain = dir_bytes(os.path.join(ckpt_plain, "state"))
    print(
        f"state bytes/key: keyed value blob {blob / keys:.1f} (zstd Arrow IPC, {blob:,} B); "
        f"checkpoint state/ dirs (all versions, incl. changelogs): keyed {state_kw / keys:.1f}, "
        f"plain {state_plain / keys:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=2, help="input partitions per micro-batch")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per operator")
    args = parser.parse_args()

    from spark_impl.session import get_spark

    spark = get_spark()
    work = tempfile.mkdtemp(prefix="kw-bench-")
    try:
        print(f"spark {spark.version}, remote={os.environ.get('SPARK_REMOTE', '-')}")
        for keys in args.keys:
            bench(spark, args.events, keys, args.batches, args.partitions, args.repeats, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
