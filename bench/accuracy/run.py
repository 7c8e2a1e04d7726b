"""Keyed vs global watermark accuracy, reproduced on the oracle and on Spark (one command).

For every variant of variants.py (the delay model is documented there) and
both watermark kinds of engines.py, runs the oracle and, up to 1M events,
the Spark operator on the same micro-batches, checks that Spark reports
exactly the oracle's late events, fired windows and tracked keys (a mismatch
fails the run), and writes docs/accuracy.json, docs/accuracy.md and
docs/accuracy.png. With ``--scale-events`` the oracle also runs every variant
at that size (default 10M events) and reports its accuracy and events/s.

The third kind, the compact tracker (F065-R26..R37), runs on the oracle only,
at the sizes of compact.GRID, and is compared with the keyed kind event by
event (compact.py says how its accuracy is derived and what is checked).
Spark does not run it here; the suite's differential tests compare its Spark
operator with the oracle. It is left out of the ``--scale-events`` runs (its
oracle runs about 25k events/s).

    python bench/accuracy/run.py                                  # 1M on both engines + 10M on the oracle
    python bench/accuracy/run.py --events 100000 --scale-events 0 --out /tmp/acc   # a quick run
    python bench/accuracy/run.py --events 10000000 --no-spark --scale-events 0 --out /tmp/acc10m
    python bench/accuracy/run.py --kinds keyed,compact --no-spark --scale-events 0 --out /tmp/acc-compact
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))
import compact  # noqa: E402
import engines  # noqa: E402
import measure  # noqa: E402
import numpy as np  # noqa: E402
import variants  # noqa: E402
import window_rule  # noqa: E402

SPARK_MAX_EVENTS = 1_000_000
KINDS = (*engines.KINDS, "compact")
DOCS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs")


def run_variant(
    variant: variants.Variant,
    args: argparse.Namespace,
    spark: Any,
    work: str,
    events: int,
    use_spark: bool,
    kinds: tuple[str, ...] = KINDS,
) -> list[dict[str, Any]]:
    stream = variants.make_stream(variant, events, args.vehicles, args.batches, args.seed)
    trace_path = os.path.join(work, f"trace-{variants.VARIANTS.index(variant)}-{events}.parquet")
    if use_spark:
        engines.write_trace(stream, trace_path)
    rows = []
    keyed: engines.Outcome | None = None
    for kind in engines.KINDS:
        if kind not in kinds:
            continue
        oracle = engines.run_oracle(stream, kind)
        row: dict[str, Any] = {
            "variant": variant.name,
            "kind": kind,
            "events": len(stream),
            "delayed_events": stream.delayed_events,
            "delayed_vehicles": stream.delayed_vehicles,
            "accuracy": oracle.counted / len(stream),
            "counted": oracle.counted,
            "dropped": len(oracle.late),
            "windows_fired": engines.windows_fired_per_vehicle(stream, oracle, kind),
            "state_keys": oracle.tracked_keys,
            "state_open_windows": oracle.open_windows,
            "oracle_seconds": round(oracle.seconds, 2),
            "oracle_events_per_s": round(len(stream) / oracle.seconds),
            "window_rule_accuracy": window_rule.counted_under_window_rule(stream, kind) / len(stream),
        }
        if kind == "keyed":
            keyed = oracle
            check_derivation(stream, oracle, row["windows_fired"], variant.name)
            row["final_watermark_derivation_checked"] = True
        if use_spark:
            spark_out = engines.run_spark(spark, trace_path, stream, kind, work)
            engines.check_equal(oracle, spark_out, f"{variant.name} / {kind}")
            row.update(
                spark_equal_to_oracle=True,
                spark_windows_fired=engines.windows_fired_per_vehicle(stream, spark_out, kind),
                spark_state_bytes=spark_out.state_bytes,
                spark_seconds=round(spark_out.seconds, 1),
                spark_events_per_s=round(len(stream) / spark_out.seconds),
            )
            assert row["spark_windows_fired"] == row["windows_fired"], "same derivation, same inputs"
        print(
            f"{variant.name:28s} {kind:6s} accuracy {row['accuracy']:7.2%}  dropped {row['dropped']:>9,}  "
            f"windows {row['windows_fired']:>9,}  oracle {row['oracle_seconds']:5.1f} s"
            + (f"  spark {row['spark_seconds']:5.1f} s (equal)" if use_spark else ""),
            flush=True,
        )
        rows.append(row)
    if "compact" in kinds:
        assert keyed is not None, "the compact kind is compared with the keyed kind"
        for sketch in compact.GRID:
            row = compact_row(stream, sketch, keyed, args.vehicles)
            print(
                f"{variant.name:28s} {row['tracker']:32s} accuracy {row['accuracy']:7.2%}  "
                f"dropped {row['dropped']:>9,}  only by compact {row['dropped_only_by_compact']:>8,} "
                f"(R33 bound {row['r33_bound']:6.2%})  oracle {row['oracle_seconds']:5.1f} s",
                flush=True,
            )
            rows.append(row)
    return rows


def late_mask(stream: variants.Stream, outcome: engines.Outcome) -> np.ndarray:
    late = np.zeros(len(stream), bool)
    late[outcome.late] = True
    return late


def check_derivation(stream: variants.Stream, keyed: engines.Outcome, windows_fired: int, label: str) -> None:
    """The final-watermark derivation of compact.py, applied to the keyed tracker, must match its windows."""
    assert keyed.final_watermark is not None
    counted, windows = compact.counted_by_final_watermark(
        stream, late_mask(stream, keyed), keyed.final_watermark
    )
    if (counted, windows) != (keyed.counted, windows_fired):
        raise AssertionError(
            f"{label}: the final-watermark derivation gives {counted:,} events in {windows:,} windows, "
            f"the keyed window operators counted {keyed.counted:,} in {windows_fired:,}"
        )


def compact_row(
    stream: variants.Stream, sketch: compact.Sketch, keyed: engines.Outcome, vehicles: int
) -> dict[str, Any]:
    config = sketch.config(vehicles)
    label = sketch.label(vehicles)
    out = compact.run_compact(stream, sketch, vehicles)
    keyed_late = late_mask(stream, keyed)
    where = f"{stream.variant.name} / {label}"
    compact.check_r32(keyed_late, out.late, where)
    differing_keys = compact.check_r33_witness(stream, keyed_late, out.late, sketch, vehicles, where)
    counted, windows = compact.counted_by_final_watermark(stream, out.late, out.final_watermark)
    names = sorted(set(stream.vehicle_names().tolist()))
    assert len(names) == keyed.tracked_keys, "the keyed tracker tracks every vehicle of the stream"
    longest = max(compact.key_bytes(n) for n in names)
    state_bytes = compact.compact_state_bytes(config, longest)
    only = int(np.count_nonzero(out.late & ~keyed_late))
    return {
        "variant": stream.variant.name,
        "kind": "compact",
        "tracker": label,
        "exact_key_count": config.exact_key_count,
        "sketch_error_rate": config.sketch_error_rate,
        "sketch_width": config.width,
        "sketch_depth": config.sketch_depth,
        "shards": config.shards,
        "events": len(stream),
        "delayed_events": stream.delayed_events,
        "delayed_vehicles": stream.delayed_vehicles,
        "accuracy": counted / len(stream),
        "counted": counted,
        "dropped": int(np.count_nonzero(out.late)),
        "dropped_only_by_compact": only,
        "dropped_only_by_compact_share": only / len(stream),
        "keys_with_differing_verdicts": differing_keys,
        "r33_bound": out.r33_bound,
        "r33_bound_loose": out.r33_bound_loose,
        "keys_through_sketch": out.through_sketch_keys,
        "events_of_keys_through_sketch": out.through_sketch_events,
        "keys_written_to_sketch": out.written_keys,
        "events_judged_by_sketch": out.judged_by_sketch,
        "windows_fired": windows,
        "demotions": out.demotions,
        "state_keys": out.exact_keys,
        "estimated_keys": out.estimated_keys,
        "true_keys": len(names),
        "compact_state_bytes": state_bytes,
        "exact_state_bytes": compact.exact_tracker_bytes(names),
        "break_even_keys": compact.break_even_keys(state_bytes, longest),
        "oracle_seconds": round(out.seconds, 2),
        "oracle_events_per_s": round(len(stream) / out.seconds),
    }


def write_report(results: dict[str, Any], out: str) -> None:
    import report

    with open(os.path.join(out, "accuracy.md"), "w") as f:
        f.write(report.markdown(results))
    report.plot(results, os.path.join(out, "accuracy.png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events per variant (both engines)")
    parser.add_argument("--vehicles", type=int, default=1_000)
    parser.add_argument("--batches", type=int, default=10, help="micro-batches per variant")
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--no-spark", action="store_true", help="the oracle only")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help="comma-separated, from global, keyed, compact (compact brings keyed: it is compared with it)",
    )
    parser.add_argument(
        "--scale-events", type=int, default=10_000_000, help="also run the oracle at this size (0: skip)"
    )
    parser.add_argument("--out", default=DOCS, help="where accuracy.{json,md,png} go")
    parser.add_argument("--render", action="store_true", help="only rewrite the .md and .png from the .json")
    args = parser.parse_args()
    if args.render:
        with open(os.path.join(args.out, "accuracy.json")) as f:
            write_report(json.load(f), args.out)
        return
    use_spark = not args.no_spark
    kinds = tuple(k for k in KINDS if k in args.kinds.split(","))
    unknown = set(args.kinds.split(",")) - set(KINDS)
    if unknown or not kinds:
        parser.error(f"--kinds takes names from {', '.join(KINDS)}, got {args.kinds!r}")
    if "compact" in kinds and "keyed" not in kinds:
        kinds = tuple(k for k in KINDS if k in (*kinds, "keyed"))
    if use_spark and args.events > SPARK_MAX_EVENTS:
        parser.error(f"Spark runs up to {SPARK_MAX_EVENTS:,} events per variant; add --no-spark")

    started = time.perf_counter()
    info = {"before": measure.machine()}
    spark = None
    if use_spark:
        from spark_impl.session import get_spark

        spark = get_spark()
    work = tempfile.mkdtemp(prefix="accuracy-")
    try:
        rows = [
            row
            for v in variants.VARIANTS
            for row in run_variant(v, args, spark, work, args.events, use_spark, kinds)
        ]
        scale = []
        scale_kinds = tuple(k for k in kinds if k != "compact")  # its oracle is too slow at 10M
        if args.scale_events and scale_kinds:
            print(f"\n-- oracle at {args.scale_events:,} events --", flush=True)
            scale = [
                row
                for v in variants.VARIANTS
                for row in run_variant(v, args, None, work, args.scale_events, False, scale_kinds)
            ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if spark is not None:
            from spark_impl.session import stop_spark

            stop_spark()
    info["after"] = measure.machine()
    results = {
        "command": "python " + " ".join(["bench/accuracy/run.py", *sys.argv[1:]]),
        "wall_seconds": round(time.perf_counter() - started),
        "machine": info,
        "settings": {
            "events": args.events,
            "vehicles": args.vehicles,
            "batches": args.batches,
            "seed": args.seed,
            "spark": use_spark,
            "scale_events": args.scale_events,
            "kinds": list(kinds),
            "compact_grid": [asdict(g) for g in compact.GRID] if "compact" in kinds else [],
            **variants.describe(),
        },
        "rows": rows,
        "scale_rows": scale,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "accuracy.json"), "w") as f:
        json.dump(results, f, indent=1)
    write_report(results, args.out)
    print(f"\nwrote {args.out}/accuracy.{{json,md,png}} in {results['wall_seconds']} s")


if __name__ == "__main__":
    main()
