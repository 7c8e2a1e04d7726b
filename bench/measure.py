"""Shared benchmark helpers: timed streaming runs, alternating repeats, peak memory, state size.

(Not named ``harness.py``: scripts in ``bench/`` run with ``bench/`` first on
``sys.path``, where a ``harness`` module would hide the project's ``harness``
package that ``spark_impl`` imports.)

- ``run_query``: one streaming query (noop sink by default, Trigger.AvailableNow),
  timed on the wall clock; the first micro-batch carries the start-up cost, so the
  warm figures leave it out. Reads the state size from the last progress
  (``stateOperators``) and the checkpoint's ``state/`` folder.
- ``alternate``: runs several named queries in turn, ``repeats`` times, so every
  query sees the same machine state; ``median`` and ``paired_ratio`` summarise.
- ``TreeMemory``: samples the RSS of this process and all its descendants (the
  JVM, Spark's Python daemon and workers) in a background thread; its peak
  is reported per run (JVM heap is not returned to the OS, so a later run's
  peak includes what earlier runs made the JVM reserve; Python workers are
  forked from one daemon, so their shared pages count once per worker).
- ``print_summary`` (``rates_line``, ``ratio_line``): the per-area scripts' printed
  summary of ``alternate``'s runs (median wall, events/s whole run and warm; the
  paired ratios against a baseline query).
- ``trace_stream`` and ``spark_workdir``: the ``trace`` source as a streaming
  DataFrame, and a Spark session with a scratch folder removed at the end.
- ``machine``: cores, load average and memory, for the results file.
- ``spark_events``: the events of a Spark event log written as plain JSON lines.

Benchmarks report figures; nothing here asserts a timing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

try:
    import psutil
except ImportError:  # the /proc fallback below covers Linux
    psutil = None


# ---- memory ------------------------------------------------------------------


def _children_proc(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids.extend(int(c) for c in f.read().split())
    except OSError:
        return []
    return kids


def _rss_proc(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def tree_rss() -> dict[str, int]:
    """RSS bytes of this process tree, split into driver, JVM and Python workers."""
    split = {"driver": 0, "jvm": 0, "python_workers": 0, "other": 0, "launcher": 0}
    if psutil is not None:
        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
        for p in procs:
            try:
                rss, name = p.memory_info().rss, p.name()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            split[_role(p.pid == me.pid, name)] += rss
        return split
    todo, seen = [os.getpid()], []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo.extend(_children_proc(pid))
    for pid in seen:
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        split[_role(pid == os.getpid(), name)] += _rss_proc(pid)
    return split


def _role(is_driver: bool, name: str) -> str:
    if name == "jspawnhelper":
        return "launcher"  # the JVM's short-lived process launcher: briefly shares the JVM's pages
    if is_driver:
        return "driver"
    if name.startswith("java"):
        return "jvm"
    if name.startswith("python"):
        return "python_workers"
    return "other"


class TreeMemory:
    """Peak RSS of the process tree while the ``with`` block runs (sampled every ``interval`` s)."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.peak_total = 0
        self.peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        split = tree_rss()
        split.pop("launcher")
        total = sum(split.values())
        if total > self.peak_total:
            self.peak_total, self.peak = total, split

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> TreeMemory:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


# ---- state size --------------------------------------------------------------


