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
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN, InvalidConfig
from spark_impl.checkpoints import Operator, Stage, decoding, register, schema_fields, value_buckets
from spark_impl.common import (
    VALUE_OUT_OF_RANGE,
    OperatorStreams,
    OutputRows,
    StatefulProcessorHandle,
    check_columns,
    long_or_zero,
    millis_column,
    opt,
    place_flags,
    require_int,
    sat_sub,
    split_unplaced,
    stream_id_column,
    stream_settings,
    table_projections,
    warn_without_seq,
    with_unplaced_errors,
)
from spark_impl.scaleout import (
    DUPLICATE_SEQ,
    NULL_MASK,
    ROUTE,
    SUMMARY_ROUTE,
    BatchSummaryStage,
    SinkStep,
    WideStage,
    check_layout,
    default_buckets,
    flag_duplicate_seqs,
    one_stage,
    restore_nulls,
    to_buckets,
    two_stages,
)
from spark_impl.session import prepare_session

LAYOUT_VERSION = 2

# VELO-R3, R4: unit of each parser name as (numerator, denominator) in ms per unit.
BUILTIN_UNITS: dict[str, tuple[int, int]] = {"unixtimestamp_s": (1000, 1), "unixtimestamp_ms": (1, 1)}
CATALOGUE_UNITS: dict[str, tuple[int, int]] = {"unixtimestamp": (1000, 1), "unixtimestamp_us": (1, 1000)}

CONFIG_KEYS = (
    "stream_name", "columns", "eventtime_column", "eventtime_type", "joined_streams",
    "register_parsers", "eventtime_enabled", "late_tolerance",
)  # fmt: skip

# Row kinds as codes (an integer crosses Arrow and the shuffle cheaper than text): the trace's
# (VELO-R23), the harness's marker, the operator's own probe, any other kind, and a row whose seq
# another row shares (TR-15).
EVENT, CLOCK, END, MARKER, PROBE, OTHER, DUPLICATE, VALUE_RANGE = range(8)  # VALUE_RANGE: TR-16
KIND_CODES = {"event": EVENT, "clock": CLOCK, "end": END, "batch_end": MARKER, DUPLICATE_SEQ: DUPLICATE}
COMPRESS_FROM = 4096  # buffered tuples from which a bucket's buffer is stored zstd-compressed
NO_TUPLE = "no_tuple"  # a probe's reason when its input partition saw no well-formed tuple

STRING_COLS = ("output", "stream_id", "kind", "key", "reason")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "kind", "key", "event_time", "value", "watermark", "reason",
    "arrival_batch", "arrival_seq", "seq", "max_timestamp_seen", "buffer_size", "late_dropped_count",
    "watermark_emitted_count",
)  # fmt: skip
LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)
PASS_SCHEMA = f"{OUTPUT_SCHEMA}, `{NULL_MASK}` long"
# A bucket's summary of one batch (output "summary", route -1) travels in the output columns:
# seq is the bucket, buffer_size its share, late_dropped_count and watermark_emitted_count the
# batch's counts, max_timestamp_seen its highest time ingested, watermark the stream's.
WIDE_SCHEMA = f"{PASS_SCHEMA}, `{ROUTE}` long"
BUCKET_SCHEMA = (
    "layout_version int, buckets int, clock long, has_watermark boolean, watermark long, "
    "has_max boolean, max_seen long, ended boolean, batches long, buffer binary"
)
STREAM_SCHEMA = (
    "layout_version int, buckets int, late_dropped long, watermarks_emitted long, has_max boolean, "
    "max_seen long, has_watermark boolean, watermark long, sizes binary"
)
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "emitted": (
        "stream_id", "batch", "kind", "key", "event_time", "value", "watermark", "reason", "arrival_batch",
        "arrival_seq",
    ),
    "late": ("stream_id", "batch", "seq", "key", "event_time", "watermark"),
    "progress": (
        "stream_id", "batch", "watermark", "max_timestamp_seen", "buffer_size", "late_dropped_count",
        "watermark_emitted_count",
    ),
    "errors": ("stream_id", "batch", "seq", "reason"),
}  # fmt: skip

# The projected input (``eventtime_buffer``) and what the parse step makes of it.
INPUT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("eb_sid", "string"), ("eb_batch", "long"), ("eb_seq", "long"), ("eb_kind", "long"),
    ("eb_key", "string"), ("eb_value", "long"), ("eb_time", "long"), ("eb_time_null", "boolean"),
    ("eb_raw", "string"), ("eb_raw_long", "long"), ("eb_raw_null", "boolean"), ("eb_messages", "string"),
)  # fmt: skip
RAW_COLUMNS = ("eb_raw", "eb_raw_long", "eb_raw_null", "eb_messages")
PARSED_COLUMNS: tuple[tuple[str, str], ...] = (
    *((c, t) for c, t in INPUT_COLUMNS if c not in RAW_COLUMNS), ("eb_ts", "long"), ("eb_reason", "string"),
)  # fmt: skip


