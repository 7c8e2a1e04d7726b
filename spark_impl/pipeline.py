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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.outputs import TABLES
from harness.pipeline_settings import JOINS, JoinOf, read_settings
from harness.traces import I64_MIN
from spark_impl import exactly_once_aggregation as eoa
from spark_impl import late_data, sla_admission, window_joins
from spark_impl.checkpoints import (
    CheckpointError,
    Operator,
    Stage,
    decoding,
    layout_refusal,
    register,
    schema_fields,
    value_buckets,
)
from spark_impl.common import (
    OutputRows,
    long_or_zero,
    require_int,
    sat_sub,
)
from spark_impl.scaleout import (
    NULL_MASK,
    ROUTE,
    UnitStage,
    check_layout,
    pack_text,
    restore_nulls,
    unpack_text,
)

OPERATOR = "pipeline"
LAYOUT_VERSION = 1
ACCEPTED_KINDS = ("event", "watermark", "clock", "load")  # OXP-R14
AGGREGATOR = "aggregator"
PROGRESS = TABLES[OPERATOR]["progress"][1:-1]  # the counters between batch and watermark
INGRESS_COUNTERS = PROGRESS[:7]  # admitted .. reassigned: the ingress stage's
ENGINE_BUCKETS = 3
#: the item fields that may be missing, which enter the first stage as 0 and a null flag (a
#: nullable long would reach pandas as a float, exact only to 2**53)
NULLABLE_LONGS = ("event_time", "time", "priority", "producer", "partition", "sequence")

# units: the group of the next stage a row goes to
INGRESS, PASS, NARROW, KEYS, AGGREGATOR_WATERMARK = (
    "ingress",
    "pass",
    "narrow",
    "keys",
    "aggregator_watermark",
)
NARROW_BUCKET = -1

STRING_COLS = (
    "output", "stream_id", "p_unit", "stream", "key", "decision", "reason", "verdict", "node", "join", "side",
    "kind", "number",
)  # fmt: skip
LONG_COLS = (
    "batch",
    "seq",
    "event_time",
    "watermark",
    "assigned_time",
    "left_batch",
    "left_seq",
    "left_time",
    "left_value",
    "right_batch",
    "right_seq",
    "right_time",
    "right_value",
    "producer",
    "partition",
    "sequence",
    "count",
    *PROGRESS,
    "value",
    "p_bits",
    "p_order",
    "p_key_bucket",
    "p_bucket",
)
COLUMNS = (*STRING_COLS, *LONG_COLS)
SCHEMA = ", ".join(
    [f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in COLUMNS] + [f"`{NULL_MASK}` long"]
)
TABLE_COLUMNS = tuple(dict.fromkeys(c for cols in TABLES[OPERATOR].values() for c in cols))
BUCKET_SCHEMA = (
    "layout_version int, buckets int, seen binary, max_observed binary, watermark binary, flags binary, "
    "stream_lengths binary, stream_bytes binary"
)
NODE_SCHEMA = (
    "layout_version int, buckets int, watermarks binary, present binary, stream_lengths binary, "
    "stream_bytes binary"
)
TOTALS_SCHEMA = "layout_version int, buckets int, totals binary, watermark long, has_watermark boolean"
#: the grouping columns of each stage: the inspection of a checkpoint tells its stages apart by them
INGRESS_KEY = ("p_sid", "p_bucket")
CONSUMER_KEY = ("stream_id", "p_unit", "p_bucket")
KEY_STAGE_KEY = ("stream_id", ROUTE)


# ---- configuration (OXP-R13) -------------------------------------------------------------------


JoinSpec = JoinOf[window_joins.StreamConfig]  # a join and the streams of its sides (OXP-R3)


@dataclass(frozen=True)
class PipelineConfig:
    admission: sla_admission.SlaConfig
    streams: tuple[str, ...]
    advance_threshold: int
    max_out_of_order_ms: int
    policy: str
    max_lateness: int
    joins: tuple[JoinSpec, ...]
    aggregation: eoa.StreamConfig


def _admission(settings: Mapping[str, Any]) -> tuple[sla_admission.SlaConfig, Sequence[str]]:
    admission = sla_admission.validate_config(settings)
    return admission, tuple(admission.streams)


def _generator(settings: dict[str, Any]) -> tuple[int, int]:
    """OXW-R4: (advance_threshold, max_out_of_order_ms)."""
    threshold = require_int("advance_threshold", settings.get("advance_threshold", 1), 1)
    return threshold, require_int("max_out_of_order_ms", settings.get("max_out_of_order_ms", 0), 0)


def validate_config(config: Mapping[str, Any]) -> PipelineConfig:
    """OXP-R13: each operator's settings checked by that operator's Spark validation."""
    read = read_settings(
        config, _admission, _generator, late_data.validate_config, window_joins.validate_config,
        eoa.validate_config,
    )  # fmt: skip
    (threshold, delay), policy = read.generator, read.late
    return PipelineConfig(
        read.admission,
        read.streams,
        threshold,
        delay,
        policy.policy,
        policy.max_lateness,
        read.joins,
        read.aggregation,
    )


