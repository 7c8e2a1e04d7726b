"""The SLA admission operator on Spark in a pipeline (spark_impl/sla_admission.py).

The harness runs the operator on traces (clock and load rows, ``kind_col``); these tests use it
the way a pipeline does: every row is an event with its own arrival time (``now_col``), load
score (``load_col``) and priority, read from the ``trace`` source one micro-batch per batch.
The oracle judges the same events when each is preceded by a clock item at its arrival time
and a load item whose ``cpu`` gives its score (score = 10 x cpu, so scores are multiples of 10).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from harness.traces import InvalidConfig, Item, Trace
from reference.sla_admission import run_trace

CONFIG: dict[str, Any] = {
    "streams": {
        "gold": {"class": "Gold", "jitter_budget_ms": 900},
        "bronze": {"class": "Bronze", "token_cost": 0.5, "max_events_per_sec": 1, "max_lag": 600},
    },
    "policy": "Strict",
    "shedder": {"threshold": 500, "seed": 11},
}
COLUMNS = ("batch", "seq", "stream", "ts", "arrived", "load", "priority")


def pipeline_events() -> list[dict[str, Any]]:
    """Three batches of 60 events over two SLA streams and an unregistered one, arrival times
    rising by 0..400 ms (ties included), event times up to 700 ms behind, mixed scores and priorities."""
    rng = random.Random(5)
    rows, arrived = [], 1_000
    for b in range(3):
        for seq in range(60):
            arrived += rng.choice([0, 0, 5, 40, 120, 400])
            rows.append({
                "batch": b, "seq": seq, "stream": rng.choice(["gold", "gold", "bronze", "ghost"]),
                "ts": arrived - rng.randint(-20, 700), "arrived": arrived,
                "load": rng.choice([0, 300, 600, 900, 1000]), "priority": rng.choice([None, 0, 1, 2, 3]),
            })  # fmt: skip
    return rows


def oracle_trace(rows: list[dict[str, Any]]) -> Trace:
    """The same events as a trace: a clock item at each arrival time and a load item with the
    event's score before each event (the oracle's clock and metrics are items, OXS-R16)."""
    batches: list[list[Item]] = [[] for _ in range(1 + max(r["batch"] for r in rows))]
    for r in rows:
        batches[r["batch"]] += [
            Item("clock", time=r["arrived"]), Item("load", metrics={"cpu": r["load"] // 10}),
            Item("event", key=r["stream"], event_time=r["ts"], priority=r["priority"]),
        ]  # fmt: skip
    return Trace("sla_admission", CONFIG, tuple(tuple(b) for b in batches))


def write_events(path: Path, rows: list[dict[str, Any]], arrival_as_timestamp: bool) -> str:
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    millis = pa.timestamp("ms", tz="UTC")
    types = {"stream": pa.string(), "arrived": millis if arrival_as_timestamp else pa.int64()}
    table = pa.table(
        {c: [r[c] for r in rows] for c in COLUMNS},
        schema=pa.schema([(c, types.get(c, pa.int64())) for c in COLUMNS]),
    )
    write_trace_file(str(path), table)
    return str(path)


def source(path: str, end_batch: int | None = None) -> Any:
    from spark_impl.session import get_spark
    from spark_impl.trace_source import SOURCE_NAME

    reader = get_spark().readStream.format(SOURCE_NAME).option("path", path)
    return (reader.option("end_batch", end_batch) if end_batch is not None else reader).load()


def run_to_end(query: Any) -> None:
    query.awaitTermination()
    assert query.exception() is None, query.exception()


@pytest.mark.clauses("OXS-R5", "OXS-R7", "OXS-R8", "OXS-R11", "OXS-R12", "OXS-R13", "OXS-R16", "OXS-R17")
def test_spark_pipeline_columns_decide_like_the_oracle(tmp_path: Path) -> None:
    """Arrival time as a timestamp column, load score and priority as columns, four buckets:
    every table equals the oracle's for the same events given as clock and load items."""
    from spark_impl.session import get_spark
    from spark_impl.sla_admission import sla_admission

    rows = pipeline_events()
    path = write_events(tmp_path / "events.parquet", rows, arrival_as_timestamp=True)
    sla = sla_admission(
        source(path), stream_col="stream", event_time_col="ts", now_col="arrived", load_col="load",
        priority_col="priority", seq_col="seq", batch_col="batch", buckets=4, **CONFIG,
    )  # fmt: skip
    out = str(tmp_path / "out")
    run_to_end(sla.write_tables(out, str(tmp_path / "checkpoint"), trigger={"availableNow": True}))
    spark = get_spark()
    expected = run_trace(oracle_trace(rows))
    # The oracle's seq counts the clock and load items: event i of a batch is its item 3i + 2.
    decisions = sorted(
        (r["batch"], 3 * r["seq"] + 2, r["stream"], r["event_time"], r["now"], r["decision"],
         r["reason"], r["tokens_left"], r["lag"])
        for r in spark.read.parquet(f"{out}/decisions").collect()
    )  # fmt: skip
    assert decisions == sorted(expected["decisions"])
    streams = sorted(tuple(r)[1:] for r in spark.read.parquet(f"{out}/streams").drop("batch_id").collect())
    assert streams == sorted(expected["streams"])
    progress = sorted(tuple(r)[1:] for r in spark.read.parquet(f"{out}/progress").drop("batch_id").collect())
    assert progress == sorted(expected["progress"])
    assert spark.read.parquet(f"{out}/errors").count() == 0  # well-formed events only
    # What the events are for: every decision and every check shows up.
    seen = {(d[5], d[6]) for d in expected["decisions"]}
    assert {("admit", None), ("shed", None), ("reject", "lag"), ("reject", "jitter"), ("reject", "rate"),
            ("reject", "unregistered_stream")} <= seen  # fmt: skip


