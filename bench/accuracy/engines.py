"""One variant through one watermark kind on one engine: what was counted, dropped and fired.

Both kinds run the F065 operator with a bounded delay of 1 s and keyed
tumbling windows of 10 s (spec/keyed_watermarks.md, R3 and R21):

- keyed: key = vehicle id; each vehicle is judged by its own watermark;
- global: every event gets ONE constant key, so that key's watermark is the
  stream's (max event time seen minus 1 s, as a bounded-out-of-orderness
  generator at one source) and its windows are the stream's windows.

An event is counted when its verdict is on time and its window fired; the
accuracy is counted / events. A window that never fires because the stream
ends counts as not fired, in both kinds and on both engines (no final flush).

Windows fired per vehicle under the global watermark (the derivation, the same
code for both engines): a vehicle's window [s, s + 10 s) would fire exactly
when the global window with the same start fires (the same watermark reaches
the same end), and it holds that vehicle's on-time events with that start. So
the per-vehicle windows fired are the distinct (vehicle, s) pairs among the
on-time events whose s is the start of a fired global window.

The oracle drives ``reference.keyed_watermarks``'s KeyedWatermarkTracker
(one ``apply_batch`` per micro-batch, as its stream does per segment) and
one KeyedTumblingWindowOperator per key (its windows are per key, R21; one
operator per key keeps the trigger cost per key). Spark runs
``spark_impl.keyed_watermarks.keyed_watermarks`` on the same micro-batches
(the ``trace`` source, Trigger.AvailableNow) and writes the late events, the
fired windows and the progress rows to parquet.

The keyed oracle run also keeps every vehicle's final watermark: compact.py
derives the compact tracker's accuracy from final watermarks, and run.py
checks that derivation against the keyed kind's window operators. The compact
tracker itself runs in compact.py, on the oracle only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import compact
import measure
import numpy as np
from variants import BOUND_MS, WINDOW_MS, Stream

GLOBAL_KEY = "all"
KINDS = ("global", "keyed")


@dataclass
class Outcome:
    """What one engine reported for one variant and kind."""

    late: np.ndarray  # sorted arrival positions of the late events
    windows: np.ndarray  # fired windows, rows (key index, window_start, count), sorted
    tracked_keys: int
    open_windows: int | None  # oracle only
    state_bytes: int | None  # Spark only: the live bytes of the state of both stages
    seconds: float
    final_watermark: np.ndarray | None = None  # oracle only: per vehicle index, compact.NO_WATERMARK for none

    @property
    def counted(self) -> int:
        return int(self.windows[:, 2].sum()) if len(self.windows) else 0


def _keys(stream: Stream, kind: str) -> np.ndarray:
    return stream.vehicle_names() if kind == "keyed" else np.full(len(stream), GLOBAL_KEY, dtype=object)


def _window_rows(keys: list[Hashable], starts: list[int], counts: list[int]) -> np.ndarray:
    """Windows as an int64 array sorted by (key, start); the key as its index in sorted key order."""
    if not keys:
        return np.empty((0, 3), np.int64)
    names, index = np.unique(np.asarray(keys, dtype=object).astype(str), return_inverse=True)
    rows = np.column_stack([index, np.asarray(starts, np.int64), np.asarray(counts, np.int64)])
    return rows[np.lexsort((rows[:, 1], rows[:, 0]))]


def run_oracle(stream: Stream, kind: str) -> Outcome:
    from reference.keyed_watermarks import (
        KeyedTumblingWindowOperator,
        KeyedWatermarkConfig,
        KeyedWatermarkTracker,
    )

    keys = _keys(stream, kind).tolist()
    times = stream.event_time.tolist()
    cuts = np.flatnonzero(np.diff(stream.batch)) + 1
    bounds = list(zip([0, *cuts.tolist()], [*cuts.tolist(), len(stream)], strict=True))
    started = time.perf_counter()
    tracker = KeyedWatermarkTracker(KeyedWatermarkConfig(bounded_delay=BOUND_MS))
    operators: dict[Hashable, KeyedTumblingWindowOperator] = {}
    late: list[int] = []
    fired_keys: list[Hashable] = []
    fired_starts: list[int] = []
    fired_counts: list[int] = []
    for first, end in bounds:
        outcomes = tracker.apply_batch(zip(keys[first:end], times[first:end], strict=True)).outcomes
        for position, o in enumerate(outcomes, start=first):
            if o.verdict != "on_time":
                late.append(position)
                continue
            op = operators.get(o.key)
            if op is None:
                op = operators[o.key] = KeyedTumblingWindowOperator(WINDOW_MS)
            op.add(o.key, o.event_time, 0)
        for key in dict.fromkeys(o.key for o in outcomes):
            if key in operators:
                for w in operators[key].trigger_key_windows(key, tracker.watermark_for_key(key)):
                    fired_keys.append(w.key)
                    fired_starts.append(w.window_start)
                    fired_counts.append(w.count)
    seconds = time.perf_counter() - started
    return Outcome(
        late=np.asarray(late, np.int64),
        windows=_window_rows(fired_keys, fired_starts, fired_counts),
        tracked_keys=tracker.total_key_count(),
        open_windows=sum(len(op.open_windows) for op in operators.values()),
        state_bytes=None,
        seconds=seconds,
        final_watermark=compact.final_watermarks(tracker, stream) if kind == "keyed" else None,
    )


def write_trace(stream: Stream, path: str) -> None:
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    write_trace_file(
        path,
        pa.table(
            {
                "batch": pa.array(stream.batch),
                "seq": pa.array(stream.seq),
                "vehicle": pa.array(stream.vehicle_names(), type=pa.string()),
                "event_time": pa.array(stream.event_time),
            }
        ),
    )


def run_spark(spark: Any, trace_path: str, stream: Stream, kind: str, work: str) -> Outcome:
    from pyspark.sql import functions as F

    from spark_impl.keyed_watermarks import keyed_watermarks
    from spark_impl.trace_source import SOURCE_NAME

    name = f"{kind}-{abs(hash(stream.variant.name))}"
    ckpt = os.path.join(work, f"ckpt-{name}")
    source = spark.readStream.format(SOURCE_NAME).option("path", trace_path).option("partitions", "2").load()
    key_col = "vehicle"
    if kind == "global":
        source, key_col = source.withColumn("one_key", F.lit(GLOBAL_KEY)), "one_key"
    kw = keyed_watermarks(
        source,
        key_col=key_col,
        event_time_col="event_time",
        bounded_delay_ms=BOUND_MS,
        window_size_ms=WINDOW_MS,
        seq_col="seq",
        batch_col="batch",
    )
    # On-time events are the complement of the late ones: only the late rows leave the operator's sink.
    kept = kw.output.filter((F.col("output") != "events") | (F.col("verdict") != "on_time"))
    run = measure.run_query(kept, "append", ckpt, sink="parquet")  # rows go to ckpt + "-out"
    rows = spark.read.parquet(ckpt + "-out")
    late = rows.filter(F.col("output") == "events").select("batch", "seq").toPandas()
    windows = rows.filter(F.col("output") == "windows").select("key", "window_start", "count").toPandas()
    last = rows.filter(F.col("output") == "progress").orderBy(F.col("batch").desc()).first()
    first_of_batch = np.searchsorted(stream.batch, np.arange(int(stream.batch.max()) + 1))
    positions = first_of_batch[late["batch"].to_numpy(np.int64)] + late["seq"].to_numpy(np.int64)
    return Outcome(
        late=np.sort(positions),
        windows=_window_rows(
            windows["key"].tolist(), windows["window_start"].tolist(), windows["count"].tolist()
        ),
        tracked_keys=int(last["total_keys"]) if last is not None else 0,
        open_windows=None,
        state_bytes=_state_bytes(spark, ckpt),
        seconds=run.wall,
    )


def _state_bytes(spark: Any, checkpoint: str) -> int:
    """Bytes of the operator's state at the last batch: every state variable of both stages."""
    return sum(measure.live_state_bytes(spark, checkpoint).values())


