"""OXJ-R22: Spark's own inner stream-stream join against this area's joins, difference by difference.

One streaming query per join (``native_run``): the events of a hand-written trace, with a few
generated keys beside them, through ``withWatermark(ts, DELAY_MS)`` on both inputs and Spark's
join, appended batch by batch:

* tumbling x tumbling: an equi-join on the key and ``window(ts, size)`` (the event time projected
  away, so the window is each input's event-time column), run as a left outer join: its matched
  rows are the inner join's, its rows with NULLs what an outer join adds;
* tumbling x sliding: an equi-join on the key with the R9 condition written on computed columns
  (the left pane start, the right event's union of sliding panes) and a time range of the two
  event times that the condition implies, from which Spark learns when it may forget rows; a
  sliding ``window()`` would give a pair once per shared pane, which Spark's join cannot de-duplicate;
* session x session: Spark's sessions, joined (the spark-native engine's query,
  ``spark_native.window_joins``): each side aggregated by ``groupBy(key, session_window(ts, gap))``
  into one row per session holding its events, the two sides' session rows joined on the key and
  the closed overlap of their windows (R13), each joined row expanded into the cross product of
  the two sessions' events. An inner join only.

What Spark should emit is derived here from Spark's documented rules (docs/spark-facts.md,
"Spark's watermark" and "Spark's own operators"), never from a recorded Spark run
(``SparkModel``): one watermark per query, the greatest event time of each input minus the
delay, the minimum over the inputs (an input without rows counts as 0), never decreasing;
micro-batch ``k`` evicts with the watermark computed from batches up to ``k - 1`` and drops rows
as late with the previous micro-batch's, the one computed from batches up to ``k - 2`` (0 in the
first two); after the input one more micro-batch, without rows, runs when the watermark has
moved. A tumbling row is late when its window ends at or below the late watermark, a range row
when its time is at or below it, a session row when its own session ``[t, t + gap)`` ends at or
below it. A pair of rows is emitted in the micro-batch of the second of them; a left outer join
emits an unmatched left row with NULLs in the first micro-batch whose eviction watermark reaches
its window's end. A session covers ``[first, last + gap)``; sessions of a key and side that
overlap or touch merge, also with the sessions held from earlier micro-batches; a session is
emitted in the first micro-batch whose eviction watermark reaches its end, and a pair of
overlapping sessions in the micro-batch of the later of the two. The oracle runs the same events
with watermark items equal to the watermark Spark judges lateness by (``oracle_output``), and
each test asserts one difference of OXJ-R22 between the two.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.traces import I64_MAX, Item, Trace
from reference.window_joins import run_trace

AREA = "window_joins"
DELAY_MS = 1_000
SIDES = ("left", "right")
TT: dict[str, Any] = {"join": "tumbling_tumbling", "size_ms": 10_000}
TS: dict[str, Any] = {
    "join": "tumbling_sliding",
    "left_size_ms": 10_000,
    "right_size_ms": 10_000,
    "right_slide_ms": 5_000,
}
SS: dict[str, Any] = {"join": "session_session", "gap_ms": 2_000}
GENERATED_KEYS = ("g0", "g1", "g2", "g3")

# Hand-written batches of (side, key, time). Keys named drive_* move the watermark; the others
# are the cases the tests below name. Comments give Spark's late watermark of the batch.
TT_BATCHES: list[list[tuple[str, str, int]]] = [
    # late 0: n's window ends at 0, so Spark drops both n; no watermark here yet, so ours pairs them
    [("left", "drive_l", 21_000), ("left", "n", -5_000), ("right", "n", -5_000)],
    # late 0; after batch 0 the right input's greatest time (-5 s) was below its delay: watermark 0
    [("right", "drive_r", 31_000), ("left", "m", 15_000), ("right", "m", 15_000)],
    # late 0 (from batch 0), evicting with 20 s (from batch 1): c's window [0, 10 s) is joined
    [("left", "c", 8_000), ("right", "c", 8_000), ("left", "drive_l", 41_000)],
    # late 20 s: d's window ends at 10 s (dropped); e's ends at 30 s (joined, though e is at 20 s)
    [("left", "d", 9_000), ("right", "d", 9_000), ("left", "e", 20_000), ("right", "e", 20_000),
     ("right", "drive_r", 51_000)],
    # late 30 s: the second left e is dropped; f pairs
    [("left", "e", 25_000), ("left", "f", 35_000), ("right", "f", 36_000)],
    # late 40 s: the second right f is dropped
    [("right", "f", 39_000)],
]  # fmt: skip
TS_BATCHES: list[list[tuple[str, str, int]]] = [
    [("left", "drive_l", 11_000), ("right", "drive_r", 11_000)],
    # late 0: s2's left event, pane [10 s, 20 s)
    [("left", "drive_l", 21_000), ("right", "drive_r", 21_000), ("left", "s2", 12_000)],
    # late 10 s: one left twin, two right twins at one time, all in the pane [30 s, 40 s)
    [("left", "twin", 32_000), ("right", "twin", 33_000), ("right", "twin", 33_000)],
    # late 20 s: s1's left at 20 s is at the watermark (Spark drops it; its pane [20 s, 30 s) is
    # open here); s2's right at 24 s reaches [10 s, 20 s), purged here, kept by Spark
    [("left", "s1", 20_000), ("right", "s1", 21_000), ("right", "s2", 24_000)],
    [("left", "drive_l", 41_000), ("right", "drive_r", 41_000)],
]  # fmt: skip
SS_BATCHES: list[list[tuple[str, str, int]]] = [
    # late 0, evicting 0: one left session [10 s, 15 s) and one right [14.5 s, 16.5 s) on q, two of
    # the three left events more than the gap from the right one; z's right session [12 s, 14 s)
    [("left", "q", 10_000), ("left", "q", 11_500), ("left", "q", 13_000), ("right", "q", 14_500),
     ("right", "z", 12_000), ("left", "drive_l", 16_000), ("right", "drive_r", 16_000)],
    # late 0, evicting 15 s: q's left session and z's right one end; tail's end at 19.5 s and 20 s
    [("left", "drive_l", 20_000), ("right", "drive_r", 20_000), ("left", "tail", 17_500),
     ("right", "tail", 18_000)],
    # late 15 s, evicting 19 s: z's left at 13.5 s is late here, not in Spark (15.5 s > 15 s), and
    # joins 15.5 s into one session there; q's right session ends: Spark pairs q, no q row here
    [("left", "z", 13_500), ("left", "z", 15_500)],
    # late 19 s, evicting 19 s; the watermark moves to 21 s, so a micro-batch without rows follows,
    # in which tail's sessions end; end's sessions end at 23.5 s and 23.6 s, after every watermark
    [("left", "end", 21_500), ("right", "end", 21_600), ("left", "drive_l", 22_000),
     ("right", "drive_r", 22_000)],
]  # fmt: skip


@dataclass(frozen=True)
class Event:
    """One row: ``value`` is unique in the run and names the event in Spark's and the oracle's pairs."""

    batch: int
    side: str
    key: str
    time: int
    value: int


def with_generated_keys(hand: list[list[tuple[str, str, int]]], seed: int) -> list[list[Event]]:
    """The hand-written batches plus events of GENERATED_KEYS: up to three per side, key and batch,
    never after the side's greatest hand-written time so far, so the watermarks stay those the
    comments above give."""
    rng = random.Random(seed)
    batches: list[list[Event]] = []
    highest: dict[str, int] = {}
    value = 0
    for b, rows in enumerate(hand):
        batch = []
        for side, key, t in rows:
            highest[side] = max(highest.get(side, t), t)
            value += 1
            batch.append(Event(b, side, key, t, value))
        for key in GENERATED_KEYS:
            for side in SIDES:
                if side not in highest:
                    continue
                for _ in range(rng.randint(0, 3)):
                    value += 1
                    batch.append(
                        Event(b, side, key, rng.randint(highest[side] - 25_000, highest[side]), value)
                    )
        rng.shuffle(batch)
        batches.append(batch)
    return batches


# ---- Spark's rules ---------------------------------------------------------------------------


def pane_start(t: int, size: int) -> int:
    return t // size * size


def sliding_reach(t: int, size: int, slide: int) -> tuple[int, int]:
    """OXJ-R8: [start, end) of the union of the sliding panes holding ``t``."""
    return ((t - size) // slide + 1) * slide, t // slide * slide + size


def joins(config: dict[str, Any], left: int, right: int) -> bool:
    """The tumbling queries' join condition on two event times of one key."""
    if config["join"] == "tumbling_tumbling":
        return pane_start(left, config["size_ms"]) == pane_start(right, config["size_ms"])
    start = pane_start(left, config["left_size_ms"])
    lo, hi = sliding_reach(right, config["right_size_ms"], config["right_slide_ms"])
    return start < hi and lo < start + config["left_size_ms"]


