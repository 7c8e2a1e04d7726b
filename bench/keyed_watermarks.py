"""Benchmark: the Spark keyed-watermark operator against a plain Spark streaming aggregation.

Both read the same events (default 1,000,000 in 10 micro-batches) from the
``trace`` source and write to the ``noop`` sink with Trigger.AvailableNow:

- keyed: ``keyed_watermarks(df, key_col="key", event_time_col="event_time",
  seq_col="seq", batch_col="batch")``, one stream spread over the key buckets;
- plain: ``groupBy("key").agg(max("event_time"), count("*"))``, update mode;
- with ``--max-keys``, also keyed with ``max_keys`` = the key count: no key is
  evicted, but the exact eviction path keeps the stream in one group (F065-R12).

Runs them alternately (``--repeats``, default 3) and prints the median
events/s of each (whole run, and without the first micro-batch, which carries
the start-up cost), the median ratio of paired runs, and state bytes per key
(the RocksDB ``state/`` folder of each checkpoint).
A benchmark reports figures; it asserts nothing.

    python bench/keyed_watermarks.py                      # 1M events, 1,000 and 100,000 keys
    python bench/keyed_watermarks.py --events 100000      # a quick run
    python bench/keyed_watermarks.py --events 600000 --batches 6 --keys 10000 100000 --max-keys
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


def bench(
    spark: Any, events: int, keys: int, batches: int, partitions: int, repeats: int, work: str,
    bounded: bool = False,
) -> None:  # fmt: skip
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

    def start_bounded(attempt: int) -> measure.Run:
        # max_keys = the key count: no eviction, but the exact path keeps the stream in one group.
        kw = keyed_watermarks(
            measure.trace_stream(spark, path, partitions), key_col="key", event_time_col="event_time",
            seq_col="seq", batch_col="batch", max_keys=keys,
        )  # fmt: skip
        return measure.run_query(kw.output, "append", ckpt("kw-max-keys", attempt))

    # Alternate the operators so that all see the same machine state; report medians.
    starts = {"plain": start_plain, "keyed": start_keyed}
    if bounded:
        starts["keyed max_keys"] = start_bounded
    runs = measure.alternate(starts, repeats)
    ckpt_plain, ckpt_kw = ckpt("plain", repeats - 1), ckpt("kw", repeats - 1)

    title = f"{events:,} events, {keys:,} keys, {batches} micro-batches, {partitions} input partitions"
    measure.print_summary(title, runs, "plain", counts=True)
    state_kw = measure.dir_bytes(os.path.join(ckpt_kw, "state"))
    state_plain = measure.dir_bytes(os.path.join(ckpt_plain, "state"))
    print(
        f"state bytes/key, checkpoint state/ dirs (all versions, incl. changelogs): keyed "
        f"{state_kw / keys:.1f}, plain {state_plain / keys:.1f}"
    )

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=2, help="input partitions per micro-batch")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per operator")
    parser.add_argument(
        "--max-keys", action="store_true", help="also run with max_keys = the key count (F065-R12)"
    )
    args = parser.parse_args()

    with measure.spark_workdir("kw-bench-") as (spark, work):
        for keys in args.keys:
            bench(spark, args.events, keys, args.batches, args.partitions, args.repeats, work, args.max_keys)


if __name__ == "__main__":
    main()
