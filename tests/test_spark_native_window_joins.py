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


@pytest.mark.clauses("OXJ-R22")
def test_spark_native_tumbling_join_answers_as_sparks_rules_say(native: Any) -> None:
    [output] = native.run([trace()])
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
