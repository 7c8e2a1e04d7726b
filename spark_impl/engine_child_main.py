"""The child process of ``spark_impl.engine_child.EngineChild``:
``python -m spark_impl.engine_child_main WORKDIR`` answers each run of
``WORKDIR/runs.json`` in turn and writes its answers beside it."""

from __future__ import annotations

import json
import os
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.traces import Trace
from spark_impl.engine_child import RUNS_FILE, ChildAnswers, Refusal, answers_path


def main(argv: Sequence[str]) -> int:
    from spark_impl.engine import SparkEngine

    work = Path(argv[0])
    for run in json.loads((work / RUNS_FILE).read_text(encoding="utf-8")):
        lines = (work / run["traces"]).read_text(encoding="utf-8").splitlines()
        traces = [Trace.from_json(json.loads(line)) for line in lines]
        engine = SparkEngine(**run["settings"])
        got = engine.run(traces)
        answers = [Refusal.of(a) if isinstance(a, BaseException) else a for a in got]
        done = ChildAnswers(answers, round(engine.last_run_seconds or 0.0, 1), engine.last_run_queries)
        path = answers_path(work, run["name"])
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(done, f)
        os.replace(tmp, path)  # the parent never reads a half-written file
        print(f"{run['name']}: {len(traces)} traces in {done.seconds} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
