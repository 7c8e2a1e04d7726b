"""Events/s of the Spark keyed-watermark operator against the key count (1k .. 1M), beside plain groupBy.

Part of bench/suite.py (its last stage); alone:

    python bench/scaling.py            # 1M events; 1k, 10k, 100k, 1M keys; writes docs/scaling.png
    python bench/scaling.py --events 200000 --out /tmp/scaling

The same generator as the suite's keyed case (event time grows with arrival,
up to 10 s of disorder), 10 micro-batches, one run per key count of
``keyed_watermarks`` and of ``groupBy(key).agg(max, count)``, alternately.
It reports figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import measure  # noqa: E402

KEY_COUNTS = (1_000, 10_000, 100_000, 1_000_000)


def run(
    spark: Any, work: str, events: int = 1_000_000, key_counts: tuple[int, ...] = KEY_COUNTS
) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F
    from suite import keyed_table

    from spark_impl.keyed_watermarks import keyed_watermarks
    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    rows = []
    for keys in key_counts:
        path = os.path.join(work, f"scaling-{keys}.parquet")
        write_trace_file(path, keyed_table(events, keys))

        def source(path: str = path) -> Any:
            return spark.readStream.format(SOURCE_NAME).option("path", path).option("partitions", "2").load()

        native_df = source().groupBy("key").agg(F.max("event_time").alias("m"), F.count("*").alias("n"))
        native = measure.run_query(native_df, "update", os.path.join(work, f"ck-scaling-native-{keys}"))
        ours_df = keyed_watermarks(
            source(), key_col="key", event_time_col="event_time", seq_col="seq", batch_col="batch"
        ).output
        ours = measure.run_query(ours_df, "append", os.path.join(work, f"ck-scaling-keyed-{keys}"))
        row = {
            "keys": keys,
            "events": events,
            "keyed_events_per_s": round(ours.rate()),
            "keyed_warm_events_per_s": round(ours.warm_rate()),
            "native_events_per_s": round(native.rate()),
            "native_warm_events_per_s": round(native.warm_rate()),
            "keyed_peak_rss_mb": round(ours.peak_rss / 2**20),
            "keyed_state_bytes_per_key": round(ours.checkpoint_state_bytes / keys, 1),
        }
        print(
            f"scaling {keys:>9,} keys: keyed {row['keyed_events_per_s']:>8,} ev/s, "
            f"native {row['native_events_per_s']:>8,} ev/s",
            flush=True,
        )
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"## Scaling: keyed_watermarks against the key count ({rows[0]['events']:,} events, one run each)",
        "",
        "![events/s against key count](scaling.png)",
        "",
        "| keys | keyed ev/s (warm) | native groupBy ev/s (warm) | ratio | keyed peak RSS MB "
        "| keyed state B/key |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['keys']:,} | {r['keyed_events_per_s']:,} ({r['keyed_warm_events_per_s']:,}) | "
            f"{r['native_events_per_s']:,} ({r['native_warm_events_per_s']:,}) | "
            f"{r['keyed_events_per_s'] / r['native_events_per_s']:.2f}x | {r['keyed_peak_rss_mb']:,} | "
            f"{r['keyed_state_bytes_per_key']:,} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [r["keys"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(keys, [r["keyed_events_per_s"] for r in rows], "o-", label="keyed_watermarks (whole run)")
    ax.plot(keys, [r["keyed_warm_events_per_s"] for r in rows], "o--", label="keyed_watermarks (batches 2..)")
    ax.plot(
        keys,
        [r["native_events_per_s"] for r in rows],
        "s-",
        color="gray",
        label="groupBy(key).agg(max, count) (whole run)",
    )
    ax.set_xscale("log")
    ax.set_xlabel("distinct keys")
    ax.set_ylabel("events per second")
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"Spark keyed watermarks, {rows[0]['events']:,} events in 10 micro-batches, local[2]", fontsize=10
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, nargs="+", default=list(KEY_COUNTS))
    parser.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "docs"))
    args = parser.parse_args()
    from spark_impl.session import get_spark, stop_spark

    spark = get_spark()
    work = tempfile.mkdtemp(prefix="scaling-")
    try:
        rows = run(spark, work, args.events, tuple(args.keys))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        stop_spark()
    os.makedirs(args.out, exist_ok=True)
    plot(rows, os.path.join(args.out, "scaling.png"))
    with open(os.path.join(args.out, "scaling.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(markdown(rows))


if __name__ == "__main__":
    main()