# ---- configuration (VELO-R1..R4, R7) -------------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    """A stream's checked settings: mode, tolerance and the unit of every declaring stream."""

    eventtime_enabled: bool = False
    late_tolerance: int = 0
    input_stream: str = "input"
    # stream name -> (num, den) of its event-time parser, or None without a declaration
    units: Mapping[str, tuple[int, int] | None] = field(default_factory=dict)


def _declaration(where: str, conf: Mapping[str, Any], units: Mapping[str, tuple[int, int]]) -> Any:
    """VELO-R1, R2: columns, and the declared parser's unit (None without a declaration)."""
    columns = conf.get("columns", [])
    if not isinstance(columns, list) or any(not isinstance(c, str) or c == "" for c in columns):
        raise InvalidConfig(f"{where}: columns must be a list of non-empty strings, got {columns!r}")
    if len(columns) != len(set(columns)):
        raise InvalidConfig(f"{where}: columns repeat a name: {columns}")
    column, type_name = conf.get("eventtime_column"), conf.get("eventtime_type")
    if column is None and type_name is None:
        return None
    if not isinstance(column, str) or not isinstance(type_name, str):
        raise InvalidConfig(f"{where}: eventtime_column and eventtime_type are two strings, set together")
    if column not in columns:
        raise InvalidConfig(f"{where}: eventtime_column {column!r} is missing from columns {columns}")
    if type_name not in units:
        raise InvalidConfig(f"{where}: eventtime_type {type_name!r} is not registered ({sorted(units)})")
    return units[type_name]


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (spec/eventtime_buffer.md VELO-R1) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown eventtime_buffer settings {sorted(unknown)}")
    units = dict(BUILTIN_UNITS)
    extra = config.get("register_parsers", [])
    if not isinstance(extra, list):
        raise InvalidConfig(f"register_parsers must be a list, got {extra!r}")
    for name in extra:
        if not isinstance(name, str) or name not in CATALOGUE_UNITS:
            raise InvalidConfig(
                f"register_parsers: {name!r} is not a catalogue parser ({sorted(CATALOGUE_UNITS)})"
            )
        if name in units:
            raise InvalidConfig(f"register_parsers: {name!r} is registered already")
        units[name] = CATALOGUE_UNITS[name]
    input_name = config.get("stream_name", "input")
    joined = config.get("joined_streams", {})
    if not isinstance(joined, dict):
        raise InvalidConfig(f"joined_streams must be an object, got {joined!r}")
    declared: dict[str, tuple[int, int] | None] = {}
    for name, conf in [(input_name, config), *joined.items()]:
        if not isinstance(name, str) or name == "":
            raise InvalidConfig(f"a stream name must be a non-empty string, got {name!r}")
        if name in declared:
            raise InvalidConfig(f"stream {name!r} is defined twice")
        if conf is not config and (not isinstance(conf, dict) or set(conf) - set(CONFIG_KEYS[1:4])):
            raise InvalidConfig(f"joined stream {name!r}: only columns, eventtime_column, eventtime_type")
        declared[name] = _declaration(f"stream {name!r}", conf, units)
    enabled = config.get("eventtime_enabled", False)
    if not isinstance(enabled, bool):
        raise InvalidConfig(f"eventtime_enabled must be true or false, got {enabled!r}")
    tolerance = config.get("late_tolerance", 0)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int) or not 0 <= tolerance <= I64_MAX:
        raise InvalidConfig(f"late_tolerance must be an integer from 0 to {I64_MAX}, got {tolerance!r}")
    if enabled and all(u is None for u in declared.values()):
        raise InvalidConfig("eventtime_enabled needs a stream with eventtime_column and eventtime_type")
    return StreamConfig(enabled, tolerance, input_name, declared)


# ---- parsing cells (VELO-R5, R10, R11) ---------------------------------------

# ints that fit int64 even after * 1000, as JSON writes them (no leading zeros) or as digit strings
_FAST_JSON = re.compile(r'-?(?:0|[1-9][0-9]{0,17})|"-?[0-9]{1,18}"')
_FAST_TEXT = re.compile(r"-?[0-9]{1,18}")
_INT_TEXT = re.compile(r"-?[0-9]+")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_JSON_SPACE = " \t\n\r"
# TR-16: beyond 10**24 every unit's result leaves i64; below 10**-24 none reaches a whole ms.
_MAGNITUDE = 24


