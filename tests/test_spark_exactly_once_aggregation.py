"""Exactly-once aggregation on Spark in a pipeline (spark_impl/exactly_once_aggregation.py).

Two things the harness's differential runs do not show:

- the state itself: after a run with re-deliveries and a restart, the key stage's entries and
  the channel stage's memory, read from the checkpoint with Spark's ``statestore`` data source
  and encoded with the oracle's own classes, are byte for byte the oracle's ``encode()`` of the
  aggregator that saw the same messages (OXE-R11, R12, R19);
- Spark's own way to the result, ``dropDuplicatesWithinWatermark`` and ``groupBy().agg()``,
  on the same messages: each difference OXE-R20 states, with Spark's answer worked out from
  Spark's documented rules (one watermark per query, the largest time seen minus the delay; a
  deduplication state kept until the watermark passes an id's time plus the delay; rows behind
  the watermark dropped; NaN above every number; -0.0 equal to 0.0; partial sums per task).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from harness.traces import Item, Trace
from reference.exactly_once_aggregation import (
    AggregateValue,
    ChannelMemory,
    DedupMemory,
    ExactlyOnceAggregationStream,
    PartitionAggregateState,
    run_trace,
)

AREA = "exactly_once_aggregation"
COLUMNS = ("batch", "seq", "stream", "producer", "partition", "sequence", "key", "amount")
AMOUNTS: tuple[Any, ...] = (
    0.1, 0.2, 0.3, 1e16, 1.0, -0.0, 0.0, -7.5, 3, 1.5e-7, "NaN", "Infinity", "-Infinity", 123456789,
)  # fmt: skip
STREAMS = {  # one stream per kind, small windows so that re-deliveries fall outside them
    "count": {"aggregate": "count", "dedup_window": 4},
    "sum": {"aggregate": "sum", "dedup_window": 8},
    "min": {"aggregate": "min", "dedup_window": 5},
    "max": {"aggregate": "max", "dedup_window": 16},
    "mean": {"aggregate": "mean", "dedup_window": 3},
}
BATCHES = 4
RESTART_AFTER = 1


def generated_messages(rng: random.Random) -> list[list[dict[str, Any]]]:
    """Four batches of 40 messages on six channels: mostly the channel's next sequence, some
    sent ahead (out of order), one in five a re-delivery of an earlier message (some with
    another amount), and a few malformed ones."""
    channels = [(p, q) for p in (-1, 0, 7) for q in (0, 1)]
    sent: list[dict[str, Any]] = []
    following = dict.fromkeys(channels, 0)
    batches: list[list[dict[str, Any]]] = []
    for _ in range(BATCHES):
        batch = []
        for _ in range(40):
            roll = rng.random()
            if sent and roll < 0.2:
                again = dict(rng.choice(sent))
                if rng.random() < 0.3:
                    again["amount"] = rng.choice(AMOUNTS)
                batch.append(again)
                continue
            p, q = rng.choice(channels)
            ahead = rng.choice([0, 0, 0, 1, 3])
            message = {
                "producer": p, "partition": q, "sequence": following[(p, q)] + ahead,
                "key": rng.choice(["a", "b", "é", "", "k10"]), "amount": rng.choice(AMOUNTS),
            }  # fmt: skip
            following[(p, q)] += 1
            if roll > 0.97:
                message[rng.choice(["key", "amount", "producer"])] = None
            elif roll > 0.95:
                message["amount"] = rng.choice([True, "1e400x", "nan"])
            sent.append(message)
            batch.append(message)
        batches.append(batch)
    return batches


def as_trace(config: dict[str, Any], batches: list[list[dict[str, Any]]]) -> Trace:
    return Trace(
        AREA, config,
        tuple(tuple(Item("event", **m) for m in batch) for batch in batches),
        restart_after=frozenset({RESTART_AFTER}),
    )  # fmt: skip


def write_rows(path: Path, streams: dict[str, list[list[dict[str, Any]]]]) -> str:
    """Every stream's messages as table rows: the amount as its JSON text (null stays null)."""
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    rows = [
        {**m, "batch": b, "seq": seq, "stream": sid, "amount": _json_or_null(m["amount"])}
        for sid, batches in streams.items()
        for b, batch in enumerate(batches)
        for seq, m in enumerate(batch)
    ]  # fmt: skip
    types = {"stream": pa.string(), "key": pa.string(), "amount": pa.string()}
    table = pa.table(
        {c: [r[c] for r in rows] for c in COLUMNS},
        schema=pa.schema([(c, types.get(c, pa.int64())) for c in COLUMNS]),
    )
    write_trace_file(str(path), table)
    return str(path)