@dataclass(frozen=True)
class Session:
    """A session Spark's aggregation emits: ``batch`` the micro-batch, ``events`` by time."""

    batch: int
    side: str
    key: str
    events: tuple[Event, ...]

    @property
    def start(self) -> int:
        return self.events[0].time

    def end(self, gap: int) -> int:
        return self.events[-1].time + gap


class SparkModel:
    """Spark's watermarks and output for ``batches``, from Spark's documented rules."""

    def __init__(self, config: dict[str, Any], batches: list[list[Event]]) -> None:
        self.config = config
        ended_with: list[int] = []  # the watermark computed from batches 0..k
        greatest: dict[str, int] = {}
        watermark = 0
        for batch in batches:
            for e in batch:
                greatest[e.side] = max(greatest.get(e.side, e.time), e.time)
            # an input without rows counts as 0; the query's watermark never decreases
            watermark = max(watermark, min(greatest[s] - DELAY_MS if s in greatest else 0 for s in SIDES))
            ended_with.append(watermark)
        self.ended_with = ended_with
        self.evicting = [0, *ended_with[:-1]]  # what a micro-batch's progress reports
        self.late_by = [0, *self.evicting[:-1]]
        # every micro-batch's eviction watermark, with the one without rows that runs after the
        # input when the watermark has moved
        self.eviction = self.evicting + ([ended_with[-1]] if ended_with[-1] > self.evicting[-1] else [])
        self.batches = batches
        self.events = [e for batch in batches for e in batch]

    def kept(self, e: Event) -> bool:
        if self.config["join"] == "tumbling_tumbling":  # the window column: its end decides
            return pane_start(e.time, self.config["size_ms"]) + self.config["size_ms"] > self.late_by[e.batch]
        if self.config["join"] == "session_session":  # the row's own session [t, t + gap)
            return e.time + self.config["gap_ms"] > self.late_by[e.batch]
        return e.time > self.late_by[e.batch]

    def dropped_per_batch(self) -> dict[int, int]:
        dropped = dict.fromkeys(range(len(self.late_by)), 0)
        for e in self.events:
            dropped[e.batch] += not self.kept(e)
        return dropped

    def unmatched_left(self) -> set[tuple[int, str, int]]:
        """A tumbling left outer join's rows with NULLs, (micro-batch, key, left value): each kept left
        row no kept right row matches, in the first micro-batch whose eviction watermark reaches its
        window's end."""
        size = self.config["size_ms"]
        matched = {left for _, _, left, _ in self.pairs()}
        rows = set()
        for e in self.events:
            if e.side == "left" and self.kept(e) and e.value not in matched:
                end = pane_start(e.time, size) + size
                due = [k for k in range(e.batch, len(self.eviction)) if self.eviction[k] >= end]
                if due:
                    rows.add((due[0], e.key, e.value))
        return rows

    def sessions(self) -> list[Session]:
        """The sessions Spark's aggregations emit: each micro-batch merges its kept rows with the
        sessions held (``[first, last + gap)`` overlapping or touching), then emits the sessions
        whose end its eviction watermark reaches. A session never reached is not listed."""
        gap = self.config["gap_ms"]
        held: dict[tuple[str, str], list[list[Event]]] = {}
        emitted = []
        for b, evicting in enumerate(self.eviction):
            for e in self.batches[b] if b < len(self.batches) else []:
                if not self.kept(e):
                    continue
                mine = held.get((e.side, e.key), [])
                touching = [s for s in mine if s[0].time <= e.time + gap and e.time <= s[-1].time + gap]
                merged = sorted([e, *(x for s in touching for x in s)], key=lambda x: (x.time, x.value))
                held[(e.side, e.key)] = [s for s in mine if s not in touching] + [merged]
            for (side, key), mine in held.items():
                emitted += [Session(b, side, key, tuple(s)) for s in mine if s[-1].time + gap <= evicting]
                held[(side, key)] = [s for s in mine if s[-1].time + gap > evicting]
        return emitted

    def session_pairs(self) -> set[tuple[int, str, int, int]]:
        """Emitted left and right sessions of a key whose closed ``[start, end]`` intersect, in the
        micro-batch of the later of the two: one pair per left event and right event."""
        gap = self.config["gap_ms"]
        emitted = self.sessions()
        return {
            (max(a.batch, c.batch), a.key, left.value, right.value)
            for a in emitted if a.side == "left"
            for c in emitted if c.side == "right"
            if a.key == c.key and a.start <= c.end(gap) and c.start <= a.end(gap)
            for left in a.events for right in c.events
        }  # fmt: skip

    def pairs(self) -> set[tuple[int, str, int, int]]:
        """(micro-batch, key, left value, right value): for the tumbling joins emitted when the
        second row arrives, for sessions by ``session_pairs``."""
        if self.config["join"] == "session_session":
            return self.session_pairs()
        kept = [e for e in self.events if self.kept(e)]
        return {
            (max(left.batch, right.batch), left.key, left.value, right.value)
            for left in kept if left.side == "left"
            for right in kept if right.side == "right"
            if left.key == right.key and joins(self.config, left.time, right.time)
        }  # fmt: skip


