"""``SparkEngine``: the harness engine (spec/traces.md TR-9) on Spark Structured Streaming.

Areas: every area with a ``spark_impl.<area>`` module (``area_module``).
The traces of one ``run()`` go through one multiplexed streaming query per
area (``query_groups``), a few of them at the same time in the one session:

- configs are validated first (``InvalidConfig`` instances answer the invalid
  traces; Spark is not started when no trace is valid, nor for ``run([])``);
- the valid traces are split into queries, one area per query. Each start of
  a query costs seconds of planning (Spark starts a Python process per
  stateful operator) and every micro-batch runs every operator of its query,
  so per-area queries never do more of either than one query of all areas: an
  area's operators are planned only at its own restart points and run only its
  own batches. Up to ``concurrent_queries`` queries run at once from a thread
  pool, so one query's fixed latency overlaps with another's work.
  ``split_restarts=True`` also puts an area's traces without restart points in
  a query of their own (more query starts and micro-batches in all);
- in each query every item becomes a row ``(trace_id, area, batch, seq, kind, key,
  event_time, value, time, source, partition, count, core)``; each trace
  also gets a ``batch_end`` row per batch, so an empty trace batch still
  produces its progress row. The rows go to the query's own temporary parquet
  file read by the ``trace`` source (one trace batch per micro-batch,
  ``Trigger.AvailableNow``);
- the source is read once per micro-batch and split by the ``area`` column:
  each area present in the query gets its operator (``engine_output`` of its
  module), and their outputs are unioned by column name
  into one sink (``combined_output``, which also takes all areas at once);
- the stream id is the trace id: the operator groups by it, so the trace id
  is part of every state key, and each trace's own config is applied to its
  stream (``stream_configs``): one query for all configs;
- each query writes to its own parquet sink with its own checkpoint in a temporary
  directory; after the run the sinks are read back and split per trace. A query of one
  area whose operator can finish its micro-batches in the sink (``engine_streams`` with a
  ``sink_step``: every area) runs that operator's one-stage plan through its
  ``foreach_batch``, each micro-batch to a folder of its own, as users run ``write_tables``;
  any other query writes ``combined_output`` with Spark's file sink;
- restarts (TR-5, F065-R24): a query stops after every batch that one of its
  traces names in ``restart_after`` and a new query continues from the same
  checkpoint (the source's ``end_batch`` option). A trace of the same query
  that named another batch, or none, is restarted there too, which the clause
  allows (the output of a restarted run equals the uninterrupted one);
- a query that fails stops the others and ``run`` raises ``RuntimeError``
  naming its areas;
- ``run_apart`` gives ``run``'s answers from a SparkEngine of the same settings in a process of
  its own, for a caller whose own Python is busy (the suites' pre-run beside the oracle's tests).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

from harness.outputs import TABLES, Output
from harness.traces import ITEM_FIELD_TYPES, InvalidConfig, Trace

LOG = logging.getLogger(__name__)  # one line per query: its area, traces, starts, batches, seconds

#: queries of one run at once: each spends about a third of its time waiting on its own fixed
#: latencies (planning, restarts, Python workers), so on 2 cores three keep both busy where two
#: left a third of the CPU idle (the suites' pre-run: 452 s against 724 s with two)
DEFAULT_CONCURRENT_QUERIES = 3
#: ``run_apart`` declines when this variable is 0 (the caller then runs in its own process: one
#: process to debug or profile)
RUN_APART_VAR = "CONFORMANCE_RUN_APART"
RUN_APART_TIMEOUT_S = 3600.0
#: Spark's failure when a Python process it starts does not connect back within 10 s
WORKER_START_TIMEOUT = "Python worker failed to connect back"
#: restarts from the checkpoint after that failure before the query counts as failed
WORKER_START_RETRIES = 2

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

    def __init__(
        self,
        spark: Any = None,
        partitions: int = 1,
        concurrent_queries: int = DEFAULT_CONCURRENT_QUERIES,
        split_queries: bool = True,
        split_restarts: bool = False,
        shuffle_partitions: int | None = None,
        arrow_chunk_rows: int | None = None,
        buckets: int | None = None,
    ) -> None:
        """``partitions``: input partitions per micro-batch. ``concurrent_queries``: how many of a
        run's queries run at once. ``split_queries=False`` sends every trace of a run through one
        query (every area, restarted after every batch any trace names); ``split_restarts=True``
        splits each area's query into the traces with restart points and those without.

        The physical layout, none of which may change an answer (TR-18): ``partitions``;
        ``shuffle_partitions`` and ``arrow_chunk_rows`` (Spark's
        ``spark.sql.execution.arrow.maxRecordsPerBatch``), set for this engine's queries only
        when given (``query_settings``), else the session's; ``buckets``, every operator's bucket
        count (default: each area's ``ENGINE_BUCKETS``)."""
        if concurrent_queries < 1:
            raise ValueError(f"concurrent_queries={concurrent_queries}: give a whole number >= 1")
        layout = {"partitions": partitions, "shuffle_partitions": shuffle_partitions,
                  "arrow_chunk_rows": arrow_chunk_rows, "buckets": buckets}  # fmt: skip
        for name, value in layout.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}={value!r}: give a whole number >= 1")
        self._spark = spark
        self._session_given = spark is not None  # run_apart cannot hand a caller's session on
        # what a SparkEngine of another process needs to answer as this one does (run_apart)
        self.settings = {
            **layout, "concurrent_queries": concurrent_queries, "split_queries": split_queries,
            "split_restarts": split_restarts,
        }  # fmt: skip
        self.query_settings = {
            key: str(value) for key, value in (
                ("spark.sql.shuffle.partitions", shuffle_partitions),
                ("spark.sql.execution.arrow.maxRecordsPerBatch", arrow_chunk_rows),
            ) if value is not None
        }  # fmt: skip
        self.buckets = buckets
        self.partitions = partitions
        self.concurrent_queries = concurrent_queries
        self.split_queries = split_queries
        self.split_restarts = split_restarts
        self.last_run_seconds: float | None = None
        #: one line per query of the last run: its areas, traces, starts, micro-batches, seconds
        self.last_run_queries: list[str] = []

    @property
    def description(self) -> str:
        """Which Spark answered: shown in the conformance summary."""
        remote = os.environ.get("SPARK_REMOTE")
        if remote:
            return f"Spark {self.spark.version}, Spark Connect at {remote}"
        return f"Spark {self.spark.version}, classic, master {self.spark.conf.get('spark.master')}"

    @property
    def provenance(self) -> dict[str, str]:
        """Versions and settings of the run, for the reports."""
        from spark_impl.session import session_provenance

        return {
            **session_provenance(self.spark), **self.query_settings,
            "engine": "spark_impl operators, one query per area",
            "concurrent queries": str(self.concurrent_queries), "input partitions": str(self.partitions),
            "buckets": "each area's ENGINE_BUCKETS" if self.buckets is None else str(self.buckets),
        }  # fmt: skip

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
            groups = query_groups(valid, self.split_restarts) if self.split_queries else [valid]
            outputs = self._run_queries(groups, configs)
            for tid, (i, _) in valid.items():
                results[i] = outputs[tid]
        return results  # type: ignore[return-value]

    def run_apart(self, traces: Sequence[Trace]) -> list[Output | Exception] | None:
        """What ``run(traces)`` answers, from a SparkEngine of these settings in a process of its
        own (``spark_impl.engine_child``), for a caller whose own Python is busy: a query's
        driver runs Python in the process that started it (every operator's sink step), which
        then waits for the caller's threads to let go of the interpreter lock. None where it does
        not apply: a session the caller gave (another process cannot have it), Spark Connect (a
        second local server would want the port of the first), or ``CONFORMANCE_RUN_APART=0``.
        The child is stopped when this process exits first (Ctrl-C in the suites)."""
        import atexit
        import shutil
        import tempfile
        from pathlib import Path

        from spark_impl.engine_child import EngineChild, Refusal

        if self._session_given or os.environ.get("SPARK_REMOTE") or os.environ.get(RUN_APART_VAR) == "0":
            return None
        work = Path(tempfile.mkdtemp(prefix="spark-engine-apart-"))
        child = EngineChild(work, {"run": (self.settings, traces)}, niceness=0)
        atexit.register(child.stop)  # a caller's daemon thread never reaches the finally below
        try:
            done = child.answers("run", timeout=RUN_APART_TIMEOUT_S)
        finally:
            child.stop()
            atexit.unregister(child.stop)
            shutil.rmtree(work, ignore_errors=True)
        self.last_run_seconds, self.last_run_queries = done.seconds, list(done.queries)
        return [a.error() if isinstance(a, Refusal) else a for a in done.answers]

    # ---- a few multiplexed queries at once -----------------------------------

    def _run_queries(
        self, groups: list[dict[str, tuple[int, Trace]]], configs: dict[str, dict[str, Any]]
    ) -> dict[str, Output]:
        from concurrent.futures import ThreadPoolExecutor

        spark = self.spark  # the session starts here, not in a pool thread
        started = time.perf_counter()
        runs = _Runs()
        outputs: dict[str, Output] = {}
        if len(groups) == 1 or self.concurrent_queries == 1:
            for group in groups:
                outputs.update(self._run_query(spark, group, configs, runs))
        else:

            def run_one(group: dict[str, tuple[int, Trace]]) -> dict[str, Output]:
                try:
                    return self._run_query(spark, group, configs, runs)
                except BaseException as error:
                    runs.fail(error)  # at once: the other queries stop now, not when their turn comes
                    raise

            pool = ThreadPoolExecutor(
                max_workers=min(self.concurrent_queries, len(groups)), thread_name_prefix="spark-engine"
            )
            try:
                futures = [pool.submit(run_one, group) for group in groups]
                for future in futures:
                    if future.exception() is None:  # waits for it
                        outputs.update(future.result())
            except BaseException as error:  # Ctrl-C while waiting: the running queries stop too
                runs.fail(error)
                raise
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
            if runs.failure is not None:
                raise runs.failure
        self.last_run_seconds = time.perf_counter() - started
        self.last_run_queries = list(runs.summaries)
        return outputs

    def _run_query(
        self,
        spark: Any,
        traces: dict[str, tuple[int, Trace]],
        configs: dict[str, dict[str, Any]],
        runs: _Runs,
    ) -> dict[str, Output]:
        from spark_impl.checkpoints import check_checkpoint
        from spark_impl.trace_source import write_trace_file

        work = tempfile.mkdtemp(prefix="spark-engine-")
        areas = sorted({t.area for _, t in traces.values()})
        began = time.perf_counter()
        try:
            path = os.path.join(work, "input.parquet")
            write_trace_file(path, _rows_table(traces))
            num_batches = max(len(t.batches) for _, t in traces.values())
            stops = sorted({b for _, t in traces.values() for b in t.restart_after} | {num_batches - 1})
            sink = os.path.join(work, "sink")
            checkpoint = os.path.join(work, "checkpoint")
            for i, end_batch in enumerate(stops):
                runs.check()
                if i == 1:
                    # TR-5: the first restart inspects the checkpoint the first query wrote (later
                    # ones continue from what the same code wrote seconds before; each costs ~2 s)
                    check_checkpoint(spark, checkpoint)
                for attempt in range(WORKER_START_RETRIES + 1):
                    error = self._run_until(spark, traces, configs, runs, path, num_batches, end_batch, work)
                    if error is None or runs.failure is not None:
                        break
                    if attempt < WORKER_START_RETRIES and WORKER_START_TIMEOUT in str(error):
                        # Spark waits 10 s for a new Python process; a busy machine can miss that
                        again = f"{'+'.join(areas)}: {WORKER_START_TIMEOUT}; restarting from the checkpoint"
                        warnings.warn(again, RuntimeWarning, stacklevel=1)
                        continue
                    raise RuntimeError(f"{'+'.join(areas)} query failed: {error}") from error
            runs.check()
            rows = spark.read.parquet(sink).collect()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        summary = (
            f"{'+'.join(areas)}: {len(traces)} traces, {len(stops)} query starts, "
            f"{num_batches} micro-batches, {time.perf_counter() - began:.1f} s"
        )
        LOG.info("%s", summary)
        runs.summarise(summary)
        return _split(rows, traces)

    def _run_until(
        self,
        spark: Any,
        traces: dict[str, tuple[int, Trace]],
        configs: dict[str, dict[str, Any]],
        runs: _Runs,
        path: str,
        num_batches: int,
        end_batch: int,
        work: str,
    ) -> BaseException | None:
        """One query on the checkpoint in ``work``, from where it stopped to ``end_batch``;
        returns its failure, or None when it ended or was stopped."""
        from spark_impl.session import query_settings
        from spark_impl.trace_source import SOURCE_NAME

        df = (
            spark.readStream.format(SOURCE_NAME)
            .option("path", path)
            .option("num_batches", str(num_batches))
            .option("end_batch", str(end_batch))
            .option("partitions", str(self.partitions))
            .load()
        )
        mine = {tid: configs[tid] for tid in traces}
        checkpoint, sink = os.path.join(work, "checkpoint"), os.path.join(work, "sink")
        streams = sink_step_streams(df, traces, mine, self.buckets)

        # One stateful stage and the narrow step in the sink: each micro-batch to its own
        # folder, which a batch Spark runs again overwrites.
        def write(rows: Any, batch_id: int) -> None:
            rows.write.mode("overwrite").parquet(os.path.join(sink, f"batch_id={batch_id}"))

        with query_settings(spark, self.query_settings):  # this engine's layout, for this query only
            if streams is not None:
                # the inspection is _run_query's, at the first restart only
                once = {"availableNow": True}
                query = streams.foreach_batch(write, checkpoint, trigger=once, inspect_checkpoint=False)
            else:
                query = (
                    combined_output(df, traces, mine, self.buckets).writeStream.format("parquet")
                    .option("checkpointLocation", checkpoint).option("path", sink)
                    .outputMode("append").trigger(availableNow=True).start()
                )  # fmt: skip
        runs.started(query)
        try:
            query.awaitTermination()
        except Exception as error:  # noqa: BLE001 - classic Spark raises the query's failure here
            return error
        finally:
            if query.isActive:
                query.stop()
            runs.ended(query)
        return query.exception()


