"""The throughput page: every Spark operator beside its pinned native counterpart, on the user's path.

One command measures and writes docs/benchmarks.json, docs/benchmarks.md and
docs/batch_size.png (``tox -e bench`` runs it after the accuracy reproduction):

    python bench/suite.py            # the committed figures (about 35 minutes on 2 cores)
    python bench/suite.py --rounds 1 --events 10000 --sizes 1000 10000 --out /tmp/bench  # quick
    python bench/suite.py --render   # rewrite the .md and .png from the .json

The workload and the queries are bench/workload.py's: Parquet files, one per micro-batch,
100,000 events per batch over 10,000 keys, local[2], 8 shuffle partitions, Spark's default
Arrow chunking, the noop sink; ours and native take turns in fresh subprocesses. Then the
batch-size sweep: keyed watermarks and ``groupBy(key).agg(max, count)`` at each of
``--sizes`` events per micro-batch, one run each, which shows where the fixed cost of a
micro-batch stops mattering. A benchmark prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import measure  # noqa: E402 - bench/measure.py: the machine's load
import workload  # noqa: E402 - bench/workload.py: the operators, their counterparts, the runs

DOCS = os.path.join(os.path.dirname(HERE), "docs")
SIZES = (1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000)


def markdown(results: dict[str, Any]) -> str:
    s = results["settings"]
    lines = [
        *measure.page_opening("Throughput of the Spark operators", results),
        f"**The workload** (bench/workload.py): Spark {results['spark_version']}, {s['master']}, "
        f"{s['partitions']} shuffle partitions, Spark's default Arrow chunking, RocksDB state store. "
        f"Each query reads Parquet files, one per micro-batch (`maxFilesPerTrigger=1`), "
        f"`Trigger.AvailableNow`: {s['batches']} micro-batches of {s['events']:,} events over "
        f"{s['keys']:,} keys (the first is cold), then {s['tiny']} micro-batches of "
        f"{workload.TINY_EVENTS} events. Event time rises 1 ms per event with up to 500 ms of "
        "disorder either way; every watermark delay is 1 s.",
        "",
        "- **ours**: the operator's `foreach_batch`, writing each micro-batch's rows to the noop sink. "
        "Every operator runs its per-stream step in the sink there: one stateful Python stage, "
        "two for session windows (its order stage) and exactly-once aggregation (its key stage), "
        "one fewer than its `output`.",
        "- **native**: the counterpart in the table, the closest Spark built-in, to the noop sink.",
        "- **floor**: the operator's shape with none of its work (`workload.floor_query`): as many "
        "`transformWithStateInPandas` stages, grouped into as many buckets by a hash of the same unit "
        "columns, each under its spread label as the operators' are, one ValueState each, handing "
        "every input row back in the operator's output columns and types, then the sink step's two "
        "reads. What any operator built this way takes on this path: the fixed cost of its stages "
        "and every row's trip through Python and back.",
        "- **events/s**: the events of batches 2.. over their trigger times; **ms/batch**: the median "
        "trigger time of those batches; **fixed cost**: the median trigger time of the "
        f"{workload.TINY_EVENTS}-event batches, what a micro-batch costs on a running query before any "
        "work; **ratio**: the median over the rounds of ours/native (and floor/native) events/s.",
        f"- native, ours and the floor take turns, each run a fresh subprocess and session; medians "
        f"of {s['rounds']} rounds.",
        "",
        "| operator | size | native counterpart | ours events/s | native events/s | ratio | floor events/s | "
        "floor ratio | ms/batch ours / floor / native | fixed cost ms ours / floor / native |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["operators"]:
        o, n, f = r["ours"], r["native"], r["floor"]
        lines.append(
            f"| {r['area']} | {r['size']} | {r['native_label']} | {o['warm_events_per_s']:,.0f} | "
            f"{n['warm_events_per_s']:,.0f} | {r['ratio']:.2f}x | {f['warm_events_per_s']:,.0f} | "
            f"{r['floor_ratio']:.2f}x | {o['batch_ms']:,.0f} / {f['batch_ms']:,.0f} / {n['batch_ms']:,.0f} | "
            f"{o['fixed_ms']:,.0f} / {f['fixed_ms']:,.0f} / {n['fixed_ms']:,.0f} |"
        )
    lines += [
        "",
        "What bounds ours ([where a micro-batch's time goes]"
        "(architecture.md#where-a-micro-batchs-time-goes)):",
        "",
        "- the fixed cost of a micro-batch (the last column): every stateful Python stage pays Python "
        "start-up, state-variable registration and a state store commit in every task of every "
        "micro-batch, where Spark's own aggregation pays its commit alone;",
        "- the cost of each event: its columns go to Python as Arrow and its answer rows come back, "
        "where Spark's aggregation folds it in the JVM (the batch-size sweep below).",
        "",
        *bound_markdown(results["operators"]),
    ]
    if results.get("batch_sizes"):
        lines += ["", *batch_size_markdown(results)]
    return "\n".join(lines) + "\n"


def batch_size_markdown(results: dict[str, Any]) -> list[str]:
    rows = results["batch_sizes"]
    lines = [
        "## Events per second against the micro-batch size",
        "",
        f"Keyed watermarks (`foreach_batch`) and `groupBy(key).agg(max, count)` at each batch size, "
        f"{results['settings']['keys']:,} keys, the same settings, one run each (8 micro-batches per run, "
        "fewer where that would pass 200,000 events, at least 3: 2 warm). A micro-batch costs a fixed "
        "time before any work; the larger the batches a trigger interval lets through, the less that "
        "time weighs.",
        "",
        "![events/s against micro-batch size](batch_size.png)",
        "",
        *per_event_cost(rows),
        "| events per batch | ours events/s | ours ms/batch | native events/s | native ms/batch | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        o, n = r["ours"], r["native"]
        lines.append(
            f"| {r['events']:,} | {o['warm_events_per_s']:,.0f} | {o['batch_ms']:,.0f} | "
            f"{n['warm_events_per_s']:,.0f} | {n['batch_ms']:,.0f} | "
            f"{o['warm_events_per_s'] / n['warm_events_per_s']:.2f}x |"
        )
    return lines


def bound_markdown(operators: list[dict[str, Any]]) -> list[str]:
    """Per operator, whether the floor allows 0.5x native, and how close ours is to its floor."""
    below = sorted((r["floor_ratio"], r["area"]) for r in operators if round(r["floor_ratio"], 2) < 0.5)
    lines = []
    if below:
        names = ", ".join(f"{a} {b:.2f}x" for b, a in below)
        lines += [
            f"The floor itself stays under 0.5x native for {len(below)} of {len(operators)} operators "
            f"here ({names}): at this workload (100,000 events per batch, 8 shuffle partitions, 2 "
            "cores) no operator of that shape on `transformWithStateInPandas` reaches half of Spark's "
            "aggregation, whatever its own work costs; fewer shuffle partitions or larger batches "
            "(below) are the levers.",
            "",
        ]
    share = {r["area"]: r["ours"]["warm_events_per_s"] / r["floor"]["warm_events_per_s"] for r in operators}
    near = ", ".join(f"{a} {x:.2f}" for a, x in sorted(share.items(), key=lambda item: -item[1]))
    lines += [
        f"Ours over its floor (events/s, the medians above; 1 would be an operator whose own work costs "
        f"nothing): {near}. The gap is the operator's own work: its Python per event, its state reads "
        "and writes, its extra state variables and the narrow step on the driver. The floor hands every "
        "input row back, so an operator that answers fewer rows than it reads can pass 1, and one that "
        "answers more (a join's pairs) stays further below it.",
    ]
    return lines


def per_event_cost(rows: list[dict[str, Any]]) -> list[str]:
    """What one more event costs each engine: the slope of ms/batch over the two largest sizes."""
    if len(rows) < 2:
        return []
    a, b = rows[-2], rows[-1]

    def slope(engine: str) -> str:
        cost = (b[engine]["batch_ms"] - a[engine]["batch_ms"]) * 1000 / (b["events"] - a["events"])
        # one run per size: a slope under 0.1 µs is within the noise of two batch times
        return f"{cost:.1f} µs" if cost >= 0.1 else "under 0.1 µs"

    return [
        f"Between {a['events']:,} and {b['events']:,} events per batch, one more event costs ours "
        f"{slope('ours')} and native {slope('native')} of batch time: at large batches the "
        "per-event work (Arrow conversion to Python and back, and the operator's Python), not the fixed "
        "cost, sets the ratio.",
        "",
    ]


def plot(results: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["batch_sizes"]
    sizes = [r["events"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(
        sizes, [r["ours"]["warm_events_per_s"] for r in rows], "o-", label="keyed_watermarks (foreach_batch)"
    )
    ax.plot(
        sizes, [r["native"]["warm_events_per_s"] for r in rows], "s-", color="gray",
        label="groupBy(key).agg(max, count), update",
    )  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events per micro-batch")
    ax.set_ylabel("events per second (batches 2..)")
    s = results["settings"]
    ax.set_title(
        f"{s['keys']:,} keys, {s['master']}, {s['partitions']} shuffle partitions, Parquet source",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(results: dict[str, Any], out: str) -> None:
    with open(os.path.join(out, "benchmarks.md"), "w") as f:
        f.write(markdown(results))
    if results.get("batch_sizes"):
        plot(results, os.path.join(out, "batch_size.png"))


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    workload.add_workload_arguments(parser)
    parser.add_argument(
        "--sizes", type=int, nargs="*", default=list(SIZES), help="the batch-size sweep; none skips it"
    )
    parser.add_argument("--out", default=DOCS, help="where benchmarks.{json,md} and batch_size.png go")
    parser.add_argument("--render", action="store_true", help="only rewrite the .md and .png from the .json")
    args = parser.parse_args()
    if args.render:
        with open(os.path.join(args.out, "benchmarks.json")) as f:
            write_report(json.load(f), args.out)
        return
    started = time.perf_counter()
    info = {"before": measure.machine()}
    base = tempfile.mkdtemp(prefix="suite-")
    try:
        operators = [workload.compare(area, args, base) for area in (args.only or workload.operators())]
        sizes = workload.batch_sizes(args, base, args.sizes)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    info["after"] = measure.machine()
    settings = {
        k: getattr(args, k) for k in ("events", "keys", "batches", "tiny", "rounds", "master", "partitions")
    }
    results = {
        "command": "python " + " ".join(["bench/suite.py", *sys.argv[1:]]),
        "wall_seconds": round(time.perf_counter() - started),
        "spark_version": spark_version(),
        "machine": info,
        "settings": settings,
        "operators": operators,
        "batch_sizes": sizes,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "benchmarks.json"), "w") as f:
        json.dump(results, f, indent=1)
    write_report(results, args.out)
    print(f"\nwrote {args.out}/benchmarks.{{json,md}} in {results['wall_seconds']} s")


if __name__ == "__main__":
    main()
