"""``--engine spark-native`` on exactly-once aggregation (spark_native/exactly_once_aggregation.py):
Spark's ``dropDuplicatesWithinWatermark`` and ``groupBy().agg()`` answer a trace as Spark's
documented rules say, and a sequence that is no Spark timestamp is declined.

Spark's rules used (OXE-R20, docs/spark-facts.md): the time is the sequence in milliseconds and
the delay the window; one watermark per query, the greatest time so far minus the delay, never
decreasing, 0 before any; micro-batch ``k`` drops rows as late (time at or below it) by the
watermark computed from batches up to ``k - 2`` (0 for the first two); an id already kept and
not yet expired (the eviction watermark has not passed its time plus the delay) is dropped as a
duplicate, so is a second delivery in one micro-batch; update mode writes each key whose
aggregate changed in the micro-batch. Nothing below is copied from a Spark run.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.engine import Unsupported
from harness.traces import I64_MAX, Item, Trace

WINDOW = 4
# (producer, partition, sequence, key, amount) per batch
BATCHES: list[list[tuple[int, int, int, str, float]]] = [
    [(1, 0, 1, "a", 1.0), (1, 0, 2, "a", 2.0), (1, 0, 2, "a", 2.0)],  # a second delivery in the batch
    [(1, 0, 1, "a", 1.0), (1, 0, 20, "b", 5.0)],  # a re-delivery Spark still holds: duplicate
    [(2, 0, 3, "c", 4.0)],
    [(1, 0, 2, "a", 2.0)],  # behind the watermark (16 from batch 1): dropped as late
]


def trace() -> Trace:
    rows = [
        [Item("event", producer=p, partition=q, sequence=s, key=k, amount=x) for p, q, s, k, x in b]
        for b in BATCHES
    ]
    return Trace(
        "exactly_once_aggregation", {"aggregate": "sum", "dedup_window": WINDOW}, tuple(map(tuple, rows))
    )


def spark_rule() -> tuple[
    set[tuple[int, int]], dict[tuple[int, str], float], list[tuple[int, int, int, int]]
]:
    """(batch, seq) of every kept row, each updated key's sum by batch, and the progress
    counters (kept, duplicates, late, keys) so far, by the rules in the module docstring."""
    ended_with, watermark, greatest = [], 0, 0
    for batch in BATCHES:
        greatest = max([greatest, *(s for _, _, s, _, _ in batch)])
        watermark = max(watermark, greatest - WINDOW)
        ended_with.append(watermark)
    evicting = [0, *ended_with[:-1]]
    late_by = [0, *evicting[:-1]]
    held: dict[tuple[int, int, int], int] = {}  # id -> its expiry (time plus the delay)
    kept, sums, progress = set(), {}, []
    total: dict[str, float] = {}
    counts = [0, 0, 0]
    for b, batch in enumerate(BATCHES):
        for seq, (p, q, s, key, x) in enumerate(batch):
            if s <= late_by[b]:
                counts[2] += 1
            elif (p, q, s) in held:
                counts[1] += 1
            else:
                held[(p, q, s)] = s + WINDOW
                kept.add((b, seq))
                counts[0] += 1
                total[key] = total.get(key, 0.0) + x
                sums[(b, key)] = total[key]
        held = {i: e for i, e in held.items() if e > evicting[b]}  # evicted at the batch end
        progress.append((counts[0], counts[1], counts[2], len(total)))
    return kept, sums, progress


@pytest.fixture(scope="module")
def native() -> Any:
    from spark_native.engine import SparkNativeEngine

    return SparkNativeEngine(concurrent_queries=1)


@pytest.mark.clauses("OXE-R20")
def test_spark_native_deduplication_and_sum_answer_as_sparks_rules_say(native: Any) -> None:
    [output] = native.run([trace()])
    kept, sums, progress = spark_rule()
    assert {(r[0], r[1]) for r in output["messages"]} == kept
    assert {r[6] for r in output["messages"]} == {"folded"}
    assert {(r[0], r[1]): float(r[3]) for r in output["aggregates"]} == sums
    assert [tuple(r[1:]) for r in sorted(output["progress"])] == progress
    assert progress[-1][1:3] == (2, 1) and output["errors"] == []


@pytest.mark.clauses("OXE-R20")
def test_spark_native_a_sequence_without_a_spark_timestamp_is_declined_as_spark_refuses_it(
    native: Any,
) -> None:
    """The reason the module declines with: Spark has no timestamp for i64 max milliseconds."""
    from spark_impl.session import get_spark

    with pytest.raises(Exception, match="DATETIME_OVERFLOW"):
        get_spark().sql(f"SELECT timestamp_millis({I64_MAX}L) AS ts").collect()
    edge = Trace(
        "exactly_once_aggregation",
        {},
        ((Item("event", producer=1, partition=0, sequence=I64_MAX, key="k", amount=1.0),),),
    )
    [answer] = native.run([edge])
    assert isinstance(answer, Unsupported) and "DATETIME_OVERFLOW" in str(answer)