def _json_or_null(amount: Any) -> str | None:
    return None if amount is None else json.dumps(amount)


def source(path: str, end_batch: int | None = None) -> Any:
    from spark_impl.session import get_spark
    from spark_impl.trace_source import SOURCE_NAME

    reader = get_spark().readStream.format(SOURCE_NAME).option("path", path)
    return (reader.option("end_batch", end_batch) if end_batch is not None else reader).load()


def run_to_end(query: Any) -> None:
    query.awaitTermination()
    assert query.exception() is None, query.exception()


def oracle_state(config: dict[str, Any], batches: list[list[dict[str, Any]]]) -> tuple[bytes, bytes]:
    """The oracle's aggregator after every batch: (aggregate encoding, memory encoding)."""
    stream = ExactlyOnceAggregationStream(config)
    for b, batch in enumerate(as_trace(config, batches).batches):
        stream.run_batch(b, batch)
    return stream.aggregator.aggregates.encode(), stream.aggregator.memory.encode()


@pytest.fixture(scope="module")
def restarted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One query over the five streams, stopped after batch 1 and continued from its checkpoint."""
    from spark_impl.exactly_once_aggregation import exactly_once_aggregation

    work = tmp_path_factory.mktemp("eoa")
    rng = random.Random(20261127)
    streams = {sid: generated_messages(rng) for sid in STREAMS}
    path = write_rows(work / "messages.parquet", streams)
    for end_batch in (RESTART_AFTER, BATCHES - 1):
        agg = exactly_once_aggregation(
            source(path, end_batch), producer_col="producer", partition_col="partition",
            sequence_col="sequence", key_col="key", amount_col="amount", seq_col="seq", batch_col="batch",
            stream_id_col="stream", stream_configs=STREAMS, buckets=3,
        )  # fmt: skip
        now = {"availableNow": True}
        run_to_end(agg.write_tables(str(work / "out"), str(work / "checkpoint"), trigger=now))
    return work, streams


@pytest.mark.clauses("OXE-R3", "OXE-R5", "OXE-R6", "OXE-R7", "OXE-R8", "OXE-R16", "OXE-R18", "OXE-R19")
def test_spark_tables_after_a_restart_equal_the_oracle(restarted_run: tuple[Path, dict[str, Any]]) -> None:
    """Every table of every stream equals the oracle's answer to the same messages, the run
    stopped after batch 1 and continued; the messages reach every verdict."""
    from spark_impl.exactly_once_aggregation import TABLE_COLUMNS
    from spark_impl.session import get_spark

    work, streams = restarted_run
    spark = get_spark()
    verdicts = set()
    for table, columns in TABLE_COLUMNS.items():
        rows = spark.read.parquet(str(work / "out" / table)).collect()
        for sid, batches in streams.items():
            expected = sorted(run_trace(as_trace(STREAMS[sid], batches))[table], key=repr)
            got = sorted((tuple(r[c] for c in columns[1:]) for r in rows if r["stream_id"] == sid), key=repr)
            assert got == expected, (sid, table)
            if table == "messages":
                verdicts |= {row[-1] for row in expected}
    assert verdicts == {"folded", "duplicate", "outside_window"}


def _state_of(spark: Any, checkpoint: str, stage: str, variable: str) -> list[Any]:
    """Every entry of one MapState of the operator's ``stage``, as the latest commit holds it."""
    from spark_impl.checkpoints import check_checkpoint

    reports = check_checkpoint(spark, checkpoint, deep=True)
    [operator_id] = [r.operator_id for r in reports if r.area == AREA and r.stage == stage]
    return (
        spark.read.format("statestore").option("operatorId", operator_id).option("stateVarName", variable)
        .load(checkpoint).collect()
    )  # fmt: skip


