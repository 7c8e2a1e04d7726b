"""spark-native (Spark's own built-ins) on the watermark areas: keyed_watermarks (F065),
partitioned_watermarks (F064), watermark_propagation (OXW), eventtime_buffer (VELO) and
sla_admission (OXS).

The expressed areas are checked against Spark's documented watermark rule, computed here
(``SparkWatermarkModel``), never against a recorded run: one watermark per query, the largest
event time seen in the micro-batches before minus the delay, never lowered, 0 at first; a
stateful operator drops a row whose watermark column is at or below the previous micro-batch's
watermark (docs/spark-facts.md, "Spark's watermark"). The declined areas get a probe each that
shows what Spark refuses or lacks. No test names a clause: they check Spark's own operators
(the spark-native engine), and a clause mark would count them for the ``spark`` engine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.engine import Unsupported
from harness.traces import Item, Trace

DELAY, WINDOW = 5000, 10000


class SparkWatermarkModel:
    """Spark's rule over a trace's batches of event times: ``before[k]`` is the watermark
    micro-batch k runs with (evicts and fires by), ``late_by[k]`` the one it drops rows by."""

    def __init__(self, batches: list[list[int]], delay: int) -> None:
        self.before = [0]
        for times in batches:
            self.before.append(max(self.before[-1], max(times) - delay) if times else self.before[-1])
        self.late_by = [0] + self.before[: len(batches) - 1]
        self.seen = [any(batches[: k + 1]) for k in range(len(batches))]

    def after(self, batch: int) -> int | None:
        return self.before[batch + 1] if self.seen[batch] else None


def keyed_trace() -> Trace:
    def ev(key: str, t: int, v: int) -> Item:
        return Item("event", key=key, event_time=t, value=v)

    return Trace(
        "keyed_watermarks",
        {"bounded_delay": DELAY, "window_size": WINDOW},
        (
            (ev("a", 10000, 1), ev("a", 15000, 2), ev("b", 5000, 3)),
            (ev("b", 3000, 4), ev("a", 3000, 5)),  # behind the watermark, but judged by batch 0's (0)
            (ev("b", 4000, 6), ev("a", 30000, 7)),  # b at 4000 is late by batch 1's watermark
            (ev("b", 11000, 8), ev("a", 10000, 9)),  # a at 10000: late as a row, its window still open
            (),
        ),
        name="one watermark for every key",
    )


def expected_keyed(trace: Trace) -> dict[str, list[tuple[Any, ...]]]:
    """The tables Spark's rule gives: rows late at or below the previous batch's watermark; a
    window's rows late once its end is; a window emitted in the batch whose watermark reaches its end."""
    batches = [[item.event_time for item in batch] for batch in trace.batches]
    model = SparkWatermarkModel(batches, DELAY)
    events, windows = [], []
    open_windows: dict[tuple[str, int], list[int]] = {}
    for k, batch in enumerate(trace.batches):
        for seq, item in enumerate(batch):
            late = item.event_time <= model.late_by[k]
            events.append(
                (k, seq, item.key, item.event_time, model.late_by[k], "late" if late else "on_time")
            )
            start = item.event_time - item.event_time % WINDOW
            if start + WINDOW > model.late_by[k]:
                open_windows.setdefault((item.key, start), []).append(item.value)
        for (key, start), values in sorted(open_windows.items()):
            if start + WINDOW <= model.before[k]:
                windows.append((k, key, start, start + WINDOW, len(values), sum(values)))
                del open_windows[(key, start)]
    progress = [(k, model.after(k), None, None, None, None, None, None, None) for k in range(len(batches))]
    return {"events": events, "progress": progress, "windows": windows}


@pytest.fixture(scope="module")
def spark() -> Any:
    from spark_impl.session import get_spark

    return get_spark()


def test_spark_native_keyed_watermarks_follow_the_one_query_watermark(spark: Any) -> None:
    import spark_impl.keyed_watermarks as rules
    from spark_native.keyed_watermarks import answer

    trace = keyed_trace()
    got = answer(spark, trace, rules.validate_config(trace.config))
    assert not isinstance(got, Unsupported)
    want = expected_keyed(trace)
    assert {t: sorted(got.get(t, [])) for t in want} == {t: sorted(rows) for t, rows in want.items()}
    # the fast key makes the slow key late (against F065-R4) ...
    assert ("b", 4000, "late") in {(r[2], r[3], r[5]) for r in got["events"]}
    # ... and a row late by its own time still counts in a window whose end is ahead of the watermark
    assert (3, "a", 10000, 20000, 3, 12) in got["windows"]


