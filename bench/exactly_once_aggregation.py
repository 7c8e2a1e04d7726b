"""Benchmark: exactly-once aggregation on Spark against Spark's own de-duplication and aggregation.

Both queries read the same rows (default 1,000,000 messages in 10 micro-batches
over 256 channels, 64 producers of 4 partitions, one in ten a re-delivery of a
recent message of its channel) from the ``trace`` source and write to the
``noop`` sink with Trigger.AvailableNow, at 1,000 and at 100,000 keys:

- ours: ``exactly_once_aggregation(df, ..., aggregate="sum", seq_col="seq",
  batch_col="batch", seq_unique=True)`` with its default buckets (4 per
  shuffle partition), append mode: every message gets its verdict row, every
  key with a folded message its aggregate row per batch;
- native: ``withWatermark(time, "1 hour").dropDuplicatesWithinWatermark(
  [producer, partition, sequence]).groupBy(key).agg(sum(amount))``, update
  mode, the time being the sequence read as milliseconds (so nothing is
  behind the watermark) and the amount the JSON text cast to a double.

The queries alternate (``--repeats``, default 3); for each the median
messages/s over the whole run and over batches 2.. (the first carries the
start-up cost), and the median ratio of paired runs. With Spark's event log
on, the per-task shuffle records of each stateful stage of the last run of
each query (the share of the busiest task against a fair share: a stage
whose work does not spread shows here). A benchmark reports figures; it
asserts nothing.

    python bench/exactly_once_aggregation.py                     # 1M messages, 1k and 100k keys
    python bench/exactly_once_aggregation.py --events 100000 --repeats 1   # a quick run
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402 - bench/measure.py, the shared timing helpers
import scaleout  # noqa: E402 - bench/scaleout.py: the session with an event log, its reading

PRODUCERS, PARTITIONS = 64, 4
RECENT = 2_000  # a re-delivery repeats one of the last RECENT messages: inside a 1,024 window per channel


def make_rows(path: str, events: int, batches: int, keys: int, redeliver: float, seed: int) -> dict[str, int]:
    """``events`` rows: originals numbered per channel in order, re-deliveries (same id, key and
    amount) placed after the original they repeat; returns the counts written."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    rng = np.random.default_rng(seed)
    repeats = int(events * redeliver)
    originals = events - repeats
    producer = rng.integers(0, PRODUCERS, originals)
    partition = rng.integers(0, PARTITIONS, originals)
    sequence = pd.Series(np.zeros(originals)).groupby([producer, partition]).cumcount().to_numpy(np.int64)
    key = rng.integers(0, keys, originals)
    cents = rng.integers(-100_000, 100_000, originals)
    at = rng.integers(0, originals, repeats)
    source = np.maximum(0, at - rng.integers(0, RECENT, repeats))
    pick = np.concatenate([np.arange(originals), source])
    order = np.argsort(np.concatenate([np.arange(originals) * 2.0, at * 2.0 + 1]), kind="stable")
    pick = pick[order]
    per_batch = -(-events // batches)
    position = np.arange(events)
    amount = np.array([repr(x) for x in (cents[pick] / 100).tolist()], dtype=object)  # JSON numbers
    columns = {
        "batch": position // per_batch, "seq": position % per_batch, "producer": producer[pick],
        "partition": partition[pick], "sequence": sequence[pick],
        "key": np.char.add("k", key[pick].astype(str)).astype(object), "amount": amount,
    }  # fmt: skip
    types = {"key": pa.string(), "amount": pa.string()}
    table = pa.table({c: pa.array(v, types.get(c, pa.int64())) for c, v in columns.items()})
    write_trace_file(path, table)
    return {"events": events, "re_deliveries": repeats, "keys": int(len(np.unique(key)))}


def ours(df: Any) -> Any:
    from spark_impl.exactly_once_aggregation import exactly_once_aggregation

    return exactly_once_aggregation(
        df, producer_col="producer", partition_col="partition", sequence_col="sequence", key_col="key",
        amount_col="amount", seq_col="seq", batch_col="batch", aggregate="sum", seq_unique=True,
    ).output  # fmt: skip


def native(df: Any) -> Any:
    from pyspark.sql import functions as F

    return (
        df.withColumn("ts", F.timestamp_millis("sequence")).withColumn("x", F.col("amount").cast("double"))
        .withWatermark("ts", "1 hour").dropDuplicatesWithinWatermark(["producer", "partition", "sequence"])
        .groupBy("key").agg(F.sum("x").alias("total"))
    )  # fmt: skip


def run(df: Any, mode: str, checkpoint: str, ids: list[str]) -> measure.Run:
    """``measure.run_query``'s figures, noting the query's id for the event log."""
    started = time.perf_counter()
    query = (
        df.writeStream.format("noop").outputMode(mode).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    wall = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    ids.append(str(query.id))
    busy = [p for p in query.recentProgress if p.numInputRows > 0]
    rows = [float(p.numInputRows) for p in busy]
    durations = [p.durationMs["triggerExecution"] / 1000 for p in busy]
    return measure.Run(wall, sum(rows), len(busy), sum(rows[1:]), sum(durations[1:]), 0, {})


def print_shapes(log: str, names: dict[str, str]) -> None:
    """Per query, per stateful stage: shuffle records per task summed over the batches."""
    found = scaleout.stateful_stages(log)
    for query, name in names.items():
        if query not in found:
            continue
        print(f"\n-- {name}: stateful stages, shuffle records read per task (summed over batches) --")
        for k, shape in enumerate(scaleout.stage_shapes(found[query])):
            summed = shape["records_summed"]
            print(
                f"stage {k} {'+'.join(shape['ops'])}: {shape['tasks_per_batch']} tasks x "
                f"{shape['batches']} batches, records min {summed['min']:,.0f} / median "
                f"{summed['median']:,.0f} / max {summed['max']:,.0f}, total {summed['total']:,.0f}, "
                f"busiest task {summed['max_over_fair']:.2f}x its fair share"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--redeliver", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--input-partitions", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    log_dir = tempfile.mkdtemp(prefix="eoa-eventlog-")
    spark = scaleout.start_session(args.master, args.shuffle_partitions, log_dir)
    print(f"spark {spark.version}, {args.master}, {args.shuffle_partitions} shuffle partitions")
    print(f"machine: {measure.machine()}")
    names: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="eoa-bench-") as work:
        for keys in args.keys:
            path = os.path.join(work, f"rows-{keys}.parquet")
            counts = make_rows(path, args.events, args.batches, keys, args.redeliver, args.seed)
            print(f"\n{counts}")
            ids: dict[str, list[str]] = {"ours": [], "native": []}

            def start(
                name: str, build: Any, mode: str, keys: int = keys, path: str = path, ids: Any = ids
            ) -> Any:
                def go(attempt: int) -> measure.Run:
                    df = measure.trace_stream(spark, path, args.input_partitions)
                    checkpoint = os.path.join(work, f"{name}-{keys}-{attempt}")
                    return run(build(df), mode, checkpoint, ids[name])

                return go

            runs = measure.alternate(
                {"ours": start("ours", ours, "append"), "native": start("native", native, "update")},
                args.repeats,
            )
            measure.print_summary(f"{args.events:,} messages, {keys:,} keys", runs, "native", unit="msg/s")
            names[ids["ours"][-1]] = f"ours, {keys:,} keys"
            names[ids["native"][-1]] = f"native, {keys:,} keys"
    spark.stop()
    print_shapes(scaleout.event_log_file(log_dir), names)


if __name__ == "__main__":
    main()
