"""The throughput suite: every Spark operator of the project beside the nearest Spark-native operator.

One command writes docs/benchmarks.json, docs/benchmarks.md and (with the
scaling stage, bench/scaling.py) docs/scaling.png:

    python bench/suite.py                       # the committed figures (about 15 minutes on 2 cores)
    python bench/suite.py --scale 0.1 --repeats 1 --no-scaling --out /tmp/bench   # a quick run

For each operator and for a small and a large key (partition, source) count,
the operator and its native counterpart read the same rows from the ``trace``
source (exact micro-batches, Trigger.AvailableNow, ``noop`` sink) and run
alternately ``--repeats`` times (bench/measure.py); reported: median events/s
(whole run; and without the first micro-batch, which carries the start-up
cost), the median of the paired ratios ours/native, the peak RSS of the
driver + JVM + Python workers during the run, and state bytes per key (the
newest RocksDB SST files of the checkpoint, divided by the key count). The
oracle's events/s comes from the area's reference stream on the first
``--oracle-events`` events of the same rows (pure Python, one process, its
output tables included). The inputs are the area benchmarks' own generators
(bench/<area>.py). A benchmark reports figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import measure  # noqa: E402

DOCS = os.path.join(os.path.dirname(HERE), "docs")
T0 = 1_700_000_000_000


@dataclass
class Case:
    """One operator at one size: how to build its rows, its query, the native query and the oracle."""

    area: str
    size_label: str  # "keys" | "partitions" | "sources"
    size: int
    events: int
    ours_label: str
    native_label: str
    make_table: Callable[[int, int], Any]  # (events, size) -> pyarrow table with batch, seq
    ours: Callable[[Any], Any]  # source DataFrame -> streaming DataFrame (append mode)
    native: Callable[[Any], Any]  # source DataFrame -> (streaming DataFrame, output mode)
    oracle: Callable[[Any, int], float]  # (table, events) -> events/s
    event_share: Callable[[Any], float] = lambda table: 1.0  # events per input row


# ---- the oracle, generically: the area's reference stream on Items built from the rows ---------


def _items(
    table: Any, events: int, kinds: tuple[str, ...], rename: dict[str, str] | None = None
) -> list[list[Any]]:
    from harness.traces import ITEM_FIELD_TYPES, Item

    data = {(rename or {}).get(c, c): v for c, v in table.to_pydict().items()}
    cols = [c for c in data if c in ITEM_FIELD_TYPES]
    kind_col = data.get("kind")
    batches: dict[int, list[Any]] = {}
    seen = 0
    for i, b in enumerate(data["batch"]):
        kind = kind_col[i] if kind_col is not None else "event"
        if kind not in kinds:
            continue
        if kind == "event":
            seen += 1
            if seen > events:
                break
        fields = {c: data[c][i] for c in cols if data[c][i] is not None}
        batches.setdefault(b, []).append(Item(kind, **fields))
    return [batches[b] for b in sorted(batches)]


def trace_oracle(
    area: str,
    config: dict[str, Any],
    kinds: tuple[str, ...] = ("event",),
    rename: dict[str, str] | None = None,
) -> Callable[..., float]:
    def rate(table: Any, events: int) -> float:
        import importlib

        from harness.traces import Trace

        batches = _items(table, events, kinds, rename)
        n = sum(1 for b in batches for it in b if it.kind == "event")
        trace = Trace(area, config, tuple(tuple(b) for b in batches))
        oracle = importlib.import_module(f"reference.{area}")
        seconds, _ = measure.timed(lambda: oracle.run_trace(trace))
        return n / seconds

    return rate


# ---- inputs ------------------------------------------------------------------


def _per_batch(n: int, batches: int) -> tuple[Any, Any]:
    import numpy as np

    per = n // batches
    return np.repeat(np.arange(batches, dtype=np.int64), per), np.tile(
        np.arange(per, dtype=np.int64), batches
    )


def keyed_table(events: int, keys: int, batches: int = 10) -> Any:
    """As bench/keyed_watermarks.py: event time grows with arrival, up to 10 s of disorder."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(keys)
    batch, seq = _per_batch(events, batches)
    n = len(batch)
    names = np.char.add("key-", rng.integers(0, keys, n).astype(str)).astype(object)
    event_time = T0 + np.arange(n, dtype=np.int64) * 10 - rng.integers(0, 10_000, n)
    value = rng.integers(0, 100, n)
    return pa.table(
        {
            "batch": batch,
            "seq": seq,
            "key": pa.array(names, pa.string()),
            "event_time": event_time,
            "value": value,
        }
    )


