"""Killed Spark queries (spec/traces.md TR-17): plan, spawn, kill, wait, restart, compare.

``run_with_kills(traces, kills)`` runs the Spark engine's combined query of ``traces`` (all
areas in ONE query, ``spark_impl.engine.combined_output``) in a child process
(``python -m spark_impl.testing.fault_child``) that writes through ``write_tables``'s per-batch function
(``spark_impl.common.write_batch_tables``: ``foreachBatch``, one folder per table and batch
id). For each planned ``Kill``, the child blocks when it reaches the point (harness/
fault_child.py says where each point is), and this side sends SIGKILL to every process of
the child's session and process groups (the Python driver, its JVM, PySpark's daemons and
workers, which put themselves in process groups of their own), waits until every one of them
is gone (two JVMs must never share a checkpoint), checks the sink as a reader sees it, and
starts a new child on the same checkpoint. After the last child ends the sink is read, split
per trace and compared with the oracle's output of each uninterrupted trace.

Checks, each failure a ``FaultCheckFailed`` naming the trace, the table and the kill plan:

- after every kill: every batch folder a reader sees (``<table>/batch_id=<n>``, hidden names
  skipped as Spark skips them) holds exactly the oracle's rows of that table and batch
  (nothing twice, no partial folder), and every batch in the checkpoint's commit log has
  all its folders;
- at the end: the same for every folder, and each trace's whole output equals the oracle's.

Only the parent's side lives here: it needs psutil and pyarrow, not a Spark session.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.outputs import TABLES, Output, canonical
from harness.traces import Trace

#: the kill points in the order a micro-batch reaches them (spark_impl/testing/fault_child.py says where)
KILL_POINTS = ("before_batch", "reading", "stateful", "after_state", "between_tables", "after_sink")

ROOT = Path(__file__).resolve().parents[2]  # the folder that holds spark_impl


class FaultHarnessError(RuntimeError):
    """The harness itself could not do its work (a child that failed or hung, a process that
    outlived its SIGKILL): not a finding about the operators."""


class FaultCheckFailed(AssertionError):
    """The sink after a kill, or at the end, is not what the oracle says."""


@dataclass(frozen=True)
class Kill:
    """SIGKILL when the query reaches ``point`` of micro-batch ``batch``."""

    batch: int
    point: str

    def __post_init__(self) -> None:
        if self.point not in KILL_POINTS:
            raise ValueError(f"unknown kill point {self.point!r}: one of {', '.join(KILL_POINTS)}")

    @property
    def order(self) -> tuple[int, int]:
        return (self.batch, KILL_POINTS.index(self.point))

    def __str__(self) -> str:
        return f"{self.point} of batch {self.batch}"


def reachable_after(previous: Kill, kill: Kill) -> bool:
    """Whether a child restarted after ``previous`` reaches ``kill``: a killed batch is replayed
    from its logged offsets, so every point of it comes again except its planning."""
    if kill.order < previous.order:
        return False
    return not (
        kill.batch == previous.batch and kill.point == "before_batch" and previous.point != "before_batch"
    )


def plan_kills(rng: random.Random, count: int, points_of_batch: Mapping[int, Sequence[str]]) -> list[Kill]:
    """``count`` kills in the order a run reaches them, from ``points_of_batch`` (the points
    each micro-batch certainly reaches): every point drawn once before any twice, batches
    drawn at random, and a point may repeat on the replay of the batch it killed."""
    if not points_of_batch:
        raise ValueError("no micro-batch to kill")
    wanted: list[str] = []
    while len(wanted) < count:
        wanted += rng.sample(KILL_POINTS, len(KILL_POINTS))
    candidates = [Kill(b, p) for b, ps in points_of_batch.items() for p in ps]
    kills = []
    for point in wanted[:count]:
        fits = [k for k in candidates if k.point == point] or candidates
        kills.append(rng.choice(fits))
    return sorted(kills, key=lambda k: k.order)  # in this order each is reachable after the one before


@dataclass
class KillRecord:
    kill: Kill
    seconds_to_reach: float  # child start to the point
    seconds_to_clear: float  # SIGKILL until every process is gone
    processes: int  # processes killed
    interrupted: dict[str, int]  # per area: traces that still had this batch or later to run


@dataclass
class FaultRun:
    traces: list[Trace]
    expected: Expected
    plan: list[Kill]
    kills: list[KillRecord] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    child_starts: int = 0
    seconds: float = 0.0
    workdir: str = ""

    @property
    def plan_text(self) -> str:
        return ", ".join(str(k) for k in self.plan) or "no kill"

    def kills_of(self, area: str) -> list[KillRecord]:
        """The kills that interrupted at least one trace of ``area``."""
        return [k for k in self.kills if k.interrupted.get(area, 0) > 0]

    def problems_of(self, area: str) -> list[Problem]:
        """The problems of ``area``'s traces and those of the whole run."""
        return [p for p in self.problems if p.tid is None or self.expected.tids[p.tid].area == area]


