"""Operators finished in the sink (``spark_impl.scaleout.SinkStep``): one stateful stage fewer.

``write_tables``, ``foreach_batch`` and the harness engine run every operator's stages up to the
wide one and its per-stream step (for keyed watermarks the global watermark, the counters, the
progress rows) in the ``foreachBatch`` function, with that step's state in two slots beside
the checkpoint. The suites check every operator's answers against the oracle through the
engine, restarts included; these tests check, on keyed watermarks, what only a failure or an
old checkpoint shows, and the slots' rows for a step with a MapState (per-partition
watermarks):

- a query killed after the sink step wrote the state of a batch, and its tables, but before
  Spark committed the batch: the batch runs again, reads the state of the batch before (the
  other slot), and the sink ends with the oracle's rows, nothing twice (TR-17, F065-R24);
- ``foreach_batch`` hands the function the rows ``output`` gives, the progress rows included,
  and the operator's cost per stream and batch in its own ``metrics`` table;
- a checkpoint of the two-stage plan (what ``write_tables`` ran before this release: the
  per-stream state in a second stateful stage) is refused before the query starts, with the
  operators' own error and what to do (Spark's own refusal names stateful operators only).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.traces import Item, Trace
from spark_impl.checkpoints import IncompatibleCheckpoint
from spark_impl.testing.faults import Kill, KillsInBackground

KEYED = "keyed_watermarks"


def _trace(shift: int) -> Trace:
    """Three batches over three keys with a clock move, late events and an idle key."""
    e = lambda key, t: Item(kind="event", key=key, event_time=t + shift)  # noqa: E731
    return Trace(
        area=KEYED,
        config={"bounded_delay": 10, "idle_timeout": 200},
        batches=(
            (e("a", 100), e("b", 50), e("c", 70)),
            (e("a", 80), Item(kind="clock", time=300), e("b", 40), e("a", 130)),
            (e("b", 300), e("c", 60), Item(kind="clock", time=600)),
        ),
    )


_KILLED: list[KillsInBackground] = []


def start_killed_run() -> None:
    """The killed query in the background: it takes the core the other Spark tests leave idle
    once the pre-run is over."""
    if not _KILLED:
        _KILLED.append(KillsInBackground([_trace(0), _trace(1000)], [Kill(1, "after_sink")], keep=True))


@pytest.mark.after_prerun.with_args(start_killed_run)
@pytest.mark.clauses("TR-17", "F065-R24")
def test_spark_a_batch_killed_after_its_sink_step_runs_again_from_the_state_before_it() -> None:
    start_killed_run()  # started already in a whole run; alone, now
    run = _KILLED[0].result()
    try:
        assert [str(k.kill) for k in run.kills] == ["after_sink of batch 1"], run.kills
        assert not run.problems, "\n".join(str(p) for p in run.problems)
        slots = sorted(p.name for p in (Path(run.workdir) / "checkpoint" / "sink_step").iterdir())
        assert slots == ["slot=0", "slot=1"], slots  # the query ran the one-stage plan
    finally:
        shutil.rmtree(run.workdir, ignore_errors=True)


def _source(spark: Any, work: Path, traces: list[Trace], end_batch: int) -> Any:
    from spark_impl.engine import _rows_table
    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    path = work / "input.parquet"
    if not path.exists():
        write_trace_file(str(path), _rows_table({f"t{i:06d}": (i, t) for i, t in enumerate(traces)}))
    return (
        spark.readStream.format(SOURCE_NAME).option("path", str(path))
        .option("num_batches", str(max(len(t.batches) for t in traces)))
        .option("end_batch", str(end_batch)).load()
    )  # fmt: skip


def _streams(df: Any, traces: list[Trace]) -> Any:
    from spark_impl.keyed_watermarks import engine_streams

    return engine_streams(df, {f"t{i:06d}": dict(t.config) for i, t in enumerate(traces)})


def _finished(query: Any) -> BaseException | None:
    """The query's failure once it ended (classic Spark raises it from ``awaitTermination``)."""
    try:
        query.awaitTermination()
    except Exception as error:  # noqa: BLE001 - StreamingQueryException, classic or Connect
        return error
    return query.exception()


