"""Keyed watermarks (F065) on Spark Structured Streaming, spread over the cluster.

Usage
-----
Apply the operator to your own streaming DataFrame and write its output::

    from spark_impl.keyed_watermarks import keyed_watermarks

    kw = keyed_watermarks(
        events_df,                    # a streaming DataFrame
        key_col="tenant",             # any type, compared as its string form
        event_time_col="ts",          # LongType milliseconds, or TimestampType
        bounded_delay_ms=5000,
        idle_timeout_ms=60000,
        max_keys=None,                # or an int >= 1, with eviction_policy
        eviction_policy="LeastRecentlyActive",  # | "LowestWatermark" | "RejectNew"
        window_size_ms=None,          # keyed tumbling windows (F065-R21) when set
        processing_time_col=None,     # e.g. "arrival" or "current_timestamp" (below)
    )
    q = (kw.output.writeStream.format("parquet")
         .option("checkpointLocation", ckpt).start(path))

For more keys than memory holds, the compact tracker (F065-R26..R37) keeps
the most recently active keys exactly and answers the rest from sketches, in
state bounded by its settings whatever the key count::

    kw = keyed_watermarks(
        events_df, key_col="device", event_time_col="ts",
        bounded_delay_ms=5000,
        exact_key_count=100_000,      # keys held exactly, over all shards
        sketch_error_rate=0.01,       # sketch width ceil(e / rate): 272 cells
        sketch_depth=4,               # sketch rows, 1..6
        shards=8,                     # 1..exact_key_count, part of the answer
    )

A key outside the exact set is judged by the max sketch's estimate of its
highest event time, which is never below the truth: the compact tracker may
call an on-time event late, never a late one on time (R32). ``max_keys``,
``window_size_ms`` and an ``eviction_policy`` cannot be combined with it. ``progress.estimated_keys``
is its HyperLogLog estimate of the distinct keys seen (R34; null for a
stream without the compact tracker), ``progress.evicted_keys`` counts
demotions out of the exact set, and a key demoted during a micro-batch
appears in ``kw.keys`` with state ``sketched``.

``kw.output`` is the one combined stream (schema ``OUTPUT_SCHEMA``); its
``output`` column says which table a row belongs to. The convenience
DataFrames are projections of it:

- ``kw.events``: every event with ``key_watermark`` (the key's watermark just
  before the event, null for a new key) and ``verdict`` (on_time | late |
  rejected)  (F065-R3, R15).
- ``kw.late``: the events with verdict ``late``.
- ``kw.progress``: one row per stream and micro-batch with the global
  watermark, the gauges and the cumulative counters (F065-R5..R8, R19),
  ``estimated_keys`` (F065-R34, compact streams only).
- ``kw.metrics``: one row per stream and micro-batch with the operator's own
  cost in it, which no spec clause decides: ``python_calls`` (the Python
  groups of both stages) and ``state_calls`` (state store round trips).
- ``kw.keys``: per micro-batch, the keys whose (watermark, state) changed
  (state active | idle | removed, or sketched: demoted, R35) (F065-R22).
- ``kw.windows``: fired keyed tumbling windows (F065-R21).
- ``kw.errors``: malformed rows (F065-R23), with the reason.

Every projection is a separate streaming plan: starting several sinks runs
the operator once per sink, each with its own checkpoint. To get several
tables from one run, use ``kw.write_tables(path, checkpoint)`` (Parquet, one
folder per table) or ``kw.foreach_batch(function, checkpoint)`` (each
micro-batch's combined rows to ``function(rows, batch_id)``): both run ONE
stateful stage and do the per-stream step in the sink (below). Writing
``kw.output`` once to any streaming sink and splitting by the ``output``
column also works, with a second stateful stage.

Optional columns of the input: ``stream_id_col`` (many independent streams in
one query; without it the whole DataFrame is one stream), ``seq_col``
(arrival order inside a micro-batch; without it the rows of a micro-batch
are taken in event-time order, ties by key, and the output ``seq`` is null),
``kind_col`` (event | clock | idle | remove_key | end | batch_end control rows,
needs ``seq_col``; ``end`` says the stream's input is complete: every open
keyed window fires, and every later row of the stream is an ``after_end``
error, F065-R38), ``time_col`` (the processing time of clock rows),
``value_col`` (summed in windows), ``batch_col`` (the batch number reported
in the output; without it ``batch`` is the micro-batch's start instant in
epoch milliseconds, Spark's ``current_timestamp()``, the same in every row
of a micro-batch). ``stream_configs`` maps a stream id to its own settings
(the trace config keys ``bounded_delay``, ``idle_timeout``, ``max_keys``,
``eviction_policy``, ``window_size``, and for the compact tracker
``exact_key_count``, ``sketch_error_rate``, ``sketch_depth``, ``shards``), so
streams with different settings, compact or not, share one query.

Processing time (F065-R10) is never read from the wall clock by the
operator. By default it is the time of the latest ``clock`` row of the
stream (starting at 0), as in a trace. With ``processing_time_col`` it comes
from the data instead, for pipelines on a real source: the name of a column
(epoch milliseconds or a timestamp, such as the source's arrival time), or
the word ``"current_timestamp"`` for the micro-batch's start instant. Each
micro-batch then behaves as if a clock row carrying the latest such time of
the stream's rows came first: the clock moves (never back), idle keys are
found, and the batch's events are active at that time. A key that stops
sending is marked idle once a micro-batch of its stream starts more than
``idle_timeout_ms`` after its last event, and stops holding the global
watermark down.

Design
------
``docs/architecture.md`` draws the stages and gives the cost model. In short:

- WIDE STAGE, grouped by (stream, key bucket): a well-formed event goes to
  the bucket ``pmod(xxhash64(key), buckets)``; every other row (clock, idle,
  remove_key, a malformed row) is copied to every bucket of its stream by a
  stateless ``explode`` before the shuffle, so each bucket sees the stream's
  whole sequence of calls (F065-R16, R22) and applies those that concern its
  keys. Verdicts, key watermarks, windows, the ``keys`` table and the error
  rows (bucket 0 writes those) come out of this stage, spread over every
  shuffle partition. ``transformWithStateInPandas``, ``timeMode="None"``:
  Spark's own watermark is one value per query and would drop rows by it.
- STATE of a bucket: a ``MapState`` from block number to one small
  vectorised block (the keys of that block, their columns as raw arrays,
  and their open windows), and a ``ValueState`` with the clock, the arrival
  counter, the block layout and a sparse summary: per block its key count,
  idle count, lowest active watermark, highest watermark and earliest
  active ``last_activity``. Keys are placed by linear hashing of their
  xxhash64: when the bucket holds more than ``block_keys`` keys per block
  on average, the next block in order splits in two, so a value stays
  small however many keys the stream has. A micro-batch reads the summary,
  the blocks its rows touch and those a clock row may idle (summary:
  earliest activity older than the timeout), and writes back what it read.
  The cross-key answers of the bucket come from the summary of the blocks
  it did not read plus the keys it did.
- NARROW STEP: the wide stage emits per call (a segment of events or a
  control row) the bucket's summary when it changed, routed to one group per
  stream; that group keeps each bucket's summary and the counters, and
  computes the global watermark after every call (F065-R5..R8), the gauges
  and the progress row. ``write_tables`` and ``foreach_batch`` run it in the
  sink (``spark_impl.scaleout.SinkStep``): each micro-batch's summary rows,
  never the events, are collected to the driver and folded with the
  stream's state, which lives in two slots under ``<checkpoint>/sink_step/``
  (a batch reads the one with the latest batch below it and writes the
  other, so a batch Spark runs again reads what its first attempt read).
  ``kw.output`` runs it in a second ``transformWithStateInPandas`` grouped
  by (stream, route): two stateful operators in one query only feed
  forward, and a stateful operator whose output is used twice runs twice,
  so there the event rows travel through the second stage too, in
  pass-through groups (stream, bucket) that touch no state.
- EVICTION under ``max_keys`` (F065-R12..R15) is global and sequential: a
  stream with ``max_keys`` sends every row to bucket 0, which reads all its
  blocks (at most ``max_keys`` keys) and runs the exact path.
- COMPACT streams (F065-R26..R37): the unit is the shard, not the key. The
  projection computes a key's shard in the JVM (``sha2`` of the domain
  prefix and the key's UTF-8 bytes; its first 16 hex digits, as a
  decimal(20,0), modulo the stream's shard count, read from a literal map
  of the streams' settings), and an event goes to the bucket
  ``pmod(shard, buckets)``; idle and remove_key rows are copied to every
  bucket as usual, with that bucket as their home. A bucket keeps each of
  its shards under one key of two ``MapState`` variables: ``shard_keys``
  (the exact keys in least-recently-active order) and ``shard_sketches``
  (frequency counters, max-sketch cells and their empty mask, the 4096
  HyperLogLog registers, the event count, and the settings they were
  written with); its summary rows are per shard instead of per block, with
  the shard's HyperLogLog estimate. A micro-batch reads the shards its
  events touch (exact keys and sketches), the shards its idle and
  remove_key rows name (exact keys only) and those a clock row may idle
  (summary), and applies each shard's events one by one in arrival order
  (the admission rule is sequential per shard): an ordered dict for the
  exact keys, numpy arrays for the sketches, each distinct key's SHA-512
  digest computed once per call with hashlib (and checked against the
  JVM's shard), counts added lazily when an admission or an aging reads
  them. Each bucket's final summary carries the sum of its shards'
  estimates; the narrow stage keeps the latest per bucket and writes their
  sum as ``estimated_keys``.
- END (F065-R38): an ``end`` row is copied to every bucket like a control
  row. The bucket reads the blocks whose summary counts open windows, fires
  them all and sets the ``ended`` flag of its state; from then on its rows
  are ``after_end`` errors (bucket 0 writes those of copied rows, a bucket
  those of its own events) and it reads no block. A compact stream only
  sets the flag (it keeps no windows).
- ORDER: inside a micro-batch the rows of a stream are taken by the ``seq``
  column, never by their physical order. SATURATING i64 arithmetic is
  explicit; nullable longs never become floats (they cross between the
  stages as a value and a null mask).
- RESTART (F065-R24, R37): everything is in the state store under the
  checkpoint (and, for the sink step, in ``sink_step/`` beside it; a
  checkpoint of one plan is refused by the other); ``buckets`` is fixed in
  it (a different value is refused with a message naming both), and so
  are a compact stream's shard count, exact keys per shard and sketch shape
  (stored with each shard's sketches), and whether a stream is compact at
  all.

Modules
-------
This package holds the operator (``keyed_watermarks``, its projection and
routing, its registered checkpoint layout, the harness engine's call) and,
one module each: ``settings`` (defaults and validation), ``layout`` (the
output columns, the columns between the stages, the state values and how
they pack), ``exact`` (the exact tracker of one bucket, pure numpy),
``compact`` (the compact tracker's shards, pure numpy) and ``stages`` (the
stateful processors: the wide stage and the narrow step).
"""

