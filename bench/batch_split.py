"""Where one micro-batch's time goes: keyed watermarks beside Spark's own aggregation.

The user's path, fixed: Parquet files, one per micro-batch (``maxFilesPerTrigger=1``),
``--events`` events per batch over ``--keys`` uniform keys, ``--partitions`` shuffle
partitions, ``--master`` (default local[2]), Spark's default Arrow chunking, the noop sink,
``Trigger.AvailableNow``. Each engine runs in its own Python subprocess with a fresh session
and Spark's event log on: ``ours-sink`` is ``keyed_watermarks(...).foreach_batch`` (one
stateful stage, the per-stream step in the sink) with a function that writes each batch to
the noop sink, ``ours`` is ``keyed_watermarks(...).output`` (two stateful stages) to the noop
sink, ``native`` is ``groupBy(key).agg(max(ts), count(*))`` in update mode. The engines take
turns ``--rounds`` times.

Per engine, the median over the warm batches (every batch but the first) of each round, then
the median over the rounds, of:

- from the progress report (``durationMs``): query planning, Spark's bookkeeping (offsets,
  the write-ahead log and the commit log) and ``addBatch`` (the jobs), and the whole trigger;
- from the event log, per stage of the batch in stage-id order: its wall time (submission to
  completion) and, summed over its tasks, executor run time; for a stage that runs Python, the
  time Python spent starting its workers up to the first row ("Python init": reading the task's
  command and connecting to the state server), executing the function including Arrow
  conversion ("Python exec"), and the bytes sent to and returned from Python; for a stateful
  stage, the state store's ``time to commit changes`` and its gets and puts.

A stage is named by what it runs: ``read+project`` (the file scan and the projection up to the
first shuffle), an operator scope name for a stateful stage (``transformWithStateInPandas``,
Spark's ``StateStoreSave``), ``other`` else. ``--events 10`` gives the fixed cost of a batch
that carries almost nothing. A benchmark prints figures; it asserts nothing.

    .tox/spark/bin/python bench/batch_split.py                 # 100k events, 3 rounds, ~3 minutes
    .tox/spark/bin/python bench/batch_split.py --events 10     # the fixed cost per batch
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import measure  # noqa: E402 - bench/measure.py, the shared benchmark helpers
import scaleout  # noqa: E402 - bench/scaleout.py: its session and subprocess environment
import workload  # noqa: E402 - bench/workload.py: the noop sink's queries

RESULT = "@@split-result "
ENGINES = ("ours-sink", "ours", "native")
PYTHON_METRICS = {
    "init_ms": "time to initialize Python workers",
    "exec_ms": "time to execute Python code",
    "to_python_bytes": "data sent to Python workers",
    "from_python_bytes": "data returned from Python workers",
    "commit_ms": "time to commit changes",
}
STATE_RDDS = ("StateStoreRDD", "ReadStateStoreRDD")


# ---- the child: one engine, one session ------------------------------------------------


def write_batches(folder: str, batches: int, events: int, keys: int, seed: int) -> None:
    """One Parquet file per micro-batch: uniform keys, event time rising 1 ms an event with
    +-500 ms of disorder; file times one second apart, so the source takes them in order."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    for b in range(batches):
        ts = b * events + np.arange(events) + rng.integers(-500, 500, events)
        names = np.char.add("k", rng.integers(0, keys, events).astype(str))
        path = os.path.join(folder, f"batch-{b:05d}.parquet")
        pd.DataFrame({"key": names, "ts": ts.astype("int64")}).to_parquet(path)
        os.utime(path, (1_000_000 + b, 1_000_000 + b))


