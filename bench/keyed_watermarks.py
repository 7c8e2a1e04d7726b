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

With ``--state-bytes`` it measures memory instead (F065-R36): every key sends
one event (``--keys`` distinct keys, default 1M and 10M, in 10 micro-batches),
through the exact tracker and through the compact tracker at two sizes
(COMPACT_SIZES), and prints the live bytes of every state variable at the end
(keys and values as stored, read with Spark's state data source), per key, and
the compact tracker's bound from R36.

    python bench/keyed_watermarks.py                      # 1M events, 1,000 and 100,000 keys
    python bench/keyed_watermarks.py --state-bytes        # state of exact vs compact at 1M and 10M keys
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


def make_events(path: str, events: int, keys: int, batches: int, seed: int, distinct: bool = False) -> None:
    import numpy as np
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    rng = np.random.default_rng(seed)
    per = events // batches
    batch = np.repeat(np.arange(batches, dtype=np.int64), per)
    n = len(batch)
    seq = np.tile(np.arange(per, dtype=np.int64), batches)
    # distinct: each key once, in random order (events = keys); otherwise keys drawn uniformly.
    key_ids = rng.permutation(keys)[:n] if distinct else rng.integers(0, keys, n)
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


# (exact_key_count, sketch_error_rate, sketch_depth): a small and a large compact tracker.
COMPACT_SIZES = ((10_000, 0.01, 4), (100_000, 0.001, 4))
COMPACT_SHARDS = 8


def compact_bound_bytes(settings: dict[str, Any], key_bytes: int) -> int:
    """F065-R36: exact entries (key + five 8-byte integers), two sketches of 8-byte cells, 4096 registers and
    two integers per shard."""
    import math

    width = math.ceil(math.e / settings["sketch_error_rate"])
    per_shard = 2 * settings["sketch_depth"] * width * 8 + 4096 + 2 * 8
    return int(settings["exact_key_count"] * (key_bytes + 5 * 8) + settings["shards"] * per_shard)


def state_bytes(spark: Any, keys: int, batches: int, partitions: int, work: str, sizes: int) -> None:
    from spark_impl.keyed_watermarks import keyed_watermarks

    path = os.path.join(work, f"distinct-{keys}.parquet")
    make_events(path, keys, keys, batches, seed=keys, distinct=True)
    key_bytes = len(f"key-{keys - 1}")
    # sizes < 0: the exact tracker alone; fewer than all: those compact sizes alone; all: every tracker
    variants: list[tuple[str, dict[str, Any]]] = [("exact", {})] if sizes in (-1, len(COMPACT_SIZES)) else []
    for count, rate, depth in COMPACT_SIZES[: max(sizes, 0)]:
        settings = {"exact_key_count": count, "sketch_error_rate": rate, "sketch_depth": depth}
        settings["shards"] = COMPACT_SHARDS
        variants.append((f"compact {count:,} exact, error {rate}, depth {depth}", settings))
    print(f"\n{keys:,} distinct keys, one event each, {batches} micro-batches")
    print("| tracker | state bytes | bytes/key | R36 bound | events/s |")
    print("|---|---|---|---|---|")
    for name, settings in variants:
        ckpt = os.path.join(work, f"ckpt-state-{keys}-{len(name)}-{settings.get('exact_key_count', 0)}")
        kw = keyed_watermarks(
            measure.trace_stream(spark, path, partitions), key_col="key", event_time_col="event_time",
            seq_col="seq", batch_col="batch", **settings,
        )  # fmt: skip
        run = measure.run_query(kw.output, "append", ckpt)
        total = sum(measure.live_state_bytes(spark, ckpt).values())
        bound = f"{compact_bound_bytes(settings, key_bytes):,}" if settings else "-"
        print(f"| {name} | {total:,} | {total / keys:.1f} | {bound} | {run.rate():,.0f} |")


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
    parser.add_argument(
        "--state-bytes", action="store_true", help="state bytes of exact vs compact trackers (F065-R36)"
    )
    parser.add_argument(
        "--compact-sizes", type=int, default=len(COMPACT_SIZES),
        help="with --state-bytes: the first N compact sizes alone; -1: the exact tracker alone",
    )  # fmt: skip
    args = parser.parse_args()

    with measure.spark_workdir("kw-bench-") as (spark, work):
        if args.state_bytes:
            keys_list = args.keys if args.keys != parser.get_default("keys") else [1_000_000, 10_000_000]
            for keys in keys_list:
                state_bytes(spark, keys, args.batches, args.partitions, work, args.compact_sizes)
            return
        for keys in args.keys:
            bench(spark, args.events, keys, args.batches, args.partitions, args.repeats, work, args.max_keys)


if __name__ == "__main__":
    main()
