"""Per-partition watermarks (F064) on Spark Structured Streaming, spread over the cluster.

Usage
-----
Apply the operator to a streaming DataFrame whose rows carry a source id, a
partition number and an event time, and write its output::

    from spark_impl.partitioned_watermarks import partitioned_watermarks

    pw = partitioned_watermarks(
        df,                           # a streaming DataFrame
        source_col="source",          # integer source id >= 0
        partition_col="partition",    # integer partition 0 .. 2^32-1
        event_time_col="ts",          # LongType milliseconds, or TimestampType
        idle_timeout_ms=60000,
        max_lateness_ms=0,            # partition watermark = event time - max_lateness
        auto_register=True,           # a Kafka-like stream without register rows
        processing_time_col=None,     # e.g. "arrival" or "current_timestamp" (below)
    )
    q = (pw.output.writeStream.format("parquet")
         .option("checkpointLocation", ckpt).start(path))

``pw.output`` is the one combined stream (schema ``OUTPUT_SCHEMA``); its
``output`` column names the table of a row. The projections (each its own
streaming plan; write ``pw.output`` once to get every table from one run):

- ``pw.progress``: one row per stream and micro-batch: the combined watermark,
  the partition gauges and the counters watermark_advances and rebalances
  (F064-R7, R16, R21).
- ``pw.partitions``: per micro-batch, the partitions whose (watermark, state,
  core) differ from the start of the micro-batch; state active | idle |
  removed (F064-R21).
- ``pw.sources``: per micro-batch, the registered sources whose (source
  watermark, active partitions) changed (F064-R14, R21).
- ``pw.errors``: rows refused (F064-R22) with the reason.

Optional input columns: ``stream_id_col`` (many independent streams in one
query), ``seq_col`` (arrival order inside a micro-batch; without it the rows
of a micro-batch are one step, taken in event-time order, ties by source and
partition, and an error row has a null ``seq`` and ends no step),
``kind_col`` (needs ``seq_col``: event | watermark | clock | idle | active |
register_source | add_partition | remove_partition | assign_core, and the
harness's batch_end marker), ``time_col`` (the time of clock and watermark
rows), ``count_col`` (register_source), ``core_col`` (assign_core),
``batch_col`` (the batch number reported; without it ``batch`` is the
micro-batch's start instant in epoch milliseconds, Spark's
``current_timestamp()``, the same in every row of a micro-batch).
Rebalancing is expressed as control rows in the stream itself
(register_source re-registration, add_partition, remove_partition,
assign_core). ``stream_configs`` maps a stream id to its own trace-style
settings (``idle_timeout``, ``max_lateness``).

Streams without register rows: with ``auto_register=False`` (the default,
exactly F064) an event of an unregistered source or untracked partition is an
error row (unknown_source / unknown_partition), as the oracle reports it.
With ``auto_register=True`` such an event first registers its source (no
rebalance, like a first registration, F064-R2) and adds the partition fresh
(F064-R3; counted as discovery, not as a rebalance), then updates it in the
same step. A partition that never sent a row is then unknown and cannot hold
the combined watermark back: a Kafka-like stream that knows its partition
count should send a register_source row instead. Control rows naming unknown
partitions stay errors in both modes.

Processing time (F064-R3, R11) is never read from the wall clock by the
operator. By default it is the time of the latest ``clock`` row of the stream
(starting at 0), as in a trace; a clock row runs the idle check. With
``processing_time_col`` it comes from the data instead, for pipelines on a
real source (no ``kind_col`` then): the name of a column (epoch milliseconds
or a timestamp, such as the source's arrival time), or ``"current_timestamp"``
for the micro-batch's start instant. Each micro-batch then behaves as if a
clock row carrying the latest such time of the stream's rows came first: the
clock moves (never back), partitions silent for longer than
``idle_timeout_ms`` go idle, and partitions discovered in the micro-batch
are active from that time.

Design
------
``docs/architecture.md`` draws the stages and gives the cost model. In short:

- WIDE STAGE, grouped by (stream, bucket): an event or watermark row that is
  well formed goes to its partition's bucket ``pmod(pmod(source, buckets) +
  partition, buckets)`` (a Kafka topic's partitions 0..n-1 fill the buckets
  evenly); every other row (clock, idle, active, register_source,
  add_partition, remove_partition, assign_core, a malformed row) is copied
  to every bucket of its stream by a stateless ``explode``, so each bucket
  sees the stream's whole sequence of calls (F064-R20) and applies those
  that concern its partitions. A bucket also keeps the registered sources
  and the tracked set (a few intervals per source) since every row that
  changes them reaches every bucket. The partition watermarks, idle checks,
  rebalances, the ``partitions`` table and the error rows come out of this
  stage, spread over every shuffle partition.
- STATE of a bucket: a ``MapState`` from (source, block) to one small block
  of partitions (block = partition // buckets // ``block_partitions``: the
  bucket's partitions of a source in order, at most ``block_partitions``
  per value), and a ``ValueState`` with the clock, the sources, the tracked
  set and one summary row per block (partitions, idle, active without a
  watermark, lowest active watermark, partitions with a watermark, highest
  watermark, earliest activity of an active partition). A micro-batch reads
  the blocks its rows name, all blocks of a source it re-registers, and the
  blocks a clock row may idle (from the summary); the rest is answered by
  the summary.
- NARROW STAGE (route -1 of the second ``transformWithStateInPandas``):
  after every call (a step of updates or a control row) a bucket emits its
  summary (the figures of F064-R6 over its partitions) when it changed; the
  narrow group of the stream keeps each bucket's latest summary and
  evaluates the combined watermark at every call, so it only rises (R7) and
  a step advances it at most once (R16, R20). Per bucket and source a
  summary at the end of the micro-batch gives the source watermarks (R14)
  and the ``sources`` table. Calls are named by the ``seq`` of the row that
  ends them.
- SINK STEP: ``write_tables`` and ``foreach_batch`` run the narrow group's work in
  the sink instead (``spark_impl.scaleout.SinkStep``): each micro-batch's rows of route
  -1 are collected to the driver and folded with the stream's state (its value and its
  ``sources`` entries), kept in two slots under ``<checkpoint>/sink_step/``; ``output``
  runs it in a second stateful stage.
- STEPS BROKEN BY AN UNKNOWN PARTITION (F064-R22): an update naming an
  untracked partition ends the step, but only its own bucket sees it. A
  stateless ``mapInArrow`` step before the shuffle adds, per input partition,
  stream and source, one probe row (first seq, lowest and highest partition
  named) copied to every bucket. When every named partition is tracked
  throughout the micro-batch (the usual case), buckets emit a summary per
  call; otherwise, for that micro-batch, a bucket also emits its summary
  after every update that changed it, and the narrow stage evaluates at
  each break any bucket reports. With ``auto_register`` the probes carry the
  sources registered by their first event to every bucket.
- ORDER: inside a micro-batch the rows of a stream are taken by the ``seq``
  column, never by their physical order. SATURATING i64 arithmetic is
  explicit; long columns cross between the stages as a value and a null
  mask, never as floats.
- RESTART (F064-R23): everything is in the state store under the checkpoint;
  ``buckets`` is fixed in it (a different value is refused with a message
  naming both), and so is ``block_partitions`` (the stored one is used).
- Not kept: a partition's last event time (F064-R3 state, not observable in
  any output).

Modules
-------
``settings`` (a stream's settings, their validation, the layout version), ``layout`` (the
output columns, the columns between the stages, a set's figures, the partitions a bucket reads,
the state values and how they pack), ``stages`` (the wide stage's bucket processor and the
narrow stage's per-stream step); this module holds the operator, its probes and routing, the
native comparison, its registered layout and the engine's call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from harness.traces import InvalidConfig
from spark_impl.checkpoints import (
    Operator,
    Stage,
    register,
    schema_fields,
    value_buckets,
)
from spark_impl.common import (
    OperatorStreams,
    check_columns,
    event_time_millis,
    long_or_zero,
    micro_batch_start_millis,
    millis_column,
    native_watermark_progress,
    place_flags,
    require_int,
    split_unplaced,
    stream_id_column,
    stream_settings,
    table_projections,
    warn_once,
    warn_without_seq,
    with_unplaced_errors,
)
from spark_impl.partitioned_watermarks.layout import (
    LONG_COLS,
    MARKER,
    OUTPUT_COLUMNS,
    OUTPUT_SCHEMA,
    PASS_SCHEMA,
    PROBE,
    SOURCE_KEY_SCHEMA,
    SOURCE_SCHEMA,
    STREAM_SCHEMA,
    TABLE_COLUMNS,
    TICK,
    UPDATE_KINDS,
    WIDE_SCHEMA,
    BucketState,
    Partitions,
    StreamState,
    Tracked,
    pack_block,
    unpack_blocks,
)
from spark_impl.partitioned_watermarks.settings import (
    DEFAULT_BLOCK_PARTITIONS,
    LAYOUT_VERSION,
    U32_MAX,
    StreamConfig,
    validate_config,
)
from spark_impl.partitioned_watermarks.stages import (
    PartitionBucketProcessor,
    StreamSummaryProcessor,
    unpack_source_figures,
)
from spark_impl.scaleout import (
    CURRENT_TIMESTAMP,
    SinkStep,
    default_buckets,
    flag_duplicate_seqs,
    one_stage,
    processing_time,
    restore_nulls,
    to_buckets,
    two_stages,
    with_ticks,
)
from spark_impl.session import prepare_session

# ---- the probes: what each input partition's updates name ----------------------


def with_probes(rows: Any) -> Any:
    """Adds, per input partition, stream, batch and source, one ``probe`` row: the first seq
    of the source's well-formed updates, the lowest partition they name (``pw_partition``)
    and the highest (``pw_count``). Probes reach every bucket, which learns from them where
    an update it does not see may be refused (F064-R22) or register its source."""
    from pyspark.sql.types import StructField, StructType

    schema = StructType([StructField(f.name, f.dataType, True) for f in rows.schema.fields])

    def add_probes(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        seen: dict[tuple[str, int, int], list[int]] = {}
        last_schema = None
        for batch in batches:
            last_schema = batch.schema
            if batch.num_rows:
                t = pa.table(batch)
                kind = t.column("pw_kind")
                src, part = t.column("pw_source"), t.column("pw_partition")
                ok = pc.and_(
                    pc.is_in(kind, pa.array(list(UPDATE_KINDS))),
                    pc.and_(pc.invert(t.column("pw_source_null")), pc.invert(t.column("pw_partition_null"))),
                )
                ok = pc.and_(ok, pc.and_(pc.greater_equal(src, 0), pc.greater_equal(part, 0)))
                ok = pc.and_(ok, pc.less_equal(part, U32_MAX))
                timed = pc.if_else(
                    pc.equal(kind, "event"),
                    pc.invert(t.column("pw_event_time_null")),
                    pc.invert(t.column("pw_time_null")),
                )
                ok = pc.and_(ok, timed)
                good = t.filter(pc.fill_null(ok, False))
                if good.num_rows:
                    g = good.group_by(["pw_sid", "pw_batch", "pw_source"]).aggregate(
                        [("pw_seq", "min"), ("pw_partition", "min"), ("pw_partition", "max")]
                    )
                    for sid, bt, s, first, low, high in zip(
                        *(g.column(c).to_pylist() for c in (
                            "pw_sid", "pw_batch", "pw_source", "pw_seq_min", "pw_partition_min",
                            "pw_partition_max",
                        )), strict=True,
                    ):  # fmt: skip
                        k = (sid, bt, s)
                        if k in seen:
                            v = seen[k]
                            seen[k] = [min(v[0], first), min(v[1], low), max(v[2], high)]
                        else:
                            seen[k] = [first, low, high]
            yield batch
        if seen and last_schema is not None:
            n = len(seen)
            cols = {}
            for f in last_schema:
                if f.name.endswith("_null"):
                    cols[f.name] = pa.array([True] * n)
                elif pa.types.is_integer(f.type):
                    cols[f.name] = pa.array([0] * n, f.type)
                else:
                    cols[f.name] = pa.nulls(n, f.type)
            keys, values = list(seen), list(seen.values())
            cols.update({
                "pw_sid": pa.array([k[0] for k in keys], pa.string()),
                "pw_batch": pa.array([k[1] for k in keys], pa.int64()),
                "pw_source": pa.array([k[2] for k in keys], pa.int64()),
                "pw_kind": pa.array([PROBE] * n, pa.string()),
                "pw_seq": pa.array([v[0] for v in values], pa.int64()),
                "pw_partition": pa.array([v[1] for v in values], pa.int64()),
                "pw_count": pa.array([v[2] for v in values], pa.int64()),
            })  # fmt: skip
            yield pa.RecordBatch.from_arrays([cols[f.name] for f in last_schema], schema=last_schema)

    return rows.mapInArrow(add_probes, schema)


# ---- the Spark operator -----------------------------------------------------


@dataclass
class PartitionedWatermarkStreams(OperatorStreams):
    """The operator's output: ``output`` (combined) and its projections; ``write_tables``
    writes every table from one query."""

    table_columns = TABLE_COLUMNS

    output: Any
    progress: Any
    partitions: Any
    sources: Any
    errors: Any
    sink_rows: Any = None
    sink_step: Any = None


def partitioned_watermarks(
    df: Any,
    source_col: str,
    partition_col: str,
    event_time_col: str,
    idle_timeout_ms: int = 60000,
    max_lateness_ms: int = 0,
    stream_id_col: str | None = None,
    seq_col: str | None = None,
    kind_col: str | None = None,
    time_col: str | None = None,
    count_col: str | None = None,
    core_col: str | None = None,
    batch_col: str | None = None,
    stream_configs: Mapping[str, Mapping[str, Any]] | None = None,
    auto_register: bool = False,
    processing_time_col: str | None = None,
    buckets: int | None = None,
    block_partitions: int = DEFAULT_BLOCK_PARTITIONS,
    seq_unique: bool = False,
) -> PartitionedWatermarkStreams:
    """Applies F064 per-partition watermarks to a streaming DataFrame (see the module docstring).

    ``buckets``: groups per stream in the wide stage (default: 4 per shuffle partition of the
    session), fixed in the checkpoint. ``block_partitions``: the partitions of one source a
    state value of a bucket holds at most; a checkpoint keeps the value it was started with.
    ``seq_unique``: the producer guarantees that ``seq_col`` is unique per stream and batch,
    which skips the duplicate check (TR-15: every row of a repeated seq is a ``duplicate_seq``
    error row), one shuffle less.
    Raises ``harness.traces.InvalidConfig`` for a bad setting or column.
    """
    from pyspark.sql import functions as F

    default, per_stream = stream_settings(
        validate_config, {"idle_timeout": idle_timeout_ms, "max_lateness": max_lateness_ms}, stream_configs
    )
    if not isinstance(auto_register, bool):
        raise InvalidConfig(f"auto_register must be True or False, got {auto_register!r}")
    buckets = default_buckets(df.sparkSession) if buckets is None else require_int("buckets", buckets, 1)
    block_partitions = require_int("block_partitions", block_partitions, 1)
    fields = {f.name: f.dataType for f in df.schema.fields}
    prepare_session(df.sparkSession, "partitioned_watermarks")
    if kind_col is None and processing_time_col is None:
        warn_once(
            "partitioned_watermarks: no clock rows (kind_col) and no processing_time_col, so the "
            "processing clock never moves and idle_timeout_ms never marks a partition idle; name the "
            "arrival-time column "
            'with processing_time_col, or processing_time_col="current_timestamp"'
        )
    warn_without_seq("partitioned_watermarks", seq_col, "event-time order as one step")
    longs = {"source": source_col, "partition": partition_col, "time": time_col, "count": count_col,
             "core": core_col, "seq": seq_col, "batch": batch_col}  # fmt: skip
    named = {**{f"{k}_col": v for k, v in longs.items()}, "event_time_col": event_time_col,
             "stream_id_col": stream_id_col, "kind_col": kind_col}  # fmt: skip
    if processing_time_col is not None and processing_time_col != CURRENT_TIMESTAMP:
        named["processing_time_col"] = processing_time_col
    check_columns(fields, named, [f"{k}_col" for k in longs if k != "time"], kind_col, seq_col)
    if processing_time_col is not None and kind_col is not None:
        raise InvalidConfig("processing_time_col replaces clock rows: give it or kind_col, not both")
    et = event_time_millis(fields, event_time_col)

    # Only the columns the input has cross into the Python worker; nullable longs as value + flag.
    cols = [stream_id_column(stream_id_col, "pw_sid"), *place_flags(seq_col, batch_col, "pw_")]
    # Every long column crosses, an absent one as null: a probe row carries its highest
    # partition in pw_count even where the input has no count column.
    absent = F.lit(None).cast("long")
    exprs = {
        "event_time": et,
        **{
            k: absent
            if v is None
            else millis_column(fields, "time_col", v)
            if k == "time"
            else F.col(v).cast("long")
            for k, v in longs.items()
            if k not in ("seq", "batch")
        },
    }
    for name, expr in exprs.items():
        cols.append(long_or_zero(expr).alias(f"pw_{name}"))
        cols.append(expr.isNull().alias(f"pw_{name}_null"))
    for name in ("seq", "batch"):
        if longs[name] is not None:
            cols.append(long_or_zero(longs[name]).alias(f"pw_{name}"))
    if batch_col is None:
        cols.append(micro_batch_start_millis().alias("pw_batch"))
    if kind_col:
        kind_text = F.col(kind_col).cast("string")
        # "tick" and "probe" are the operator's own rows; a user's is an unsupported item.
        own = kind_text.isin(TICK, PROBE)
        cols.append(F.when(own, F.concat(F.lit("user "), kind_text)).otherwise(kind_text).alias("pw_kind"))
    else:
        cols.append(F.lit("event").alias("pw_kind"))
    if processing_time_col is not None:
        # The time is a column of the input: it crosses the projection under its own name.
        cols.append(processing_time(fields, processing_time_col).alias("pw_processing_time"))
    rows, unplaced = split_unplaced(df.select(*cols), "pw_")  # TR-16: no seq or batch, no place
    if processing_time_col is not None:
        rows = with_ticks(rows, F.col("pw_processing_time"), "pw_").drop("pw_processing_time")
        # A tick row has no source, partition or event time: values 0, flags set.
        rows = rows.select(*[
            F.coalesce(F.col(c), F.lit(c.endswith("_null"))).alias(c) if c.endswith("_null")
            else F.coalesce(F.col(c), F.lit(0).cast("long")).alias(c) if c not in ("pw_sid", "pw_kind")
            else F.col(c)
            for c in rows.columns
        ])  # fmt: skip
    if seq_col is not None and not seq_unique:
        rows = flag_duplicate_seqs(rows, "pw_", exempt=("batch_end", TICK))  # TR-15, before the probes
    if seq_col is not None:
        rows = with_probes(rows)
    src, part = F.col("pw_source"), F.col("pw_partition")
    valid = (
        ~F.col("pw_source_null") & ~F.col("pw_partition_null") & (src >= 0) & (part >= 0) & (part <= U32_MAX)
    )
    # pmod(spread, buckets) is the partition's bucket; no overflow (ANSI) for a number out of range.
    spread = F.pmod(src, F.lit(buckets)) + F.when(valid, part).otherwise(F.lit(0).cast("long"))
    rows = rows.withColumn(
        "pw_home", F.when(valid, F.pmod(spread, F.lit(buckets))).otherwise(F.lit(0)).cast("long")
    )
    kind = F.col("pw_kind")
    timed = F.when(kind == "event", ~F.col("pw_event_time_null")).otherwise(~F.col("pw_time_null"))
    is_update = kind.isin(*UPDATE_KINDS) & valid & timed
    rows = to_buckets(rows, buckets, spread, is_update, kind == MARKER, F.lit(False), "pw_bucket")
    first = PartitionBucketProcessor(
        default, per_stream, seq_col is not None, buckets, block_partitions, auto_register
    )
    narrow = StreamSummaryProcessor(buckets)
    both = two_stages(rows, "pw_sid", "pw_bucket", first, WIDE_SCHEMA, narrow, PASS_SCHEMA)
    output = with_unplaced_errors(restore_nulls(both, OUTPUT_COLUMNS, LONG_COLS), unplaced, "pw_")
    # write_tables and foreach_batch: the wide stage alone, the narrow step in the sink
    step = SinkStep(
        "partitioned_watermarks", narrow, "stream", STREAM_SCHEMA, OUTPUT_COLUMNS, LONG_COLS,
        maps={"sources": (SOURCE_KEY_SCHEMA, SOURCE_SCHEMA)},
    )  # fmt: skip
    wide = one_stage(rows, "pw_sid", "pw_bucket", first, WIDE_SCHEMA)
    sink_rows = with_unplaced_errors(wide, unplaced, "pw_")
    return PartitionedWatermarkStreams(
        output=output, **table_projections(output, TABLE_COLUMNS), sink_rows=sink_rows, sink_step=step
    )


# ---- the native comparison (F064-R6, R7 against Spark's own watermark) ----------


def native_watermark_report(spark: Any, trace: Any, delay_ms: int) -> list[dict[str, int]]:
    """Runs a trace's events through Spark's OWN watermark and reports it per micro-batch.

    ``trace``: an F064 ``Trace`` (its ``event`` items are used, control items
    ignored) or a list of batches of ``(source, partition, event_time)``.
    One streaming query, one trace batch per micro-batch (AvailableNow)::

        events.withWatermark(ts, delay).groupBy(partition, ts).count()   # update mode

    Per micro-batch: ``batch_id``, ``input_rows``, ``watermark`` (ms, from the
    progress ``eventTime.watermark``: the watermark this batch evicts state
    with) and ``dropped_late`` (``numRowsDroppedByWatermark`` of the state
    operator: rows with ``ts <=`` the previous batch's watermark). Spark keeps
    ONE watermark per query: max event time seen over all partitions minus the
    delay, so behind a fast partition a slow partition's rows are dropped as
    late instead of holding the watermark back (F064-R6 holds it instead).
    The last entry may be Spark's extra no-data batch (the watermark moved).
    """
    import os
    import shutil
    import tempfile

    import pyarrow as pa
    from pyspark.sql import functions as F

    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    require_int("delay_ms", delay_ms, 0)
    if hasattr(trace, "batches"):
        batches = [
            [(i.source, i.partition, i.event_time) for i in b if i.kind == "event"] for b in trace.batches
        ]
    else:
        batches = [list(b) for b in trace]
    cols: dict[str, list[int]] = {"batch": [], "source": [], "partition": [], "event_time": []}
    for b, batch in enumerate(batches):
        for source, partition, event_time in batch:
            for name, value in zip(cols, (b, source, partition, event_time), strict=True):
                cols[name].append(value)
    work = tempfile.mkdtemp(prefix="pw-native-")
    try:
        path = os.path.join(work, "events.parquet")
        write_trace_file(path, pa.table({k: pa.array(v, pa.int64()) for k, v in cols.items()}))
        counts = (
            spark.readStream.format(SOURCE_NAME).option("path", path).option("num_batches", str(len(batches)))
            .load().withColumn("ts", F.timestamp_millis("event_time"))
            .withWatermark("ts", f"{delay_ms} milliseconds").groupBy("partition", "ts").count()
        )  # fmt: skip
        return native_watermark_progress(counts, "update", os.path.join(work, "checkpoint"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- the state layout as a checkpoint holds it (read by spark_impl/checkpoints.py) ----------

LAYOUT = register(
    Operator(
        "partitioned_watermarks", LAYOUT_VERSION,
        Stage({
            "bucket": lambda v, k: BucketState.from_tuple(v, value_buckets(v)),
            "blocks": lambda v, k: unpack_blocks([int(k[0])], [v]),
        }, ("bucket",)),
        Stage({
            "stream": lambda v, k: StreamState.from_tuple(v, value_buckets(v)),
            "sources": lambda v, k: unpack_source_figures(v),
        }, ("stream",)),
        schema_fields(STREAM_SCHEMA),
    )
)  # fmt: skip


__all__ = [
    "LAYOUT_VERSION",
    "LONG_COLS",
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "SOURCE_KEY_SCHEMA",
    "SOURCE_SCHEMA",
    "STREAM_SCHEMA",
    "TABLE_COLUMNS",
    "BucketState",
    "PartitionBucketProcessor",
    "PartitionedWatermarkStreams",
    "Partitions",
    "StreamConfig",
    "StreamState",
    "StreamSummaryProcessor",
    "Tracked",
    "engine_output",
    "engine_streams",
    "native_watermark_report",
    "pack_block",
    "partitioned_watermarks",
    "validate_config",
    "with_probes",
]


ENGINE_BUCKETS = 3
ENGINE_BLOCK_PARTITIONS = 2


def engine_streams(
    df: Any,
    stream_configs: Mapping[str, Mapping[str, Any]],
    seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> PartitionedWatermarkStreams:
    """The harness engine's call (spark_impl.engine.area_module): its input columns, one stream
    per trace; the engine writes a query of this area alone through ``foreach_batch`` (one
    stateful stage, the narrow step in the sink) and a query mixing areas through ``output``.

    Few buckets and tiny blocks: a trace has a handful of partitions, and every group costs
    a Python call per micro-batch; three buckets of blocks of two partitions still spread
    each trace over groups and blocks. ``seq_unique``: the engine's seqs are trace positions,
    unique by construction; False checks them (TR-15)."""
    return partitioned_watermarks(
        df, source_col="source", partition_col="partition", event_time_col="event_time",
        stream_id_col="trace_id", seq_col="seq", kind_col="kind", time_col="time", count_col="count",
        core_col="core", batch_col="batch", stream_configs=stream_configs, buckets=buckets,
        block_partitions=ENGINE_BLOCK_PARTITIONS, seq_unique=seq_unique,
    )  # fmt: skip


def engine_output(
    df: Any,
    stream_configs: Mapping[str, Mapping[str, Any]],
    seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> Any:
    """``engine_streams``'s combined stream with both stages (``output``)."""
    return engine_streams(df, stream_configs, seq_unique, buckets).output
