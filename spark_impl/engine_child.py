"""A ``SparkEngine`` in a process of its own, answering named runs of traces.

``EngineChild`` starts ``python -m spark_impl.engine_child_main WORKDIR``, which answers,
for each run of ``WORKDIR/runs.json`` in turn (a name, ``SparkEngine`` settings, and a traces file
of ``Trace.dumps`` lines), every trace with a ``SparkEngine`` of those settings, and writes the
answers to ``WORKDIR/<name>.answers.pkl`` (written whole, then renamed) with the run's seconds.
A refusal crosses as a ``Refusal`` (its type's full name and its message), not as the exception.

Who uses it, and why a process:

- the layout test (properties/test_layouts.py, spec/traces.md TR-18): the layout settings are set
  on a session while its queries start, and a run in the suites' own process would overlap other
  tests' queries, which would then start with them. It runs at nice 19, so it takes the CPU the
  serial Spark tests leave idle, in the kill tests' children's environment
  (``spark_impl.testing.faults.child_env``: Spark's runners started fresh);
- the suites' pre-run beside the oracle's tests (``SparkEngine.run_apart``): a query's driver
  runs Python of its own in the process that started it (the sink step of every micro-batch),
  and in the suites' process that Python waits for the oracle's tests to let go of the
  interpreter lock, so Spark sat idle a third of the time. It runs at the suites' priority and
  keeps their environment (the warm runners of ``warm_python`` included).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.outputs import Output
from harness.traces import InvalidConfig, Trace

ROOT = Path(__file__).resolve().parents[1]  # the tree the child imports the operators from

RUNS_FILE = "runs.json"
LOG_FILE = "child.log"


@dataclass(frozen=True)
class Refusal:
    """An exception as the child saw it: what two answers' refusals are compared by."""

    type_name: str
    message: str

    @classmethod
    def of(cls, error: BaseException) -> Refusal:
        return cls(f"{type(error).__module__}.{type(error).__qualname__}", str(error))

    def error(self) -> Exception:
        """The exception again: ``InvalidConfig`` as itself (TR-6's answer), any other as a
        RuntimeError naming its type."""
        if self.type_name == f"{InvalidConfig.__module__}.{InvalidConfig.__qualname__}":
            return InvalidConfig(self.message)
        return RuntimeError(f"{self.type_name}: {self.message}")


@dataclass(frozen=True)
class ChildAnswers:
    answers: list[Output | Refusal]
    seconds: float
    queries: list[str]  # SparkEngine.last_run_queries of the run


def answers_path(work: Path, name: str) -> Path:
    return work / f"{name}.answers.pkl"


class EngineChild:
    """One child answering each named run (name -> SparkEngine settings and the traces to send)
    in turn, started now; ``answers(name)`` waits for that run's answers. ``niceness``: the
    child's priority; ``env``: its environment (default: the caller's), with this tree first on
    ``PYTHONPATH`` either way."""

    def __init__(
        self,
        work: Path,
        runs: Mapping[str, tuple[Mapping[str, Any], Sequence[Trace]]],
        niceness: int = 19,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.work = work
        plan = []
        for name, (settings, traces) in runs.items():
            path = work / f"{name}.traces.jsonl"
            path.write_text("".join(t.dumps() + "\n" for t in traces), encoding="utf-8")
            plan.append({"name": name, "settings": dict(settings), "traces": path.name})
        (work / RUNS_FILE).write_text(json.dumps(plan), encoding="utf-8")
        env = dict(os.environ if env is None else env)
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if paths[:1] != [str(ROOT)]:  # faults.child_env puts it first already
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])
        self._log = open(work / LOG_FILE, "wb")  # noqa: SIM115 - closed when the child has ended
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spark_impl.engine_child_main", str(work)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=(lambda: os.nice(niceness)) if niceness else None,
        )

    def answers(self, name: str, timeout: float = 1800.0) -> ChildAnswers:
        """The run's answers, once the child has written them; raises with the child's log
        when it ended without them or took longer than ``timeout``."""
        path, deadline = answers_path(self.work, name), time.monotonic() + timeout
        while not path.exists():
            if self.proc.poll() is not None and not path.exists():
                raise RuntimeError(
                    f"the engine child ended ({self.proc.returncode}) without {name}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"the engine child gave no answers for {name} in {timeout:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.2)
        with open(path, "rb") as f:
            answers: ChildAnswers = pickle.load(f)
        return answers

    def stop(self) -> None:
        """Ends the child, with its Spark JVM and Python workers (its session's process group)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()

    def log_tail(self, lines: int = 40) -> str:
        text = (self.work / LOG_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])