def partitioned_table(events: int, partitions: int) -> Any:
    import partitioned_watermarks as bench_pw

    return bench_pw.make_events(events, partitions, 10, seed=partitions)


def eventtime_table(events: int, keys: int) -> Any:
    import eventtime_buffer as bench_eb
    import pyarrow as pa

    cols = bench_eb.make_events(events, 10, 1_000, keys, seed=keys)
    return pa.table({k: pa.array(v, type=pa.string() if k == "key" else None) for k, v in cols.items()})


def late_table(events: int, sources: int) -> Any:
    import late_data as bench_ld
    import pyarrow.parquet as pq

    bench_ld.SOURCES = sources  # its generator reads the module's source count
    path = tempfile.mktemp(suffix=".parquet")
    try:
        bench_ld.make_rows(path, events, 10, seed=events)
        return pq.read_table(path)
    finally:
        os.unlink(path)


def propagation_table(events: int, sources: int) -> Any:
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(sources)
    batch, seq = _per_batch(events, 10)
    n = len(batch)
    names = np.asarray(_sources(sources), dtype=object)[rng.integers(0, sources, n)]
    event_time = T0 + np.arange(n, dtype=np.int64) * 10 - rng.integers(0, 2_000, n)
    return pa.table(
        {"batch": batch, "seq": seq, "source": pa.array(names, pa.string()), "event_time": event_time}
    )


def _sources(n: int) -> list[str]:
    return [f"s{i}" for i in range(n)]


def _graph(sources: int) -> dict[str, Any]:
    """Every source into one merge operator, then a sink."""
    names = _sources(sources)
    return {"nodes": [*names, "merge", "sink"], "edges": [*([s, "merge"] for s in names), ["merge", "sink"]]}


# ---- the cases ---------------------------------------------------------------


