"""Window joins (oxirs, spec/window_joins.md) on Spark Structured Streaming, spread over the cluster.

Usage
-----
Join two streaming DataFrames by key and window, with the watermark given as rows of a third
(or of either input), and write the output::

    from spark_impl.window_joins import window_joins

    wj = window_joins(
        clicks, views,               # left and right: streaming DataFrames
        join="tumbling_tumbling",    # | "tumbling_sliding" | "session_session" (OXJ-R18)
        size_ms=60_000,              # the join's settings, as the trace config names them
        allowed_lateness_ms=5_000,
        key_col="user",              # any type Spark casts to a string
        time_col="ts",               # LongType milliseconds, or TimestampType
        value_col="amount",          # optional, 32-bit integral (TR-3)
        watermarks_df=marks,         # optional: rows carrying the join's input watermark
        watermark_col="watermark",
        seq_col="offset",            # arrival order inside a micro-batch, shared by the inputs
    )
    query = wj.write_tables(out_dir, checkpoint_dir)

``window_join_rows(df, side_col=..., kind_col=..., ...)`` is the same operator on one
DataFrame whose rows name their side (``left`` / ``right``) and kind (``event`` /
``watermark``), the form the harness uses. ``wj.output`` is the one combined stream (schema
``OUTPUT_SCHEMA``), its ``output`` column naming the table of a row; the projections are
``wj.pairs`` (OXJ-R3), ``wj.late`` (one row per late event), ``wj.progress`` (per
micro-batch: the watermark and the counters of OXJ-R17) and ``wj.errors`` (OXJ-R19).
``stream_id_col`` runs many independent joins in one query and ``stream_configs`` gives a
stream its own trace-style settings; ``batch_col`` is the batch number reported (without it,
the micro-batch's start instant in epoch milliseconds). Without ``seq_col`` the rows of a
micro-batch are taken in the order they reach the stage and every output seq is null.

Design
------
Two ``transformWithStateInPandas`` stages in ``timeMode="None"`` (the watermark is the
trace's, never Spark's):

- WIDE STAGE, grouped by (stream, key bucket): an event goes to ``pmod(xxhash64(key),
  buckets)``; a watermark row is copied to every bucket of its stream (a few rows per batch),
  so every bucket knows the watermark at each position; malformed rows are spread by their
  (batch, seq); the harness's ``batch_end`` marker goes to bucket 0, which also reports
  ``watermark_regressed`` (every bucket sees the regression, one reports it). Everything is
  vectorised per call: the watermark after each row is a running maximum (a regressed row
  changes nothing), lateness compares each event with the watermark before it, pairs come from
  one pandas merge per batch (tumbling: by (key, pane), emitted at the later event;
  sessions: gap-connected runs per key and side, each closed at the first watermark row after
  its last event that reaches ``last + gap + lateness``, pairs emitted at the later closing).
- STATE of a bucket: a ``MapState`` ``windows`` from (key, pane index) to that pane's events of
  both sides (sessions: (key, 0) to the key's held events), a value read only when a batch
  names the key or the pane comes due; a ``MapState`` ``due`` from a slot (deadline //
  granularity: the pane size or the gap) to the windows whose purge deadline falls in it; and a
  ``ValueState`` ``bucket`` with the layout version, the bucket count, the settings, the
  watermark and the sorted slots held. A watermark reads only the slots it reaches: a purge
  costs a read per due slot and a removal per purged pane (sessions: a read per due key), never
  a scan of the state. Panes are purged at the batch's end by its last watermark, which nothing
  observes: an event after a purging watermark row already meets a watermark that makes it late.
- NARROW STAGE, one group per stream (route -1): each bucket sends one summary row per batch
  (counter deltas and its watermark); the group keeps the totals and writes ``progress``.
- SINK STEP: ``write_tables`` and ``foreach_batch`` run the narrow group's work in
  the sink instead (``spark_impl.scaleout.SinkStep``): each micro-batch's rows of route
  -1 are collected to the driver and folded with the stream's state, kept in two
  slots under ``<checkpoint>/sink_step/``; ``output`` runs it in a second stateful stage.
- RESTART (OXJ-R21): everything is in the state store under the checkpoint; the layout
  version, the bucket count and the join's settings are fixed in it (another value is refused
  with a message naming both).

Measured
--------
``bench/window_joins.py --events 50000 --keys 1000 --repeats 1``, local[2], 8 shuffle
partitions (32 buckets), on a 2-core machine shared with other jobs (load 11 to 12),
2026-11-27, one round: tumbling x tumbling 569 events/s (828 warm) against 1,568 (1,901) for
Spark's equi-join on the same rows, the same 24,884 pairs (0.36x wall, 0.44x warm); session x
session 1,257 (1,515) against 2,179 (2,494), 0.58x (Spark's range join pairs fewer events). The
wide stage's busiest task reads 1.75x its fair share (32 buckets hashed onto 8 partitions).

Modules
-------
``settings`` (a join's settings, their validation, sides, counters and the layout version),
``panes`` (saturating time arithmetic and the panes a left event reaches), ``layout`` (the
output columns, the columns between the stages, the state values and how they pack), ``joins``
(one batch of one bucket: panes, sessions, late events and pairs, pure pandas and numpy) and
``stages`` (the wide stage's processor and the narrow stage's totals); this module holds the
operator, its routing, the harness engine's call and its registered layout.
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
    long_or_zero,
    millis_column,
    place_flags,
    require_int,
    split_unplaced,
    stream_id_column,
    stream_settings,
    table_projections,
    value_checked_kind,
    warn_without_seq,
    with_unplaced_errors,
)
from spark_impl.scaleout import (
    SinkStep,
    default_buckets,
    flag_duplicate_seqs,
    one_stage,
    restore_nulls,
    two_stages,
)
from spark_impl.session import prepare_session
from spark_impl.window_joins.layout import (
    LONG_COLS,
    OUTPUT_COLUMNS,
    OUTPUT_SCHEMA,
    PASS_SCHEMA,
    STREAM_SCHEMA,
    TABLE_COLUMNS,
    WIDE_SCHEMA,
    BucketState,
    StreamState,
    pack_events,
    unpack_due,
    unpack_window,
)
from spark_impl.window_joins.panes import (
    pane_deadline,
    reached_left_panes,
)
from spark_impl.window_joins.settings import (
    LAYOUT_VERSION,
    OPERATOR,
    SIDES,
    StreamConfig,
    validate_config,
)
from spark_impl.window_joins.stages import (
    JoinBucketProcessor,
    StreamTotalsProcessor,
)

# ---- the operator ------------------------------------------------------------------------------


@dataclass
class WindowJoinStreams(OperatorStreams):
    """The operator's output: ``output`` (combined) and its projections; ``write_tables``
    writes every table from one query."""

    table_columns = TABLE_COLUMNS

    output: Any
    pairs: Any
    late: Any
    progress: Any
    errors: Any
    sink_rows: Any = None
    sink_step: Any = None


def _settings(**given: Any) -> dict[str, Any]:
    return {k: v for k, v in given.items() if v is not None}


def window_join_rows(
    df: Any,
    *,
    join: str | None = None,
    side_col: str,
    key_col: str,
    time_col: str,
    value_col: str | None = None,
    kind_col: str | None = None,
    watermark_col: str | None = None,
    seq_col: str | None = None,
    batch_col: str | None = None,
    stream_id_col: str | None = None,
    stream_configs: Mapping[str, Mapping[str, Any]] | None = None,
    size_ms: int | None = None,
    left_size_ms: int | None = None,
    right_size_ms: int | None = None,
    right_slide_ms: int | None = None,
    gap_ms: int | None = None,
    allowed_lateness_ms: int | None = None,
    buckets: int | None = None,
    seq_unique: bool = False,
) -> WindowJoinStreams:
    """The join on one DataFrame whose rows name their side (``side_col``: "left" or "right")
    and kind (``kind_col``: "event" or "watermark"; without it every row is an event); a
    watermark row carries its time in ``watermark_col``. See the module docstring.

    ``buckets``: groups per stream in the wide stage (default: 4 per shuffle partition),
    fixed in the checkpoint. ``seq_unique``: the producer guarantees that ``seq_col`` is unique
    per stream and batch, which skips the duplicate check (TR-15), one shuffle less.
    Raises ``harness.traces.InvalidConfig`` for a bad setting or column."""
    from pyspark.sql import functions as F

    settings = _settings(
        join=join,
        size_ms=size_ms,
        left_size_ms=left_size_ms,
        right_size_ms=right_size_ms,
        right_slide_ms=right_slide_ms,
        gap_ms=gap_ms,
        allowed_lateness_ms=allowed_lateness_ms,
    )
    fields = {f.name: f.dataType for f in df.schema.fields}
    prepare_session(df.sparkSession, OPERATOR)
    # every column of a wrong type is named before the settings are looked at, as in every operator
    check_columns(
        fields,
        {"side_col": side_col, "key_col": key_col, "time_col": time_col, "value_col": value_col,
         "kind_col": kind_col, "watermark_col": watermark_col, "seq_col": seq_col, "batch_col": batch_col,
         "stream_id_col": stream_id_col},
        ("value_col", "seq_col", "batch_col"), kind_col, seq_col,
    )  # fmt: skip
    if kind_col is not None and watermark_col is None:
        raise InvalidConfig("kind_col needs watermark_col: the time of a watermark row")
    warn_without_seq(OPERATOR, seq_col, "the order they reach the operator")
    et = millis_column(fields, "time_col", time_col)
    kind = F.col(kind_col).cast("string") if kind_col else F.lit("event")
    if value_col:
        kind = value_checked_kind(kind, value_col)
    cols = [
        stream_id_column(stream_id_col, "wj_sid"),
        batch_marker(batch_col).alias("wj_batch"),
        *place_flags(seq_col, batch_col, "wj_"),
        kind.alias("wj_kind"),
        F.col(side_col).cast("string").alias("wj_side"),
        F.col(key_col).cast("string").alias("wj_key"),
        long_or_zero(et).alias("wj_et"),
        et.isNull().alias("wj_et_null"),
        (long_or_zero(value_col) if value_col else F.lit(0).cast("long")).alias("wj_value"),
    ]
    if seq_col:
        cols.append(long_or_zero(seq_col).alias("wj_seq"))
    if watermark_col:
        wm = millis_column(fields, "watermark_col", watermark_col)
        cols += [long_or_zero(wm).alias("wj_time"), wm.isNull().alias("wj_time_null")]
    default, per_stream = _stream_settings(settings, stream_configs)
    buckets = default_buckets(df.sparkSession) if buckets is None else require_int("buckets", buckets, 1)
    rows, unplaced = split_unplaced(df.select(*cols), "wj_")  # TR-16: no seq or batch, no place
    if seq_col and not seq_unique:
        rows = flag_duplicate_seqs(rows, "wj_")  # TR-15, before any row is routed
    rows = rows.withColumn("wj_bucket", F.explode(_targets(rows, buckets, seq_col is not None)))
    first = JoinBucketProcessor(default, per_stream, seq_col is not None, buckets)
    narrow = StreamTotalsProcessor(buckets)
    both = two_stages(rows, "wj_sid", "wj_bucket", first, WIDE_SCHEMA, narrow, PASS_SCHEMA)
    output = with_unplaced_errors(restore_nulls(both, OUTPUT_COLUMNS, LONG_COLS), unplaced, "wj_")
    # write_tables and foreach_batch: the wide stage alone, the narrow step in the sink
    step = SinkStep(OPERATOR, narrow, "totals", STREAM_SCHEMA, OUTPUT_COLUMNS, LONG_COLS)
    wide = one_stage(rows, "wj_sid", "wj_bucket", first, WIDE_SCHEMA)
    sink_rows = with_unplaced_errors(wide, unplaced, "wj_")
    return WindowJoinStreams(
        output=output, **table_projections(output, TABLE_COLUMNS), sink_rows=sink_rows, sink_step=step
    )


def _stream_settings(
    settings: Mapping[str, Any], stream_configs: Mapping[str, Mapping[str, Any]] | None
) -> tuple[StreamConfig, dict[str, StreamConfig]]:
    """The operator's own settings (when given: a query of stream_configs alone may omit them)."""
    if "join" in settings or not stream_configs:
        return stream_settings(validate_config, settings, stream_configs)
    _, per_stream = stream_settings(validate_config, {"join": "session_session", "gap_ms": 1}, stream_configs)
    return next(iter(per_stream.values())), per_stream


