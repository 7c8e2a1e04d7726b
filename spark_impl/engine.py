"""``SparkEngine``: the harness engine (spec/traces.md TR-9) on Spark Structured Streaming.

Areas: every area with a ``spark_impl.<area>`` module (``area_module``).
All traces of one ``run()``, of every area, go through ONE streaming query:

- configs are validated first (``InvalidConfig`` instances answer the invalid
  traces; Spark is not started when no trace is valid, nor for ``run([])``);
- every item becomes a row ``(trace_id, area, batch, seq, kind, key,
  event_time, value, time, source, partition, count, core)``; each trace
  also gets a ``batch_end`` row per batch, so an empty trace batch still
  produces its progress row. The rows go to a temporary parquet file read by
  the ``trace`` source (one trace batch per micro-batch,
  ``Trigger.AvailableNow``);
- the source is read once per micro-batch and split by the ``area`` column:
  each area present in the run gets its operator (``engine_output`` of its
  module), and their outputs are unioned by column name
  into one sink (one micro-batch per trace batch for all areas together);
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

import importlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

from harness.outputs import TABLES, Output
from harness.traces import ITEM_FIELD_TYPES, InvalidConfig, Trace

# Input columns: every item field, int fields as int64, every other field as a string
# (``json`` fields carry their JSON text: one column type for every trace).
INPUT_SCHEMA = [
    ("trace_id", "string"),
    ("area", "string"),
    ("batch", "int64"),
    ("seq", "int64"),
    ("kind", "string"),
    *((name, "int64" if t == "int" else "string") for name, t in ITEM_FIELD_TYPES.items()),
]


def area_module(area: str) -> Any:
    """``spark_impl.<area>``: its ``validate_config(config)`` raises InvalidConfig (TR-6) and
    its ``engine_output(df, stream_configs)`` is the area's operator on the engine's input rows
    (columns of INPUT_SCHEMA), returning one DataFrame with ``stream_id``, ``output`` (the
    table name) and the columns of the area's tables (harness/outputs.py)."""
    return importlib.import_module(f"spark_impl.{area}")


def implemented_areas() -> frozenset[str]:
    """The areas of harness/outputs.py that have a ``spark_impl`` module."""
    return frozenset(a for a in TABLES if importlib.util.find_spec(f"spark_impl.{a}") is not None)


class SparkEngine:
    name = "spark"
    areas = implemented_areas()

    def __init__(self, spark: Any = None, partitions: int = 1) -> None:
        self._spark = spark
        self.partitions = partitions
        self.last_run_seconds: float | None = None

    @property
    def description(self) -> str:
        """Which Spark answered: shown in the conformance summary."""
        remote = os.environ.get("SPARK_REMOTE")
        if remote:
            return f"Spark {self.spark.version}, Spark Connect at {remote}"
        return f"Spark {self.spark.version}, classic, master {self.spark.conf.get('spark.master')}"

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from spark_impl.session import get_spark

            self._spark = get_spark()
        return self._spark

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]:
        results: list[Output | Exception | None] = [None] * len(traces)
        valid: dict[str, tuple[int, Trace]] = {}
        configs: dict[str, dict[str, Any]] = {}
        for i, trace in enumerate(traces):
            if trace.area not in self.areas:
                raise ValueError(f"SparkEngine implements {sorted(self.areas)}, not {trace.area!r}")
            try:
                area_module(trace.area).validate_config(trace.config)
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

        from spark_impl.checkpoints import check_checkpoint
        from spark_impl.trace_source import SOURCE_NAME, write_trace_file

        spark = self.spark
        work = tempfile.mkdtemp(prefix="spark-engine-")
        areas = sorted({t.area for _, t in traces.values()})
        try:
            path = os.path.join(work, "input.parquet")
            write_trace_file(path, _rows_table(traces))
            num_batches = max(len(t.batches) for _, t in traces.values())
            stops = sorted({b for _, t in traces.values() for b in t.restart_after} | {num_batches - 1})
            sink = os.path.join(work, "sink")
            checkpoint = os.path.join(work, "checkpoint")
            started = time.perf_counter()
            for i, end_batch in enumerate(stops):
                if i == 1:
                    # TR-5: the first restart inspects the checkpoint the first query wrote (later
                    # ones continue from what the same code wrote seconds before; each costs ~2 s)
                    check_checkpoint(spark, checkpoint)
                df = (
                    spark.readStream.format(SOURCE_NAME)
                    .option("path", path)
                    .option("num_batches", str(num_batches))
                    .option("end_batch", str(end_batch))
                    .option("partitions", str(self.partitions))
                    .load()
                )
                output = combined_output(df, traces, configs)
                query = (
                    output.writeStream.format("parquet")
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
                    raise RuntimeError(f"{'+'.join(areas)} query failed: {error}")
            self.last_run_seconds = time.perf_counter() - started
            rows = spark.read.parquet(sink).collect()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return _split(rows, traces)


def combined_output(df: Any, traces: dict[str, tuple[int, Trace]], configs: dict[str, dict[str, Any]]) -> Any:
    """The run's one output DataFrame: the input rows ``df`` (columns of INPUT_SCHEMA) split by
    area, each area's operator (``engine_output``) on its own traces with their configs, the
    outputs unioned by column name (``harness.faults`` builds its killed queries with it too)."""
    from pyspark.sql import functions as F

    output = None
    for area in sorted({t.area for _, t in traces.values()}):
        mine = {tid: c for tid, c in configs.items() if traces[tid][1].area == area}
        part = area_module(area).engine_output(df.filter(F.col("area") == area), mine)
        output = part if output is None else output.unionByName(part, allowMissingColumns=True)
    assert output is not None, "combined_output needs at least one trace"
    return output


def _rows_table(traces: dict[str, tuple[int, Trace]]) -> Any:
    import pyarrow as pa

    cols: dict[str, list[Any]] = {name: [] for name, _ in INPUT_SCHEMA}
    for tid, (_, trace) in traces.items():
        for b, batch in enumerate(trace.batches):
            # One marker per trace and batch closes the list: the stream gets its progress
            # row even when the batch is empty (F065-R22, F064-R21).
            for seq, item in enumerate([*batch, None]):
                cols["trace_id"].append(tid)
                cols["area"].append(trace.area)
                cols["batch"].append(b)
                cols["seq"].append(seq)
                cols["kind"].append("batch_end" if item is None else item.kind)
                for name, type_name in ITEM_FIELD_TYPES.items():
                    marker_value = 0 if name == "value" else None
                    v = marker_value if item is None else getattr(item, name)
                    if type_name == "json" and v is not None:
                        v = json.dumps(v)
                    cols[name].append(v)
    schema = pa.schema([(n, pa.string() if t == "string" else pa.int64()) for n, t in INPUT_SCHEMA])
    return pa.table(cols, schema=schema)


def _split(rows: list[Any], traces: dict[str, tuple[int, Trace]]) -> dict[str, Output]:
    out: dict[str, Output] = {tid: {name: [] for name in TABLES[t.area]} for tid, (_, t) in traces.items()}
    for r in rows:
        d = r.asDict()
        tid, table = d["stream_id"], d["output"]
        columns = TABLES[traces[tid][1].area][table]
        out[tid][table].append(tuple(d[c] for c in columns))
    return out


__all__ = ["SparkEngine", "combined_output"]
