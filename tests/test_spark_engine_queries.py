"""How ``SparkEngine.run`` splits a run into queries (spark_impl/engine.py, spec/traces.md TR-9).

A run's traces go through several streaming queries, a few at once; the outputs must be the
oracle's, restart points included (TR-5), and a query that fails must end the run with
``RuntimeError`` naming its area, no query left running. Every Spark suite compares the grouped
run with the oracle too; these tests keep the runs tiny, since each query start costs seconds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness.engine import run_canonical
from harness.reference_engine import ReferenceEngine
from harness.traces import InvalidConfig, Trace, event
from spark_impl.engine import SparkEngine, query_groups
from strategies.common import generate
from strategies.keyed_watermarks import DIFFERENTIAL as KEYED_WATERMARKS
from strategies.late_data import DIFFERENTIAL as LATE_DATA

TRACES_PER_AREA = 3


def small_run() -> list[Trace]:
    """A few generated traces of two areas cut to two batches, some restarted after the first,
    and one refused configuration."""
    traces: list[Trace] = []
    for (strategy, _), seed in ((LATE_DATA[0], 11), (KEYED_WATERMARKS[0], 12)):
        for i, trace in enumerate(generate(strategy, TRACES_PER_AREA, seed)):
            # two batches and one restart point: every query starts at most twice, which keeps it cheap
            trace = dataclasses.replace(trace, batches=trace.batches[:2], restart_after=frozenset())
            if i % 2 == 0 and len(trace.batches) == 2:
                trace = dataclasses.replace(trace, restart_after=frozenset({0}))
            traces.append(trace)
    traces.append(Trace(area="late_data", config={"policy": "NoSuchPolicy"}, batches=((event("a", 1),),)))
    return traces


@pytest.mark.clauses("TR-5", "TR-9")
def test_spark_grouped_queries_answer_as_the_oracle() -> None:
    from spark_impl.session import get_spark

    traces = small_run()
    assert any(t.restart_after for t in traces) and any(not t.restart_after for t in traces)
    spark = get_spark()
    others = {q.id for q in spark.streams.active}  # another test's query may run beside (after_prerun)
    # the finest split: four queries here, two of them restarted, two at once
    grouped = run_canonical(SparkEngine(spark, concurrent_queries=2, split_restarts=True), traces)
    oracle = run_canonical(ReferenceEngine(), traces)
    for trace, mine, expected in zip(traces, grouped, oracle, strict=True):
        if isinstance(expected, InvalidConfig):
            assert isinstance(mine, InvalidConfig), trace.dumps()
        else:
            assert mine == expected, trace.dumps()
    assert {q.id for q in spark.streams.active} <= others


@pytest.mark.clauses("TR-9")
def test_spark_a_failing_query_ends_the_run_naming_its_area(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import functions as F

    from spark_impl import late_data
    from spark_impl.session import get_spark

    real_streams = late_data.engine_streams

    def fails(rows: Any) -> Any:
        failure = F.raise_error(F.concat(F.lit("this test fails the query at "), F.col("stream_id")))
        return rows.withColumn("stream_id", F.coalesce(failure.cast("string"), F.col("stream_id")))

    def late_data_fails(df: Any, configs: dict[str, Any], seq_unique: bool = True) -> Any:
        # both plans fail: output (a query of several areas) and the sink step's (one area)
        streams = real_streams(df, configs, seq_unique)
        return dataclasses.replace(streams, output=fails(streams.output), sink_rows=fails(streams.sink_rows))

    monkeypatch.setattr(late_data, "engine_streams", late_data_fails)
    spark = get_spark()
    others = {q.id for q in spark.streams.active}
    traces = [t for t in small_run() if t.area != "late_data" or t.restart_after]
    with pytest.raises(
        RuntimeError, match=r"(?s)^late_data query failed: .*this test fails the query"
    ) as failure:
        SparkEngine(spark, concurrent_queries=2, split_restarts=True).run(traces)
    assert "keyed_watermarks" not in str(failure.value).splitlines()[0]
    assert {q.id for q in spark.streams.active} <= others


@pytest.mark.clauses("TR-9")
def test_spark_query_groups_are_one_area_each_restarted_traces_apart_costliest_first() -> None:
    traces = {f"t{i}": (i, t) for i, t in enumerate(small_run())}
    groups = query_groups(traces, split_restarts=True)
    assert sorted(tid for group in groups for tid in group) == sorted(traces)
    for group in groups:
        assert len({t.area for _, t in group.values()}) == 1
        assert len({bool(t.restart_after) for _, t in group.values()}) == 1
    starts = [len({b for _, t in group.values() for b in t.restart_after}) + 1 for group in groups]
    assert starts == sorted(starts, reverse=True)
    by_area = query_groups(traces)
    assert sorted(next(iter(g.values()))[1].area for g in by_area) == ["keyed_watermarks", "late_data"]


# ---- run_apart: where it applies (the suites' pre-run is its one user and its test) ----------


@pytest.mark.clauses("TR-9")
@pytest.mark.parametrize("why", ["a session the caller gave", "Spark Connect", "CONFORMANCE_RUN_APART=0"])
def test_run_apart_answers_nothing_where_another_process_cannot_answer_as_this_engine(
    why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """None, and no child started: the caller runs the traces with ``run`` instead."""
    from spark_impl import engine_child

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.delenv("CONFORMANCE_RUN_APART", raising=False)
    monkeypatch.setattr(engine_child, "EngineChild", None)  # a child started would fail here
    engine = SparkEngine(object()) if why == "a session the caller gave" else SparkEngine()
    if why == "Spark Connect":
        monkeypatch.setenv("SPARK_REMOTE", "local[2]")
    elif why == "CONFORMANCE_RUN_APART=0":
        monkeypatch.setenv("CONFORMANCE_RUN_APART", "0")
    assert engine.run_apart(small_run()) is None


@pytest.mark.clauses("TR-6")
def test_a_refusal_in_another_process_comes_back_as_the_refusal_it_was() -> None:
    """An invalid configuration answered by the child is the InvalidConfig the oracle gives (the
    scenarios compare its type and message); any other error names its type."""
    from spark_impl.engine_child import Refusal

    back = Refusal.of(InvalidConfig("policy: NoSuchPolicy")).error()
    assert type(back) is InvalidConfig and str(back) == "policy: NoSuchPolicy"
    other = Refusal.of(KeyError("x")).error()
    assert isinstance(other, RuntimeError) and "builtins.KeyError" in str(other)
