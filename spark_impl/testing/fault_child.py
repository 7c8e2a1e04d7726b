"""The child process of the fault tests (spark_impl/testing/faults.py; spec/traces.md TR-17).

``python -m spark_impl.testing.fault_child WORKDIR`` runs the Spark engine's combined query of the
traces in ``WORKDIR/run.json`` (``spark_impl.engine.combined_output``, or for a query of one
operator that finishes its micro-batches in the sink, its ``sink_rows`` and ``sink_step``: the
same query as ``SparkEngine``) over ``WORKDIR/input.parquet`` to its end (``Trigger.AvailableNow``, one
trace batch per micro-batch), writing through ``write_tables``'s per-batch function
(``spark_impl.common.write_batch_tables``) to ``WORKDIR/sink`` with its checkpoint in
``WORKDIR/checkpoint``; exit status 0 when the query ends, 1 when it fails.

``WORKDIR/plan.json`` names at most one kill point (``{"point": ..., "batch": ...}``). The
process that reaches it writes ``WORKDIR/reached.json`` and blocks there: the parent sees
the file and kills the whole process tree, so the kill lands exactly at that point. Where
each point is reached:

- ``before_batch``: the source's ``latestOffset`` planning that batch (its offsets not yet
  logged; the batch before it committed);
- ``reading``: the source's ``read`` of the batch (offsets logged, nothing computed);
- ``stateful``: a pass-through ``mapInArrow`` after the operators, in a task of the batch's
  last stage (earlier stages' state stores committed, that stage's not, or only some);
- ``after_state``, ``between_tables``, ``after_sink``: in ``write_batch_tables`` (with a sink
  step, after its per-stream state of the batch is written).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from spark_impl.trace_source import TraceDataSource, TraceStreamReader

SOURCE_NAME = "faulty_trace"
RUN_FILE = "run.json"
PLAN_FILE = "plan.json"
REACHED_FILE = "reached.json"
INPUT_FILE = "input.parquet"
#: a blocked process gives up after this long, so a parent that died leaves no process for ever
BLOCK_SECONDS = 900.0


def reach(point: str, batch: int, plan_point: str | None, plan_batch: int, reached_path: str) -> None:
    """At kill point ``point`` of micro-batch ``batch``: if it is the planned one, say so in
    ``reached_path`` and block until the parent's SIGKILL."""
    if point != plan_point or batch != plan_batch:
        return
    tmp = f"{reached_path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"point": point, "batch": batch, "pid": os.getpid()}, f)
    os.replace(tmp, reached_path)  # the parent never reads a half-written file
    deadline = time.monotonic() + BLOCK_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.5)
    os._exit(75)  # no parent came: end without running on past the point


class FaultyTraceStreamReader(TraceStreamReader):
    """The ``trace`` source with the ``before_batch`` and ``reading`` kill points."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.plan_point = options.get("kill_point") or None
        self.plan_batch = int(options.get("kill_batch", "-1"))
        self.reached_path = options["reached"]

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        done = 0 if start is None else int(start["batch"])
        if done < self.target:
            reach("before_batch", done, self.plan_point, self.plan_batch, self.reached_path)
        return super().latestOffset(start, limit)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        reach("reading", partition.batch, self.plan_point, self.plan_batch, self.reached_path)  # type: ignore[attr-defined]
        return super().read(partition)


class FaultyTraceDataSource(TraceDataSource):
    """``format("faulty_trace")``: the ``trace`` source plus the options ``kill_point``,
    ``kill_batch`` and ``reached`` (the file a reached point writes)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return FaultyTraceStreamReader(dict(self.options))


def sink_tables(traces: Sequence[Any]) -> dict[str, list[str]]:
    """Per table name of the traces' areas: ``stream_id`` and every column any of those areas
    gives that table (the combined query's tables share names across areas)."""
    from harness.outputs import TABLES

    tables: dict[str, list[str]] = {}
    for area in sorted({t.area for t in traces}):
        for name, columns in TABLES[area].items():
            cols = tables.setdefault(name, ["stream_id"])
            cols += [c for c in columns if c not in cols]
    return tables


def main(argv: Sequence[str]) -> int:
    from harness.traces import Trace
    from spark_impl.common import write_batch_tables
    from spark_impl.engine import combined_output, sink_step_streams
    from spark_impl.session import get_spark

    started = time.monotonic()

    def say(what: str) -> None:  # phase times in the child's log: what a kill costs
        print(f"fault child: {time.monotonic() - started:.1f} s {what}", file=sys.stderr, flush=True)

    work = Path(argv[0])
    run = json.loads((work / RUN_FILE).read_text(encoding="utf-8"))
    plan = json.loads((work / PLAN_FILE).read_text(encoding="utf-8"))
    plan_point, plan_batch = plan.get("point"), int(plan.get("batch", -1))
    reached_path = str(work / REACHED_FILE)
    listed = [Trace.from_json(t) for t in run["traces"]]
    traces = {f"t{i:06d}": (i, t) for i, t in enumerate(listed)}
    configs = {tid: dict(t.config) for tid, (_, t) in traces.items()}

    spark = get_spark()
    spark.dataSource.register(FaultyTraceDataSource)
    say("session ready")
    df = (
        spark.readStream.format(SOURCE_NAME)
        .option("path", str(work / INPUT_FILE))
        .option("num_batches", str(run["num_batches"]))
        .option("partitions", str(run["partitions"]))
        .option("kill_point", plan_point or "")
        .option("kill_batch", str(plan_batch))
        .option("reached", reached_path)
        .load()
    )
    streams = sink_step_streams(df, traces, configs)
    output = combined_output(df, traces, configs) if streams is None else streams.sink_rows

    def stage_point(chunks: Iterator[Any]) -> Iterator[Any]:
        import pyarrow.compute as pc

        for chunk in chunks:
            if (
                plan_point == "stateful"
                and chunk.num_rows
                and pc.any(pc.equal(chunk["batch"], plan_batch)).as_py()
            ):
                reach("stateful", plan_batch, plan_point, plan_batch, reached_path)
            yield chunk

    output = output.mapInArrow(stage_point, output.schema)
    tables = sink_tables(listed)
    sink = str(work / "sink")

    def at_point(point: str, batch_id: int) -> None:
        if point != "between_tables":
            say(f"batch {batch_id}: {point}")
        reach(point, batch_id, plan_point, plan_batch, reached_path)

    checkpoint = str(work / "checkpoint")

    def write_batch(batch: Any, batch_id: int) -> None:
        if streams is None:
            write_batch_tables(batch, batch_id, sink, tables, at_point)
        else:  # the engine's plan for this query: the narrow step in the sink, then the tables

            def tables_of(rows: Any) -> None:
                write_batch_tables(rows, batch_id, sink, tables, at_point, cache=False)

            streams.sink_step.run(batch, batch_id, checkpoint, tables_of)

    query = output.writeStream.foreachBatch(write_batch).option("checkpointLocation", checkpoint)
    query = query.trigger(availableNow=True).start()
    say("query started")
    try:
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
    error = query.exception()
    say("query ended")
    if error is not None:
        print(f"fault child: the query failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