@pytest.mark.clauses("OXS-R13", "OXS-R16", "OXS-R19")
def test_spark_write_by_decision_splits_one_run_into_partitions(tmp_path: Path) -> None:
    """One parquet sink partitioned by decision, arrival time as epoch milliseconds, no seq_col
    (arrival times are distinct here, so arrival order is fixed without it): each decision's
    folder holds exactly the oracle's events of that decision, and seq is null."""
    from spark_impl.session import get_spark
    from spark_impl.sla_admission import sla_admission

    rows = pipeline_events()
    for i, r in enumerate(rows):
        r["arrived"] = 1_000 + 37 * i
        r["ts"] = r["arrived"] - (i * 53) % 600
    path = write_events(tmp_path / "events.parquet", rows, arrival_as_timestamp=False)
    with pytest.warns(UserWarning, match="no seq_col"):
        sla = sla_admission(
            source(path), stream_col="stream", event_time_col="ts", now_col="arrived", load_col="load",
            priority_col="priority", buckets=3, **CONFIG,
        )  # fmt: skip
    out = str(tmp_path / "by_decision")
    query = sla.write_by_decision(out, str(tmp_path / "checkpoint"), trigger={"availableNow": True},
                                  query_name="sla-by-decision")  # fmt: skip
    run_to_end(query)
    assert query.name == "sla-by-decision"
    expected: dict[str, list[tuple[Any, ...]]] = {}
    for d in run_trace(oracle_trace(rows))["decisions"]:
        expected.setdefault(d[5], []).append((d[2], d[3], d[4], d[6], d[7], d[8]))
    folders = sorted(p.name for p in Path(out).iterdir() if p.name.startswith("decision="))
    assert folders == [f"decision={d}" for d in sorted(expected)]
    spark = get_spark()
    for decision, events in expected.items():
        got = spark.read.parquet(f"{out}/decision={decision}").collect()
        assert {r["seq"] for r in got} == {None}
        assert sorted((r["stream"], r["event_time"], r["now"], r["reason"], r["tokens_left"], r["lag"])
                      for r in got) == sorted(events), decision  # fmt: skip


