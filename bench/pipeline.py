"""The oxirs pipeline end to end on Spark against the sum of its parts, on the same events.

One session at ``--master`` (default local[2]) with ``--partitions`` (8) shuffle partitions; every
query reads Parquet files in the engine's row form (spark_impl.engine.INPUT_SCHEMA), one file
per micro-batch (``maxFilesPerTrigger=1``), ``Trigger.AvailableNow``, to the noop sink:

- pipeline: ``spark_impl.pipeline`` over four ingress streams (a tumbling join of s0 x s1, a
  session join of s2 x s3, every event to the exactly-once sum), each batch opening with its
  clock item; admission takes every event (no rate cap, no lag cap, no shedder), so every event
  reaches every operator it feeds;
- its parts, each an area's operator alone on the same events through its ``engine_output``:
  SLA admission on every event, the tumbling join on s0 and s1 and the session join on s2 and
  s3 (each batch opening with a watermark item at its first event time minus the delay, as the
  pipeline's generator gives them), the exactly-once aggregation on every event.

``--batches`` micro-batches of ``--events`` events (the first cold), then ``--tiny`` of 10
events. Per query: the warm rate (events of batches 2.. over their trigger times), the median
warm trigger time and the median trigger time of the tiny batches (the fixed cost of a
micro-batch). Every events/s counts all the batch's events (the four streams), whatever share a
part reads, so the parts' rows add up: the parts' sum is the sum of their trigger times, what
running them one after the other on the same batches would take. The queries take turns in each
round. A benchmark prints figures; it asserts nothing. ``--out`` also writes them as a page.

    .tox/spark/bin/python bench/pipeline.py --events 20000 --rounds 3 --out docs/pipeline-benchmark.md
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import measure  # noqa: E402 - bench/measure.py: the machine's load
import scaleout  # noqa: E402 - bench/scaleout.py: its session settings

T0 = 1_700_000_000_000
DELAY_MS = 1_000  # the generator's max_out_of_order_ms, twice the disorder
TINY_EVENTS = 10
STREAMS = ("s0", "s1", "s2", "s3")
ADMISSION = {
    "streams": {s: {"class": "Gold", "max_events_per_sec": 10**9, "max_lag": 10**12} for s in STREAMS}
}


PAGE_TEXT = """\
Every query reads Parquet files in the Spark engine's row form, one per micro-batch, and writes to
the noop sink. **pipeline**: `spark_impl/pipeline/` over four ingress streams (a tumbling join
of s0 x s1, a session join of s2 x s3, every event to the exactly-once sum; admission takes every
event). **The parts**: each operator alone on the same events through its harness plan (SLA
admission on every event, each join on its two streams with a watermark item per batch, the
exactly-once aggregation on every event). **events/s** counts all the batch's events for every
row, so the parts add up: their sum is what running them one after the other takes; **fixed
cost**: the median trigger time of the 10-event batches. The pipeline runs three chained
stateful stages; each part runs two (its narrow step as a second stage)."""


def pipeline_config(threshold: int) -> dict[str, Any]:
    return {
        "admission": ADMISSION,
        "watermarks": {"max_out_of_order_ms": DELAY_MS, "advance_threshold": threshold},
        "tumbling_join": {"size_ms": 1000, "left": ["s0"], "right": ["s1"]},
        "session_join": {"gap_ms": 500, "left": ["s2"], "right": ["s3"]},
        "aggregation": {"aggregate": "sum", "dedup_window": 1024},
    }


PARTS: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "sla_admission": ("sla_admission", ADMISSION, STREAMS),
    "tumbling join": ("window_joins", {"join": "tumbling_tumbling", "size_ms": 1000}, ("s0", "s1")),
    "session join": ("window_joins", {"join": "session_session", "gap_ms": 500}, ("s2", "s3")),
    "exactly_once_aggregation": (
        "exactly_once_aggregation",
        {"aggregate": "sum", "dedup_window": 1024},
        STREAMS,
    ),
}


def events(rng: Any, sizes: list[int], keys: int) -> Any:
    """Every batch's events in arrival order: time 1 ms apart with +-500 ms of disorder, uniform
    keys and streams, 64 producers x 4 partitions numbering their messages."""
    import numpy as np
    import pandas as pd

    n = sum(sizes)
    batch = np.repeat(np.arange(len(sizes)), sizes)
    position = np.arange(n, dtype=np.int64)
    producer, partition = rng.integers(0, 64, n), rng.integers(0, 4, n)
    sequence = pd.Series(np.zeros(n)).groupby([producer, partition]).cumcount().to_numpy(np.int64)
    value = rng.integers(0, 1000, n)
    return pd.DataFrame({
        "batch": batch, "event_time": T0 + position + rng.integers(-500, 501, n),
        "key": np.char.add("k", rng.integers(0, keys, n).astype(str)).astype(object),
        "stream": np.array(STREAMS, dtype=object)[rng.integers(0, len(STREAMS), n)],
        "producer": producer, "partition": partition, "sequence": sequence, "value": value,
        "amount": value.astype(str).astype(object),
    })  # fmt: skip


def item_rows(frame: Any, area: str, streams: tuple[str, ...], sides: bool) -> Any:
    """The engine's input rows of one trace ``t0`` of ``area``: per batch a clock item (pipeline
    and admission) or a watermark item (a join alone) first, then its events of ``streams``,
    then the batch marker."""
    import numpy as np
    import pandas as pd

    from spark_impl.engine import INPUT_SCHEMA

    mine = frame[frame["stream"].isin(list(streams))]
    parts = []
    for b, rows in mine.groupby("batch", sort=True):
        first = int(rows["event_time"].min()) if len(rows) else T0
        opening = (
            {"kind": "watermark", "time": first - DELAY_MS}
            if sides
            else {"kind": "clock", "time": first + 10**6}
        )
        ev = rows.assign(kind="event")
        if sides:
            ev = ev.assign(side=np.where(ev["stream"].isin(["s0", "s2"]), "left", "right"))
        body = pd.concat(
            [pd.DataFrame([opening]), ev, pd.DataFrame([{"kind": "batch_end"}])], ignore_index=True
        )
        body["batch"], body["seq"] = int(b), np.arange(len(body), dtype=np.int64)
        parts.append(body)
    out = pd.concat(parts, ignore_index=True)
    out["trace_id"], out["area"] = "t0", area
    for name, kind in INPUT_SCHEMA:
        if name not in out:
            out[name] = None
        out[name] = out[name].astype("Int64") if kind == "int64" else out[name].astype(object)
    out["value"] = out["value"].fillna(0)
    return out[[name for name, _ in INPUT_SCHEMA]]


def run_query(
    spark: Any, work: str, rows: Any, area: str, config: dict[str, Any], batches: int
) -> dict[str, Any]:
    """One query over ``rows`` to the noop sink; its per-batch trigger times."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_impl.engine import INPUT_SCHEMA, area_module

    source = os.path.join(work, "source")
    os.makedirs(source)
    schema = pa.schema([(n, pa.int64() if t == "int64" else pa.string()) for n, t in INPUT_SCHEMA])
    for b, part in rows.groupby("batch", sort=True):
        path = os.path.join(source, f"batch-{int(b):05d}.parquet")
        pq.write_table(pa.Table.from_pandas(part, schema=schema, preserve_index=False), path)
        os.utime(path, (1_000_000 + int(b), 1_000_000 + int(b)))
    ddl = ", ".join(f"`{n}` {'long' if t == 'int64' else 'string'}" for n, t in INPUT_SCHEMA)
    df = spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1).parquet(source)
    out = area_module(area).engine_output(df, {"t0": config})
    query = (
        out.writeStream.format("noop").outputMode("append").trigger(availableNow=True)
        .option("checkpointLocation", os.path.join(work, "checkpoint")).start()
    )  # fmt: skip
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    times = [p.durationMs["triggerExecution"] for p in query.recentProgress if p.numInputRows]
    if len(times) != batches:
        raise RuntimeError(f"{area}: {len(times)} micro-batches with input, expected {batches}")
    return {"times": times}


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=20_000, help="events per big batch")
    parser.add_argument("--batches", type=int, default=5, help="big batches (the first is cold)")
    parser.add_argument("--tiny", type=int, default=3, help="batches of 10 events after them")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument(
        "--advance-threshold", type=int, default=1, help="the generators' (1: a rise per event)"
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--out", help="also write the figures as a Markdown page there")
    args = parser.parse_args()
    import time

    import pyspark

    before, started = measure.machine(), time.perf_counter()
    spark = scaleout.start_session(args.master, args.partitions)
    spark.sparkContext.setLogLevel("ERROR")
    sizes = [args.events] * args.batches + [TINY_EVENTS] * args.tiny
    frame = events(np.random.default_rng(0), sizes, args.keys)
    big = frame[frame["batch"] < args.batches].groupby("batch").size().tolist()
    queries = {"pipeline": ("pipeline", pipeline_config(args.advance_threshold), STREAMS), **PARTS}
    results: dict[str, list[list[float]]] = {name: [] for name in queries}
    base = tempfile.mkdtemp(prefix="bench-pipeline-")
    try:
        for r in range(args.rounds):
            for name, (area, config, streams) in queries.items():  # side by side, in turn
                rows = item_rows(frame, area, streams, sides=area == "window_joins")
                work = tempfile.mkdtemp(prefix=f"{area}-{r}-", dir=base)
                results[name].append(run_query(spark, work, rows, area, config, len(sizes))["times"])
                shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    warm_events = sum(big[1:])

    def figures(runs: list[list[float]]) -> tuple[float, float, float]:
        warm = statistics.median(sum(t[1 : args.batches]) for t in runs)
        batch = statistics.median(statistics.median(t[1 : args.batches]) for t in runs)
        fixed = statistics.median(statistics.median(t[args.batches :]) for t in runs)
        return warm, batch, fixed

    lines = [
        f"{args.events:,} events per batch, {args.batches} batches (1 cold), {args.tiny} of {TINY_EVENTS} "
        f"events, {args.keys:,} keys, {args.master}, {args.partitions} shuffle partitions, Spark "
        f"{pyspark.__version__}, advance_threshold {args.advance_threshold}, "
        f"medians of {args.rounds} round(s)",
        "",
        "| query | events/s | ms/batch | fixed cost ms |",
        "|---|---|---|---|",
    ]
    total = [0.0, 0.0, 0.0]
    for name in queries:
        warm, batch, fixed = figures(results[name])
        lines.append(f"| {name} | {warm_events / (warm / 1000):,.0f} | {batch:,.0f} | {fixed:,.0f} |")
        if name != "pipeline":
            total = [total[0] + warm, total[1] + batch, total[2] + fixed]
    lines.append(
        f"| the parts, one after the other | {warm_events / (total[0] / 1000):,.0f} | {total[1]:,.0f} | "
        f"{total[2]:,.0f} |"
    )
    lines += ["", f"pipeline events/s over the parts' sum: {total[0] / figures(results['pipeline'])[0]:.2f}x"]
    print("\n".join(lines))
    if args.out:
        after = measure.machine()
        command = "python " + " ".join(["bench/pipeline.py", *sys.argv[1:]])
        minutes = (time.perf_counter() - started) / 60
        head = [
            "# The oxirs pipeline against the sum of its parts",
            "",
            f"Command (wall time {minutes:.0f} minutes on {before['cores']} cores; load average before "
            f"{before['load_average']}, after {after['load_average']}):",
            "",
            f"    {command}",
            "",
            PAGE_TEXT,
            "",
        ]
        with open(args.out, "w", encoding="utf-8") as f:
            f.write("\n".join(head + lines) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
