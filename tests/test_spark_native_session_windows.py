"""``--engine spark-native`` on session windows (spark_native/session_windows.py).

* One small trace through ``SparkNativeEngine``: its tables equal what Spark's documented
  rules predict (docs/spark-facts.md, "Spark's own operators", and the adapter's mapping in
  the module docstring), computed here by ``spark_rules_prediction`` from the trace alone,
  never from a recorded run.
* The ``end`` item as a sentinel row, and the probe that shows why it needs one: a session
  still open when the input stops is never emitted (no end-of-input flush).
* The probe behind the module's ``Unsupported`` reason: ``timestamp_millis`` cannot take an
  event time beyond Spark's microsecond range.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.engine import Unsupported
from harness.traces import I64_MAX, Item, Trace

GAP = 1000


def _trace(config: dict[str, Any], batches: list[list[Item]], name: str = "") -> Trace:
    return Trace("session_windows", config, tuple(tuple(b) for b in batches), name=name)


def _e(key: str | None, t: int | None, v: int = 0) -> Item:
    return Item("event", key=key, event_time=t, value=v)


TRACE = _trace(
    {"gap": GAP, "bounded_delay": 200, "allowed_lateness": 300},
    [
        [_e("a", 0, 1), _e("a", 500, 2), _e("c", 5000, 4), _e(None, 10)],
        [_e("c", 4500, 8), _e("b", 6000, 16), Item("clock", time=5)],
        [_e("d", 6000, 64), _e("b", 7000, 32), _e("a", 100, 128)],
        [],
        [],
    ],
    name="native session windows",
)


def spark_rules_prediction(trace: Trace) -> dict[str, list[tuple[Any, ...]]]:
    """What the adapter must report, from Spark's documented rules with ``D = bounded_delay +
    allowed_lateness + 1``: micro-batch k runs with ``max(0, greatest time before k - D)``, drops
    a row whose ``t + gap`` is at or below the watermark micro-batch k - 1 ran with, merges
    ``[t, t + gap)`` ranges that touch, and emits a session once its end is at or below the
    watermark it runs with."""
    config = trace.config
    delay = config["bounded_delay"] + config["allowed_lateness"] + 1
    open_sessions: list[list[Any]] = []  # [key, start, end, count, sum]
    greatest: int | None = None
    ran_with_before = 0
    out: dict[str, list[tuple[Any, ...]]] = {"sessions": [], "progress": [], "errors": []}
    closed = dropped = 0
    for b, batch in enumerate(trace.batches):
        ran_with = 0 if greatest is None else max(0, greatest - delay)
        for seq, item in enumerate(batch):
            if item.kind != "event":
                out["errors"].append((b, seq, "unsupported_item"))
                continue
            if item.key is None:
                out["errors"].append((b, seq, "missing_key"))
                continue
            t = int(item.event_time or 0)
            greatest = t if greatest is None else max(greatest, t)
            if t + GAP <= ran_with_before:
                dropped += 1
                continue
            lo, hi, n, total = t, t + GAP, 1, item.value
            for s in [s for s in open_sessions if s[0] == item.key and s[1] <= hi and lo <= s[2]]:
                lo, hi, n, total = min(lo, s[1]), max(hi, s[2]), n + s[3], total + s[4]
                open_sessions.remove(s)
            open_sessions.append([item.key, lo, hi, n, total])
        for s in [s for s in open_sessions if s[2] <= ran_with]:
            out["sessions"].append((b, s[0], s[1], s[2], s[3], s[4], "watermark"))
            open_sessions.remove(s)
            closed += 1
        watermark = None if greatest is None else greatest - config["bounded_delay"]
        out["progress"].append((b, watermark, len(open_sessions), 0, closed, dropped))
        ran_with_before = ran_with
    return out


LATE_MERGE = _trace(
    {"gap": GAP, "bounded_delay": 0, "allowed_lateness": 0},
    [[_e("k", 5000)], [_e("k", 10000)], [], [], [_e("k", 9500)], [_e("k", 20000)], [], []],
    name="a late event merges, no allowed lateness",
)


@pytest.fixture(scope="module")
def answered() -> dict[str, Any]:
    """Both traces through SparkNativeEngine in one run (its queries run two at a time)."""
    from spark_impl.session import get_spark
    from spark_native.engine import SparkNativeEngine

    outputs = SparkNativeEngine(get_spark()).run([TRACE, LATE_MERGE])
    for output in outputs:
        assert not isinstance(output, Exception), output
    return dict(zip((TRACE.name, LATE_MERGE.name), outputs, strict=True))


def test_spark_native_session_windows_follow_sparks_documented_rules(answered: dict[str, Any]) -> None:
    output = answered[TRACE.name]
    expected = spark_rules_prediction(TRACE)
    for table, rows in expected.items():
        assert sorted(output.get(table, []), key=repr) == sorted(rows, key=repr), table
    assert not output.get("late") and not output.get("timers")
    # the trace shows what the mapping claims: a late row dropped, sessions emitted a batch late
    assert expected["progress"][-1][5] >= 1 and len(expected["sessions"]) >= 2


def test_spark_keeps_and_merges_an_event_the_spec_calls_late_whatever_the_delay_mapping(
    answered: dict[str, Any],
) -> None:
    """The "late events merge into sessions" finding is Spark's rule, not the delay mapping: with no
    allowed lateness Spark's delay is the spec's plus the millisecond that makes both watermarks one
    promise, and still the event at 9500, below the watermark 10000, is kept (Spark drops a row only
    when its own session [t, t + gap) ends at or below the watermark) and extends the next session."""
    from reference.session_windows import run_trace as oracle
    from spark_impl.session_windows import validate_config
    from spark_native.session_windows import spark_delay_ms

    assert spark_delay_ms(validate_config(LATE_MERGE.config)) == 1
    output = answered[LATE_MERGE.name]
    expected = spark_rules_prediction(LATE_MERGE)
    assert sorted(output["sessions"]) == sorted(expected["sessions"])
    assert any(row[1:5] == ("k", 9500, 11000, 2) for row in output["sessions"])
    assert [row[:4] for row in oracle(LATE_MERGE)["late"]] == [(4, 0, "k", 9500)]  # late by the spec


def test_spark_native_ends_the_input_with_a_sentinel_row() -> None:
    """Why the ``end`` item becomes a sentinel row, and what it gives: a query whose input stops
    emits nothing of a session its watermark has not reached (it stays in the state); with the
    sentinel (an event of its own key far enough ahead) the session comes out in the micro-batch
    after the end's, the sentinel's own session is not reported, and the items after the end are
    ``after_end`` error rows."""
    from pyspark.sql import functions as F

    from spark_impl.session import get_spark
    from spark_impl.session_windows import validate_config
    from spark_native.common import TS, run_trace, state_rows
    from spark_native.session_windows import answer

    spark = get_spark()
    trace = _trace({"gap": GAP}, [[_e("a", 1000, 1)], []])

    def build(df: Any) -> Any:
        events = df.filter(F.col("kind") == "event").withColumn(TS, F.timestamp_millis("event_time"))
        return (
            events.withWatermark(TS, "0 milliseconds")
            .groupBy("key", F.session_window(TS, "1 second"))
            .count()
        )

    run = run_trace(spark, trace, build)
    assert run.rows == []  # the session [1000, 2000) is never written ...
    assert state_rows(run.progress_of(1)) == 1  # ... it stays in the state after the last batch

    with_end = _trace({"gap": GAP}, [[_e("a", 1000, 1), Item("end"), _e("a", 1500, 2)], []])
    output = answer(spark, with_end, validate_config(with_end.config))
    assert not isinstance(output, Unsupported), output
    assert output["sessions"] == [(1, "a", 1000, 2000, 1, 1, "watermark")]
    assert output["errors"] == [(0, 2, "after_end")]
    assert [row[:3] for row in output["progress"]] == [(0, I64_MAX, 1), (1, I64_MAX, 0)]


def test_spark_native_declines_times_beyond_sparks_timestamps() -> None:
    """Probe for the time-range decline: ``timestamp_millis`` of i64 max overflows."""
    from pyspark.sql import functions as F

    from spark_impl.session import get_spark
    from spark_impl.session_windows import validate_config
    from spark_native.session_windows import answer

    spark = get_spark()
    with pytest.raises(Exception, match="OVERFLOW"):
        spark.range(1).select(F.timestamp_millis(F.lit(I64_MAX))).collect()
    trace = _trace({"gap": GAP}, [[_e("a", I64_MAX - 5)]])
    assert isinstance(answer(spark, trace, validate_config(trace.config)), Unsupported)