# ---- processes ----------------------------------------------------------------------------


def _session_members(sid: int) -> list[Any]:
    import psutil

    members = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid:
                members.append(p)
        except (ProcessLookupError, PermissionError):
            continue
    return members


def _alive(p: Any) -> bool:
    import psutil

    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def kill_tree(child: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    """SIGKILL to the child (started with ``start_new_session``), every process of its session,
    every descendant and every process group among them; returns when all are gone (a zombie
    counts as gone: it holds no file and no lock). Returns how many processes were killed."""
    import psutil

    try:
        root = psutil.Process(child.pid)
        doomed = {root, *root.children(recursive=True)}
    except psutil.NoSuchProcess:
        doomed = set()
    deadline = time.monotonic() + timeout
    killed: set[int] = set()
    while True:
        doomed |= set(_session_members(child.pid))  # forked after the snapshot: same session
        alive = [p for p in doomed if _alive(p)]
        if not alive:
            break
        if time.monotonic() > deadline:
            names = ", ".join(f"{p.pid} {' '.join(p.cmdline()[:3])}" for p in alive[:5])
            raise FaultHarnessError(f"{len(alive)} processes outlived SIGKILL for {timeout:.0f} s: {names}")
        groups = set()
        for p in alive:
            try:
                groups.add(os.getpgid(p.pid))
            except ProcessLookupError:
                continue
        for g in groups - {os.getpgid(0)}:  # never this process's own group
            try:
                os.killpg(g, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in alive:
            try:
                p.kill()
                killed.add(p.pid)
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.05)
    child.wait(timeout=max(1.0, deadline - time.monotonic()))
    return len(killed)


# ---- the sink as a reader sees it ------------------------------------------------------------


def _visible(name: str) -> bool:
    return not name.startswith(("_", "."))  # what Spark's file listing skips


def read_sink(sink: Path) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Every batch folder a reader sees: (table, batch id) -> its rows as dicts."""
    import pyarrow.parquet as pq

    folders: dict[tuple[str, int], list[dict[str, Any]]] = {}
    if not sink.is_dir():
        return folders
    for table_dir in sorted(p for p in sink.iterdir() if p.is_dir() and _visible(p.name)):
        for folder in sorted(p for p in table_dir.iterdir() if p.is_dir() and _visible(p.name)):
            name, _, value = folder.name.partition("=")
            if name != "batch_id" or not value.lstrip("-").isdigit():
                raise FaultCheckFailed(f"unexpected folder {folder} in the sink")
            files = sorted(f for f in folder.iterdir() if f.is_file() and _visible(f.name))
            rows: list[dict[str, Any]] = []
            for f in files:
                rows += pq.read_table(f).to_pylist()
            folders[(table_dir.name, int(value))] = rows
    return folders


def committed_batches(checkpoint: Path) -> list[int]:
    """The batches in Spark's commit log: finished, sink included."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return []
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())


# ---- expectations ----------------------------------------------------------------------------