@pytest.mark.clauses("F065-R5", "F065-R22")
def test_spark_foreach_batch_hands_on_the_rows_output_gives(tmp_path: Path) -> None:
    from spark_impl.keyed_watermarks import OUTPUT_COLUMNS
    from spark_impl.session import get_spark

    spark, traces = get_spark(), [_trace(0)]
    one = str(tmp_path / "one")

    def keep(rows: Any, batch_id: int) -> None:  # under Spark Connect this runs in the server
        rows.write.mode("overwrite").parquet(f"{one}/batch_id={batch_id}")

    once = {"availableNow": True}
    streams = _streams(_source(spark, tmp_path, traces, 2), traces)
    assert _finished(streams.foreach_batch(keep, str(tmp_path / "one-checkpoint"), trigger=once)) is None
    query = streams.output.writeStream.format("parquet").option("path", str(tmp_path / "both"))
    query = query.option("checkpointLocation", str(tmp_path / "both-checkpoint")).trigger(**once).start()
    assert _finished(query) is None
    seen = spark.read.parquet(one)
    assert seen.columns == [*OUTPUT_COLUMNS, "batch_id"]
    rows = [tuple(r) for r in seen.select(*OUTPUT_COLUMNS).collect()]
    both = [tuple(r) for r in spark.read.parquet(str(tmp_path / "both")).select(*OUTPUT_COLUMNS).collect()]
    assert any(r[0] == "progress" for r in rows) and sorted(map(repr, rows)) == sorted(map(repr, both))
    # the operator's own cost in a table of its own, one row per stream and batch; none in progress
    named = [dict(zip(OUTPUT_COLUMNS, r, strict=True)) for r in rows]
    metrics = [r for r in named if r["output"] == "metrics"]
    assert sorted(r["batch"] for r in metrics) == [0, 1, 2], metrics
    assert all(r["python_calls"] >= 1 and r["state_calls"] >= 1 for r in metrics), metrics
    assert all(r["python_calls"] is None for r in named if r["output"] == "progress")


@pytest.mark.clauses("TR-5")
def test_spark_a_checkpoint_of_the_two_stage_plan_is_refused_by_write_tables(tmp_path: Path) -> None:
    from spark_impl.common import write_batch_tables
    from spark_impl.keyed_watermarks import TABLE_COLUMNS
    from spark_impl.session import get_spark

    spark, traces = get_spark(), [_trace(0)]
    checkpoint, tables = str(tmp_path / "checkpoint"), {k: list(v) for k, v in TABLE_COLUMNS.items()}

    def old_write_tables(batch: Any, batch_id: int) -> None:  # the previous release's write_tables
        write_batch_tables(batch, batch_id, str(tmp_path / "old"), tables)

    two_stages = _streams(_source(spark, tmp_path, traces, 0), traces).output
    old = two_stages.writeStream.foreachBatch(old_write_tables).option("checkpointLocation", checkpoint)
    old = old.trigger(availableNow=True)
    assert _finished(old.start()) is None
    again = _streams(_source(spark, tmp_path, traces, 2), traces)
    with pytest.raises(IncompatibleCheckpoint, match="keeps the per-stream state in a second stateful stage"):
        again.write_tables(str(tmp_path / "new"), checkpoint, trigger={"availableNow": True})


@pytest.mark.clauses("TR-5")
def test_spark_a_batch_that_finds_no_earlier_per_stream_state_is_refused(tmp_path: Path) -> None:
    from spark_impl.session import get_spark

    spark, traces = get_spark(), [_trace(0)]
    checkpoint, once = str(tmp_path / "checkpoint"), {"availableNow": True}
    first = _streams(_source(spark, tmp_path, traces, 1), traces)
    assert _finished(first.write_tables(str(tmp_path / "out"), checkpoint, trigger=once)) is None
    shutil.rmtree(tmp_path / "checkpoint" / "sink_step")  # damaged: the counters would restart at zero
    again = _streams(_source(spark, tmp_path, traces, 2), traces)
    error = _finished(again.write_tables(str(tmp_path / "out"), checkpoint, trigger=once))
    assert error is not None and "micro-batch 2 finds no per-stream state of an earlier batch" in str(error)


