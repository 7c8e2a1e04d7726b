"""F065 keyed watermarks answered by Spark's one query-global ``withWatermark``.

Spark keeps one watermark per query, so every key's watermark is the query's: the largest
event time seen in the micro-batches before, minus ``bounded_delay``, never lowered, 0 until
an event time is seen. A stateful operator drops a row as late when its event time is at or
below the watermark of the previous micro-batch (docs/spark-facts.md, "Spark's watermark").

The query over a trace's events (``withWatermark(ts, bounded_delay)``):

* ``dropDuplicates(batch, seq, ts)``: every event is distinct, so what it emits is exactly the
  events it did not drop as late: ``on_time``; the others are ``late`` (Spark only counts them);
* with ``window_size``: ``groupBy(key, window(ts, window_size))`` count and sum of ``value`` in
  append mode: a window is emitted in the micro-batch whose watermark reaches its end.

Reported: ``events`` (key_watermark = the watermark Spark judged the row by), ``progress``
(global_watermark = Spark's watermark after the batch; the key counters are not Spark's and
stay null) and ``windows``. ``keys`` and ``errors`` stay empty: Spark keeps no per-key
watermark state and has no notion of a malformed item (the adapter passes only events with a
key and an event time). expectations (spec clauses) state each deviation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harness.engine import Unsupported
from harness.outputs import Output
from harness.traces import Trace
from spark_native.common import TIMESTAMP_LIMIT_MS, TS, NativeRun, run_trace, watermark_ms

EVENTS, WINDOWS = "events", "windows"


def judged_events(trace: Trace) -> list[tuple[int, int, Any]]:
    """(batch, seq, item) of the events Spark's query sees: those with a key and an event time."""
    return [
        (b, seq, item)
        for b, batch in enumerate(trace.batches)
        for seq, item in enumerate(batch)
        if item.kind == "event" and item.key is not None and item.event_time is not None
    ]


def out_of_range(event_times: Iterable[int | None]) -> int | None:
    """The first event time that does not fit Spark's timestamp (microseconds in a long)."""
    return next((t for t in event_times if t is not None and abs(t) > TIMESTAMP_LIMIT_MS), None)


def too_long(**durations_ms: int | None) -> Unsupported | None:
    """A decline for a duration Spark cannot hold: its intervals are microseconds in a long."""
    for name, ms in durations_ms.items():
        if ms is not None and ms > TIMESTAMP_LIMIT_MS:
            return Unsupported(f"{name} {ms} ms does not fit Spark's interval (microseconds in a long)")
    return None


def event_time_seen(progress: dict[str, Any] | None) -> bool:
    return bool(progress and (progress.get("eventTime") or {}).get("max"))


def _iso_ms(text: str) -> int:
    return watermark_ms({"eventTime": {"watermark": text}}) or 0


def query_watermarks(run: NativeRun, num_batches: int, delay_ms: int) -> list[int | None]:
    """Spark's watermark after each trace batch (the one the next micro-batch runs with); None
    while no event time has been seen. The last batch has no next micro-batch: its value follows
    Spark's rule from what that batch reported, max(watermark, largest event time - delay)."""
    after: list[int | None] = []
    seen = False
    for k in range(num_batches):
        this = run.progress_of(k)
        seen = seen or event_time_seen(this)
        nxt = run.progress_after(k)
        if not seen:
            after.append(None)
        elif nxt is not None:
            after.append(watermark_ms(nxt))
        else:
            current = watermark_ms(this) or 0
            largest = (this or {}).get("eventTime", {}).get("max")
            after.append(max(current, _iso_ms(largest) - delay_ms) if largest else current)
    return after


def late_events_watermark(run: NativeRun, batch: int) -> int:
    """The watermark micro-batch ``batch`` drops rows by: the previous micro-batch's (0 before)."""
    return watermark_ms(run.progress_before(batch)) or 0


def build_query(delay_ms: int, window_size: int | None) -> Any:
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

    def build(df: Any) -> Any:
        events = (
            df.filter("kind = 'event' AND key IS NOT NULL AND event_time IS NOT NULL")
            .withColumn(TS, F.timestamp_millis("event_time"))
            .withWatermark(TS, f"{delay_ms} milliseconds")
        )
        kept = events.dropDuplicates(["batch", "seq", TS]).select(
            F.lit(EVENTS).alias("table"),
            "batch",
            "seq",
            "key",
            F.lit(None).cast("long").alias("window_start"),
            F.lit(None).cast("long").alias("window_end"),
            F.lit(None).cast("long").alias("count"),
            F.lit(None).cast("long").alias("sum"),
        )
        if window_size is None:
            return kept
        windows = (
            events.groupBy("key", F.window(TS, f"{window_size} milliseconds"))
            .agg(F.count("*").alias("count"), F.sum("value").alias("sum"))
            .select(
                F.lit(WINDOWS).alias("table"),
                F.lit(None).cast("long").alias("batch"),
                F.lit(None).cast("long").alias("seq"),
                "key",
                F.unix_millis("window.start").alias("window_start"),
                F.unix_millis("window.end").alias("window_end"),
                "count",
                "sum",
            )
        )
        return kept.unionByName(windows)

    return build


def answer(spark: Any, trace: Trace, config: Any) -> Output | Unsupported:
    events = judged_events(trace)
    too_far = out_of_range(item.event_time for _, _, item in events)
    if too_far is not None:
        return Unsupported(f"event time {too_far} ms does not fit Spark's timestamp (microseconds in a long)")
    delay = config.bounded_delay
    window_size = getattr(config, "window_size", None)
    declined = too_long(bounded_delay=delay, window_size=window_size)
    if declined is not None:
        return declined
    run = run_trace(spark, trace, build_query(delay, window_size))
    kept = {(r["batch"], r["seq"]) for _, r in run.rows if r["table"] == EVENTS}
    event_rows = []
    for b, seq, item in events:
        verdict = "on_time" if (b, seq) in kept else "late"
        event_rows.append((b, seq, item.key, item.event_time, late_events_watermark(run, b), verdict))
    after = query_watermarks(run, len(trace.batches), delay)
    progress = [(b, wm, None, None, None, None, None, None, None) for b, wm in enumerate(after)]
    windows = [
        (b, r["key"], r["window_start"], r["window_end"], r["count"], r["sum"])
        for b, r in run.batch_rows()
        if r["table"] == WINDOWS and b < len(trace.batches)
    ]
    return {EVENTS: event_rows, "progress": progress, WINDOWS: windows}