@dataclass
class Expected:
    """The oracle's output of each uninterrupted trace, and the same rows per sink folder."""

    tids: dict[str, Trace]
    outputs: dict[str, Output]  # canonical, per trace id
    folders: dict[tuple[str, int], dict[str, list[tuple[Any, ...]]]]  # (table, batch) -> tid -> rows

    @classmethod
    def of(cls, traces: Sequence[Trace]) -> Expected:
        from harness.engine import run_canonical
        from harness.reference_engine import ReferenceEngine

        tids = {f"t{i:06d}": t for i, t in enumerate(traces)}
        results = run_canonical(ReferenceEngine(), list(traces))
        outputs: dict[str, Output] = {}
        folders: dict[tuple[str, int], dict[str, list[tuple[Any, ...]]]] = {}
        for tid, trace, out in zip(tids, traces, results, strict=True):
            if isinstance(out, Exception):
                raise ValueError(
                    f"{trace.name or tid}: the oracle refuses its config ({out}); give valid traces"
                )
            outputs[tid] = out
            for table, rows in out.items():
                assert TABLES[trace.area][table][0] == "batch", "every table's first column is its batch"
                for row in rows:
                    folders.setdefault((table, row[0]), {}).setdefault(tid, []).append(row)
        return cls(tids, outputs, folders)

    def points_of_batch(self) -> dict[int, list[str]]:
        """Per micro-batch, the kill points it certainly reaches (``stateful`` needs an output
        row, ``between_tables`` two tables); the first batch is left out: it has no state yet
        that a kill could lose."""
        last = max(len(t.batches) for t in self.tids.values()) - 1
        points: dict[int, list[str]] = {}
        for b in range(1, last + 1):
            tables = {table for (table, batch) in self.folders if batch == b}
            points[b] = [
                p
                for p in KILL_POINTS
                if (p != "stateful" or tables) and (p != "between_tables" or len(tables) > 1)
            ]
        return points


def _folder_rows(
    expected: Expected, table: str, rows: Sequence[Mapping[str, Any]]
) -> dict[str, list[tuple[Any, ...]]]:
    per_tid: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        per_tid.setdefault(str(r["stream_id"]), []).append(r)
    out = {}
    for tid, mine in per_tid.items():
        trace = expected.tids.get(tid)
        if trace is None or table not in TABLES[trace.area]:
            raise FaultCheckFailed(
                f"sink table {table!r} holds rows of stream {tid!r}, which is no trace of it"
            )
        out[tid] = canonical(trace.area, {table: mine})[table]
    return out


def _describe(expected: Expected, tid: str) -> str:
    trace = expected.tids[tid]
    return f"trace {tid} ({trace.area}, {trace.name or 'unnamed'}, {len(trace.batches)} batches)"


@dataclass(frozen=True)
class Problem:
    """One thing the sink got wrong: the trace it concerns (None: the whole run) and what."""

    tid: str | None
    text: str


def check_sink(expected: Expected, sink: Path, checkpoint: Path, final: bool = False) -> list[Problem]:
    """Every visible folder must hold exactly the oracle's rows of its table and batch, and every
    committed batch (every batch, when ``final``) must have all its folders."""
    seen = read_sink(sink)
    problems = []
    for (table, batch), rows in sorted(seen.items()):
        try:
            actual = _folder_rows(expected, table, rows)
        except FaultCheckFailed as e:
            problems.append(Problem(None, f"{table}/batch_id={batch}: {e}"))
            continue
        wanted = expected.folders.get((table, batch), {})
        for tid in sorted(set(actual) | set(wanted)):
            a, w = actual.get(tid, []), sorted(wanted.get(tid, []), key=_order)
            if a != w:
                problems.append(Problem(tid, (
                    f"{table}/batch_id={batch} holds {len(a)} rows of {_describe(expected, tid)} where the "
                    f"oracle has {len(w)}; first extra row: {_first(a, w)}, first missing row: {_first(w, a)}"
                )))  # fmt: skip
    done = set(committed_batches(checkpoint))
    for (table, batch), wanted in sorted(expected.folders.items()):
        if (final or batch in done) and (table, batch) not in seen:
            state = "the run has ended" if final else "Spark's commit log has the batch"
            for tid in sorted(wanted):
                problems.append(
                    Problem(tid, f"{table}/batch_id={batch} is missing ({state}): {_describe(expected, tid)}")
                )
    return problems


def _order(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is not None, v) for v in row)


def _first(a: Sequence[tuple[Any, ...]], b: Sequence[tuple[Any, ...]]) -> str:
    rest = list(b)
    for row in a:
        if row in rest:
            rest.remove(row)
        else:
            return str(row)
    return "none"