def test_spark_native_partitioned_watermark_is_the_maximum_over_partitions(spark: Any) -> None:
    import spark_impl.partitioned_watermarks as rules
    from spark_native.partitioned_watermarks import answer

    lateness = 1000
    batches = [[10000, 1000], [20000, 2000], [], [-5000]]
    trace = Trace(
        "partitioned_watermarks",
        {"max_lateness": lateness},
        [
            [Item("event", source=0, partition=p, event_time=t) for p, t in enumerate(times)]
            for times in batches
        ],
    )
    got = answer(spark, trace, rules.validate_config(trace.config))
    assert not isinstance(got, Unsupported)
    model = SparkWatermarkModel(batches, lateness)
    assert got["progress"] == [(k, model.after(k), None, None, None, None, None) for k in range(len(batches))]
    # the slow partition (1000, 2000) never holds it back: F064-R6 would report 0 and 1000
    assert [row[1] for row in got["progress"][:2]] == [9000, 19000]


def test_partitioned_watermark_items_are_declined_before_spark_is_asked() -> None:
    import spark_impl.partitioned_watermarks as rules
    from spark_native.partitioned_watermarks import answer

    trace = Trace("partitioned_watermarks", {}, [[Item("watermark", source=0, partition=0, time=5000)]])
    assert isinstance(answer(None, trace, rules.validate_config(trace.config)), Unsupported)


@pytest.mark.parametrize("area", ["eventtime_buffer", "sla_admission", "watermark_propagation"])
def test_declined_areas_decline_with_their_reason(area: str) -> None:
    import importlib

    module = importlib.import_module(f"spark_native.{area}")
    got = module.answer(None, Trace(area, {}, [[]]), None)
    assert isinstance(got, Unsupported) and str(got) == module.REASON


def test_spark_refuses_to_sort_a_stream_in_append_mode(spark: Any) -> None:
    """The eventtime_buffer probe: a reorder buffer would be a sort by event time of what the
    watermark releases; Spark refuses a streaming sort outside complete-mode aggregations."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F  # noqa: N812

    stream = spark.readStream.format("rate").load().withWatermark("timestamp", "1 second")
    with pytest.raises(AnalysisException, match="Sorting is not supported"):
        stream.orderBy(F.col("timestamp")).writeStream.format("noop").outputMode("append").start()


def _json_files(folder: Path, files: list[list[int]]) -> str:
    folder.mkdir()
    for n, times in enumerate(files):
        rows = "\n".join(json.dumps({"n": n, "ms": t}) for t in times)
        path = folder / f"part-{n}.json"
        path.write_text(rows + "\n", encoding="utf-8")
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))  # the file source reads oldest first
    return str(folder)


def _batches(spark: Any, df: Any, tmp_path: Path) -> tuple[list[list[dict[str, Any]]], list[Any]]:
    from spark_native.common import BatchRows

    collect = BatchRows(spark, str(tmp_path / "written"))
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seen = collect.by_batch(spark)
    return [[r.asDict() for r in seen[k]] for k in sorted(seen)], list(query.recentProgress)


def test_spark_input_caps_defer_input_and_never_reject_by_lag(spark: Any, tmp_path: Path) -> None:
    """The sla_admission probe: maxFilesPerTrigger, Spark's kind of rate limit, reads one file per
    micro-batch and passes every record on, however far its event time lags behind the others."""
    files = [[1_000_000, 1_000_100], [5], [1_000_200]]  # the middle file lags by 1000 s
    folder = _json_files(tmp_path / "in", files)
    df = spark.readStream.schema("n long, ms long").option("maxFilesPerTrigger", 1).json(folder)
    batches, _ = _batches(spark, df, tmp_path)
    assert [sorted(r["ms"] for r in rows) for rows in batches if rows] == [sorted(f) for f in files]


def test_spark_reports_one_watermark_per_query_whatever_its_inputs(spark: Any, tmp_path: Path) -> None:
    """The watermark_propagation probe: two inputs with their own event times and delays give one
    query watermark per micro-batch, the minimum of the inputs' (max - delay); nothing per input."""
    from pyspark.sql import functions as F  # noqa: N812

    def stream(name: str, files: list[list[int]], delay_ms: int) -> Any:
        folder = _json_files(tmp_path / name, files)
        raw = spark.readStream.schema("n long, ms long").option("maxFilesPerTrigger", 1).json(folder)
        timed = raw.withColumn("ts", F.timestamp_millis("ms"))
        return timed.withWatermark("ts", f"{delay_ms} milliseconds")

    fast = stream("fast", [[50_000], [90_000]], 1000)
    slow = stream("slow", [[20_000], [30_000]], 5000)
    _, progress = _batches(spark, fast.unionByName(slow).dropDuplicates(["n", "ms", "ts"]), tmp_path)
    reports = [json.loads(p.json) if hasattr(p, "json") else p for p in progress]
    watermarks = [r["eventTime"]["watermark"] for r in reports]
    assert all(set(r["eventTime"]) <= {"avg", "max", "min", "watermark"} for r in reports)
    assert watermarks[1] == "1970-01-01T00:00:15.000Z"  # min(50 s - 1 s, 20 s - 5 s)
