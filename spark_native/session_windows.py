"""F017E session windows answered by Spark's own ``session_window`` (``--engine spark-native``).

The query: ``withWatermark(ts, D).groupBy(key, session_window(ts, gap)).agg(count, sum(value))``
in append mode, ``ts = timestamp_millis(event_time)``, one micro-batch per trace batch.

How the spec's settings map to Spark's (derived from the two closing rules):

* ``gap`` is ``session_window``'s gap duration: both define a session as
  ``[first event, last event + gap)`` and merge sessions that touch (R2, R3).
* ``D``, the delay of ``withWatermark``, from the two documented contracts. Spark's watermark
  ``W_s = max event time - D`` promises that rows at or below it are late (a stateful operator
  drops ``event_time <= W_s``); the spec's ``W`` that events below it are (R10). Both say the
  same when ``W_s = W - 1``, so with no allowed lateness ``D = bounded_delay + 1`` (the shift
  Flink's adapter makes too). Spark has no allowed lateness of its own: its delay is its one
  lateness setting ("how late data may be"), so the spec's allowed lateness joins it:
  ``D = bounded_delay + allowed_lateness + 1``. Then Spark's closing rule, a session is emitted
  once ``end <= W_s``, is R7's ``W > end + allowed_lateness`` exactly, evaluated at Spark's batch
  boundaries (it lags one batch: R6, R7 deviations).
* Spark's lateness rule cannot be matched by any ``D``: it drops a row when the row's own
  session ``[t, t + gap)`` would already be closed (``t + gap <= W_s``), where R10 calls an event
  late when ``t + allowed_lateness < W``. So an event up to ``gap`` behind the watermark is kept
  and merges into a session (the R3 and R10 deviations), with or without allowed lateness:
  ``tests/test_spark_native_session_windows.py`` shows it with ``D = bounded_delay + 1``.
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

The ``end`` item (R23): Spark has no end of input (a stopped query keeps its open sessions), so
the adapter ends the input the way a Spark user does, with a sentinel row: an event of a key no
trace uses at a time whose watermark passes every session of the trace, followed by one more
micro-batch, in which Spark emits what the sentinel's watermark closes (Spark's watermark moves
at a micro-batch's end). The sentinel's own session is left out of every table, its time stands
for the end of time (``progress`` reports I64_MAX from the end's batch on), and the items after
the end are the adapter's ``after_end`` error rows and are not sent.

Declined (``Unsupported``): a trace whose event times or delay do not fit Spark's microsecond
timestamps (``timestamp_millis`` overflows), the sentinel's time included.
"""

from __future__ import annotations

from typing import Any

from harness.engine import Unsupported
from harness.outputs import Output
from harness.traces import I64_MAX, Item, Trace
from spark_impl.session_windows import StreamConfig
from spark_native.common import TIMESTAMP_LIMIT_MS, TS, dropped_by_watermark, run_trace, state_rows

#: the reason Spark's only way of closing a session is reported under (F017E-R8)
CLOSED_BY = "watermark"
#: the key of the end's sentinel row: no trace's key, since it starts with a NUL character
SENTINEL_KEY = "\x00end of input"


def spark_delay_ms(config: StreamConfig) -> int:
    """Spark's watermark delay whose closing rule (``end <= max - D``) is R7's."""
    return config.bounded_delay + config.allowed_lateness + 1


def item_error(item: Item, ended: bool = False) -> str | None:
    """The R20 reason of an item the adapter keeps from Spark, or None for a well-formed event
    (and for the end, which becomes the sentinel row)."""
    if ended:
        return "after_end"
    if item.kind == "end":
        return None
    if item.kind == "duplicate_seq":
        return "duplicate_seq"
    if item.kind != "event":
        return "unsupported_item"
    if item.key is None:
        return "missing_key"
    if item.event_time is None:
        return "missing_event_time"
    return None


def errors_of(trace: Trace) -> list[tuple[int, int, str]]:
    """The R20 error rows of the items the adapter keeps from Spark, in trace order."""
    out, ended = [], False
    for b, batch in enumerate(trace.batches):
        for seq, item in enumerate(batch):
            error = item_error(item, ended)
            if error is not None:
                out.append((b, seq, error))
            ended = ended or item.kind == "end"
    return out


def end_of(trace: Trace) -> tuple[int, int] | None:
    """The (batch, seq) of the trace's first end item, or None."""
    return next(
        (
            (b, seq)
            for b, batch in enumerate(trace.batches)
            for seq, item in enumerate(batch)
            if item.kind == "end"
        ),
        None,
    )


def sentinel_time(trace: Trace, config: StreamConfig) -> int:
    """A time whose Spark watermark (time - D) is at or past the end of every session of the
    events before the end: the greatest of their times plus the gap plus D."""
    times = [int(item.event_time or 0) for _, _, item in _events_before_end(trace)] or [0]
    return max(times) + config.gap + spark_delay_ms(config)


def _events_before_end(trace: Trace) -> list[tuple[int, int, Item]]:
    end = end_of(trace) or (len(trace.batches), 0)
    return [
        (b, seq, item)
        for b, batch in enumerate(trace.batches)
        for seq, item in enumerate(batch)
        if (b, seq) < end and item_error(item) is None
    ]


def spark_input(trace: Trace, config: StreamConfig) -> Trace:
    """The trace Spark is given: up to the end, the end as the sentinel row, and one more (empty)
    micro-batch when the end is in the last batch."""
    end = end_of(trace)
    if end is None:
        return trace
    sentinel = Item("event", key=SENTINEL_KEY, event_time=sentinel_time(trace, config), value=0)
    batches = [
        [sentinel if (b, seq) == end else item for seq, item in enumerate(batch) if (b, seq) <= end]
        for b, batch in enumerate(trace.batches)
    ]
    if end[0] == len(batches) - 1:
        batches.append([])
    return Trace(trace.area, trace.config, tuple(map(tuple, batches)), trace.restart_after, trace.name)


def decline_reason(trace: Trace, config: StreamConfig) -> str | None:
    """Why Spark's ``session_window`` cannot run this trace at all, or None."""
    if end_of(trace) is not None and sentinel_time(trace, config) > TIMESTAMP_LIMIT_MS:
        return "the end's sentinel row needs a time beyond Spark's microsecond timestamp range"
    if spark_delay_ms(config) > TIMESTAMP_LIMIT_MS:
        return f"the watermark delay {spark_delay_ms(config)} ms does not fit Spark's microsecond interval"
    for _, _, item in _events_before_end(trace):
        if item.kind == "event" and abs(int(item.event_time or 0)) > TIMESTAMP_LIMIT_MS - config.gap:
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
    errors = errors_of(trace)
    end = end_of(trace)
    run = run_trace(spark, spark_input(trace, config), build_query(config))
    sessions = [
        (b, r["key"], r["session_start"], r["session_end"], r["count"], r["sum"], CLOSED_BY)
        for b, r in run.batch_rows()
        if r["key"] != SENTINEL_KEY
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
        open_sessions = state_rows(report)
        if end is not None and b >= end[0]:
            watermark = I64_MAX  # the sentinel stands for the end of time (R23)
            open_sessions -= 1  # the sentinel's own session, open for good
        progress.append((b, watermark, open_sessions, 0, closed, dropped))
    return {"sessions": sessions, "progress": progress, "errors": errors}