@pytest.mark.clauses("OXE-R11", "OXE-R12", "OXE-R13", "OXE-R19")
def test_spark_state_encodes_to_the_oracles_bytes(restarted_run: tuple[Path, dict[str, Any]]) -> None:
    """The key stage's entries of each stream, encoded by ``PartitionAggregateState``, and the
    channel stage's memory, encoded by ``DedupMemory``, are the oracle's bytes."""
    from spark_impl.exactly_once_aggregation import unpack_aggregate, unpack_channel
    from spark_impl.session import get_spark

    work, streams = restarted_run
    spark = get_spark()
    checkpoint = str(work / "checkpoint")
    aggregates: dict[str, dict[str, AggregateValue]] = {sid: {} for sid in streams}
    for row in _state_of(spark, checkpoint, "middle", "aggregates"):
        kind, number, count = unpack_aggregate(tuple(row["user_map_value"]))
        value = AggregateValue(
            kind, None if kind == "count" else number, count if kind in ("count", "mean") else None
        )
        aggregates[row["key"]["stream_id"]][row["user_map_key"]["key"]] = value
    memories = {sid: DedupMemory(STREAMS[sid]["dedup_window"]) for sid in streams}
    for row in _state_of(spark, checkpoint, "first", "channels"):
        memory = memories[row["key"]["eoa_sid"]]
        high, sequences = unpack_channel(tuple(row["user_map_value"]))
        channel = (row["user_map_key"]["producer"], row["user_map_key"]["partition"])
        memory.channels[channel] = ChannelMemory(high, set(sequences.tolist()))
    for sid, batches in streams.items():
        expected_aggregates, expected_memory = oracle_state(STREAMS[sid], batches)
        assert PartitionAggregateState(aggregates[sid]).encode() == expected_aggregates, sid
        assert memories[sid].encode() == expected_memory, sid
        assert len(memories[sid].channels) == 6 and len(aggregates[sid]) == 5, sid


# ---- OXE-R20: Spark's dropDuplicatesWithinWatermark and groupBy ---------------------------------

DELAY_MS = 1_000
A, B = (1, 0), (2, 0)  # channel A runs far ahead in batch 1; channel B lags behind


def native_messages() -> list[list[dict[str, Any]]]:
    """Four batches. Keys: ``b`` (B's sequence 10, re-delivered in batches 2 and 3), ``b_new``
    (B's first delivery of 11 in batch 3), ``nan`` (1, NaN, -2), ``zero_up`` (0.0 then -0.0),
    ``zero_down`` (-0.0 then 0.0), ``big`` (1e16, then 1 and 1 in the next batch), ``first``
    (one id delivered twice in one batch, 1.0 first and 100.0 second, the second first in the
    table), ``jump`` (A's sequence 100,000, which moves Spark's watermark to 99 s)."""

    def m(channel: tuple[int, int], sequence: int, key: str, amount: Any) -> dict[str, Any]:
        return {"producer": channel[0], "partition": channel[1], "sequence": sequence, "key": key,
                "amount": amount}  # fmt: skip

    return [
        [m(B, 10, "b", 1.0), m(A, 1, "nan", 1.0), m(A, 2, "nan", "NaN"), m(A, 3, "nan", -2.0),
         m(A, 4, "zero_up", 0.0), m(A, 5, "zero_up", -0.0), m(A, 6, "zero_down", -0.0),
         m(A, 7, "zero_down", 0.0), m(A, 8, "big", 1e16)],
        [m(A, 9, "big", 1.0), m(A, 12, "big", 1.0), m(A, 20, "first", 1.0), m(A, 20, "first", 100.0),
         m(A, 100_000, "jump", 1.0)],
        [m(B, 10, "b", 1.0)],
        [m(B, 10, "b", 1.0), m(B, 11, "b_new", 1.0), m(A, 1, "nan", 1.0)],
    ]  # fmt: skip