# ---- shared pieces -----------------------------------------------------------------------------


class _Prefixed:
    """A state handle whose variable names get a prefix: two operators' processors in one stage."""

    def __init__(self, handle: Any, prefix: str) -> None:
        self.handle, self.prefix = handle, prefix

    def getValueState(self, name: str, schema: Any, *args: Any) -> Any:
        return self.handle.getValueState(self.prefix + name, schema, *args)

    def getMapState(self, name: str, key_schema: Any, value_schema: Any, *args: Any) -> Any:
        return self.handle.getMapState(self.prefix + name, key_schema, value_schema, *args)


#: an operator processor's default settings, which the pipeline never uses: it hands each call its
#: stream's own
_EACH_CALL: Any = None


def _out(stream_id: str | None) -> OutputRows:
    return OutputRows(stream_id, COLUMNS, STRING_COLS)


def _longs(frame: pd.DataFrame, long_cols: Sequence[str], name: str) -> tuple[np.ndarray, np.ndarray]:
    """A long column of a masked frame: (values, is null)."""
    bit = np.int64(1) << np.int64(list(long_cols).index(name))
    return frame[name].to_numpy(np.int64), (frame[NULL_MASK].to_numpy(np.int64) & bit) != 0


class _Stage(UnitStage):
    """A stage of the pipeline: every stage has the same columns, and each stream id its settings."""

    columns = (*COLUMNS, NULL_MASK)


# ---- state layouts (OXP-R11) -------------------------------------------------------------------
# The stages also hold the state of the operators' processors they run, under prefixed names, in
# those operators' own layouts; the pipeline's layout version is theirs (checked below).


def _ints(data: Any, n: int, what: str) -> np.ndarray:
    values = np.frombuffer(bytes(data), np.int64)
    if len(values) != n:
        raise ValueError(f"{what}: {len(values)} numbers for {n} streams")
    return values.copy()


def _names(lengths: Any, data: Any) -> tuple[str, ...]:
    return tuple(str(s) for s in unpack_text(bytes(lengths), bytes(data)).tolist())


def _text(names: Sequence[str]) -> tuple[bytes, bytes]:
    return pack_text(np.array(list(names), dtype=object))


@dataclass
class BucketState:
    """An ingress bucket's ``bucket`` value: per ingress stream it has seen, its generator's
    count and maximum and its watermark (OXW-R1..R3, OXP-R8); a bucket holds few streams."""

    buckets: int
    streams: dict[str, tuple[int, int, bool, int, bool]]  # seen, max, has max, watermark, has one

    def to_tuple(self) -> tuple[Any, ...]:
        names = list(self.streams)
        rows = [self.streams[n] for n in names]
        column = [np.array([r[i] for r in rows], np.int64) for i in (0, 1, 3)]
        flags = np.array([int(r[2]) | int(r[4]) << 1 for r in rows], np.uint8)
        return (LAYOUT_VERSION, self.buckets, *(c.tobytes() for c in column), flags.tobytes(), *_text(names))

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, "bucket")
        with decoding(OPERATOR, "bucket"):
            names = _names(value[6], value[7])
            seen, top, mark = (
                _ints(value[i], len(names), f) for i, f in ((2, "seen"), (3, "max"), (4, "mark"))
            )
            flags = np.frombuffer(bytes(value[5]), np.uint8)
            if len(flags) != len(names):
                raise ValueError(f"flags: {len(flags)} for {len(names)} streams")
            streams = {
                n: (int(seen[i]), int(top[i]), bool(flags[i] & 1), int(mark[i]), bool(flags[i] & 2))
                for i, n in enumerate(names)
            }
        return cls(buckets, streams)


@dataclass
class NodeState:
    """A consumer group's ``<node>_node`` value: the last watermark of each stream feeding it."""

    buckets: int
    streams: tuple[str, ...]
    watermarks: np.ndarray
    present: np.ndarray

    def to_tuple(self) -> tuple[Any, ...]:
        return (LAYOUT_VERSION, self.buckets, np.asarray(self.watermarks, np.int64).tobytes(),
                np.asarray(self.present, bool).tobytes(), *_text(self.streams))  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int, variable: str) -> NodeState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, variable)
        with decoding(OPERATOR, variable):
            streams = _names(value[4], value[5])
            present = np.frombuffer(bytes(value[3]), bool).copy()
            if len(present) != len(streams):
                raise ValueError(f"present: {len(present)} flags for {len(streams)} streams")
            return cls(buckets, streams, _ints(value[2], len(streams), "watermarks"), present)


@dataclass
class StreamState:
    """The narrow group's ``totals``: the progress counters and the consumers' watermark."""

    buckets: int
    totals: list[int]
    watermark: int = 0
    has_watermark: bool = False

    def to_tuple(self) -> tuple[Any, ...]:
        counts = np.array(self.totals, np.int64).tobytes()
        return (LAYOUT_VERSION, self.buckets, counts, self.watermark, self.has_watermark)

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> StreamState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, "totals")
        with decoding(OPERATOR, "totals"):
            counts = np.frombuffer(bytes(value[2]), np.int64)
            if len(counts) != len(PROGRESS):
                raise ValueError(f"{len(counts)} counters where the progress table has {len(PROGRESS)}")
            if len(value) != 5:
                raise ValueError(f"{len(value)} fields where the layout has 5")
            return cls(buckets, [int(c) for c in counts], int(value[3]), bool(value[4]))


