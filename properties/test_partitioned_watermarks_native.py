"""F064 against Spark's own watermark: what per-partition watermarks change.

One short streaming query (``native_watermark_report``): two partitions of
one source, a fast one (10 s of event time per batch) and a slow one (1 s per
batch), through ``withWatermark(ts, delay)`` and a stateful aggregation.
Expected values follow Spark's documented rules (docs/spark-facts.md,
"Spark's watermark"), not a recorded run:

* the watermark is ONE value per query: max event time seen (over every
  partition) minus the delay, updated between micro-batches, so the
  watermark of micro-batch k is ``max over batches < k`` minus the delay
  (0 in batch 0);
* rows are dropped as late against the previous batch's watermark
  (``ts <= previous``), so the slow partition's rows are dropped from the
  batch where the fast partition has pulled the watermark past them.

F064 instead holds the combined watermark at the slow partition (F064-R6: the
minimum over active partitions; R7: it only rises) and drops nothing; the
Spark engine's equality with the oracle is checked by the differential tests.
"""

from __future__ import annotations

import pytest

from harness.traces import Item, Trace
from reference.partitioned_watermarks import run_trace

DELAY = 1000
FAST, SLOW = 10_000, 1_000  # event time per batch of partition 0 and partition 1
BATCHES = 4


def _trace() -> Trace:
    batches = [
        [Item("event", source=0, partition=0, event_time=FAST * (k + 1)),
         Item("event", source=0, partition=1, event_time=SLOW * (k + 1))]
        for k in range(BATCHES)
    ]  # fmt: skip
    batches[0].insert(0, Item("register_source", source=0, count=2))
    return Trace("partitioned_watermarks", {"max_lateness": DELAY}, batches, name="fast and slow partition")


@pytest.mark.clauses("F064-R6", "F064-R7")
def test_spark_watermark_follows_the_fast_partition_and_drops_the_slow_one() -> None:
    from spark_impl.partitioned_watermarks import native_watermark_report
    from spark_impl.session import get_spark

    trace = _trace()
    report = native_watermark_report(get_spark(), trace, DELAY)
    data = [r for r in report if r["input_rows"]]
    assert [r["batch_id"] for r in data] == list(range(BATCHES))

    # Spark: one watermark = max event time seen before the batch (the fast partition's) - delay.
    expected_wm = [0] + [FAST * k - DELAY for k in range(1, BATCHES)]
    assert [r["watermark"] for r in data] == expected_wm
    # A row is late when ts <= the previous batch's watermark: only slow rows, from batch 2 on.
    slow_late = [k >= 1 and SLOW * (k + 1) <= expected_wm[k - 1] for k in range(BATCHES)]
    fast_late = [k >= 1 and FAST * (k + 1) <= expected_wm[k - 1] for k in range(BATCHES)]
    assert not any(fast_late)
    assert [r["dropped_late"] for r in data] == [int(x) for x in slow_late]
    assert sum(slow_late) == BATCHES - 2

    # F064: the combined watermark is held by the slow partition (R6, R7), one row per batch.
    combined = [row[1] for row in sorted(run_trace(trace)["progress"])]
    assert combined == [SLOW * (k + 1) - DELAY for k in range(BATCHES)]
    # After batch k Spark's watermark is the next batch's: far ahead of ours, which drops nothing.
    spark_after = [r["watermark"] for r in report[1:]]
    assert all(ours < theirs for ours, theirs in zip(combined, spark_after, strict=False))