def child(spec: dict[str, Any]) -> None:
    from pyspark.sql import functions as F

    work = spec["work"]
    log = os.path.join(work, "events")
    os.makedirs(log)
    spark = scaleout.start_session(spec["master"], spec["partitions"], event_log=log)
    spark.sparkContext.setLogLevel("ERROR")
    source = os.path.join(work, "source")
    os.makedirs(source)
    write_batches(source, spec["batches"], spec["events"], spec["keys"], spec["seed"])
    df = spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).parquet(source)
    checkpoint = os.path.join(work, "checkpoint")
    if spec["engine"] in ("ours", "ours-sink"):
        import warnings

        from spark_impl.keyed_watermarks import keyed_watermarks

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the no-clock and no-seq advice: this workload has neither
            kw = keyed_watermarks(
                df, key_col="key", event_time_col="ts", bounded_delay_ms=1000, idle_timeout_ms=60_000
            )
        if spec["engine"] == "ours-sink":
            query = kw.foreach_batch(workload.noop_batch, checkpoint, trigger={"availableNow": True})
        else:
            query = workload.to_noop(kw.output, "append", checkpoint)
    else:
        query = workload.to_noop(
            df.groupBy("key").agg(F.max("ts").alias("max_ts"), F.count("*").alias("n")), "update", checkpoint
        )
    workload.finish(query)
    progress = [
        {"batch": p.batchId, "rows": p.numInputRows, "duration": dict(p.durationMs),
         "state": [dict(o.customMetrics) for o in p.stateOperators]}
        for p in query.recentProgress
    ]  # fmt: skip
    spark.stop()
    files = [os.path.join(log, f) for f in os.listdir(log) if not f.startswith(".")]
    print(RESULT + json.dumps({"progress": progress, "stages": stages_of(files[0])}), flush=True)


def stages_of(log: str) -> dict[int, list[dict[str, Any]]]:
    """Per micro-batch, its stages in stage-id order with the figures of the module docstring."""
    submitted: dict[int, dict[str, Any]] = {}
    run_ms: dict[int, int] = collections.defaultdict(int)
    per_batch: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    for kind, event in measure.spark_events(log):
        if kind == "SparkListenerStageSubmitted":
            info, props = event["Stage Info"], event.get("Properties") or {}
            if "streaming.sql.batchId" in props:
                submitted[info["Stage ID"]] = {"batch": int(props["streaming.sql.batchId"])}
        elif kind == "SparkListenerTaskEnd" and event["Task End Reason"]["Reason"] == "Success":
            run_ms[event["Stage ID"]] += event["Task Metrics"]["Executor Run Time"]
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            if info["Stage ID"] not in submitted:
                continue
            values = {a["Name"]: a.get("Value") for a in info.get("Accumulables", [])}
            stage = {
                "stage": info["Stage ID"], "name": stage_name(info["RDD Info"]),
                "tasks": info["Number of Tasks"],
                "wall_ms": info["Completion Time"] - info["Submission Time"],
                "run_ms": run_ms[info["Stage ID"]],
            }  # fmt: skip
            stage.update({k: int(values[m]) for k, m in PYTHON_METRICS.items() if m in values})
            per_batch[submitted[info["Stage ID"]]["batch"]].append(stage)
    return {b: sorted(s, key=lambda x: x["stage"]) for b, s in per_batch.items()}


def stage_name(rdds: Sequence[dict[str, Any]]) -> str:
    """What a stage runs: its stateful operators' scope names, else whether it reads the files."""
    scopes = sorted(
        {json.loads(r["Scope"])["name"] for r in rdds if r["Name"] in STATE_RDDS and r.get("Scope")}
    )
    if scopes:
        return "+".join("transformWithStateInPandas" if "TransformWithState" in n else n for n in scopes)
    if any(r["Name"] == "FileScanRDD" for r in rdds):
        return "read+project"
    return "other"


# ---- the parent ------------------------------------------------------------------------------


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    # classic Spark (the event log needs it), Spark's default Arrow chunks
    return scaleout.script_result(__file__, spec, RESULT, spec["engine"])


