"""Benchmark: do the Spark operators scale out? Shape, speed-up with cores, memory, state size.

``--operator`` picks the operator (default ``keyed_watermarks``; also
``partitioned_watermarks``, ``late_data``, ``watermark_propagation``,
``session_windows``, ``eventtime_buffer``), each with its own events over uniform units
(``OPERATORS`` below): keys for the keyed and session operators
(``--shape-keys``, ``--speed-keys``), else ``--units`` (default 64)
partitions (4 sources of 16) or sources: the unit caps the parallelism of
these operators, so a handful would show nothing. The native counterpart is
``groupBy(<unit columns>).agg(max(event_time), count(*))``, or the
operator's own (session windows: ``withWatermark`` + ``groupBy(key,
session_window)`` + count and sum, append mode). Stateful stages are named in
the operator's order (``stages``: wide and narrow; session windows: order,
wide, narrow).

Four parts, each in its own Python subprocess (a SparkSession's master cannot
change within a process), all with ``spark.sql.shuffle.partitions`` = 8 and
events fed as exact micro-batches by the ``trace`` source (2 input partitions);
parts 3 and 4 pre-load keys, so only the keyed operator has both and
session windows part 3:

1. shape (local[2], Spark event log on): the operator ("ours") and the
   native aggregation (update mode, noop
   sink, Trigger.AvailableNow) on the same events. The event log
   (plain JSON lines) gives, per stateful stage of each query, the shuffle
   records each task read: a stage is stateful when its ``Stage Info`` ->
   ``RDD Info`` (SparkListenerStageSubmitted) holds a ``StateStoreRDD`` or
   ``ReadStateStoreRDD``; the RDD's ``Scope`` names the operator
   (TransformWithStateInPySpark, StateStoreRestore/Save); the stage's
   ``Properties`` carry the query (``sql.streaming.queryId``) and the
   micro-batch (``streaming.sql.batchId``); SparkListenerTaskEnd gives per task
   ``Task Metrics`` -> ``Shuffle Read Metrics`` -> ``Total Records Read``,
   ``Executor Run Time`` and ``Task Info`` -> ``Partition ID``. Reported per
   stateful stage (ordered by stage id inside a micro-batch: the wide stage
   first, then the narrow one): records per task summed over the batches
   (min / median / max, max over the fair share = total / tasks), the worst
   single batch, whether a wide-stage task read more than twice its fair share,
   and what the narrow stage reads against the events. The operator's progress
   rows (``output == "progress"``, the only rows written, to a parquet sink)
   give the per-batch median of ``python_calls`` and ``state_calls`` when the
   operator has them. The native query writes to the noop sink.
2. speed: events/s at local[1] and at local[2], ours and native alternately
   (``--rounds``), one long-lived subprocess per master, the masters taking
   turns; events/s leave out the first micro-batch (``measure.run_query``:
   input rows of batches 2.. over their ``triggerExecution`` time). Reports
   median [min-max] per engine and master, the gain per engine (rate at 2 /
   rate at 1 - 1), our_gain / native_gain (the target is >= 0.8) and the
   median peak memory of each run (RSS of the subprocess's tree: the driver's
   JVM and every Python worker).
3. state (keyed watermarks and session windows, whose state part uses a gap
   of a day so that every pre-loaded key holds one open session): one query
   pre-loads keys (batches of ``--load-batch`` new keys, one event each) up
   to each level of ``--keys-in-state`` (10k, 1M, 10M), then runs
   ``--touch-batches`` batches of ``--touch-events`` events over
   ``--touch-keys`` distinct keys already in state (after
   ``--warmup-batches`` such batches, default 1, not measured); the query
   stops after each level (the source's ``end_batch``) and continues on the same
   checkpoint; it writes its progress rows only, to a parquet sink. Per
   level: the median ``triggerExecution`` (and ``addBatch``) of the touch
   batches, ``python_calls`` / ``state_calls`` of those batches when the
   operator reports them, and state bytes per key from the checkpoint's
   RocksDB ``state/`` folder: the latest version (per state partition, the
   SST files listed in the newest ``<version>.zip`` snapshot plus that zip and
   any newer changelogs) and the whole folder (every retained version).
4. clock: part 3 with a clock row every ``--clock-every`` events (kind
   "clock", time = events so far in ms; events have kind "event"), given to
   the operator as ``kind_col="kind", time_col="time"``. Event time and
   processing time both advance 1 ms per event, so with the default 60 s idle
   timeout keys untouched for 60,000 events go idle.

``buckets`` is passed to ``keyed_watermarks`` only when its signature has it
(``--buckets``; by default the operator's own default). Spark's default Arrow
chunk size is used (``SPARK_ARROW_MAX_RECORDS_PER_BATCH`` is dropped from the
subprocesses' environment, and the project holding this script goes first on
their PYTHONPATH, so a copy of the project measures its own ``spark_impl``);
``SPARK_REMOTE`` is ignored (classic sessions only:
the event log and the masters need them). A benchmark reports figures; it
asserts nothing.

    python bench/scaleout.py --quick                        # everything small, a few minutes
    python bench/scaleout.py --operator late_data --quick   # shape and speed of another operator
    python bench/scaleout.py --json /tmp/scaleout.json      # full: 5 rounds, 100k events a batch, 10M keys
    python bench/scaleout.py --max-keys-in-state 1000000    # full, without the 10M-key level
    python bench/scaleout.py --parts shape speed --rounds 7 --speed-events-per-batch 200000
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # the project, for spark_impl when not installed
import measure  # noqa: E402 - bench/measure.py, the shared timing helpers
from eventtime_buffer import EventtimeBufferScaleout  # noqa: E402 - bench/eventtime_buffer.py

PARTS = ("shape", "speed", "state", "clock")
RESULT = "@@scaleout-result "  # prefix of a subprocess's result line on its stdout

# Sizes per mode; every one can be overridden on the command line.
QUICK = {
    "shape_batches": 4, "shape_events_per_batch": 20_000, "shape_keys": 10_000,
    "rounds": 2, "speed_batches": 4, "speed_events_per_batch": 20_000, "speed_keys": 10_000,
    "keys_in_state": [10_000, 100_000], "load_batch": 100_000,
    "touch_events": 100_000, "touch_keys": 10_000, "touch_batches": 2,
}  # fmt: skip
FULL = {
    "shape_batches": 10, "shape_events_per_batch": 20_000, "shape_keys": 10_000,
    "rounds": 5, "speed_batches": 8, "speed_events_per_batch": 100_000, "speed_keys": 10_000,
    "keys_in_state": [10_000, 1_000_000, 10_000_000], "load_batch": 500_000,
    "touch_events": 100_000, "touch_keys": 10_000, "touch_batches": 5,
}  # fmt: skip

# the RDDs that make a stage stateful; the last is the stream-stream join's
STATE_RDDS = ("StateStoreRDD", "ReadStateStoreRDD", "StateStoreAwareZipPartitionsRDD")
T0 = 1_700_000_000_000  # event time of the first event, ms


# ---- inputs ------------------------------------------------------------------


def uniform_events(path: str, batches: int, per_batch: int, units: int, seed: int, operator: str) -> None:
    """The operator's events over ``units`` uniform units (keys, partitions or sources)."""
    OPERATORS[operator].write_events(path, batches, per_batch, units, seed)


