"""A real load signal for the SLA shedder: the query's own progress, fed back as a column.

The SLA admission operator (``spark_impl.sla_admission``, OXS-R16) reads a load
score per event from ``load_col``, in thousandths (0..1000, OXS-R10). In a
pipeline that score must come from the system, never a constant. This module
derives it from the previous micro-batch's progress of the query itself and
joins it to every event of the next micro-batch::

    from spark_impl.load_signal import ProgressLoadSignal, with_load_score

    signal = ProgressLoadSignal(
        "/shared/load/orders",              # a directory the driver and every executor can read
        query_name="orders-sla",            # the query whose progress is the signal
        trigger_interval_ms=10_000,         # the time budget of one micro-batch
        queue_capacity=1_000,               # OXS-R14 shedder settings, the same as the operator's
        latency_target_ms=5_000,
        memory_budget_bytes=2 << 30,        # state memory that counts as 100 %
        checkpoint_location=checkpoint,     # the query's checkpoint: exact "previous batch" feed
    )
    events = with_load_score(events, signal)          # adds `load_score`, attaches the listener
    sla = sla_admission(events, ..., load_col="load_score", shedder={...})
    query = sla.write_by_decision(out_dir, checkpoint, query_name="orders-sla")

How the score travels
---------------------
- ``ProgressLoadSignal`` is a ``StreamingQueryListener``. On each progress
  event of the query it watches (by name or id) it computes the metrics
  (``load_metrics_from_progress``) and the score (``load_score``) and
  publishes them as one small JSON file, ``<directory>/load_score.json``
  (written to a temporary file, then ``os.replace``: a reader sees the old
  or the new record, never half of one). Before any progress the record is
  score 0 from batch -1 (OXS-R10: every metric is 0 until reported).
- ``with_load_score`` cross-joins the stream with a one-row static
  DataFrame read by the Python batch data source ``load_signal``. Spark
  keeps a stream-static join's static side in the plan and executes it again
  in every micro-batch; this source's ``read()`` runs once per micro-batch
  (its ``partitions()`` once per query start), so every row of a micro-batch
  carries the same, current score. A static side read with
  ``spark.read.json``/``parquet`` would be re-read too, but its file listing
  is fixed when the DataFrame is defined (a file published under a new name
  is never seen, a removed one fails the batch), and it cannot wait.
- The listener runs after a batch has committed, asynchronously: under a
  trigger that starts batches back to back (``availableNow``, a processing
  time shorter than a batch) the next batch can read the file before the
  previous batch's score is in it. With ``checkpoint_location`` the reader
  waits (at most ``max_wait_ms``) until the published record covers the last
  batch committed in ``<checkpoint>/commits``, so micro-batch N always
  carries the score of batch N-1's progress. It waits only when it is exactly
  one batch behind, so a listener that is gone costs one wait, not one per
  batch; after a restart the listener's ``onQueryStarted`` marks the record
  as covering the checkpoint's last commit (the previous run's last progress
  may never have been published).

Where it runs: on classic Spark the listener runs in the driver's Python
process; through Spark Connect (Spark 4) ``spark.streams.addListener`` runs
it in the client's process, and the data source reads on the server's
executors. So ``directory`` (and ``checkpoint_location`` for the wait) must
be paths that process and every executor see: a local path for ``local[N]``
and a local Connect server, a shared mount on a cluster.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.streaming import StreamingQueryListener

from spark_impl.sla_admission.rules import load_score as sla_load_score
from spark_impl.sla_admission.rules import metric_problem
from spark_impl.sla_admission.settings import METRIC_NAMES, Shedder

SOURCE_NAME = "load_signal"
RECORD_FILE = "load_score.json"
NO_BATCH = -1  # the batch id of the record published before any progress


# ---- the pure functions (OXS-R10) --------------------------------------------------------------


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _number(value: Any) -> float:
    """A progress figure as a number; absent, null and NaN (Spark omits NaN rates) count as 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return 0.0
    try:
        number = float(value)
    except ValueError:
        return 0.0
    return number if math.isfinite(number) else 0.0


