"""How every operator spreads its work over tasks and over cores, on the user's path.

Every operator of bench/workload.py (its rows, its ``foreach_batch`` writing to the noop sink,
its pinned native counterpart), at 8 shuffle partitions and Spark's default Arrow chunking:

1. shape: one run of ours and one of native at local[2] with Spark's event log on. Per
   stateful stage of the query (bench/scaleout.py reads the log: a stage holding a state store
   RDD, its tasks' shuffle records read), the busiest task's records over the fair share
   (the stage's records / its tasks), in the worst micro-batch and summed over the run. The
   work is spread well when the busiest task reads at most twice its fair share.
2. cores: ours and native at local[1] and at local[2], native first, ``--rounds`` times, each
   run a fresh subprocess. The gain from the second core per engine is its median rate at 2
   over its median rate at 1, minus 1; an operator grows with the cluster as well as Spark's own
   aggregation when its gain is at least 0.8x native's.

It prints one line per operator and part, writes ``--json`` and, with ``--page``, the Markdown
page (docs/spread.md). A benchmark prints figures; it asserts nothing.

    .tox/bench/bin/python bench/spread.py --page docs/spread.md --json docs/spread.json   # ~45 min
    .tox/bench/bin/python bench/spread.py --only late_data --rounds 1 --events 20000     # quick
    .tox/bench/bin/python bench/spread.py --parts shape                                  # no timings
    .tox/bench/bin/python bench/spread.py --render a.json b.json --page docs/spread.md    # runs merged
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import measure  # noqa: E402 - bench/measure.py: the machine's load
import scaleout  # noqa: E402 - bench/scaleout.py: the event log's stateful stages
import workload  # noqa: E402 - bench/workload.py: the operators, their counterparts, the runs

PARTS = ("shape", "cores")
MASTERS = ("local[1]", "local[2]")


def spec_for(
    area: str, engine: str, master: str, args: argparse.Namespace, work: str, seed: int
) -> dict[str, Any]:
    return {
        "area": area, "engine": engine, "work": work, "master": master, "partitions": args.partitions,
        "events": args.events, "batches": args.batches, "tiny": 0, "keys": args.keys, "seed": seed,
    }  # fmt: skip


def over_fair_share(records: list[int], partitions: int) -> float:
    """The busiest task's records over the fair share: the records over the shuffle partitions.
    Not over the stage's tasks: a stage may hold more (a union with a one-partition input adds a
    task that reads no shuffle record), and those would lower the fair share."""
    return max(records) / (sum(records) / partitions)


def stage_figures(stages: list[dict[str, Any]], partitions: int) -> list[dict[str, Any]]:
    """Per stateful stage that read shuffle records: its operators, and its busiest task over the
    fair share. (A stage that read none recomputed nothing: a later job of the micro-batch whose
    lineage names the state store but whose input was already computed.)"""
    figures = []
    for s in stages:
        batches = s["records_by_batch"]
        if not batches:
            continue
        summed = [sum(b[p] for b in batches) for p in range(len(batches[0]))]
        figures.append({
            "ops": s["ops"],
            "tasks": s["tasks_per_batch"],
            "worst_batch": max(over_fair_share(b, partitions) for b in batches),
            "summed": over_fair_share(summed, partitions),
            "records_by_batch": batches,
        })  # fmt: skip
    return figures


def shape(area: str, args: argparse.Namespace, base: str) -> dict[str, Any]:
    """One event-logged run of each engine at local[2]."""
    row: dict[str, Any] = {}
    for engine in ("native", "ours"):
        work = tempfile.mkdtemp(prefix=f"{area}-shape-{engine}-", dir=base)
        spec = spec_for(area, engine, "local[2]", args, work, 0) | {"event_log": os.path.join(work, "log")}
        os.makedirs(spec["event_log"])
        result = scaleout.script_result(workload.__file__, spec, workload.RESULT, f"{area} {engine} shape")
        row[engine] = stage_figures(result["stages"], args.partitions)
        shutil.rmtree(work, ignore_errors=True)
    print(f"{area:26} shape  ours {describe(row['ours'])} | native {describe(row['native'])}", flush=True)
    return row


def over_fair(stage: dict[str, Any]) -> str:
    """The busiest task over the fair share, worst batch (summed over the run)."""
    return f"{stage['worst_batch']:.2f}x ({stage['summed']:.2f}x)"


def describe(stages: list[dict[str, Any]]) -> str:
    return "; ".join(over_fair(s) for s in stages) or "no stateful stage"


def cores(area: str, args: argparse.Namespace, base: str) -> dict[str, Any]:
    """Ours and native at each master, taking turns; the gain from the second core."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        e: {m: [] for m in MASTERS} for e in ("native", "ours")
    }
    for r in range(args.rounds):
        for master in MASTERS:
            for engine in runs:
                work = tempfile.mkdtemp(prefix=f"{area}-{engine}-{r}-", dir=base)
                runs[engine][master].append(workload.run(spec_for(area, engine, master, args, work, r)))
                shutil.rmtree(work, ignore_errors=True)
    row: dict[str, Any] = {"runs": runs}
    for engine, by_master in runs.items():
        rate = {m: statistics.median(x["warm_events_per_s"] for x in rs) for m, rs in by_master.items()}
        row[engine] = {"events_per_s": rate, "gain": rate["local[2]"] / rate["local[1]"] - 1}
    o, n = row["ours"], row["native"]
    row["gain_ratio"] = o["gain"] / n["gain"] if n["gain"] > 0 else None
    ratio = "n/a (native gained nothing)" if row["gain_ratio"] is None else f"{row['gain_ratio']:.2f}"
    ours_rates, native_rates = (rates_text(e, ">8,.0f") for e in (o, n))
    print(
        f"{area:26} cores  ours {ours_rates} ev/s ({o['gain']:+.0%}) | native {native_rates} ev/s "
        f"({n['gain']:+.0%}) | gain ratio {ratio}",
        flush=True,
    )
    return row


