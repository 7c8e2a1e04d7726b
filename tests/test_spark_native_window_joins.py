"""``--engine spark-native`` on window joins (spark_native/window_joins.py): Spark's inner
stream-stream join answers a trace as Spark's documented rules say, and declines what a Spark
timestamp cannot hold.

Spark's rules used (docs/spark-facts.md, OXJ-R22): one watermark per query, each input's greatest
event time minus its delay (here the allowed lateness, 0), the minimum over the inputs, never
decreasing, 0 before any; micro-batch ``k`` reports (and evicts by) the watermark computed from
batches up to ``k - 1`` and drops rows as late by the one computed up to ``k - 2``; a tumbling
row is late when its window ends at or below that; a pair is emitted in the micro-batch of its
later row. Nothing below is copied from a Spark run.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.engine import Unsupported
from harness.traces import I64_MAX, Item, Trace

SIZE = 10
# (side, key, time, value) per batch; the watermark item is read by nothing (Spark makes its own)
BATCHES: list[list[tuple[str, str, int, int]]] = [
    [("left", "a", 3, 1), ("right", "a", 7, 2), ("right", "a", 12, 3), ("left", "b", 5, 4)],
    [("right", "b", 8, 5), ("left", "a", 15, 6)],
    [("left", "a", 1, 7)],  # window [0, 10) ended by batch 1's watermark, but late only by batch 0's
    [("left", "a", 2, 8)],  # now late: dropped
]


def trace() -> Trace:
    items = [[Item("event", side=s, key=k, event_time=t, value=v) for s, k, t, v in b] for b in BATCHES]
    items[1].append(Item("watermark", time=100))
    return Trace("window_joins", {"join": "tumbling_tumbling", "size_ms": SIZE}, tuple(map(tuple, items)))


def spark_rule() -> tuple[list[tuple[int, int, int, int]], list[int], list[int]]:
    """(micro-batch, seq, left value, right value) of each pair, the watermark each micro-batch
    reports and the rows each drops, from the rules in the module docstring."""
    greatest: dict[str, int] = {}
    ended_with, watermark = [], 0
    for batch in BATCHES:
        for side, _, t, _ in batch:
            greatest[side] = max(greatest.get(side, t), t)
        watermark = max(watermark, min(greatest.get(s, 0) for s in ("left", "right")))
        ended_with.append(watermark)
    reported = [0, *ended_with[:-1]]
    late_by = [0, *reported[:-1]]
    kept, dropped = [], [0] * len(BATCHES)
    for b, batch in enumerate(BATCHES):
        for seq, (side, key, t, value) in enumerate(batch):
            if t // SIZE * SIZE + SIZE <= late_by[b]:
                dropped[b] += 1
            else:
                kept.append((b, seq, side, key, t // SIZE, value))
    pairs = [
        (max(lb, rb), ls if lb > rb else rs if rb > lb else max(ls, rs), lv, rv)
        for lb, ls, s1, k1, w1, lv in kept
        if s1 == "left"
        for rb, rs, s2, k2, w2, rv in kept
        if s2 == "right" and k1 == k2 and w1 == w2
    ]
    return pairs, reported, dropped


@pytest.fixture(scope="module")
def native() -> Any:
    from spark_native.engine import SparkNativeEngine

    return SparkNativeEngine(concurrent_queries=1)


@pytest.fixture(scope="module")
def answered() -> tuple[Any, Any]:
    """The tumbling and the session trace (below) through one engine run, two queries at a time."""
    from spark_native.engine import SparkNativeEngine

    tumbling, sessions = SparkNativeEngine().run([trace(), session_trace()])
    return tumbling, sessions


@pytest.mark.clauses("OXJ-R22")
def test_spark_native_tumbling_join_answers_as_sparks_rules_say(answered: tuple[Any, Any]) -> None:
    output = answered[0]
    pairs, reported, dropped = spark_rule()
    assert sorted((r[0], r[1], r[6], r[10]) for r in output["pairs"]) == sorted(pairs)
    assert (2, 0, 7, 2) in pairs  # a row behind the reported watermark still joins (R22 item 2)
    assert [r[1] for r in output["progress"]] == reported
    assert [r[5] for r in output["progress"]] == [sum(dropped[: b + 1]) for b in range(len(BATCHES))]
    assert dropped[3] == 1 and output["late"] == [] and output["errors"] == []
    assert [r[4] for r in output["progress"]][-1] == len(pairs)


@pytest.mark.clauses("OXJ-R22")
def test_spark_native_a_time_without_a_spark_timestamp_is_declined_as_spark_refuses_it(native: Any) -> None:
    """The reason the module declines with: Spark has no timestamp for i64 max milliseconds."""
    from spark_impl.session import get_spark

    with pytest.raises(Exception, match="DATETIME_OVERFLOW"):
        get_spark().sql(f"SELECT timestamp_millis({I64_MAX}L) AS ts").collect()
    edge = Trace(
        "window_joins",
        {"join": "tumbling_tumbling", "size_ms": SIZE},
        ((Item("event", side="left", key="k", event_time=I64_MAX),),),
    )
    [answer] = native.run([edge])
    assert isinstance(answer, Unsupported) and "DATETIME_OVERFLOW" in str(answer)


@pytest.mark.clauses("OXJ-R22")
def test_spark_native_a_delay_longer_than_a_spark_interval_is_declined_as_spark_refuses_it(
    native: Any,
) -> None:
    """The other reason: Spark's intervals count microseconds in 64 bits, so an allowed lateness
    (the query's delay) beyond that cannot be written as ``withWatermark``'s delay."""
    from spark_impl.session import get_spark
    from spark_native.common import TIMESTAMP_LIMIT_MS

    too_long = TIMESTAMP_LIMIT_MS + 1
    rows = get_spark().range(1).selectExpr("timestamp_millis(id) AS ts")
    with pytest.raises(Exception, match="CANNOT_PARSE_INTERVAL"):  # .schema: Connect plans lazily
        rows.withWatermark("ts", f"{too_long} milliseconds").schema  # noqa: B018 - analysing is the probe
    config = {"join": "session_session", "gap_ms": 1, "allowed_lateness_ms": too_long}
    late = Trace("window_joins", config, ((Item("event", side="left", key="k", event_time=0),),))
    [answer] = native.run([late])
    assert isinstance(answer, Unsupported) and "CANNOT_PARSE_INTERVAL" in str(answer)


GAP = 10
SIDES = ("left", "right")
# session x session, delay (allowed lateness) 0: (side, key, time) per batch; value = the item's
# place in the whole trace. Key q is the clock that moves Spark's watermark.
SESSION_BATCHES: list[list[tuple[str, str, int]]] = [
    [
        ("left", "a", 100), ("right", "a", 105), ("left", "q", 100), ("right", "q", 100),
        ("left", "t", 90), ("right", "t", 100), ("left", "n", 90), ("right", "n", 101),
        ("left", "m", 100), ("left", "m", 120),
    ],
    [("right", "a", 112), ("left", "q", 115), ("right", "q", 115), ("left", "m", 110), ("right", "m", 125)],
    [("right", "a", 121), ("left", "q", 125), ("right", "q", 125)],
    [("right", "a", 131), ("left", "q", 135), ("right", "q", 135), ("left", "z", 100)],
    [("left", "q", 145), ("right", "q", 145)],
    [],
]  # fmt: skip


def session_trace() -> Trace:
    values = iter(range(1000))
    items = [
        [Item("event", side=s, key=k, event_time=t, value=next(values)) for s, k, t in b]
        for b in SESSION_BATCHES
    ]
    config = {"join": "session_session", "gap_ms": GAP}
    return Trace("window_joins", config, tuple(map(tuple, items)))


def session_spark_rule() -> tuple[list[tuple[int, str, int, int]], list[int], list[int]]:
    """(micro-batch, key, left time, right time) of each pair, the watermark each micro-batch
    reports and the rows each drops, from Spark's documented rules (docs/spark-facts.md): the
    watermark as in ``spark_rule``; a row is dropped when ``time + gap`` is at or below the
    previous micro-batch's watermark; a session covers ``[first, last + gap)`` and sessions that
    overlap or touch merge, also with the sessions a side holds from earlier micro-batches; a
    session is emitted in the first micro-batch whose watermark reaches its end; the join pairs a
    left and a right session of a key whose ``[start, end]`` intersect (the module's condition),
    in the micro-batch of the later of the two, one row per left event and right event."""
    greatest: dict[str, int] = {}
    ended_with, watermark = [], 0
    for batch in SESSION_BATCHES:
        for side, _, t in batch:
            greatest[side] = max(greatest.get(side, t), t)
        watermark = max(watermark, min(greatest.get(s, 0) for s in SIDES))
        ended_with.append(watermark)
    reported = [0, *ended_with[:-1]]
    late_by = [0, *reported[:-1]]
    held: dict[tuple[str, str], list[list[int]]] = {}  # (side, key) -> sessions as sorted times
    emitted: list[tuple[int, str, str, list[int]]] = []  # (micro-batch, side, key, times)
    dropped = [0] * len(SESSION_BATCHES)
    for b, batch in enumerate(SESSION_BATCHES):
        for side, key, t in batch:
            if t + GAP <= late_by[b]:
                dropped[b] += 1
                continue
            touching = [s for s in held.get((side, key), []) if s[0] <= t + GAP and t <= s[-1] + GAP]
            rest = [s for s in held.get((side, key), []) if s not in touching]
            held[(side, key)] = [*rest, sorted([t, *(u for s in touching for u in s)])]
        for (side, key), sessions in held.items():
            emitted += [(b, side, key, s) for s in sessions if s[-1] + GAP <= reported[b]]
            held[(side, key)] = [s for s in sessions if s[-1] + GAP > reported[b]]
    pairs = [
        (max(lb, rb), lk, lt, rt)
        for lb, ls, lk, a in emitted
        if ls == "left"
        for rb, rs, rk, c in emitted
        if rs == "right" and lk == rk and a[0] <= c[-1] + GAP and c[0] <= a[-1] + GAP
        for lt in a
        for rt in c
    ]
    return pairs, reported, dropped


@pytest.mark.clauses("OXJ-R22")
def test_spark_native_session_join_pairs_sparks_sessions_as_sparks_rules_say(
    answered: tuple[Any, Any],
) -> None:
    output = answered[1]
    pairs, reported, dropped = session_spark_rule()
    assert sorted((r[0], r[2], r[5], r[9]) for r in output["pairs"]) == sorted(pairs)
    assert {r[1] for r in output["pairs"]} == {None}  # Spark's watermark emits them, no item
    # the rule's pairs, by hand: touching sessions pair (t) and sessions 1 ms apart do not (n);
    # a bridging event merges two sessions (m); a session waits in the join's state for a
    # partner that keeps growing (a); its events pair as a cross product
    assert sorted(pairs) == [
        (2, "q", 100, 100), (2, "t", 90, 100),
        (4, "m", 100, 125), (4, "m", 110, 125), (4, "m", 120, 125),
        (5, "a", 100, 105), (5, "a", 100, 112), (5, "a", 100, 121), (5, "a", 100, 131),
    ]  # fmt: skip
    places = [(b, s) for b, batch in enumerate(SESSION_BATCHES) for s in range(len(batch))]
    values = {place: v for v, place in enumerate(places)}
    for row in output["pairs"]:  # each event's own batch, seq and value
        assert values[(row[3], row[4])] == row[6] and values[(row[7], row[8])] == row[10]
    assert [r[1] for r in output["progress"]] == reported
    assert [r[5] for r in output["progress"]] == [sum(dropped[: b + 1]) for b in range(len(SESSION_BATCHES))]
    assert dropped == [0, 0, 0, 1, 0, 0]  # left z at 100: 100 + gap <= 120
    assert [r[4] for r in output["progress"]] == [sum(1 for p in pairs if p[0] <= b) for b in range(6)]
    assert output["late"] == [] and output["errors"] == []
