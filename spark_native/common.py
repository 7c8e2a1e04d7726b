"""One streaming query per trace, on Spark's own operators, and what it leaves to read.

Spark keeps one event-time watermark per query, so traces cannot share a query the way
``spark_impl`` multiplexes them: each trace is its own query, fed one trace batch per
micro-batch by the ``trace`` source (empty batches included), stopped and continued from its
checkpoint after each ``restart_after`` batch.

Micro-batches and trace batches: a continued query first runs a micro-batch with no input
(its watermark moved with the batch before the stop), and a query whose input has ended runs
one more; so after a restart the micro-batch ids run ahead of the trace batches. ``NativeRun``
maps them by the source's offsets: a micro-batch that read trace batch ``b`` is ``b``'s, a
micro-batch without input counts with the trace batch read next (what it wrote is what the
uninterrupted query writes with that batch), the last one with ``len(batches)``.

An area module builds the query (``build(df)`` on the input rows, INPUT_SCHEMA columns of
``spark_impl.engine``) and maps what comes out to its tables: the rows each micro-batch
wrote (through ``foreachBatch``, with the batch id) and each micro-batch's progress (the
watermark it ran with and its stateful operators' counters).
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.traces import Trace

#: the event time column an area module's ``build`` usually makes: ``timestamp_millis(event_time)``
TS = "ts"

#: Spark's timestamps are microseconds since 1970 in a long: event times beyond this many
#: milliseconds either side of 1970 do not fit one
TIMESTAMP_LIMIT_MS = (2**63 - 1) // 1000


@dataclass
class NativeRun:
    """What one trace's query wrote and reported, by micro-batch and by trace batch."""

    rows: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (micro-batch id, row)
    progress: list[dict[str, Any]] = field(default_factory=list)  # one per micro-batch, by batch id

    def micro_progress(self, micro_batch: int) -> dict[str, Any] | None:
        return next((p for p in self.progress if p.get("batchId") == micro_batch), None)

    def micro_batch(self, batch: int) -> int | None:
        """The id of the micro-batch that read trace batch ``batch``."""
        return next((m for m, b in self._read.items() if b == batch), None)

    @functools.cached_property
    def _read(self) -> dict[int, int]:
        """Micro-batch id -> the trace batch it read, for the micro-batches that read one."""
        return {
            int(p["batchId"]): end - 1
            for p in self.progress
            if (end := _offset(p, "endOffset")) > _offset(p, "startOffset")
        }

    def trace_batch(self, micro_batch: int) -> int:
        """The trace batch a micro-batch counts with: the one it read, or without input the one
        read next (the number of trace batches after the last)."""
        read = self._read
        if micro_batch in read:
            return read[micro_batch]
        later = [b for m, b in read.items() if m > micro_batch]
        return min(later) if later else max(read.values(), default=-1) + 1

    def batch_rows(self) -> list[tuple[int, dict[str, Any]]]:
        """The rows, each with the trace batch it counts with."""
        return [(self.trace_batch(m), row) for m, row in self.rows]

    def progress_of(self, batch: int) -> dict[str, Any] | None:
        """The progress of the micro-batch that read trace batch ``batch``."""
        m = self.micro_batch(batch)
        return None if m is None else self.micro_progress(m)

    def progress_before(self, batch: int) -> dict[str, Any] | None:
        """The progress of the micro-batch just before the one that read ``batch`` (None first)."""
        m = self.micro_batch(batch)
        return None if m is None else self.micro_progress(m - 1)

    def progress_after(self, batch: int) -> dict[str, Any] | None:
        """The progress of the micro-batch just after the one that read ``batch`` (None last)."""
        m = self.micro_batch(batch)
        return None if m is None else self.micro_progress(m + 1)


def _offset(progress: dict[str, Any], which: str) -> int:
    """The trace source's offset (trace batches delivered so far) a micro-batch started or ended at."""
    import json

    sources = progress.get("sources") or [{}]
    value = sources[0].get(which)
    if isinstance(value, str):
        value = json.loads(value) if value not in ("", "null") else None
    return int(value["batch"]) if isinstance(value, dict) else 0


def watermark_ms(progress: dict[str, Any] | None) -> int | None:
    """The event-time watermark a micro-batch ran with, in ms; None before the first one (Spark
    reports 1970-01-01T00:00:00.000Z, its 0, until a batch has seen an event time)."""
    if not progress:
        return None
    text = (progress.get("eventTime") or {}).get("watermark")
    if text is None:
        return None
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return round(when.timestamp() * 1000)


def dropped_by_watermark(progress: dict[str, Any] | None) -> int:
    """Rows the micro-batch's stateful operators dropped as late (Spark's only trace of them)."""
    if not progress:
        return 0
    return sum(int(op.get("numRowsDroppedByWatermark", 0)) for op in progress.get("stateOperators", []))