class _Stopped(Exception):
    """A query stopped because another query of the same run failed."""


class _Runs:
    """The queries of one ``run`` that are active now, and its first failure: a failure stops
    every active query, and a query not yet started does not start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: set[Any] = set()
        self.failure: BaseException | None = None
        self.summaries: list[str] = []  # a line per query that ended, in the order they ended

    def started(self, query: Any) -> None:
        with self._lock:
            self._active.add(query)
            stop = self.failure is not None
        if stop:
            query.stop()

    def ended(self, query: Any) -> None:
        with self._lock:
            self._active.discard(query)

    def summarise(self, line: str) -> None:
        with self._lock:
            self.summaries.append(line)

    def check(self) -> None:
        if self.failure is not None:
            raise _Stopped()

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self.failure is None and not isinstance(error, _Stopped):
                self.failure = error
            active = list(self._active)
        for query in active:
            try:
                query.stop()
            except Exception:  # noqa: BLE001 - it may have ended meanwhile; the failure is reported
                pass


def query_groups(
    traces: dict[str, tuple[int, Trace]], split_restarts: bool = False
) -> list[dict[str, tuple[int, Trace]]]:
    """The queries ``SparkEngine.run`` sends ``traces`` through, longest first: one per area;
    with ``split_restarts``, an area's traces without restart points in one query and those
    with restart points in another."""
    groups: dict[tuple[str, bool], dict[str, tuple[int, Trace]]] = {}
    for tid, (i, trace) in traces.items():
        groups.setdefault((trace.area, split_restarts and bool(trace.restart_after)), {})[tid] = (i, trace)
    return sorted(groups.values(), key=_query_cost, reverse=True)


def _query_cost(traces: dict[str, tuple[int, Trace]]) -> tuple[int, int]:
    """Starts and micro-batches: what a query's time grows with most."""
    stops = {b for _, t in traces.values() for b in t.restart_after}
    batches = max(len(t.batches) for _, t in traces.values())
    return (len(stops) + 1, batches)