def cases(scale: float) -> list[Case]:
    from pyspark.sql import functions as F

    def plain(col: str) -> Callable[[Any], Any]:
        def build(df: Any) -> Any:
            return df.groupBy(col).agg(F.max("event_time").alias("m"), F.count("*").alias("n")), "update"

        return build

    def n(events: int) -> int:
        return max(10_000, int(events * scale))

    def keyed(df: Any) -> Any:
        from spark_impl.keyed_watermarks import keyed_watermarks

        return keyed_watermarks(
            df, key_col="key", event_time_col="event_time", seq_col="seq", batch_col="batch"
        ).output

    def partitioned(df: Any) -> Any:
        from spark_impl.partitioned_watermarks import partitioned_watermarks

        return partitioned_watermarks(
            df,
            source_col="source",
            partition_col="partition",
            event_time_col="event_time",
            seq_col="seq",
            kind_col="kind",
            count_col="count",
            batch_col="batch",
        ).output

    def partitioned_oracle(table: Any, events: int) -> float:
        import partitioned_watermarks as bench_pw

        return float(bench_pw.oracle_rate(table, events, 10))

    def buffer(df: Any) -> Any:
        from spark_impl.eventtime_buffer import eventtime_buffer

        return eventtime_buffer(
            df,
            eventtime_col="event_time",
            late_tolerance_ms=1_000,
            key_col="key",
            value_col="value",
            seq_col="seq",
            batch_col="batch",
        ).output

    def buffer_oracle(table: Any, events: int) -> float:
        import eventtime_buffer as bench_eb

        cols = {c: table.column(c).to_numpy(zero_copy_only=False)[:events] for c in table.column_names}
        rate, _, _ = bench_eb.run_oracle(cols, 10, 1_000)
        return float(rate)

    def sessions(df: Any) -> Any:
        from spark_impl.session_windows import session_windows

        return session_windows(
            df,
            key_col="key",
            event_time_col="event_time",
            gap_ms=30_000,
            bounded_delay_ms=10_000,
            value_col="value",
            seq_col="seq",
            batch_col="batch",
            report_timers=False,
        ).output

    def native_sessions(df: Any) -> Any:
        native = (
            df.withColumn("ts", F.timestamp_millis("event_time"))
            .withWatermark("ts", "10000 milliseconds")
            .groupBy("key", F.session_window("ts", "30000 milliseconds"))
            .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
        )
        return native, "append"

    def late(df: Any) -> Any:
        from spark_impl.late_data import late_data

        return late_data(
            df,
            event_time_col="event_time",
            source_col="source",
            kind_col="kind",
            seq_col="seq",
            time_col="time",
            batch_col="batch",
            policy="SideOutput",
            channel="late",
            window_size_ms=2_000,
            allowed_lateness_ms=500,
        ).output

    def native_late(df: Any) -> Any:
        return plain("source")(df.filter(F.col("kind") == "event"))

    def propagation(sources: int) -> Callable[[Any], Any]:
        def build(df: Any) -> Any:
            from spark_impl.watermark_propagation import watermark_propagation

            return watermark_propagation(
                df,
                **_graph(sources),
                node_col="source",
                event_time_col="event_time",
                seq_col="seq",
                batch_col="batch",
                advance_threshold=100,
                max_out_of_order_ms=1_000,
            ).output

        return build

    def event_rows(table: Any) -> float:
        kinds = table.column("kind").to_pylist()
        return kinds.count("event") / len(kinds)

    late_config = {"policy": "SideOutput", "channel": "late", "window_size": 2_000, "allowed_lateness": 500}
    out: list[Case] = []
    for keys in (1_000, 100_000):
        out.append(
            Case(
                "keyed_watermarks",
                "keys",
                keys,
                n(300_000),
                "keyed_watermarks",
                "groupBy(key).agg(max, count)",
                keyed_table,
                keyed,
                plain("key"),
                trace_oracle("keyed_watermarks", {}),
            )
        )
    for parts in (4, 1_024):
        out.append(
            Case(
                "partitioned_watermarks",
                "partitions",
                parts,
                n(300_000),
                "partitioned_watermarks",
                "groupBy(partition).agg(max, count)",
                partitioned_table,
                partitioned,
                plain("partition"),
                partitioned_oracle,
            )
        )
    for keys in (1_000, 100_000):
        out.append(
            Case(
                "eventtime_buffer",
                "keys",
                keys,
                n(300_000),
                "eventtime_buffer (1 s tolerance)",
                "groupBy(key).agg(max, count)",
                eventtime_table,
                buffer,
                plain("key"),
                buffer_oracle,
            )
        )
    for keys in (1_000, 100_000):
        out.append(
            Case(
                "session_windows",
                "keys",
                keys,
                n(300_000),
                "session_windows (30 s gap)",
                "session_window + withWatermark, append",
                keyed_table,
                sessions,
                native_sessions,
                trace_oracle("session_windows", {"gap": 30_000, "bounded_delay": 10_000}),
            )
        )
    for sources in (4, 64):
        out.append(
            Case(
                "late_data",
                "sources",
                sources,
                n(150_000),
                "late_data (SideOutput, 2 s windows)",
                "groupBy(source).agg(max, count)",
                late_table,
                late,
                native_late,
                trace_oracle("late_data", late_config, ("event", "watermark")),
                event_rows,
            )
        )
    for sources in (4, 64):
        config = {**_graph(sources), "advance_threshold": 100, "max_out_of_order_ms": 1_000}
        out.append(
            Case(
                "watermark_propagation",
                "sources",
                sources,
                n(40_000),
                "watermark_propagation (T=100)",
                "groupBy(source).agg(max, count)",
                propagation_table,
                propagation(sources),
                plain("source"),
                trace_oracle("watermark_propagation", config, rename={"source": "key"}),
            )
        )
    return out