# ---- the oracle ------------------------------------------------------------------------------


def oracle_output(
    config: dict[str, Any],
    batches: list[list[Event]],
    watermarks: Sequence[int | None],
    final: int | None = None,
) -> dict[str, list[tuple[Any, ...]]]:
    """The oracle on the same events, with a watermark item ``watermarks[k]`` first in batch ``k``
    (none when None), and ``final`` as the last item of the trace."""
    items: list[list[Item]] = []
    for b, batch in enumerate(batches):
        head = [] if watermarks[b] is None else [Item("watermark", time=watermarks[b])]
        events = [Item("event", side=e.side, key=e.key, event_time=e.time, value=e.value) for e in batch]
        items.append(head + events)
    if final is not None:
        items[-1].append(Item("watermark", time=final))
    return run_trace(Trace(AREA, config, tuple(map(tuple, items)), name="native comparison"))


def oracle_pairs(output: dict[str, list[tuple[Any, ...]]]) -> set[tuple[int, str, int, int]]:
    """(batch, key, left value, right value) of the oracle's pair rows."""
    return {(row[0], row[2], row[6], row[10]) for row in output["pairs"]}


def values(pairs: set[tuple[int, str, int, int]], key: str | None = None) -> set[tuple[int, int]]:
    return {(lv, rv) for _, k, lv, rv in pairs if key is None or k == key}