# ---- the ingress stage -------------------------------------------------------------------------


def item_errors(pdf: pd.DataFrame, streams: Sequence[str]) -> np.ndarray:
    """OXP-R14's stateless checks in its order: the reason per row, None where none holds."""
    kind = pdf["kind"].to_numpy(object)
    n = len(pdf)
    null = {c: pd.isna(pdf[c]).to_numpy(bool) for c in ("stream", "key")}
    null.update({c: pdf[c + "_null"].to_numpy(bool) for c in NULLABLE_LONGS})
    event, mark = kind == "event", kind == "watermark"
    priority = pdf["priority"].to_numpy(np.int64)
    sequence = pdf["sequence"].to_numpy(np.int64)
    registered = pdf["stream"].isin(list(streams)).to_numpy(bool)
    rules = (
        (kind == "duplicate_seq", "duplicate_seq"),
        (~np.isin(kind, np.array([*ACCEPTED_KINDS, "batch_end"], dtype=object)), "unsupported_item"),
        ((event | mark) & null["stream"], "missing_stream"),
        (event & null["event_time"], "missing_event_time"),
        (event & ~null["priority"] & ((priority < 0) | (priority > 3)), "invalid_priority"),
        (event & null["key"], "missing_key"),
        (event & (null["producer"] | null["partition"] | null["sequence"]), "missing_id"),
        (event & (sequence < 0), "invalid_sequence"),
        (mark & ~registered, "unknown_stream"),
        (mark & null["time"], "missing_time"),
    )
    reason = np.full(n, None, dtype=object)
    open_ = np.ones(n, bool)
    for mask, name in rules:
        hit = open_ & mask
        reason[hit] = name
        open_ &= ~hit
    return reason


def _sla_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The SLA operator's input columns (its harness form: clock and load rows as items)."""
    return pd.DataFrame(
        {
            "sa_batch": rows["batch"].to_numpy(np.int64),
            "sa_seq": rows["seq"].to_numpy(np.int64),
            "sa_kind": rows["kind"].to_numpy(object),
            "sa_stream": rows["stream"].to_numpy(object),
            "sa_et": rows["event_time"].to_numpy(np.int64),
            "sa_et_null": rows["event_time_null"].to_numpy(bool),
            "sa_priority": rows["priority"].to_numpy(np.int64),
            "sa_priority_null": rows["priority_null"].to_numpy(bool),
            "sa_time": rows["time"].to_numpy(np.int64),
            "sa_time_null": rows["time_null"].to_numpy(bool),
            "sa_metrics": rows["metrics"].to_numpy(object),
        }
    )


def _shift(after: Any, first: Any) -> np.ndarray:
    """The value before each position: ``first``, then ``after`` moved one on."""
    return np.concatenate([np.array([first], dtype=after.dtype), after[:-1]])


@dataclass
class StreamRun:
    """One ingress stream's rows of a call, in arrival order: generator and watermark (OXP-R8)."""

    before: np.ndarray  # the stream watermark before each row
    has_before: np.ndarray
    after: np.ndarray
    has_after: np.ndarray
    state: tuple[int, int, bool, int, bool]


def run_stream(
    state: tuple[int, int, bool, int, bool], is_event: np.ndarray, et: np.ndarray, reported: np.ndarray,
    threshold: int, delay: int,
) -> StreamRun:  # fmt: skip
    """OXW-R1..R3 per admitted event, the reported watermarks (``reported``, at rows that are no
    event) and OXP-R8's maximum: the stream watermark before and after each row."""
    seen, top, has_top, mark, has_mark = state
    count = seen + np.cumsum(is_event)
    running = np.maximum.accumulate(np.where(is_event, et, np.int64(I64_MIN)))
    if has_top:
        running = np.maximum(running, np.int64(top))
    has_running = has_top | (np.cumsum(is_event) > 0)
    emits = is_event & (count % threshold == 0)
    candidate = np.where(emits, sat_sub(running, delay), np.where(is_event, np.int64(I64_MIN), reported))
    has_candidate = emits | ~is_event
    after = np.maximum.accumulate(np.where(has_candidate, candidate, np.int64(I64_MIN)))
    if has_mark:
        after = np.maximum(after, np.int64(mark))
    has_after = has_mark | (np.cumsum(has_candidate) > 0)
    n = len(is_event)
    new_state = (
        int(count[-1]) if n else seen,
        int(running[-1]) if n and has_running[-1] else top,
        bool(has_running[-1]) if n else has_top,
        int(after[-1]) if n and has_after[-1] else mark,
        bool(has_after[-1]) if n else has_mark,
    )
    return StreamRun(_shift(after, np.int64(mark)), _shift(has_after, has_mark), after, has_after, new_state)


