"""The oxirs pipeline (spec/pipeline.md) on Spark Structured Streaming: the operators composed.

Usage
-----
The harness engine's form: ``engine_output(df, stream_configs)`` over the engine's input rows
(one row per trace item, ``spark_impl.engine.INPUT_SCHEMA``), one trace per ``trace_id``, each
with its own settings (OXP-R13), returns one stream whose ``output`` column names the table of
each row (harness/outputs.py, ``pipeline``). ``pipeline_rows`` is the same with the bucket count
given (fixed in the checkpoint); ``validate_config`` checks a trace's settings with each
operator's own Spark validation. Write the stream with a sink that keeps its own commit log (the
file sink, as the engine does), so each micro-batch's rows land once.

Design
------
Three ``transformWithStateInPandas`` stages, chained (each one's output is the next one's only
input, so none runs twice), all in ``timeMode="None"``: every watermark is carried in the rows,
never Spark's one per query. They are grouped by (stream id, bucket), (stream id, unit, bucket)
and (stream id, route), keys the checkpoint inspection tells them apart by. A row names the
group of the next stage it goes to (``p_unit``, ``p_bucket``); a table row rides in a ``pass``
group (the key stage: its bucket's group) that touches no state. Every operator's own Spark
code decides its rows:

- INGRESS STAGE, grouped by ingress stream bucket (``pmod(xxhash64(stream), buckets)``; clock
  and load items copied to every bucket, the batch marker and malformed items to bucket 0).
  The item checks of OXP-R14 are vectorised; the SLA operator's bucket processor
  (``spark_impl.sla_admission``) decides every well-formed event (OXP-R5) and reports the
  clock and load errors; then per ingress stream, vectorised in arrival order: the generator
  (OXW-R1..R3, a running count and maximum), the stream watermark as the running maximum of
  its emissions and reported watermarks (OXP-R8, regressions reported), each admitted event's
  late verdict against the watermark before it (OXP-R7). It writes ``ingress``, the streams'
  ``watermarks`` rows and ``errors``; it sends each kept event to its key's bucket of each join
  its stream feeds and to its channel's bucket of the aggregator (Spark's ``xxhash64`` of the key
  and of the channel, taken before the stage), and each rise of a stream's
  watermark to every bucket of each join the stream feeds and to the aggregator's watermark
  group (OXP-R2, R3). STATE: the SLA processor's own, and per ingress stream its generator
  count, maximum and watermark.
- CONSUMER STAGE: a join's bucket turns the stream watermark rises it gets into the join's
  watermark at each position (OXW-R13: the minimum over the join's streams, none while one has
  none) and hands its events and those watermark steps to the window-join operator's bucket
  processor (``spark_impl.window_joins``), at doubled positions (an event at 2 seq, the
  watermark its item causes at 2 seq + 1: OXP-R6's event before its own watermark); bucket 0
  writes the join's ``watermarks`` rows. An aggregator bucket hands its messages to the
  exactly-once operator's channel processor (``spark_impl.exactly_once_aggregation``), which
  writes ``messages`` and sends each folded message to its key's bucket. The aggregator's
  watermark group writes its ``watermarks`` rows (the minimum over every stream).
- KEY STAGE: the exactly-once operator's key processor folds the messages and writes
  ``aggregates``; the narrow group (one per stream id) reads the summary rows only (a few per
  group and batch), keeps the totals and writes ``progress`` (its watermark: the aggregator's,
  the minimum over every consumer, OXP-R10).
- STATE NAMES: each operator's processor opens its state through a handle that prefixes its
  variable names (``sla_``, ``tumbling_join_``, ``session_join_``, ``aggregator_``), so two
  processors in one stage never share a variable.
- RESTART (OXP-R11): everything is in the state store under the checkpoint.
- COST: a stream watermark rise is copied to every bucket of each join it feeds (rises x
  buckets rows; with ``advance_threshold`` 1 and ordered events nearly one rise per event).

Measured
--------
``bench/pipeline.py --events 20000 --rounds 3`` (docs/pipeline-benchmark.md), local[2], 8
shuffle partitions, each area's engine bucket count (3), 2026-12-04, medians of 3 rounds: 4,588
events/s end to end against 1,278 for its four parts run one after the other on the same events
(SLA admission 9,626, the tumbling join 4,875, the session join 4,893, the exactly-once
aggregation 3,717, each counting all the events); a micro-batch of 10 events costs 3.4 s, the
parts 8.2 s together.

Modules
-------
``settings`` (a pipeline's configuration, its validation and the layout version), ``layout``
(the units, the columns every stage shares, the state values), ``ingress`` (the first stage:
checks, admission, stream watermarks and late verdicts), ``consumers`` (the second stage: each
consumer's watermark, the joins and the exactly-once channels) and ``keys`` (the third stage:
the exactly-once keys and the progress group); this module holds the query, the harness
engine's call and the registered layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.outputs import TABLES
from harness.pipeline_settings import JOINS
from spark_impl import exactly_once_aggregation as eoa
from spark_impl import sla_admission, window_joins
from spark_impl.checkpoints import (
    CheckpointError,
    Operator,
    Stage,
    decoding,
    register,
    schema_fields,
    value_buckets,
)
from spark_impl.common import long_or_zero, require_int
from spark_impl.pipeline.consumers import ConsumerProcessor, node_steps
from spark_impl.pipeline.ingress import IngressProcessor, item_errors, run_stream
from spark_impl.pipeline.keys import KeyProcessor
from spark_impl.pipeline.layout import (
    CONSUMER_KEY,
    INGRESS_KEY,
    KEY_STAGE_KEY,
    LONG_COLS,
    NARROW,
    NARROW_BUCKET,
    NULLABLE_LONGS,
    SCHEMA,
    TABLE_COLUMNS,
    TOTALS_SCHEMA,
    BucketState,
    NodeState,
    StreamState,
)
from spark_impl.pipeline.settings import (
    AGGREGATOR,
    ENGINE_BUCKETS,
    LAYOUT_VERSION,
    OPERATOR,
    PROGRESS,
    PipelineConfig,
    validate_config,
)
from spark_impl.scaleout import ROUTE, restore_nulls

# ---- the query ---------------------------------------------------------------------------------


def _stage(df: Any, key: Sequence[str], processor: Any) -> Any:
    return df.groupBy(*key).transformWithStateInPandas(
        statefulProcessor=processor, outputStructType=SCHEMA, outputMode="Append", timeMode="None"
    )


def pipeline_rows(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], buckets: int = ENGINE_BUCKETS
) -> Any:
    """The pipeline over the engine's input rows (``trace_id``, ``batch``, ``seq``, ``kind`` and
    the item fields); one stream per trace id with its own settings. Returns the rows of every
    table: ``stream_id``, ``output`` and the table columns (harness/outputs.py)."""
    from pyspark.sql import functions as F

    from spark_impl.session import prepare_session

    prepare_session(df.sparkSession, OPERATOR)
    per_stream = {str(sid): validate_config(c) for sid, c in stream_configs.items()}
    buckets = require_int("buckets", buckets, 1)
    kind, stream = F.col("kind"), F.col("stream")
    placed = ((kind == "event") | (kind == "watermark")) & stream.isNotNull()
    targets = (
        F.when(placed, F.array(F.pmod(F.xxhash64(stream), F.lit(buckets)).cast("long")))
        .when(
            (kind == "clock") | (kind == "load"),
            F.sequence(F.lit(0).cast("long"), F.lit(buckets - 1).cast("long")),
        )
        .otherwise(F.array(F.lit(0).cast("long")))
    )
    rows = df.select(
        F.col("trace_id").alias("p_sid"),
        F.explode(targets).alias("p_bucket"),
        "batch",
        "seq",
        "kind",
        "stream",
        "key",
        "metrics",
        long_or_zero("value").alias("value"),
        *(long_or_zero(c).alias(c) for c in NULLABLE_LONGS),
        *(F.col(c).isNull().alias(f"{c}_null") for c in NULLABLE_LONGS),
        F.xxhash64(F.col("key")).alias("key_hash"),  # Spark's hash: stable across releases
        F.xxhash64(F.col("producer"), F.col("partition")).alias("channel_hash"),
    )
    ingress = _stage(rows, INGRESS_KEY, IngressProcessor(per_stream, buckets))
    consumers = _stage(ingress, CONSUMER_KEY, ConsumerProcessor(per_stream, buckets))
    route = F.when(F.col("p_unit") == NARROW, F.lit(NARROW_BUCKET).cast("long")).otherwise(F.col("p_bucket"))
    keyed = _stage(consumers.withColumn(ROUTE, route), KEY_STAGE_KEY, KeyProcessor(per_stream, buckets))
    tables = keyed.filter(F.col("output").isin(*TABLES[OPERATOR]))
    return restore_nulls(tables, ("output", "stream_id", *TABLE_COLUMNS), LONG_COLS)


def engine_output(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], buckets: int = ENGINE_BUCKETS
) -> Any:
    """The harness engine's call (spark_impl.engine.area_module): one stream per trace."""
    return pipeline_rows(df, stream_configs, buckets)


