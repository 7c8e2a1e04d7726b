"""``SparkEngine``: the harness engine (spec/traces.md TR-9) on Spark Structured Streaming.

All traces of one ``run()`` go through ONE streaming query:

- configs are validated first (``InvalidConfig`` instances answer the invalid
  traces; Spark is not started when no trace is valid, nor for ``run([])``);
- every item becomes a row ``(trace_id, batch, seq, kind, key, event_time,
  value, time)``; each trace also gets a ``batch_end`` row per batch, so an
  empty trace batch still produces its progress row. The rows go to a
  temporary parquet file read by the ``trace`` source (one trace batch per
  micro-batch, ``Trigger.AvailableNow``);
- the stream id is the trace id: the operator groups by it, so the trace id
  is part of every state key, and each trace's own config is applied to its
  stream (``stream_configs``): one query for all configs;
- the output goes to a parquet sink with a checkpoint in a temporary
  directory; after the run the sink is read back and split per trace;
- restarts (TR-5, F065-R24): the query stops after every batch that any
  trace names in ``restart_after`` and a new query continues from the same
  checkpoint (the source's ``end_batch`` option). Traces that did not ask
  for a restart are restarted too, which the clause allows (the output of a
  restarted run equals the uninterrupted one).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

from harness.outputs import TABLES, Output
from harness.traces import InvalidConfig, Trace

AREA = "keyed_watermarks"
INPUT_SCHEMA = [
    ("trace_id", "string"),
    ("batch", "int64"),
    ("seq", "int64"),
    ("kind", "string"),
    ("key", "string"),
    ("event_time", "int64"),
    ("value", "int64"),
    ("time", "int64"),
]


class SparkEngine:
    name = "spark"
    areas = frozenset({AREA})

    def __init__(self, spark: Any = None, partitions: int = 1) -> None:
        self._spark = spark
        self.partitions = partitions
        self.last_run_seconds: float | None = None

    @property
    def description(self) -> str:
        """Which Spark answered: shown in the conformance summary."""
        remote = os.environ.get("SPARK_REMOTE")
        mode = f"Spark Connect at {remote}" if remote else "classic"
        return f"Spark {self.spark.version}, {mode}"

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from spark_impl.session import get_spark

            self._spark = get_spark()
        return self._spark

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]:
        from spark_impl.keyed_watermarks import validate_config

        results: list[Output | Exception | None] = [None] * len(traces)
        valid: dict[str, tuple[int, Trace]] = {}
        configs: dict[str, dict[str, Any]] = {}
        for i, trace in enumerate(traces):
            if trace.area != AREA:
                raise ValueError(f"SparkEngine implements {sorted(self.areas)}, not {trace.area!r}")
            try:
                validate_config(trace.config)
            except InvalidConfig as error:
                results[i] = error
                continue
            tid = f"t{i:06d}"
            valid[tid] = (i, trace)
            configs[tid] = dict(trace.config)
        if valid:
            outputs = self._run_query(valid, configs)
            for tid, (i, _) in valid.items():
                results[i] = outputs[tid]
        return results  # type: ignore[return-value]

    # ---- one multiplexed query ---------------------------------------------

    def _run_query(
        self, traces: dict[str, tuple[int, Trace]], configs: dict[str, dict[str, Any]]
    ) -> dict[str, Output]:
        import time

        from pyspark.sql import functions as F

        from spark_impl.keyed_watermarks import keyed_watermarks
        from spark_impl.trace_source import SOURCE_NAME, write_trace_file

        spark = self.spark
        work = tempfile.mkdtemp(prefix="kw-spark-")
        try:
            path = os.path.join(work, "input.parquet")
            write_trace_file(path, _rows_table(traces))
            num_batches = max(len(t.batches) for _, t in traces.values())
            stops = sorted({b for _, t in traces.values() for b in t.restart_after} | {num_batches - 1})
            sink = os.path.join(work, "sink")
            checkpoint = os.path.join(work, "checkpoint")
            started = time.perf_counter()
            for end_batch in stops:
                df = (
                    spark.readStream.format(SOURCE_NAME)
                    .option("path", path)
                    .option("num_batches", str(num_batches))
                    .option("end_batch", str(end_batch))
                    .option("partitions", str(self.partitions))
                    .load()
                )
                kw = keyed_watermarks(
                    df,
                    key_col="key",
                    event_time_col="event_time",
                    stream_id_col="trace_id",
                    seq_col="seq",
                    kind_col="kind",
                    value_col="value",
                    time_col="time",
                    batch_col="batch",
                    stream_configs=configs,
                )
                query = (
                    kw.output.writeStream.format("parquet")
                    .option("checkpointLocation", checkpoint)
                    .option("path", sink)
                    .outputMode("append")
                    .trigger(availableNow=True)
                    .start()
                )
                try:
                    query.awaitTermination()
                finally:
                    if query.isActive:
                        query.stop()
                error = query.exception()
                if error is not None:
                    raise RuntimeError(f"keyed_watermarks query failed: {error}")
            self.last_run_seconds = time.perf_counter() - started
            from spark_impl.keyed_watermarks import OUTPUT_COLUMNS

            rows = spark.read.parquet(sink).select(*[F.col(c) for c in OUTPUT_COLUMNS]).collect()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return _split(rows, traces)


def _rows_table(traces: dict[str, tuple[int, Trace]]) -> Any:
    import pyarrow as pa

    cols: dict[str, list[Any]] = {name: [] for name, _ in INPUT_SCHEMA}
    for tid, (_, trace) in traces.items():
        for b, batch in enumerate(trace.batches):
            for seq, item in enumerate(batch):
                cols["trace_id"].append(tid)
                cols["batch"].append(b)
                cols["seq"].append(seq)
                cols["kind"].append(item.kind)
                cols["key"].append(item.key)
                cols["event_time"].append(item.event_time)
                cols["value"].append(item.value)
                cols["time"].append(item.time)
            # One marker per trace and batch: the stream gets its progress row
            # even when the batch is empty (F065-R22).
            cols["trace_id"].append(tid)
            cols["batch"].append(b)
            cols["seq"].append(len(batch))
            cols["kind"].append("batch_end")
            cols["key"].append(None)
            cols["event_time"].append(None)
            cols["value"].append(0)
            cols["time"].append(None)
    schema = pa.schema([(n, pa.string() if t == "string" else pa.int64()) for n, t in INPUT_SCHEMA])
    return pa.table(cols, schema=schema)


def _split(rows: list[Any], traces: dict[str, tuple[int, Trace]]) -> dict[str, Output]:
    tables = TABLES[AREA]
    out: dict[str, Output] = {tid: {name: [] for name in tables} for tid in traces}
    for r in rows:
        d = r.asDict()
        table = d["output"]
        out[d["stream_id"]][table].append(tuple(d[c] for c in tables[table]))
    return out


__all__ = ["SparkEngine"]