def load_metrics_from_progress(
    progress: Mapping[str, Any], trigger_interval_ms: int, queue_capacity: int, memory_budget_bytes: int
) -> dict[str, int]:
    """The four metrics of OXS-R10 from one ``StreamingQueryProgress`` as its JSON dict
    (``json.loads(progress.json)``, or a ``query.lastProgress``).

    - ``latency`` (ms) = ``durationMs.triggerExecution``: how long the batch took from its
      trigger to its commit, i.e. how long its newest rows waited for their result
      (``batchDuration`` when a progress has no trigger duration).
    - ``cpu`` (percent) = ``100 * latency // trigger_interval_ms``, at most 100: the share of
      its time budget the query spent working. It is a busy fraction of the trigger interval,
      not an operating-system figure: a query that needs its whole interval is saturated
      whatever the CPU counters say.
    - ``queue_depth`` (rows) = ``floor((inputRowsPerSecond - processedRowsPerSecond) *
      latency / 1000)``, at least 0: the rows that arrived, at the input rate, during the
      batch beyond those it processed (positive only when the batch took longer than the
      interval its input arrived in). When sources report a real backlog (Kafka's
      ``sources[].metrics.maxOffsetsBehindLatest``, the offsets its most lagging partition
      is behind) their sum is taken if it is larger: an observed backlog, even a lower bound
      of it, beats an estimate.
    - ``memory`` (percent) = ``100 * sum(stateOperators[].memoryUsedBytes) //
      memory_budget_bytes``, at most 100: the state held against the budget given for it.

    ``queue_capacity`` is validated here (it must match the shedder's, OXS-R14) so a caller
    finds a wrong setting before the first batch; the depth itself is not capped, the score
    is (``load_score``).
    """
    _positive_int("trigger_interval_ms", trigger_interval_ms)
    _positive_int("queue_capacity", queue_capacity)
    _positive_int("memory_budget_bytes", memory_budget_bytes)
    durations = progress.get("durationMs") or {}
    latency = int(max(0.0, _number(durations.get("triggerExecution", progress.get("batchDuration")))))
    rate_in = _number(progress.get("inputRowsPerSecond"))
    rate_done = _number(progress.get("processedRowsPerSecond"))
    estimated_depth = max(0, math.floor((rate_in - rate_done) * latency / 1000))
    reported_depth = sum(
        int(_number((source.get("metrics") or {}).get("maxOffsetsBehindLatest")))
        for source in progress.get("sources") or ()
    )
    state_bytes = sum(int(_number(op.get("memoryUsedBytes"))) for op in progress.get("stateOperators") or ())
    return {
        "cpu": min(100, 100 * latency // trigger_interval_ms),
        "memory": min(100, 100 * max(0, state_bytes) // memory_budget_bytes),
        "queue_depth": max(estimated_depth, reported_depth),
        "latency": latency,
    }


def load_score(metrics: Mapping[str, int], queue_capacity: int, latency_target_ms: int) -> int:
    """OXS-R10, in thousandths: the highest of ``10 * cpu``, ``10 * memory``,
    ``min(1000, 1000 * queue_depth // queue_capacity)`` and
    ``min(1000, 1000 * latency // latency_target_ms)``; a metric left out is 0.

    Metrics are checked as a ``load`` item's are (OXS-R15): known names, integers, percentages
    0..100, depth and latency >= 0; anything else is a ValueError.
    """
    _positive_int("queue_capacity", queue_capacity)
    _positive_int("latency_target_ms", latency_target_ms)
    for name, value in metrics.items():
        problem = metric_problem(name, value)
        if problem is not None:
            raise ValueError(problem)
    shedder = Shedder(queue_capacity=queue_capacity, latency_target_ms=latency_target_ms)
    return sla_load_score(metrics, shedder)


# ---- the published record ---------------------------------------------------------------------


def read_record(path: str) -> dict[str, Any]:
    """The record last published at ``path`` (``score``, ``metrics``, ``batch_id``, ...)."""
    try:
        with open(path, encoding="utf-8") as f:
            record: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no load score published at {path}: create the ProgressLoadSignal before the query "
            "starts, in a directory the driver and every executor can read"
        ) from None
    return record


def _write_record(path: str, record: Mapping[str, Any]) -> None:
    # A temporary name of this process and thread, then one rename: readers never see half a record.
    temporary = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(record, f, sort_keys=True)
    os.replace(temporary, path)


def local_path(location: str) -> str:
    """``location`` as a path Python's file functions can open (plain or ``file:`` URI)."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme in ("", "file"):
        return urllib.parse.unquote(parsed.path) if parsed.scheme else location
    raise ValueError(
        f"{location!r}: the load signal reads it with Python's file functions, so it must be a local "
        "or mounted path (or a file: URI)"
    )


def last_commit(checkpoint_location: str) -> int:
    """The highest batch id in ``<checkpoint>/commits`` (-1 when none has committed)."""
    try:
        names = os.listdir(os.path.join(local_path(checkpoint_location), "commits"))
    except FileNotFoundError:
        return NO_BATCH
    return max((int(n) for n in names if n.isdigit()), default=NO_BATCH)


def await_record(path: str, checkpoint_location: str | None, max_wait_ms: int) -> dict[str, Any]:
    """The record to use for the micro-batch running now: with a checkpoint, once it covers the
    last committed batch; waits only while it is exactly one batch behind (a listener late for
    that batch), at most ``max_wait_ms``, then takes what is there."""
    record = read_record(path)
    if checkpoint_location is None:
        return record
    deadline = time.monotonic() + max_wait_ms / 1000
    while record["batch_id"] == last_commit(checkpoint_location) - 1 and time.monotonic() < deadline:
        time.sleep(0.02)
        record = read_record(path)
    return record


# ---- the listener -----------------------------------------------------------------------------


class ProgressLoadSignal(StreamingQueryListener):
    """Publishes the load score of each progress of one query (see the module docstring).

    ``query_name`` and/or ``query_id`` say which query's progress counts (a session runs
    many). ``trigger_interval_ms``, ``queue_capacity`` and ``memory_budget_bytes`` go to
    ``load_metrics_from_progress``, ``queue_capacity`` and ``latency_target_ms`` to
    ``load_score`` (give the shedder's own, OXS-R14). ``checkpoint_location`` (the query's)
    makes ``with_load_score`` feed exactly the previous batch's score; ``max_wait_ms`` bounds
    that wait. An existing record in ``directory`` (a restart) is kept.
    """

    def __init__(
        self,
        directory: str,
        *,
        query_name: str | None = None,
        query_id: str | None = None,
        trigger_interval_ms: int,
        queue_capacity: int = 1000,
        latency_target_ms: int = 1000,
        memory_budget_bytes: int = 1 << 30,
        checkpoint_location: str | None = None,
        max_wait_ms: int = 10_000,
    ) -> None:
        if query_name is None and query_id is None:
            raise ValueError("give query_name or query_id: a session runs many queries")
        _positive_int("trigger_interval_ms", trigger_interval_ms)
        _positive_int("queue_capacity", queue_capacity)
        _positive_int("latency_target_ms", latency_target_ms)
        _positive_int("memory_budget_bytes", memory_budget_bytes)
        _positive_int("max_wait_ms", max_wait_ms)
        self.directory = os.path.abspath(local_path(directory))
        self.path = os.path.join(self.directory, RECORD_FILE)
        self.query_name = query_name
        self.query_id = None if query_id is None else str(query_id)
        self.trigger_interval_ms = trigger_interval_ms
        self.queue_capacity = queue_capacity
        self.latency_target_ms = latency_target_ms
        self.memory_budget_bytes = memory_budget_bytes
        self.checkpoint_location = None if checkpoint_location is None else local_path(checkpoint_location)
        self.max_wait_ms = max_wait_ms
        self._lock = threading.Lock()
        self._published: deque[dict[str, Any]] = deque(maxlen=1000)
        self._session: Any = None
        os.makedirs(self.directory, exist_ok=True)
        if not os.path.exists(self.path):
            idle = dict.fromkeys(METRIC_NAMES, 0)
            self._publish(
                {
                    "score": load_score(idle, queue_capacity, latency_target_ms),
                    "metrics": idle,
                    "batch_id": NO_BATCH,
                    "query_id": None,
                    "run_id": None,
                }
            )

    # -- reading the signal --

    def score(self) -> int:
        """The score last published (thousandths, 0..1000)."""
        return int(read_record(self.path)["score"])

    def record(self) -> dict[str, Any]:
        """The record last published: ``score``, ``metrics``, ``batch_id`` (the batch whose
        progress it came from, -1 before any), ``query_id``, ``run_id``, ``published_at_ms``."""
        return read_record(self.path)

    def published(self) -> list[dict[str, Any]]:
        """The records this object published, oldest first (the last 1000)."""
        with self._lock:
            return list(self._published)

    # -- attaching --

    def attach(self, spark: Any) -> ProgressLoadSignal:
        """Adds this listener to ``spark`` (classic or Connect); a second call does nothing."""
        if self._session is None:
            spark.streams.addListener(self)
            self._session = spark
        return self

    def detach(self) -> None:
        """Removes this listener from the session it was attached to; the record stays."""
        if self._session is not None:
            self._session.streams.removeListener(self)
            self._session = None

    # -- StreamingQueryListener --

    def _watches(self, name: str | None, query_id: Any) -> bool:
        return (self.query_name is None or name == self.query_name) and (
            self.query_id is None or str(query_id) == self.query_id
        )

    def onQueryStarted(self, event: Any) -> None:
        if not self._watches(event.name, event.id) or self.checkpoint_location is None:
            return
        # The previous run's last progress may never have been published: its record stands for it.
        committed = last_commit(self.checkpoint_location)
        with self._lock:
            current = read_record(self.path)
            if current["batch_id"] < committed:
                self._publish({**current, "batch_id": committed, "run_id": str(event.runId)})

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        if not self._watches(progress.get("name"), progress.get("id")):
            return
        metrics = load_metrics_from_progress(
            progress, self.trigger_interval_ms, self.queue_capacity, self.memory_budget_bytes
        )
        record = {
            "score": load_score(metrics, self.queue_capacity, self.latency_target_ms),
            "metrics": metrics,
            "batch_id": int(progress["batchId"]),
            "query_id": progress.get("id"),
            "run_id": progress.get("runId"),
        }
        with self._lock:
            current = read_record(self.path)
            # Events may come from several threads: an older batch of the same run never overwrites a newer.
            if current.get("run_id") != record["run_id"] or current["batch_id"] <= record["batch_id"]:
                self._publish(record)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass  # the last record stays: a restarted query starts from it

    def _publish(self, record: dict[str, Any]) -> None:
        record = {**record, "published_at_ms": int(time.time() * 1000)}
        _write_record(self.path, record)
        self._published.append(record)


# ---- the column -------------------------------------------------------------------------------


class _LoadScoreReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.path = options["path"]
        self.checkpoint = options.get("checkpoint") or None
        self.max_wait_ms = int(options.get("max_wait_ms", "10000"))

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]  # one row, one read per micro-batch

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int]]:
        record = await_record(self.path, self.checkpoint, self.max_wait_ms)
        yield (int(record["score"]), int(record["batch_id"]))


class LoadSignalDataSource(DataSource):
    """``format("load_signal")``: one row (``load_score`` int, ``load_batch`` long) from the
    record at option ``path``; options ``checkpoint`` and ``max_wait_ms`` as ``await_record``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return "load_score int, load_batch long"

    def reader(self, schema: Any) -> DataSourceReader:
        if "path" not in self.options:
            raise ValueError("load_signal source: option 'path' (the published record) is required")
        return _LoadScoreReader(dict(self.options))