def _table_order(batches: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The table's rows in their physical order: each batch's ``first`` pair written second
    delivery first (arrival order is the ``seq`` column, which Spark's operators do not read)."""
    rows = []
    for b, batch in enumerate(batches):
        placed = [{**m, "batch": b, "seq": seq} for seq, m in enumerate(batch)]
        firsts = [i for i, r in enumerate(placed) if r["key"] == "first"]
        if len(firsts) == 2:
            i, j = firsts
            placed[i], placed[j] = placed[j], placed[i]
        rows += placed
    return rows


def _native_run(spark: Any, path: str, checkpoint: str) -> tuple[dict[str, dict[str, Any]], list[Any]]:
    """Spark's own query: the final value of every key (its last update) and the progress."""
    from pyspark.sql import functions as F

    from spark_native.common import BatchRows

    keep = BatchRows(spark, checkpoint + "-written")

    amount = F.col("amount").cast("double")  # Spark reads "NaN" and "Infinity" as those doubles
    native = (
        source(path).withColumn("ts", F.timestamp_millis("sequence")).withColumn("x", amount)
        .withWatermark("ts", f"{DELAY_MS} milliseconds")
        .dropDuplicatesWithinWatermark(["producer", "partition", "sequence"])
        .groupBy("key").agg(F.sum("x").alias("sum"), F.min("x").alias("min"), F.max("x").alias("max"),
                            F.count("x").alias("count"))
    )  # fmt: skip
    query = (
        native.writeStream.outputMode("update").foreachBatch(keep).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )  # fmt: skip
    run_to_end(query)
    updates = [r.asDict() for _, rows in sorted(keep.by_batch(spark).items()) for r in rows]
    final = {u["key"]: u for u in updates}  # updates arrive batch by batch: the last one stands
    return final, list(query.recentProgress)


@pytest.mark.clauses("OXE-R20", "OXE-R2", "OXE-R3", "OXE-R7", "OXE-R8")
def test_spark_native_deduplication_differs_as_stated(tmp_path: Path) -> None:
    """OXE-R20 item by item, on the same messages (time: the sequence in milliseconds, delay 1 s;
    this area: window 1,000), each stream of the operator computing one kind."""
    from spark_impl.exactly_once_aggregation import VALUE, exactly_once_aggregation
    from spark_impl.session import get_spark

    spark = get_spark()
    batches = native_messages()
    rows = _table_order(batches)
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    kinds = ("sum", "min", "max", "count")
    table_rows = [{**r, "stream": k, "amount": json.dumps(r["amount"])} for k in kinds for r in rows]
    text = ("stream", "key", "amount")
    schema = pa.schema([(c, pa.string() if c in text else pa.int64()) for c in COLUMNS])
    ours_path = str(tmp_path / "ours.parquet")
    write_trace_file(ours_path, pa.table({c: [r[c] for r in table_rows] for c in COLUMNS}, schema=schema))
    native_path = str(tmp_path / "native.parquet")
    native_rows = [{**r, "stream": "native", "amount": json.dumps(r["amount"]).strip('"')} for r in rows]
    write_trace_file(native_path, pa.table({c: [r[c] for r in native_rows] for c in COLUMNS}, schema=schema))

    agg = exactly_once_aggregation(
        source(ours_path), producer_col="producer", partition_col="partition", sequence_col="sequence",
        key_col="key", amount_col="amount", seq_col="seq", batch_col="batch", stream_id_col="stream",
        stream_configs={k: {"aggregate": k, "dedup_window": 1_000} for k in kinds}, buckets=2,
    )  # fmt: skip
    now = {"availableNow": True}
    run_to_end(agg.write_tables(str(tmp_path / "ours"), str(tmp_path / "ours_ck"), trigger=now))
    ours_rows = spark.read.parquet(str(tmp_path / "ours" / "aggregates")).orderBy("batch").collect()
    ours = {(r["stream_id"], r["key"]): (r[VALUE], r["count"]) for r in ours_rows}  # the last batch stands
    messages = {
        (r["batch"], r["seq"]): r["verdict"]
        for r in spark.read.parquet(str(tmp_path / "ours" / "messages")).collect() if r["stream_id"] == "sum"
    }  # fmt: skip
    spark_final, progress = _native_run(spark, native_path, str(tmp_path / "native_ck"))

    def ours_value(kind: str, key: str) -> float:
        return float(ours[(kind, key)][0].replace("Infinity", "inf"))

    # 1. Forgetting is global and by time: after batch 2 Spark's deduplication holds A's 100,000
    #    alone (every other id's time plus 1 s is behind the 99 s watermark); this area still
    #    knows B's 10, so its re-delivery in batch 3 is a duplicate.
    by_batch = {p.batchId: p for p in progress}
    dedup_state = [s.numRowsTotal for s in by_batch[2].stateOperators if "dedup" in s.operatorName.lower()]
    assert dedup_state == [1], [s.operatorName for s in by_batch[2].stateOperators]
    assert messages[(3, 0)] == "duplicate"
    # 2. A forgotten id is not counted again: its re-delivery carries its first time, behind the
    #    watermark once the id is forgotten, so Spark drops it as late; b stays at one message.
    assert spark_final["b"]["count"] == 1 and ours[("count", "b")][1] == 1
    # 3. Rows behind the watermark are dropped: B's first delivery of 11 (batch 3) and the two
    #    late re-deliveries leave no trace in Spark; here 11 is folded and A's 1 is outside_window.
    dropped = sum(s.numRowsDroppedByWatermark for s in by_batch[3].stateOperators)
    assert dropped == 3, dropped
    assert "b_new" not in spark_final and ours[("sum", "b_new")][0] == "1.0"
    assert messages[(3, 1)] == "folded" and messages[(3, 2)] == "outside_window"
    # 4. NaN: Spark orders it above every number (max NaN, min skips it); here NaN absorbs both.
    assert math.isnan(spark_final["nan"]["max"]) and spark_final["nan"]["min"] == -2.0
    assert ours[("min", "nan")][0] == "NaN" and ours[("max", "nan")][0] == "NaN"
    # 5. Zeros: Spark compares -0.0 and 0.0 as equal, so of the two orders at least one minimum
    #    shows +0.0; here the minimum is -0.0 and the maximum +0.0 in both orders.
    spark_min_signs = {math.copysign(1.0, spark_final[k]["min"]) for k in ("zero_up", "zero_down")}
    assert all(spark_final[k]["min"] == 0.0 for k in ("zero_up", "zero_down")) and 1.0 in spark_min_signs
    assert {ours[("min", k)][0] for k in ("zero_up", "zero_down")} == {"-0.0"}
    assert {ours[("max", k)][0] for k in ("zero_up", "zero_down")} == {"0.0"}
    # 6. Summation order: Spark adds batch 1's amounts (1 + 1 = 2) before the stored 1e16; here
    #    (1e16 + 1) + 1 rounds to 1e16 at each step (ties to even).
    assert spark_final["big"]["sum"] == 1e16 + 2.0
    assert ours_value("sum", "big") == 1e16
    # 7. Which delivery counts: Spark keeps the delivery its task reads first (the table's
    #    physical order, 100.0); here the first in arrival order (seq), 1.0.
    assert spark_final["first"]["sum"] == 100.0
    assert ours_value("sum", "first") == 1.0


ARRIVAL_STEP_MS = 10_000  # one micro-batch every 10 s of arrival time, with the 1 s delay


@pytest.mark.clauses("OXE-R20", "OXE-R3")
def test_spark_native_deduplication_counts_a_late_redelivery_twice_with_arrival_times(tmp_path: Path) -> None:
    """OXE-R20 item 2, the other half: with the arrival time as Spark's time column (batch b
    arrives at (b + 1) * 10 s; at 0 s a row would be behind Spark's first watermark, 0), the id
    of batch 0 (10 s, kept until the watermark passes 11 s) is forgotten in batch 2 (watermark
    19 s, from batch 1's 20 s); its re-delivery in batch 3 arrives at 40 s, ahead of the
    watermark (29 s), so Spark folds it a second time. This area judges it a duplicate."""
    from pyspark.sql import functions as F

    from spark_impl.session import get_spark
    from spark_impl.trace_source import write_trace_file
    from spark_native.common import BatchRows

    again = {"producer": 1, "partition": 0, "sequence": 5, "key": "again", "amount": 1.0}
    batches = [
        [again],
        [{"producer": 2, "partition": 0, "sequence": 1, "key": "filler", "amount": 1.0}],
        [{"producer": 2, "partition": 0, "sequence": 2, "key": "filler", "amount": 1.0}],
        [again],
    ]
    import pyarrow as pa

    rows = [{**m, "batch": b, "seq": i, "stream": "native", "amount": str(m["amount"])}
            for b, batch in enumerate(batches) for i, m in enumerate(batch)]  # fmt: skip
    text = ("stream", "key", "amount")
    schema = pa.schema([(c, pa.string() if c in text else pa.int64()) for c in COLUMNS])
    path = str(tmp_path / "arrivals.parquet")
    write_trace_file(path, pa.table({c: [r[c] for r in rows] for c in COLUMNS}, schema=schema))
    keep = BatchRows(get_spark(), str(tmp_path / "written"))
    native = (
        source(path).withColumn("ts", F.timestamp_millis((F.col("batch") + 1) * ARRIVAL_STEP_MS))
        .withWatermark("ts", f"{DELAY_MS} milliseconds")
        .dropDuplicatesWithinWatermark(["producer", "partition", "sequence"])
        .groupBy("key").agg(F.count("amount").alias("count"))
    )  # fmt: skip
    query = (
        native.writeStream.outputMode("update").foreachBatch(keep)
        .option("checkpointLocation", str(tmp_path / "native_ck")).trigger(availableNow=True).start()
    )  # fmt: skip
    run_to_end(query)
    updates = [r.asDict() for _, rows in sorted(keep.by_batch(get_spark()).items()) for r in rows]
    spark_count = {u["key"]: u["count"] for u in updates}  # the last update of a key stands
    assert spark_count["again"] == 2, updates
    output = run_trace(as_trace({"aggregate": "count", "dedup_window": 1_000}, batches))
    verdicts = [r for r in output["messages"] if r[5] == "again"]
    assert [r[6] for r in sorted(verdicts)] == ["folded", "duplicate"]
    assert [r[4] for r in output["aggregates"] if r[1] == "again"][-1] == 1


# ---- rows and columns at the table boundary (TR-15, TR-16, OXE-R16) ---------------------------


@pytest.mark.clauses("OXE-R16", "TR-15", "TR-16")
def test_spark_rows_without_a_place_or_with_a_shared_seq_change_nothing(tmp_path: Path) -> None:
    """Worked by hand from TR-15 and TR-16: a row of null batch is ``missing_batch``, one of
    null seq ``missing_seq``, both rows of a shared seq ``duplicate_seq``; none of them is
    judged or remembered, so the later delivery of the same id is folded, and the query goes on."""
    import pyarrow as pa

    from spark_impl.exactly_once_aggregation import VALUE, exactly_once_aggregation
    from spark_impl.session import get_spark
    from spark_impl.trace_source import write_trace_file

    def row(batch: int | None, seq: int | None, sequence: int, amount: str) -> dict[str, Any]:
        # ``batch`` feeds the source's micro-batches; ``reported`` is the operator's batch column
        return {"batch": 0 if batch is None else batch, "reported": batch, "seq": seq, "stream": "s",
                "producer": 1, "partition": 0, "sequence": sequence, "key": "k",
                "amount": amount}  # fmt: skip

    rows = [
        row(0, 0, 1, "1"),
        row(0, 1, 2, "10"),
        row(0, 1, 2, "20"),  # seq 1 twice: neither counts
        row(None, 2, 3, "100"),
        row(0, None, 3, "100"),  # no place: neither counts
        row(1, 0, 2, "5"),
        row(1, 1, 3, "7"),  # the ids of the refused rows, folded now
    ]
    columns = (*COLUMNS, "reported")
    text = ("stream", "key", "amount")
    schema = pa.schema([(c, pa.string() if c in text else pa.int64()) for c in columns])
    path = str(tmp_path / "rows.parquet")
    write_trace_file(path, pa.table({c: [r[c] for r in rows] for c in columns}, schema=schema))
    agg = exactly_once_aggregation(
        source(path), producer_col="producer", partition_col="partition", sequence_col="sequence",
        key_col="key", amount_col="amount", seq_col="seq", batch_col="reported", stream_id_col="stream",
        buckets=2,
    )  # fmt: skip
    out = tmp_path / "out"
    run_to_end(agg.write_tables(str(out), str(tmp_path / "checkpoint"), trigger={"availableNow": True}))
    spark = get_spark()

    def table(name: str, *columns: str) -> list[tuple[Any, ...]]:
        found = spark.read.parquet(str(out / name)).collect()
        return sorted((tuple(r[c] for c in columns) for r in found), key=repr)

    errors = [
        (0, 1, "duplicate_seq"), (0, 1, "duplicate_seq"), (None, 2, "missing_batch"),
        (0, None, "missing_seq"),
    ]  # fmt: skip
    assert table("errors", "batch", "seq", "reason") == sorted(errors, key=repr)
    assert table("messages", "batch", "seq", "sequence", "verdict") == [
        (0, 0, 1, "folded"), (1, 0, 2, "folded"), (1, 1, 3, "folded"),
    ]  # fmt: skip
    assert table("aggregates", "batch", "key", "kind", VALUE, "count") == [
        (0, "k", "sum", "1.0", None), (1, "k", "sum", "13.0", None),
    ]  # fmt: skip
    assert table("progress", "batch", "folded", "duplicates", "outside_window", "keys") == [
        (0, 1, 0, 0, 1), (1, 3, 0, 0, 1),
    ]  # fmt: skip


@pytest.mark.clauses("OXE-R15", "OXE-R16", "TR-16")
def test_spark_columns_and_settings_it_cannot_read_are_refused_when_defined() -> None:
    """A column of a type the operator does not accept, or a bad setting, is refused with
    InvalidConfig naming it when the operator is applied, before any query exists."""
    from harness.traces import InvalidConfig
    from spark_impl.exactly_once_aggregation import exactly_once_aggregation
    from spark_impl.session import get_spark

    spark = get_spark()
    good = "producer long, partition int, sequence long, key date, amount string, seq long"
    names = {"producer_col": "producer", "partition_col": "partition", "sequence_col": "sequence",
             "key_col": "key", "amount_col": "amount", "seq_col": "seq"}  # fmt: skip
    exactly_once_aggregation(spark.createDataFrame([], good), **names)  # accepted as it is
    for schema, named in (
        (good.replace("amount string", "amount double"), "amount_col 'amount' is double"),
        (good.replace("sequence long", "sequence string"), "sequence_col 'sequence' is string"),
        (good.replace("producer long", "producer decimal(20,0)"), "producer_col 'producer' is decimal"),
    ):
        with pytest.raises(InvalidConfig, match=named):
            exactly_once_aggregation(spark.createDataFrame([], schema), **names)
    df = spark.createDataFrame([], good)
    for settings, named in (
        ({"aggregate": "median"}, "aggregate must be one of"),
        ({"dedup_window": 0}, "dedup_window must be an integer from 1"),
        ({"dedup_window": 1_048_577}, "dedup_window must be an integer from 1"),
        ({"stream_configs": {"s": {"dedup_window": True}}}, "stream 's': dedup_window"),
        ({"stream_configs": {"s": {"window": 5}}}, "unknown exactly_once_aggregation settings"),
    ):
        with pytest.raises(InvalidConfig, match=named):
            exactly_once_aggregation(df, **names, **settings)
