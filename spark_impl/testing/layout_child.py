"""The child process of ``spark_impl.testing.layouts.LayoutRuns`` (the layout test, TR-18):
``python -m spark_impl.testing.layout_child WORKDIR`` answers each layout of
``WORKDIR/layouts.json`` in turn and writes its answers beside it."""

from __future__ import annotations

import json
import os
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.traces import Trace
from spark_impl.testing.layouts import LAYOUTS_FILE, LayoutAnswers, Refusal, answers_path


def main(argv: Sequence[str]) -> int:
    from spark_impl.engine import SparkEngine

    work = Path(argv[0])
    for layout in json.loads((work / LAYOUTS_FILE).read_text(encoding="utf-8")):
        lines = (work / layout["traces"]).read_text(encoding="utf-8").splitlines()
        traces = [Trace.from_json(json.loads(line)) for line in lines]
        engine = SparkEngine(**layout["settings"])
        got = engine.run(traces)
        answers = [Refusal.of(a) if isinstance(a, BaseException) else a for a in got]
        done = LayoutAnswers(answers, round(engine.last_run_seconds or 0.0, 1))
        path = answers_path(work, layout["name"])
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(done, f)
        os.replace(tmp, path)  # the parent never reads a half-written file
        print(f"{layout['name']}: {len(traces)} traces in {done.seconds} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
