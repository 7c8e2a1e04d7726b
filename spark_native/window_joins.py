"""Window joins (spec/window_joins.md) on Spark's own inner stream-stream join.

One query per trace: the trace's ``event`` items of side ``left`` and ``right``, each side with
``withWatermark(ts, allowed_lateness_ms)``, inner-joined on the key and the join's event-time
condition (the formulations of OXJ-R22):

* tumbling x tumbling: the key and ``window(ts, size)`` of each side;
* tumbling x sliding: the key, R9's overlap of the left pane and the right event's union of
  sliding panes (computed columns), and the time range it implies, from which Spark learns when
  it may forget a row;
* session x session: Spark's sessions, joined. Each side is first aggregated by
  ``groupBy(key, session_window(ts, gap))`` into one row per session holding its events
  (``collect_list`` of their batch, seq, time and value); the two sides' session rows are joined
  on the key and the overlap of their windows; each joined row is exploded into the cross
  product of the two sessions' events, one pair per left event and right event (R15's what).

Session x session, why this is R12 and R13 with the spec's gap unchanged: Spark's session covers
``[first, last + gap)`` and two sessions that overlap or touch are merged. An event at ``t`` is
the session ``[t, t + gap)``; it touches ``[first, last + gap)`` when ``t <= last + gap`` and
``t + gap >= first``, which is R12's inclusive rule ``first - gap <= t <= last + gap``. So
Spark's sessions of a key and side are R12's runs (times at most ``gap`` apart), with the same
gap, no +1 or -1. R13 pairs sessions whose closed intervals ``[first, last + gap]`` intersect;
Spark's window of a session has ``start = first`` and ``end = last + gap`` (its end is exclusive
for Spark's own merging, but the join reads it as a value), so R13 is ``lw.start <= rw.end and
rw.start <= lw.end``. The strict ``<`` would be the half-open windows' overlap and would miss
R13's touching sessions (``a.last + gap = b.first``), so the join condition uses ``<=``.
Spark derives no state bound from this condition (a session of the other side may close
arbitrarily late and still overlap), so the join keeps every session row it has seen.

The mapping, and why: Spark's watermark cannot be handed to a query, it is generated from the
event times (OXJ-R22 item 1), so ``watermark`` items are read by nothing. Spark's delay is its
"how late may data be" setting, the role ``allowed_lateness_ms`` plays here, so the delay is the
allowed lateness: a tumbling row is then dropped when ``window end + lateness <= greatest event
time``, R7's rule with the greatest event time (the minimum over the sides) as the watermark;
likewise Spark emits a session once ``last + gap + lateness <= greatest event time``, R14's
closing rule with that watermark, and the join emits a pair of sessions in the micro-batch in
which the later of the two is emitted (the earlier waits in the join's state).

Tables: ``pairs`` from the joined rows, ``batch`` the micro-batch that wrote the row; for the
tumbling joins the emitting item is the later of the two events, the micro-batch's, and its
``seq`` that event's; a session pair is emitted by Spark's watermark, which a micro-batch runs
with from the micro-batches before it, not by any item of the micro-batch, so its ``seq`` is
null. ``late`` and ``errors`` stay empty (Spark drops late rows silently and has no error
output: a row of another kind or side is not an input of the join, a null key or time never
meets its condition); ``progress`` from the query's progress: Spark's watermark, the pairs so
far and ``numRowsDroppedByWatermark`` so far (for session x session the session aggregations'
dropped events; the join drops no session row: a session emitted in a micro-batch ends after
the watermark its rows are judged late by); Spark counts neither the rows it took per side nor
windows (only state rows), so those columns are null.
"""

from __future__ import annotations

from typing import Any

from harness.engine import Unsupported
from harness.outputs import TABLES, Output
from harness.traces import Trace
from spark_impl.window_joins import StreamConfig
from spark_native.common import TIMESTAMP_LIMIT_MS, TS, dropped_by_watermark, run_trace, watermark_ms

AREA = "window_joins"
SIDES = ("left", "right")


def _largest_span(config: StreamConfig) -> int:
    """The widest window or range the join adds to an event time (for the timestamp range check)."""
    if config.join == "tumbling_tumbling":
        return config.size_ms
    if config.join == "tumbling_sliding":
        return config.left_size_ms + config.right_size_ms
    return config.gap_ms


def unsupported_reason(trace: Trace, config: StreamConfig) -> str | None:
    """Why Spark cannot run this trace at all, or None: times, windows and the delay must be
    Spark timestamps and intervals (microseconds in 64 bits, OXJ-R22 item 11)."""
    span = _largest_span(config)
    lateness = config.allowed_lateness_ms
    if span + lateness > TIMESTAMP_LIMIT_MS:
        return (
            "window_joins: a window, gap or delay longer than a Spark interval holds (CANNOT_PARSE_INTERVAL)"
        )
    for batch in trace.batches:
        for item in batch:
            t = item.event_time
            if item.kind == "event" and t is not None and abs(t) + span > TIMESTAMP_LIMIT_MS:
                return f"window_joins: event time {t} ms has no Spark timestamp (DATETIME_OVERFLOW)"
    return None