# ---- running -----------------------------------------------------------------


def run_case(spark: Any, case: Case, repeats: int, oracle_events: int, work: str) -> dict[str, Any]:
    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    table = case.make_table(case.events, case.size)
    path = os.path.join(work, f"{case.area}-{case.size}.parquet")
    write_trace_file(path, table)
    share = case.event_share(table)

    def source() -> Any:
        return spark.readStream.format(SOURCE_NAME).option("path", path).option("partitions", "2").load()

    def start_ours(attempt: int) -> measure.Run:
        ckpt = os.path.join(work, f"ck-{case.area}-{case.size}-ours-{attempt}")
        return measure.run_query(case.ours(source()), "append", ckpt)

    def start_native(attempt: int) -> measure.Run:
        df, mode = case.native(source())
        return measure.run_query(df, mode, os.path.join(work, f"ck-{case.area}-{case.size}-native-{attempt}"))

    runs = measure.alternate({"native": start_native, "ours": start_ours}, repeats)
    oracle_n = min(oracle_events, case.events)
    oracle = case.oracle(table, oracle_n)

    def summary(rs: list[measure.Run]) -> dict[str, Any]:
        return {
            "events_per_s": round(measure.median(r.rate(share) for r in rs)),
            "warm_events_per_s": round(measure.median(r.warm_rate(share) for r in rs)),
            "wall_s": round(measure.median(r.wall for r in rs), 2),
            "peak_rss_mb": round(max(r.peak_rss for r in rs) / 2**20),
            "peak_rss_split_mb": {
                k: round(v / 2**20) for k, v in max(rs, key=lambda r: r.peak_rss).peak_split.items()
            },
            "state_bytes_per_key": round(rs[-1].checkpoint_state_bytes / case.size, 1),
            "state_rows": rs[-1].state.get("state_rows"),
            "state_memory_bytes": rs[-1].state.get("state_memory_bytes"),
            "runs": [measure.run_dict(r) for r in rs],
        }

    result = {
        "area": case.area,
        "size_label": case.size_label,
        "size": case.size,
        "events": case.events,
        "input_rows": table.num_rows,
        "ours_label": case.ours_label,
        "native_label": case.native_label,
        "ours": summary(runs["ours"]),
        "native": summary(runs["native"]),
        "ratio": round(measure.paired_ratio(runs["ours"], runs["native"]), 3),
        "ratio_warm": round(measure.paired_ratio(runs["ours"], runs["native"], warm=True), 3),
        "oracle_events": oracle_n,
        "oracle_events_per_s": round(oracle),
    }
    ours, native = result["ours"], result["native"]
    print(
        f"{case.area:24s} {case.size:>7,} {case.size_label:10s} ours {ours['events_per_s']:>8,} ev/s  "
        f"native {native['events_per_s']:>8,} ev/s  ratio {result['ratio']:.2f}x  "
        f"oracle {result['oracle_events_per_s']:>8,} ev/s  peak {ours['peak_rss_mb']:,} MB",
        flush=True,
    )
    return result


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Throughput of the Spark operators",
        "",
        f"Command (wall time {results['wall_seconds']} s on {m['before']['cores']} cores; load average "
        f"before {m['before']['load_average']}, after {m['after']['load_average']}; absolute figures move "
        "between runs with the machine's load, the paired ratios less):",
        "",
        f"    {results['command']}",
        "",
        f"Spark {results['spark_version']}, local[2], RocksDB state store, `trace` source with 10 exact "
        f"micro-batches, `noop` sink, Trigger.AvailableNow; medians of {results['settings']['repeats']} "
        "alternating runs (native first in each round). events/s: input events over the wall time of the "
        "whole query (warm: batches 2.. over their trigger time). ratio: the median of the per-round ratios "
        "ours/native. Peak RSS: driver + JVM + Python workers during the run (the JVM keeps its heap, so it "
        "only grows over the suite). State: RocksDB SST bytes in the checkpoint's state folder / key "
        "count (an upper estimate: versions share files and old ones stay until maintenance). Oracle: "
        "the area's reference stream, pure Python, on the first events of the same rows.",
        "",
        "ours: each operator's combined `output` stream to the sink, with 2 shuffle partitions and "
        "batches of 4,000 to 30,000 events; so keyed watermarks runs its two-stage plan here (its "
        "`write_tables` and `foreach_batch` run one stage). On a user's path (Parquet files of 100,000 "
        "events over 10,000 keys, 8 shuffle partitions) keyed watermarks runs at about 0.3x its native "
        "counterpart: [where a micro-batch's time goes](architecture.md).",
        "",
        "| operator | size | events | ours ev/s (warm) | native | native ev/s (warm) | ratio (warm) | "
        "oracle ev/s | peak RSS MB ours / native | state B/key ours / native |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["operators"]:
        o, nat = r["ours"], r["native"]
        lines.append(
            f"| {r['ours_label']} | {r['size']:,} {r['size_label']} | {r['events']:,} | "
            f"{o['events_per_s']:,} ({o['warm_events_per_s']:,}) | {r['native_label']} | "
            f"{nat['events_per_s']:,} ({nat['warm_events_per_s']:,}) | "
            f"{r['ratio']:.2f}x ({r['ratio_warm']:.2f}x) | "
            f"{r['oracle_events_per_s']:,} | {o['peak_rss_mb']:,} / {nat['peak_rss_mb']:,} | "
            f"{o['state_bytes_per_key']:,} / {nat['state_bytes_per_key']:,} |"
        )
    if results.get("scaling"):
        import scaling

        lines += ["", scaling.markdown(results["scaling"])]
    return "\n".join(lines) + "\n"