def warm_figures(result: dict[str, Any]) -> dict[str, Any]:
    """Medians over the warm batches of one run: progress durations and per stage position."""
    warm = [p for p in result["progress"] if p["batch"] >= 1 and p["rows"]]
    duration = {
        "planning": [p["duration"].get("queryPlanning", 0) for p in warm],
        "bookkeeping": [
            sum(p["duration"].get(k, 0) for k in ("latestOffset", "getBatch", "walCommit", "commitOffsets"))
            for p in warm
        ],
        "addBatch": [p["duration"].get("addBatch", 0) for p in warm],
        "trigger": [p["duration"]["triggerExecution"] for p in warm],
        "state gets": [sum(o.get("rocksdbGetCount", 0) for o in p["state"]) for p in warm],
        "state puts": [sum(o.get("rocksdbPutCount", 0) for o in p["state"]) for p in warm],
    }
    stages: dict[int, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    names: dict[int, str] = {}
    for p in warm:
        for i, s in enumerate(result["stages"].get(str(p["batch"]), [])):
            names[i] = f"{s['name']} ({s['tasks']} tasks)"
            for k, v in s.items():
                if k not in ("stage", "name", "tasks"):
                    stages[i][k].append(v)
    return {
        "duration": {k: statistics.median(v) for k, v in duration.items() if v},
        "stages": [
            {"name": names[i], **{k: statistics.median(v) for k, v in stages[i].items()}}
            for i in sorted(stages)
        ],
    }


def median_of_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    duration = {k: statistics.median(r["duration"][k] for r in rounds) for k in rounds[0]["duration"]}
    depth = min(len(r["stages"]) for r in rounds)
    stages = []
    for i in range(depth):
        keys = set.intersection(*(set(r["stages"][i]) for r in rounds)) - {"name"}
        stages.append(
            {
                "name": rounds[0]["stages"][i]["name"],
                **{k: statistics.median(r["stages"][i][k] for r in rounds) for k in keys},
            }
        )
    return {"duration": duration, "stages": stages}


def print_engine(name: str, fig: dict[str, Any]) -> None:
    d = fig["duration"]
    print(f"\n{name}: trigger {d['trigger']:.0f} ms = planning {d['planning']:.0f} + bookkeeping "
          f"{d['bookkeeping']:.0f} + addBatch {d['addBatch']:.0f} (+ the rest); state gets "
          f"{d['state gets']:.0f}, puts {d['state puts']:.0f}")  # fmt: skip
    print(f"  {'stage':44} {'wall':>6} {'tasks':>6} {'py init':>8} {'py exec':>8} {'commit':>7} "
          f"{'to py':>8} {'from py':>8}")  # fmt: skip
    for s in fig["stages"]:
        ms = {
            k: f"{s[k]:.0f}" if k in s else "-"
            for k in ("wall_ms", "run_ms", "init_ms", "exec_ms", "commit_ms")
        }
        mb = {k: f"{s[k] / 1e6:.1f}MB" if k in s else "-" for k in ("to_python_bytes", "from_python_bytes")}
        print(f"  {s['name']:44} {ms['wall_ms']:>6} {ms['run_ms']:>6} {ms['init_ms']:>8} {ms['exec_ms']:>8} "
              f"{ms['commit_ms']:>7} {mb['to_python_bytes']:>8} {mb['from_python_bytes']:>8}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--events", type=int, default=100_000, help="events per micro-batch")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=5, help="micro-batches per run (the first is cold)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per engine, taking turns")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=8, help="spark.sql.shuffle.partitions")
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    figures: dict[str, list[dict[str, Any]]] = {e: [] for e in args.engines}
    base = tempfile.mkdtemp(prefix="batch-split-")
    try:
        for r in range(args.rounds):
            for engine in args.engines:
                work = os.path.join(base, f"{engine}-{r}")
                os.makedirs(work)
                spec = {
                    "engine": engine, "work": work, "master": args.master, "partitions": args.partitions,
                    "batches": args.batches, "events": args.events, "keys": args.keys, "seed": r,
                }  # fmt: skip
                figures[engine].append(warm_figures(run_child(spec)))
                print(f"round {r + 1}/{args.rounds} {engine}: trigger "
                      f"{figures[engine][-1]['duration']['trigger']:.0f} ms", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)
    summary = {e: median_of_rounds(f) for e, f in figures.items()}
    print(
        f"\n{args.events:,} events per batch over {args.keys:,} keys, {args.master}, {args.partitions} "
        f"shuffle partitions; medians of warm batches, then of {args.rounds} rounds; times in ms, "
        "task time summed over the stage's tasks"
    )
    for engine, fig in summary.items():
        print_engine(engine, fig)
    if "native" in summary:
        native = summary["native"]["duration"]["trigger"]
        print()
        for engine in (e for e in summary if e != "native"):
            ours = summary[engine]["duration"]["trigger"]
            print(f"{engine} / native, trigger time: {ours / native:.2f} (rate {native / ours:.2f}x native)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "summary": summary, "rounds": figures}, f, indent=1)


if __name__ == "__main__":
    main()
