"""Event-time reorder buffer (veloFlux) on Spark Structured Streaming.

Usage
-----
Apply the stage to your own streaming DataFrame and write its output::

    from spark_impl.eventtime_buffer import eventtime_buffer

    eb = eventtime_buffer(
        events_df,                       # a streaming DataFrame
        eventtime_col="ts",              # long/int (a Unix timestamp) or string (its digits)
        eventtime_type="unixtimestamp_ms",   # | "unixtimestamp_s" | a registered catalogue name
        late_tolerance_ms=1000,
        key_col="device", value_col="reading",   # the payload carried through
        seq_col="offset",                # arrival order inside a micro-batch (see below)
    )
    query = eb.write_tables("/data/buffer", "/checkpoints/buffer")

``eb.output`` is the one combined stream (schema ``OUTPUT_SCHEMA``); its
``output`` column names the table of a row. Projections:

- ``eb.emitted``: the stage's output items, ``kind`` tuple | watermark |
  error. A sink keeps no order, and no task sees a stream's whole output, so
  each row carries its place (VELO-R17): read a stream sorted by ``batch``;
  within a batch error items first by ``arrival_seq``, then tuples and
  watermarks by time (``event_time`` or ``watermark``), a watermark after the
  tuples of its time, tuples of equal time by ``(arrival_batch,
  arrival_seq)`` (``harness.outputs.emitted_order`` is that sort). Tuples come
  out in non-decreasing ``event_time``; no tuple at or below a watermark
  follows it (VELO-R18).
- ``eb.late``: dropped tuples with the watermark they were judged by.
- ``eb.progress``: per stream and micro-batch: watermark, max_timestamp_seen,
  buffer_size, late_dropped_count, watermark_emitted_count (VELO-R22).
- ``eb.errors``: cells that failed to parse, malformed control rows and rows
  after the end.

A tuple carries ``key_col`` (as a string) and ``value_col`` (a long) through
the buffer; other columns are not carried (an id in ``value_col`` joins them
back).

``eventtime_enabled=False`` gives processing-time mode (VELO-R9): tuples are
stamped with the processing clock, which is the latest ``clock`` row
(``kind_col``/``time_col``), never the wall clock; a clock that moves forward
to T emits watermark T - 1. Spark's ProcessingTime timers are not used.

The end of the input (VELO-R21, TR-14) is a row of kind ``end``
(``kind_col``): everything buffered leaves, the final watermark is
``I64_MAX``, and every later row of the stream is an ``after_end`` error.
Without it nothing buffered is ever released at the end: stopping a query
flushes nothing.

Optional columns: ``stream_id_col`` (many independent streams in one query),
``seq_col`` (Spark keeps no row order: the arrival position inside a
micro-batch; see "Without seq_col" below), ``kind_col`` (event | clock | end
| batch_end rows, needs ``seq_col``), ``time_col``, ``batch_col`` (the batch
number reported; else the operator counts the micro-batches in which the
stream has rows), ``messages_col`` (JSON ``[[stream, cell], ...]`` of tuples
holding several messages, VELO-R11; the streams are ``joined_streams``).
``stream_configs`` maps a stream id to its own settings in the trace form of
spec/eventtime_buffer.md VELO-R1, so streams with different settings share
one query (the harness does this). ``buckets``: groups per stream in the wide
stage (default 4 per shuffle partition of the session), fixed in the
checkpoint.

Without seq_col the events of one micro-batch have no arrival order: they
are all judged against the watermark before the micro-batch anyway (R14), so
only the order of equal event times inside one micro-batch is lost. Such
tuples leave in no defined order, and ``arrival_seq`` (and ``seq`` in
``late`` and ``errors``) is null; ``arrival_batch`` still orders tuples of
different micro-batches.

Design (docs/architecture.md draws the stages)
----------------------------------------------
- BEFORE THE SHUFFLE, a stateless ``mapInArrow`` step (``ParseStep``) parses
  and validates the event-time cells of every input partition (R5, R10, R11,
  R12: the reason of a cell that fails) and adds, per input partition and
  stream, one ``probe`` row holding the highest time among the well-formed
  tuples it saw. The raw cells stop there; only the parsed time and the
  reason cross the shuffle.
- ROUTING: a tuple goes to the bucket ``pmod(xxhash64(batch, seq),
  buckets)`` (its arrival: the buffer has no per-key rule, and arrival
  spreads evenly whatever the keys); probe, clock and end rows are copied to
  every bucket; the harness's ``batch_end`` marker and rows of other kinds
  go to bucket 0. The kind crosses as an integer code (cheaper than text).
- WIDE STAGE, ``transformWithStateInPandas`` grouped by (stream, bucket),
  ``timeMode="None"``: every bucket keeps the same stream scalars (watermark,
  highest time seen, processing clock, ended flag), computed from the copied
  rows: the highest time seen is the maximum of the probes, so every bucket
  computes the same target (R16) without seeing the other buckets' tuples.
  It judges its own tuples late (R14), keeps its share of the buffer sorted
  by (ts, arrival batch, seq) (R15) and releases its own tuples at or below
  the target (R17), each with its arrival columns. Bucket 0 writes the
  watermark items, the errors of control rows and the after_end errors of
  copied rows. One summary row per bucket and batch goes to the narrow stage.
- NARROW STAGE, one group per stream (route -1 of the second stage): the
  buckets' summaries only (buffer size, tuples dropped, watermarks emitted,
  highest time ingested, carried in the output columns); it writes
  ``progress``. Table rows pass through the
  second stage in their bucket's group (a stateful stage feeding two
  branches would run twice).
- SINK STEP: ``write_tables`` and ``foreach_batch`` run the narrow group's work in
  the sink instead (``spark_impl.scaleout.SinkStep``): each micro-batch's rows of route
  -1 are collected to the driver and folded with the stream's state, kept in two
  slots under ``<checkpoint>/sink_step/``; ``output`` runs it in a second stateful stage.
- STATE: per bucket one ValueState (layout version, bucket count, the
  scalars, and its share of the buffer as an Arrow IPC blob of the buffered
  tuples only, zstd once it is large); per stream one ValueState (the counters, the
  highest time seen, the watermark, each bucket's latest buffer size).
  Nothing grows with the stream's length: a bucket holds what is buffered.
- Parse failures are rows of the output, never a failed query. Long columns
  cross between the stages as a value and a null mask.

Modules
-------
``settings`` (the configuration keys, the parser units, their validation and the layout
version), ``layout`` (row kinds, the columns and schemas between the stages, the buffer and
the state values), ``parsing`` (the parse step and the probe rows) and ``stages`` (one
bucket's batch and the two stages' processors); this module holds the operator, the harness
engine's call, the local run and the registered layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import InvalidConfig
from spark_impl.checkpoints import Operator, Stage, register, schema_fields, value_buckets
from spark_impl.common import (
    OperatorStreams,
    check_columns,
    long_or_zero,
    millis_column,
    place_flags,
    require_int,
    split_unplaced,
    stream_id_column,
    stream_settings,
    table_projections,
    warn_without_seq,
    with_unplaced_errors,
)
from spark_impl.eventtime_buffer.layout import (
    CLOCK,
    DUPLICATE,
    END,
    EVENT,
    INPUT_COLUMNS,
    KIND_CODES,
    LONG_COLS,
    MARKER,
    OTHER,
    OUTPUT_COLUMNS,
    OUTPUT_SCHEMA,
    PARSED_COLUMNS,
    PASS_SCHEMA,
    PROBE,
    STREAM_SCHEMA,
    TABLE_COLUMNS,
    VALUE_RANGE,
    WIDE_SCHEMA,
    BucketState,
    Buffer,
    StreamState,
)
from spark_impl.eventtime_buffer.parsing import (
    ParseStep,
    cell_millis,
    message_millis,
    parse_cells,
    parsed_arrow_schema,
)
from spark_impl.eventtime_buffer.settings import LAYOUT_VERSION, StreamConfig, validate_config
from spark_impl.eventtime_buffer.stages import (
    BufferBucketProcessor,
    BufferSummaryProcessor,
    bucket_batch,
    process_bucket,
    summarise_batch,
)
from spark_impl.scaleout import (
    NULL_MASK,
    ROUTE,
    SinkStep,
    default_buckets,
    flag_duplicate_seqs,
    one_stage,
    restore_nulls,
    to_buckets,
    two_stages,
)
from spark_impl.session import prepare_session


@dataclass
class EventtimeBufferStreams(OperatorStreams):
    """The operator's output: ``output`` (combined) and its projections; ``write_tables``
    writes every table from one query."""

    table_columns = TABLE_COLUMNS

    output: Any
    emitted: Any
    late: Any
    progress: Any
    errors: Any
    sink_rows: Any = None
    sink_step: Any = None


def eventtime_buffer(
    df: Any,
    eventtime_col: str | None = None,
    eventtime_type: str = "unixtimestamp_ms",
    late_tolerance_ms: int = 0,
    eventtime_enabled: bool = True,
    register_parsers: Sequence[str] = (),
    key_col: str | None = None,
    value_col: str | None = None,
    stream_id_col: str | None = None,
    seq_col: str | None = None,
    kind_col: str | None = None,
    time_col: str | None = None,
    batch_col: str | None = None,
    messages_col: str | None = None,
    raw_is_json: bool = False,
    stream_configs: Mapping[str, Mapping[str, Any]] | None = None,
    buckets: int | None = None,
    seq_unique: bool = False,
) -> EventtimeBufferStreams:
    """Applies the veloFlux event-time watermark stage to a streaming DataFrame (module docstring).

    ``raw_is_json``: ``eventtime_col`` holds each cell as JSON text (the harness's form), so
    numbers with fractions and quoted strings are told apart. ``buckets``: groups per stream in
    the wide stage (default: 4 per shuffle partition of the session), fixed in the checkpoint.
    ``seq_unique``: the producer guarantees that ``seq_col`` is unique per stream and batch,
    which skips the duplicate check (TR-15: every row of a repeated seq is a ``duplicate_seq``
    error row), one shuffle less.
    Raises ``InvalidConfig`` for a bad setting or column (VELO-R2: at planning time, before the
    query starts).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegralType, StringType, StructField, StructType

    fields = {f.name: f.dataType for f in df.schema.fields}
    prepare_session(df.sparkSession, "eventtime_buffer")
    warn_without_seq("eventtime_buffer", seq_col, "no order (equal event times leave in no defined order)")
    default_conf: dict[str, Any] = {
        "columns": list(fields), "eventtime_enabled": eventtime_enabled,
        "late_tolerance": late_tolerance_ms, "register_parsers": list(register_parsers),
    }  # fmt: skip
    if eventtime_col is not None:
        default_conf.update(eventtime_column=eventtime_col, eventtime_type=eventtime_type)
    default, per_stream = stream_settings(validate_config, default_conf, stream_configs)
    buckets = default_buckets(df.sparkSession) if buckets is None else require_int("buckets", buckets, 1)
    check_columns(
        fields,
        {"eventtime_col": eventtime_col, "key_col": key_col, "value_col": value_col,
         "stream_id_col": stream_id_col, "seq_col": seq_col, "kind_col": kind_col, "time_col": time_col,
         "batch_col": batch_col, "messages_col": messages_col},
        ("seq_col", "batch_col", "value_col"), kind_col, seq_col,
        text=("messages_col", "eventtime_col") if raw_is_json else ("messages_col",),
    )  # fmt: skip
    mode = "json"
    if eventtime_col is not None and not raw_is_json:
        et_type = fields[eventtime_col]
        if isinstance(et_type, IntegralType):
            mode = "long"
        elif isinstance(et_type, StringType):
            mode = "text"
        else:
            raise InvalidConfig(
                f"eventtime_col {eventtime_col!r} is {et_type.simpleString()}; it accepts an integral type "
                "(the cell as a number) or string (its text), and string JSON text with raw_is_json"
            )

    def text(name: str | None) -> Any:
        return F.col(name).cast("string") if name else F.lit(None).cast("string")

    def long(name: str | None) -> Any:
        return long_or_zero(name) if name else F.lit(0).cast("long")

    kind: Any = F.lit(EVENT).cast("long")
    if kind_col:  # any other kind (a user's "probe" too) is an unsupported item
        kind = F.lit(OTHER).cast("long")
        for name, code in KIND_CODES.items():
            kind = F.when(F.col(kind_col).cast("string") == name, F.lit(code).cast("long")).otherwise(kind)
    if value_col:  # TR-16: an event whose value breaks TR-3's 32 bits is an error row
        wide = F.col(value_col).cast("long")
        beyond = (wide < F.lit(-(2**31))) | (wide > F.lit(2**31 - 1))
        kind = F.when((kind == EVENT) & beyond, F.lit(VALUE_RANGE).cast("long")).otherwise(kind)
    raw = F.col(eventtime_col) if eventtime_col else F.lit(None)
    time = millis_column(fields, "time_col", time_col) if time_col else None
    rows, unplaced = split_unplaced(df.select(
        stream_id_column(stream_id_col, "eb_sid"), long(batch_col).alias("eb_batch"),
        long(seq_col).alias("eb_seq"), kind.alias("eb_kind"), text(key_col).alias("eb_key"),
        long(value_col).alias("eb_value"),
        (F.lit(0).cast("long") if time is None else long_or_zero(time)).alias("eb_time"),
        (F.lit(True) if time is None else time.isNull()).alias("eb_time_null"),
        (F.lit(None).cast("string") if mode == "long" else raw.cast("string")).alias("eb_raw"),
        (long_or_zero(raw) if mode == "long" else F.lit(0).cast("long")).alias("eb_raw_long"),
        raw.isNull().alias("eb_raw_null"), text(messages_col).alias("eb_messages"),
        *place_flags(seq_col, batch_col, "eb_"),
    ), "eb_")  # fmt: skip
    if seq_col and not seq_unique:  # TR-15, before a cell is parsed or a probe counts it
        rows = flag_duplicate_seqs(rows, "eb_", duplicate=DUPLICATE, exempt=(MARKER,))
    parsed_schema = StructType([StructField(c, _spark_type(t), True) for c, t in PARSED_COLUMNS])
    rows = rows.mapInArrow(ParseStep(default, per_stream, mode), parsed_schema)
    # A tuple's bucket is its arrival; without seq_col, a hash of the row (no arrival is known).
    arrival = (
        F.xxhash64("eb_batch", "eb_seq") if seq_col
        else F.xxhash64("eb_batch", "eb_key", "eb_value", "eb_ts", "eb_reason")
    )  # fmt: skip
    kinds = F.col("eb_kind")
    rows = to_buckets(
        rows, buckets, arrival, kinds == EVENT, ~kinds.isin(PROBE, CLOCK, END), F.lit(False), "eb_bucket"
    )
    first = BufferBucketProcessor(default, per_stream, seq_col is not None, buckets, batch_col is not None)
    narrow = BufferSummaryProcessor(buckets)
    both = two_stages(rows, "eb_sid", "eb_bucket", first, WIDE_SCHEMA, narrow, PASS_SCHEMA)
    output = with_unplaced_errors(restore_nulls(both, OUTPUT_COLUMNS, LONG_COLS), unplaced, "eb_")
    # write_tables and foreach_batch: the wide stage alone, the narrow step in the sink
    step = SinkStep("eventtime_buffer", narrow, "stream", STREAM_SCHEMA, OUTPUT_COLUMNS, LONG_COLS)
    wide = one_stage(rows, "eb_sid", "eb_bucket", first, WIDE_SCHEMA)
    sink_rows = with_unplaced_errors(wide, unplaced, "eb_")
    return EventtimeBufferStreams(
        output=output, **table_projections(output, TABLE_COLUMNS), sink_rows=sink_rows, sink_step=step
    )


def _spark_type(name: str) -> Any:
    from pyspark.sql.types import BooleanType, LongType, StringType

    return {"string": StringType(), "long": LongType(), "boolean": BooleanType()}[name]


ENGINE_BUCKETS = 3


def engine_streams(
    df: Any,
    stream_configs: Mapping[str, Mapping[str, Any]],
    seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> EventtimeBufferStreams:
    """The harness engine's call (spark_impl.engine.area_module): one stream per trace, raw cells
    as JSON; the engine writes a query of this area alone through ``foreach_batch`` (one stateful
    stage, the narrow step in the sink) and a query mixing areas through ``output``. Few
    buckets: every group costs a Python call per micro-batch, and a trace's handful of tuples
    still spreads over three. ``seq_unique``: the engine's seqs are trace positions, unique by
    construction; False checks them (TR-15)."""
    return eventtime_buffer(
        df, eventtime_col="raw", raw_is_json=True, key_col="key",
        value_col="value", stream_id_col="trace_id", seq_col="seq", kind_col="kind", time_col="time",
        batch_col="batch", messages_col="messages", stream_configs=stream_configs, buckets=buckets,
        seq_unique=seq_unique,
    )  # fmt: skip


def engine_output(
    df: Any,
    stream_configs: Mapping[str, Mapping[str, Any]],
    seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> Any:
    """``engine_streams``'s combined stream with both stages (``output``)."""
    return engine_streams(df, stream_configs, seq_unique, buckets).output


# ---- the same stages without Spark (tests of the pure code) ---------------------------------


class LocalRun:
    """The operator without Spark, for tests of its own code: the parse step per input
    partition, the routing, and the two processors (``handleInputRows``) per group, their state
    in a ``MemoryStore`` kept between ``micro_batch`` calls (a restart changes nothing else).
    ``rows`` hold the projected columns (``INPUT_COLUMNS``, with ``eb_kind`` as text; absent
    ones get the projection's defaults). A tuple's bucket is a function of its arrival, as in
    Spark, whose hash differs: the place of a tuple changes no output."""

    DEFAULTS: Mapping[str, Any] = {
        "eb_sid": "", "eb_batch": 0, "eb_seq": 0, "eb_kind": "event", "eb_key": None, "eb_value": 0,
        "eb_time": 0, "eb_time_null": True, "eb_raw": None, "eb_raw_long": 0, "eb_raw_null": True,
        "eb_messages": None,
    }  # fmt: skip

    def __init__(
        self, config: Mapping[str, Any], mode: str = "json", buckets: int = 3, partitions: int = 1,
        ordered: bool = True, has_batch: bool = True,
        stream_configs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:  # fmt: skip
        from spark_impl.scaleout import MemoryStore

        default, per_stream = stream_settings(validate_config, config, stream_configs)
        self.parse = ParseStep(default, per_stream, mode)
        self.wide = BufferBucketProcessor(default, per_stream, ordered, buckets, has_batch)
        self.narrow = BufferSummaryProcessor(buckets)
        self.buckets, self.partitions = buckets, partitions
        self.store = MemoryStore()

    def micro_batch(self, rows: pd.DataFrame) -> pd.DataFrame:
        """One micro-batch: the output rows (``OUTPUT_COLUMNS``, nullable longs)."""
        import pyarrow as pa

        rows = rows.assign(**{c: v for c, v in self.DEFAULTS.items() if c not in rows.columns})
        codes = [KIND_CODES.get(k, OTHER) if isinstance(k, str) else OTHER for k in rows["eb_kind"].tolist()]
        rows = rows.assign(eb_kind=np.array(codes, np.int64))  # as the projection codes the kind
        types = {"string": pa.string(), "long": pa.int64(), "boolean": pa.bool_()}
        schema = pa.schema([pa.field(c, types[t]) for c, t in INPUT_COLUMNS])
        table = pa.Table.from_pandas(rows[[c for c, _ in INPUT_COLUMNS]], schema=schema, preserve_index=False)
        parsed = []
        for p in range(self.partitions):  # round robin, as the trace source splits a batch
            parsed += list(self.parse(table.take(np.arange(p, table.num_rows, self.partitions)).to_batches()))
        if not parsed:
            return pd.DataFrame({c: [] for c in OUTPUT_COLUMNS})
        frame = pa.Table.from_batches(parsed, parsed_arrow_schema()).to_pandas()
        kind = frame["eb_kind"].to_numpy(np.int64)
        arrival = frame["eb_batch"].to_numpy(np.int64) * 7919 + frame["eb_seq"].to_numpy(np.int64)
        every = np.isin(kind, (PROBE, CLOCK, END))
        wide = []
        for bucket in range(self.buckets):
            mine = frame[np.where(kind == EVENT, arrival % self.buckets == bucket, every | (bucket == 0))]
            for sid, group in mine.groupby("eb_sid", sort=True, dropna=False):
                key = (None if pd.isna(sid) else str(sid), bucket)  # a null id: Spark's null group
                wide += self._call(self.wide, key, group.reset_index(drop=True))
        both = pd.concat(wide, ignore_index=True)
        result = []
        sid_of, route_of = both["stream_id"].to_numpy(object), both[ROUTE].to_numpy(np.int64)
        for sid, route in sorted(set(zip(sid_of.tolist(), route_of.tolist(), strict=True))):
            group = both[(sid_of == sid) & (route_of == route)].reset_index(drop=True)
            result += self._call(self.narrow, (None if pd.isna(sid) else str(sid), int(route)), group)
        merged = pd.concat(result, ignore_index=True)
        mask = merged[NULL_MASK].to_numpy(np.int64)
        for i, c in enumerate(LONG_COLS):
            merged[c] = pd.arrays.IntegerArray(
                merged[c].to_numpy(np.int64), (mask & (np.int64(1) << np.int64(i))) != 0
            )
        return merged[list(OUTPUT_COLUMNS)].reset_index(drop=True)

    def _call(self, processor: Any, key: tuple[str | None, int], rows: pd.DataFrame) -> list[pd.DataFrame]:
        processor.init(self.store.handle(key))
        return list(processor.handleInputRows(key, iter([rows]), None))


# ---- the state layout as a checkpoint holds it (read by spark_impl/checkpoints.py) ----------

LAYOUT = register(
    Operator(
        "eventtime_buffer", LAYOUT_VERSION,
        Stage({"bucket": lambda v, k: BucketState.from_tuple(v, value_buckets(v))}, ("bucket",)),
        Stage({"stream": lambda v, k: StreamState.from_tuple(v, value_buckets(v))}, ("stream",)),
        schema_fields(STREAM_SCHEMA),
    )
)  # fmt: skip


__all__ = [
    "ENGINE_BUCKETS",
    "LAYOUT_VERSION",
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "BucketState",
    "Buffer",
    "BufferBucketProcessor",
    "BufferSummaryProcessor",
    "EventtimeBufferStreams",
    "LocalRun",
    "ParseStep",
    "StreamConfig",
    "StreamState",
    "bucket_batch",
    "cell_millis",
    "engine_output",
    "eventtime_buffer",
    "message_millis",
    "parse_cells",
    "process_bucket",
    "summarise_batch",
    "validate_config",
]