def _targets(rows: Any, buckets: int, ordered: bool) -> Any:
    """The buckets of each row: an event its key's, a watermark every one, the batch marker 0,
    anything else (an error row) one spread by its place."""
    from pyspark.sql import functions as F

    kind = F.col("wj_kind")
    event = (
        (kind == "event") & F.col("wj_side").isin(*SIDES) & F.col("wj_key").isNotNull() & ~F.col("wj_et_null")
    )
    watermark = (
        (kind == "watermark") & ~F.col("wj_time_null") if "wj_time_null" in rows.columns else F.lit(False)
    )
    spread = F.xxhash64(F.col("wj_batch"), F.col("wj_seq")) if ordered else F.lit(0)
    return (
        F.when(event, F.array(F.pmod(F.xxhash64(F.col("wj_key")), F.lit(buckets)).cast("int")))
        .when(watermark, F.sequence(F.lit(0), F.lit(buckets - 1)))
        .when(kind == "batch_end", F.array(F.lit(0)))
        .otherwise(F.array(F.pmod(spread, F.lit(buckets)).cast("int")))
    )


def window_joins(
    left_df: Any,
    right_df: Any,
    *,
    join: str | None = None,
    key_col: str,
    time_col: str,
    value_col: str | None = None,
    watermarks_df: Any = None,
    watermark_col: str = "watermark",
    seq_col: str | None = None,
    batch_col: str | None = None,
    stream_id_col: str | None = None,
    stream_configs: Mapping[str, Mapping[str, Any]] | None = None,
    size_ms: int | None = None,
    left_size_ms: int | None = None,
    right_size_ms: int | None = None,
    right_slide_ms: int | None = None,
    gap_ms: int | None = None,
    allowed_lateness_ms: int | None = None,
    buckets: int | None = None,
    seq_unique: bool = False,
) -> WindowJoinStreams:
    """Joins ``left_df`` and ``right_df`` (same column names for key, time, value, seq, batch and
    stream) by key and window; ``watermarks_df`` rows (``watermark_col``, with the same seq,
    batch and stream columns) set the join's input watermark (OXJ-R2). ``seq_col`` is one
    arrival order over the three inputs. See ``window_join_rows`` for the rest."""
    from pyspark.sql import functions as F

    shared = [c for c in (seq_col, batch_col, stream_id_col) if c]
    event_cols = [key_col, time_col, *([value_col] if value_col else []), *shared]
    for label, frame in (("left_df", left_df), ("right_df", right_df)):
        missing = [c for c in event_cols if c not in frame.columns]
        if missing:
            raise InvalidConfig(f"{label} lacks the columns {missing}")
    parts = [
        frame.select(
            *[F.col(c) for c in event_cols], F.lit(side).alias("wj_side_in"),
            F.lit("event").alias("wj_kind_in"),
        )
        for side, frame in (("left", left_df), ("right", right_df))
    ]  # fmt: skip
    rows = parts[0].unionByName(parts[1])
    kind_col = None
    if watermarks_df is not None:
        missing = [c for c in (watermark_col, *shared) if c not in watermarks_df.columns]
        if missing:
            raise InvalidConfig(f"watermarks_df lacks the columns {missing}")
        time_type = dict(rows.dtypes)[time_col]
        rows = rows.withColumn("wj_time_in", F.lit(None).cast(time_type))
        marks = watermarks_df.select(
            *[F.lit(None).cast(dict(rows.dtypes)[c]).alias(c) for c in event_cols if c not in shared],
            *[F.col(c) for c in shared], F.lit(None).cast("string").alias("wj_side_in"),
            F.lit("watermark").alias("wj_kind_in"), F.col(watermark_col).cast(time_type).alias("wj_time_in"),
        )  # fmt: skip
        rows = rows.unionByName(marks)
        kind_col = "wj_kind_in"
    return window_join_rows(
        rows, join=join, side_col="wj_side_in", key_col=key_col, time_col=time_col, value_col=value_col,
        kind_col=kind_col, watermark_col="wj_time_in" if kind_col else None, seq_col=seq_col,
        batch_col=batch_col, stream_id_col=stream_id_col, stream_configs=stream_configs, size_ms=size_ms,
        left_size_ms=left_size_ms, right_size_ms=right_size_ms, right_slide_ms=right_slide_ms, gap_ms=gap_ms,
        allowed_lateness_ms=allowed_lateness_ms, buckets=buckets, seq_unique=seq_unique,
    )  # fmt: skip