class IngressProcessor(_Stage):
    """Admission, the generators and the late verdicts of the ingress streams of one bucket."""

    units = (INGRESS,)

    def open_state(self, handle: Any) -> None:
        self.sla = sla_admission.SlaBucketProcessor(_EACH_CALL, {}, True, self.buckets, True, False)
        self.sla.open_state(_Prefixed(handle, "sla_"))
        self.state = handle.getValueState("bucket", BUCKET_SCHEMA)

    def group(self, key: Any) -> tuple[str, int]:
        return INGRESS, int(key[1])

    def process(
        self, stream_id: str | None, unit: str, bucket: int, cfg: PipelineConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        stored = self.state.get()
        st = (
            BucketState(self.buckets, {})
            if stored is None
            else BucketState.from_tuple(tuple(stored), self.buckets)
        )
        pdf = pdf.sort_values(["batch", "seq"], kind="stable", ignore_index=True)
        out = _out(stream_id)
        reason = item_errors(pdf, cfg.streams)
        kind = pdf["kind"].to_numpy(object)
        clean = pd.isna(pd.Series(reason, dtype=object)).to_numpy(bool)
        to_sla = clean & np.isin(kind, np.array(["event", "clock", "load", "batch_end"], dtype=object))
        sla = pd.concat(list(self.sla.process(stream_id, bucket, cfg.admission, _sla_frame(pdf[to_sla]))),
                        ignore_index=True)  # fmt: skip
        sla_output = sla["output"].to_numpy(object)
        decided = sla[sla_output == "decisions"]
        # every SLA row has its seq: one row per (batch, seq) of this call
        where = pd.MultiIndex.from_arrays([pdf["batch"].to_numpy(np.int64), pdf["seq"].to_numpy(np.int64)])
        at = where.get_indexer(pd.MultiIndex.from_arrays([decided["batch"].to_numpy(np.int64),
                                                          decided["seq"].to_numpy(np.int64)]))  # fmt: skip
        decision = np.full(len(pdf), None, dtype=object)
        decision[at] = decided["decision"].to_numpy(object)
        sla_reason = np.full(len(pdf), None, dtype=object)
        sla_reason[at] = decided["reason"].to_numpy(object)
        sla_errors = sla[sla_output == "errors"]
        err_at = where.get_indexer(
            pd.MultiIndex.from_arrays(
                [sla_errors["batch"].to_numpy(np.int64), sla_errors["seq"].to_numpy(np.int64)]
            )
        )
        reason[err_at] = sla_errors["reason"].to_numpy(object)
        batch = pdf["batch"].to_numpy(np.int64)
        seq = pdf["seq"].to_numpy(np.int64)
        stream = pdf["stream"].to_numpy(object)
        admitted = decision == "admit"
        regressed = np.zeros(len(pdf), bool)
        verdict = np.full(len(pdf), None, dtype=object)
        watermark = np.zeros(len(pdf), np.int64)
        has_watermark = np.zeros(len(pdf), bool)
        assigned = np.zeros(len(pdf), np.int64)
        counts = {c: np.zeros(len(pdf), bool) for c in INGRESS_COUNTERS}
        et = pdf["event_time"].to_numpy(np.int64)
        times = pdf["time"].to_numpy(np.int64)
        reports = clean & (kind == "watermark")
        kept_rows, rises = [], []
        for name in cfg.streams:
            mine = (stream == name) & (admitted | reports)
            rows = np.flatnonzero(mine)
            if not len(rows):
                continue
            state = st.streams.get(name, (0, 0, False, 0, False))
            is_event = admitted[rows]
            run = run_stream(state, is_event, et[rows], times[rows], cfg.advance_threshold,  # type: ignore[arg-type]
                             cfg.max_out_of_order_ms)  # fmt: skip
            st.streams[name] = run.state
            regressed[rows] = ~is_event & run.has_before & (times[rows] < run.before)
            ev = rows[is_event]
            before, has = run.before[is_event], run.has_before[is_event]
            watermark[ev], has_watermark[ev] = before, has
            late = has & (et[ev] < before)  # OXL-R4: strictly below
            v = np.full(len(ev), "on_time", dtype=object)
            assigned[ev] = et[ev]
            if cfg.policy == "Reassign":  # OXL-R7: within the budget, at the watermark
                within = late & (et[ev] >= sat_sub(before, cfg.max_lateness))
                v[within] = "reassigned"
                v[late & ~within] = "dropped"
                assigned[ev[within]] = before[within]
            else:
                v[late] = "side_output" if cfg.policy == "SideOutput" else "dropped"
            verdict[ev] = v
            kept_rows.append(ev[(v == "on_time") | (v == "reassigned")])
            rise = run.has_after & (~run.has_before | (run.after > run.before))
            rises.append((name, rows[rise], run.after[rise]))
        reason[regressed] = "watermark_regressed"
        for decided_as, counter in (("admit", "admitted"), ("reject", "rejected"), ("shed", "shed"),
                                    ("throttle", "throttled")):  # fmt: skip
            counts[counter] = decision == decided_as
        for verdict_is, counter in (("dropped", "dropped_late"), ("side_output", "side_output"),
                                    ("reassigned", "reassigned")):  # fmt: skip
            counts[counter] = verdict == verdict_is
        bad = pd.notna(pd.Series(reason, dtype=object)).to_numpy(bool)
        out.add("errors", int(bad.sum()), batch=batch[bad], seq=seq[bad], reason=reason[bad], p_unit=PASS,
                p_bucket=bucket)  # fmt: skip
        d = np.flatnonzero(decision != None)  # noqa: E711 - elementwise
        if len(d):
            out.add(
                "ingress",
                len(d),
                batch=batch[d],
                seq=seq[d],
                stream=stream[d],
                key=pdf["key"].to_numpy(object)[d],
                event_time=et[d],
                decision=decision[d],
                reason=sla_reason[d],
                verdict=verdict[d],
                watermark=(watermark[d], ~has_watermark[d]),
                assigned_time=(
                    assigned[d],
                    ~admitted[d] | ((verdict[d] != "on_time") & (verdict[d] != "reassigned")),
                ),
                p_unit=PASS,
                p_bucket=bucket,
            )
        self.state.update(st.to_tuple())
        self._send(out, cfg, pdf, kept_rows, rises, assigned, bucket)
        for b in np.unique(batch).tolist():
            in_b = batch == b
            out.add("summary", 1, batch=b, p_unit=NARROW, p_bucket=NARROW_BUCKET,
                    **{c: int((counts[c] & in_b).sum()) for c in INGRESS_COUNTERS})  # fmt: skip
        yield out.masked_frame(NULL_MASK)

    def _send(
        self, out: OutputRows, cfg: PipelineConfig, pdf: pd.DataFrame, kept_rows: list[np.ndarray],
        rises: list[tuple[str, np.ndarray, np.ndarray]], assigned: np.ndarray, bucket: int,
    ) -> None:  # fmt: skip
        """The streams' watermark rows, and what goes on to the consumers (OXP-R2, R3, R5)."""
        batch, seq = pdf["batch"].to_numpy(np.int64), pdf["seq"].to_numpy(np.int64)
        stream, key = pdf["stream"].to_numpy(object), pdf["key"].to_numpy(object)
        buckets = np.arange(self.buckets, dtype=np.int64)
        for name, rows, values in rises:
            n = len(rows)
            out.add("watermarks", n, batch=batch[rows], seq=seq[rows], node=name, watermark=values,
                    p_unit=PASS, p_bucket=bucket)  # fmt: skip
            out.add("stream_watermark", n, batch=batch[rows], seq=seq[rows], stream=name, watermark=values,
                    p_unit=AGGREGATOR_WATERMARK, p_bucket=0)  # fmt: skip
            for join in cfg.joins:
                if join.side_of(name) is not None:
                    out.add("stream_watermark", n * self.buckets, batch=np.repeat(batch[rows], self.buckets),
                            seq=np.repeat(seq[rows], self.buckets), stream=name,
                            watermark=np.repeat(values, self.buckets), p_unit=join.name,
                            p_bucket=np.tile(buckets, n))  # fmt: skip
        kept = np.sort(np.concatenate(kept_rows)) if kept_rows else np.zeros(0, np.int64)
        if not len(kept):
            return
        value = pdf["value"].to_numpy(np.int64)[kept]
        # Spark's xxhash64 of the key and of the channel, taken before this stage: stable across
        # releases and processes, so a restarted query routes every key to the bucket holding it
        key_bucket = np.mod(pdf["key_hash"].to_numpy(np.int64), self.buckets)
        channel_bucket = np.mod(pdf["channel_hash"].to_numpy(np.int64), self.buckets)
        for join in cfg.joins:
            of = stream[kept]
            left, right = (
                np.isin(of, np.array(join.left, dtype=object)),
                np.isin(of, np.array(join.right, dtype=object)),
            )
            side = np.full(len(of), None, dtype=object)
            side[left], side[right] = "left", "right"
            on = np.flatnonzero(left | right)
            rows = kept[on]
            out.add(
                "join_event",
                len(rows),
                batch=batch[rows],
                seq=seq[rows],
                stream=stream[rows],
                side=side[on],
                key=key[rows],
                event_time=assigned[rows],
                value=value[on],
                p_unit=join.name,
                p_bucket=key_bucket[rows],
            )
        producer = pdf["producer"].to_numpy(np.int64)[kept]
        partition = pdf["partition"].to_numpy(np.int64)[kept]
        out.add("message", len(kept), batch=batch[kept], seq=seq[kept], key=key[kept], producer=producer,
                partition=partition, sequence=pdf["sequence"].to_numpy(np.int64)[kept], value=value,
                p_key_bucket=key_bucket[kept], p_unit=AGGREGATOR, p_bucket=channel_bucket[kept])  # fmt: skip


# ---- the consumer stage ------------------------------------------------------------------------


def node_steps(
    streams: tuple[str, ...], stored: tuple[np.ndarray, np.ndarray], rows: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """OXW-R13: a node's watermark after each stream rise in ``rows`` (arrival order), the
    minimum over ``streams``, none while one has none. Returns (positions of ``rows`` where
    the node's watermark rises, its value there, the streams' watermarks after the rows)."""
    values, present = stored
    n = len(rows)
    which = pd.Categorical(rows["stream"].to_numpy(object), categories=list(streams)).codes.astype(np.int64)
    given = rows["watermark"].to_numpy(np.int64)
    grid = np.tile(values, (n, 1))
    known = np.tile(present, (n, 1))
    for j in range(len(streams)):  # each stream's watermark forward-filled over the rows
        mine = which == j
        if mine.any():
            filled = np.maximum.accumulate(np.where(mine, given, np.int64(I64_MIN)))
            since = np.cumsum(mine) > 0
            grid[:, j] = np.where(since, np.maximum(filled, values[j]) if present[j] else filled, values[j])
            known[:, j] = since | present[j]
    everyone = known.all(axis=1)
    node = np.where(everyone, np.where(known, grid, np.int64(I64_MIN)).min(axis=1), np.int64(I64_MIN))
    start_known = bool(present.all())
    start = np.int64(values.min()) if start_known and len(values) else np.int64(I64_MIN)
    before, had = _shift(node, start), _shift(everyone, start_known)
    rise = everyone & (~had | (node > before))
    after = (grid[-1], known[-1]) if n else stored
    return np.flatnonzero(rise), node[rise], after


class ConsumerProcessor(_Stage):
    """The joins' buckets, the aggregator's channel buckets and the aggregator's watermark."""

    units = (*JOINS, AGGREGATOR, AGGREGATOR_WATERMARK)

    def open_state(self, handle: Any) -> None:
        self.joins = {}
        self.node_state = {}
        for name in JOINS:
            join = window_joins.JoinBucketProcessor(_EACH_CALL, {}, True, self.buckets)
            join.open_state(_Prefixed(handle, name + "_"))
            self.joins[name] = join
            self.node_state[name] = handle.getValueState(name + "_node", NODE_SCHEMA)
        self.node_state[AGGREGATOR] = handle.getValueState(AGGREGATOR + "_node", NODE_SCHEMA)
        self.channels = eoa.ChannelBucketProcessor(_EACH_CALL, {}, True, self.buckets)
        self.channels.open_state(_Prefixed(handle, AGGREGATOR + "_"))

    def process(
        self, stream_id: str | None, unit: str, bucket: int, cfg: PipelineConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        pdf = pdf.sort_values(["batch", "seq"], kind="stable", ignore_index=True)
        out = _out(stream_id)
        if unit == AGGREGATOR:
            self._aggregate(stream_id, bucket, cfg, pdf, out)
        elif unit == AGGREGATOR_WATERMARK:
            rises = self._node(AGGREGATOR, cfg.streams, pdf, out, write=True)
            batches, marks = rises["batch"].to_numpy(np.int64), rises["watermark"].to_numpy(np.int64)
            for b in np.unique(batches).tolist():  # the batch's last rise: the narrow group's watermark
                top = int(marks[batches == b].max())
                out.add("summary", 1, batch=b, watermark=top, p_unit=NARROW, p_bucket=NARROW_BUCKET)
        else:
            spec = next(j for j in cfg.joins if j.name == unit)
            self._join(stream_id, bucket, spec, pdf, out)
        yield out.masked_frame(NULL_MASK)

    def _node(self, node: str, streams: tuple[str, ...], pdf: pd.DataFrame, out: OutputRows,
              write: bool) -> pd.DataFrame:  # fmt: skip
        """The node's watermark rises from the stream rises in ``pdf``; ``write``: its rows too."""
        rows = pdf[pdf["output"].to_numpy(object) == "stream_watermark"].reset_index(drop=True)
        state, variable = self.node_state[node], node + "_node"
        stored = state.get()
        if stored is None:
            st = NodeState(
                self.buckets, streams, np.zeros(len(streams), np.int64), np.zeros(len(streams), bool)
            )
        else:
            st = NodeState.from_tuple(tuple(stored), self.buckets, variable)
            if st.streams != streams:  # the join's lists are fixed in its checkpoint
                raise layout_refusal(OPERATOR, "streams", list(st.streams), list(streams), variable)
        at, values, (st.watermarks, st.present) = node_steps(streams, (st.watermarks, st.present), rows)
        state.update(st.to_tuple())
        rises = pd.DataFrame(
            {
                "batch": rows["batch"].to_numpy(np.int64)[at],
                "seq": rows["seq"].to_numpy(np.int64)[at],
                "watermark": values,
            }
        )
        if write:
            out.add(
                "watermarks",
                len(rises),
                batch=rises["batch"].to_numpy(np.int64),
                seq=rises["seq"].to_numpy(np.int64),
                node=node,
                watermark=values,
                p_unit=PASS,
                p_bucket=0,
            )
        return rises

    def _join(
        self, stream_id: str | None, bucket: int, spec: JoinSpec, pdf: pd.DataFrame, out: OutputRows
    ) -> None:
        """The window-join operator on the join's events and watermark steps (OXP-R3, R6)."""
        rises = self._node(spec.name, (*spec.left, *spec.right), pdf, out, write=bucket == 0)
        events = pdf[pdf["output"].to_numpy(object) == "join_event"]
        n, m = len(events), len(rises)
        frame = pd.DataFrame({
            "wj_batch": np.r_[events["batch"].to_numpy(np.int64), rises["batch"].to_numpy(np.int64)],
            "wj_seq": np.r_[2 * events["seq"].to_numpy(np.int64), 2 * rises["seq"].to_numpy(np.int64) + 1],
            "wj_kind": np.r_[np.full(n, "event", dtype=object), np.full(m, "watermark", dtype=object)],
            "wj_side": np.r_[events["side"].to_numpy(object), np.full(m, None, dtype=object)],
            "wj_key": np.r_[events["key"].to_numpy(object), np.full(m, None, dtype=object)],
            "wj_et": np.r_[events["event_time"].to_numpy(np.int64), np.zeros(m, np.int64)],
            "wj_et_null": np.zeros(n + m, bool),
            "wj_value": np.r_[events["value"].to_numpy(np.int64), np.zeros(m, np.int64)],
            "wj_time": np.r_[np.zeros(n, np.int64), rises["watermark"].to_numpy(np.int64)],
            "wj_time_null": np.r_[np.zeros(n, bool), np.zeros(m, bool)],
        })  # fmt: skip
        frame = frame.sort_values(["wj_batch", "wj_seq"], kind="stable", ignore_index=True)
        joined = pd.concat(list(self.joins[spec.name].process(stream_id, bucket, spec.join, frame)),
                           ignore_index=True)  # fmt: skip
        kinds = joined["output"].to_numpy(object)
        long_cols = window_joins.LONG_COLS
        if (kinds == "errors").any():  # the pipeline hands the join well-formed rows only
            raise AssertionError(f"window join refused rows: {joined[kinds == 'errors']['reason'].tolist()}")
        pairs = joined[kinds == "pairs"]
        if len(pairs):
            cols: dict[str, Any] = {}
            for side in window_joins.SIDES:
                for f in ("batch", "seq", "time", "value"):
                    values = pairs[f"{side}_{f}"].to_numpy(np.int64)
                    cols[f"{side}_{f}"] = values // 2 if f == "seq" else values
            out.add(
                "pairs",
                len(pairs),
                batch=pairs["batch"].to_numpy(np.int64),
                seq=pairs["seq"].to_numpy(np.int64) // 2,
                join=spec.name,
                key=pairs["key"].to_numpy(object),
                p_unit=PASS,
                p_bucket=bucket,
                **cols,
            )
        late = joined[kinds == "late"]
        if len(late):
            out.add(
                "join_late",
                len(late),
                batch=late["batch"].to_numpy(np.int64),
                seq=late["seq"].to_numpy(np.int64) // 2,
                join=spec.name,
                side=late["side"].to_numpy(object),
                key=late["key"].to_numpy(object),
                event_time=late["event_time"].to_numpy(np.int64),
                watermark=_longs(late, long_cols, "watermark"),
                p_unit=PASS,
                p_bucket=bucket,
            )
        summaries = joined[kinds == "summary"]
        for b, emitted in summaries.groupby("batch", sort=True)["s_pairs_emitted"].sum().items():
            out.add("summary", 1, batch=int(b), pairs=int(emitted), p_unit=NARROW, p_bucket=NARROW_BUCKET)

    def _aggregate(
        self, stream_id: str | None, bucket: int, cfg: PipelineConfig, pdf: pd.DataFrame, out: OutputRows
    ) -> None:
        """The exactly-once operator's channel processor on the kept events (OXP-R9)."""
        n = len(pdf)
        key = pdf["key"].to_numpy(object)
        frame = pd.DataFrame({
            "eoa_batch": pdf["batch"].to_numpy(np.int64), "eoa_seq": pdf["seq"].to_numpy(np.int64),
            "eoa_kind": np.full(n, "event", dtype=object), "eoa_key": key,
            "eoa_producer": pdf["producer"].to_numpy(np.int64), "eoa_producer_null": np.zeros(n, bool),
            "eoa_partition": pdf["partition"].to_numpy(np.int64), "eoa_partition_null": np.zeros(n, bool),
            "eoa_sequence": pdf["sequence"].to_numpy(np.int64), "eoa_sequence_null": np.zeros(n, bool),
            "eoa_amount": pdf["value"].to_numpy(np.int64).astype(str).astype(object),
            eoa.KEY_BUCKET: pdf["p_key_bucket"].to_numpy(np.int64),
        })  # fmt: skip
        told = pd.concat(
            list(self.channels.process(stream_id, bucket, cfg.aggregation, frame)), ignore_index=True
        )
        kinds = told["output"].to_numpy(object)
        if (kinds == "errors").any():
            raise AssertionError(f"aggregator refused rows: {told[kinds == 'errors']['reason'].tolist()}")
        messages = told[kinds == "messages"]
        out.add(
            "messages",
            len(messages),
            batch=messages["batch"].to_numpy(np.int64),
            seq=messages["seq"].to_numpy(np.int64),
            producer=messages["producer"].to_numpy(np.int64),
            partition=messages["partition"].to_numpy(np.int64),
            sequence=messages["sequence"].to_numpy(np.int64),
            key=messages["key"].to_numpy(object),
            verdict=messages["verdict"].to_numpy(object),
            p_unit=PASS,
            p_bucket=bucket,
        )
        folds = told[kinds == "fold"]
        out.add(
            "fold",
            len(folds),
            batch=folds["batch"].to_numpy(np.int64),
            seq=folds["seq"].to_numpy(np.int64),
            key=folds["key"].to_numpy(object),
            p_bits=folds["eoa_bits"].to_numpy(np.int64),
            p_order=folds["eoa_order"].to_numpy(np.int64),
            p_unit=KEYS,
            p_bucket=folds[eoa.KEY_BUCKET].to_numpy(np.int64),
        )
        summaries = told[kinds == "summary"]
        sums = summaries.groupby("batch", sort=True)[["s_folded", "s_duplicates", "s_outside_window"]].sum()
        for b, row in sums.iterrows():
            out.add(
                "summary",
                1,
                batch=int(b),
                folded=int(row["s_folded"]),
                duplicates=int(row["s_duplicates"]),
                outside_window=int(row["s_outside_window"]),
                p_unit=NARROW,
                p_bucket=NARROW_BUCKET,
            )


# ---- the key stage -----------------------------------------------------------------------------


class KeyProcessor(_Stage):
    """The aggregator's key buckets and the narrow group of each stream id (progress)."""

    units = (KEYS, NARROW)

    def open_state(self, handle: Any) -> None:
        self.keys = eoa.KeyBucketProcessor(_EACH_CALL, {}, self.buckets)
        self.keys.init(_Prefixed(handle, AGGREGATOR + "_"))
        self.totals = handle.getValueState("totals", TOTALS_SCHEMA)

    def group(self, key: Any) -> tuple[str, int]:
        """Route -1 is the narrow group; any other holds a key bucket's folds and table rows."""
        route = int(key[1])
        return (NARROW if route == NARROW_BUCKET else KEYS), route

    def process(
        self, stream_id: str | None, unit: str, bucket: int, cfg: PipelineConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        out = _out(stream_id)
        if unit == KEYS:
            is_fold = pdf["output"].to_numpy(object) == "fold"
            if not is_fold.all():
                yield pdf.loc[~is_fold, [*COLUMNS, NULL_MASK]]
            if not is_fold.any():
                return
            pdf = pdf[is_fold]
            folds = pd.DataFrame(
                {
                    "output": "fold",
                    "batch": pdf["batch"].to_numpy(np.int64),
                    "key": pdf["key"].to_numpy(object),
                    "eoa_bits": pdf["p_bits"].to_numpy(np.int64),
                    "eoa_order": pdf["p_order"].to_numpy(np.int64),
                }
            )
            told = self.keys.fold(stream_id, bucket, cfg.aggregation, folds)
            rows = told[told["output"].to_numpy(object) == "aggregates"]
            out.add("aggregates", len(rows), batch=rows["batch"].to_numpy(np.int64),
                    key=rows["key"].to_numpy(object), kind=rows["kind"].to_numpy(object),
                    number=rows[eoa.VALUE].to_numpy(object), count=_longs(rows, eoa.LONG_COLS, "count"),
                    p_unit=PASS, p_bucket=bucket)  # fmt: skip
        else:
            self._progress(pdf, out)
        yield out.masked_frame(NULL_MASK)

    def _progress(self, pdf: pd.DataFrame, out: OutputRows) -> None:
        """OXP-R10: the totals after each batch and the consumers' minimum watermark."""
        stored = self.totals.get()
        st = (
            StreamState(self.buckets, [0] * len(PROGRESS))
            if stored is None
            else StreamState.from_tuple(tuple(stored), self.buckets)
        )
        totals, mark, has_mark = st.totals, st.watermark, st.has_watermark
        watermark, null = _longs(pdf, LONG_COLS, "watermark")
        batch = pdf["batch"].to_numpy(np.int64)
        for b in np.unique(batch).tolist():
            in_b = batch == b
            for i, c in enumerate(PROGRESS):
                totals[i] += int(pdf[c].to_numpy(np.int64)[in_b].sum())
            given = watermark[in_b & ~null]
            if len(given):
                top = int(given.max())
                mark, has_mark = (max(mark, top) if has_mark else top), True
            out.add("progress", 1, batch=b, watermark=(np.array([mark], np.int64), np.array([not has_mark])),
                    p_unit=PASS, p_bucket=NARROW_BUCKET, **dict(zip(PROGRESS, totals)))  # fmt: skip
        self.totals.update(StreamState(self.buckets, totals, mark, has_mark).to_tuple())


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
