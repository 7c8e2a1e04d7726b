"""One executor of a multi-process Spark killed in the middle of a task (spec/traces.md TR-17).

The parent's side of properties/test_layouts.py's lost-executor run: an ``EngineChild`` whose
Spark runs on ``local-cluster`` (``LOCAL_CLUSTER``: two workers, each executor a JVM of its own
with its own Python workers) answers traces, and ``ExecutorKiller`` watches that child's
process tree. Once a Python worker of an executor is busy (it used CPU in the last moment: a
task is running on it), the killer sends SIGKILL to that executor's JVM and every process under
it. The driver lives on, so the query does not stop: Spark reruns the lost tasks (and any stage
whose shuffle files died with the executor) on the other executor, and the standalone master
starts a new executor in the dead one's place.

Why the busy Python worker and not a moment drawn at random: an executor killed between two
tasks loses only its shuffle files, and the suite wants the case where a stateful task dies half
done. Whether a running task was lost is read back from the driver's log afterwards
(``lost_tasks``: Spark's ``ExecutorLostFailure`` lines), so a kill that missed is a failure of
the run, not a silent pass. Needs psutil (the ``test`` extra).
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the master of the lost-executor run: two workers of one core and 1 GB, as ``tox -e cluster``
LOCAL_CLUSTER = "local-cluster[2,1,1024]"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
#: CPU seconds a Python worker must use within one look for its executor to count as busy
BUSY_CPU_S = 0.01
LOOK_EVERY_S = 0.1
#: Spark's driver logs this for each task that was running on an executor when it was lost
LOST_TASK = re.compile(r"Lost task \S+ in stage \S+ .*ExecutorLostFailure")


@dataclass(frozen=True)
class ExecutorKill:
    pid: int  # the executor's JVM
    processes: int  # it and every process under it
    seconds: float  # from the killer's start to the kill


def lost_executor_env(env: dict[str, str]) -> dict[str, str]:
    """The child's environment: ``env`` with its Spark on ``LOCAL_CLUSTER``."""
    return {**env, "SPARK_MASTER": LOCAL_CLUSTER}


def lost_tasks(log: str) -> int:
    """How many running tasks the driver's log says an executor took with it."""
    return len(LOST_TASK.findall(log))


def _cmdline(p: Any) -> list[str]:
    import psutil

    try:
        return list(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def executors(root_pid: int) -> list[Any]:
    """The executor JVMs among ``root_pid``'s descendants."""
    import psutil

    try:
        below = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p for p in below if EXECUTOR_CLASS in _cmdline(p)]


def _python_cpu(executor: Any) -> dict[int, float]:
    """CPU seconds so far of each Python process under ``executor`` (its daemon and workers)."""
    import psutil

    out = {}
    try:
        below = executor.children(recursive=True)
    except psutil.NoSuchProcess:
        return {}
    for p in below:
        argv = _cmdline(p)
        if not argv or "python" not in os.path.basename(argv[0]):
            continue
        try:
            t = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        out[p.pid] = t.user + t.system
    return out


def kill_executor(executor: Any, timeout: float = 30.0) -> int:
    """SIGKILL to the executor's JVM and every process under it; returns how many once all are gone."""
    import psutil

    try:
        doomed = [executor, *executor.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for p in doomed:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(doomed, timeout=timeout)
    if alive:
        raise RuntimeError(f"{len(alive)} processes of executor {executor.pid} outlived SIGKILL")
    return len(doomed)


class ExecutorKiller:
    """Kills one executor under ``root_pid`` once one of its Python workers is busy, in a thread
    of its own started now; ``until`` names a file whose appearance (the run's answers) ends the
    watch without a kill. ``result()`` waits for it: the kill, or None when none happened."""

    def __init__(self, root_pid: int, until: Path, timeout: float = 1800.0) -> None:
        self._root, self._until, self._timeout = root_pid, until, timeout
        self._kill: ExecutorKill | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._watch, name="executor-killer", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        started = time.monotonic()
        seen: dict[int, float] = {}
        try:
            while not self._until.exists() and time.monotonic() - started < self._timeout:
                for executor in executors(self._root):
                    now = _python_cpu(executor)
                    busy = any(pid in seen and cpu - seen[pid] >= BUSY_CPU_S for pid, cpu in now.items())
                    seen.update(now)
                    if busy:
                        processes = kill_executor(executor)
                        seconds = round(time.monotonic() - started, 1)
                        self._kill = ExecutorKill(executor.pid, processes, seconds)
                        return
                time.sleep(LOOK_EVERY_S)
        except BaseException as e:  # noqa: BLE001 - handed to the test by result()
            self._error = e

    def result(self, timeout: float = 1800.0) -> ExecutorKill | None:
        self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        return self._kill
