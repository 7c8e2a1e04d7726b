"""``--engine spark-native`` on late data (spark_native/late_data.py).

* One small trace through ``SparkNativeEngine``: its tables equal what Spark's documented
  rules for a windowed count predict (docs/spark-facts.md and the adapter's mapping in the
  module docstring), computed here by ``spark_rules_prediction`` from the trace alone.
* The probe behind the ``Reassign`` / ``SideOutput`` decline: ``withWatermark`` takes no policy,
  and a row it drops reaches no output of the query; only ``numRowsDroppedByWatermark`` counts it.
"""

from __future__ import annotations

import inspect
from typing import Any

from harness.engine import Unsupported
from harness.traces import Item, Trace

SIZE = 1000
LATENESS = 500


def _trace(config: dict[str, Any], batches: list[list[Item]], name: str = "") -> Trace:
    return Trace("late_data", config, tuple(tuple(b) for b in batches), name=name)


def _e(t: int | None, source: int | None = 1) -> Item:
    return Item("event", event_time=t, source=source)


def _w(t: int | None, source: int | None = 1) -> Item:
    return Item("watermark", time=t, source=source)


TRACE = _trace(
    {"window_size": SIZE, "allowed_lateness": LATENESS},
    [
        [_w(2000), _e(1200), _e(300), Item("clock", time=50)],
        [_e(700), _e(1500), _e(None), Item("clock", time=10)],
        [_e(800), _w(3000), _w(None)],
        [],
    ],
    name="native late data",
)


def spark_rules_prediction(trace: Trace) -> dict[str, list[tuple[Any, ...]]]:
    """What the adapter must report, from Spark's documented rules for ``withWatermark(ts,
    allowed_lateness)`` and ``window(ts, window_size)`` in append mode: micro-batch k runs with
    ``max(0, greatest time before k - D)``, drops a row whose window end is at or below the
    watermark micro-batch k - 1 ran with, and emits a window once its end is at or below the
    watermark it runs with (reported plus D, with no closing item)."""
    delay = trace.config["allowed_lateness"]
    size = trace.config["window_size"]
    greatest: int | None = None
    ran_with_before = 0
    clock = 0
    counts: dict[tuple[Any, int], int] = {}
    out: dict[str, list[tuple[Any, ...]]] = {"events": [], "windows": [], "progress": [], "errors": []}
    kept = dropped = 0
    for b, batch in enumerate(trace.batches):
        ran_with = 0 if greatest is None else max(0, greatest - delay)
        for seq, item in enumerate(batch):
            t = item.event_time if item.kind == "event" else item.time
            if t is None:
                out["errors"].append(
                    (b, seq, "missing_event_time" if item.kind == "event" else "missing_time")
                )
                continue
            if item.kind == "clock":
                if t < clock:
                    out["errors"].append((b, seq, "clock_went_backwards"))
                clock = max(clock, t)
                continue
            greatest = t if greatest is None else max(greatest, t)
            if item.kind == "event":
                start = t // size * size
                if start + size <= ran_with_before:
                    dropped += 1
                    out["events"].append((b, seq, item.source, t, None, None, None, None, None))
                else:
                    kept += 1
                    counts[(item.source, start)] = counts.get((item.source, start), 0) + 1
                    out["events"].append((b, seq, item.source, t, None, None, None, t, None))
        for (source, start), n in sorted(counts.items()):
            if start + size <= ran_with:
                out["windows"].append((b, None, source, start, start + size, ran_with + delay, n))
                del counts[(source, start)]
        out["progress"].append((b, kept, 0, 0, dropped, 0, len(counts)))
        ran_with_before = ran_with
    return out


def test_spark_native_late_data_follows_sparks_documented_rules() -> None:
    from spark_impl.session import get_spark
    from spark_native.engine import SparkNativeEngine

    [output] = SparkNativeEngine(get_spark()).run([TRACE])
    assert not isinstance(output, Exception), output
    expected = spark_rules_prediction(TRACE)
    for table, rows in expected.items():
        assert sorted(output.get(table, []), key=repr) == sorted(rows, key=repr), table
    assert not output.get("side_outputs")
    # the trace shows the mapping's claims: a row of a closed window dropped (no assigned time),
    # two windows closed
    assert expected["progress"][-1][4] == 1 and len(expected["windows"]) == 2
    assert [e[:2] for e in expected["events"] if e[7] is None] == [(2, 0)]


def test_spark_native_declines_reassign_and_side_output_and_a_dropped_row_goes_nowhere() -> None:
    """Probe for the policy decline: ``withWatermark`` has no policy parameter, and the row it
    drops is in no output row of the query, only in its counter."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    from spark_impl.late_data import validate_config
    from spark_impl.session import get_spark
    from spark_native.common import TS, dropped_by_watermark, run_trace
    from spark_native.late_data import answer

    assert list(inspect.signature(DataFrame.withWatermark).parameters) == [
        "self",
        "eventTime",
        "delayThreshold",
    ]
    spark = get_spark()
    for config in ({"policy": "Reassign", "max_lateness": 10}, {"policy": "SideOutput", "channel": "late"}):
        trace = _trace(config, [[_e(5)]])
        assert isinstance(answer(spark, trace, validate_config(config)), Unsupported)

    probe = _trace({}, [[_e(5000)], [_e(4000)], [_e(10)], []])

    def build(df: Any) -> Any:
        events = df.filter(F.col("kind") == "event").withColumn(TS, F.timestamp_millis("event_time"))
        return events.withWatermark(TS, "0 milliseconds").select("seq", "batch", "event_time")

    run = run_trace(spark, probe, build)
    # a stateless query drops nothing: every row comes out; with a windowed count the late row
    # (batch 2, time 10, below the watermark 5000 batch 1 ran with) is counted and written nowhere
    assert sorted(r["event_time"] for _, r in run.rows) == [10, 4000, 5000]

    def windowed(df: Any) -> Any:
        events = df.filter(F.col("kind") == "event").withColumn(TS, F.timestamp_millis("event_time"))
        return (
            events.withWatermark(TS, "0 milliseconds")
            .groupBy(F.window(TS, "1 millisecond").alias("w"))
            .agg(F.collect_list("event_time").alias("times"))
        )

    run = run_trace(spark, probe, windowed)
    written = sorted(t for _, r in run.rows for t in r["times"])
    assert 10 not in written and sum(dropped_by_watermark(p) for p in run.progress) == 1
