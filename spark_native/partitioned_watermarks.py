"""F064 per-partition watermarks answered by Spark's one query-global ``withWatermark``.

Spark keeps one watermark per query: the largest event time seen over every partition in the
micro-batches before, minus the delay (here ``max_lateness``), never lowered; no partition
holds it back, none is idle, and nothing is registered, added, removed or assigned to a core
(docs/spark-facts.md, "Spark's watermark"; properties/test_partitioned_watermarks_native.py).

The query: the trace's events through ``withWatermark(ts, max_lateness)``. ``progress`` reports
combined_watermark = Spark's watermark after the batch (null until an event time is seen); its
partition counters and the ``partitions``, ``sources`` and ``errors`` tables have no Spark
counterpart and stay null or empty. A trace with ``watermark`` items is declined: Spark derives
its watermark from event times only, so a partition cannot report one.
"""

from __future__ import annotations

from typing import Any

from harness.engine import Unsupported
from harness.outputs import Output
from harness.traces import Trace
from spark_native.common import TS, run_trace
from spark_native.keyed_watermarks import out_of_range, query_watermarks, too_long

WATERMARK_ITEMS_REASON = (
    "Spark's watermark comes from event times only (withWatermark(column, delay)): a partition "
    "cannot report a watermark of its own"
)


def build_query(delay_ms: int) -> Any:
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

    def build(df: Any) -> Any:
        # no stateful operator: Spark still tracks the watermark of a withWatermark input
        return (
            df.filter("kind = 'event' AND event_time IS NOT NULL")
            .withColumn(TS, F.timestamp_millis("event_time"))
            .withWatermark(TS, f"{delay_ms} milliseconds")
            .select("batch", "seq")
        )

    return build


def answer(spark: Any, trace: Trace, config: Any) -> Output | Unsupported:
    items = [item for batch in trace.batches for item in batch]
    if any(item.kind == "watermark" for item in items):
        return Unsupported(WATERMARK_ITEMS_REASON)
    too_far = out_of_range(item.event_time for item in items if item.kind == "event")
    if too_far is not None:
        return Unsupported(f"event time {too_far} ms does not fit Spark's timestamp (microseconds in a long)")
    declined = too_long(max_lateness=config.max_lateness)
    if declined is not None:
        return declined
    run = run_trace(spark, trace, build_query(config.max_lateness))
    after = query_watermarks(run, len(trace.batches), config.max_lateness)
    return {"progress": [(b, wm, None, None, None, None, None) for b, wm in enumerate(after)]}