def write_report(results: dict[str, Any], out: str) -> None:
    with open(os.path.join(out, "benchmarks.md"), "w") as f:
        f.write(markdown(results))
    if results["scaling"]:
        import scaling

        scaling.plot(results["scaling"], os.path.join(out, "scaling.png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per query")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every case's event count")
    parser.add_argument("--oracle-events", type=int, default=50_000)
    parser.add_argument("--only", nargs="*", default=None, help="areas to run (default: all)")
    parser.add_argument("--no-scaling", action="store_true", help="skip bench/scaling.py")
    parser.add_argument("--out", default=DOCS, help="where benchmarks.{json,md} and scaling.png go")
    parser.add_argument("--render", action="store_true", help="only rewrite the .md and .png from the .json")
    args = parser.parse_args()
    if args.render:
        with open(os.path.join(args.out, "benchmarks.json")) as f:
            write_report(json.load(f), args.out)
        return

    from spark_impl.session import get_spark, stop_spark

    started = time.perf_counter()
    info = {"before": measure.machine()}
    spark = get_spark()
    work = tempfile.mkdtemp(prefix="suite-")
    try:
        selected = [c for c in cases(args.scale) if args.only is None or c.area in args.only]
        operators = [run_case(spark, c, args.repeats, args.oracle_events, work) for c in selected]
        scaling_rows: list[dict[str, Any]] = []
        if not args.no_scaling:
            import scaling

            scaling_rows = scaling.run(spark, work, events=int(1_000_000 * min(args.scale, 1.0)) or 10_000)
        version = spark.version
    finally:
        shutil.rmtree(work, ignore_errors=True)
        stop_spark()
    info["after"] = measure.machine()
    results = {
        "command": "python " + " ".join(["bench/suite.py", *sys.argv[1:]]),
        "wall_seconds": round(time.perf_counter() - started),
        "spark_version": version,
        "machine": info,
        "settings": {"repeats": args.repeats, "scale": args.scale, "oracle_events": args.oracle_events},
        "operators": operators,
        "scaling": scaling_rows,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "benchmarks.json"), "w") as f:
        json.dump(results, f, indent=1)
    write_report(results, args.out)
    print(f"\nwrote {args.out}/benchmarks.{{json,md}} in {results['wall_seconds']} s")


if __name__ == "__main__":
    main()