def windows_fired_per_vehicle(stream: Stream, outcome: Outcome, kind: str) -> int:
    """Keyed: the fired windows. Global: the derivation of the module docstring."""
    if kind == "keyed":
        return len(outcome.windows)
    kept = np.ones(len(stream), bool)
    kept[outcome.late] = False
    start = stream.event_time - stream.event_time % WINDOW_MS
    in_fired = kept & np.isin(start, outcome.windows[:, 1])
    pairs = np.unique(stream.vehicle[in_fired] * (1 << 40) + (start[in_fired] - start.min()))
    return len(pairs)


def check_equal(oracle: Outcome, spark: Outcome, label: str) -> None:
    """The Spark operator must report exactly the oracle's late events, fired windows and keys."""
    problems = []
    if not np.array_equal(oracle.late, spark.late):
        problems.append(f"late events: oracle {len(oracle.late):,}, spark {len(spark.late):,}")
    if not np.array_equal(oracle.windows, spark.windows):
        problems.append(
            f"fired windows: oracle {len(oracle.windows):,} counting {oracle.counted:,}, "
            f"spark {len(spark.windows):,} counting {spark.counted:,}"
        )
    if oracle.tracked_keys != spark.tracked_keys:
        problems.append(f"tracked keys: oracle {oracle.tracked_keys}, spark {spark.tracked_keys}")
    if problems:
        raise AssertionError(f"{label}: Spark differs from the oracle: " + "; ".join(problems))