def cell_millis(json_text: str | None, unit: tuple[int, int]) -> tuple[int, str | None]:
    """The exact path: one cell's JSON text -> (ms, None) or (0, reason). Text that is not JSON by
    the standard (NaN, Infinity, +5, 007, .5, 1_000) parses as nothing (TR-16)."""
    if json_text is None:
        return 0, "null_eventtime"
    json_text = json_text.strip(_JSON_SPACE)
    if json_text == "null":
        return 0, "null_eventtime"
    if json_text.startswith('"'):
        try:
            text = json.loads(json_text)
        except ValueError:
            return 0, "unparsable_eventtime"
        if not isinstance(text, str) or not _INT_TEXT.fullmatch(text):
            return 0, "unparsable_eventtime"
        numerator, denominator = int(text), 1
    elif _JSON_NUMBER.fullmatch(json_text):
        value = Decimal(json_text)  # exact: the JSON text's value
        if value.is_zero():
            return 0, None
        if value.adjusted() > _MAGNITUDE:
            return 0, "eventtime_out_of_range"
        if value.adjusted() < -_MAGNITUDE:
            return (0 if value > 0 else -1), None  # rounded towards minus infinity (VELO-R5)
        numerator, denominator = value.as_integer_ratio()
    else:
        return 0, "unparsable_eventtime"  # true/false, objects, lists, and text that is not JSON
    num, den = unit
    ms = (numerator * num) // (denominator * den)  # floor division: rounds towards minus infinity
    if not I64_MIN <= ms <= I64_MAX:
        return 0, "eventtime_out_of_range"
    return ms, None