def key_names(ids: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.binary_join_element_wise("key-", pc.cast(pa.array(ids), pa.string()), "")


def state_trace(
    path: str, spec: dict[str, Any], clock_every: int | None, seed: int = 7
) -> list[dict[str, Any]]:
    """Writes the state-size trace and returns its levels: per level the load and touch batches.

    Load batches bring ``load_batch`` new keys each (one event per key) up to the
    level; touch batches then hold ``touch_events`` events over ``touch_keys``
    distinct keys drawn from the keys in state (each at least once), the first
    ``warmup_batches`` of them not measured. Event time
    is ``T0`` + the number of earlier events (ms) minus up to 2 s of disorder;
    with ``clock_every`` a clock row (time = the number of earlier events, ms)
    follows every ``clock_every`` events.
    """
    import numpy as np
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    rng = np.random.default_rng(seed)
    tables, levels = [], []
    arrived = loaded = batch = 0

    def add_batch(ids: Any) -> None:
        nonlocal arrived, batch
        n = len(ids)
        arrival = arrived + np.arange(n, dtype=np.int64)
        cols: dict[str, Any] = {
            "key": key_names(ids),
            "event_time": pa.array(T0 + arrival - rng.integers(0, 2_000, n)),
        }
        if clock_every:
            # Clock rows go after every clock_every-th event: sort by (arrival slot, event before clock).
            ticks = np.arange(clock_every, n + 1, clock_every)
            order = np.argsort(np.concatenate([np.arange(n) * 2, ticks * 2 - 1]), kind="stable")
            clock_time = arrived + ticks
            cols = {
                "key": pa.concat_arrays([cols["key"], pa.nulls(len(ticks), pa.string())]).take(order),
                "event_time": pa.concat_arrays([cols["event_time"], pa.nulls(len(ticks), pa.int64())]).take(
                    order
                ),
                "kind": pa.array(["event"] * n + ["clock"] * len(ticks)).take(order),
                "time": pa.concat_arrays([pa.nulls(n, pa.int64()), pa.array(clock_time)]).take(order),
            }
        rows = len(cols["key"])
        tables.append(
            pa.table({"batch": pa.array(np.full(rows, batch, np.int64)),
                      "seq": pa.array(np.arange(rows, dtype=np.int64)), **cols})
        )  # fmt: skip
        arrived += n
        batch += 1

    for level in spec["keys_in_state"]:
        first = batch
        while loaded < level:
            new = min(spec["load_batch"], level - loaded)
            add_batch(rng.permutation(np.arange(loaded, loaded + new)))
            loaded += new
        load = list(range(first, batch))
        touch = []
        for _ in range(spec["warmup_batches"] + spec["touch_batches"]):
            keys = rng.choice(loaded, size=min(spec["touch_keys"], loaded), replace=False)
            extra = keys[rng.integers(0, len(keys), max(0, spec["touch_events"] - len(keys)))]
            touch.append(batch)
            add_batch(rng.permutation(np.concatenate([keys, extra])))
        warmup, touch = touch[: spec["warmup_batches"]], touch[spec["warmup_batches"] :]
        levels.append({"keys": loaded, "load_batches": load, "warmup_batches": warmup, "touch_batches": touch,
                       "end_batch": batch - 1})  # fmt: skip
    write_trace_file(path, pa.concat_tables(tables))
    return levels


# ---- the operators measured -----------------------------------------------------------


def arrival_times(rng: Any, n: int, disorder_ms: int) -> Any:
    """Event times growing 1 ms per arrival, each up to ``disorder_ms`` early."""
    import numpy as np

    return T0 + np.arange(n, dtype=np.int64) - rng.integers(0, disorder_ms, n)


def batch_and_seq(batches: int, per_batch: int) -> tuple[Any, Any]:
    import numpy as np

    return (np.repeat(np.arange(batches, dtype=np.int64), per_batch),
            np.tile(np.arange(per_batch, dtype=np.int64), batches))  # fmt: skip


class KeyedWatermarks:
    """F065 over uniform keys (bench/keyed_watermarks.py's generator); the state parts use it too."""

    unit_columns = ("key",)
    unit_name = "keys"

    @staticmethod
    def function() -> Any:
        from spark_impl.keyed_watermarks import keyed_watermarks

        return keyed_watermarks

    @staticmethod
    def arguments(clock: bool, units: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"key_col": "key", "event_time_col": "event_time", "seq_col": "seq",
                                  "batch_col": "batch"}  # fmt: skip
        if clock:
            kwargs.update(kind_col="kind", time_col="time")
        return kwargs

    @staticmethod
    def write_events(path: str, batches: int, per_batch: int, units: int, seed: int) -> None:
        from keyed_watermarks import make_events  # bench/keyed_watermarks.py

        make_events(path, batches * per_batch, units, batches, seed)


class PartitionedWatermarks:
    """F064 over 4 sources of ``units / 4`` partitions each, events only (auto_register)."""

    unit_columns = ("source", "partition")
    unit_name = "partitions"

    @staticmethod
    def function() -> Any:
        from spark_impl.partitioned_watermarks import partitioned_watermarks

        return partitioned_watermarks

    @staticmethod
    def arguments(clock: bool, units: int) -> dict[str, Any]:
        return {"source_col": "source", "partition_col": "partition", "event_time_col": "event_time",
                "seq_col": "seq", "batch_col": "batch", "max_lateness_ms": 2_000,
                "auto_register": True}  # fmt: skip

    @staticmethod
    def write_events(path: str, batches: int, per_batch: int, units: int, seed: int) -> None:
        import numpy as np
        import pyarrow as pa

        from spark_impl.trace_source import write_trace_file

        rng = np.random.default_rng(seed)
        batch, seq = batch_and_seq(batches, per_batch)
        unit = rng.integers(0, units, len(batch))
        sources = max(1, min(4, units))
        write_trace_file(path, pa.table({
            "batch": batch, "seq": seq, "source": unit % sources, "partition": unit // sources,
            "event_time": arrival_times(rng, len(batch), 2_000),
        }))  # fmt: skip


class LateData:
    """OXL over ``units`` sources: events, and per source a watermark row (1 s behind the
    newest arrival) after about every 100th of its events; late events go to a side output."""

    unit_columns = ("source",)
    unit_name = "sources"

    @staticmethod
    def function() -> Any:
        from spark_impl.late_data import late_data

        return late_data

    @staticmethod
    def arguments(clock: bool, units: int) -> dict[str, Any]:
        return {"event_time_col": "event_time", "source_col": "source", "kind_col": "kind",
                "seq_col": "seq", "time_col": "time", "batch_col": "batch", "policy": "SideOutput",
                "channel": "late"}  # fmt: skip

    @staticmethod
    def write_events(path: str, batches: int, per_batch: int, units: int, seed: int) -> None:
        import numpy as np
        import pyarrow as pa

        from spark_impl.trace_source import write_trace_file

        rng = np.random.default_rng(seed)
        batch, seq = batch_and_seq(batches, per_batch)
        n = len(batch)
        event_time = arrival_times(rng, n, 2_000)
        marks = rng.random(n) < 0.01  # this row is a watermark of its source instead of an event
        newest = T0 + np.arange(n, dtype=np.int64)
        write_trace_file(path, pa.table({
            "batch": batch, "seq": seq, "source": rng.integers(0, units, n),
            "kind": pa.array(np.where(marks, "watermark", "event").astype(object), pa.string()),
            "event_time": pa.array(np.where(marks, 0, event_time), mask=marks),
            "time": pa.array(newest - 1_000, mask=~marks),
        }))  # fmt: skip


def propagation_graph(units: int) -> tuple[list[str], list[list[str]]]:
    """``units`` sources s<i>, joined 8 at a time into j<k>, all joins into one sink."""
    sources = [f"s{i}" for i in range(units)]
    joins = [f"j{k}" for k in range((units + 7) // 8)]
    edges = [[s, joins[i // 8]] for i, s in enumerate(sources)] + [[j, "sink"] for j in joins]
    return [*sources, *joins, "sink"], edges


class WatermarkPropagation:
    """OXW over ``units`` source nodes (``propagation_graph``), a generator emitting every 100th
    event of its source with 1 s of allowed disorder."""

    unit_columns = ("source",)
    unit_name = "sources"

    @staticmethod
    def function() -> Any:
        from spark_impl.watermark_propagation import watermark_propagation

        return watermark_propagation

    @staticmethod
    def arguments(clock: bool, units: int) -> dict[str, Any]:
        nodes, edges = propagation_graph(units)
        return {"nodes": nodes, "edges": edges, "node_col": "source", "event_time_col": "event_time",
                "seq_col": "seq", "batch_col": "batch", "advance_threshold": 100,
                "max_out_of_order_ms": 1_000}  # fmt: skip

    @staticmethod
    def write_events(path: str, batches: int, per_batch: int, units: int, seed: int) -> None:
        import numpy as np
        import pyarrow as pa

        from spark_impl.trace_source import write_trace_file

        rng = np.random.default_rng(seed)
        batch, seq = batch_and_seq(batches, per_batch)
        names = np.char.add("s", rng.integers(0, units, len(batch)).astype(str)).astype(object)
        write_trace_file(path, pa.table({
            "batch": batch, "seq": seq, "source": pa.array(names, pa.string()),
            "event_time": arrival_times(rng, len(batch), 2_000),
        }))  # fmt: skip


class SessionWindows:
    """F017E over uniform keys (values 0..99, event times 1 ms per arrival and up to 2 s early):
    a 30 s gap and a 10 s delay, so nothing is late and a key's session closes after a quiet
    spell; against Spark's own ``session_window`` with the same gap and delay (append mode).
    The state part pre-loads keys with a gap of a day: every key keeps one open session, so the
    keys in state are open sessions (the ``state_overrides``)."""

    unit_columns = ("key",)
    unit_name = "keys"
    stages = ("order", "wide", "narrow")
    state_parts = ("state",)
    state_overrides: dict[str, Any] = {"gap_ms": 86_400_000, "value_col": None}
    native_mode = "append"
    GAP_MS, DELAY_MS = 30_000, 10_000

    @staticmethod
    def function() -> Any:
        from spark_impl.session_windows import session_windows

        return session_windows

    @classmethod
    def arguments(cls, clock: bool, units: int) -> dict[str, Any]:
        return {"key_col": "key", "event_time_col": "event_time", "seq_col": "seq", "batch_col": "batch",
                "value_col": "value", "gap_ms": cls.GAP_MS, "bounded_delay_ms": cls.DELAY_MS}  # fmt: skip

    @staticmethod
    def write_events(path: str, batches: int, per_batch: int, units: int, seed: int) -> None:
        import numpy as np
        import pyarrow as pa

        from spark_impl.trace_source import write_trace_file

        rng = np.random.default_rng(seed)
        batch, seq = batch_and_seq(batches, per_batch)
        n = len(batch)
        write_trace_file(path, pa.table({
            "batch": batch, "seq": seq, "key": key_names(rng.integers(0, units, n)),
            "event_time": arrival_times(rng, n, 2_000), "value": rng.integers(0, 100, n),
        }))  # fmt: skip

    @classmethod
    def native(cls, df: Any) -> Any:
        from pyspark.sql import functions as F

        return (
            df.withColumn("ts", F.timestamp_millis("event_time"))
            .withWatermark("ts", f"{cls.DELAY_MS} milliseconds")
            .groupBy("key", F.session_window("ts", f"{cls.GAP_MS} milliseconds"))
            .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
        )


OPERATORS: dict[str, Any] = {
    "keyed_watermarks": KeyedWatermarks,
    "partitioned_watermarks": PartitionedWatermarks,
    "late_data": LateData,
    "watermark_propagation": WatermarkPropagation,
    "session_windows": SessionWindows,
    "eventtime_buffer": EventtimeBufferScaleout,
}


# ---- Spark, inside a subprocess --------------------------------------------------


def start_session(master: str, partitions: int, event_log: str | None = None) -> Any:
    """A classic session at ``master`` with the project's settings (spark_impl.session)."""
    from pyspark.sql import SparkSession

    from spark_impl.session import configure, get_spark

    builder = (
        configure(SparkSession.builder)
        .master(master)
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if event_log:
        # Plain JSON lines in one file (Spark 4 compresses and rolls the log by default).
        builder = (
            builder.config("spark.eventLog.enabled", "true")
            .config("spark.eventLog.dir", "file://" + event_log)
            .config("spark.eventLog.compress", "false")
            .config("spark.eventLog.rolling.enabled", "false")
        )
    builder.getOrCreate()
    return get_spark(shuffle_partitions=partitions)  # reuses the session, adds the project's settings


def source(spark: Any, path: str, spec: dict[str, Any], end_batch: int | None = None) -> Any:
    return measure.trace_stream(spark, path, spec["input_partitions"], end_batch)


def ours(df: Any, spec: dict[str, Any], clock: bool = False) -> Any:
    """The measured operator over ``df`` (``buckets`` only when the operator takes it)."""
    operator = OPERATORS[spec["operator"]]
    kwargs = operator.arguments(clock, spec["units"])
    if spec.get("state_part"):
        kwargs.update(getattr(operator, "state_overrides", {}))
    if has_buckets(spec["operator"]):
        kwargs["buckets"] = spec.get("buckets")
    return operator.function()(df, **{k: v for k, v in kwargs.items() if v is not None})


def native(df: Any, spec: dict[str, Any]) -> Any:
    """The native query the operator is measured against: the operator's own (``native``), else
    max event time and count per unit."""
    from pyspark.sql import functions as F

    operator = OPERATORS[spec["operator"]]
    if hasattr(operator, "native"):
        return operator.native(df)
    per_unit = df.groupBy(*operator.unit_columns)
    return per_unit.agg(F.max("event_time").alias("max_et"), F.count("*").alias("n"))


def native_mode(spec: dict[str, Any]) -> str:
    """The native query's output mode: update, or the operator's (session windows: append)."""
    return getattr(OPERATORS[spec["operator"]], "native_mode", "update")


def stage_roles(operator: str) -> tuple[str, ...]:
    """The operator's stateful stages in the order of a micro-batch (default: wide, narrow)."""
    return tuple(getattr(OPERATORS[operator], "stages", ("wide", "narrow")))


def has_buckets(operator: str) -> bool:
    return "buckets" in inspect.signature(OPERATORS[operator].function()).parameters


def operator_info(operator: str) -> dict[str, Any]:
    """Which operator was measured: its file and whether it takes ``buckets``."""
    import importlib

    module = importlib.import_module(f"spark_impl.{operator}")
    return {"name": operator, "file": module.__file__, "buckets_supported": has_buckets(operator)}


def run_to_end(df: Any, mode: str, checkpoint: str, out: str | None = None) -> Any:
    """Runs a query with Trigger.AvailableNow to the end of its input; the noop sink, or with
    ``out`` a parquet sink at that path (it continues on a restart; the memory sink does not).
    Returns the stopped query."""
    writer = df.writeStream.format("parquet" if out else "noop").outputMode(mode)
    writer = writer.option("checkpointLocation", checkpoint)
    if out:
        writer = writer.option("path", out)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return query


def progress_and_metrics(kw: Any) -> Any:
    """The operator's rows of its progress table and, where it has one, its metrics table."""
    from pyspark.sql import functions as F

    return kw.output.filter(F.col("output").isin("progress", "metrics"))


def call_counts(rows: Any, batches: Sequence[int] | None = None) -> dict[str, float] | None:
    """Per-batch medians of the metrics table's ``python_calls`` and ``state_calls`` (None when
    the operator has no metrics table)."""
    rows = rows[rows["output"] == "metrics"]
    if rows.empty:
        return None
    if batches is not None:
        rows = rows[rows["batch"].isin(list(batches))]
    per_batch = rows.groupby("batch")[["python_calls", "state_calls"]].sum()
    return {c: float(per_batch[c].median()) for c in ("python_calls", "state_calls")}


def trace_batch(progress: Any) -> int:
    """The trace batch of a micro-batch: the source's end offset is the number of batches delivered."""
    return int(json.loads(progress.sources[0].endOffset)["batch"]) - 1


# ---- the event log -------------------------------------------------------------


def event_log_file(folder: str) -> str:
    files = [os.path.join(folder, f) for f in os.listdir(folder) if not f.startswith(".")]
    if len(files) != 1 or os.path.isdir(files[0]):
        raise RuntimeError(f"expected one plain event log file in {folder}, found {os.listdir(folder)}")
    return files[0]


def stateful_stages(log: str) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """Per query id and micro-batch, its stateful stages in stage-id order, each with the operators
    (``ops``) and per task (partition id) the shuffle records read and the executor run time."""
    stages: dict[int, dict[str, Any]] = {}
    tasks: dict[int, dict[int, tuple[int, int]]] = collections.defaultdict(dict)
    for kind, event in measure.spark_events(log):
        if kind == "SparkListenerStageSubmitted":
            info, props = event["Stage Info"], event.get("Properties") or {}
            ops = sorted(
                {json.loads(r["Scope"])["name"] if r.get("Scope") else r["Name"]
                 for r in info["RDD Info"] if r["Name"] in STATE_RDDS}
            )  # fmt: skip
            if ops and "sql.streaming.queryId" in props:
                stages[info["Stage ID"]] = {
                    "query": props["sql.streaming.queryId"],
                    "batch": int(props.get("streaming.sql.batchId", -1)),
                    "ops": ops,
                    "tasks": info["Number of Tasks"],
                }
        elif kind == "SparkListenerTaskEnd" and event["Task End Reason"]["Reason"] == "Success":
            task, metrics = event["Task Info"], event["Task Metrics"]
            partition = task.get("Partition ID", task["Index"])
            records = metrics["Shuffle Read Metrics"]["Total Records Read"]
            tasks[event["Stage ID"]][partition] = (records, metrics["Executor Run Time"])
    found: dict[str, dict[int, list[dict[str, Any]]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for stage_id in sorted(stages):
        s = stages[stage_id]
        per_task = tasks.get(stage_id, {})
        found[s["query"]][s["batch"]].append({
            "stage": stage_id, "ops": s["ops"],
            "records": [per_task.get(p, (0, 0))[0] for p in range(s["tasks"])],
            "run_ms": [per_task.get(p, (0, 0))[1] for p in range(s["tasks"])],
        })  # fmt: skip
    return found


def balance(values: Sequence[float]) -> dict[str, float]:
    """min / median / max of per-task figures, the fair share (total / tasks) and max / fair share."""
    total = sum(values)
    fair = total / len(values) if values else 0.0
    return {
        "min": min(values), "median": statistics.median(values), "max": max(values), "total": total,
        "fair": fair, "max_over_fair": max(values) / fair if fair else float("nan"),
    }  # fmt: skip


def stage_shapes(batches: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per stateful stage position (0 = first in a micro-batch): per-task balance summed over the
    batches, the worst batch, and the records read per batch."""
    depth = max((len(s) for s in batches.values()), default=0)
    shapes = []
    for k in range(depth):
        runs = [stages[k] for _, stages in sorted(batches.items()) if len(stages) > k]
        tasks = len(runs[0]["records"])
        summed = [sum(r["records"][p] for r in runs) for p in range(tasks)]
        run_ms = [sum(r["run_ms"][p] for r in runs) for p in range(tasks)]
        busy = [r for r in runs if sum(r["records"])]
        worst = max(busy, key=lambda r: balance(r["records"])["max_over_fair"]) if busy else None
        shapes.append({
            "ops": sorted({op for r in runs for op in r["ops"]}),
            "tasks_per_batch": tasks,
            "batches": len(runs),
            "records_summed": balance(summed),
            "run_ms_summed": balance(run_ms),
            "worst_batch": None if worst is None else {
                "stage": worst["stage"], **balance(worst["records"]), "records": worst["records"]},
            "records_per_batch": [sum(r["records"]) for r in busy],
            "busiest_task_per_batch": [max(r["records"]) for r in busy],
            "records_by_batch": [r["records"] for r in busy],
        })  # fmt: skip
    return shapes


# ---- state on disk -------------------------------------------------------------


def latest_version_bytes(checkpoint: str) -> dict[str, int]:
    """Bytes of the newest RocksDB version of every state partition under ``<checkpoint>/state``:
    the SST files listed in its newest ``<version>.zip`` snapshot, the zip itself and changelogs
    newer than it; with the keys the snapshots count (RocksDB keys, not the operator's keys)."""
    total = keys = partitions = 0
    for root, _, files in os.walk(os.path.join(checkpoint, "state")):
        versions = [int(f[:-4]) for f in files if f.endswith(".zip") and f[:-4].isdigit()]
        changelogs = [f for f in files if f.endswith(".changelog") and f.split(".")[0].isdigit()]
        if not versions and not changelogs:
            continue
        partitions += 1
        latest = max(versions, default=-1)
        if versions:
            snapshot = os.path.join(root, f"{latest}.zip")
            total += os.path.getsize(snapshot)
            with zipfile.ZipFile(snapshot) as z:
                text = z.read("metadata").decode()
            meta = json.loads(text[text.index("{") :])  # "v1\n{...}"
            total += sum(int(s["sizeBytes"]) for s in meta.get("sstFiles", []))
            keys += int(meta.get("numKeys", 0))
        total += sum(
            os.path.getsize(os.path.join(root, f)) for f in changelogs if int(f.split(".")[0]) > latest
        )
    return {"bytes": total, "rocksdb_keys": keys, "partitions": partitions}


# ---- subprocess bodies ----------------------------------------------------------------


def reply(result: dict[str, Any]) -> None:
    print(RESULT + json.dumps(result), flush=True)


def child_shape(spec: dict[str, Any]) -> None:
    work, path = spec["work"], spec["path"]
    log_dir = os.path.join(work, "eventlog")
    os.makedirs(log_dir, exist_ok=True)
    spark = start_session("local[2]", spec["shuffle_partitions"], log_dir)
    kw = ours(source(spark, path, spec), spec)
    out = os.path.join(work, "shape-progress")
    q_ours = run_to_end(progress_and_metrics(kw), "append", os.path.join(work, "ck-shape-ours"), out)
    calls = call_counts(spark.read.parquet(out).toPandas())
    # The parquet sink names its files part-<partition>-...: the tasks that wrote progress rows.
    writers = sorted({int(f.split("-")[1]) for f in os.listdir(out) if f.startswith("part-")})
    q_native = run_to_end(
        native(source(spark, path, spec), spec), native_mode(spec), os.path.join(work, "ck-shape-native")
    )
    ids = {"ours": str(q_ours.id), "native": str(q_native.id)}
    rates = {"ours": warm_rate(q_ours.recentProgress), "native": warm_rate(q_native.recentProgress)}
    spark.stop()  # closes the event log
    found = stateful_stages(event_log_file(log_dir))
    reply({
        "operator": operator_info(spec["operator"]),
        "calls": calls,
        "progress_partitions": writers,
        "warm_events_per_s": rates,
        "stages": {name: stage_shapes(found.get(qid, {})) for name, qid in ids.items()},
    })  # fmt: skip


def warm_rate(progress: Sequence[Any]) -> float:
    """Input rows over trigger time of the micro-batches with input, leaving out the first."""
    busy = [p for p in progress if p.numInputRows > 0][1:]
    seconds = sum(p.durationMs["triggerExecution"] for p in busy) / 1000
    return sum(p.numInputRows for p in busy) / seconds if seconds else float("nan")


def child_speed(spec: dict[str, Any]) -> None:
    """A long-lived worker at one master: one JSON command a line on stdin ({"engine", "run"})."""
    spark = start_session(spec["master"], spec["shuffle_partitions"])
    reply({"ready": True, "operator": operator_info(spec["operator"])})
    for line in sys.stdin:
        command = json.loads(line)
        engine, checkpoint = command["engine"], os.path.join(spec["work"], f"ck-{command['run']}")
        df = source(spark, spec["path"], spec)
        if engine == "ours":
            run = measure.run_query(ours(df, spec).output, "append", checkpoint)
        else:
            run = measure.run_query(native(df, spec), native_mode(spec), checkpoint)
        shutil.rmtree(checkpoint, ignore_errors=True)
        reply({"engine": engine, "warm_rate": run.warm_rate(), "rate": run.rate(), "wall": run.wall,
               "batches": run.batches, "peak_rss": run.peak_rss})  # fmt: skip


def child_state(spec: dict[str, Any]) -> None:
    """The state trace level by level on one checkpoint: the query stops after each level's
    touch batches (the source's ``end_batch``) and continues from there at the next level."""
    spark = start_session("local[2]", spec["shuffle_partitions"])
    checkpoint, out = os.path.join(spec["work"], "ck-state"), os.path.join(spec["work"], "progress")
    results = []
    for level in spec["levels"]:
        kw = ours(source(spark, spec["path"], spec, level["end_batch"]), spec, clock=spec["clock"])
        started = time.perf_counter()
        query = run_to_end(progress_and_metrics(kw), "append", checkpoint, out)
        wall = time.perf_counter() - started
        by_batch = {trace_batch(p): p for p in query.recentProgress if p.numInputRows > 0}
        touch = [by_batch[b] for b in level["touch_batches"] if b in by_batch]
        load = [by_batch[b] for b in level["load_batches"] if b in by_batch]
        seconds = [p.durationMs["triggerExecution"] / 1000 for p in touch]
        results.append({
            "keys": level["keys"],
            "wall": wall,
            "touch_seconds": seconds,
            "touch_add_batch_seconds": [p.durationMs["addBatch"] / 1000 for p in touch],
            "touch_input_rows": [int(p.numInputRows) for p in touch],
            "load_seconds": [p.durationMs["triggerExecution"] / 1000 for p in load],
            "latest_version": latest_version_bytes(checkpoint),
            "whole_folder_bytes": measure.dir_bytes(os.path.join(checkpoint, "state")),
            "progress_state": measure.state_metrics(query.lastProgress) if query.lastProgress else {},
            "calls": call_counts(spark.read.parquet(out).toPandas(), level["touch_batches"]),
        })  # fmt: skip
        touch_text = ", ".join(f"{s:.2f}" for s in seconds)
        print(
            f"  {level['keys']:>12,} keys in state: touch batches {touch_text} s (run {wall:.0f} s)",
            flush=True,
        )
    reply({"operator": operator_info(spec["operator"]), "levels": results})


def child_main(kind: str, spec: dict[str, Any]) -> None:
    {"shape": child_shape, "speed": child_speed, "state": child_state}[kind](spec)


# ---- the parent: subprocesses, printed figures ---------------------------------------------


def child_env() -> dict[str, str]:
    """This environment for a subprocess: classic Spark, Spark's default Arrow chunks, and this
    project first on PYTHONPATH (so Spark's Python workers import the same ``spark_impl``)."""
    env = dict(os.environ)
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_ARROW_MAX_RECORDS_PER_BATCH", None)
    env.setdefault("PYTHONHASHSEED", "0")
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [os.path.dirname(HERE), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def script_result(script: str, spec: dict[str, Any], marker: str, name: str) -> dict[str, Any]:
    """Runs ``script --child SPEC`` once in a subprocess (``child_env``) and returns its result
    line, the stdout line that starts with ``marker``; stderr (Spark's log) goes to a file in
    ``spec["work"]`` whose tail a failure shows."""
    log = os.path.join(spec["work"], "child.log")
    with open(log, "w") as err:
        done = subprocess.run(
            [sys.executable, script, "--child", json.dumps(spec)], stdout=subprocess.PIPE, stderr=err,
            text=True, env=child_env(), check=False,
        )  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith(marker):
            return json.loads(line[len(marker) :])
    with open(log) as f:
        raise RuntimeError(f"{name} failed (exit {done.returncode}):\n" + "".join(f.readlines()[-30:]))


class Child:
    """This script in a subprocess (``--child``); stdout carries its result lines, stderr (Spark's
    log) goes to a file whose tail is printed if the subprocess fails."""

    def __init__(self, kind: str, spec: dict[str, Any], name: str) -> None:
        self.name = name
        self.log_path = os.path.join(spec["work"], f"{name}.log")
        self.log = open(self.log_path, "w")  # noqa: SIM115 - closed in close()
        command = [sys.executable, os.path.abspath(__file__), "--child", kind, "--spec", json.dumps(spec)]
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1,
            env=child_env(),
        )  # fmt: skip

    def result(self) -> dict[str, Any]:
        """The next result line; other lines of its stdout are echoed, indented."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(RESULT):
                return json.loads(line[len(RESULT) :])
            print("    " + line.rstrip(), flush=True)
        self.proc.wait()
        self.log.close()
        with open(self.log_path) as f:
            tail = "".join(f.readlines()[-40:])
        raise RuntimeError(
            f"subprocess {self.name} ended (exit {self.proc.returncode}) without a result:\n{tail}"
        )

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self.result()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait()
        self.log.close()


def run_child(kind: str, spec: dict[str, Any], name: str) -> dict[str, Any]:
    child = Child(kind, spec, name)
    try:
        return child.result()
    finally:
        child.close()


def spread(values: Sequence[float]) -> str:
    return f"{measure.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def common_spec(args: argparse.Namespace, work: str, units: int) -> dict[str, Any]:
    return {"work": work, "shuffle_partitions": args.shuffle_partitions, "operator": args.operator,
            "units": units, "input_partitions": args.input_partitions, "buckets": args.buckets}  # fmt: skip


def units_of(args: argparse.Namespace, keys: int) -> int:
    """The units of a part's events: ``keys`` (its --*-keys) for an operator over keys, else --units."""
    return keys if OPERATORS[args.operator].unit_name == "keys" else args.units


def print_stage(
    engine: str, k: int, shapes: list[dict[str, Any]], events: int, roles: Sequence[str] = ()
) -> None:
    """Three lines on stateful stage ``k`` of a query: its operators, the balance of the shuffle
    records its tasks read, and what it reads per batch; ``roles`` names the stages in order."""
    st = shapes[k]
    rec, run_ms, worst = st["records_summed"], st["run_ms_summed"], st["worst_batch"]
    role = f" ({roles[k]})" if len(shapes) > 1 and k < len(roles) else ""
    per_batch = measure.median(st["records_per_batch"])
    worst_ratio = worst["max_over_fair"] if worst else float("nan")
    print(
        f"{engine}, stateful stage {k + 1} of {len(shapes)}{role} [{' + '.join(st['ops'])}]: "
        f"{st['tasks_per_batch']} tasks x {st['batches']} batches\n"
        f"    shuffle records read per task, summed over the batches: min {rec['min']:,.0f} / median "
        f"{rec['median']:,.0f} / max {rec['max']:,.0f}; fair share {rec['fair']:,.0f}; max/fair "
        f"{rec['max_over_fair']:.2f} (worst single batch {worst_ratio:.2f})\n"
        f"    {per_batch:,.0f} records per batch (median) for {events:,} events; executor run time per task, "
        f"max/fair {run_ms['max_over_fair']:.2f}"
    )


def part_shape(args: argparse.Namespace, work: str) -> dict[str, Any]:
    events, units = args.shape_events_per_batch, units_of(args, args.shape_keys)
    unit_name = OPERATORS[args.operator].unit_name
    print(
        f"\n== 1. Shape of {args.operator}: {args.shape_batches} batches x {events:,} events, {units:,} "
        f"uniform {unit_name}, "
        f"local[2], {args.shuffle_partitions} shuffle partitions, event log ==",
        flush=True,
    )
    path = os.path.join(work, "shape.parquet")
    uniform_events(path, args.shape_batches, events, units, 11, args.operator)
    result = run_child("shape", {**common_spec(args, work, units), "path": path}, "shape")
    print(f"operator: {result['operator']['file']} (buckets: "
          f"{'yes' if result['operator']['buckets_supported'] else 'no'})")  # fmt: skip
    roles = stage_roles(args.operator)
    for engine in ("ours", "native"):
        shapes = result["stages"][engine]
        if not shapes:
            print(f"{engine}: no stateful stage found in the event log")
        for k in range(len(shapes)):
            print_stage(engine, k, shapes, events, roles if engine == "ours" else ())
    ours_shapes = result["stages"]["ours"]
    wide_at, narrow_at = roles.index("wide"), roles.index("narrow")
    if len(ours_shapes) > wide_at:
        wide = ours_shapes[wide_at]
        worst = wide["worst_batch"]["max_over_fair"] if wide["worst_batch"] else float("nan")
        print(
            f"ours wide stage: a task read more than twice its fair share: {'YES' if worst > 2 else 'no'} "
            f"(the worst task of a batch read {worst:.2f}x its fair share)"
        )
    writers = result["progress_partitions"]
    if len(ours_shapes) > narrow_at:
        narrow = ours_shapes[narrow_at]
        per_batch = measure.median(narrow["records_per_batch"])
        busiest = measure.median(narrow["busiest_task_per_batch"])
        print(
            f"ours narrow stage: {per_batch:,.0f} records per batch (median) for {events:,} events "
            f"({per_batch - events:+,.0f} beyond one per event: summaries and other tables' rows); the "
            f"event log counts per task, not per group: the stream's narrow group reads at most what its "
            f"task reads:"
        )
        if len(writers) == 1:
            mine = measure.median([b[writers[0]] for b in narrow["records_by_batch"]])
            print(
                f"  the task that wrote the progress rows (partition {writers[0]}, the narrow group's if "
                f"it emits them) read {mine:,.0f} records per batch (median), {mine / events:.3f} of the "
                "events"
            )
        print(
            f"  the busiest task read {busiest:,.0f} records per batch (median), "
            f"{busiest / events:.3f} of the events"
        )
    elif ours_shapes:
        top = measure.median(ours_shapes[0]["busiest_task_per_batch"])
        print(
            f"ours narrow stage: none (one stateful stage, grouped by stream); the stream's group, in the "
            f"busiest task, read {top:,.0f} records per batch (median) for {events:,} events"
        )
    calls = result["calls"]
    print("ours per batch (median): " + (
        f"python_calls {calls['python_calls']:,.0f}, state_calls {calls['state_calls']:,.0f}" if calls
        else "python_calls / state_calls not reported by this operator"
    ))  # fmt: skip
    rates = result["warm_events_per_s"]
    print(f"(this run, batches 2..: ours {rates['ours']:,.0f} ev/s, native {rates['native']:,.0f} ev/s)")
    return result


def part_speed(args: argparse.Namespace, work: str) -> dict[str, Any]:
    masters = ("local[1]", "local[2]")
    events, units = args.speed_events_per_batch, units_of(args, args.speed_keys)
    unit_name = OPERATORS[args.operator].unit_name
    print(
        f"\n== 2. Speed of {args.operator}: {args.speed_batches} batches x {events:,} events, {units:,} "
        f"uniform {unit_name}, "
        f"{args.shuffle_partitions} shuffle partitions, {args.rounds} alternating rounds ==",
        flush=True,
    )
    path = os.path.join(work, "speed.parquet")
    uniform_events(path, args.speed_batches, events, units, 13, args.operator)
    workers: dict[str, Child] = {}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {"ours": [], "native": []} for m in masters}
    try:
        for m in masters:
            spec = {**common_spec(args, work, units), "path": path, "master": m}
            workers[m] = Child("speed", spec, f"speed-{m}")
            workers[m].result()  # the session is up
        for r in range(args.rounds):
            for m in masters if r % 2 == 0 else masters[::-1]:  # the masters take turns going first
                for engine in ("ours", "native"):
                    run = workers[m].ask({"engine": engine, "run": f"{r}-{engine}"})
                    runs[m][engine].append(run)
                    print(f"  round {r + 1} {m} {engine:6s}: {run['warm_rate']:>10,.0f} ev/s (batches 2..), "
                          f"wall {run['wall']:.1f} s", flush=True)  # fmt: skip
    finally:
        for w in workers.values():
            w.close()
    rate = {m: {e: [x["warm_rate"] for x in runs[m][e]] for e in ("ours", "native")} for m in masters}
    gain = {
        e: measure.median(rate["local[2]"][e]) / measure.median(rate["local[1]"][e]) - 1
        for e in ("ours", "native")
    }
    paired = {
        e: [b / a - 1 for a, b in zip(rate["local[1]"][e], rate["local[2]"][e])] for e in ("ours", "native")
    }
    ratio = gain["ours"] / gain["native"] if gain["native"] > 0 else float("nan")
    print("events/s without the first micro-batch (trigger time), median [min-max]:")
    for e in ("ours", "native"):
        per_round = ", ".join(f"{g:+.0%}" for g in paired[e])
        one, two = spread(rate["local[1]"][e]), spread(rate["local[2]"][e])
        print(
            f"  {e:6s}  local[1] {one:>26s}   local[2] {two:>26s}   gain {gain[e]:+.0%} "
            f"(per round: {per_round})"
        )
    for e in ("ours", "native"):
        peaks = ", ".join(
            f"{m} {measure.median([x['peak_rss'] for x in runs[m][e]]) / 2**20:,.0f} MiB" for m in masters
        )
        print(f"  {e:6s}  peak memory of the process tree, median: {peaks}")
    at_two = measure.median(rate["local[2]"]["ours"]) / measure.median(rate["local[2]"]["native"])
    print(f"our_gain / native_gain = {ratio:.2f} (target >= 0.8); ours/native at local[2]: {at_two:.2f}x")
    return {"rates": rate, "gain": gain, "paired_gain": paired, "gain_ratio": ratio, "runs": runs}


def part_state(args: argparse.Namespace, work: str, clock: bool) -> dict[str, Any]:
    spec = {
        "keys_in_state": [k for k in args.keys_in_state if k <= args.max_keys_in_state],
        "load_batch": args.load_batch,
        "touch_events": args.touch_events,
        "touch_keys": args.touch_keys,
        "touch_batches": args.touch_batches,
        "warmup_batches": args.warmup_batches,
    }
    what = f"a clock row every {args.clock_every} events" if clock else "no clock rows"
    print(
        f"\n== {4 if clock else 3}. State size ({what}): batches of {args.touch_events:,} events touching "
        f"{args.touch_keys:,} keys in state, pre-loaded {args.load_batch:,} new keys a batch; local[2], "
        f"{args.shuffle_partitions} shuffle partitions ==",
        flush=True,
    )
    if not spec["keys_in_state"]:
        print("(no level at or below --max-keys-in-state)")
        return {}
    overrides = getattr(OPERATORS[args.operator], "state_overrides", {})
    if overrides:
        print(f"  ({args.operator} with {overrides}: every key in state holds one open unit of work)")
    name = "clock" if clock else "state"
    path = os.path.join(work, f"{name}.parquet")
    started = time.perf_counter()
    levels = state_trace(path, spec, args.clock_every if clock else None)
    print(f"  (trace written in {time.perf_counter() - started:.0f} s)", flush=True)
    child_work = os.path.join(work, name)
    os.makedirs(child_work)
    spec = {**common_spec(args, child_work, 0), "path": path, "levels": levels, "clock": clock,
            "state_part": True}  # fmt: skip
    result = run_child("state", spec, name)
    header = ("keys in state", "s/batch median [min-max]", "addBatch s", "events/s", "B/key latest",
              "B/key state/", "B/key live SST", "RocksDB keys", "calls per batch")  # fmt: skip
    widths = (13, 24, 10, 9, 12, 12, 14, 12, 0)
    print("  ".join(f"{h:>{w}s}" for h, w in zip(header, widths)))
    for lv in result["levels"]:
        keys, secs = lv["keys"], lv["touch_seconds"]
        med = measure.median(secs)
        calls = lv["calls"]
        row = (
            f"{keys:,}",
            f"{med:.2f} [{min(secs):.2f}-{max(secs):.2f}]",
            f"{measure.median(lv['touch_add_batch_seconds']):.2f}",
            f"{args.touch_events / med:,.0f}",
            f"{lv['latest_version']['bytes'] / keys:.1f}",
            f"{lv['whole_folder_bytes'] / keys:.1f}",
            f"{lv['progress_state'].get('state_sst_bytes', 0) / keys:.1f}",
            f"{lv['latest_version']['rocksdb_keys']:,}",
            f"python {calls['python_calls']:,.0f}, state {calls['state_calls']:,.0f}" if calls else "-",
        )
        print("  ".join(f"{v:>{w}s}" for v, w in zip(row, widths)))
    print(
        "  B/key latest: per state partition the SST files listed in the newest snapshot (<version>.zip), "
        "the zip and newer changelogs\n  (overwritten values RocksDB has not compacted away yet included); "
        "B/key state/: every file under the checkpoint's state/ (all retained versions);\n"
        "  B/key live SST: the rocksdbSstFileSize metric of the last micro-batch;\n"
        "  RocksDB keys: numKeys of the newest snapshots (state rows, not the operator's keys)"
    )
    return {"levels": levels, **result}


def print_load(when: str) -> list[float]:
    """Prints the load average: other work on the machine makes every timing here noisy."""
    load = [round(x, 2) for x in os.getloadavg()]
    busy = "  (other processes share the cores: timings will be noisy)" if load[0] >= 0.5 else ""
    print(f"\nmachine: {os.cpu_count()} cores, load average {when} {load[0]} {load[1]} {load[2]}{busy}")
    return load


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fills the sizes not given on the command line from the quick or the full mode, and the
    parts: the state parts pre-load keys, so only keyed watermarks has them."""
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    own = state_parts(args.operator)
    if args.parts is None:
        args.parts = ["shape", "speed", *own]
    elif {"state", "clock"} & set(args.parts) - set(own):
        raise SystemExit(
            f"--parts state and clock measure keys in state: {args.operator} has {list(own) or 'neither'}"
        )
    return args


def state_parts(operator: str) -> tuple[str, ...]:
    """The state parts an operator has: keyed watermarks both, session windows ``state`` (its keys
    each hold an open session), the others none (their units are few)."""
    if operator == "keyed_watermarks":
        return ("state", "clock")
    return tuple(getattr(OPERATORS[operator], "state_parts", ()))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a few minutes in all")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--operator", choices=sorted(OPERATORS), default="keyed_watermarks")
    parser.add_argument(
        "--units", type=int, default=64, help="partitions or sources of the other operators (keyed: --*-keys)"
    )
    parser.add_argument("--parts", nargs="+", choices=PARTS, help="default: all (the operator's own)")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--input-partitions", type=int, default=2, help="trace source partitions per batch")
    parser.add_argument("--buckets", type=int, help="passed when the operator takes it (default: its own)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (checkpoints, logs)")
    group = parser.add_argument_group("sizes (defaults: the quick or the full mode)")
    group.add_argument("--shape-batches", type=int)
    group.add_argument("--shape-events-per-batch", type=int)
    group.add_argument("--shape-keys", type=int)
    group.add_argument("--rounds", type=int, help="alternating speed rounds")
    group.add_argument("--speed-batches", type=int)
    group.add_argument("--speed-events-per-batch", type=int)
    group.add_argument("--speed-keys", type=int)
    group.add_argument("--keys-in-state", type=int, nargs="+", help="state levels (keys pre-loaded)")
    group.add_argument("--max-keys-in-state", type=int, default=10**12, help="skips the larger levels")
    group.add_argument("--load-batch", type=int, help="new keys per pre-load batch")
    group.add_argument("--touch-events", type=int, help="events per measured batch")
    group.add_argument("--touch-keys", type=int, help="distinct keys per measured batch")
    group.add_argument("--touch-batches", type=int, help="measured batches per level")
    group.add_argument(
        "--warmup-batches", type=int, default=1, help="touch batches before them, not measured"
    )
    group.add_argument("--clock-every", type=int, default=200, help="events per clock row (part 4)")
    parser.add_argument("--child", choices=("shape", "speed", "state"), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.child:
        child_main(args.child, json.loads(args.spec))
        return
    args = resolve(args)
    if os.environ.get("SPARK_REMOTE"):
        print("(SPARK_REMOTE is ignored: this benchmark runs classic local sessions)")
    report: dict[str, Any] = {"machine": measure.machine(), "args": vars(args)}
    print_load("at the start")
    work = tempfile.mkdtemp(prefix="scaleout-")
    started = time.perf_counter()
    try:
        if "shape" in args.parts:
            report["shape"] = part_shape(args, work)
        if "speed" in args.parts:
            report["speed"] = part_speed(args, work)
        if "state" in args.parts:
            report["state"] = part_state(args, work, clock=False)
        if "clock" in args.parts:
            report["clock"] = part_state(args, work, clock=True)
    finally:
        if args.keep:
            print(f"(scratch folder kept: {work})")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report["seconds"] = time.perf_counter() - started
    report["load_average_at_end"] = print_load("at the end")
    print(f"(all parts: {report['seconds']:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