# ---- the native query ------------------------------------------------------------------------


@dataclass
class NativeRun:
    model: SparkModel
    batches: list[list[Event]]
    pairs: set[tuple[int, str, int, int]]  # (micro-batch, key, left value, right value)
    rows: int  # pair rows, duplicates included
    unmatched: set[
        tuple[int, str, int]
    ]  # a left outer join's rows with NULLs: (micro-batch, key, left value)
    dropped: dict[int, int]  # numRowsDroppedByWatermark per micro-batch
    reported: dict[int, int]  # the watermark each micro-batch's progress reports, in ms


def native_join(df: Any, config: dict[str, Any], delay_ms: int = DELAY_MS, how: str = "inner") -> Any:
    """Spark's join (``how``) of the ``left`` and ``right`` rows of ``df`` (columns side, key,
    event_time in ms, value; for sessions also batch and seq) for the join ``config`` names: rows
    (key, lv, rv). bench/window_joins.py runs it too. Session x session is the spark-native
    engine's query, an inner join only."""
    from pyspark.sql import functions as F

    from spark_impl.window_joins import StreamConfig
    from spark_native.common import TS
    from spark_native.window_joins import session_join

    events = df.withColumn(TS, F.timestamp_millis("event_time"))
    if config["join"] == "session_session":
        if how != "inner":
            raise ValueError(f"Spark's session x session join is an inner join only, not {how!r}")
        native = StreamConfig("session_session", gap_ms=config["gap_ms"], allowed_lateness_ms=delay_ms)
        return session_join(events, native).select("key", "lv", "rv")
    delay = f"{delay_ms} milliseconds"
    inputs = {s: events.filter(F.col("side") == s).withWatermark(TS, delay) for s in SIDES}

    def named(side: str, *extra: Any) -> Any:
        p = side[0]
        return inputs[side].select(
            F.col("key").alias(f"{p}k"), F.col("value").alias(f"{p}v"), *extra
        )  # fmt: skip

    t = F.col("event_time")
    if config["join"] == "tumbling_tumbling":
        size = f"{config['size_ms']} milliseconds"
        left = named("left", F.window(TS, size).alias("lw"))
        right = named("right", F.window(TS, size).alias("rw"))
        condition = F.col("lw") == F.col("rw")
    else:
        width, size, slide = config["left_size_ms"], config["right_size_ms"], config["right_slide_ms"]
        left = named("left", F.col(TS).alias("lts"), (t - F.pmod(t, F.lit(width))).alias("start"))
        lo = t - F.lit(size) - F.pmod(t - F.lit(size), F.lit(slide)) + F.lit(slide)
        right = named(
            "right",
            F.col(TS).alias("rts"),
            lo.alias("lo"),
            (t - F.pmod(t, F.lit(slide)) + size).alias("hi"),
        )
        reach = F.expr(f"INTERVAL {width + size} MILLISECONDS")  # implied by the overlap: eviction
        condition = (
            (F.col("start") < F.col("hi")) & (F.col("lo") < F.col("start") + F.lit(width))
            & (F.col("lts") > F.col("rts") - reach) & (F.col("lts") < F.col("rts") + reach)
        )  # fmt: skip
    joined = left.join(right, (F.col("lk") == F.col("rk")) & condition, how)
    return joined.select(F.col("lk").alias("key"), "lv", "rv")