def compare_final(expected: Expected, sink: Path) -> dict[str, str]:
    """Per trace id whose whole output differs from the oracle's: the difference."""
    from harness.differential import compare

    actual: dict[str, dict[str, list[Mapping[str, Any]]]] = {tid: {} for tid in expected.tids}
    for (table, _), rows in read_sink(sink).items():
        for r in rows:
            tid = str(r["stream_id"])
            if tid in actual:
                actual[tid].setdefault(table, []).append(r)
    differ = {}
    for tid, trace in expected.tids.items():
        got = canonical(trace.area, actual[tid])
        difference = compare(trace.area, expected.outputs[tid], got)
        if difference:
            differ[tid] = difference
    return differ


# ---- the run ---------------------------------------------------------------------------------


#: what PySpark puts in the environment of a process that runs Spark Connect
CONNECT_MARKERS = ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED")


def child_env(work: Path) -> dict[str, str]:
    # The child runs classic Spark: under Connect it would start a second local Connect server
    # on the port the parent's holds, and a kill must reach the JVM that runs the query.
    from spark_impl.testing.warm_python import without_launcher

    env = without_launcher({k: v for k, v in os.environ.items() if k not in CONNECT_MARKERS})
    local = work / "local"
    local.mkdir(exist_ok=True)
    # A killed JVM leaves its scratch files behind: keep them in the work dir, which goes at the end.
    env["SPARK_LOCAL_DIRS"] = str(local)
    env["TMPDIR"] = str(local)
    env["JAVA_TOOL_OPTIONS"] = (
        f"{env.get('JAVA_TOOL_OPTIONS', '')} -Djava.io.tmpdir={local} -XX:-UsePerfData".strip()
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _start_child(
    work: Path, kill: Kill | None, n: int, niceness: int = 0
) -> tuple[subprocess.Popen[bytes], Any]:
    from spark_impl.testing import fault_child

    plan = {"point": kill.point, "batch": kill.batch} if kill else {}
    (work / fault_child.PLAN_FILE).write_text(json.dumps(plan), encoding="utf-8")
    log = open(work / f"child-{n}.log", "wb")  # noqa: SIM115 - closed by the caller
    proc = subprocess.Popen(
        [sys.executable, "-m", "spark_impl.testing.fault_child", str(work)],
        cwd=ROOT,
        env=child_env(work),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own session and process group: killed as one
        preexec_fn=(lambda: os.nice(niceness)) if niceness else None,
    )
    return proc, log


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def run_with_kills(
    traces: Sequence[Trace],
    kills: Sequence[Kill],
    *,
    partitions: int = 1,
    child_timeout: float = 900.0,
    keep: bool = False,
    expected: Expected | None = None,
    niceness: int = 0,
) -> FaultRun:
    """Runs ``traces`` (valid configs, any areas) as one Spark query killed at each of ``kills``
    in turn (each reachable after the one before: ``reachable_after``), checks the sink after
    every kill and at the end, and returns what it found in ``FaultRun.problems`` (empty: nothing
    lost, nothing twice). Raises FaultHarnessError when a child fails, hangs or outlives its
    kill. The work dir goes unless ``keep`` or something went wrong (its child logs help then).
    ``niceness`` lowers the children's CPU priority (19: they take only what is left idle)."""
    from spark_impl.engine import _rows_table
    from spark_impl.testing import fault_child
    from spark_impl.trace_source import write_trace_file

    for a, b in zip(kills, kills[1:]):
        if not reachable_after(a, b):
            raise ValueError(f"kill at {b} cannot follow the kill at {a}: a restarted query never reaches it")
    expected = expected or Expected.of(traces)
    work = Path(tempfile.mkdtemp(prefix="fault-run-"))
    run = FaultRun(list(traces), expected=expected, plan=list(kills), workdir=str(work))
    started = time.monotonic()
    try:
        numbered = {tid: (i, t) for i, (tid, t) in enumerate(expected.tids.items())}
        write_trace_file(str(work / fault_child.INPUT_FILE), _rows_table(numbered))
        num_batches = max(len(t.batches) for t in traces)
        (work / fault_child.RUN_FILE).write_text(
            json.dumps(
                {
                    "traces": [t.to_json() for t in traces],
                    "num_batches": num_batches,
                    "partitions": partitions,
                }
            ),
            encoding="utf-8",
        )
        sink, checkpoint = work / "sink", work / "checkpoint"
        for n, kill in enumerate([*kills, None]):
            record = _one_child(work, n, kill, run, child_timeout, niceness)
            if record is not None:
                record.interrupted = _interrupted(traces, record.kill.batch)
                run.kills.append(record)
            when = f"after the kill at {kill}" if kill else "at the end"
            for p in check_sink(expected, sink, checkpoint, final=kill is None):
                run.problems.append(Problem(p.tid, f"{when}: {p.text}"))
        for tid, difference in compare_final(expected, sink).items():
            run.problems.append(
                Problem(tid, f"{_describe(expected, tid)} differs from the oracle:\n{difference}")
            )
    except BaseException:
        keep = True
        raise
    finally:
        run.seconds = time.monotonic() - started
        if run.problems:
            keep = True
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return run


class KillsInBackground:
    """``run_with_kills`` in a daemon thread, its children at nice 19 (they take only the CPU the
    rest leaves idle); ``result()`` waits for it and returns its run or raises what it raised."""

    def __init__(self, traces: Sequence[Trace], kills: Sequence[Kill], **options: Any) -> None:
        self._run: FaultRun | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._work, args=(list(traces), list(kills), options), name="kill-run", daemon=True
        )
        self._thread.start()

    def _work(self, traces: list[Trace], kills: list[Kill], options: dict[str, Any]) -> None:
        try:
            self._run = run_with_kills(traces, kills, niceness=19, **options)
        except BaseException as error:  # noqa: BLE001 - raised again by result()
            self._error = error

    def result(self) -> FaultRun:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._run is not None
        return self._run


