"""The load signal of spark_impl/load_signal.py: a query's own progress as the SLA shedder's load.

* The pure functions: which progress field feeds which metric of OXS-R10, and the score formula,
  on progress dicts whose metrics and scores are worked out by hand (and the formula agrees with
  the oracle's over a grid).
* The listener without Spark: it publishes one record per progress of its query only, an older
  batch never overwrites a newer, a restart carries the record over to the checkpoint's last
  commit, and the reader's wait takes a late record, skips a listener that is gone and gives up
  after its bound.
* One streaming query (classic or Connect, whichever the suite runs): each micro-batch's rows
  carry the score published for the previous micro-batch's progress, although the listener is
  made slower than the next batch's start.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reference.sla_admission import LoadSheddingConfig
from reference.sla_admission import load_score as oracle_load_score
from spark_impl.load_signal import (
    NO_BATCH,
    ProgressLoadSignal,
    await_record,
    load_metrics_from_progress,
    load_score,
    read_record,
    with_load_score,
)

MIB = 1 << 20

# A batch that took 2.5 s of a 10 s interval, took rows in at 400/s and processed them at 240/s,
# and holds 300 + 212 MiB of state.
BUSY_PROGRESS: dict[str, Any] = {
    "batchId": 7,
    "batchDuration": 2600,
    "numInputRows": 600,
    "inputRowsPerSecond": 400.0,
    "processedRowsPerSecond": 240.0,
    "durationMs": {"addBatch": 2200, "triggerExecution": 2500, "walCommit": 40},
    "stateOperators": [{"memoryUsedBytes": 300 * MIB}, {"memoryUsedBytes": 212 * MIB}],
    "sources": [{"description": "FileStreamSource[x]", "numInputRows": 600}],
}


def progress_event(progress: dict[str, Any]) -> Any:
    """What the listener gets: an event whose ``progress.json`` is the progress as JSON text."""
    return SimpleNamespace(progress=SimpleNamespace(json=json.dumps(progress)))


@pytest.mark.clauses("OXS-R10", "OXS-R16")
def test_spark_metrics_come_from_the_documented_progress_fields() -> None:
    metrics = load_metrics_from_progress(BUSY_PROGRESS, 10_000, 1000, 1024 * MIB)
    # cpu 100*2500//10000; memory 100*512MiB//1024MiB; depth (400-240)*2.5 s; latency triggerExecution
    assert metrics == {"cpu": 25, "memory": 50, "queue_depth": 400, "latency": 2500}
    # OXS-R10 with capacity 1000 and target 5000 ms: max(250, 500, 400, 500)
    assert load_score(metrics, 1000, 5000) == 500


@pytest.mark.clauses("OXS-R10", "OXS-R16")
def test_spark_metrics_are_capped_and_missing_figures_count_as_zero() -> None:
    overrun = {
        "batchDuration": 31_000,
        "durationMs": {"triggerExecution": 30_000},
        "inputRowsPerSecond": 100.0,
        "processedRowsPerSecond": 150.0,  # keeping up: nothing queues
        "stateOperators": [{"memoryUsedBytes": 3 * 1024 * MIB}],
    }
    assert load_metrics_from_progress(overrun, 10_000, 1000, 1024 * MIB) == {
        "cpu": 100,
        "memory": 100,
        "queue_depth": 0,
        "latency": 30_000,
    }
    # Spark leaves NaN rates out of the JSON; without a trigger duration the batch duration is used.
    sparse = {"batchDuration": 750, "durationMs": {}, "stateOperators": [], "sources": []}
    assert load_metrics_from_progress(sparse, 1000, 1000, MIB) == {
        "cpu": 75,
        "memory": 0,
        "queue_depth": 0,
        "latency": 750,
    }
    assert load_metrics_from_progress({}, 1000, 1000, MIB) == dict.fromkeys(
        ("cpu", "memory", "queue_depth", "latency"), 0
    )


@pytest.mark.clauses("OXS-R10", "OXS-R16")
def test_spark_a_backlog_a_source_reports_beats_the_rate_estimate() -> None:
    kafka = {
        **BUSY_PROGRESS,
        "sources": [
            {
                "description": "KafkaV2[a]",
                "metrics": {"maxOffsetsBehindLatest": "900", "avgOffsetsBehindLatest": "450.0"},
            },
            {"description": "KafkaV2[b]", "metrics": {"maxOffsetsBehindLatest": "350"}},
        ],
    }
    # 900 + 350 rows behind beats the estimate of 400; with capacity 1000 the depth term is capped at 1000
    metrics = load_metrics_from_progress(kafka, 10_000, 1000, 1024 * MIB)
    assert metrics["queue_depth"] == 1250
    assert load_score(metrics, 1000, 5000) == 1000
    # a smaller reported backlog leaves the estimate
    small = {
        **BUSY_PROGRESS,
        "sources": [{"description": "KafkaV2[a]", "metrics": {"maxOffsetsBehindLatest": "12"}}],
    }
    assert load_metrics_from_progress(small, 10_000, 1000, 1024 * MIB)["queue_depth"] == 400


@pytest.mark.clauses("OXS-R10")
def test_spark_load_score_is_the_most_saturated_resource() -> None:
    assert load_score({}, 1000, 1000) == 0  # every metric is 0 until reported
    assert load_score({"cpu": 37}, 1000, 1000) == 370
    assert load_score({"cpu": 10, "memory": 95}, 1000, 1000) == 950
    assert load_score({"queue_depth": 333}, 1000, 1000) == 333
    assert load_score({"queue_depth": 7}, 3, 1000) == 1000  # 7000 // 3 capped
    assert load_score({"queue_depth": 2}, 3, 1000) == 666  # integer division rounds down
    assert load_score({"latency": 1999}, 1000, 4000) == 499
    assert load_score({"cpu": 20, "memory": 20, "queue_depth": 100, "latency": 100}, 1000, 1000) == 200
    assert load_score({"cpu": 100, "latency": 10**12}, 1000, 1) == 1000


@pytest.mark.clauses("OXS-R10")
def test_spark_load_score_agrees_with_the_oracle_on_a_grid() -> None:
    for capacity, target in ((1, 1), (3, 7), (1000, 1000), (250, 40_000)):
        config = LoadSheddingConfig(queue_capacity=capacity, latency_target_ms=target)
        for cpu in (0, 1, 50, 100):
            for memory in (0, 33, 100):
                for depth in (0, 1, 2, 999, 10**6):
                    for latency in (0, 1, 39_999, 40_000, 10**7):
                        metrics = {"cpu": cpu, "memory": memory, "queue_depth": depth, "latency": latency}
                        assert load_score(metrics, capacity, target) == oracle_load_score(metrics, config)


@pytest.mark.clauses("OXS-R10", "OXS-R15")
@pytest.mark.parametrize(
    "metrics",
    [{"cpu": 101}, {"memory": -1}, {"queue_depth": -5}, {"latency": 1.5}, {"cpu": True}, {"disk": 3}],
    ids=repr,
)
def test_spark_load_score_refuses_what_a_load_item_may_not_hold(metrics: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="load metric"):
        load_score(metrics, 1000, 1000)


@pytest.mark.clauses("OXS-R16")
def test_spark_settings_are_checked_when_given() -> None:
    with pytest.raises(ValueError, match="trigger_interval_ms must be an integer >= 1"):
        load_metrics_from_progress(BUSY_PROGRESS, 0, 1000, MIB)
    with pytest.raises(ValueError, match="latency_target_ms must be an integer >= 1"):
        load_score({}, 1000, 0)
    with pytest.raises(ValueError, match="give query_name or query_id"):
        ProgressLoadSignal("/tmp/unused", trigger_interval_ms=1000)
    with pytest.raises(ValueError, match="must be a local or mounted path"):
        ProgressLoadSignal("s3a://bucket/load", query_name="q", trigger_interval_ms=1000)


@pytest.mark.clauses("OXS-R10", "OXS-R16")
def test_spark_the_listener_publishes_each_progress_of_its_query_only(tmp_path: Path) -> None:
    signal = ProgressLoadSignal(
        str(tmp_path / "sig"),
        query_name="orders",
        trigger_interval_ms=10_000,
        queue_capacity=1000,
        latency_target_ms=5000,
        memory_budget_bytes=1024 * MIB,
    )
    # before any progress: score 0 from no batch
    assert signal.score() == 0 and signal.record()["batch_id"] == NO_BATCH
    run = str(uuid.uuid4())
    signal.onQueryProgress(progress_event({**BUSY_PROGRESS, "name": "orders", "id": "q1", "runId": run}))
    assert signal.score() == 500
    assert signal.record()["metrics"] == {"cpu": 25, "memory": 50, "queue_depth": 400, "latency": 2500}
    assert signal.record()["batch_id"] == 7
    # another query's progress changes nothing
    signal.onQueryProgress(
        progress_event(
            {
                **BUSY_PROGRESS,
                "batchId": 8,
                "name": "audit",
                "runId": run,
                "durationMs": {"triggerExecution": 10},
            }
        )
    )
    assert signal.record()["batch_id"] == 7
    # an older batch of the same run arriving late does not overwrite a newer one
    signal.onQueryProgress(
        progress_event(
            {
                **BUSY_PROGRESS,
                "batchId": 6,
                "name": "orders",
                "runId": run,
                "durationMs": {"triggerExecution": 100},
            }
        )
    )
    assert signal.score() == 500
    # the next batch: 1 s of 10 s, no state, keeping up: max(100, 0, 0, 1000 * 1000 // 5000)
    quiet = {
        "batchId": 8,
        "name": "orders",
        "runId": run,
        "durationMs": {"triggerExecution": 1000},
        "inputRowsPerSecond": 5.0,
        "processedRowsPerSecond": 9.0,
        "stateOperators": [],
    }
    signal.onQueryProgress(progress_event(quiet))
    assert signal.score() == 200 and signal.record()["batch_id"] == 8
    assert [r["batch_id"] for r in signal.published()] == [NO_BATCH, 7, 8]
    # the record is one JSON file replaced whole; no temporary file stays behind
    assert sorted(p.name for p in (tmp_path / "sig").iterdir()) == ["load_score.json"]
    assert read_record(str(tmp_path / "sig" / "load_score.json"))["score"] == 200


@pytest.mark.clauses("OXS-R16", "OXS-R18")
def test_spark_a_restart_carries_the_record_over_to_the_last_commit(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "commits").mkdir(parents=True)
    for name in ("0", "1", "2", ".2.crc"):
        (checkpoint / "commits" / name).write_text("v1\n")
    signal = ProgressLoadSignal(
        str(tmp_path / "sig"),
        query_name="orders",
        trigger_interval_ms=10_000,
        latency_target_ms=5000,
        checkpoint_location=f"file://{checkpoint}",
    )
    signal.onQueryProgress(progress_event({**BUSY_PROGRESS, "batchId": 1, "name": "orders", "runId": "r1"}))
    # batch 2 committed but its progress was never published; the query restarts
    signal.onQueryStarted(SimpleNamespace(name="orders", id="q1", runId="r2"))
    record = signal.record()
    assert (record["batch_id"], record["run_id"], record["score"]) == (2, "r2", 500)
    # so the first batch of the new run does not wait for a record that will never come
    started = time.monotonic()
    assert await_record(signal.path, str(checkpoint), 5000)["batch_id"] == 2
    assert time.monotonic() - started < 1


@pytest.mark.clauses("OXS-R16")
def test_spark_the_reader_waits_for_a_late_record_within_its_bound(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "commits").mkdir(parents=True)
    signal = ProgressLoadSignal(
        str(tmp_path / "sig"), query_name="orders", trigger_interval_ms=1000, latency_target_ms=1000
    )
    # batch 0 committed, its record not yet published: batch 1 waits for it
    (checkpoint / "commits" / "0").write_text("v1\n")
    late = {"batchId": 0, "name": "orders", "runId": "r1", "durationMs": {"triggerExecution": 420}}
    publisher = threading.Timer(0.3, signal.onQueryProgress, [progress_event(late)])
    publisher.start()
    started = time.monotonic()
    record = await_record(signal.path, str(checkpoint), 10_000)
    publisher.join()
    assert (record["batch_id"], record["score"]) == (0, 420)
    assert 0.25 < time.monotonic() - started < 5
    # batch 1 committed, nothing published for it: the bound ends the wait with the record there is
    (checkpoint / "commits" / "1").write_text("v1\n")
    started = time.monotonic()
    assert await_record(signal.path, str(checkpoint), 300)["batch_id"] == 0
    assert 0.25 < time.monotonic() - started < 5
    # two batches behind: the listener is gone, no wait at all
    (checkpoint / "commits" / "2").write_text("v1\n")
    started = time.monotonic()
    assert await_record(signal.path, str(checkpoint), 10_000)["batch_id"] == 0
    assert time.monotonic() - started < 1


class SlowProgressLoadSignal(ProgressLoadSignal):
    """Publishes each progress 2 s late: under availableNow the next batch has started by then."""

    def onQueryProgress(self, event: Any) -> None:
        time.sleep(2)
        super().onQueryProgress(event)


def _epoch_ms(timestamp: str) -> int:
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


@pytest.mark.clauses("OXS-R10", "OXS-R16")
def test_spark_each_micro_batch_carries_the_score_of_the_previous_ones_progress(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_impl.session import get_spark

    spark = get_spark()
    events_dir, out_dir, checkpoint = tmp_path / "events", tmp_path / "out", tmp_path / "checkpoint"
    events_dir.mkdir()
    batches = 3
    for part in range(batches):
        path = events_dir / f"part-{part}.parquet"
        pq.write_table(
            pa.table({"part": pa.array([part, part], pa.int32()), "v": [10 * part, 10 * part + 1]}), path
        )
        os.utime(path, (time.time() - 60 + part, time.time() - 60 + part))  # one file per batch, in order
    name = f"load_signal_{uuid.uuid4().hex[:8]}"
    trigger_ms, capacity, target = 60_000, 1000, 10_000
    signal = SlowProgressLoadSignal(
        str(tmp_path / "sig"),
        query_name=name,
        trigger_interval_ms=trigger_ms,
        queue_capacity=capacity,
        latency_target_ms=target,
        memory_budget_bytes=1 << 30,
        checkpoint_location=str(checkpoint),
    )
    try:
        events = (
            spark.readStream.schema("part int, v long")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(events_dir))
        )
        scored = with_load_score(events, signal, batch_column="load_batch")
        assert scored.columns == ["part", "v", "load_score", "load_batch"]
        query = (
            scored.writeStream.queryName(name)
            .format("parquet")
            .option("path", str(out_dir))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120), "the query did not finish within 120 s"
        progress = {p["batchId"]: json.loads(p.json) for p in query.recentProgress}
        rows = [r.asDict() for r in spark.read.parquet(str(out_dir)).collect()]
        deadline = time.monotonic() + 30  # the last batch's record too, before tmp_path goes away
        while signal.record()["batch_id"] < batches - 1 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        signal.detach()
    assert sorted(progress) == list(range(batches))
    assert sorted((r["part"], r["v"]) for r in rows) == [
        (p, 10 * p + d) for p in range(batches) for d in (0, 1)
    ]
    # the score each batch should see, from Spark's own progress of the batch before it
    expected = {0: (0, NO_BATCH)}
    for batch in range(1, batches):
        metrics = load_metrics_from_progress(progress[batch - 1], trigger_ms, capacity, 1 << 30)
        expected[batch] = (load_score(metrics, capacity, target), batch - 1)
    assert {r["part"]: (r["load_score"], r["load_batch"]) for r in rows} == expected
    assert all((r["load_score"], r["load_batch"]) == expected[r["part"]] for r in rows)
    assert len({score for score, _ in expected.values()}) > 1, expected  # a real signal, not a constant
    # what the listener published is what the rows carry
    published = {r["batch_id"]: r for r in signal.published()}
    assert sorted(published) == [NO_BATCH, *range(batches)]
    assert all(published[b - 1]["score"] == expected[b][0] for b in range(1, batches))
    # each score was published after its next batch had started: read without waiting, it would be stale
    assert all(
        published[b - 1]["published_at_ms"] > _epoch_ms(progress[b]["timestamp"]) for b in range(1, batches)
    )