from __future__ import annotations

from collections.abc import Mapping
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
    batch_marker,
    check_columns,
    event_time_millis,
    long_or_zero,
    millis_column,
    place_flags,
    split_unplaced,
    stream_id_column,
    stream_settings,
    table_projections,
    value_checked_kind,
    warn_once,
    warn_without_seq,
    with_unplaced_errors,
)
from spark_impl.common import require_int as _require_int
from spark_impl.keyed_watermarks.compact import (
    unpack_exact,
    unpack_sketch,
)
from spark_impl.keyed_watermarks.layout import (
    LONG_COLS,
    OUTPUT_COLUMNS,
    OUTPUT_SCHEMA,
    PASS_SCHEMA,
    STREAM_SCHEMA,
    TABLE_COLUMNS,
    WIDE_SCHEMA,
    BucketState,
    StreamState,
    unpack_blocks,
)
from spark_impl.keyed_watermarks.settings import (
    _COMPACT_DEFAULTS,
    COMPACT_DOMAIN,
    DEFAULT_BLOCK_KEYS,
    DEFAULT_POLICY,
    DEFAULT_SKETCH_DEPTH,
    DEFAULT_SKETCH_ERROR_RATE,
    LAYOUT_VERSION,
    StreamConfig,
    validate_config,
)
from spark_impl.keyed_watermarks.stages import (
    KeyBucketProcessor,
    StreamSummaryProcessor,
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


@dataclass
class KeyedWatermarkStreams(OperatorStreams):
    """The operator's output: ``output`` (combined) and its projections; ``write_tables``
    writes every table from one query."""

    table_columns = TABLE_COLUMNS

    output: Any
    events: Any
    late: Any
    progress: Any
    keys: Any
    windows: Any
    errors: Any
    metrics: Any
    sink_rows: Any = None
    sink_step: Any = None


def keyed_watermarks(
    df: Any,
    key_col: str,
    event_time_col: str,
    bounded_delay_ms: int = 5000,
    idle_timeout_ms: int = 60000,
    max_keys: int | None = None,
    eviction_policy: str = DEFAULT_POLICY,
    window_size_ms: int | None = None,
    stream_id_col: str | None = None,
    seq_col: str | None = None,
    kind_col: str | None = None,
    value_col: str | None = None,
    time_col: str | None = None,
    batch_col: str | None = None,
    stream_configs: Mapping[str, Mapping[str, Any]] | None = None,
    processing_time_col: str | None = None,
    buckets: int | None = None,
    block_keys: int = DEFAULT_BLOCK_KEYS,
    exact_key_count: int | None = None,
    sketch_error_rate: float = DEFAULT_SKETCH_ERROR_RATE,
    sketch_depth: int = DEFAULT_SKETCH_DEPTH,
    shards: int = 1,
    seq_unique: bool = False,
) -> KeyedWatermarkStreams:
    """Applies F065 keyed watermarks to a streaming DataFrame (see the module docstring).

    ``buckets``: groups per stream in the wide stage (default: 4 per shuffle partition of the
    session), fixed in the checkpoint. ``block_keys``: the keys a state value of a bucket holds
    on average before the bucket splits a block (linear hashing); any value is safe to change.

    ``exact_key_count`` (an int >= 1) makes every stream without its own settings use the
    compact tracker (F065-R26..R37): that many keys held exactly over all ``shards``, the rest
    judged by a max sketch of ``sketch_depth`` rows (1..6) of ceil(e / ``sketch_error_rate``)
    cells, so the state is bounded whatever the key count; it may call an on-time event late,
    never a late one on time (R32). It cannot be combined with ``max_keys``,
    ``window_size_ms`` or an ``eviction_policy`` other than the default. ``shards``
    (1..exact_key_count) is part of the answer (R27); the shard count, the exact keys per
    shard and the sketch shape are fixed in the checkpoint.
    ``progress.estimated_keys`` is the compact streams' distinct-key estimate (R34).

    ``seq_unique``: the producer guarantees that ``seq_col`` is unique per stream and batch, which
    skips the duplicate check (TR-15: every row of a repeated seq is a ``duplicate_seq`` error
    row), one shuffle less.

    Raises ``harness.traces.InvalidConfig`` for a bad setting or column.
    """
    from pyspark.sql import functions as F

    settings: dict[str, Any] = {
        "bounded_delay": bounded_delay_ms,
        "idle_timeout": idle_timeout_ms,
        "max_keys": max_keys,
        "window_size": window_size_ms,
    }
    if exact_key_count is None or eviction_policy != DEFAULT_POLICY:
        settings["eviction_policy"] = eviction_policy  # the compact tracker refuses one given (R26)
    compact_settings = {
        "sketch_error_rate": sketch_error_rate,
        "sketch_depth": sketch_depth,
        "shards": shards,
    }
    if exact_key_count is not None:
        settings.update(exact_key_count=exact_key_count, **compact_settings)
    else:
        changed = sorted(k for k, v in compact_settings.items() if v != _COMPACT_DEFAULTS[k])
        if changed:
            raise InvalidConfig(f"{changed} need exact_key_count (the compact tracker, F065-R26)")
    default, per_stream = stream_settings(validate_config, settings, stream_configs)
    buckets = default_buckets(df.sparkSession) if buckets is None else _require_int("buckets", buckets, 1)
    block_keys = _require_int("block_keys", block_keys, 1)
    fields = {f.name: f.dataType for f in df.schema.fields}
    prepare_session(df.sparkSession, "keyed_watermarks")
    if kind_col is None and processing_time_col is None:
        warn_once(
            "keyed_watermarks: no clock rows (kind_col) and no processing_time_col, so the processing clock "
            "never moves and idle_timeout_ms never marks a key idle; name the arrival-time column "
            'with processing_time_col, or processing_time_col="current_timestamp"'
        )
    warn_without_seq("keyed_watermarks", seq_col, "event-time order, ties by key")
    named = {
        "key_col": key_col, "event_time_col": event_time_col, "stream_id_col": stream_id_col,
        "seq_col": seq_col, "kind_col": kind_col, "value_col": value_col, "time_col": time_col,
        "batch_col": batch_col,
    }  # fmt: skip
    if processing_time_col is not None and processing_time_col != CURRENT_TIMESTAMP:
        named["processing_time_col"] = processing_time_col
    check_columns(fields, named, ("seq_col", "batch_col", "value_col"), kind_col, seq_col)
    if processing_time_col is not None and kind_col is not None:
        raise InvalidConfig("processing_time_col replaces clock rows: give it or kind_col, not both")
    et = event_time_millis(fields, event_time_col)

    # Only the columns the input has cross into the Python worker (it converts row by row);
    # the processor fills the absent ones with their defaults.
    cols = [
        stream_id_column(stream_id_col, "kw_sid"),
        F.col(key_col).cast("string").alias("kw_key"),
        long_or_zero(et).alias("kw_et"),
        et.isNull().alias("kw_et_null"),
        batch_marker(batch_col).alias("kw_batch"),
        *place_flags(seq_col, batch_col, "kw_"),
    ]
    if seq_col:
        cols.append(long_or_zero(seq_col).alias("kw_seq"))
    if kind_col or value_col:
        kind_text = F.col(kind_col).cast("string") if kind_col else F.lit("event")
        # "tick" is the operator's own row (processing_time_col); a user's "tick" is unsupported.
        kind_text = F.when(kind_text == "tick", F.lit("user tick")).otherwise(kind_text)
        cols.append((value_checked_kind(kind_text, value_col) if value_col else kind_text).alias("kw_kind"))
    if value_col:
        cols.append(long_or_zero(value_col).alias("kw_value"))
    if time_col:
        tm = millis_column(fields, "time_col", time_col)
        cols.append(long_or_zero(tm).alias("kw_time"))
        cols.append(tm.isNull().alias("kw_time_null"))
    if processing_time_col is not None:
        cols.append(processing_time(fields, processing_time_col).alias("kw_processing_time"))
    rows, unplaced = split_unplaced(df.select(*cols), "kw_")  # TR-16: no seq or batch, no place
    if processing_time_col is not None:
        # The time is read from the projection: the input's own columns are gone by then.
        rows = with_ticks(rows, F.col("kw_processing_time"), "kw_").drop("kw_processing_time")
    if seq_col and not seq_unique:
        rows = flag_duplicate_seqs(rows, "kw_", exempt=("batch_end", "tick"))  # TR-15, before any routing
    kind = F.col("kw_kind") if "kw_kind" in rows.columns else F.lit("event")
    key_hash = F.xxhash64(F.col("kw_key"))
    unit = key_hash
    if default.compact or any(c.compact for c in per_stream.values()):
        # F065-R27: a compact stream's key goes to the bucket of its shard, computed in the JVM.
        stream_shards = _compact_shard_counts(default, per_stream)
        shard = F.when(stream_shards > 0, compact_shard(F.col("kw_key"), stream_shards))
        rows = rows.withColumn("kw_shard", F.coalesce(shard, F.lit(-1).cast("long")))
        unit = F.when(stream_shards > 0, F.col("kw_shard")).otherwise(key_hash)
    whole = _streams_with_max_keys(default, per_stream)
    rows = rows.withColumn("kw_hash", key_hash).withColumn(
        "kw_home", F.when(whole, F.lit(0)).otherwise(F.pmod(unit, F.lit(buckets))).cast("long")
    )
    is_event = (kind == "event") & F.col("kw_key").isNotNull() & ~F.col("kw_et_null")
    rows = to_buckets(rows, buckets, unit, is_event, kind == "batch_end", whole, "kw_bucket")
    first = KeyBucketProcessor(default, per_stream, seq_col is not None, buckets, block_keys)
    narrow = StreamSummaryProcessor(buckets, default.compact, {s: c.compact for s, c in per_stream.items()})
    both = two_stages(rows, "kw_sid", "kw_bucket", first, WIDE_SCHEMA, narrow, PASS_SCHEMA)
    output = with_unplaced_errors(restore_nulls(both, OUTPUT_COLUMNS, LONG_COLS), unplaced, "kw_")
    # write_tables and foreach_batch: the wide stage alone, the narrow step in the sink
    step = SinkStep("keyed_watermarks", narrow, "stream", STREAM_SCHEMA, OUTPUT_COLUMNS, LONG_COLS)
    wide = one_stage(rows, "kw_sid", "kw_bucket", first, WIDE_SCHEMA)
    sink_rows = with_unplaced_errors(wide, unplaced, "kw_")
    tables = table_projections(output, TABLE_COLUMNS)
    return KeyedWatermarkStreams(
        output=output, late=tables["events"].filter(F.col("verdict") == "late"), **tables,
        sink_rows=sink_rows, sink_step=step,
    )  # fmt: skip


def compact_shard(key: Any, shards: Any) -> Any:
    """F065-R27 in the JVM: w0 mod ``shards``, w0 the first 8 bytes (big-endian, unsigned) of
    SHA-512 of the domain prefix and the key's UTF-8 bytes. ``sha2`` gives hex; 16 hex digits
    are converted to a decimal(20,0), which holds every unsigned 64-bit value, and reduced there."""
    from pyspark.sql import functions as F

    digest = F.sha2(F.concat(F.lit(COMPACT_DOMAIN), key.cast("binary")), 512)
    w0 = F.conv(F.substring(digest, 1, 16), 16, 10).cast("decimal(20,0)")
    return (w0 % shards.cast("decimal(20,0)")).cast("long")


def _compact_shard_counts(default: StreamConfig, per_stream: Mapping[str, StreamConfig]) -> Any:
    """Each row's stream's shard count (F065-R27), 0 for a stream without the compact tracker."""
    from pyspark.sql import functions as F

    def count(c: StreamConfig) -> int:
        return c.shards if c.compact else 0

    fallback = F.lit(count(default)).cast("long")
    own = sorted((s, count(c)) for s, c in per_stream.items() if count(c) != count(default))
    if not own:
        return fallback
    table = F.create_map(*(F.lit(x) for pair in own for x in (pair[0], pair[1])))
    return F.coalesce(F.try_element_at(table, F.col("kw_sid")).cast("long"), fallback)


def _streams_with_max_keys(default: StreamConfig, per_stream: Mapping[str, StreamConfig]) -> Any:
    """The streams that keep every key in bucket 0 (exact eviction, F065-R12)."""
    from pyspark.sql import functions as F

    sid = F.col("kw_sid")
    if default.max_keys is None:
        bounded = sorted(s for s, c in per_stream.items() if c.max_keys is not None)
        return sid.isin(bounded) if bounded else F.lit(False)
    unbounded = sorted(s for s, c in per_stream.items() if c.max_keys is None)
    return ~sid.isin(unbounded) if unbounded else F.lit(True)


# ---- the state layout as a checkpoint holds it (read by spark_impl/checkpoints.py) ----------

LAYOUT = register(
    Operator(
        "keyed_watermarks", LAYOUT_VERSION,
        Stage({
            "bucket": lambda v, k: BucketState.from_tuple(v, value_buckets(v)),
            "blocks": lambda v, k: unpack_blocks([v]),
            "shard_keys": lambda v, k: unpack_exact(v),
            "shard_sketches": lambda v, k: unpack_sketch(v),
        }, ("bucket",)),
        Stage({"stream": lambda v, k: StreamState.from_tuple(v, value_buckets(v))}, ("stream",)),
        schema_fields(STREAM_SCHEMA),
    )
)  # fmt: skip


__all__ = [
    "BucketState",
    "KeyBucketProcessor",
    "KeyedWatermarkStreams",
    "LAYOUT_VERSION",
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "StreamConfig",
    "StreamState",
    "StreamSummaryProcessor",
    "TABLE_COLUMNS",
    "compact_shard",
    "engine_output",
    "engine_streams",
    "keyed_watermarks",
    "validate_config",
]


ENGINE_BUCKETS = 3
ENGINE_BLOCK_KEYS = 2


def engine_streams(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> KeyedWatermarkStreams:
    """The harness engine's call (spark_impl.engine.area_module): its input columns, one stream per
    trace; the engine writes a query of this area alone through ``foreach_batch`` (one stateful
    stage, the narrow step in the sink) and a query mixing areas through ``output``.

    Few buckets and tiny blocks: a trace has a handful of keys, and every group costs a
    Python call per micro-batch; three buckets that split blocks past two keys still spread
    each trace over groups and blocks, and split blocks as its keys arrive. ``seq_unique``: the
    engine's seqs are trace positions, unique by construction; False checks them (TR-15)."""
    return keyed_watermarks(
        df, key_col="key", event_time_col="event_time", stream_id_col="trace_id", seq_col="seq",
        kind_col="kind", value_col="value", time_col="time", batch_col="batch",
        stream_configs=stream_configs, buckets=buckets, block_keys=ENGINE_BLOCK_KEYS,
        seq_unique=seq_unique,
    )  # fmt: skip


def engine_output(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> Any:
    """``engine_streams``'s combined stream with both stages (``output``), the spec's tables only
    (the metrics table is the operator's own)."""
    from pyspark.sql import functions as F

    return engine_streams(df, stream_configs, seq_unique, buckets).output.filter(F.col("output") != "metrics")