__all__ = [
    "PROGRESS",
    "PipelineConfig",
    "engine_output",
    "item_errors",
    "node_steps",
    "pipeline_rows",
    "run_stream",
    "validate_config",
]


# ---- the state layout as a checkpoint holds it (read by spark_impl/checkpoints.py) ----------

# Each stage holds its operators' processors' values in their own layouts, so the pipeline's
# layout version is theirs: a new layout of one of them is a new layout of the pipeline.
assert {sla_admission.LAYOUT_VERSION, window_joins.LAYOUT_VERSION, eoa.LAYOUT_VERSION} == {LAYOUT_VERSION}


def _as_pipelines(variable: str, decode: Any) -> Any:
    """An operator's decoder under the pipeline's name for its prefixed variable."""

    def checked(value: tuple[Any, ...], key: tuple[Any, ...]) -> Any:
        with decoding(OPERATOR, variable):
            try:
                return decode(value, key)
            except CheckpointError as error:
                own = f"{error.operator}: "
                finding = error.finding[len(own) :] if error.finding.startswith(own) else error.finding
                raise type(error)(f"{OPERATOR}: {finding}", error.advice, OPERATOR, variable) from None

    return checked


def _prefixed(prefix: str, stage: Stage) -> tuple[dict[str, Any], tuple[str, ...]]:
    """An operator's stage's variables as the pipeline names them, and which carry the layout."""
    variables = {prefix + name: _as_pipelines(prefix + name, d) for name, d in stage.variables.items()}
    return variables, tuple(prefix + name for name in stage.layout)