@pytest.mark.clauses("OXS-R15", "OXS-R16")
def test_spark_bad_input_rows_become_error_rows(tmp_path: Path) -> None:
    """Rows no event can be made of are error rows, the first reason in the clause's order, and
    change nothing: the Bronze stream's one good event after them finds its bucket full."""
    from spark_impl.session import get_spark
    from spark_impl.sla_admission import sla_admission

    good = {"batch": 0, "stream": "s", "ts": 100, "arrived": 150, "load": 0, "priority": 1}
    bad = [
        {"stream": None, "ts": None, "priority": 9, "arrived": None, "load": None},  # missing_stream
        {"ts": None, "priority": 9, "arrived": None, "load": None},  # missing_event_time
        {"priority": 4, "arrived": None, "load": 2000},  # invalid_priority
        {"priority": -1},  # invalid_priority
        {"arrived": None, "load": -5},  # missing_time
        {"load": 1001},  # invalid_load
        {"load": None},  # invalid_load
    ]
    rows = [{**good, **b, "seq": i} for i, b in enumerate(bad)] + [{**good, "seq": len(bad)}]
    path = write_events(tmp_path / "events.parquet", rows, arrival_as_timestamp=False)
    sla = sla_admission(
        source(path), stream_col="stream", event_time_col="ts", now_col="arrived", load_col="load",
        priority_col="priority", seq_col="seq", batch_col="batch", streams={"s": {"class": "Bronze"}},
        shedder={}, buckets=2,
    )  # fmt: skip
    out = str(tmp_path / "out")
    run_to_end(sla.write_tables(out, str(tmp_path / "checkpoint"), trigger={"availableNow": True}))
    spark = get_spark()
    errors = sorted((r["seq"], r["reason"]) for r in spark.read.parquet(f"{out}/errors").collect())
    assert errors == [
        (0, "missing_stream"), (1, "missing_event_time"), (2, "invalid_priority"), (3, "invalid_priority"),
        (4, "missing_time"), (5, "invalid_load"), (6, "invalid_load"),
    ]  # fmt: skip
    decisions = [tuple(r)[1:] for r in spark.read.parquet(f"{out}/decisions").drop("batch_id").collect()]
    # Bronze: 5 tokens, one spent; lag 150 - 100 = 50 ms within 5000; score 0 sheds nothing.
    assert decisions == [(0, 7, "s", 100, 150, "admit", None, 4.0, 50)]
    progress = [tuple(r)[1:] for r in spark.read.parquet(f"{out}/progress").drop("batch_id").collect()]
    assert progress == [(0, 1, 0, 0, 0, 0)]


@pytest.mark.clauses("OXS-R14", "OXS-R16")
def test_spark_shedder_without_load_column_is_refused_when_defined(tmp_path: Path) -> None:
    """A shedder needs a load column, also when only one stream id's settings name it; bad
    settings stop the definition with the setting named, before any row is read."""
    from spark_impl.sla_admission import sla_admission

    path = write_events(tmp_path / "events.parquet", pipeline_events()[:1], arrival_as_timestamp=False)
    df = source(path)
    common = {"stream_col": "stream", "event_time_col": "ts", "now_col": "arrived"}
    with pytest.raises(InvalidConfig, match="a shedder needs load_col"):
        sla_admission(df, **common, streams={"s": {"class": "Gold"}}, shedder={"threshold": 700})
    with pytest.raises(InvalidConfig, match="stream 'tenant': a shedder needs load_col"):
        sla_admission(df, **common, stream_id_col="stream", stream_configs={"tenant": {"shedder": {}}})
    with pytest.raises(InvalidConfig, match="stream 's': token_cost 6 exceeds the Bronze capacity"):
        sla_admission(df, **common, streams={"s": {"class": "Bronze", "token_cost": 6}})
    with pytest.raises(InvalidConfig, match="max_events_per_sec has more than three decimals"):
        sla_admission(df, **common, streams={"s": {"class": "Gold", "max_events_per_sec": 0.0005}})
    with pytest.raises(InvalidConfig, match="now_col is required"):
        sla_admission(df, stream_col="stream", event_time_col="ts")


@pytest.mark.clauses("OXS-R18")
def test_spark_checkpoint_with_another_bucket_count_is_refused(tmp_path: Path) -> None:
    """A restart on the checkpoint continues the token buckets; the same checkpoint with another
    bucket count stops the query with a message naming both counts."""
    from pyspark.errors import StreamingQueryException

    from spark_impl.session import get_spark
    from spark_impl.sla_admission import sla_admission

    rows = pipeline_events()
    path = write_events(tmp_path / "events.parquet", rows, arrival_as_timestamp=False)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run(end_batch: int, buckets: int) -> Any:
        sla = sla_admission(
            source(path, end_batch), stream_col="stream", event_time_col="ts", now_col="arrived",
            load_col="load", priority_col="priority", seq_col="seq", batch_col="batch", buckets=buckets,
            **CONFIG,
        )  # fmt: skip
        query = (
            sla.output.writeStream.format("parquet").option("path", out)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination()
        return query

    assert run(0, 4).exception() is None
    assert run(1, 4).exception() is None
    got = [r for r in get_spark().read.parquet(out).collect() if r["output"] == "decisions"]
    expected = run_trace(oracle_trace(rows[:120]))["decisions"]
    assert sorted((r["batch"], 3 * r["seq"] + 2, r["decision"], r["tokens_left"]) for r in got) == sorted(
        (d[0], d[1], d[5], d[7]) for d in expected
    )
    with pytest.raises(StreamingQueryException, match="holds buckets 4; this release reads buckets 5 only"):
        run(2, 5)