def rates_text(engine: dict[str, Any], form: str) -> str:
    """An engine's events/s at local[1] -> local[2]."""
    rate = engine["events_per_s"]
    return f"{rate['local[1]']:{form}} -> {rate['local[2]']:{form}}"


def markdown(results: dict[str, Any]) -> str:
    a = results["args"]
    lines = [
        *measure.page_opening("How the Spark operators spread over tasks and cores", results),
        f"The workload of [Benchmarks](benchmarks.md) (bench/workload.py): Spark {results['spark_version']}, "
        f"{a['partitions']} shuffle partitions, Spark's default Arrow chunking, Parquet files, one per "
        f"micro-batch: {a['batches']} micro-batches of {a['events']:,} events (the first is cold), "
        f"{a['keys']:,} keys. Ours is the operator's `foreach_batch` writing to the noop sink; native its "
        "counterpart on that page.",
        "",
        "- **busiest task / fair share**: per stateful stage of the query, in micro-batch order, the "
        "shuffle records the busiest task read over the stage's records divided by the shuffle "
        "partitions, in the worst micro-batch (summed over the run in brackets), from Spark's event "
        "log of one run at local[2]. At most 2x is the goal.",
        f"- **gain**: the median events/s (batches 2..) at local[2] over that at local[1], minus 1, "
        f"over {a['rounds']} round{'s' if a['rounds'] != 1 else ''}, ours and native taking turns; "
        "**gain ratio**: ours over native's (the goal is at least 0.8).",
        "",
        "| operator | size | busiest task / fair share, ours | native's | events/s ours, local[1] -> [2] "
        "| native | gain ours / native | gain ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for area, r in results["operators"].items():
        s, c = r.get("shape"), r.get("cores")
        ours_shape, native_shape = (describe(s["ours"]), describe(s["native"])) if s else ("-", "-")
        if c:
            o, n = c["ours"], c["native"]
            rates = [rates_text(e, ",.0f") for e in (o, n)]
            gains = f"{o['gain']:+.0%} / {n['gain']:+.0%}"
            ratio = "-" if c["gain_ratio"] is None else f"{c['gain_ratio']:.2f}"
        else:
            rates, gains, ratio = ["-", "-"], "-", "-"
        cells = [area, r["size"], ours_shape, native_shape, *rates, gains, ratio]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Session windows and exactly-once aggregation have two stateful stages (the order stage, the "
        "key stage) before the sink; every other operator has one. Read the gains with the load "
        "average above in mind: a second core that other work takes shows as no gain for both engines.",
        "",
    ]
    return "\n".join(lines)


def merged(paths: list[str]) -> dict[str, Any]:
    """Several runs' figures as one: per operator each part from the last run that has it."""
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append(json.load(f))
    result = dict(runs[0], commands=[r["command"] for r in runs], operators={})
    result["wall_seconds"] = sum(r["wall_seconds"] for r in runs)
    # the first run's load: give the run whose timings count first (the others measure counts)
    result["machine"] = runs[0]["machine"]
    for run in runs:
        for area, row in run["operators"].items():
            result["operators"].setdefault(area, {}).update(row)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", help="operators (spec areas) to run; default: all")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--events", type=int, default=100_000, help="events per micro-batch")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=4, help="micro-batches per run (the first is cold)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per engine and master, taking turns")
    parser.add_argument("--partitions", type=int, default=8, help="spark.sql.shuffle.partitions")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--page", help="write the Markdown page here")
    parser.add_argument(
        "--render",
        nargs="+",
        metavar="JSON",
        help="write --page (and --json) from these runs' figures (a later run's operator and part win)",
    )
    args = parser.parse_args()
    if args.render:
        results = merged(args.render)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
        with open(args.page, "w") as f:
            f.write(markdown(results))
        return
    import pyspark

    started, before = time.time(), measure.machine()
    areas = args.only or list(workload.operators())
    base = tempfile.mkdtemp(prefix="spread-")
    rows: dict[str, Any] = {}
    try:
        for area in areas:
            rows[area] = {"size": workload.operators()[area].size(args.keys)}
            if "shape" in args.parts:
                rows[area]["shape"] = shape(area, args, base)
            if "cores" in args.parts:
                rows[area]["cores"] = cores(area, args, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results = {
        "command": "python bench/spread.py " + " ".join(sys.argv[1:]),
        "args": vars(args),
        "spark_version": pyspark.__version__,
        "machine": {"before": before, "after": measure.machine()},
        "wall_seconds": time.time() - started,
        "operators": rows,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.page:
        with open(args.page, "w") as f:
            f.write(markdown(results))


if __name__ == "__main__":
    main()
