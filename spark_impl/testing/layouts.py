"""The layout test's Spark of its own (properties/test_layouts.py; spec/traces.md TR-18).

``LayoutRuns`` starts ``python -m spark_impl.testing.layout_child WORKDIR``, which answers, for each layout of
``WORKDIR/layouts.json`` in turn (a name, ``SparkEngine`` settings, and a traces file of
``Trace.dumps`` lines), every trace with a ``SparkEngine`` of those settings, and writes the
answers to ``WORKDIR/<name>.answers.pkl`` (written whole, then renamed) with the run's seconds.
A refusal crosses as a ``Refusal`` (its type's full name and its message), not as the exception.

Why a process: the layout settings are set on a session while its queries start, and a run in
the suites' own process would overlap other tests' queries, which would then start with them.
``LayoutRuns`` starts the child at nice 19, so it takes the CPU the serial Spark tests leave idle.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.outputs import Output
from harness.traces import Trace
from spark_impl.testing.faults import ROOT, child_env

LAYOUTS_FILE = "layouts.json"
LOG_FILE = "child.log"


@dataclass(frozen=True)
class Refusal:
    """An exception as the child saw it: what two answers' refusals are compared by."""

    type_name: str
    message: str

    @classmethod
    def of(cls, error: BaseException) -> Refusal:
        return cls(f"{type(error).__module__}.{type(error).__qualname__}", str(error))


@dataclass(frozen=True)
class LayoutAnswers:
    answers: list[Output | Refusal]
    seconds: float


def answers_path(work: Path, name: str) -> Path:
    return work / f"{name}.answers.pkl"


class LayoutRuns:
    """One child answering ``traces`` under each layout (name -> SparkEngine settings and the
    traces to send), started now; ``answers(name)`` waits for that layout's answers."""

    def __init__(self, work: Path, layouts: Mapping[str, tuple[Mapping[str, Any], Sequence[Trace]]]) -> None:
        self.work = work
        plan = []
        for name, (settings, traces) in layouts.items():
            path = work / f"{name}.traces.jsonl"
            path.write_text("".join(t.dumps() + "\n" for t in traces), encoding="utf-8")
            plan.append({"name": name, "settings": dict(settings), "traces": path.name})
        (work / LAYOUTS_FILE).write_text(json.dumps(plan), encoding="utf-8")
        self._log = open(work / LOG_FILE, "wb")  # noqa: SIM115 - closed when the child has ended
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spark_impl.testing.layout_child", str(work)],
            cwd=ROOT,
            env=child_env(work),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: os.nice(19),
        )

    def answers(self, name: str, timeout: float = 1800.0) -> LayoutAnswers:
        """The layout's answers, once the child has written them; raises with the child's log
        when it ended without them or took longer than ``timeout``."""
        path, deadline = answers_path(self.work, name), time.monotonic() + timeout
        while not path.exists():
            if self.proc.poll() is not None and not path.exists():
                raise RuntimeError(
                    f"the layout child ended ({self.proc.returncode}) without {name}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"the layout child gave no answers for {name} in {timeout:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.2)
        with open(path, "rb") as f:
            answers: LayoutAnswers = pickle.load(f)
        return answers

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def log_tail(self, lines: int = 40) -> str:
        text = (self.work / LOG_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])