def _apply_unit(v: np.ndarray, unit: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised ms for int64 values: (ms, out_of_range mask)."""
    num, den = unit
    out_of_range = np.zeros(len(v), bool)
    if num > 1:
        out_of_range = (v > I64_MAX // num) | (v < -((-I64_MIN) // num))
        v = np.where(out_of_range, 0, v) * np.int64(num)
    if den > 1:
        v = np.floor_divide(v, np.int64(den))
    return v.astype(np.int64), out_of_range


def parse_cells(
    mode: str, raw: np.ndarray, raw_long: np.ndarray, raw_null: np.ndarray, unit: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """VELO-R5: (ms, reason-or-None) for one-message cells; ``mode`` says what ``raw`` holds:
    ``json`` (the cell's JSON text), ``text`` (a string column) or ``long`` (``raw_long``)."""
    n = len(raw_null)
    ms = np.zeros(n, np.int64)
    reason = np.full(n, None, dtype=object)
    reason[raw_null] = "null_eventtime"
    if mode == "long":
        ms, oor = _apply_unit(raw_long, unit)
        reason[oor & ~raw_null] = "eventtime_out_of_range"
        return ms, reason
    texts = pd.Series(raw, dtype=object)
    pattern = _FAST_JSON if mode == "json" else _FAST_TEXT
    fast = texts.str.fullmatch(pattern, na=False).to_numpy(bool) & ~raw_null
    if fast.any():
        values = texts[fast].str.strip('"').astype(np.int64).to_numpy()
        ms[fast], oor = _apply_unit(values, unit)
        reason[np.flatnonzero(fast)[oor]] = "eventtime_out_of_range"
    for i in np.flatnonzero(~fast & ~raw_null).tolist():
        text = raw[i] if mode == "json" else json.dumps(raw[i])
        ms[i], reason[i] = cell_millis(text, unit)
    return ms, reason


def message_millis(messages_json: str, cfg: StreamConfig) -> tuple[int, str | None]:
    """VELO-R11: the first message whose stream declares event time decides (no fallback). A text
    that is not a JSON list of [stream name, cell] pairs names no defined stream (TR-16)."""
    pairs = _message_pairs(messages_json)
    if pairs is None or any(name not in cfg.units for name, _ in pairs):
        return 0, "unknown_stream"
    for name, cell in pairs:
        unit = cfg.units[name]
        if unit is not None:
            return cell_millis(str(cell) if isinstance(cell, Decimal) else json.dumps(cell), unit)
    return 0, "no_eventtime_message"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _message_pairs(messages_json: str) -> list[tuple[str, Any]] | None:
    """The [stream name, cell] pairs of a messages text (numbers kept exact), None if it has none."""
    try:
        pairs = json.loads(messages_json, parse_float=Decimal, parse_constant=_refuse_constant)
    except ValueError:
        return None
    if not isinstance(pairs, list) or any(
        not isinstance(p, list) or len(p) != 2 or not isinstance(p[0], str) for p in pairs
    ):
        return None
    return [(p[0], p[1]) for p in pairs]


# ---- the parse step, before the shuffle (VELO-R5, R10..R12) ------------------------------


@dataclass(frozen=True)
class ParseStep:
    """The stateless ``mapInArrow`` body: per input partition, every event row gets its parsed
    time (``eb_ts``) and the reason its cell fails (``eb_reason``, null when it parses), and per
    stream and batch one ``probe`` row carries the highest time among the well-formed tuples
    (``eb_ts``; ``eb_reason`` is ``NO_TUPLE`` when there was none). A probe is written for every
    stream and batch the partition saw, so every bucket of a stream is called in every
    micro-batch the stream has rows in. In processing-time mode no cell is read (VELO-R9)."""

    default: StreamConfig
    per_stream: Mapping[str, StreamConfig]
    mode: str  # what eb_raw / eb_raw_long hold: "json", "text" or "long" (parse_cells)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        highest: dict[tuple[str | None, int], int | None] = {}
        for batch in batches:
            if batch.num_rows:
                parsed, seen = self.parse(batch)
                for k, v in seen.items():
                    old = highest.get(k)
                    if k not in highest or (v is not None and (old is None or v > old)):
                        highest[k] = v
                yield parsed
        if highest:
            yield probe_rows(highest)

    def parse(self, batch: Any) -> tuple[Any, dict[tuple[str | None, int], int | None]]:
        """One Arrow batch: the batch with eb_ts and eb_reason instead of the raw columns, and the
        highest well-formed time per (stream, batch) it holds (None: none well-formed)."""
        n = batch.num_rows
        col = {name: batch.column(name) for name in batch.schema.names}
        sid = col["eb_sid"].to_numpy(zero_copy_only=False)
        number = col["eb_batch"].to_numpy(zero_copy_only=False).astype(np.int64)
        kind = col["eb_kind"].to_numpy(zero_copy_only=False).astype(np.int64)
        ts = np.zeros(n, np.int64)
        reason = np.full(n, None, dtype=object)
        good = np.zeros(n, bool)
        events = np.flatnonzero(kind == EVENT)
        one_stream = bool(n) and sid[0] is not None and bool((sid == sid[0]).all())  # the usual case
        if len(events):
            groups = (
                {sid[0]: np.arange(len(events))} if one_stream
                else pd.Series(events).groupby(sid[events], sort=False, dropna=False).indices
            )  # fmt: skip
            for stream, at in groups.items():
                # TR-16: the null stream has the operator's own settings, not those of "None"
                cfg = self.per_stream.get(str(stream), self.default) if _named(stream) else self.default
                if not cfg.eventtime_enabled:
                    continue  # VELO-R9: processing time reads no cell
                rows = events[at]
                ts[rows], reason[rows] = self._times(col, rows, cfg)
                good[rows] = reason[rows] == None  # noqa: E711 - elementwise
        return self._output(col, ts, reason), self._highest(sid, number, ts, good, one_stream)

    @staticmethod
    def _highest(
        sid: np.ndarray, number: np.ndarray, ts: np.ndarray, good: np.ndarray, one_stream: bool
    ) -> dict[tuple[str | None, int], int | None]:
        """The highest well-formed time per (stream, batch) of these rows, None where none is."""
        seen: dict[tuple[str | None, int], int | None] = {}
        if one_stream:
            for b in np.unique(number).tolist():
                mine = good & (number == b)
                seen[(str(sid[0]), int(b))] = int(ts[mine].max()) if mine.any() else None
            return seen
        # A null stream id is a stream of its own, as in the groupBy after the shuffle.
        pairs = pd.DataFrame({"sid": sid, "batch": number, "ts": ts, "good": good}, copy=False)
        top = pairs[pairs["good"]].groupby(["sid", "batch"], sort=False, dropna=False)["ts"].max()
        for s, b in pairs[["sid", "batch"]].drop_duplicates().itertuples(index=False):
            seen[(None if pd.isna(s) else str(s), int(b))] = None
        for s, b, t in top.reset_index().itertuples(index=False):
            seen[(None if pd.isna(s) else str(s), int(b))] = int(t)
        return seen

    @staticmethod
    def _output(col: Mapping[str, Any], ts: np.ndarray, reason: np.ndarray) -> Any:
        import pyarrow as pa

        kept = [c for c, _ in PARSED_COLUMNS if c not in ("eb_ts", "eb_reason")]
        arrays = [col[c] for c in kept] + [pa.array(ts, pa.int64()), pa.array(reason, pa.string())]
        return pa.RecordBatch.from_arrays(arrays, schema=parsed_arrow_schema())

    def _times(self, col: Mapping[str, Any], rows: np.ndarray, cfg: StreamConfig) -> tuple[Any, Any]:
        """VELO-R10, R11: (ms, reason) of these event rows of one stream."""
        messages = col["eb_messages"].to_numpy(zero_copy_only=False)[rows]
        multi = pd.notna(messages)
        ts = np.zeros(len(rows), np.int64)
        reason = np.full(len(rows), "no_eventtime_message", dtype=object)
        one = np.flatnonzero(~multi)
        unit = cfg.units.get(cfg.input_stream)
        if unit is not None and len(one):  # VELO-R10: one-message tuples of the input stream
            at = rows[one]
            ts[one], reason[one] = parse_cells(
                self.mode, col["eb_raw"].to_numpy(zero_copy_only=False)[at],
                col["eb_raw_long"].to_numpy(zero_copy_only=False)[at].astype(np.int64),
                col["eb_raw_null"].to_numpy(zero_copy_only=False)[at].astype(bool), unit,
            )  # fmt: skip
        for i in np.flatnonzero(multi).tolist():  # VELO-R11: rare, exact per row
            ts[i], reason[i] = message_millis(messages[i], cfg)
        return ts, reason


def _named(stream: Any) -> bool:
    """Whether a stream id read back from pandas is a name (a null one may come back as NaN)."""
    return stream is not None and not (isinstance(stream, float) and stream != stream)


def parsed_arrow_schema() -> Any:
    import pyarrow as pa

    types = {"string": pa.string(), "long": pa.int64(), "boolean": pa.bool_()}
    return pa.schema([pa.field(c, types[t], nullable=True) for c, t in PARSED_COLUMNS])


def probe_rows(highest: Mapping[tuple[str | None, int], int | None]) -> Any:
    """The probe rows of one input partition (ParseStep)."""
    import pyarrow as pa

    n = len(highest)
    keys, tops = list(highest), list(highest.values())
    values = {
        "eb_sid": pa.array([k[0] for k in keys], pa.string()),
        "eb_batch": pa.array([k[1] for k in keys], pa.int64()),
        "eb_seq": pa.array(np.zeros(n, np.int64)),
        "eb_kind": pa.array(np.full(n, PROBE, np.int64)),
        "eb_key": pa.nulls(n, pa.string()),
        "eb_value": pa.array(np.zeros(n, np.int64)),
        "eb_time": pa.array(np.zeros(n, np.int64)),
        "eb_time_null": pa.array(np.ones(n, bool)),
        "eb_ts": pa.array([0 if t is None else t for t in tops], pa.int64()),
        "eb_reason": pa.array([NO_TUPLE if t is None else None for t in tops], pa.string()),
    }
    schema = parsed_arrow_schema()
    return pa.RecordBatch.from_arrays([values[f.name] for f in schema], schema=schema)


# ---- state (VELO-R15, R24) ------------------------------------------------------------


@dataclass
class Buffer:
    """A bucket's buffered tuples, sorted by (ts, arrival batch, arrival seq) (VELO-R15)."""

    ts: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    arrival_batch: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    arrival_seq: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    key: np.ndarray = field(default_factory=lambda: np.empty(0, object))
    value: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    COLUMNS = ("ts", "arrival_batch", "arrival_seq", "key", "value")

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, index: Any) -> Buffer:
        return Buffer(*(getattr(self, c)[index] for c in self.COLUMNS))

    def merged(self, new: Buffer) -> Buffer:
        if not len(new):
            return self
        both = Buffer(*(np.concatenate([getattr(self, c), getattr(new, c)]) for c in self.COLUMNS))
        return both.take(np.lexsort((both.arrival_seq, both.arrival_batch, both.ts)))

    def to_ipc(self) -> bytes:
        """An Arrow IPC stream (zstd once it is large; RocksDB compresses small values itself);
        no bytes for an empty buffer."""
        import pyarrow as pa

        if not len(self):
            return b""
        table = pa.table(
            {
                "ts": pa.array(self.ts, pa.int64()),
                "arrival_batch": pa.array(self.arrival_batch, pa.int64()),
                "arrival_seq": pa.array(self.arrival_seq, pa.int64()),
                "key": pa.array(self.key, pa.string()),
                "value": pa.array(self.value, pa.int64()),
            }
        )
        options = pa.ipc.IpcWriteOptions(compression="zstd" if len(self) >= COMPRESS_FROM else None)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema, options=options) as w:
            w.write_table(table)
        return sink.getvalue().to_pybytes()

    @classmethod
    def from_ipc(cls, blob: bytes) -> Buffer:
        import pyarrow as pa

        if not blob:
            return cls()
        table = pa.ipc.open_stream(pa.py_buffer(bytes(blob))).read_all()
        longs = {
            c: table.column(c).to_numpy().astype(np.int64)
            for c in ("ts", "arrival_batch", "arrival_seq", "value")
        }
        key = np.asarray(table.column("key").to_numpy(zero_copy_only=False), dtype=object).reshape(-1)
        return cls(longs["ts"], longs["arrival_batch"], longs["arrival_seq"], key, longs["value"])


