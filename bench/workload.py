"""The user's path, fixed: every operator beside its pinned Spark-native counterpart.

Every query reads Parquet files, one per micro-batch (``maxFilesPerTrigger=1``), and runs
at ``--master`` (default local[2]) with ``--partitions`` (8) shuffle partitions and Spark's
default Arrow chunking, ``Trigger.AvailableNow``. A run is ``--batches`` micro-batches of
``--events`` events each (the first is cold) followed by ``--tiny`` micro-batches of 10
events, whose trigger time is the fixed cost of a batch that carries almost nothing on a
running query. Event time rises 1 ms per event with +-500 ms of disorder; keys are uniform.

- ours: the operator's ``foreach_batch`` with a function that writes each micro-batch's rows
  to the noop sink (every operator runs its plan with the narrow step in the sink there);
- native: the counterpart named in ``OPERATORS`` (issue 38's table), to the noop sink;
- floor: ``floor_query``, the operator's shape (its stages, buckets and output columns) with
  none of its work: what any operator built as ``transformWithStateInPandas`` stages with the
  narrow step in the sink takes on this path.

Each run is a fresh Python subprocess with a fresh session; ours and native take turns
``--rounds`` times. Per run: the warm rate (events of batches 2.. over their trigger
times) and the median trigger time of the tiny batches; per operator the medians over the
rounds and the median of the per-round ratios ours/native. A benchmark prints figures; it
asserts nothing.

    .tox/spark/bin/python bench/workload.py --only keyed_watermarks --rounds 1   # one operator
    python bench/suite.py        # every operator and the batch-size sweep: docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming import StatefulProcessor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scaleout  # noqa: E402 - bench/scaleout.py: its session and subprocess environment

RESULT = "@@workload-result "
T0 = 1_700_000_000_000
TINY_EVENTS = 10
DELAY_MS = 1_000  # every watermark's delay: twice the disorder
SOURCES = 64  # late data, propagation and SLA streams: named sources, not keys


@dataclass(frozen=True)
class Operator:
    """One operator on the fixed workload: its rows, its query, its native counterpart."""

    area: str
    size: Callable[[int], str]  # --keys -> what the key count means for this operator
    native_label: str
    rows: Callable[[Any, Sequence[int], int], Any]  # (rng, batch sizes, keys) -> pandas frame with "batch"
    ours: Callable[[Any], Any]  # source DataFrame -> OperatorStreams
    native: Callable[[Any], tuple[Any, str]]  # source DataFrame -> (streaming DataFrame, output mode)
    unit: tuple[str, ...] = ("key",)  # the input columns whose hash picks a row's bucket in the floor
    stages: int = 1  # stateful Python stages of ours on this path (the floor runs as many)


# ---- the rows: one arrival order over every batch, so the tiny batches continue the stream ----


def arrivals(rng: Any, sizes: Sequence[int]) -> dict[str, Any]:
    import numpy as np

    batch = np.repeat(np.arange(len(sizes)), sizes)
    position = np.arange(len(batch), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return {
        "batch": batch,
        "seq": position - starts[batch],
        "event_time": T0 + position + rng.integers(-500, 500, len(batch)),
    }


def keyed_rows(rng: Any, sizes: Sequence[int], keys: int) -> Any:
    import numpy as np
    import pandas as pd

    cols = arrivals(rng, sizes)
    n = len(cols["batch"])
    cols["key"] = np.char.add("k", rng.integers(0, keys, n).astype(str))
    cols["value"] = rng.integers(0, 100, n)
    return pd.DataFrame(cols)


def partitioned_rows(rng: Any, sizes: Sequence[int], keys: int) -> Any:
    import pandas as pd

    cols = arrivals(rng, sizes)
    place = rng.integers(0, keys, len(cols["batch"]))
    cols["source"], cols["partition"] = place % 4, place // 4  # 4 sources of keys/4 partitions
    cols["kind"] = "event"
    return pd.DataFrame(cols)


def with_watermarks(events: Any, marks_per_batch: Callable[[int, int], list[dict[str, Any]]]) -> Any:
    """``events`` with watermark rows first in each batch (seq below the batch's events)."""
    import pandas as pd

    first = events.groupby("batch")["event_time"].min()  # the batch's arrival, minus its disorder
    marks = pd.DataFrame([m for b, t in first.items() for m in marks_per_batch(int(b), int(t))])
    events = events.assign(seq=events["seq"] + len(marks) // max(1, len(first)))
    frame = pd.concat([marks, events], ignore_index=True).sort_values(["batch", "seq"], kind="stable")
    # a column one kind of row leaves empty became float: keep integers integers, with nulls
    return frame.astype({c: "Int64" for c in frame.columns if frame[c].dtype.kind == "f"})


def late_rows(rng: Any, sizes: Sequence[int], keys: int) -> Any:
    """Each batch opens with one watermark per source at the batch's first event time: the
    events of its first half second that arrive out of order are late."""
    cols = arrivals(rng, sizes)
    cols["source"] = rng.integers(0, SOURCES, len(cols["batch"]))
    cols["kind"] = "event"
    import pandas as pd

    def marks(b: int, t: int) -> list[dict[str, Any]]:
        return [
            {"batch": b, "seq": s, "kind": "watermark", "source": s, "time": t + 500} for s in range(SOURCES)
        ]

    return with_watermarks(pd.DataFrame(cols), marks)


def propagation_rows(rng: Any, sizes: Sequence[int], keys: int) -> Any:
    import numpy as np
    import pandas as pd

    cols = arrivals(rng, sizes)
    cols["source"] = np.char.add("s", rng.integers(0, SOURCES, len(cols["batch"])).astype(str))
    return pd.DataFrame(cols)


def join_rows(rng: Any, sizes: Sequence[int], keys: int) -> Any:
    """Both sides in one arrival order; each batch opens with the join's input watermark, the
    batch's first event time minus the delay."""
    import numpy as np

    frame = keyed_rows(rng, sizes, keys)
    frame["side"] = np.where(rng.integers(0, 2, len(frame)) == 0, "left", "right")
    frame["kind"] = "event"

    def marks(b: int, t: int) -> list[dict[str, Any]]:
        return [{"batch": b, "seq": 0, "kind": "watermark", "time": t + 500 - DELAY_MS}]

    return with_watermarks(frame, marks)


def sla_rows(rng: Any, sizes: Sequence[int], keys: int) -> Any:
    """SLA streams named as bench/sla_admission.py does, arrival 1 ms apart, a load score per
    1,000 events; about a fifth of the events carry no priority."""
    import numpy as np
    import pandas as pd
    import sla_admission as bench_sla

    cols = arrivals(rng, sizes)
    n = len(cols["batch"])
    cols["arrived"] = T0 + np.arange(n, dtype=np.int64)
    cols["event_time"] = cols["arrived"] - rng.integers(0, 700, n)
    names = np.array([bench_sla.name_of(i) for i in range(SOURCES)], dtype=object)
    cols["stream"] = names[rng.integers(0, SOURCES, n)]
    cols["load"] = (rng.integers(0, 101, n // 1000 + 1) * 10)[np.arange(n) // 1000]
    priority = rng.integers(0, 5, n)
    frame = pd.DataFrame(cols)
    frame["priority"] = pd.array(np.where(priority == 4, 0, priority), dtype="Int64")
    frame.loc[priority == 4, "priority"] = pd.NA
    return frame


def exactly_once_rows(rng: Any, sizes: Sequence[int], keys: int) -> Any:
    """As bench/exactly_once_aggregation.py: 64 producers x 4 partitions numbering their
    messages in order; a tenth of the rows re-deliver one of the 2,000 messages before them."""
    import numpy as np
    import pandas as pd

    cols = arrivals(rng, sizes)
    n = len(cols["batch"])
    original = rng.random(n) >= 0.1
    original[0] = True
    producer, partition = rng.integers(0, 64, n), rng.integers(0, 4, n)
    sequence = pd.Series(np.zeros(n)).groupby([producer, partition]).cumcount().to_numpy(np.int64)
    key = rng.integers(0, keys, n)
    cents = rng.integers(-100_000, 100_000, n)
    # a re-delivery copies an earlier original's identity and payload
    earlier = np.maximum.accumulate(np.where(original, np.arange(n), 0))
    source = np.maximum(0, earlier - rng.integers(0, 2_000, n))
    source = np.where(original[source], source, earlier)
    pick = np.where(original, np.arange(n), source)
    cols.update(
        producer=producer[pick], partition=partition[pick], sequence=sequence[pick],
        key=np.char.add("k", key[pick].astype(str)),
        amount=np.array([repr(x) for x in (cents[pick] / 100).tolist()], dtype=object),
    )  # fmt: skip
    return pd.DataFrame(cols)


# ---- the queries ------------------------------------------------------------------------------


def plain(*columns: str) -> Callable[[Any], tuple[Any, str]]:
    def build(df: Any) -> tuple[Any, str]:
        from pyspark.sql import functions as F

        return df.groupBy(*columns).agg(F.max("event_time").alias("m"), F.count("*").alias("n")), "update"

    return build


def operators() -> dict[str, Operator]:
    from pyspark.sql import functions as F

    def keyed(df: Any) -> Any:
        from spark_impl.keyed_watermarks import keyed_watermarks

        return keyed_watermarks(
            df, key_col="key", event_time_col="event_time", seq_col="seq", seq_unique=True,
            bounded_delay_ms=DELAY_MS, idle_timeout_ms=60_000,
        )  # fmt: skip

    def partitioned(df: Any) -> Any:
        from spark_impl.partitioned_watermarks import partitioned_watermarks

        return partitioned_watermarks(
            df, source_col="source", partition_col="partition", event_time_col="event_time",
            kind_col="kind", seq_col="seq", seq_unique=True, auto_register=True,
        )  # fmt: skip

    def buffer(df: Any) -> Any:
        from spark_impl.eventtime_buffer import eventtime_buffer

        return eventtime_buffer(
            df, eventtime_col="event_time", late_tolerance_ms=DELAY_MS, key_col="key",
            value_col="value", seq_col="seq", seq_unique=True,
        )  # fmt: skip

    def sessions(df: Any) -> Any:
        from spark_impl.session_windows import session_windows

        return session_windows(
            df, key_col="key", event_time_col="event_time", gap_ms=30_000, bounded_delay_ms=DELAY_MS,
            value_col="value", seq_col="seq", seq_unique=True,
        )  # fmt: skip

    def native_sessions(df: Any) -> tuple[Any, str]:
        out = (
            df.withColumn("ts", F.timestamp_millis("event_time"))
            .withWatermark("ts", f"{DELAY_MS} milliseconds")
            .groupBy("key", F.session_window("ts", "30 seconds"))
            .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
        )  # fmt: skip
        return out, "append"

    def late(df: Any) -> Any:
        from spark_impl.late_data import late_data

        return late_data(
            df, event_time_col="event_time", source_col="source", kind_col="kind", seq_col="seq",
            time_col="time", seq_unique=True, policy="SideOutput", channel="late",
            window_size_ms=2_000, allowed_lateness_ms=500,
        )  # fmt: skip

    def native_late(df: Any) -> tuple[Any, str]:
        out = (
            df.filter(F.col("kind") == "event").withColumn("ts", F.timestamp_millis("event_time"))
            .withWatermark("ts", f"{DELAY_MS} milliseconds")
            .groupBy("source", F.window("ts", "2 seconds")).count()
        )  # fmt: skip
        return out, "append"

    def propagation(df: Any) -> Any:
        from spark_impl.watermark_propagation import watermark_propagation

        names = [f"s{i}" for i in range(SOURCES)]
        return watermark_propagation(
            df, nodes=[*names, "merge", "sink"], edges=[*([s, "merge"] for s in names), ["merge", "sink"]],
            node_col="source", event_time_col="event_time", seq_col="seq", seq_unique=True,
            advance_threshold=100, max_out_of_order_ms=DELAY_MS,
        )  # fmt: skip

    def joins(df: Any) -> Any:
        from spark_impl.window_joins import window_join_rows

        return window_join_rows(
            df, join="tumbling_tumbling", size_ms=10_000, side_col="side", key_col="key",
            time_col="event_time", value_col="value", kind_col="kind", watermark_col="time",
            seq_col="seq", seq_unique=True,
        )  # fmt: skip

    def native_joins(df: Any) -> tuple[Any, str]:
        from properties.test_window_joins_native import native_join

        return native_join(df, {"join": "tumbling_tumbling", "size_ms": 10_000}, delay_ms=DELAY_MS), "append"

    def sla(df: Any) -> Any:
        import sla_admission as bench_sla

        from spark_impl.sla_admission import sla_admission

        return sla_admission(
            df, stream_col="stream", event_time_col="event_time", now_col="arrived", load_col="load",
            priority_col="priority", seq_col="seq", seq_unique=True, **bench_sla.config_for(SOURCES),
        )  # fmt: skip

    def native_sla(df: Any) -> tuple[Any, str]:
        return df.groupBy("stream").count(), "update"

    def exactly_once(df: Any) -> Any:
        from spark_impl.exactly_once_aggregation import exactly_once_aggregation

        return exactly_once_aggregation(
            df, producer_col="producer", partition_col="partition", sequence_col="sequence",
            key_col="key", amount_col="amount", seq_col="seq", seq_unique=True, aggregate="sum",
        )  # fmt: skip

    def native_exactly_once(df: Any) -> tuple[Any, str]:
        out = (
            df.withColumn("ts", F.timestamp_millis("event_time"))
            .withColumn("x", F.col("amount").cast("double"))
            .withWatermark("ts", "1 hour")
            .dropDuplicatesWithinWatermark(["producer", "partition", "sequence"])
            .groupBy("key").agg(F.sum("x").alias("total"))
        )  # fmt: skip
        return out, "update"

    def keys(k: int) -> str:
        return f"{k:,} keys"

    def sources(_: int) -> str:
        return f"{SOURCES} sources"

    def partitions(k: int) -> str:
        return f"4 sources x {k // 4:,} partitions"

    by_key = "groupBy(key).agg(max, count), update"
    return {
        op.area: op
        for op in (
            Operator("keyed_watermarks", keys, by_key, keyed_rows, keyed, plain("key")),
            Operator(
                "partitioned_watermarks",
                partitions,
                "groupBy(source, partition).agg(max, count), update",
                partitioned_rows,
                partitioned,
                plain("source", "partition"),
                unit=("source", "partition"),
            ),  # fmt: skip
            Operator(
                "late_data",
                sources,
                "withWatermark + groupBy(source, window).count(), append",
                late_rows,
                late,
                native_late,
                unit=("source",),
            ),  # fmt: skip
            Operator(
                "watermark_propagation",
                sources,
                "groupBy(source).agg(max, count), update",
                propagation_rows,
                propagation,
                plain("source"),
                unit=("source",),
            ),  # fmt: skip
            Operator(
                "session_windows",
                keys,
                "withWatermark + groupBy(key, session_window), append",
                keyed_rows,
                sessions,
                native_sessions,
                stages=2,
            ),  # fmt: skip
            Operator("eventtime_buffer", keys, by_key, keyed_rows, buffer, plain("key"), unit=("seq",)),
            Operator(
                "window_joins",
                keys,
                "stream-stream join on key and window, watermarks, append",
                join_rows,
                joins,
                native_joins,
            ),  # fmt: skip
            Operator(
                "sla_admission",
                sources,
                "groupBy(stream).count(), update",
                sla_rows,
                sla,
                native_sla,
                unit=("stream",),
            ),  # fmt: skip
            Operator(
                "exactly_once_aggregation",
                keys,
                "withWatermark + dropDuplicatesWithinWatermark + groupBy(key).agg(sum), update",
                exactly_once_rows,
                exactly_once,
                native_exactly_once,
                unit=("producer", "partition"),
                stages=2,
            ),  # fmt: skip
        )
    }


# ---- the floor: the operator's shape with none of its work --------------------------------------


def floor_query(op: Operator, df: Any, checkpoint: str) -> Any:
    """The floor of ``op`` on this path: ``op.stages`` ``transformWithStateInPandas`` stages of
    the operator's bucket count, grouped by a hash of its unit columns (each bucket under its
    spread label, as the operators group theirs), one ValueState each,
    each handing every input row back in the columns and types of the operator's one-stage
    stream (its ``sink_rows``) and deciding nothing; then the sink step's reads (the batch
    computed once, its summary rows to the driver, every row to the noop sink). What an
    operator built this way cannot beat: the fixed cost of its stages and every row's trip
    through Python and back."""
    from pyspark.sql import functions as F

    from spark_impl.common import computed_once
    from spark_impl.scaleout import ROUTE, SUMMARY_ROUTE, default_buckets, spread_labels

    fields = [(f.name, f.dataType.simpleString()) for f in op.ours(df).sink_rows.schema.fields]
    fields = [(name, kind) for name, kind in fields if name != "floor_bucket"]
    buckets = default_buckets(df.sparkSession)
    schema = ", ".join(["`floor_bucket` long", *(f"`{n}` {k}" for n, k in fields)])
    rows = df.withColumn("floor_bucket", F.pmod(F.xxhash64(*op.unit), F.lit(buckets)))
    for stage in range(op.stages):
        if stage:  # another grouping, so Spark shuffles between the stages as the operator's do
            rows = rows.select(
                F.pmod(F.col("floor_bucket") + 1, F.lit(buckets)).alias("floor_bucket"),
                *[F.col(n) for n, _ in fields],
            )  # fmt: skip
        rows = spread_labels(rows, "floor_bucket", buckets, None).groupBy("floor_bucket")
        rows = rows.transformWithStateInPandas(
            PassThrough(fields), outputStructType=schema, outputMode="Append", timeMode="None"
        )

    def each(batch: Any, batch_id: int) -> None:
        with computed_once(batch) as kept:
            kept.filter(F.col(ROUTE) == SUMMARY_ROUTE).toPandas()
            kept.write.format("noop").mode("overwrite").save()

    return (
        rows.writeStream.foreachBatch(each)
        .trigger(availableNow=True)
        .option("checkpointLocation", checkpoint)
        .start()
    )


class PassThrough(StatefulProcessor):  # type: ignore[misc]
    """Every input row back in the given columns: longs from the event time, texts from the
    first text column, the route of a table row; one ValueState read and written per call."""

    def __init__(self, fields: Sequence[tuple[str, str]]) -> None:
        self.fields = list(fields)

    def init(self, handle: Any) -> None:
        self.calls = handle.getValueState("calls", "n long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
        import numpy as np
        import pandas as pd

        pdf = pd.concat(list(rows), ignore_index=True)
        seen = self.calls.get()
        self.calls.update(((seen[0] if seen else 0) + 1,))
        n = len(pdf)
        times = pdf["event_time"].to_numpy(np.int64) if "event_time" in pdf else np.zeros(n, np.int64)
        texts = [c for c in pdf.columns if pdf[c].dtype == object]
        text = pdf[texts[0]].astype(str) if texts else pd.Series(["x"] * n)
        fill = {"bigint": times, "int": times.astype(np.int32), "double": times.astype(np.float64),
                "boolean": np.zeros(n, bool), "string": text, "binary": [b""] * n}  # fmt: skip
        out = {"floor_bucket": np.full(n, key[0], np.int64)}
        for name, kind in self.fields:
            out[name] = np.full(n, key[0], np.int64) if name == "kw_route" else fill[kind]
        yield pd.DataFrame(out)

    def close(self) -> None:
        pass


# ---- the child: one engine, one session ------------------------------------------------------


def write_batches(folder: str, frame: Any) -> list[int]:
    """One Parquet file per batch, file times one second apart so the source takes them in
    order; returns the events per batch (watermark rows are not events)."""
    events = []
    for b, rows in frame.groupby("batch", sort=True):
        path = os.path.join(folder, f"batch-{int(b):05d}.parquet")
        rows.drop(columns="batch").to_parquet(path, index=False)
        os.utime(path, (1_000_000 + int(b), 1_000_000 + int(b)))
        events.append(int((rows["kind"] == "event").sum()) if "kind" in rows else len(rows))
    return events


def child(spec: dict[str, Any]) -> None:
    import warnings

    import numpy as np
    import pyarrow.parquet as pq

    op = operators()[spec["area"]]
    log_dir = spec.get("event_log")  # bench/spread.py: where Spark writes its event log
    spark = scaleout.start_session(spec["master"], spec["partitions"], log_dir)
    spark.sparkContext.setLogLevel("ERROR")
    source = os.path.join(spec["work"], "source")
    os.makedirs(source)
    sizes = [spec["events"]] * spec["batches"] + [TINY_EVENTS] * spec["tiny"]
    events = write_batches(source, op.rows(np.random.default_rng(spec["seed"]), sizes, spec["keys"]))
    schema = pq.read_schema(os.path.join(source, "batch-00000.parquet"))
    df = spark.readStream.schema(spark_schema(schema)).option("maxFilesPerTrigger", 1).parquet(source)
    checkpoint = os.path.join(spec["work"], "checkpoint")
    if spec["engine"] == "floor":
        query = floor_query(op, df, checkpoint)
    elif spec["engine"] == "ours":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the operators' advice about clocks: none here
            query = op.ours(df).foreach_batch(noop_batch, checkpoint, trigger={"availableNow": True})
    else:
        query = to_noop(*op.native(df), checkpoint)
    finish(query)
    query_id = str(query.id)
    progress = [
        {"batch": p.batchId, "rows": p.numInputRows, "trigger_ms": p.durationMs["triggerExecution"]}
        for p in query.recentProgress
        if p.numInputRows
    ]
    spark.stop()  # closes the event log
    result: dict[str, Any] = {"progress": progress, "events": events}
    if log_dir:
        found = scaleout.stateful_stages(scaleout.event_log_file(log_dir))
        result["stages"] = scaleout.stage_shapes(found.get(query_id, {}))
    print(RESULT + json.dumps(result), flush=True)


def noop_batch(rows: Any, batch_id: int) -> None:
    """A ``foreach_batch`` function: the micro-batch's rows to the noop sink."""
    rows.write.format("noop").mode("overwrite").save()


def to_noop(df: Any, mode: str, checkpoint: str) -> Any:
    """Starts ``df`` to the noop sink, in ``mode``, until the files are read."""
    return (
        df.writeStream.format("noop").outputMode(mode).trigger(availableNow=True)
        .option("checkpointLocation", checkpoint).start()
    )  # fmt: skip


def finish(query: Any) -> None:
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def spark_schema(schema: Any) -> str:
    """The Parquet files' columns as a DDL string (a file source needs its schema up front)."""
    names = {"int64": "long", "string": "string", "large_string": "string", "double": "double"}
    return ", ".join(f"`{f.name}` {names[str(f.type)]}" for f in schema)


# ---- the parent -------------------------------------------------------------------------------


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """One run in a subprocess: its warm rate and its fixed cost."""
    result = scaleout.script_result(__file__, spec, RESULT, f"{spec['area']} {spec['engine']}")
    big = [p for p in result["progress"] if p["batch"] < spec["batches"]]
    tiny = [p for p in result["progress"] if p["batch"] >= spec["batches"]]
    if len(big) != spec["batches"] or len(tiny) != spec["tiny"]:
        raise RuntimeError(
            f"{spec['area']} {spec['engine']}: batches {[p['batch'] for p in result['progress']]}"
        )
    warm = big[1:]
    warm_events = sum(result["events"][p["batch"]] for p in warm)
    return {
        "warm_events_per_s": warm_events / (sum(p["trigger_ms"] for p in warm) / 1000),
        "batch_ms": statistics.median(p["trigger_ms"] for p in warm),
        "first_batch_ms": big[0]["trigger_ms"],
        "fixed_ms": statistics.median(p["trigger_ms"] for p in tiny) if tiny else None,
    }


def compare(area: str, args: argparse.Namespace, base: str) -> dict[str, Any]:
    """Ours, native and the floor on one operator, taking turns (native first in each round)."""
    runs: dict[str, list[dict[str, Any]]] = {"native": [], "ours": [], "floor": []}
    for r in range(args.rounds):
        for engine in runs:
            work = tempfile.mkdtemp(prefix=f"{area}-{engine}-{r}-", dir=base)
            spec = {
                "area": area, "engine": engine, "work": work, "master": args.master,
                "partitions": args.partitions, "events": args.events, "batches": args.batches,
                "tiny": args.tiny, "keys": args.keys, "seed": r,
            }  # fmt: skip
            runs[engine].append(run(spec))
            shutil.rmtree(work, ignore_errors=True)
    median = statistics.median
    row = {
        engine: {k: median(x[k] for x in rs) for k in rs[0] if rs[0][k] is not None} | {"runs": rs}
        for engine, rs in runs.items()
    }
    for engine in ("ours", "floor"):
        row["ratio" if engine == "ours" else "floor_ratio"] = median(
            o["warm_events_per_s"] / n["warm_events_per_s"]
            for o, n in zip(runs[engine], runs["native"], strict=True)
        )
    op = operators()[area]
    row.update(area=area, size=op.size(args.keys), native_label=op.native_label, stages=op.stages)
    o, n, f = row["ours"], row["native"], row["floor"]
    print(
        f"{area:26} ours {o['warm_events_per_s']:>9,.0f} ev/s, {o['batch_ms']:>6,.0f} ms/batch, fixed "
        f"{o.get('fixed_ms', 0):>5,.0f} ms | native {n['warm_events_per_s']:>9,.0f} ev/s, "
        f"{n['batch_ms']:>6,.0f} ms/batch, fixed {n.get('fixed_ms', 0):>5,.0f} ms | {row['ratio']:.2f}x | "
        f"floor {f['warm_events_per_s']:>9,.0f} ev/s, {f['batch_ms']:>6,.0f} ms/batch, fixed "
        f"{f.get('fixed_ms', 0):>5,.0f} ms, {row['floor_ratio']:.2f}x",
        flush=True,
    )
    return row


def batch_sizes(args: argparse.Namespace, base: str, sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Keyed watermarks and its counterpart at each batch size, one run each, taking turns;
    8 micro-batches per run for small sizes, fewer (down to 3: 2 warm) where 8 would pass
    200,000 events."""
    rows = []
    for events in sizes:
        batches = max(3, min(8, 1 + 200_000 // events))
        row: dict[str, Any] = {"events": events, "batches": batches}
        for engine in ("native", "ours"):
            work = tempfile.mkdtemp(prefix=f"size-{events}-{engine}-", dir=base)
            spec = {
                "area": "keyed_watermarks", "engine": engine, "work": work, "master": args.master,
                "partitions": args.partitions, "events": events, "batches": batches, "tiny": 0,
                "keys": args.keys, "seed": 0,
            }  # fmt: skip
            row[engine] = run(spec)
            shutil.rmtree(work, ignore_errors=True)
        print(
            f"batch of {events:>9,}: ours {row['ours']['warm_events_per_s']:>9,.0f} ev/s, native "
            f"{row['native']['warm_events_per_s']:>9,.0f} ev/s",
            flush=True,
        )
        rows.append(row)
    return rows


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload's settings, which bench/suite.py takes too."""
    parser.add_argument("--only", nargs="+", help="operators (spec areas) to run; default: all")
    parser.add_argument("--events", type=int, default=100_000, help="events per micro-batch")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument(
        "--batches", type=int, default=5, help="full micro-batches per run (the first is cold)"
    )
    parser.add_argument(
        "--tiny", type=int, default=3, help="10-event micro-batches after them: the fixed cost"
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs per engine, taking turns")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=8, help="spark.sql.shuffle.partitions")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    add_workload_arguments(parser)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    base = tempfile.mkdtemp(prefix="workload-")
    try:
        rows = [compare(area, args, base) for area in (args.only or operators())]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "operators": rows}, f, indent=1)


if __name__ == "__main__":
    main()