def native_join(df: Any, config: StreamConfig) -> Any:
    """Spark's inner join of the ``left`` and ``right`` event rows of ``df`` (the engine's input
    columns): one row per pair, with both events' batch, seq, time and value."""
    from pyspark.sql import functions as F

    events = df.filter((F.col("kind") == "event") & F.col("side").isin(*SIDES)).withColumn(
        TS, F.timestamp_millis("event_time")
    )
    delay = f"{config.allowed_lateness_ms} milliseconds"

    def side(name: str, *extra: Any) -> Any:
        p = name[0]
        rows = events.filter(F.col("side") == name).withWatermark(TS, delay)
        return rows.select(
            F.col("key").alias(f"{p}k"),
            F.col("batch").alias(f"{p}b"),
            F.col("seq").alias(f"{p}s"),
            F.col("event_time").alias(f"{p}t"),
            F.col("value").alias(f"{p}v"),
            *extra,
        )

    t = F.col("event_time")
    if config.join == "tumbling_tumbling":
        pane = f"{config.size_ms} milliseconds"
        left = side("left", F.window(TS, pane).alias("lw"))
        right = side("right", F.window(TS, pane).alias("rw"))
        condition = F.col("lw") == F.col("rw")
    elif config.join == "tumbling_sliding":
        width, size, slide = config.left_size_ms, config.right_size_ms, config.right_slide_ms
        left = side("left", F.col(TS).alias("lts"), (t - F.pmod(t, F.lit(width))).alias("start"))
        first = t - F.lit(size) - F.pmod(t - F.lit(size), F.lit(slide)) + F.lit(slide)  # R8's k_lo pane
        right = side(
            "right",
            F.col(TS).alias("rts"),
            first.alias("lo"),
            (t - F.pmod(t, F.lit(slide)) + F.lit(size)).alias("hi"),
        )
        reach = F.expr(f"INTERVAL {width + size} MILLISECONDS")  # implied by the overlap: lets Spark evict
        condition = (
            (F.col("start") < F.col("hi"))
            & (F.col("lo") < F.col("start") + F.lit(width))
            & (F.col("lts") > F.col("rts") - reach)
            & (F.col("lts") < F.col("rts") + reach)
        )
    else:
        return session_join(events, config)
    joined = left.join(right, (F.col("lk") == F.col("rk")) & condition, "inner")
    return joined.select(F.col("lk").alias("key"), "lb", "ls", "lt", "lv", "rb", "rs", "rt", "rv")


def session_join(events: Any, config: StreamConfig) -> Any:
    """Each side's ``session_window`` sessions (one row each, with their events), joined on the
    key and R13's closed overlap of ``[start, end]``, then one row per pair of their events."""
    from pyspark.sql import functions as F

    delay, gap = f"{config.allowed_lateness_ms} milliseconds", f"{config.gap_ms} milliseconds"

    def sessions(name: str) -> Any:
        p = name[0]
        rows = events.filter(F.col("side") == name).withWatermark(TS, delay)
        event = F.struct(*(F.col(c).alias(f"{p}{c[0]}") for c in ("batch", "seq", "time", "value")))
        return (
            rows.withColumn("time", F.col("event_time"))
            .groupBy(F.col("key").alias(f"{p}k"), F.session_window(TS, gap).alias(f"{p}w"))
            .agg(F.collect_list(event).alias(f"{p}e"))
        )

    left, right = sessions("left"), sessions("right")
    overlap = (F.col("lw.start") <= F.col("rw.end")) & (F.col("rw.start") <= F.col("lw.end"))
    joined = left.join(right, (F.col("lk") == F.col("rk")) & overlap, "inner")
    pairs = joined.select("lk", F.explode("le").alias("l"), "re").select(
        "lk", "l", F.explode("re").alias("r")
    )
    return pairs.select(F.col("lk").alias("key"), "l.*", "r.*")


def emitting_seq(batch_id: int, row: dict[str, Any]) -> int | None:
    """The seq of the later of the pair's two events, the one of this micro-batch (R3's emitting
    item as far as Spark tells it: it emits a pair in the micro-batch of its second row)."""
    mine = [row[f"{p}s"] for p in "lr" if row[f"{p}b"] == batch_id]
    return max(mine) if mine else None


def answer(spark: Any, trace: Trace, config: StreamConfig) -> Output | Unsupported:
    reason = unsupported_reason(trace, config)
    if reason is not None:
        return Unsupported(reason)
    run = run_trace(spark, trace, lambda df: native_join(df, config))
    pairs = [
        (
            b,
            None if config.join == "session_session" else emitting_seq(b, r),
            r["key"],
            r["lb"],
            r["ls"],
            r["lt"],
            r["lv"],
            r["rb"],
            r["rs"],
            r["rt"],
            r["rv"],
        )
        for b, r in run.batch_rows()
    ]
    progress = []
    emitted = dropped = 0
    for b in range(len(trace.batches)):
        report = run.progress_of(b)
        emitted += sum(1 for row in pairs if row[0] == b)
        dropped += dropped_by_watermark(report)
        progress.append((b, watermark_ms(report), None, None, emitted, dropped, None))
    tables = TABLES[AREA]
    assert tables["pairs"][1] == "seq" and len(tables["progress"]) == 7  # the column order used above
    return {"pairs": pairs, "late": [], "progress": progress, "errors": []}
