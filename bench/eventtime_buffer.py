"""Benchmark: the Spark event-time reorder buffer beside the oracle and a plain Spark aggregation.

The events (default 1,000,000 in 10 micro-batches) arrive at 1,000 per second
of event time (event ``i`` is due at ``T0 + i`` ms) and each is late by up to
the disorder bound, uniformly; the stage's tolerance equals the bound, for
bounds of 10 ms, 1 s and 60 s. Per bound, three runs over the same events:

- stage: ``eventtime_buffer(df, eventtime_col="event_time", late_tolerance_ms=bound,
  key_col="key", value_col="value", seq_col="seq", batch_col="batch")``, one
  stream (one group), ``noop`` sink, ``Trigger.AvailableNow``;
- plain: ``groupBy("key").agg(max("event_time"), count("*"))``, update mode, ``noop`` sink;
- oracle: ``PhysicalEventtimeWatermark.process_collection`` of reference/,
  one call per micro-batch, on prebuilt tuples (parsing included).

The Spark runs alternate (``--repeats``, default 3); the oracle runs once per
repeat between them. Printed: the median events/s of each (whole run; and
for Spark also without the first micro-batch, which carries the start-up
cost), the median ratio stage/plain of paired runs, and the peak number of
buffered tuples (after a micro-batch is ingested, before its release). A
benchmark reports figures; it asserts nothing.

    python bench/eventtime_buffer.py                     # 1M events, bounds 10 ms, 1 s, 60 s
    python bench/eventtime_buffer.py --events 100000     # a quick run

``EventtimeBufferScaleout`` is the operator as ``bench/scaleout.py`` measures it
(``--operator eventtime_buffer``): shape of the stateful stages, events/s at
local[1] and local[2] beside the native aggregation.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402 - bench/measure.py, the shared timing helpers

T0 = 1_700_000_000_000


def make_events(events: int, batches: int, bound: int, keys: int, seed: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    per = events // batches
    n = per * batches
    return {
        "batch": np.repeat(np.arange(batches, dtype=np.int64), per),
        "seq": np.tile(np.arange(per, dtype=np.int64), batches),
        "key": np.char.add("key-", rng.integers(0, keys, n).astype(str)).astype(object),
        "event_time": T0 + np.arange(n, dtype=np.int64) - rng.integers(0, bound + 1, n),  # 1 per ms
        "value": np.arange(n, dtype=np.int64) % 1000,
    }


def write_events(path: str, cols: dict[str, Any]) -> None:
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    write_trace_file(
        path, pa.table({k: pa.array(v, type=pa.string() if k == "key" else None) for k, v in cols.items()})
    )


def run_oracle(cols: dict[str, Any], batches: int, bound: int) -> tuple[float, int, int]:
    """(events/s of the oracle stage, peak buffered tuples, most tuples carried from one micro-batch to
    the next); tuples are built before the clock starts."""
    from reference.eventtime_buffer import (
        EventtimeDefinition,
        EventtimeTypeRegistry,
        InputTuple,
        PhysicalEventtimeWatermark,
        PipelineOptions,
        StreamDefinition,
        Tuple,
        plan_watermark_stage,
    )

    declared = EventtimeDefinition("event_time", "unixtimestamp_ms")
    stream = StreamDefinition("input", ("event_time",), declared)
    stage = plan_watermark_stage([stream], PipelineOptions(True, bound), EventtimeTypeRegistry())
    assert isinstance(stage, PhysicalEventtimeWatermark)
    per = len(cols["batch"]) // batches
    collections = [
        [
            InputTuple((("input", int(t)),), k, int(v))
            for t, k, v in zip(
                cols["event_time"][b * per : (b + 1) * per].tolist(),
                cols["key"][b * per : (b + 1) * per].tolist(),
                cols["value"][b * per : (b + 1) * per].tolist(),
                strict=True,
            )
        ]
        for b in range(batches)
    ]
    peak = carried = 0
    started = time.perf_counter()
    for c in collections:
        items = stage.process_collection(c).items
        released = sum(1 for x in items if isinstance(x, Tuple))
        carried = max(carried, stage.metrics().buffer_size)
        peak = max(peak, stage.metrics().buffer_size + released)  # before the release
    return len(cols["batch"]) / (time.perf_counter() - started), peak, carried


def bench(
    spark: Any, events: int, batches: int, bound: int, partitions: int, repeats: int, work: str
) -> None:
    from pyspark.sql import functions as F

    from spark_impl.eventtime_buffer import eventtime_buffer

    cols = make_events(events, batches, bound, keys=1000, seed=bound)
    path = os.path.join(work, f"events-{bound}.parquet")
    write_events(path, cols)

    def start_plain(attempt: int) -> measure.Run:
        plain = measure.trace_stream(spark, path, partitions).groupBy("key")
        plain = plain.agg(F.max("event_time").alias("max_et"), F.count("*").alias("n"))
        return measure.run_query(plain, "update", os.path.join(work, f"ckpt-plain-{bound}-{attempt}"))

    def start_stage(attempt: int) -> measure.Run:
        stage = eventtime_buffer(
            measure.trace_stream(spark, path, partitions), eventtime_col="event_time",
            late_tolerance_ms=bound, key_col="key", value_col="value", seq_col="seq", batch_col="batch",
        )  # fmt: skip
        return measure.run_query(stage.output, "append", os.path.join(work, f"ckpt-stage-{bound}-{attempt}"))

    # The oracle runs between the two Spark queries in every round: (events/s, peak, carried).
    rounds = measure.alternate(
        {"plain": start_plain, "oracle": lambda _: run_oracle(cols, batches, bound), "stage": start_stage},
        repeats,
    )
    runs: dict[str, list[measure.Run]] = {"plain": rounds["plain"], "stage": rounds["stage"]}
    _, peak, carried = rounds["oracle"][-1]

    title = (
        f"disorder bound = tolerance = {bound:,} ms: {events:,} events, {batches} micro-batches, "
        "1,000 events per second of event time"
    )
    measure.print_summary(title, runs, "plain")
    print(f"oracle: {measure.median(r[0] for r in rounds['oracle']):,.0f} ev/s (one process, no Spark)")
    print(
        f"peak buffered tuples: {peak:,} (a micro-batch ingested, before its release); "
        f"at most {carried:,} carried over to the next micro-batch (the state kept)"
    )


class EventtimeBufferScaleout:
    """The buffer for ``bench/scaleout.py``: events over ``units`` uniform keys (the buffer has no
    per-key rule: the key only rides along, and the native counterpart groups by it), event
    times growing 1 ms per arrival and each up to 2 s early, a tolerance of 2 s, the event time
    as an integer column of Unix milliseconds (the operator's integer cells)."""

    unit_columns = ("key",)
    unit_name = "keys"
    disorder_ms = 2_000

    @staticmethod
    def function() -> Any:
        from spark_impl.eventtime_buffer import eventtime_buffer

        return eventtime_buffer

    @classmethod
    def arguments(cls, clock: bool, units: int) -> dict[str, Any]:
        return {"eventtime_col": "event_time", "late_tolerance_ms": cls.disorder_ms, "key_col": "key",
                "value_col": "value", "seq_col": "seq", "batch_col": "batch"}  # fmt: skip

    @classmethod
    def write_events(cls, path: str, batches: int, per_batch: int, units: int, seed: int) -> None:
        import numpy as np

        rng = np.random.default_rng(seed)
        n = batches * per_batch
        arrival = np.arange(n, dtype=np.int64)
        write_events(path, {
            "batch": arrival // per_batch,
            "seq": arrival % per_batch,
            "key": np.char.add("key-", rng.integers(0, units, n).astype(str)).astype(object),
            "event_time": T0 + arrival - rng.integers(0, cls.disorder_ms, n),
            "value": arrival,
        })  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--bounds", type=int, nargs="+", default=[10, 1_000, 60_000], help="ms")
    parser.add_argument("--partitions", type=int, default=2, help="input partitions per micro-batch")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per operator")
    args = parser.parse_args()

    with measure.spark_workdir("eb-bench-") as (spark, work):
        for bound in args.bounds:
            bench(spark, args.events, args.batches, bound, args.partitions, args.repeats, work)


if __name__ == "__main__":
    main()
