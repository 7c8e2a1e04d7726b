"""F017E session windows answered by Spark's own ``session_window`` (``--engine spark-native``).

The query: ``withWatermark(ts, D).groupBy(key, session_window(ts, gap)).agg(count, sum(value))``
in append mode, ``ts = timestamp_millis(event_time)``, one micro-batch per trace batch.

How the spec's settings map to Spark's (derived from the two closing rules):

* ``gap`` is ``session_window``'s gap duration: both define a session as
  ``[first event, last event + gap)`` and merge sessions that touch (R2, R3).
* Spark has no allowed lateness for a session window; it emits a session once its watermark
  ``max event time - D`` reaches the end (``end <= watermark``). R7 closes it when
  ``max event time - bounded_delay > end + allowed_lateness``. Solving the one for the other
  gives ``D = bounded_delay + allowed_lateness + 1`` ms, so Spark's closing condition is R7's,
  evaluated at Spark's batch boundaries (it lags one batch: R6, R7 deviations).
* ``emit_strategy`` only decides the verdict of late rows, which Spark never reports (below).

How Spark's answer maps to the tables:

* ``sessions``: every row the query writes, with ``batch`` = the micro-batch that wrote it
  (the trace batch it ran for) and ``reason`` = ``watermark``: Spark closes a session only by
  its query watermark, which is what the spec calls a close by the watermark (it has no timers).
* ``progress``: ``watermark`` is the spec's watermark after the batch computed from what Spark
  reports, the greatest ``eventTime.max`` of the batches so far minus ``bounded_delay`` (None
  while Spark has seen no event time; Spark itself reports its watermark ``max - D``, floored
  at 0, and only from the next batch on); ``open_sessions`` is the session rows Spark's state
  holds after the batch; ``sessions_closed_by_watermark`` counts the sessions written so far,
  ``sessions_closed_by_timer`` stays 0; ``late_events`` is the cumulative
  ``numRowsDroppedByWatermark``, the only trace Spark keeps of the rows it drops.
* ``late``: no rows. Spark drops late rows silently; which rows it dropped is not observable.
* ``timers``: no rows. Spark's session state has no timers (its eviction is a scan of the
  state against the watermark at each batch's end).
* ``errors``: the adapter's own input checks of R20, made before a row reaches Spark (R20 is a
  rule on the trace's items, which the adapter translates into rows; Spark has no error rows):
  ``duplicate_seq`` items, kinds other than ``event``, events without key or event time.

Declined (``Unsupported``): a trace with an ``end`` item (Spark has no end of input that
flushes state: a stopped query keeps its open sessions), and a trace whose event times or
delay do not fit Spark's microsecond timestamps (``timestamp_millis`` overflows).
"""

from __future__ import annotations

from typing import Any

from harness.engine import Unsupported
from harness.outputs import Output
from harness.traces import Item, Trace
from spark_impl.session_windows import StreamConfig
from spark_native.common import TIMESTAMP_LIMIT_MS, TS, dropped_by_watermark, run_trace, state_rows

#: the reason Spark's only way of closing a session is reported under (F017E-R8)
CLOSED_BY = "watermark"


def spark_delay_ms(config: StreamConfig) -> int:
    """Spark's watermark delay whose closing rule (``end <= max - D``) is R7's."""
    return config.bounded_delay + config.allowed_lateness + 1


def item_error(item: Item) -> str | None:
    """The R20 reason of an item the adapter keeps from Spark, or None for a well-formed event."""
    if item.kind == "duplicate_seq":
        return "duplicate_seq"
    if item.kind != "event":
        return "unsupported_item"
    if item.key is None:
        return "missing_key"
    if item.event_time is None:
        return "missing_event_time"
    return None


def decline_reason(trace: Trace, config: StreamConfig) -> str | None:
    """Why Spark's ``session_window`` cannot run this trace at all, or None."""
    if any(item.kind == "end" for batch in trace.batches for item in batch):
        return (
            "Spark has no end-of-input signal for session_window: stopping the query leaves open "
            "sessions in its state unemitted, and its watermark moves only with event times"
        )
    if spark_delay_ms(config) > TIMESTAMP_LIMIT_MS:
        return f"the watermark delay {spark_delay_ms(config)} ms does not fit Spark's microsecond interval"
    for batch in trace.batches:
        for item in batch:
            if item_error(item) is None and abs(int(item.event_time or 0)) > TIMESTAMP_LIMIT_MS - config.gap:
                return f"event time {item.event_time} ms is outside Spark's microsecond timestamp range"
    return None


def build_query(config: StreamConfig) -> Any:
    """The native session-window aggregation over the engine's input rows."""
    from pyspark.sql import functions as F

    def build(df: Any) -> Any:
        events = (
            df.filter((F.col("kind") == "event") & F.col("key").isNotNull() & F.col("event_time").isNotNull())
            .withColumn(TS, F.timestamp_millis("event_time"))
            .withWatermark(TS, f"{spark_delay_ms(config)} milliseconds")
        )
        sessions = events.groupBy("key", F.session_window(TS, f"{config.gap} milliseconds").alias("w")).agg(
            F.count(F.lit(1)).alias("count"), F.sum("value").alias("sum")
        )
        return sessions.select(
            "key",
            F.unix_millis(F.col("w.start")).alias("session_start"),
            F.unix_millis(F.col("w.end")).alias("session_end"),
            "count",
            "sum",
        )

    return build


def _max_event_time_ms(progress: dict[str, Any] | None) -> int | None:
    import datetime as dt

    text = ((progress or {}).get("eventTime") or {}).get("max")
    if text is None:
        return None
    return round(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def answer(spark: Any, trace: Trace, config: StreamConfig) -> Output | Unsupported:
    reason = decline_reason(trace, config)
    if reason is not None:
        return Unsupported(reason)
    errors = [
        (b, seq, error)
        for b, batch in enumerate(trace.batches)
        for seq, item in enumerate(batch)
        if (error := item_error(item)) is not None
    ]
    run = run_trace(spark, trace, build_query(config))
    sessions = [
        (b, r["key"], r["session_start"], r["session_end"], r["count"], r["sum"], CLOSED_BY)
        for b, r in run.rows
    ]
    progress = []
    greatest: int | None = None
    closed = dropped = 0
    for b in range(len(trace.batches)):
        report = run.progress_of(b)
        batch_max = _max_event_time_ms(report)
        if batch_max is not None:
            greatest = batch_max if greatest is None else max(greatest, batch_max)
        closed += sum(1 for row in sessions if row[0] == b)
        dropped += dropped_by_watermark(report)
        watermark = None if greatest is None else greatest - config.bounded_delay
        progress.append((b, watermark, state_rows(report), 0, closed, dropped))
    return {"sessions": sessions, "progress": progress, "errors": errors}