ENGINE_BUCKETS = 3


def engine_streams(
    df: Any,
    stream_configs: Mapping[str, Mapping[str, Any]],
    seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> WindowJoinStreams:
    """The harness engine's call (spark_impl.engine.area_module): one stream per trace, its rows
    carrying their side; the engine writes a query of this area alone through ``foreach_batch``
    (one stateful stage, the narrow step in the sink) and a query mixing areas through
    ``output``. ``seq_unique``: the engine's seqs are trace positions (TR-15). A row whose
    stream id is null has the operator's own settings (TR-16): here a tumbling join of 10 ms
    panes, which the hostile-row tests give their null stream too."""
    return window_join_rows(
        df, side_col="side", key_col="key", time_col="event_time", value_col="value", kind_col="kind",
        watermark_col="time", seq_col="seq", batch_col="batch", stream_id_col="trace_id",
        stream_configs=stream_configs, buckets=buckets, seq_unique=seq_unique,
        join="tumbling_tumbling", size_ms=10,
    )  # fmt: skip


def engine_output(
    df: Any,
    stream_configs: Mapping[str, Mapping[str, Any]],
    seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> Any:
    """``engine_streams``'s combined stream with both stages (``output``)."""
    return engine_streams(df, stream_configs, seq_unique, buckets).output


# ---- the state layout as a checkpoint holds it (read by spark_impl/checkpoints.py) ----------

LAYOUT = register(
    Operator(
        "window_joins", LAYOUT_VERSION,
        Stage({
            "bucket": lambda v, k: BucketState.from_tuple(v, value_buckets(v)),
            "windows": lambda v, k: unpack_window(v),
            "due": lambda v, k: unpack_due(v),
        }, ("bucket",)),
        Stage({"totals": lambda v, k: StreamState.from_tuple(v, value_buckets(v))}, ("totals",)),
        schema_fields(STREAM_SCHEMA),
    )
)  # fmt: skip


__all__ = [
    "BucketState",
    "ENGINE_BUCKETS",
    "JoinBucketProcessor",
    "LAYOUT_VERSION",
    "OUTPUT_SCHEMA",
    "SIDES",
    "StreamConfig",
    "StreamState",
    "StreamTotalsProcessor",
    "TABLE_COLUMNS",
    "WindowJoinStreams",
    "engine_output",
    "engine_streams",
    "pack_events",
    "pane_deadline",
    "reached_left_panes",
    "unpack_due",
    "unpack_window",
    "validate_config",
    "window_join_rows",
    "window_joins",
]
