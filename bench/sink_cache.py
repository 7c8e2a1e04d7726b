"""How a sink step keeps a micro-batch for its two reads: Spark's cache or a local checkpoint.

A sink step (spark_impl.scaleout.SinkStep, and write_tables's per-table writes) reads each
micro-batch twice, the summaries to the driver and then the table rows to the sink, so the
batch must be computed once and kept: running it again would run the stateful stage again.
This compares the ways of keeping it on a bare ``transformWithStateInPandas`` pass-through
(one ValueState, every input row back with ``--columns`` extra long columns, like an
operator's wide stage), Parquet files of ``--events`` events over 10,000 keys, local[2], 8
shuffle partitions, the noop sink:

- ``once``: no second read, the batch written once (the floor);
- ``persist``: ``persist()``, the summary read, the write, ``unpersist()`` (before);
- ``local_checkpoint``: ``spark_impl.common.computed_once`` (a local checkpoint), the summary
  read, the write (now).

Each way runs in a fresh subprocess; the ways take turns for ``--rounds`` rounds. Printed:
the median over the rounds of each run's median warm trigger time (batches 2..), and each
way's extra time over ``once``. A benchmark prints figures; it asserts nothing.

    .tox/spark/bin/python bench/sink_cache.py            # about 3 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scaleout  # noqa: E402 - bench/scaleout.py: its session and subprocess environment

RESULT = "@@sink-cache-result "
WAYS = ("once", "persist", "local_checkpoint")


def child(spec: dict[str, Any]) -> None:
    import numpy as np
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StatefulProcessor

    from spark_impl.common import computed_once

    spark = scaleout.start_session("local[2]", 8)
    spark.sparkContext.setLogLevel("ERROR")
    source = os.path.join(spec["work"], "source")
    os.makedirs(source)
    rng = np.random.default_rng(0)
    n = spec["events"]
    for b in range(spec["batches"]):
        path = os.path.join(source, f"batch-{b:05d}.parquet")
        keys = rng.integers(0, 10_000, n)
        frame = pd.DataFrame(
            {"key": [f"key-{k}" for k in keys], "t": np.arange(n) + b * n, "seq": np.arange(n)}
        )
        frame.to_parquet(path, index=False)
        os.utime(path, (1_000_000 + b, 1_000_000 + b))
    df = (
        spark.readStream.schema("key string, t long, seq long")
        .option("maxFilesPerTrigger", 1)
        .parquet(source)
    )
    df = df.withColumn("bucket", F.pmod(F.xxhash64("key"), F.lit(32)))
    extra = [f"c{i}" for i in range(spec["columns"])]
    schema = "bucket long, key string, t long, seq long" + "".join(f", {c} long" for c in extra)

    class PassThrough(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            self.seen = handle.getValueState("seen", "n long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            pdf = pd.concat(list(rows), ignore_index=True)
            out = pd.DataFrame({"bucket": np.full(len(pdf), key[0], np.int64), "key": pdf["key"],
                                "t": pdf["t"], "seq": pdf["seq"]})  # fmt: skip
            for c in extra:
                out[c] = pdf["t"].to_numpy()
            yield out

        def close(self) -> None:
            pass

    out = df.groupBy("bucket").transformWithStateInPandas(PassThrough(), schema, "Append", "None")
    way = spec["way"]

    def each(batch: Any, batch_id: int) -> None:
        if way == "once":
            batch.write.format("noop").mode("overwrite").save()
        elif way == "persist":
            batch.persist()
            try:
                batch.filter(F.col("seq") < 0).toPandas()
                batch.write.format("noop").mode("overwrite").save()
            finally:
                batch.unpersist()
        else:
            with computed_once(batch) as kept:
                kept.filter(F.col("seq") < 0).toPandas()
                kept.write.format("noop").mode("overwrite").save()

    checkpoint = os.path.join(spec["work"], "checkpoint")
    query = (
        out.writeStream.foreachBatch(each).trigger(availableNow=True)
        .option("checkpointLocation", checkpoint).start()
    )  # fmt: skip
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    trigger = [p.durationMs["triggerExecution"] for p in query.recentProgress if p.numInputRows]
    spark.stop()
    print(RESULT + json.dumps({"trigger_ms": trigger}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--events", type=int, default=100_000, help="events per micro-batch")
    parser.add_argument("--batches", type=int, default=5, help="micro-batches per run (the first is cold)")
    parser.add_argument("--columns", type=int, default=35, help="extra long columns in the stage's output")
    parser.add_argument("--rounds", type=int, default=3, help="runs per way, taking turns")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    base = tempfile.mkdtemp(prefix="sink-cache-")
    medians: dict[str, list[float]] = {way: [] for way in WAYS}
    try:
        for r in range(args.rounds):
            for way in WAYS:
                work = tempfile.mkdtemp(prefix=f"{way}-{r}-", dir=base)
                spec = {"way": way, "work": work, "events": args.events, "batches": args.batches,
                        "columns": args.columns}  # fmt: skip
                result = scaleout.script_result(__file__, spec, RESULT, f"sink_cache {way}")
                medians[way].append(statistics.median(result["trigger_ms"][1:]))
                print(f"round {r + 1} {way:17s} warm trigger ms {result['trigger_ms'][1:]}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    once = statistics.median(medians["once"])
    shape = f"{args.events:,} events per micro-batch, {4 + args.columns} columns"
    print(f"\n{shape}, medians of {args.rounds} rounds:")
    for way in WAYS:
        m = statistics.median(medians[way])
        print(f"  {way:17s} {m:7,.0f} ms per micro-batch, {m - once:+6,.0f} ms over once")


if __name__ == "__main__":
    main()