def native_run(
    tmp: Path, config: dict[str, Any], hand: list[list[tuple[str, str, int]]], seed: int, how: str = "inner"
) -> NativeRun:
    import pyarrow as pa

    from spark_impl.session import get_spark
    from spark_impl.trace_source import SOURCE_NAME, write_trace_file
    from spark_native.common import BatchRows

    batches = with_generated_keys(hand, seed)
    rows = [
        (e.batch, seq, e.side, e.key, e.time, e.value) for batch in batches for seq, e in enumerate(batch)
    ]
    names = ("batch", "seq", "side", "key", "event_time", "value")
    text = ("side", "key")
    table = pa.table({n: pa.array([r[i] for r in rows], pa.string() if n in text else pa.int64())
                      for i, n in enumerate(names)})  # fmt: skip
    path = str(tmp / "events.parquet")
    write_trace_file(path, table)
    spark = get_spark()
    df = (
        spark.readStream.format(SOURCE_NAME)
        .option("path", path)
        .option("num_batches", str(len(batches)))
        .load()
    )
    keep = BatchRows(spark, str(tmp / "written"))
    query = (
        native_join(df, config, how=how).writeStream.outputMode("append").foreachBatch(keep)
        .option("checkpointLocation", str(tmp / "checkpoint")).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    out = [(b, r["key"], r["lv"], r["rv"]) for b, rows in sorted(keep.by_batch(spark).items()) for r in rows]
    progress = [p for p in query.recentProgress if p.batchId < len(batches)]
    dropped = {p.batchId: sum(s.numRowsDroppedByWatermark for s in p.stateOperators) for p in progress}
    reported = {p.batchId: _millis(p.eventTime["watermark"]) for p in progress}
    pairs = {(b, k, lv, rv) for b, k, lv, rv in out if rv is not None}
    unmatched = {(b, k, lv) for b, k, lv, rv in out if rv is None}
    pair_rows = len(out) - len(unmatched)
    return NativeRun(SparkModel(config, batches), batches, pairs, pair_rows, unmatched, dropped, reported)


def _millis(text: str) -> int:
    from datetime import datetime

    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


@pytest.fixture(scope="module")
def tumbling(tmp_path_factory: pytest.TempPathFactory) -> NativeRun:
    """A left outer join: its matched rows are the inner join's (Spark emits a match the same way
    in both), and its rows with NULLs show what the outer join adds (one query less)."""
    return native_run(tmp_path_factory.mktemp("tt"), TT, TT_BATCHES, seed=1, how="left_outer")


@pytest.fixture(scope="module")
def sliding(tmp_path_factory: pytest.TempPathFactory) -> NativeRun:
    return native_run(tmp_path_factory.mktemp("ts"), TS, TS_BATCHES, seed=2)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> NativeRun:
    return native_run(tmp_path_factory.mktemp("ss"), SS, SS_BATCHES, seed=3)


def _by_key(run: NativeRun, key: str, side: str) -> list[Event]:
    return [e for batch in run.batches for e in batch if e.key == key and e.side == side]


# ---- every join: Spark's output is what its rules say ----------------------------------------


@pytest.mark.clauses("OXJ-R22")
@pytest.mark.parametrize("join", ["tumbling", "sliding", "sessions"])
def test_spark_native_join_emits_what_its_rules_say(join: str, request: pytest.FixtureRequest) -> None:
    run: NativeRun = request.getfixturevalue(join)
    assert run.reported == dict(enumerate(run.model.evicting))
    assert run.dropped == run.model.dropped_per_batch()
    assert run.pairs == run.model.pairs()
    assert run.rows == len(run.pairs), "each (left, right) once"
    assert run.unmatched == (run.model.unmatched_left() if join == "tumbling" else set())


# ---- the watermark (every join: shown on tumbling x tumbling) --------------------------------


@pytest.mark.clauses("OXJ-R22", "OXJ-R2")
def test_spark_watermark_is_the_minimum_over_both_inputs(tumbling: NativeRun) -> None:
    """After batch 0 the left input is at 20 s and the right one below 0: Spark's one watermark is
    0, so c (window [0, 10 s)) is joined in batch 2. The left input alone would have made it late."""
    model = tumbling.model
    left_alone = max(e.time for e in tumbling.batches[0] if e.side == "left") - DELAY_MS
    assert model.late_by[2] == 0 and left_alone == 20_000
    [c_left], [c_right] = _by_key(tumbling, "c", "left"), _by_key(tumbling, "c", "right")
    assert (2, "c", c_left.value, c_right.value) in tumbling.pairs


@pytest.mark.clauses("OXJ-R22", "OXJ-R2", "OXJ-R7")
def test_spark_judges_lateness_with_the_previous_batch_watermark(tumbling: NativeRun) -> None:
    """Batch 2 reports the watermark 20 s (from batch 1) but drops rows by 0 (batch 1's): c, whose
    window ended at 10 s, is joined. Ours, given the watermark Spark reports, calls c late."""
    assert tumbling.reported[2] == 20_000
    assert values(tumbling.pairs, "c")
    reported = oracle_output(
        TT, tumbling.batches, [tumbling.reported[b] for b in range(len(tumbling.batches))]
    )
    assert {(row[0], row[3]) for row in reported["late"] if row[3] == "c"} == {(2, "c")}
    assert not values(oracle_pairs(reported), "c")


@pytest.mark.clauses("OXJ-R22", "OXJ-R2")
def test_spark_first_batch_drops_rows_at_or_below_zero(tumbling: NativeRun) -> None:
    """Spark starts at watermark 0: n's window [-10 s, 0) has ended in batch 0 and both n are
    dropped. Ours has no watermark before its first watermark item: nothing is late, n pairs."""
    assert tumbling.dropped[0] >= 2 and not values(tumbling.pairs, "n")
    no_watermark_yet = oracle_output(TT, tumbling.batches[:1], [None])
    [n_left], [n_right] = _by_key(tumbling, "n", "left"), _by_key(tumbling, "n", "right")
    assert (n_left.value, n_right.value) in values(oracle_pairs(no_watermark_yet), "n")


# ---- tumbling x tumbling: same pairs, same batches, given Spark's watermark -------------------


@pytest.mark.clauses("OXJ-R22", "OXJ-R5", "OXJ-R6", "OXJ-R7")
def test_spark_tumbling_join_equals_ours_given_its_watermark(tumbling: NativeRun) -> None:
    """With watermark items equal to the watermark Spark drops rows by, ours and Spark's pairs and
    their batches are the same, and Spark drops what ours reports late (by the window's end: e at
    20 s is joined in batch 3, whose watermark is 20 s)."""
    ours = oracle_output(TT, tumbling.batches, tumbling.model.late_by)
    assert oracle_pairs(ours) == tumbling.pairs
    late_per_batch = dict.fromkeys(range(len(tumbling.batches)), 0)
    for row in ours["late"]:
        late_per_batch[row[0]] += 1
    assert late_per_batch == tumbling.dropped
    assert tumbling.model.late_by[3] == 20_000 and any(b == 3 and k == "e" for b, k, _, _ in tumbling.pairs)


@pytest.mark.clauses("OXJ-R22", "OXJ-R7", "OXJ-R20")
def test_spark_drops_late_rows_without_a_row(tumbling: NativeRun) -> None:
    """Spark's join has no output for a dropped row, only a count in its progress; ours has a
    ``late`` row for each (both d in batch 3)."""
    ours = oracle_output(TT, tumbling.batches, tumbling.model.late_by)
    assert {(row[0], row[2]) for row in ours["late"] if row[3] == "d"} == {(3, "left"), (3, "right")}
    assert tumbling.dropped[3] >= 2 and not values(tumbling.pairs, "d")


@pytest.mark.clauses("OXJ-R22", "OXJ-R4", "OXJ-R7")
def test_spark_outer_join_adds_a_row_for_an_unmatched_event(tumbling: NativeRun) -> None:
    """Spark's left outer join emits a left row no right row matched, with NULLs, once the
    eviction watermark reaches its window's end: drive_l at 21 s (window [20 s, 30 s)) in batch 3.
    This area's joins are inner: that event leaves no row, its pane is purged without one."""
    [early] = [e for e in _by_key(tumbling, "drive_l", "left") if e.time == 21_000]
    assert tumbling.model.evicting[3] == 30_000 and (3, "drive_l", early.value) in tumbling.unmatched
    ours = oracle_output(TT, tumbling.batches, tumbling.model.late_by)
    assert all(row[6] != early.value for row in ours["pairs"])
    assert all(row[3] != "drive_l" for row in ours["late"])


# ---- tumbling x sliding ----------------------------------------------------------------------


@pytest.mark.clauses("OXJ-R22", "OXJ-R11")
def test_spark_sliding_join_drops_a_row_by_its_own_time(sliding: NativeRun) -> None:
    """s1's left event at 20 s arrives when the watermark is 20 s: Spark drops it (its time is at
    the watermark); ours keeps it, its pane [20 s, 30 s) being open, and pairs it with s1's right."""
    assert sliding.model.late_by[3] == 20_000
    assert not values(sliding.pairs, "s1")
    ours = oracle_output(TS, sliding.batches, sliding.model.late_by)
    [left], [right] = _by_key(sliding, "s1", "left"), _by_key(sliding, "s1", "right")
    assert values(oracle_pairs(ours), "s1") == {(left.value, right.value)}


@pytest.mark.clauses("OXJ-R22", "OXJ-R11")
def test_spark_sliding_join_keeps_rows_of_a_pane_ours_purged(sliding: NativeRun) -> None:
    """s2's right event at 24 s reaches the left pane [10 s, 20 s), which ours purged at the
    watermark 20 s: ours has no pair. Spark keeps rows by time, not by pane, and pairs it with
    s2's left event at 12 s."""
    [left], [right] = _by_key(sliding, "s2", "left"), _by_key(sliding, "s2", "right")
    assert values(sliding.pairs, "s2") == {(left.value, right.value)}
    ours = oracle_output(TS, sliding.batches, sliding.model.late_by)
    assert not values(oracle_pairs(ours), "s2") and not [r for r in ours["late"] if r[3] == "s2"]


@pytest.mark.clauses("OXJ-R22", "OXJ-R9", "OXJ-R10")
def test_spark_sliding_join_has_each_pair_once(sliding: NativeRun) -> None:
    """The two right twins share one time: two pairs with the left twin, in both engines; every
    other pair is found by both unless an event is behind the watermark or a pane is purged."""
    [left] = _by_key(sliding, "twin", "left")
    twins = {(left.value, r.value) for r in _by_key(sliding, "twin", "right")}
    assert len(twins) == 2 and values(sliding.pairs, "twin") == twins
    ours = oracle_output(TS, sliding.batches, sliding.model.late_by)
    assert values(oracle_pairs(ours), "twin") == twins
    events = {e.value: e for batch in sliding.batches for e in batch}
    width = TS["left_size_ms"]
    for _, _, lv, rv in oracle_pairs(ours) ^ sliding.pairs:
        left_event, right_event = events[lv], events[rv]
        behind = [e for e in (left_event, right_event) if e.time <= sliding.model.late_by[e.batch]]
        purged = pane_start(left_event.time, width) + width <= sliding.model.late_by[right_event.batch]
        assert behind or purged, (left_event, right_event)


# ---- session x session -----------------------------------------------------------------------


def _keyed(pairs: set[tuple[int, str, int, int]], keys: set[str]) -> set[tuple[str, int, int]]:
    return {(k, lv, rv) for _, k, lv, rv in pairs if k in keys}


def _late_here_and_dropped(run: NativeRun) -> tuple[Counter[tuple[int, str, str, int]], set[str]]:
    """The events ours reports late given Spark's late watermark, (batch, side, key, time), and the
    keys of which ours and Spark keep the same events (asserting Spark drops only events late here)."""
    model = run.model
    ours = oracle_output(SS, run.batches, model.late_by)
    late_here = Counter((row[0], row[2], row[3], row[4]) for row in ours["late"])
    dropped = Counter((e.batch, e.side, e.key, e.time) for e in model.events if not model.kept(e))
    assert dropped <= late_here
    differ = {key for _, _, key, _ in late_here - dropped}
    return late_here, {e.key for e in model.events} - differ


@pytest.mark.clauses("OXJ-R22", "OXJ-R12", "OXJ-R13", "OXJ-R14")
def test_spark_session_join_pairs_the_same_sessions_but_drops_fewer_events(sessions: NativeRun) -> None:
    """Given watermark items equal to the watermark Spark drops rows by, and a last one at the
    watermark Spark ends with: Spark drops only events ours reports late, and on the keys where
    the two keep the same events Spark pairs what ours pairs, a session's every event (q's three
    left events pair with the right one, two of them more than the gap away). z's left event at
    13.5 s is late here (the watermark is 15 s) but its own session ends at 15.5 s, after it: in
    Spark it joins z's left event at 15.5 s into one session, which overlaps z's right session
    [12 s, 14 s], and both pair; here neither does."""
    model = sessions.model
    ours = oracle_output(SS, sessions.batches, model.late_by, final=model.eviction[-1])
    late_here, same = _late_here_and_dropped(sessions)
    assert "q" in same and _keyed(sessions.pairs, same) == _keyed(oracle_pairs(ours), same)
    lefts, [right] = _by_key(sessions, "q", "left"), _by_key(sessions, "q", "right")
    assert values(sessions.pairs, "q") == {(e.value, right.value) for e in lefts}
    assert len([e for e in lefts if abs(e.time - right.time) > SS["gap_ms"]]) == 2
    # z: late here, kept and paired in Spark
    z_lefts, [z_right] = _by_key(sessions, "z", "left"), _by_key(sessions, "z", "right")
    [bridge] = [e for e in z_lefts if e.time == 13_500]
    assert model.late_by[bridge.batch] == 15_000 and late_here[(2, "left", "z", 13_500)] == 1
    assert model.kept(bridge) and bridge.time + SS["gap_ms"] > model.late_by[bridge.batch]
    assert values(sessions.pairs, "z") == {(e.value, z_right.value) for e in z_lefts}
    assert not values(oracle_pairs(ours), "z") and "z" not in same


@pytest.mark.clauses("OXJ-R22", "OXJ-R14", "OXJ-R15")
def test_spark_emits_session_pairs_by_its_own_watermark_only(sessions: NativeRun) -> None:
    """q's sessions end at 15 s and 16.5 s (all four events in batch 0): Spark's eviction watermark
    first reaches 16.5 s in batch 2 (19 s, from batch 1's events), which has no q row; ours emits
    q's pairs at batch 3's watermark item (19 s; batch 2's, 15 s, closes only the left session).
    tail's sessions end at 19.5 s and 20 s: Spark emits them in the micro-batch without rows that
    follows the input (21 s); ours at the last watermark item. end's sessions (23.5 s, 23.6 s) are
    past every watermark Spark computes from event times: ours emits them at an i64-max watermark
    item, Spark never, and so for every pair Spark does not emit."""
    model, gap, n = sessions.model, SS["gap_ms"], len(sessions.batches)
    ours = oracle_output(SS, sessions.batches, model.late_by, final=I64_MAX)
    final_item = (n - 1, len(sessions.batches[-1]) + 1)  # after the head watermark item and the events

    def spark_batches(key: str) -> set[int]:
        return {b for b, k, _, _ in sessions.pairs if k == key}

    def our_items(key: str) -> set[tuple[int, int]]:
        return {(row[0], row[1]) for row in ours["pairs"] if row[2] == key}

    def later_end(key: str) -> int:
        return max(max(e.time for e in _by_key(sessions, key, side)) + gap for side in SIDES)

    q_end = later_end("q")
    assert q_end == 16_500 and {e.batch for side in SIDES for e in _by_key(sessions, "q", side)} == {0}
    assert model.eviction[1] < q_end <= model.eviction[2] and spark_batches("q") == {2}
    assert all(e.key != "q" for e in sessions.batches[2])
    assert model.late_by[2] < q_end <= model.late_by[3] and our_items("q") == {(3, 0)}  # the item
    tail_end = later_end("tail")
    assert model.eviction[n - 1] < tail_end <= model.eviction[n] and spark_batches("tail") == {n}
    assert our_items("tail") == {final_item}
    assert later_end("end") > model.eviction[-1] and not spark_batches("end")
    assert our_items("end") == {final_item}
    # on the keys both keep alike, every pair Spark never emits is one only the i64-max item closes
    _, same = _late_here_and_dropped(sessions)
    spark = values(sessions.pairs)
    missed = {(row[0], row[1]) for row in ours["pairs"] if row[2] in same and (row[6], row[10]) not in spark}
    assert missed == {final_item}


# ---- time granularity ------------------------------------------------------------------------


@pytest.mark.clauses("OXJ-R22", "OXJ-R4")
def test_spark_timestamps_cannot_hold_every_i64_time() -> None:
    """Spark's timestamps count microseconds in 64 bits: an event time of i64 max milliseconds has
    no timestamp. Ours joins two events at that time (their pane end saturates, OXJ-R4)."""
    from spark_impl.session import get_spark

    with pytest.raises(Exception, match="DATETIME_OVERFLOW"):
        get_spark().sql(f"SELECT timestamp_millis({I64_MAX}L) AS ts").collect()
    edge = [[Event(0, "left", "k", I64_MAX, 1), Event(0, "right", "k", I64_MAX, 2)]]
    assert values(oracle_pairs(oracle_output(TT, edge, [None]))) == {(1, 2)}
