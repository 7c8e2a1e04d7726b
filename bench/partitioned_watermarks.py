"""Benchmark: the Spark per-partition watermark operator (F064) against a plain Spark aggregation.

For each partition count (default 4, 64 and 1,024; one source), the same
events (default 1,000,000 in 10 micro-batches, plus one register_source row
at the start) are read from the ``trace`` source and written to the ``noop``
sink with Trigger.AvailableNow by:

- partitioned: ``partitioned_watermarks(df, source_col="source",
  partition_col="partition", event_time_col="event_time", seq_col="seq",
  kind_col="kind", count_col="count", batch_col="batch", buckets=...)``, one
  stream spread over ``--buckets`` wide-stage groups (default: 4 per shuffle
  partition of the session), its summaries combined by one narrow group;
- plain: ``groupBy("partition").agg(max("event_time"))``, update mode;
- and the oracle (reference/partitioned_watermarks.py, pure Python) on the
  first ``--oracle-events`` events (default 100,000) in the same 10 batches.

The two Spark operators run alternately (``--repeats``, default 3); printed:
median events/s (whole run, and without the first micro-batch, which carries
the start-up cost), the median ratio of paired runs, and the oracle's
events/s. A benchmark reports figures; it asserts nothing.

    python bench/partitioned_watermarks.py                       # 1M events; 4, 64, 1,024 partitions
    python bench/partitioned_watermarks.py --events 100000 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402 - bench/measure.py, the shared timing helpers


def make_events(events: int, partitions: int, batches: int, seed: int) -> Any:
    """A pyarrow table: batch, seq, kind, source, partition, event_time, count."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    per = events // batches
    batch = np.repeat(np.arange(batches, dtype=np.int64), per)
    n = len(batch)
    seq = np.tile(np.arange(1, per + 1, dtype=np.int64), batches)
    partition = rng.integers(0, partitions, n)
    # event time grows with arrival, with up to 10 s of disorder
    event_time = 1_700_000_000_000 + np.arange(n, dtype=np.int64) * 10 - rng.integers(0, 10_000, n)
    return pa.table(
        {
            "batch": pa.array(np.concatenate([[0], batch])),
            "seq": pa.array(np.concatenate([[0], seq])),
            "kind": pa.array(["register_source"] + ["event"] * n, type=pa.string()),
            "source": pa.array(np.zeros(n + 1, np.int64)),
            "partition": pa.array(np.concatenate([[0], partition])),
            "event_time": pa.array(np.concatenate([[0], event_time])),
            "count": pa.array([partitions] + [None] * n, type=pa.int64()),
        }
    )


def oracle_rate(table: Any, events: int, batches: int) -> float:
    """Events/s of the oracle's stream on the first ``events`` events (same batch split)."""
    from harness.traces import Item
    from reference.partitioned_watermarks import PartitionedWatermarkStream

    t = table.slice(0, events + 1).to_pydict()
    per = max(1, events // batches)
    items = [
        Item("event", source=0, partition=p, event_time=e)
        for p, e in zip(t["partition"][1:], t["event_time"][1:], strict=True)
    ]
    split = [items[i : i + per] for i in range(0, len(items), per)]
    split[0].insert(0, Item("register_source", source=0, count=t["count"][0]))
    stream = PartitionedWatermarkStream({})
    started = time.perf_counter()
    for b, batch in enumerate(split):
        stream.run_batch(b, batch)
    return len(items) / (time.perf_counter() - started)


def bench(
    spark: Any, events: int, partitions: int, batches: int, input_parts: int, repeats: int,
    oracle_events: int, work: str, buckets: int | None = None,
) -> None:  # fmt: skip
    from pyspark.sql import functions as F

    from spark_impl.partitioned_watermarks import partitioned_watermarks
    from spark_impl.trace_source import write_trace_file

    table = make_events(events, partitions, batches, seed=partitions)
    path = os.path.join(work, f"events-{events}-{partitions}.parquet")
    write_trace_file(path, table)

    def start_plain(attempt: int) -> measure.Run:
        plain = measure.trace_stream(spark, path, input_parts)
        plain = plain.groupBy("partition").agg(F.max("event_time").alias("max_et"))
        return measure.run_query(plain, "update", os.path.join(work, f"ck-plain-{partitions}-{attempt}"))

    def start_partitioned(attempt: int) -> measure.Run:
        pw = partitioned_watermarks(
            measure.trace_stream(spark, path, input_parts), source_col="source", partition_col="partition",
            event_time_col="event_time", seq_col="seq", kind_col="kind", count_col="count", batch_col="batch",
            buckets=buckets,
        )  # fmt: skip
        return measure.run_query(pw.output, "append", os.path.join(work, f"ck-pw-{partitions}-{attempt}"))

    runs = measure.alternate({"plain": start_plain, "partitioned": start_partitioned}, repeats)
    oracle = oracle_rate(table, min(oracle_events, events), batches)

    title = (
        f"{events:,} events, {partitions:,} partitions, {batches} micro-batches, "
        f"{input_parts} input partitions"
    )
    measure.print_summary(title, runs, "plain", counts=True)
    print(f"oracle (pure Python, {min(oracle_events, events):,} events): {oracle:,.0f} ev/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, nargs="+", default=[4, 64, 1_024])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--input-partitions", type=int, default=2, help="input partitions per micro-batch")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per operator")
    parser.add_argument("--oracle-events", type=int, default=100_000, help="events the oracle runs on")
    parser.add_argument(
        "--buckets", type=int, default=None, help="wide-stage groups (default: 4 per partition)"
    )
    args = parser.parse_args()

    with measure.spark_workdir("pw-bench-") as (spark, work):
        for partitions in args.partitions:
            bench(spark, args.events, partitions, args.batches, args.input_partitions, args.repeats,
                  args.oracle_events, work, args.buckets)  # fmt: skip


if __name__ == "__main__":
    main()