def _stage_of(own: Mapping[str, Any], *parts: tuple[dict[str, Any], tuple[str, ...]]) -> Stage:
    variables, layout = dict(own), list(own)
    for more, carried in parts:
        variables.update(more)
        layout += carried
    return Stage(variables, tuple(layout))


_SLA = _prefixed("sla_", sla_admission.LAYOUT.first)


_NODES = {
    f"{node}_node": (
        lambda v, k, variable=f"{node}_node": NodeState.from_tuple(v, value_buckets(v), variable)
    )
    for node in (*JOINS, AGGREGATOR)
}


_JOINS = [_prefixed(f"{name}_", window_joins.LAYOUT.first) for name in JOINS]


_CHANNELS = _prefixed(AGGREGATOR + "_", eoa.LAYOUT.first)


assert eoa.LAYOUT.middle is not None


_KEYS = _prefixed(AGGREGATOR + "_", eoa.LAYOUT.middle)


LAYOUT = register(
    Operator(
        OPERATOR,
        LAYOUT_VERSION,
        _stage_of({"bucket": lambda v, k: BucketState.from_tuple(v, value_buckets(v))}, _SLA),
        _stage_of({"totals": lambda v, k: StreamState.from_tuple(v, value_buckets(v))}, _KEYS),
        schema_fields(TOTALS_SCHEMA),
        middle=_stage_of(_NODES, *_JOINS, _CHANNELS),
        middle_key=CONSUMER_KEY,
    )
)