def combined_output(
    df: Any,
    traces: dict[str, tuple[int, Trace]],
    configs: dict[str, dict[str, Any]],
    buckets: int | None = None,
) -> Any:
    """The run's one output DataFrame: the input rows ``df`` (columns of INPUT_SCHEMA) split by
    area, each area's operator (``engine_output``, with ``buckets`` when given) on its own traces
    with their configs, the outputs unioned by column name (``spark_impl.testing.faults`` builds
    its killed queries with it too)."""
    from pyspark.sql import functions as F

    output = None
    for area in sorted({t.area for _, t in traces.values()}):
        mine = {tid: c for tid, c in configs.items() if traces[tid][1].area == area}
        layout = {} if buckets is None else {"buckets": buckets}
        part = area_module(area).engine_output(df.filter(F.col("area") == area), mine, **layout)
        output = part if output is None else output.unionByName(part, allowMissingColumns=True)
    assert output is not None, "combined_output needs at least one trace"
    return output


def sink_step_streams(
    df: Any,
    traces: dict[str, tuple[int, Trace]],
    configs: dict[str, dict[str, Any]],
    buckets: int | None = None,
) -> Any | None:
    """For a query of one area whose module has ``engine_streams`` (an operator whose per-stream
    step can run in the sink): that operator's streams over ``df``; None for any other query."""
    areas = {t.area for _, t in traces.values()}
    if len(areas) != 1:
        return None
    module = area_module(next(iter(areas)))
    if not hasattr(module, "engine_streams"):
        return None
    streams = module.engine_streams(df, configs, **({} if buckets is None else {"buckets": buckets}))
    return streams if streams.sink_step is not None else None


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
        if table not in out[tid]:
            continue  # keyed watermarks' metrics, which the one-stage plan's sink gets too: not judged
        columns = TABLES[traces[tid][1].area][table]
        out[tid][table].append(tuple(d[c] for c in columns))
    return out


__all__ = ["SparkEngine", "combined_output", "query_groups", "sink_step_streams"]
