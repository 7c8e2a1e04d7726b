"""SLA admission and backpressure (oxirs, spec/sla_admission.md) on Spark Structured Streaming.

Usage
-----
Apply the operator to a streaming DataFrame of events, each with its SLA
stream, its event time and its arrival time, and write its decisions::

    from spark_impl.sla_admission import sla_admission

    sla = sla_admission(
        df,                          # a streaming DataFrame
        stream_col="stream",         # the SLA stream an event belongs to (OXS-R15)
        event_time_col="ts",         # LongType milliseconds, or TimestampType
        now_col="arrived",           # the event's arrival time (OXS-R16): ms or a timestamp
        seq_col="offset",            # arrival order inside a micro-batch
        load_col="load",             # load score in thousandths, 0..1000 (OXS-R10, R16)
        priority_col="priority",     # 0 low, 1 normal (null), 2 high, 3 critical (OXS-R11)
        streams={"orders": {"class": "Gold", "max_lag": 800}, "audit": {"class": "Bronze"}},
        policy="Strict",             # "PreferThrottle" | "BypassShedder" (OXS-R13)
        shedder={"threshold": 700, "seed": 7},
    )
    query = sla.write_by_decision(out_dir, checkpoint_dir)  # <out_dir>/decision=admit/, ...

``sla.output`` is the one combined stream (schema ``OUTPUT_SCHEMA``); its
``output`` column names the table of a row. Projections (each its own
streaming plan: write ``sla.output`` once, use ``write_tables`` or
``write_by_decision``, never one query per projection, which would run the
operator and spend its tokens once per query, OXS-R19):

- ``sla.decisions``: one row per well-formed event with its ``decision``
  (admit | reject | shed | throttle), ``reason``, ``tokens_left`` and ``lag``
  (OXS-R5..R13, R17).
- ``sla.streams``: per registered SLA stream and batch with events, its
  counters since the start and its token level.
- ``sla.progress``: per micro-batch, the decision counts since the start and
  the load score (null without a shedder).
- ``sla.errors``: malformed rows with the reason (OXS-R15, R16).

The settings are those of a trace (OXS-R14): ``streams`` maps an SLA stream
name to its agreement (``class``, ``max_events_per_sec``, ``max_lag``,
``jitter_budget_ms``, ``token_cost``), ``policy`` and ``shedder``.
``stream_id_col`` runs many independent operators in one query and
``stream_configs`` gives such a stream id its own settings. ``batch_col`` is
the batch number reported; without it ``batch`` is the micro-batch's start
instant in epoch milliseconds. Without ``seq_col`` the rows of a micro-batch
are taken in arrival-time order (ties by event time, stream and priority)
and the output ``seq`` is null.

With ``kind_col`` (the harness's form, needs ``seq_col``) the arrival time and
the load are not columns but rows: ``clock`` rows (``time_col``) move the
processing clock and ``load`` rows (``metrics_col``: JSON text of
``[name, value]`` pairs) report the metrics of OXS-R10.

Design
------
``docs/architecture.md`` draws the stages. In short:

- UNIT: the SLA stream. A token bucket is sequential within its stream and
  independent of every other one, so an event row goes to the bucket
  ``pmod(xxhash64(stream), buckets)``; an event without a stream and any row
  of an unsupported kind go to bucket 0, and so does the harness's
  ``batch_end`` marker (every batch gets its progress row).
- COPIED ROWS (``kind_col`` only): ``clock`` and ``load`` rows go to every
  bucket (an ``explode``), so every bucket computes each event's ``now``
  (the running clock in seq order from the clock in its state) and the load
  score in effect (the metrics forward-filled in seq order from the metrics
  in its state). Their error rows and the progress's load score come from
  bucket 0 only, so each is reported once.
- WIDE STAGE, grouped by (stream id, bucket), ``timeMode="None"``: errors,
  lags, drop probabilities and arrival positions are numpy expressions over
  the batch; the checks of OXS-R6..R8 and the shedder's draw run in one plain
  loop per SLA stream over its events in seq order (the bucket level, the
  last refill and the jitter reference are sequential by nature). It writes
  the ``decisions``, ``streams`` and ``errors`` rows and one summary row per
  bucket and batch (decision count deltas; bucket 0 adds the load score).
- STATE of a wide group: a ``MapState`` from SLA stream name to one small
  value (level and last refill in nano-tokens and ms, the jitter reference,
  the arrival counter, the six counters), read only for the streams a batch
  names; a ``ValueState`` with the layout version, the bucket count, the
  clock and the four metrics.
- NARROW STAGE, one group per stream id (route -1 of the second stage):
  reads the summaries only, keeps the totals and the load score, writes
  ``progress``. Table rows pass through the second stage in their bucket's
  group (a stateful stage feeding two branches would run twice).
- SINK STEP: ``write_tables`` and ``foreach_batch`` run the narrow group's work in
  the sink instead (``spark_impl.scaleout.SinkStep``): each micro-batch's rows of route
  -1 are collected to the driver and folded with the stream's state, kept in two
  slots under ``<checkpoint>/sink_step/``; ``output`` runs it in a second stateful stage.
- EXACT: tokens are int64 nano-tokens (OXS-R3), refills multiply a time
  difference capped at the time a bucket takes to fill, times saturate at
  the i64 bounds; long columns cross between the stages as a value and a
  null mask, and ``tokens_left`` / ``tokens`` become float64 only in the last
  projection (level / 1e9: one IEEE division, the same as Python's).
- RESTART (OXS-R18): everything is in the state store under the checkpoint;
  ``buckets`` and the layout version are fixed in it (another value is
  refused with a message naming both).

Measured
--------
``bench/sla_admission.py``, 1,000,000 events in 10 micro-batches, local[2], 8
shuffle partitions (32 buckets), a Gold/Silver mix with a shedder, on a
2-core machine shared with other jobs (load about 4), 2026-11-26: 11,753
decisions/s for 10 SLA streams and 8,416 for 10,000 (batches 2..), against
66,435 and 84,018 events/s for ``groupBy("stream").count()`` (0.18x, 0.10x).
With 10 streams the wide stage's busiest task reads 3.2x its fair share (a
stream is one unit of work, and 10 of them land on 8 tasks unevenly); with
10,000 it is 1.74x. The narrow group reads at most one summary row per bucket
and batch. Without Spark, the wide stage's Python work is about 0.2 s per
100,000 events over 10 streams and 0.5 s over 10,000: the cost is Spark's
fixed cost per stage and partition, the two Arrow crossings and the state
calls (one read and one write per SLA stream a batch names).

Modules
-------
``settings`` (classes, policies, decisions and reasons as codes, an agreement's validation,
the layout version), ``rules`` (the load score, the metrics report, drop probabilities and
draws, the saturating lag), ``layout`` (the columns, the schemas between the stages and the
state values) and ``stages`` (a stream's decisions, one bucket's batch and the two stages'
processors); this module holds the operator, the harness engine's call and the registered
layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.traces import InvalidConfig
from spark_impl.checkpoints import Operator, Stage, register, schema_fields, value_buckets
from spark_impl.common import (
    OperatorStreams,
    batch_marker,
    check_columns,
    event_time_millis,
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
from spark_impl.scaleout import (
    SinkStep,
    default_buckets,
    flag_duplicate_seqs,
    one_stage,
    processing_time,
    restore_nulls,
    to_buckets,
    two_stages,
)
from spark_impl.session import prepare_session
from spark_impl.sla_admission.layout import (
    FLOAT_COLS,
    LONG_COLS,
    OUTPUT_COLUMNS,
    OUTPUT_SCHEMA,
    PASS_SCHEMA,
    STREAM_SCHEMA,
    TABLE_COLUMNS,
    WIDE_SCHEMA,
    BucketState,
    SlaEntry,
    StreamState,
)
from spark_impl.sla_admission.rules import (
    drop_probabilities,
    load_score,
    metrics_report,
    saturating_lag,
)
from spark_impl.sla_admission.settings import (
    LAYOUT_VERSION,
    NANO,
    SLA_CLASSES,
    Agreement,
    SlaConfig,
    validate_config,
)
from spark_impl.sla_admission.stages import (
    SlaBucketProcessor,
    SlaSummaryProcessor,
    admit_stream,
    process_batch,
)


@dataclass
class SlaAdmissionStreams(OperatorStreams):
    """The operator's output: ``output`` (combined) and its projections; ``write_tables`` writes
    every table from one query, ``write_by_decision`` the decisions split by decision."""

    table_columns = TABLE_COLUMNS

    output: Any
    decisions: Any
    streams: Any
    progress: Any
    errors: Any
    sink_rows: Any = None
    sink_step: Any = None

    def write_by_decision(
        self, path: str, checkpoint_location: str, *, trigger: Mapping[str, Any] | None = None,
        query_name: str | None = None,
    ) -> Any:  # fmt: skip
        """OXS-R19: ONE query writing the decisions as Parquet under ``<path>/decision=<d>/``
        (admit, reject, shed, throttle): every decision of one run of the operator, whose tokens
        are spent once. ``query_name`` names the query (a progress listener finds it by name).
        Returns the StreamingQuery."""
        writer = (
            self.decisions.writeStream.format("parquet").partitionBy("decision")
            .option("path", path).option("checkpointLocation", checkpoint_location)
        )  # fmt: skip
        if query_name:
            writer = writer.queryName(query_name)
        if trigger:
            writer = writer.trigger(**trigger)
        return writer.start()


def sla_admission(
    df: Any,
    stream_col: str,
    event_time_col: str,
    now_col: str | None = None,
    load_col: str | None = None,
    priority_col: str | None = None,
    streams: Mapping[str, Mapping[str, Any]] | None = None,
    policy: str = "Strict",
    shedder: Mapping[str, Any] | None = None,
    seq_col: str | None = None,
    kind_col: str | None = None,
    time_col: str | None = None,
    metrics_col: str | None = None,
    stream_id_col: str | None = None,
    batch_col: str | None = None,
    stream_configs: Mapping[str, Mapping[str, Any]] | None = None,
    buckets: int | None = None,
    seq_unique: bool = False,
) -> SlaAdmissionStreams:
    """Decides admit, reject, shed or throttle for every event (see the module docstring).

    ``buckets``: groups per stream id in the wide stage, each holding the SLA streams that hash
    to it (default: 4 per shuffle partition of the session), fixed in the checkpoint.
    ``seq_unique``: the producer guarantees that ``seq_col`` is unique per stream and batch,
    which skips the duplicate check (TR-15: every row of a repeated seq is a ``duplicate_seq``
    error row), one shuffle less.
    Raises ``harness.traces.InvalidConfig`` for a bad setting or column.
    """
    from pyspark.sql import functions as F

    settings: dict[str, Any] = {"streams": dict(streams or {}), "policy": policy}
    if shedder is not None:
        settings["shedder"] = shedder
    default, per_stream = stream_settings(validate_config, settings, stream_configs)
    buckets = default_buckets(df.sparkSession) if buckets is None else require_int("buckets", buckets, 1)
    fields = {f.name: f.dataType for f in df.schema.fields}
    prepare_session(df.sparkSession, "sla_admission")
    if kind_col is not None:
        if now_col is not None or load_col is not None:
            raise InvalidConfig("kind_col takes the time from clock rows and the load from load rows: "
                                "give now_col and load_col without kind_col")  # fmt: skip
    else:
        if now_col is None:
            raise InvalidConfig(
                "now_col is required: every event is judged at its own arrival time (OXS-R16)"
            )
        if time_col is not None or metrics_col is not None:
            raise InvalidConfig(
                "time_col and metrics_col are read from clock and load rows: they need kind_col"
            )
        if load_col is None:
            for sid, cfg in [("", default), *per_stream.items()]:
                if cfg.shedder is not None:
                    where = f"stream {sid!r}: " if sid else ""
                    raise InvalidConfig(f"{where}a shedder needs load_col: a constant load would decide "
                                        "nothing (OXS-R16)")  # fmt: skip
    warn_without_seq("sla_admission", seq_col, "arrival-time order (now_col), ties by event time")
    check_columns(
        fields,
        {"stream_col": stream_col, "event_time_col": event_time_col, "load_col": load_col,
         "priority_col": priority_col, "seq_col": seq_col, "kind_col": kind_col, "time_col": time_col,
         "metrics_col": metrics_col, "stream_id_col": stream_id_col, "batch_col": batch_col},
        ("load_col", "priority_col", "seq_col", "batch_col"),
        kind_col, seq_col, text=("metrics_col",),
    )  # fmt: skip
    if now_col is not None and now_col not in fields:
        raise InvalidConfig(f"now_col={now_col!r} is not a column of the input ({sorted(fields)})")
    et = event_time_millis(fields, event_time_col)
    # Only the columns the input has cross into the Python worker; the processor fills the rest.
    cols = [
        stream_id_column(stream_id_col, "sa_sid"),
        batch_marker(batch_col).alias("sa_batch"),
        F.col(stream_col).cast("string").alias("sa_stream"),
        long_or_zero(et).alias("sa_et"),
        et.isNull().alias("sa_et_null"),
        *place_flags(seq_col, batch_col, "sa_"),
    ]
    if seq_col:
        cols.append(long_or_zero(seq_col).alias("sa_seq"))
    if kind_col:
        cols.append(F.col(kind_col).cast("string").alias("sa_kind"))
    if metrics_col:
        cols.append(F.col(metrics_col).cast("string").alias("sa_metrics"))
    now = processing_time(fields, now_col) if now_col else None
    time = millis_column(fields, "time_col", time_col) if time_col else None
    for expr, alias in ((priority_col, "sa_priority"), (time, "sa_time"), (load_col, "sa_load"),
                        (now, "sa_now")):  # fmt: skip
        if expr is not None:
            column = F.col(expr) if isinstance(expr, str) else expr
            cols += [long_or_zero(column).alias(alias), column.isNull().alias(f"{alias}_null")]
    rows, unplaced = split_unplaced(df.select(*cols), "sa_")  # TR-16: no seq or batch, no place
    if seq_col and not seq_unique:
        rows = flag_duplicate_seqs(rows, "sa_")  # TR-15, before any row is routed
    # An event goes to its SLA stream's bucket; clock and load rows to every bucket; the rest
    # (an event without a stream, an unsupported kind, the batch_end marker) to bucket 0.
    per_stream_row = F.col("sa_stream").isNotNull()
    to_first = F.lit(True)  # without kind_col every row is an event
    if "sa_kind" in rows.columns:
        kind = F.col("sa_kind")
        per_stream_row = per_stream_row & (kind == "event")
        to_first = F.coalesce(~kind.isin("clock", "load"), F.lit(True))
    rows = to_buckets(
        rows, buckets, F.xxhash64(F.col("sa_stream")), per_stream_row, to_first, F.lit(False), "sa_bucket"
    )
    first = SlaBucketProcessor(default, per_stream, seq_col is not None, buckets, kind_col is not None,
                               load_col is not None)  # fmt: skip
    narrow = SlaSummaryProcessor(default, per_stream, buckets)
    both = two_stages(rows, "sa_sid", "sa_bucket", first, WIDE_SCHEMA, narrow, PASS_SCHEMA)
    output = _in_tokens(with_unplaced_errors(restore_nulls(both, OUTPUT_COLUMNS, LONG_COLS), unplaced, "sa_"))
    # write_tables and foreach_batch: the wide stage alone, the narrow step in the sink
    step = SinkStep("sla_admission", narrow, "totals", STREAM_SCHEMA, OUTPUT_COLUMNS, LONG_COLS, _in_tokens)
    wide = one_stage(rows, "sa_sid", "sa_bucket", first, WIDE_SCHEMA)
    sink_rows = with_unplaced_errors(wide, unplaced, "sa_")
    return SlaAdmissionStreams(
        output=output, **table_projections(output, TABLE_COLUMNS), sink_rows=sink_rows, sink_step=step
    )


def _in_tokens(restored: Any) -> Any:
    """OXS-R3: the reported level is nano-tokens / 10^9, one IEEE division (exact below 2^53).
    SQL text, one call: the sink step runs it every micro-batch (scaleout.restore_nulls says why)."""
    nano = f"CAST({NANO} AS DOUBLE)"
    return restored.selectExpr(*[
        f"CAST(`{c}` AS DOUBLE) / {nano} AS `{c}`" if c in FLOAT_COLS else f"`{c}`" for c in OUTPUT_COLUMNS
    ])  # fmt: skip


ENGINE_BUCKETS = 3


def engine_streams(
    df: Any,
    stream_configs: Mapping[str, Mapping[str, Any]],
    seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> SlaAdmissionStreams:
    """The harness engine's call (spark_impl.engine.area_module): one stream id per trace; the
    engine writes a query of this area alone through ``foreach_batch`` (one stateful stage, the
    narrow step in the sink) and a query mixing areas through ``output``.

    Few buckets: every group costs a Python call per micro-batch, and a trace's handful of
    SLA streams still spreads over three. ``seq_unique``: the engine's seqs are trace positions,
    unique by construction; False checks them (TR-15)."""
    return sla_admission(
        df, stream_col="key", event_time_col="event_time", priority_col="priority", kind_col="kind",
        seq_col="seq", time_col="time", metrics_col="metrics", stream_id_col="trace_id", batch_col="batch",
        stream_configs=stream_configs, buckets=buckets, seq_unique=seq_unique,
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
        "sla_admission", LAYOUT_VERSION,
        Stage({
            "bucket": lambda v, k: BucketState.from_tuple(v, value_buckets(v)),
            "sla_streams": lambda v, k: SlaEntry.from_tuple(v),
        }, ("bucket",)),
        Stage({"totals": lambda v, k: StreamState.from_tuple(v, value_buckets(v))}, ("totals",)),
        schema_fields(STREAM_SCHEMA),
    )
)  # fmt: skip


__all__ = [
    "ENGINE_BUCKETS",
    "LAYOUT_VERSION",
    "OUTPUT_SCHEMA",
    "SLA_CLASSES",
    "Agreement",
    "BucketState",
    "SlaAdmissionStreams",
    "SlaBucketProcessor",
    "SlaConfig",
    "SlaEntry",
    "SlaSummaryProcessor",
    "StreamState",
    "admit_stream",
    "drop_probabilities",
    "engine_output",
    "load_score",
    "metrics_report",
    "process_batch",
    "saturating_lag",
    "sla_admission",
    "validate_config",
]