def state_rows(progress: dict[str, Any] | None) -> int:
    """Rows held in the state of the micro-batch's stateful operators after it."""
    if not progress:
        return 0
    return sum(int(op.get("numRowsTotal", 0)) for op in progress.get("stateOperators", []))


def input_rows(trace: Trace) -> Any:
    """The trace as the engine's input rows (a pyarrow table; one ``batch_end`` marker row per
    batch, kind ``batch_end``, which an area's query filters out)."""
    from spark_impl.engine import _rows_table

    return _rows_table({"t0": (0, trace)})


#: Spark's failures when a Python process it starts does not connect back in time (a busy
#: machine): the query is continued from its checkpoint
WORKER_START_FAILURES = ("Python worker failed to connect back", "CANNOT_OPEN_SOCKET")
#: continuations after such a failure before the trace's query counts as failed
WORKER_START_RETRIES = 2


def run_trace(
    spark: Any,
    trace: Trace,
    build: Callable[[Any], Any],
    output_mode: str = "append",
) -> NativeRun:
    """Runs ``build(input)`` as one query over the trace, restarting from its checkpoint after
    each ``restart_after`` batch; returns every micro-batch's rows and progress."""
    from spark_impl.trace_source import write_trace_file

    work = tempfile.mkdtemp(prefix="spark-native-")
    written: dict[int, list[dict[str, Any]]] = {}  # by batch id
    progress: dict[int, dict[str, Any]] = {}
    try:
        path = os.path.join(work, "input.parquet")
        write_trace_file(path, input_rows(trace))
        num_batches = len(trace.batches)
        stops = sorted({b for b in trace.restart_after if b < num_batches - 1} | {num_batches - 1})

        collect = BatchRows(spark, os.path.join(work, "written"))
        for end_batch in stops:
            for attempt in range(WORKER_START_RETRIES + 1):
                query, error = _run_until(
                    spark, build, collect, path, num_batches, end_batch, work, output_mode
                )
                for p in _progress(query):
                    progress[p["batchId"]] = p
                if error is None:
                    break
                if attempt == WORKER_START_RETRIES or not any(m in str(error) for m in WORKER_START_FAILURES):
                    raise error
        for b, rows in collect.by_batch(spark).items():
            written[b] = [r.asDict(recursive=True) for r in rows]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return NativeRun(
        rows=[(b, r) for b in sorted(written) for r in written[b]],
        progress=[progress[b] for b in sorted(progress)],
    )


class BatchRows:
    """A ``foreachBatch`` function that keeps each micro-batch's rows (a batch run again replaces
    them), then ``by_batch`` gives them. Classic Spark calls it in this process, so it keeps them
    in memory; Spark Connect calls a pickled copy in a Python worker of the server, out of this
    process's reach, so there it writes one Parquet folder per micro-batch under ``folder``."""

    def __init__(self, spark: Any, folder: str) -> None:
        from spark_impl.session import is_connect

        self.folder = folder if is_connect(spark) else None
        self.kept: dict[int, list[Any]] = {}

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        if self.folder is None:
            self.kept[int(batch_id)] = batch_df.collect()
        else:
            batch_df.write.mode("overwrite").parquet(os.path.join(self.folder, str(int(batch_id))))

    def by_batch(self, spark: Any) -> dict[int, list[Any]]:
        """The rows (``Row``) each micro-batch wrote, by micro-batch id."""
        if self.folder is None:
            return dict(self.kept)
        if not os.path.isdir(self.folder):
            return {}
        return {
            int(n): spark.read.parquet(os.path.join(self.folder, n)).collect()
            for n in os.listdir(self.folder)
        }


def _run_until(
    spark: Any,
    build: Callable[[Any], Any],
    collect: Callable[[Any, int], None],
    path: str,
    num_batches: int,
    end_batch: int,
    work: str,
    output_mode: str,
) -> tuple[Any, BaseException | None]:
    """The query on the checkpoint in ``work`` from where it stopped to ``end_batch``, and its
    failure (None when it ended)."""
    from spark_impl.trace_source import SOURCE_NAME

    df = (
        spark.readStream.format(SOURCE_NAME)
        .option("path", path)
        .option("num_batches", str(num_batches))
        .option("end_batch", str(end_batch))
        .load()
    )
    query = (
        build(df)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", os.path.join(work, "checkpoint"))
        .outputMode(output_mode)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    except Exception as error:  # noqa: BLE001 - classic Spark raises the query's failure here
        return query, error
    finally:
        if query.isActive:
            query.stop()
    return query, query.exception()


def _progress(query: Any) -> list[dict[str, Any]]:
    import json

    out = []
    for p in query.recentProgress:
        d = p if isinstance(p, dict) else json.loads(p.json)
        out.append(d)
    return out