def with_load_score(
    df: Any, signal: ProgressLoadSignal, column: str = "load_score", batch_column: str | None = None
) -> Any:
    """``df`` with ``column`` (int, thousandths 0..1000): in each micro-batch, the score the
    signal published for the previous micro-batch's progress (0 before any). ``batch_column``,
    when given, adds the batch id that score came from (-1 before any). Attaches the signal's
    listener to ``df``'s session if it is not attached yet; works on classic Spark and
    through Spark Connect."""
    taken = [c for c in (column, batch_column) if c is not None and c in df.columns]
    if taken or column == batch_column:
        raise ValueError(f"with_load_score: the input already has {taken or [column]}; choose another name")
    spark = df.sparkSession
    spark.dataSource.register(LoadSignalDataSource)
    signal.attach(spark)
    reader = (
        spark.read.format(SOURCE_NAME).option("path", signal.path).option("max_wait_ms", signal.max_wait_ms)
    )
    if signal.checkpoint_location is not None:
        reader = reader.option("checkpoint", signal.checkpoint_location)
    from pyspark.sql import functions as F

    picked = [F.col("load_score").alias(column)]
    if batch_column is not None:
        picked.append(F.col("load_batch").alias(batch_column))
    return df.crossJoin(reader.load().select(*picked))