def _one_child(
    work: Path, n: int, kill: Kill | None, run: FaultRun, timeout: float, niceness: int = 0
) -> KillRecord | None:
    """Child ``n`` from start to its kill (the record) or to its end (None)."""
    from spark_impl.testing import fault_child

    reached = work / fault_child.REACHED_FILE
    proc, log = _start_child(work, kill, n, niceness)
    run.child_starts += 1
    t0 = time.monotonic()
    log_path = work / f"child-{n}.log"
    try:
        while True:
            if kill is not None and reached.exists():
                at = json.loads(reached.read_text(encoding="utf-8"))
                to_reach = time.monotonic() - t0
                t1 = time.monotonic()
                processes = kill_tree(proc)
                reached.unlink()
                if (at["point"], at["batch"]) != (kill.point, kill.batch):
                    raise FaultHarnessError(f"fault child {n} stopped at {at}, not at the planned {kill}")
                return KillRecord(kill, to_reach, time.monotonic() - t1, processes, {})
            status = proc.poll()
            if status is not None:
                if status == 0 and kill is None:
                    return None
                why = f"exited with status {status}" + (f" before reaching {kill}" if kill else "")
                raise FaultHarnessError(
                    f"fault child {n} {why} (kill plan: {run.plan_text}); the end of {log_path}:\n"
                    + _log_tail(log_path)
                )
            if time.monotonic() - t0 > timeout:
                raise FaultHarnessError(
                    f"fault child {n} ran over {timeout:.0f} s (kill plan: {run.plan_text}); the end of "
                    f"{log_path}:\n" + _log_tail(log_path)
                )
            time.sleep(0.1)
    finally:
        if proc.poll() is None or _session_members(proc.pid):
            kill_tree(proc)  # a child that failed or hung goes the same way
        log.close()


def _interrupted(traces: Sequence[Trace], batch: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in traces:
        if len(t.batches) > batch:
            counts[t.area] = counts.get(t.area, 0) + 1
    return counts


__all__ = [
    "KILL_POINTS",
    "Expected",
    "FaultCheckFailed",
    "FaultHarnessError",
    "FaultRun",
    "Kill",
    "Problem",
    "KillRecord",
    "check_sink",
    "compare_final",
    "kill_tree",
    "plan_kills",
    "reachable_after",
    "read_sink",
    "run_with_kills",
]
