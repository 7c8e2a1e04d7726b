"""Exactly-once aggregation (spec/exactly_once_aggregation.md) on Spark's own
``dropDuplicatesWithinWatermark`` and ``groupBy().agg()``, the formulation of OXE-R20.

One query per trace, in update mode: the ``event`` rows with the message id, key and amount,
``withWatermark(ts, dedup_window ms)`` where ``ts`` is the sequence read as milliseconds (R20's
time column), ``dropDuplicatesWithinWatermark(producer, partition, sequence)``, then
``groupBy(key)`` with the aggregate's kind (count, sum, min, max; mean as its sum and count, the
payload R18 holds). Why the delay is the window: both say how far back a re-delivery is still
recognised, Spark's in event time over the whole query, this area's in sequences per channel.

The aggregation also collects the place (batch, seq) and id of every row it took, so the
``messages`` rows are the deliveries Spark kept (verdict ``folded``); a row Spark dropped as a
duplicate or behind the watermark leaves no row, as in Spark. ``aggregates``: update mode's
rows, one per key updated in the micro-batch, the double as R17's text. ``progress``: the kept
rows so far, the deduplication operator's ``numDroppedDuplicateRows`` and
``numRowsDroppedByWatermark`` so far (duplicates; too old to tell, this area's outside_window)
and the aggregation's state rows (its keys). ``errors`` stays empty: the adapter reads the amount
as the trace writes it (JSON text: a number, or the strings NaN, Infinity, -Infinity), and a row
Spark cannot use (no id, no key, no double amount) is filtered out before the query's operators,
without a row, as a pipeline's own filter would.
"""

from __future__ import annotations

import math
from typing import Any

from harness.engine import Unsupported
from harness.outputs import TABLES, Output
from harness.traces import Trace
from spark_impl.exactly_once_aggregation import StreamConfig
from spark_native.common import TIMESTAMP_LIMIT_MS, TS, run_trace

AREA = "exactly_once_aggregation"
ID = ("producer", "partition", "sequence")
SPECIAL_AMOUNTS = ('"NaN"', '"Infinity"', '"-Infinity"')


def unsupported_reason(trace: Trace, config: StreamConfig) -> str | None:
    """A sequence read as milliseconds must be a Spark timestamp (microseconds in 64 bits)."""
    for batch in trace.batches:
        for item in batch:
            s = item.sequence
            if item.kind == "event" and s is not None and abs(s) + config.dedup_window > TIMESTAMP_LIMIT_MS:
                return (
                    f"exactly_once_aggregation: sequence {s} as ms has no Spark timestamp (DATETIME_OVERFLOW)"
                )
    return None


def amount_column() -> Any:
    """The JSON text of the amount as a double: a JSON number cast by Spark, the three strings
    JSON writes NaN and the infinities as, null for anything else."""
    from pyspark.sql import functions as F

    text = F.col("amount")
    number = F.expr("try_cast(amount AS DOUBLE)")
    special = F.expr("try_cast(substring(amount, 2, length(amount) - 2) AS DOUBLE)")
    return (
        F.when(text.isin(*SPECIAL_AMOUNTS), special).when(text.startswith('"'), F.lit(None)).otherwise(number)
    )


def native_query(df: Any, config: StreamConfig) -> Any:
    from pyspark.sql import functions as F

    kind = config.aggregate
    usable = (
        df.filter(F.col("kind") == "event")
        .withColumn("x", amount_column())
        .filter(F.col("producer").isNotNull() & F.col("partition").isNotNull())
        .filter(F.col("sequence").isNotNull() & F.col("key").isNotNull() & F.col("x").isNotNull())
        .withColumn(TS, F.timestamp_millis("sequence"))
        .withWatermark(TS, f"{config.dedup_window} milliseconds")
        .dropDuplicatesWithinWatermark(list(ID))
    )
    value = {
        "count": [F.count("x").alias("count")],
        "sum": [F.sum("x").alias("number")],
        "min": [F.min("x").alias("number")],
        "max": [F.max("x").alias("number")],
        "mean": [F.sum("x").alias("number"), F.count("x").alias("count")],
    }[kind]
    taken = F.collect_list(F.struct("batch", "seq", *ID)).alias("taken")
    return usable.groupBy("key").agg(*value, taken)


def double_text(x: float | None) -> str | None:
    """OXE-R17's text of a double."""
    if x is None:
        return None
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(float(x))


def _operator_metric(progress: dict[str, Any] | None, dedup: bool, metric: str) -> int:
    """A counter of the deduplication operator (``dedup``) or of the aggregation (the other one,
    ``stateStoreSave``), from its progress or its custom metrics."""
    if not progress:
        return 0
    total = 0
    for op in progress.get("stateOperators", []):
        if ("dedup" in op.get("operatorName", "").lower()) == dedup:
            total += int(op.get(metric, op.get("customMetrics", {}).get(metric, 0)))
    return total


def answer(spark: Any, trace: Trace, config: StreamConfig) -> Output | Unsupported:
    reason = unsupported_reason(trace, config)
    if reason is not None:
        return Unsupported(reason)
    kind = config.aggregate
    run = run_trace(spark, trace, lambda df: native_query(df, config), output_mode="update")
    messages, aggregates = [], []
    for b, row in run.batch_rows():
        for m in row["taken"]:
            if m["batch"] == b:
                messages.append(
                    (b, m["seq"], m["producer"], m["partition"], m["sequence"], row["key"], "folded")
                )
        number = None if kind == "count" else double_text(row["number"])
        count = row["count"] if kind in ("count", "mean") else None
        aggregates.append((b, row["key"], kind, number, count))
    progress = []
    folded = duplicates = too_old = 0
    for b in range(len(trace.batches)):
        report = run.progress_of(b)
        folded += sum(1 for m in messages if m[0] == b)
        duplicates += _operator_metric(report, True, "numDroppedDuplicateRows")
        too_old += _operator_metric(report, True, "numRowsDroppedByWatermark")
        keys = _operator_metric(report, False, "numRowsTotal")
        progress.append((b, folded, duplicates, too_old, keys))
    assert len(TABLES[AREA]["messages"]) == 7 and len(TABLES[AREA]["progress"]) == 5  # the order used above
    return {"messages": messages, "aggregates": aggregates, "progress": progress, "errors": []}