@dataclass
class BucketState:
    """One bucket's ValueState: the stream scalars, the same in every bucket, and its share of
    the buffer. ``batches`` counts the micro-batches (the batch number without batch_col)."""

    buckets: int
    clock: int = 0
    watermark: int | None = None  # VELO-R13: none before the first
    max_seen: int | None = None
    ended: bool = False  # VELO-R21
    batches: int = 0
    buffer: Buffer = field(default_factory=Buffer)

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, self.clock, self.watermark is not None, self.watermark or 0,
            self.max_seen is not None, self.max_seen or 0, self.ended, self.batches, self.buffer.to_ipc(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout("eventtime_buffer", value, LAYOUT_VERSION, buckets, "bucket")
        with decoding("eventtime_buffer", "bucket"):
            watermark = int(value[4]) if value[3] else None
            max_seen = int(value[6]) if value[5] else None
            buffer = Buffer.from_ipc(value[9])
            return cls(buckets, int(value[2]), watermark, max_seen, bool(value[7]), int(value[8]), buffer)


@dataclass
class StreamState:
    """The narrow stage's value per stream: the counters, the highest time ingested, the
    watermark, and each bucket's latest buffer size (VELO-R22)."""

    buckets: int
    late_dropped: int = 0
    watermarks_emitted: int = 0
    max_seen: int | None = None
    watermark: int | None = None
    sizes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def __post_init__(self) -> None:
        if len(self.sizes) != self.buckets:
            self.sizes = np.zeros(self.buckets, np.int64)

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, self.late_dropped, self.watermarks_emitted,
            self.max_seen is not None, self.max_seen or 0, self.watermark is not None, self.watermark or 0,
            np.ascontiguousarray(self.sizes, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> StreamState:
        check_layout("eventtime_buffer", value, LAYOUT_VERSION, buckets, "stream")
        with decoding("eventtime_buffer", "stream"):
            sizes = np.frombuffer(bytes(value[8]), np.int64).copy()
            if len(sizes) != buckets:  # a stream keeps one buffer size per bucket
                raise ValueError(f"buffer sizes of {len(sizes)} buckets for {buckets} buckets")
            return cls(
                buckets, int(value[2]), int(value[3]), int(value[5]) if value[4] else None,
                int(value[7]) if value[6] else None, sizes,
            )  # fmt: skip


# ---- the wide stage: one bucket's batch (pure numpy/pandas; runs in the worker) --------------


class _Out(OutputRows):
    """The wide stage's rows of one call: table rows (route = the bucket) and summaries."""

    def __init__(self, stream_id: str | None, bucket: int, ordered: bool) -> None:
        super().__init__(stream_id, (*OUTPUT_COLUMNS, ROUTE), STRING_COLS)
        self.bucket = bucket
        self.ordered = ordered

    def add(self, output: str, n: int, **cols: Any) -> None:
        cols.setdefault(ROUTE, self.bucket)
        super().add(output, n, **cols)

    def seq(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """An arrival position as output: null without seq_col (no arrival order is known)."""
        return values, np.full(len(values), not self.ordered)

    def tuples(self, b: int, released: Buffer) -> None:
        """VELO-R17: released tuples, each with the arrival of its event."""
        self.add(
            "emitted", len(released), batch=b, kind="tuple", key=released.key, event_time=released.ts,
            value=released.value, arrival_batch=released.arrival_batch,
            arrival_seq=self.seq(released.arrival_seq),
        )  # fmt: skip


@dataclass
class _Batch:
    """One batch of one bucket, in arrival order, with the masks every rule reads."""

    seq: np.ndarray
    kind: np.ndarray
    key: np.ndarray
    value: np.ndarray
    time: np.ndarray
    time_null: np.ndarray
    ts: np.ndarray
    reason: np.ndarray
    probe_max: int | None

    @classmethod
    def of(cls, rows: pd.DataFrame, at: np.ndarray, ordered: bool) -> _Batch:
        """The rows ``at`` of a call's frame (one batch): the probes' highest time, the rest in
        arrival order."""
        kind = rows["eb_kind"].to_numpy(np.int64)[at]
        ts = rows["eb_ts"].to_numpy(np.int64)[at]
        reason = rows["eb_reason"].to_numpy(object)[at]
        probes = kind == PROBE
        top = ts[probes & pd.isna(reason)]
        keep = np.flatnonzero(~probes)
        seq = rows["eb_seq"].to_numpy(np.int64)[at][keep]
        if ordered:
            order = np.argsort(seq, kind="stable")
            keep, seq = keep[order], seq[order]
        picked = at[keep]
        key, value = rows["eb_key"].to_numpy(object)[picked], rows["eb_value"].to_numpy(np.int64)[picked]
        time = rows["eb_time"].to_numpy(np.int64)[picked]
        time_null = rows["eb_time_null"].to_numpy(bool)[picked]
        probe_max = int(top.max()) if len(top) else None
        return cls(seq, kind[keep], key, value, time, time_null, ts[keep], reason[keep], probe_max)


def process_bucket(
    st: BucketState, pdf: pd.DataFrame, cfg: StreamConfig, bucket: int, ordered: bool, has_batch: bool,
    out: _Out,
) -> None:  # fmt: skip
    """One call of the wide stage: its rows split by batch (several only after a restart of a
    pipeline whose source delivers many batches at once), each applied in turn."""
    everything = np.arange(len(pdf))
    if has_batch:
        number = pdf["eb_batch"].to_numpy(np.int64)
        parts = [(int(b), everything[number == b]) for b in np.unique(number)]
    else:
        parts = [(st.batches, everything)]
    for b, at in parts:
        bucket_batch(st, _Batch.of(pdf, at, ordered), cfg, bucket, b, out)
        st.batches += 1


def bucket_batch(st: BucketState, r: _Batch, cfg: StreamConfig, bucket: int, b: int, out: _Out) -> None:
    """VELO-R9..R23 for one bucket's rows of batch ``b``: errors, late tuples, the bucket's share
    of the buffer and of the release, the watermark items (bucket 0), and the bucket's summary."""
    first = bucket == 0
    n = len(r.seq)
    is_event, is_clock = r.kind == EVENT, r.kind == CLOCK
    marker = r.kind == MARKER
    # VELO-R21, R23: the end's position; every later row is after_end, checked first.
    end_at: int | None = None
    if st.ended:
        after = ~marker
    else:
        ends = r.seq[r.kind == END]
        end_at = int(ends.min()) if len(ends) else None
        after = (r.seq > end_at) & ~marker if end_at is not None else np.zeros(n, bool)
    live = ~after
    err = np.full(n, None, dtype=object)
    err[after & (is_event | first)] = "after_end"  # an event lives in one bucket; copies in all
    # TR-4, VELO-R23: control rows; a clock is judged against every earlier clock of the stream.
    timed = is_clock & live & ~r.time_null
    running = np.maximum(
        np.maximum.accumulate(np.where(timed, r.time, np.int64(I64_MIN))), np.int64(st.clock)
    )
    before = np.concatenate([[np.int64(st.clock)], running[:-1]]).astype(np.int64)
    if first:
        err[live & (r.kind == OTHER)] = "unsupported_item"
        err[live & (r.kind == DUPLICATE)] = DUPLICATE_SEQ  # TR-15
        err[live & (r.kind == VALUE_RANGE)] = VALUE_OUT_OF_RANGE  # TR-16
        err[is_clock & live & r.time_null] = "missing_time"
        err[timed & (r.time < before)] = "clock_went_backwards"
    if n:
        st.clock = int(running[-1])
    bad = np.flatnonzero(err != None)  # noqa: E711 - elementwise
    out.add("errors", len(bad), batch=b, seq=out.seq(r.seq[bad]), reason=err[bad])

    ev = is_event & live
    if cfg.eventtime_enabled:
        late, own_max, emitted = _eventtime(st, r, ev, end_at, cfg.late_tolerance, first, b, out)
    else:
        late, own_max, emitted = _processing_time(st, r, ev, timed, running, before, end_at, first, b, out)
    if end_at is not None:
        if first and (st.watermark is None or st.watermark < I64_MAX):
            out.add("emitted", 1, batch=b, kind="watermark", watermark=I64_MAX)  # VELO-R21
            emitted += 1
        st.watermark, st.ended = I64_MAX, True
    out.add(
        "summary", 1, batch=b, **{ROUTE: SUMMARY_ROUTE}, seq=bucket, buffer_size=len(st.buffer),
        late_dropped_count=late, watermark_emitted_count=emitted, max_timestamp_seen=opt(own_max),
        watermark=opt(st.watermark),
    )  # fmt: skip


def _eventtime(
    st: BucketState, r: _Batch, ev: np.ndarray, end_at: int | None, tolerance: int, first: bool, b: int,
    out: _Out,
) -> tuple[int, int | None, int]:  # fmt: skip
    """VELO-R10..R19, R21: (tuples dropped, highest time buffered, watermarks emitted)."""
    failed = ev & (r.reason != None)  # noqa: E711 - elementwise
    bad = np.flatnonzero(failed)  # VELO-R12: one error row and one error item each
    out.add("errors", len(bad), batch=b, seq=out.seq(r.seq[bad]), reason=r.reason[bad])
    out.add(
        "emitted", len(bad), batch=b, kind="error", key=r.key[bad], value=r.value[bad], reason=r.reason[bad],
        arrival_batch=b, arrival_seq=out.seq(r.seq[bad]),
    )  # fmt: skip
    well_formed = ev & ~failed
    late = well_formed & (r.ts <= st.watermark) if st.watermark is not None else np.zeros(len(ev), bool)
    dropped = np.flatnonzero(late)  # VELO-R14: judged by the watermark before the batch
    out.add(
        "late", len(dropped), batch=b, seq=out.seq(r.seq[dropped]), key=r.key[dropped],
        event_time=r.ts[dropped], watermark=st.watermark,
    )  # fmt: skip
    keep = np.flatnonzero(well_formed & ~late)
    own_max = int(r.ts[keep].max()) if len(keep) else None
    st.buffer = st.buffer.merged(
        Buffer(r.ts[keep], np.full(len(keep), b, np.int64), r.seq[keep], r.key[keep], r.value[keep])
    )  # VELO-R15
    if end_at is not None:  # VELO-R21: everything leaves; the final watermark replaces the target
        out.tuples(b, st.buffer)
        st.buffer = Buffer()
        return len(dropped), own_max, 0
    if r.probe_max is not None:  # the probes cover every well-formed tuple of the batch
        st.max_seen = r.probe_max if st.max_seen is None else max(st.max_seen, r.probe_max)
    if st.max_seen is None:
        return len(dropped), own_max, 0  # VELO-R16: no target without a buffered tuple
    candidate = int(sat_sub(np.array([st.max_seen], np.int64), tolerance)[0])
    target = candidate if st.watermark is None else max(st.watermark, candidate)
    if st.watermark is not None and target <= st.watermark:
        return len(dropped), own_max, 0
    cut = int(np.searchsorted(st.buffer.ts, target, side="right"))  # VELO-R17
    out.tuples(b, st.buffer.take(slice(0, cut)))
    st.buffer = st.buffer.take(slice(cut, None))
    st.watermark = target
    if first:
        out.add("emitted", 1, batch=b, kind="watermark", watermark=target)
        return len(dropped), own_max, 1
    return len(dropped), own_max, 0


def _processing_time(
    st: BucketState, r: _Batch, ev: np.ndarray, timed: np.ndarray, running: np.ndarray, before: np.ndarray,
    end_at: int | None, first: bool, b: int, out: _Out,
) -> tuple[int, int | None, int]:  # fmt: skip
    """VELO-R9: (0, the latest stamp, watermarks emitted): tuples stamped with the clock at their
    arrival leave at once; a forward move of the clock to T emits Watermark(T - 1) (bucket 0)."""
    at = np.flatnonzero(ev)
    stamps = running[at]
    out.add(
        "emitted", len(at), batch=b, kind="tuple", key=r.key[at], event_time=stamps, value=r.value[at],
        arrival_batch=b, arrival_seq=out.seq(r.seq[at]),
    )  # fmt: skip
    forward = np.flatnonzero(timed & (r.time > before))
    if len(forward):
        st.watermark = int(r.time[forward[-1]]) - 1
    emitted = 0
    if first:
        out.add("emitted", len(forward), batch=b, kind="watermark", watermark=r.time[forward] - 1)
        emitted = len(forward)
    return 0, int(stamps.max()) if len(at) else None, emitted


# ---- the narrow stage: a stream's progress (VELO-R22) ---------------------------------------


def summarise_batch(st: StreamState, rows: pd.DataFrame, b: int, out: OutputRows) -> None:
    """The buckets' summaries of batch ``b``: counters, highest time ingested, buffer sizes."""
    st.sizes[rows["seq"].to_numpy(np.int64)] = rows["buffer_size"].to_numpy(np.int64)
    st.late_dropped += int(rows["late_dropped_count"].to_numpy(np.int64).sum())
    st.watermarks_emitted += int(rows["watermark_emitted_count"].to_numpy(np.int64).sum())
    nulls = rows[NULL_MASK].to_numpy(np.int64)
    has_max = (nulls & (np.int64(1) << np.int64(LONG_COLS.index("max_timestamp_seen")))) == 0
    if has_max.any():
        top = int(rows["max_timestamp_seen"].to_numpy(np.int64)[has_max].max())
        st.max_seen = top if st.max_seen is None else max(st.max_seen, top)
    has_watermark = (nulls & (np.int64(1) << np.int64(LONG_COLS.index("watermark")))) == 0
    if has_watermark.any():  # the same in every bucket
        st.watermark = int(rows["watermark"].to_numpy(np.int64)[has_watermark].max())
    out.add(
        "progress", 1, batch=b, watermark=opt(st.watermark), max_timestamp_seen=opt(st.max_seen),
        buffer_size=int(st.sizes.sum()), late_dropped_count=st.late_dropped,
        watermark_emitted_count=st.watermarks_emitted,
    )  # fmt: skip


# ---- the Spark operator ----------------------------------------------------------------


class BufferBucketProcessor(WideStage):
    """The wide stage: one call per (stream, bucket) and micro-batch."""

    def __init__(
        self, default: StreamConfig, per_stream: Mapping[str, StreamConfig], ordered: bool, buckets: int,
        has_batch: bool,
    ) -> None:  # fmt: skip
        super().__init__(default, per_stream, ordered, buckets)
        self.has_batch = has_batch

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("bucket", BUCKET_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, config: Any, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        stored = self.state.get()
        st = BucketState.from_tuple(stored, self.buckets) if stored is not None else BucketState(self.buckets)
        out = _Out(stream_id, bucket, self.ordered)
        process_bucket(st, pdf, config, bucket, self.ordered, self.has_batch, out)
        self.state.update(st.to_tuple())
        yield out.masked_frame(NULL_MASK)


class BufferSummaryProcessor(BatchSummaryStage):
    """The narrow stage (route -1): one progress row per stream and batch."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)
    state_schema = STREAM_SCHEMA
    state_class = StreamState
    string_cols = STRING_COLS
    summarise_batch = staticmethod(summarise_batch)


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
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
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
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
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