def spark_events(log: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, event) for each line of a plain JSON-lines Spark event log (``spark.eventLog.*``
    with compression and rolling off)."""
    with open(log) as f:
        for line in f:
            event = json.loads(line)
            yield event["Event"], event


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def latest_state_bytes(checkpoint: str) -> int:
    """Bytes of the RocksDB SST files under the checkpoint's ``state/`` folder.

    Versions share SST files and old ones stay until maintenance removes them,
    so this is an upper estimate of what the state holds at the end; state
    still in the changelog (not yet flushed to an SST file) is not counted.
    """
    total = 0
    for root, _, files in os.walk(os.path.join(checkpoint, "state")):
        for f in files:
            if f.endswith(".sst"):
                total += os.path.getsize(os.path.join(root, f))
    return total


_FIXED_WIDTH = {
    "LongType": 8, "IntegerType": 4, "DoubleType": 8, "FloatType": 4, "BooleanType": 1, "ShortType": 2,
    "ByteType": 1, "TimestampType": 8, "DateType": 4,
}  # fmt: skip


def _size_expr(column: str, data_type: Any) -> str:
    """A SQL expression for the bytes a value holds: fixed widths, string and binary lengths, summed."""
    from pyspark.sql import types as T

    name = type(data_type).__name__
    if name in _FIXED_WIDTH:
        return f"IF({column} IS NULL, 0, {_FIXED_WIDTH[name]})"
    if isinstance(data_type, T.BinaryType):
        return f"COALESCE(length({column}), 0)"
    if isinstance(data_type, T.StringType):
        return f"COALESCE(octet_length({column}), 0)"
    if isinstance(data_type, T.StructType):
        parts = [_size_expr(f"{column}.`{f.name}`", f.dataType) for f in data_type.fields]
        return "(" + " + ".join(parts or ["0"]) + ")"
    if isinstance(data_type, T.ArrayType):
        inner = _size_expr("x", data_type.elementType)
        return f"COALESCE(aggregate(transform({column}, x -> {inner}), 0L, (a, b) -> a + b), 0)"
    raise TypeError(f"no size rule for {name}")


def live_state_bytes(spark: Any, checkpoint: str) -> dict[str, int]:
    """The bytes of every state variable of every operator at the last committed batch.

    Read with Spark's state data source (``state-metadata`` lists the variables,
    ``statestore`` reads each): keys and values as stored, before RocksDB's
    compression, without the versions and changelogs a checkpoint folder also holds.
    Returns ``{"<operator>/<variable>": bytes}``.
    """
    import json

    sizes: dict[str, int] = {}
    for op in spark.read.format("state-metadata").load(checkpoint).collect():
        for var in json.loads(op.operatorProperties or "{}").get("stateVariables", []):
            rows = (
                spark.read.format("statestore").option("operatorId", op.operatorId)
                .option("stateVarName", var["stateName"]).load(checkpoint)
            )  # fmt: skip
            fields = [f for f in rows.schema.fields if f.name != "partition_id"]
            expr = " + ".join(_size_expr(f"`{f.name}`", f.dataType) for f in fields) or "0"
            total = rows.selectExpr(f"sum({expr}) AS b").first()
            sizes[f"{op.operatorId}/{var['stateName']}"] = int(total["b"] or 0) if total else 0
    return sizes


def state_metrics(progress: Any) -> dict[str, float]:
    """Rows, memory and SST bytes of the stateful operators in one progress (summed over operators)."""
    rows = memory = sst = 0.0
    for op in getattr(progress, "stateOperators", None) or []:
        rows += float(op.numRowsTotal or 0)
        memory += float(op.memoryUsedBytes or 0)
        metrics = op.customMetrics or {}
        sst += float(metrics.get("rocksdbSstFileSize", 0) or 0)
    return {"state_rows": rows, "state_memory_bytes": memory, "state_sst_bytes": sst}


# ---- timed runs --------------------------------------------------------------


@dataclass
class Run:
    wall: float
    rows: float
    batches: int
    warm_rows: float
    warm_busy: float
    peak_rss: int
    peak_split: dict[str, int]
    state: dict[str, float] = field(default_factory=dict)
    checkpoint_state_bytes: int = 0

    def rate(self, share: float = 1.0) -> float:
        return share * self.rows / self.wall if self.wall else float("nan")

    def warm_rate(self, share: float = 1.0) -> float:
        return share * self.warm_rows / self.warm_busy if self.warm_busy else float("nan")


def run_query(df: Any, mode: str, checkpoint: str, sink: str = "noop") -> Run:
    """Runs one streaming query to the end of its input (Trigger.AvailableNow) and measures it."""
    with TreeMemory() as memory:
        started = time.perf_counter()
        writer = df.writeStream.format(sink).outputMode(mode).option("checkpointLocation", checkpoint)
        if sink != "noop":
            writer = writer.option("path", checkpoint + "-out")
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        wall = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    progress = list(query.recentProgress)
    busy = [p for p in progress if p.numInputRows > 0]
    durations = [p.durationMs["triggerExecution"] / 1000 for p in busy]
    rows = [float(p.numInputRows) for p in busy]
    return Run(
        wall=wall,
        rows=sum(rows),
        batches=len(busy),
        warm_rows=sum(rows[1:]),
        warm_busy=sum(durations[1:]),
        peak_rss=memory.peak_total,
        peak_split=memory.peak,
        state=state_metrics(progress[-1]) if progress else {},
        checkpoint_state_bytes=latest_state_bytes(checkpoint),
    )


def alternate(queries: Mapping[str, Callable[[int], T]], repeats: int) -> dict[str, list[T]]:
    """Runs each named query once per round, ``repeats`` rounds, in the given order.

    Each callable gets the round number (0, 1, ...); a ``Run`` usually, but any
    result is collected (an oracle's figures, run between the Spark queries).
    """
    runs: dict[str, list[T]] = {name: [] for name in queries}
    for attempt in range(repeats):
        for name, start in queries.items():
            runs[name].append(start(attempt))
    return runs


def median(values: Iterable[float]) -> float:
    vals = [v for v in values if v == v]  # NaN-free
    return statistics.median(vals) if vals else float("nan")


def paired_ratio(ours: list[Run], theirs: list[Run], warm: bool = False) -> float:
    """The median of the per-round ratios ours/theirs (runs of one round saw the same machine state)."""
    if warm:
        return median(a.warm_rate() / b.warm_rate() for a, b in zip(ours, theirs, strict=True))
    return median(a.rate() / b.rate() for a, b in zip(ours, theirs, strict=True))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


# ---- printed summaries -------------------------------------------------------


def rates_line(
    name: str, runs: list[Run], width: int = 0, share: float = 1.0, unit: str = "ev/s", counts: bool = False
) -> str:
    """One query's medians over its runs: wall seconds, events/s on the wall clock and warm.

    ``share`` turns input rows into events (``Run.rate``); ``counts`` starts the
    line with the first run's input rows and busy micro-batches.
    """
    head = f"{runs[0].rows:,.0f} rows in {runs[0].batches} batches, " if counts else ""
    return (
        f"{name:{width}s}: {head}wall {median(r.wall for r in runs):.1f} s, "
        f"{median(r.rate(share) for r in runs):,.0f} {unit} (wall), "
        f"{median(r.warm_rate(share) for r in runs):,.0f} {unit} (batches 2.., trigger time)"
    )


def ratio_line(ours_name: str, ours: list[Run], theirs_name: str, theirs: list[Run]) -> str:
    """The paired ratios ours/theirs (``paired_ratio``), on the wall clock and warm."""
    return (
        f"ratio {ours_name}/{theirs_name} (median of paired runs): "
        f"{paired_ratio(ours, theirs):.2f}x (wall), {paired_ratio(ours, theirs, warm=True):.2f}x (warm)"
    )


def print_summary(
    title: str, runs: Mapping[str, list[Run]], baseline: str, share: float = 1.0, unit: str = "ev/s",
    counts: bool = False,
) -> None:  # fmt: skip
    """Prints a heading, one ``rates_line`` per query and the ``ratio_line`` of each other query to
    ``baseline``."""
    print(f"\n== {title}, median of {len(runs[baseline])} alternating runs ==")
    width = max(map(len, runs))
    for name, rs in runs.items():
        print(rates_line(name, rs, width, share, unit, counts))
    for name, rs in runs.items():
        if name != baseline:
            print(ratio_line(name, rs, baseline, runs[baseline]))


# ---- Spark -------------------------------------------------------------------


def trace_stream(spark: Any, path: str, partitions: int | None = None, end_batch: int | None = None) -> Any:
    """The project's ``trace`` source over the file at ``path``, as a streaming DataFrame
    (``end_batch``: the last trace batch of this run; a later run on the checkpoint continues)."""
    from spark_impl.trace_source import SOURCE_NAME

    reader = spark.readStream.format(SOURCE_NAME).option("path", path)
    if partitions is not None:
        reader = reader.option("partitions", str(partitions))
    if end_batch is not None:
        reader = reader.option("end_batch", str(end_batch))
    return reader.load()


@contextlib.contextmanager
def spark_workdir(prefix: str) -> Iterator[tuple[Any, str]]:
    """The Spark session (printing its version and ``SPARK_REMOTE``) and a scratch folder, removed after."""
    from spark_impl.session import get_spark

    spark = get_spark()
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        print(f"spark {spark.version}, remote={os.environ.get('SPARK_REMOTE', '-')}")
        yield spark, work
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- machine -----------------------------------------------------------------


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}
    if psutil is not None:
        vm = psutil.virtual_memory()
        info["memory_total_gb"] = round(vm.total / 2**30, 1)
        info["memory_available_gb"] = round(vm.available / 2**30, 1)
    return info


def run_dict(run: Run) -> dict[str, Any]:
    return asdict(run)


def page_opening(title: str, results: dict[str, Any]) -> list[str]:
    """A generated page's opening lines: its title, the commands that made it, their wall time and
    the machine's load before and after (``results``: ``machine``, ``wall_seconds``, ``commands``
    or ``command``)."""
    m, commands = results["machine"], results.get("commands", [results["command"]])
    return [
        f"# {title}",
        "",
        f"{'Commands' if len(commands) > 1 else 'Command'} (wall time {results['wall_seconds'] / 60:.0f} "
        f"minutes on {m['before']['cores']} cores; load average before {m['before']['load_average']}, "
        f"after {m['after']['load_average']}):",
        "",
        *(f"    {command}" for command in commands),
        "",
    ]
