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
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402 - bench/measure.py, the shared timing helpers


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


def bench(spark: Any, events: int, keys: int, batches: int, partitions: int, repeats: int, work: str) -> None:
    from pyspark.sql import functions as F

    from spark_impl.keyed_watermarks import keyed_watermarks

    path = os.path.join(work, f"events-{events}-{keys}.parquet")
    make_events(path, events, keys, batches, seed=keys)

    def ckpt(name: str, attempt: int) -> str:
        return os.path.join(work, f"ckpt-{name}-{keys}-{attempt}")

    def start_plain(attempt: int) -> measure.Run:
        plain = measure.trace_stream(spark, path, partitions).groupBy("key")
        plain = plain.agg(F.max("event_time").alias("max_et"), F.count("*").alias("n"))
        return measure.run_query(plain, "update", ckpt("plain", attempt))

    def start_keyed(attempt: int) -> measure.Run:
        kw = keyed_watermarks(
            measure.trace_stream(spark, path, partitions), key_col="key", event_time_col="event_time",
            seq_col="seq", batch_col="batch",
        )  # fmt: skip
        return measure.run_query(kw.output, "append", ckpt("kw", attempt))

    # Alternate the two operators so that both see the same machine state; report medians.
    runs = measure.alternate({"plain": start_plain, "keyed": start_keyed}, repeats)
    ckpt_plain, ckpt_kw = ckpt("plain", repeats - 1), ckpt("kw", repeats - 1)

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

    title = f"{events:,} events, {keys:,} keys, {batches} micro-batches, {partitions} input partitions"
    measure.print_summary(title, runs, "plain", counts=True)
    state_kw = measure.dir_bytes(os.path.join(ckpt_kw, "state"))
    state_plain = measure.dir_bytes(os.path.join(ckpt_plain, "state"))
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

    with measure.spark_workdir("kw-bench-") as (spark, work):
        for keys in args.keys:
            bench(spark, args.events, keys, args.batches, args.partitions, args.repeats, work)


if __name__ == "__main__":
    main()