@pytest.mark.clauses("TR-5")
def test_spark_a_slot_reads_the_same_whether_this_process_or_spark_wrote_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local checkpoint's slots are written without a Spark job, any other checkpoint's by
    Spark: the next batch reads the same state from both (a null stream id included)."""
    from spark_impl import partitioned_watermarks as pw
    from spark_impl import scaleout
    from spark_impl.keyed_watermarks import StreamState
    from spark_impl.session import get_spark

    spark, traces = get_spark(), [_trace(0)]
    step = _streams(_source(spark, tmp_path, traces, 0), traces).sink_step
    busy = StreamState(3, global_advances=4, evicted=1, key_advances=9)
    values = {("s1", -1, "stream"): busy.to_tuple(), (None, -1, "stream"): StreamState(3).to_tuple()}
    # a step whose narrow group keeps a MapState too: its entries are rows of the slot as well
    with_map = scaleout.SinkStep(
        "partitioned_watermarks", None, "stream", pw.STREAM_SCHEMA, pw.OUTPUT_COLUMNS, pw.LONG_COLS,
        maps={"sources": (pw.SOURCE_KEY_SCHEMA, pw.SOURCE_SCHEMA)},
    )  # fmt: skip
    figures = (np.array([0, 2], np.int64).tobytes(), np.arange(12, dtype=np.int64).tobytes())
    map_values = {
        ("s1", -1, "stream"): pw.StreamState(3).to_tuple(), ("s1", -1, "sources", 5): figures,
        ("s1", -1, "sources", -1): (b"", b""), (None, -1, "sources", 0): figures,
    }  # fmt: skip
    steps = {"value": (step, values), "map": (with_map, map_values)}
    for name, (each, written) in steps.items():
        each._write(spark, str(tmp_path / "local" / name), 1, 7, written)
    monkeypatch.setattr(scaleout, "local_folder", lambda path: None)
    for name, (each, written) in steps.items():
        each._write(spark, str(tmp_path / "by-spark" / name), 1, 7, written)
    for folder in ("local", "by-spark"):
        for name, (each, written) in steps.items():
            slot, read = each._before(spark, 8, str(tmp_path / folder / name))
            assert slot == 1 and {k: tuple(bytes(x) if isinstance(x, bytearray) else x for x in v)
                                  for k, v in read.items()} == written, (folder, name)  # fmt: skip


def test_which_checkpoint_folders_count_as_local() -> None:
    from spark_impl.scaleout import local_folder

    assert local_folder("/tmp/c/sink_step") == "/tmp/c/sink_step"
    assert local_folder("file:///tmp/c") == "/tmp/c" and local_folder("file:/tmp/c") == "/tmp/c"
    assert local_folder("relative/c") == "relative/c"
    assert local_folder("s3a://bucket/c") is None and local_folder("hdfs://nn:8020/c") is None


@pytest.mark.clauses("TR-17")
def test_spark_a_micro_batch_is_computed_once_for_its_reads_and_then_released(tmp_path: Path) -> None:
    """``computed_once``: the rows are computed once however often they are read inside (a
    second computation would run the stateful stage again), and, in classic Spark, the kept
    blocks are gone on exit (one batch's rows would otherwise stay until the JVM collects them)."""
    from pyspark.sql import functions as F

    from spark_impl.common import computed_once
    from spark_impl.session import get_spark, is_connect

    spark, calls = get_spark(), tmp_path / "calls"
    calls.mkdir()

    def counted(chunks: Any) -> Any:  # each computation of a chunk leaves a file
        import uuid

        for chunk in chunks:
            (calls / uuid.uuid4().hex).write_text(str(len(chunk)))
            yield chunk.assign(twice=chunk["id"] * 2)[["twice"]]

    rows = spark.range(1_000, numPartitions=4).mapInPandas(counted, "twice long")
    classic = not is_connect(spark)  # Spark Connect releases a checkpoint when its DataFrame is collected
    kept_before = spark.sparkContext._jsc.getPersistentRDDs().size() if classic else None
    with computed_once(rows) as kept:
        assert sum(r["twice"] for r in kept.collect()) == 2 * sum(range(1_000))
        assert kept.filter(F.col("twice") < 10).count() == 5
        assert sum(int(f.read_text()) for f in calls.iterdir()) == 1_000  # one computation of each row
    if classic:
        assert spark.sparkContext._jsc.getPersistentRDDs().size() == kept_before


def _drop_kept_blocks(kept: Any) -> None:
    """What an executor's death does to the rows it kept (classic Spark): they are gone."""
    kept._jdf.queryExecution().analyzed().rdd().unpersist(True)


@pytest.mark.clauses("TR-17")
def test_spark_kept_rows_lost_with_their_executor_are_computed_again(tmp_path: Path) -> None:
    """``use_computed_once``: rows kept for a micro-batch's reads that die with an executor are
    computed again and the reads run again from the start, instead of failing the query (a local
    checkpoint's lost blocks are never computed again by Spark itself); any other error is
    raised at once. Through Spark Connect the kept blocks are out of the client's reach, so
    there the test checks the path without a loss."""
    from spark_impl.common import KEEP_ATTEMPTS, LOST_KEPT_BLOCK, use_computed_once
    from spark_impl.session import get_spark, is_connect

    spark, calls = get_spark(), tmp_path / "calls"
    calls.mkdir()

    def counted(chunks: Any) -> Any:  # each computation of a chunk leaves a file
        import uuid

        for chunk in chunks:
            (calls / uuid.uuid4().hex).write_text(str(len(chunk)))
            yield chunk

    rows = spark.range(1_000, numPartitions=4).mapInPandas(counted, "id long")
    computed = lambda: sum(int(f.read_text()) for f in calls.iterdir())  # noqa: E731
    losses = 0 if is_connect(spark) else 1
    uses: list[int] = []

    def use(kept: Any) -> int:
        uses.append(1)
        if len(uses) <= losses:
            _drop_kept_blocks(kept)
        return kept.filter("id % 2 = 0").count()

    assert use_computed_once(rows, use) == 500
    assert len(uses) == losses + 1 and computed() == 1_000 * (losses + 1)
    if losses:
        uses.clear()
        with pytest.raises(Exception, match=LOST_KEPT_BLOCK):  # lost at every attempt: the error
            use_computed_once(rows, lambda kept: (_drop_kept_blocks(kept), kept.count()))
        before = computed()
        with pytest.raises(ZeroDivisionError):  # not a loss: raised at once, computed once
            use_computed_once(rows, lambda kept: (kept.count(), 1 // 0))
        assert computed() == before + 1_000 and KEEP_ATTEMPTS > 1


@pytest.mark.clauses("TR-17", "F065-R24")
def test_spark_a_sink_step_whose_kept_rows_are_lost_gives_the_answer_of_a_run_without_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's stateful stage computed a second time in the same micro-batch (its kept
    rows lost after the sink step wrote the batch's per-stream state and some tables) commits
    the same state, and every table equals the run without the loss (classic Spark: the
    ``foreach_batch`` function runs in this process, where the loss is planted)."""
    from contextlib import contextmanager

    from spark_impl import common
    from spark_impl.keyed_watermarks import TABLE_COLUMNS
    from spark_impl.session import get_spark, is_connect

    spark, traces, once = get_spark(), [_trace(0)], {"availableNow": True}
    plain = _streams(_source(spark, tmp_path, traces, 2), traces)
    assert _finished(plain.write_tables(str(tmp_path / "plain"), str(tmp_path / "c1"), trigger=once)) is None
    real_keep, real_write = common.computed_once, common.write_batch_tables
    kept_now: list[Any] = []
    written: list[int] = []  # the batch id of every call of the tables' writer

    @contextmanager
    def keep(batch: Any) -> Any:
        with real_keep(batch) as kept:
            kept_now[:] = [kept]
            yield kept

    def write_after_a_loss(batch: Any, batch_id: int, *args: Any, **kwargs: Any) -> None:
        written.append(batch_id)
        if batch_id == 1 and written.count(1) == 1:  # the step has written batch 1's per-stream state
            _drop_kept_blocks(kept_now[0])
        real_write(batch, batch_id, *args, **kwargs)

    monkeypatch.setattr(common, "computed_once", keep)
    monkeypatch.setattr(common, "write_batch_tables", write_after_a_loss)
    lossy = _streams(_source(spark, tmp_path, traces, 2), traces)
    out = str(tmp_path / "lossy")
    assert _finished(lossy.write_tables(out, str(tmp_path / "c2"), trigger=once)) is None
    if not is_connect(spark):
        assert written.count(1) == 2, f"batch 1 was not written a second time: {written}"
    for table in TABLE_COLUMNS:
        want = spark.read.parquet(str(tmp_path / "plain" / table))
        got = spark.read.parquet(f"{out}/{table}")
        assert sorted(map(repr, want.collect())) == sorted(map(repr, got.collect())), table
