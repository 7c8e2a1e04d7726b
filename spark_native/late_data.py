"""OXL late data answered by Spark's own watermark drop in a windowed count
(``--engine spark-native``).

The query: ``withWatermark(ts, D)``, then the event rows only, ``groupBy(source, window(ts,
size))`` with ``count`` and ``collect_list(struct(batch, seq))`` (the rows each window holds), one
micro-batch per trace batch. It runs twice: in append mode for the windows Spark closes, and in
update mode, where every micro-batch writes each window a row of it updated, with all its rows:
a row Spark kept is in a list written by some micro-batch, a row it dropped in none.

How the trace is expressed on Spark:

* Spark's watermark comes only from the times of the watermarked column (``max - D``, one value
  per query). A ``watermark`` item is therefore a row of that column carrying its ``time``,
  filtered out after ``withWatermark`` so it counts in no window (by a predicate on the
  event-time column: the optimizer pushes a filter on other columns below the watermark node,
  which then never sees those rows): the watermark-carrying row is
  the only way a stream can tell Spark a watermark. Event rows pass through ``withWatermark``
  too (the window needs the watermarked column), so they move Spark's watermark as well
  (OXL-R1 deviation), and all sources share it (OXL-R2 deviation).
* ``window_size`` is the window's size. Spark drops a row of a windowed aggregation when its
  window's end is at or below the (previous batch's) watermark, and emits a window once the
  watermark reaches its end. With ``D = allowed_lateness`` that is R10 and R12: a window
  closes, and a row of it is dropped, once ``source watermark >= end + allowed_lateness``
  (so a late row of an open window is kept, R11).
* Without ``window_size`` the spec has no windows and drops every late event (R4:
  ``event_time < watermark``). The count then uses windows of 1 ms and ``D = 0``: a row's
  window ends at ``event_time + 1``, and ``event_time + 1 <= watermark`` is R4's rule. Those
  1 ms windows are the adapter's device and are not reported.
* Spark's only policy is to drop: ``Reassign`` and ``SideOutput`` are declined.
* ``clock`` items: Spark has no processing clock from the data; they close nothing (R10), so
  they are not sent to Spark; the adapter checks TR-4 on them (``clock_went_backwards``).

How Spark's answer maps to the tables:

* ``windows`` (with ``window_size``): each row the query writes, ``batch`` = the micro-batch
  that wrote it, ``seq`` null (no item closes a Spark window: the watermark of the batch does),
  ``watermark`` = the watermark the batch ran with plus ``D`` (the source watermark in the
  spec's terms), and the count.
* ``progress`` (of the append-mode run with windows, of the update-mode run without):
  ``dropped`` is the cumulative ``numRowsDroppedByWatermark``; ``on_time`` the
  events Spark kept (well-formed events sent minus dropped), cumulative: Spark does not tell a
  row kept by an open window from an on-time one, so ``allowed_late`` stays 0;
  ``reassigned`` and ``side_output`` 0; ``open_windows`` the windows Spark's state holds after
  the batch (0 without ``window_size``).
* ``events``: one row per well-formed event: ``assigned_time`` its own time when a list of the
  update-mode run holds it (Spark kept it: it continues with its time), null when none does
  (Spark dropped it). Spark has no verdict of its own beyond that: it does not tell a row kept
  by an open window from an on-time one, so ``watermark``, ``verdict`` and ``lateness`` are
  null and not shown (``assigned_time`` under the Drop policy says kept or dropped).
* ``side_outputs``: no rows (Spark's one policy is to drop; the others are declined).
* ``errors``: the adapter's own checks of R16 on items before they become rows
  (``duplicate_seq``, ``unsupported_item``, ``missing_event_time``, ``missing_time``,
  ``clock_went_backwards``); ``watermark_regressed`` is not reported: Spark takes a lower
  watermark row silently (its maximum does not move).

Declined (``Unsupported``): the ``Reassign`` and ``SideOutput`` policies, and times that do not
fit Spark's microsecond timestamps.
"""

from __future__ import annotations

from typing import Any

from harness.engine import Unsupported
from harness.outputs import Output
from harness.traces import Item, Trace
from spark_impl.late_data import StreamConfig
from spark_native.common import (
    TIMESTAMP_LIMIT_MS,
    TS,
    dropped_by_watermark,
    run_trace,
    state_rows,
    watermark_ms,
)

#: the window size that makes Spark's windowed drop rule ``end <= watermark`` R4's ``t < watermark``
POINT_WINDOW_MS = 1
#: kinds a late-data trace sends to Spark
SENT_KINDS = ("event", "watermark")


def spark_delay_ms(config: StreamConfig) -> int:
    """Spark's watermark delay: the budget that keeps a window open (R10), 0 without windows."""
    return config.allowed_lateness if config.window_size is not None else 0


def item_errors(trace: Trace) -> list[tuple[int, int, str]]:
    """The R16 error rows the adapter decides before Spark sees the rows (TR-4 for clocks)."""
    errors = []
    clock = 0
    for b, batch in enumerate(trace.batches):
        for seq, item in enumerate(batch):
            reason = _item_error(item, clock)
            if reason is not None:
                errors.append((b, seq, reason))
            elif item.kind == "clock" and item.time is not None:
                clock = item.time
    return errors


def _item_error(item: Item, clock: int) -> str | None:
    if item.kind == "duplicate_seq":
        return "duplicate_seq"
    if item.kind not in (*SENT_KINDS, "clock"):
        return "unsupported_item"
    if item.kind == "event" and item.event_time is None:
        return "missing_event_time"
    if item.kind in ("watermark", "clock") and item.time is None:
        return "missing_time"
    if item.kind == "clock" and item.time is not None and item.time < clock:
        return "clock_went_backwards"
    return None


def _sent_time(item: Item) -> int | None:
    if item.kind == "event":
        return item.event_time
    if item.kind == "watermark":
        return item.time
    return None


def decline_reason(trace: Trace, config: StreamConfig) -> str | None:
    """Why Spark's windowed watermark drop cannot run this trace at all, or None."""
    if config.policy != "Drop":
        return (
            f"Spark's withWatermark has one late-row policy, drop: no built-in {config.policy} "
            "(a dropped row reaches no output; only numRowsDroppedByWatermark counts it)"
        )
    size = config.window_size or POINT_WINDOW_MS
    margin = size + spark_delay_ms(config)
    for batch in trace.batches:
        for item in batch:
            t = _sent_time(item)
            if t is not None and abs(t) > TIMESTAMP_LIMIT_MS - margin:
                return f"time {t} ms is outside Spark's microsecond timestamp range"
    return None


def build_query(config: StreamConfig) -> Any:
    from pyspark.sql import functions as F

    size = config.window_size or POINT_WINDOW_MS

    def build(df: Any) -> Any:
        sent = df.filter(
            ((F.col("kind") == "event") & F.col("event_time").isNotNull())
            | ((F.col("kind") == "watermark") & F.col("time").isNotNull())
        )
        timed = sent.withColumn(TS, F.timestamp_millis(F.coalesce("event_time", "time"))).withWatermark(
            TS, f"{spark_delay_ms(config)} milliseconds"
        )
        # the filter reads the event-time column so that the optimizer keeps it above the
        # watermark node: a plain filter on kind is pushed below it and the watermark rows vanish
        events = timed.filter(F.when(F.col(TS).isNotNull(), F.col("kind")) == F.lit("event"))
        windows = events.groupBy("source", F.window(TS, f"{size} milliseconds").alias("w")).agg(
            F.count(F.lit(1)).alias("count"),
            F.collect_list(F.struct("batch", "seq")).alias("members"),
        )
        return windows.select(
            "source",
            F.unix_millis(F.col("w.start")).alias("window_start"),
            F.unix_millis(F.col("w.end")).alias("window_end"),
            "count",
            "members",
        )

    return build


def answer(spark: Any, trace: Trace, config: StreamConfig) -> Output | Unsupported:
    reason = decline_reason(trace, config)
    if reason is not None:
        return Unsupported(reason)
    errors = item_errors(trace)
    bad = {(b, seq) for b, seq, _ in errors}
    updates = run_trace(spark, trace, build_query(config), output_mode="update")
    kept = {(m["batch"], m["seq"]) for _, r in updates.rows for m in r["members"]}
    events = [
        (b, seq, item.source, item.event_time, None, None, None,
         item.event_time if (b, seq) in kept else None, None)
        for b, batch in enumerate(trace.batches)
        for seq, item in enumerate(batch)
        if item.kind == "event" and (b, seq) not in bad
    ]  # fmt: skip
    run = updates if config.window_size is None else run_trace(spark, trace, build_query(config))
    delay = spark_delay_ms(config)
    windows = []
    if config.window_size is not None:
        for m, r in run.rows:
            b = run.trace_batch(m)
            ran_with = watermark_ms(run.micro_progress(m))
            watermark = None if ran_with is None else ran_with + delay
            windows.append((b, None, r["source"], r["window_start"], r["window_end"], watermark, r["count"]))
    progress = []
    sent = dropped = 0
    for b, batch in enumerate(trace.batches):
        report = run.progress_of(b)
        sent += sum(1 for seq, item in enumerate(batch) if item.kind == "event" and (b, seq) not in bad)
        dropped += dropped_by_watermark(report)
        open_windows = state_rows(report) if config.window_size is not None else 0
        progress.append((b, sent - dropped, 0, 0, dropped, 0, open_windows))
    return {"events": events, "side_outputs": [], "windows": windows, "progress": progress, "errors": errors}
