"""Session windows closed by the watermark, with persistent timers (F017E), on Spark Structured Streaming.

Usage
-----
Apply the operator to your own streaming DataFrame and write its output::

    from spark_impl.session_windows import session_windows

    sw = session_windows(
        events_df,                    # a streaming DataFrame
        key_col="user",               # any type, compared as its string form
        event_time_col="ts",          # LongType milliseconds, or TimestampType
        gap_ms=1000,                  # inactivity gap (F017E-R2, R3)
        allowed_lateness_ms=0,        # F017E-R7, R10
        bounded_delay_ms=0,           # the watermark's delay (F017E-R5)
        emit_strategy="OnWindowClose",  # | "Final" (F017E-R11)
        value_col="amount",           # summed per session (count is always there)
        seq_col="offset",             # arrival order inside a micro-batch (see below)
    )
    q = (sw.output.writeStream.format("parquet")
         .option("checkpointLocation", ckpt).start(path))

``sw.output`` is the one combined stream (schema ``OUTPUT_SCHEMA``); its
``output`` column says which table a row belongs to. The convenience
DataFrames are projections of it:

- ``sw.sessions``: closed sessions with ``session_start``, ``session_end``,
  ``count``, ``sum`` and ``reason`` (``timer`` or ``watermark``, F017E-R8).
- ``sw.late``: every late event with the watermark it was judged by and its
  ``verdict`` (``late_output`` or ``dropped``, F017E-R10, R11);
  ``sw.late_output`` only the routed ones (empty under ``Final``).
- ``sw.timers``: the pending timers after each micro-batch, one per open
  session (F017E-R12); only with ``report_timers=True`` (off by default: it
  repeats every open session in every micro-batch).
- ``sw.progress``: one row per stream and micro-batch: watermark, open
  sessions and the counters (F017E-R9).
- ``sw.errors``: malformed rows (F017E-R20), with the reason.

Every projection is a separate streaming plan; to get several tables from one
run, write ``sw.output`` once (``sw.write_tables``, or ``foreachBatch``) and
split by ``output``.

Optional columns: ``stream_id_col`` (many independent streams in one query;
without it the whole DataFrame is one stream), ``seq_col`` (arrival order
inside a micro-batch; without it the rows are taken in event-time order,
ties by key), ``kind_col`` (event | end | batch_end; ``end`` closes the
stream's input, F017E-R23; other kinds are error rows; needs ``seq_col``),
``value_col``, ``batch_col`` (the batch number reported; without it the
operator counts the micro-batches in which the stream has rows).
``stream_configs`` maps a stream id to its own settings (``gap``,
``allowed_lateness``, ``bounded_delay``, ``emit_strategy``). ``buckets``
(default: 4 per shuffle partition of the session) is the number of key
groups per stream and is fixed in the checkpoint; ``block_sessions`` (the
open sessions a state value holds on average before the bucket splits a
block) and ``chunk_rows`` (the arrival positions one group of the order
stage covers; default 64 per bucket, so the chunk summaries copied to every
bucket add 1/64 to the rows) may change between runs.

Design (how Spark realises the clauses; docs/architecture.md draws it)
----------------------------------------------------------------------
Three ``transformWithStateInPandas`` stages in one query, all
``timeMode="None"`` (Spark's own watermark is one value per query, moved
between micro-batches only, and EventTime mode would drop rows before the
operator judged them):

- ORDER STAGE, grouped by (stream, batch, chunk), no state. With
  ``seq_col`` a chunk is ``seq div chunk_rows``, a run of consecutive
  arrival positions; without it a chunk is an event-time range of 2**16 ms
  (``et >> 16``), which keeps the order "event time, ties by key" between
  chunks, and the rows get their position inside the chunk. Per event it
  adds the highest event time of its chunk strictly before it (a running
  maximum in arrival order) and sends the event to its key's bucket,
  ``pmod(xxhash64(key), buckets)``; per chunk it sends one row with the
  chunk's highest event time and row count to every bucket. Malformed rows
  and the harness's ``batch_end`` go to bucket 0, ``end`` rows to every
  bucket.
- WIDE STAGE, grouped by (stream, bucket). Every bucket sees every chunk's
  maximum, so it keeps the stream's highest event time itself and knows the
  watermark just before and just after each of its own events: the stored
  maximum, the maxima of the earlier chunks and the running maximum inside
  the event's chunk (F017E-R6, R22). It judges lateness (R10), builds its
  keys' sessions as connected components of the stored sessions and the
  on-time events (R3, R22), closes those whose timer the batch's final
  watermark passes (R7) and names the reason: ``watermark`` when an event of
  the session's own key is the one whose watermark first passes the timer
  (its watermark before is at or below the timer and after is above),
  ``timer`` otherwise (R8). The ``end`` row (R23) makes the final watermark
  ``I64_MAX`` and every later row an ``after_end`` error; the bucket keeps an
  ended flag. Bucket 0 writes the errors of the rows it alone receives.
- SECOND STAGE, grouped by (stream, route): route -1 is the narrow group of
  the stream, which reads one summary per bucket and batch (open sessions,
  closed by timer / watermark, late events, the final watermark) and writes
  the ``progress`` row; the other routes pass the table rows through (a
  stateful operator whose output feeds two branches would run twice).
- SINK STEP: ``write_tables`` and ``foreach_batch`` run the narrow group's work in
  the sink instead (``spark_impl.scaleout.SinkStep``): each micro-batch's rows of route
  -1 are collected to the driver and folded with the stream's state, kept in two
  slots under ``<checkpoint>/sink_step/``; ``output`` runs it in a third stateful stage.
- STATE of a bucket: a ``MapState`` of blocks (the open sessions of the keys
  whose hash falls in the block, by linear hashing: a block holds about
  ``block_sessions`` sessions however many the stream has) and a
  ``ValueState`` with the layout version, the bucket count, the block layout,
  the stream's highest event time, the ended flag, the micro-batches seen and
  per block (block, sessions, lowest trigger time). A micro-batch reads only
  the blocks that hold keys of its events or whose lowest trigger its final
  watermark passes (all of them with ``report_timers``), and writes back the
  blocks whose contents changed. The narrow group keeps the counters and
  each bucket's latest open-session count.
- SATURATING i64 arithmetic is explicit (numpy wraps): end = min(i64 max,
  last + gap), trigger = min(i64 max, end + lateness), watermark =
  max(i64 min, max - delay). Long columns cross between the stages as a
  value and a null mask (a nullable long would become a float in pandas).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN, InvalidConfig
from spark_impl.checkpoints import (
    Operator,
    Stage,
    decoding,
    missing_value,
    register,
    schema_fields,
    value_buckets,
)
from spark_impl.common import (
    VALUE_OUT_OF_RANGE,
    OperatorStreams,
    OutputRows,
    StatefulProcessor,
    StatefulProcessorHandle,
    batches_in,
    check_columns,
    event_time_millis,
    long_or_zero,
    place_flags,
    require_int,
    sat_sub,
    split_unplaced,
    stream_id_column,
    stream_settings,
    table_projections,
    value_checked_kind,
    warn_without_seq,
    with_defaults,
    with_unplaced_errors,
)
from spark_impl.scaleout import (
    DUPLICATE_SEQ,
    NULL_MASK,
    ROUTE,
    SUMMARY_ROUTE,
    BatchSummaryStage,
    MemoryStore,
    SinkStep,
    WideStage,
    block_of,
    check_layout,
    default_buckets,
    one_frame,
    one_stage,
    pack_text,
    restore_nulls,
    two_stages,
    unpack_text,
)
from spark_impl.session import prepare_session

LAYOUT_VERSION = 2
STRATEGIES = ("OnWindowClose", "Final")
CONFIG_KEYS = ("gap", "allowed_lateness", "bounded_delay", "emit_strategy")
DEFAULT_BLOCK_SESSIONS = 128
CHUNK_ROWS_PER_BUCKET = 64  # the default chunk: its summary rows (one per bucket) are 1/64 of its rows
CHUNK_TIME_BITS = 16  # without seq_col a chunk of the order stage is an event-time range of 2**16 ms

STRING_COLS = ("output", "stream_id", "key", "reason", "verdict")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "key", "session_start", "session_end", "count", "sum",
    "reason", "event_time", "watermark", "verdict", "trigger_time", "open_sessions",
    "sessions_closed_by_timer", "sessions_closed_by_watermark", "late_events",
)  # fmt: skip
LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)

# The order stage's rows: the input row (or a chunk summary, ``sw_summary``), its bucket, and
# ``sw_run``: the highest event time of its chunk before it (``sw_run_has``: there is one). A
# summary reuses the columns: ``sw_run`` the chunk's highest event time, ``sw_seq`` its rows.
ORDER_FIELDS = (
    ("sw_sid", "string"), ("sw_bucket", "long"), ("sw_batch", "long"), ("sw_chunk", "long"),
    ("sw_seq", "long"), ("sw_kind", "string"), ("sw_key", "string"), ("sw_hash", "long"),
    ("sw_et", "long"), ("sw_et_null", "boolean"), ("sw_value", "long"), ("sw_run", "long"),
    ("sw_run_has", "boolean"), ("sw_summary", "boolean"),
)  # fmt: skip
ORDER_SCHEMA = ", ".join(f"`{name}` {kind}" for name, kind in ORDER_FIELDS)

# A bucket's summary of one batch for the narrow group: its open sessions after the batch, the
# sessions it closed by timer and by watermark, its late events, and the batch's final watermark.
SUMMARY_COLS = (
    "s_bucket",
    "s_open",
    "s_by_timer",
    "s_by_watermark",
    "s_late",
    "s_watermark",
    "s_has_watermark",
)
PASS_SCHEMA = ", ".join([f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS]
                        + [f"`{NULL_MASK}` long"])  # fmt: skip
WIDE_SCHEMA = ", ".join([PASS_SCHEMA, f"`{ROUTE}` long"] + [f"`{c}` long" for c in SUMMARY_COLS])
BUCKET_SCHEMA = (
    "layout_version int, buckets int, level int, split int, has_max boolean, max_event_time long, "
    "ended boolean, batches long, blocks binary"
)
BLOCK_SCHEMA = "key_lengths binary, key_bytes binary, numbers binary"
STREAM_SCHEMA = (
    "layout_version int, buckets int, closed_by_timer long, closed_by_watermark long, late_events long, "
    "open_sessions binary"
)

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": ("stream_id", "batch", "key", "session_start", "session_end", "count", "sum", "reason"),
    "late": ("stream_id", "batch", "seq", "key", "event_time", "watermark", "verdict"),
    "timers": ("stream_id", "batch", "key", "session_start", "trigger_time"),
    "progress": (
        "stream_id", "batch", "watermark", "open_sessions", "sessions_closed_by_timer",
        "sessions_closed_by_watermark", "late_events",
    ),
    "errors": ("stream_id", "batch", "seq", "reason"),
}  # fmt: skip

# The harness's engine: a trace has a handful of keys and items per batch, and every group costs
# a Python call; three buckets, blocks split past two sessions and chunks of four arrival
# positions still spread each trace over chunks, buckets and blocks, and split blocks as it runs.
ENGINE_BUCKETS = 3
ENGINE_BLOCK_SESSIONS = 2
ENGINE_CHUNK_ROWS = 4


# ---- configuration (F017E-R18) ----------------------------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    gap: int
    allowed_lateness: int = 0
    bounded_delay: int = 0
    emit_strategy: str = "OnWindowClose"


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (F017E-R18) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown session_windows settings {sorted(unknown)}")
    if config.get("gap") is None:
        raise InvalidConfig("gap is required")
    strategy = config.get("emit_strategy", "OnWindowClose")
    strategy = getattr(strategy, "value", strategy)  # an enum member is accepted by its value
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise InvalidConfig(f"emit_strategy must be one of {list(STRATEGIES)}, got {strategy!r}")
    return StreamConfig(
        gap=require_int("gap", config["gap"], 1),
        allowed_lateness=require_int("allowed_lateness", config.get("allowed_lateness", 0), 0),
        bounded_delay=require_int("bounded_delay", config.get("bounded_delay", 0), 0),
        emit_strategy=strategy,
    )


def _sat_add(a: np.ndarray, s: int) -> np.ndarray:
    """min(i64 max, a + s) for s >= 0, without wrapping."""
    with np.errstate(over="ignore"):
        return np.where(a > I64_MAX - s, np.int64(I64_MAX), a + np.int64(s))


# ---- the order stage: one chunk of arrival positions (no state) ----------------------------

_ORDER_DEFAULTS: dict[str, Any] = {"sw_seq": np.int64(0), "sw_kind": "event", "sw_value": np.int64(0)}


def order_chunk(
    pdf: pd.DataFrame, stream_id: str | None, batch: int, chunk: int, buckets: int, ordered: bool,
    check_seq: bool = False,
) -> pd.DataFrame:  # fmt: skip
    """One chunk's rows in arrival order, each with the highest event time of the chunk before it
    and its bucket, plus one summary row per bucket (the chunk's highest event time and row count).

    ``ordered``: the rows carry arrival positions (``sw_seq``); otherwise the chunk is an
    event-time range, its rows are taken in event-time order, ties by key, and ``sw_seq``
    becomes the position inside the chunk (the wide stage adds the rows of the earlier chunks).
    ``check_seq``: every row of a seq shared by several becomes a ``duplicate_seq`` row (TR-15)."""
    if ordered:
        pdf = pdf.sort_values("sw_seq", kind="stable")
    else:
        pdf = pdf.sort_values(["sw_et", "sw_key"], kind="stable", na_position="last")
    n = len(pdf)
    seq = pdf["sw_seq"].to_numpy(np.int64) if ordered else np.arange(n, dtype=np.int64)
    kind = pdf["sw_kind"].to_numpy(object)
    if ordered and check_seq:  # TR-15: a chunk holds every row of its seqs, so repeats meet here
        item = kind != "batch_end"
        for flag in ("sw_seq_null", "sw_batch_null"):  # a row without a seq or batch is compared with none
            if flag in pdf.columns:
                item &= ~pdf[flag].to_numpy(bool)
        repeated = np.zeros(n, bool)
        repeated[item] = pd.Series(seq[item]).duplicated(keep=False).to_numpy(bool)
        kind = np.where(repeated, DUPLICATE_SEQ, kind).astype(object)
    key = pdf["sw_key"].to_numpy(object)
    et = pdf["sw_et"].to_numpy(np.int64)
    et_null = pdf["sw_et_null"].to_numpy(bool)
    key_hash = pdf["sw_hash"].to_numpy(np.int64)
    valid = (kind == "event") & pd.notna(key) & ~et_null  # F017E-R20: only these move the watermark
    upto = np.maximum.accumulate(np.where(valid, et, np.int64(I64_MIN)))
    run = np.empty(n, np.int64)
    run[:1] = I64_MIN
    run[1:] = upto[:-1]
    run_has = (np.cumsum(valid) - valid) > 0
    # An event goes to its key's bucket, an end row to every bucket (F017E-R23), the rest to 0.
    copies = np.where(kind == "end", buckets, 1)
    rows = np.repeat(np.arange(n), copies)
    within = np.arange(len(rows)) - np.repeat(np.cumsum(copies) - copies, copies)
    home = np.where(valid, np.mod(key_hash, buckets), 0)  # numpy's mod of a positive divisor is pmod
    bucket = np.where(copies[rows] > 1, within, home[rows])
    m = len(rows)
    top_has = bool(valid.any())
    every = np.arange(buckets, dtype=np.int64)
    data: dict[str, Any] = {
        "sw_sid": np.full(m + buckets, stream_id, dtype=object),
        "sw_bucket": np.concatenate([bucket, every]),
        "sw_batch": np.full(m + buckets, batch, np.int64),
        "sw_chunk": np.full(m + buckets, chunk, np.int64),
        "sw_seq": np.concatenate([seq[rows], np.full(buckets, n, np.int64)]),
        "sw_kind": np.concatenate([kind[rows], np.full(buckets, None, dtype=object)]),
        "sw_key": np.concatenate([key[rows], np.full(buckets, None, dtype=object)]),
        "sw_hash": np.concatenate([key_hash[rows], np.zeros(buckets, np.int64)]),
        "sw_et": np.concatenate([et[rows], np.zeros(buckets, np.int64)]),
        "sw_et_null": np.concatenate([et_null[rows], np.zeros(buckets, bool)]),
        "sw_value": np.concatenate([pdf["sw_value"].to_numpy(np.int64)[rows], np.zeros(buckets, np.int64)]),
        "sw_run": np.concatenate([run[rows], np.full(buckets, upto[-1] if top_has else 0, np.int64)]),
        "sw_run_has": np.concatenate([run_has[rows], np.full(buckets, top_has)]),
        "sw_summary": np.concatenate([np.zeros(m, bool), np.ones(buckets, bool)]),
    }
    return pd.DataFrame(data, copy=False)


class ChunkOrderProcessor(StatefulProcessor):  # type: ignore[misc]
    """The order stage: one call per (stream, batch, chunk) and micro-batch; it keeps no state."""

    def __init__(self, buckets: int, ordered: bool, check_seq: bool = False) -> None:
        self.buckets = buckets
        self.ordered = ordered
        self.check_seq = check_seq  # TR-15

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[pd.DataFrame]:
        # A null stream id stays null (TR-16): str() would merge it with the stream called "None".
        stream_id, batch, chunk = None if key[0] is None else str(key[0]), int(key[1]), int(key[2])
        pdf = one_frame(rows, _ORDER_DEFAULTS)
        yield order_chunk(pdf, stream_id, batch, chunk, self.buckets, self.ordered, self.check_seq)

    def close(self) -> None:
        pass


# ---- the wide stage: the state of one (stream, bucket) ------------------------------------

_NUMBERS = ("hash", "start", "last", "count", "sum", "trigger")  # a stored session's numbers


@dataclass
class Sessions:
    """Open sessions column-wise: key (str objects) and the int64 columns of ``_NUMBERS``."""

    key: np.ndarray = field(default_factory=lambda: np.empty(0, object))
    hash: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    start: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    last: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    count: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    sum: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    trigger: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def __len__(self) -> int:
        return len(self.key)

    def take(self, rows: np.ndarray) -> Sessions:
        return Sessions(self.key[rows], *(getattr(self, n)[rows] for n in _NUMBERS))

    def __add__(self, other: Sessions) -> Sessions:
        return Sessions(
            np.concatenate([self.key, other.key]),
            *(np.concatenate([getattr(self, n), getattr(other, n)]) for n in _NUMBERS),
        )

    def pack(self) -> tuple[bytes, bytes, bytes]:
        """One block's state value (BLOCK_SCHEMA)."""
        lengths, text = pack_text(self.key)
        numbers = np.column_stack([getattr(self, n) for n in _NUMBERS]).astype(np.int64)
        return lengths, text, numbers.tobytes()

    @classmethod
    def unpack(cls, values: list[tuple[Any, ...]]) -> Sessions:
        """Several blocks' values, concatenated."""
        if not values:
            return cls()
        with decoding("session_windows", "blocks"):
            keys = unpack_text(b"".join(bytes(v[0]) for v in values), b"".join(bytes(v[1]) for v in values))
            numbers = np.frombuffer(b"".join(bytes(v[2]) for v in values), np.int64)
            numbers = numbers.reshape(-1, len(_NUMBERS))
            if len(keys) != len(numbers):
                raise ValueError(f"{len(keys)} keys with {len(numbers)} rows of numbers")
            return cls(keys, *(numbers[:, i].copy() for i in range(len(_NUMBERS))))


@dataclass
class BucketState:
    """What one (stream, bucket) keeps in its ValueState: the block layout (linear hashing,
    ``2**level + split`` blocks), the stream's highest event time (every bucket sees every
    chunk's), the ended flag (F017E-R23), the micro-batches seen, and per stored block its
    number, sessions and lowest trigger time."""

    buckets: int
    level: int = 0
    split: int = 0
    max_event_time: int | None = None
    ended: bool = False
    batches: int = 0
    blocks: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))

    def block_count(self) -> int:
        return (1 << self.level) + self.split

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, self.level, self.split, self.max_event_time is not None,
            self.max_event_time or 0, self.ended, self.batches,
            np.ascontiguousarray(self.blocks, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout("session_windows", value, LAYOUT_VERSION, buckets, "bucket")
        with decoding("session_windows", "bucket"):
            return cls(
                buckets, int(value[2]), int(value[3]), int(value[5]) if value[4] else None, bool(value[6]),
                int(value[7]), np.frombuffer(bytes(value[8]), np.int64).reshape(-1, 3).copy(),
            )  # fmt: skip


class _WideOut(OutputRows):
    """The wide stage's rows of one call: table rows (route = the bucket) and summaries (route -1)."""

    def __init__(self, stream_id: str | None) -> None:
        super().__init__(stream_id, (*OUTPUT_COLUMNS, ROUTE, *SUMMARY_COLS), STRING_COLS)


# ---- sessions as components (F017E-R3, R12, R22) --------------------------------------------


def _grouped_running_max(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` within runs of equal ``codes`` (codes sorted ascending)."""
    distinct, rank = np.unique(values, return_inverse=True)
    # codes ascending, so code * n + rank only grows from one run to the next: one accumulate for all.
    packed = codes.astype(np.int64) * len(distinct) + rank
    return distinct[np.maximum.accumulate(packed) - codes.astype(np.int64) * len(distinct)]


@dataclass
class _Components:
    code: np.ndarray
    start: np.ndarray
    last: np.ndarray
    count: np.ndarray
    sum: np.ndarray
    trigger: np.ndarray


def components(
    cfg: StreamConfig, stored_code: np.ndarray, stored: Sessions, code: np.ndarray, time: np.ndarray,
    value: np.ndarray,
) -> _Components:  # fmt: skip
    """F017E-R3/R12/R22: the sessions made of the stored ones and the on-time events (keys as
    codes), in any order: per key, blocks [start, last] sorted by start; a block more than
    ``gap`` after everything before it starts a new session. An untouched session keeps its
    stored trigger time; a grown or merged one gets end + allowed lateness."""
    n_stored, n_new = len(stored_code), len(code)
    block_code = np.concatenate([stored_code, code]).astype(np.int64)
    start = np.concatenate([stored.start, time])
    last = np.concatenate([stored.last, time])
    count = np.concatenate([stored.count, np.ones(n_new, np.int64)])
    total = np.concatenate([stored.sum, value])
    stored_trigger = np.concatenate([stored.trigger, np.zeros(n_new, np.int64)])
    if n_stored + n_new == 0:
        empty = np.empty(0, np.int64)
        return _Components(empty, empty, empty, empty, empty, empty)
    is_stored = np.arange(n_stored + n_new) < n_stored
    order = np.lexsort((start, block_code))
    code_s, start_s, last_s = block_code[order], start[order], last[order]
    first = np.ones(len(order), bool)
    first[1:] = code_s[1:] != code_s[:-1]
    reach = _grouped_running_max(code_s, last_s)
    before = np.empty_like(reach)
    before[0] = 0
    before[1:] = reach[:-1]
    heads = np.flatnonzero(first | (start_s > _sat_add(before, cfg.gap)))
    c_last = np.maximum.reduceat(last_s, heads)
    size = np.diff(np.append(heads, len(order)))
    untouched = (size == 1) & is_stored[order][heads]
    end = _sat_add(c_last, cfg.gap)  # F017E-R2
    return _Components(
        code=code_s[heads], start=start_s[heads], last=c_last,
        count=np.add.reduceat(count[order], heads), sum=np.add.reduceat(total[order], heads),
        trigger=np.where(untouched, stored_trigger[order][heads], _sat_add(end, cfg.allowed_lateness)),
    )  # fmt: skip


# ---- the wide stage: one batch of one bucket --------------------------------------------


@dataclass
class _Chunks:
    """A batch's chunk summaries, by chunk number: the highest event time before each chunk
    (the stored maximum and the earlier chunks') and the rows before it."""

    number: np.ndarray
    prior: np.ndarray
    prior_has: np.ndarray
    rows_before: np.ndarray
    top: int
    top_has: bool

    @classmethod
    def of(cls, summaries: pd.DataFrame, stored: int | None) -> _Chunks:
        order = np.argsort(summaries["sw_chunk"].to_numpy(np.int64), kind="stable")
        number = summaries["sw_chunk"].to_numpy(np.int64)[order]
        if len(number) and (np.diff(number) == 0).any():
            raise RuntimeError("session_windows: a chunk summary reached a bucket twice")
        has = summaries["sw_run_has"].to_numpy(bool)[order]
        tops = np.where(has, summaries["sw_run"].to_numpy(np.int64)[order], np.int64(I64_MIN))
        start = np.int64(I64_MIN if stored is None else stored)
        upto = np.maximum.accumulate(np.concatenate([[start], tops]))
        rows = summaries["sw_seq"].to_numpy(np.int64)[order]
        return cls(
            number, upto[:-1], (stored is not None) | ((np.cumsum(has) - has) > 0), np.cumsum(rows) - rows,
            int(upto[-1]), stored is not None or bool(has.any()),
        )  # fmt: skip

    def index(self, chunk: np.ndarray) -> np.ndarray:
        at = np.searchsorted(self.number, chunk)
        if len(chunk) and (
            (at >= len(self.number)).any()
            or (self.number[np.minimum(at, len(self.number) - 1)] != chunk).any()
        ):
            raise RuntimeError("session_windows: a row reached its bucket without its chunk's summary")
        return at


def _errors(
    kind: np.ndarray, key: np.ndarray, et_null: np.ndarray, after_end: np.ndarray, own: np.ndarray
) -> np.ndarray:
    """F017E-R20, vectorised: the reason of each malformed row this bucket reports, None elsewhere."""
    err = np.full(len(kind), None, dtype=object)
    is_event = kind == "event"
    key_null = pd.isna(key)
    err[~is_event & (kind != "end")] = "unsupported_item"
    err[kind == DUPLICATE_SEQ] = DUPLICATE_SEQ  # TR-15
    err[kind == VALUE_OUT_OF_RANGE] = VALUE_OUT_OF_RANGE  # TR-16
    err[is_event & key_null] = "missing_key"
    err[is_event & ~key_null & et_null] = "missing_event_time"
    err[after_end] = "after_end"  # F017E-R20, R23: checked first
    err[~own] = None
    return err


class SessionBucketProcessor(WideStage):
    """The wide stage: one call per (stream, bucket) and micro-batch."""

    def __init__(
        self, default: StreamConfig, per_stream: Mapping[str, StreamConfig], ordered: bool, buckets: int,
        has_batch: bool, block_sessions: int, report_timers: bool,
    ) -> None:  # fmt: skip
        super().__init__(default, per_stream, ordered, buckets)
        self.has_batch = has_batch
        self.block_sessions = block_sessions
        self.report_timers = report_timers

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_state = handle.getValueState("bucket", BUCKET_SCHEMA)
        self.blocks = handle.getMapState("blocks", "block long", BLOCK_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, cfg: StreamConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        stored = self.bucket_state.get()
        st = BucketState.from_tuple(stored, self.buckets) if stored is not None else BucketState(self.buckets)
        out = _WideOut(stream_id)
        for b, part in batches_in(pdf, "sw_batch", self.has_batch, st.batches):
            self._batch(st, cfg, bucket, part, b, out)
            st.batches += 1
        self.bucket_state.update(st.to_tuple())
        yield out.masked_frame(NULL_MASK)

    def _batch(
        self, st: BucketState, cfg: StreamConfig, bucket: int, rows: pd.DataFrame, b: int, out: _WideOut
    ) -> None:
        summary = rows["sw_summary"].to_numpy(bool)
        chunks = _Chunks.of(rows[summary], st.max_event_time)
        items = rows[~summary].sort_values(["sw_chunk", "sw_seq"], kind="stable")
        kind = items["sw_kind"].to_numpy(object)
        key = items["sw_key"].to_numpy(object)
        at = chunks.index(items["sw_chunk"].to_numpy(np.int64))
        seq = items["sw_seq"].to_numpy(np.int64)
        if not self.ordered:
            seq = seq + chunks.rows_before[at]  # the position in the micro-batch's event-time order

        # F017E-R23: the end row reaches every bucket; what follows it (here or later) is after_end.
        is_end = kind == "end"
        if st.ended:
            after_end = np.ones(len(kind), bool)
        elif is_end.any():
            after_end = seq > seq[is_end].min()
        else:
            after_end = np.zeros(len(kind), bool)
        ended = st.ended or bool(is_end.any())
        et_null = items["sw_et_null"].to_numpy(bool)
        # Bucket 0 alone gets malformed rows and reports the end rows; every bucket its own events.
        own = (kind != "batch_end") & ((bucket == 0) | ~is_end)
        err = _errors(kind, key, et_null, after_end, own)
        bad = err != None  # noqa: E711 - elementwise
        if bad.any():
            out.add("errors", int(bad.sum()), batch=b, seq=seq[bad], reason=err[bad], kw_route=bucket)

        # F017E-R5/R6/R22: the watermark just before and just after each own event, in arrival order.
        ev = (kind == "event") & pd.notna(key) & ~et_null & ~after_end
        e_key, e_time, e_seq, e_at = key[ev], items["sw_et"].to_numpy(np.int64)[ev], seq[ev], at[ev]
        e_value = items["sw_value"].to_numpy(np.int64)[ev]
        e_hash = items["sw_hash"].to_numpy(np.int64)[ev]
        run_has = items["sw_run_has"].to_numpy(bool)[ev]
        run = items["sw_run"].to_numpy(np.int64)[ev]
        before_has = run_has | chunks.prior_has[e_at]
        before = np.where(run_has, np.maximum(chunks.prior[e_at], run), chunks.prior[e_at])
        after = np.where(before_has, np.maximum(before, e_time), e_time)
        wm_before = sat_sub(before, cfg.bounded_delay)
        wm_after = sat_sub(after, cfg.bounded_delay)
        late = e_time < sat_sub(wm_after, cfg.allowed_lateness)  # F017E-R10: t + lateness < watermark
        n_late = int(late.sum())
        if n_late:
            verdict = "late_output" if cfg.emit_strategy == "OnWindowClose" else "dropped"  # F017E-R11
            out.add("late", n_late, batch=b, seq=e_seq[late], key=e_key[late], event_time=e_time[late],
                    watermark=wm_after[late], verdict=verdict, kw_route=bucket)  # fmt: skip

        # F017E-R7, R23: the watermark after the batch; the end makes it the end of time.
        if ended:
            final: int | None = I64_MAX
        elif chunks.top_has:
            final = int(sat_sub(np.array([chunks.top], np.int64), cfg.bounded_delay)[0])
        else:
            final = None

        # Only the blocks that hold keys of the batch's events or a timer the batch passes.
        known = st.blocks[:, 0]
        want = np.unique(block_of(e_hash, st.level, st.split))
        if self.report_timers:
            want = known
        elif final is not None:
            want = np.union1d(want, known[st.blocks[:, 2] < final])
        read = np.isin(known, want)
        values = {int(block): self._read(int(block), bucket) for block in known[read].tolist()}
        stored = Sessions.unpack(list(values.values()))

        codes, found = pd.factorize(np.concatenate([stored.key, e_key]))
        uniques = np.asarray(found, dtype=object)
        stored_code, e_code = codes[: len(stored)], codes[len(stored) :]
        code_hash = np.zeros(len(uniques), np.int64)
        code_hash[stored_code] = stored.hash
        code_hash[e_code] = e_hash
        c = components(cfg, stored_code, stored, e_code[~late], e_time[~late], e_value[~late])
        closing = c.trigger < final if final is not None else np.zeros(len(c.trigger), bool)
        n_closed = int(closing.sum())
        n_by_watermark = 0
        if n_closed:
            # F017E-R8, R22: by the watermark iff the event whose watermark first passes the timer
            # is of the session's key: that event's watermark before is at or below the timer.
            trigger = c.trigger[closing]
            first = np.searchsorted(wm_after, trigger, side="right")
            inside = first < len(wm_after)
            at_first = np.minimum(first, max(len(wm_after) - 1, 0))
            by_watermark = inside
            if len(wm_after):
                by_watermark = (
                    inside
                    & (e_code[at_first] == c.code[closing])
                    & (~before_has[at_first] | (wm_before[at_first] <= trigger))
                )
            n_by_watermark = int(by_watermark.sum())
            out.add(
                "sessions", n_closed, batch=b, key=uniques[c.code[closing]], session_start=c.start[closing],
                session_end=_sat_add(c.last[closing], cfg.gap), count=c.count[closing], sum=c.sum[closing],
                reason=np.where(by_watermark, "watermark", "timer").astype(object), kw_route=bucket,
            )  # fmt: skip
        keep = ~closing
        kept = Sessions(
            uniques[c.code[keep]], code_hash[c.code[keep]], c.start[keep], c.last[keep], c.count[keep],
            c.sum[keep], c.trigger[keep],
        )  # fmt: skip
        kept = self._store(st, kept, values, bucket)
        if self.report_timers and len(kept):
            out.add("timers", len(kept), batch=b, key=kept.key, session_start=kept.start,
                    trigger_time=kept.trigger, kw_route=bucket)  # fmt: skip
        st.max_event_time = chunks.top if chunks.top_has else None
        st.ended = ended
        out.add(
            "summary", 1, batch=b, kw_route=SUMMARY_ROUTE, s_bucket=bucket, s_open=int(st.blocks[:, 1].sum()),
            s_by_timer=n_closed - n_by_watermark, s_by_watermark=n_by_watermark, s_late=n_late,
            s_watermark=final or 0, s_has_watermark=int(final is not None),
        )  # fmt: skip

    def _read(self, block: int, bucket: int) -> tuple[Any, ...]:
        value = self.blocks.getValue((block,))
        if value is None:  # the summary lists only blocks that hold a value
            raise missing_value("session_windows", "blocks", f"block {block} of bucket {bucket}")
        return tuple(value)

    def _store(
        self, st: BucketState, kept: Sessions, values: dict[int, tuple[Any, ...]], bucket: int
    ) -> Sessions:
        """Writes back the open sessions of the blocks read (and of new ones), after splitting
        blocks in order while they hold more than ``block_sessions`` sessions on average (linear
        hashing: a block to split is read first). Returns every session it holds in memory."""
        unread = st.blocks[~np.isin(st.blocks[:, 0], list(values))]
        total = int(unread[:, 1].sum()) + len(kept)
        while total > self.block_sessions * st.block_count():
            victim = unread[:, 0] == st.split
            if victim.any():
                values[st.split] = self._read(st.split, bucket)
                kept = kept + Sessions.unpack([values[st.split]])
                unread = unread[~victim]
            st.split += 1
            if st.split == 1 << st.level:
                st.level, st.split = st.level + 1, 0
        block = block_of(kept.hash, st.level, st.split)
        order = np.argsort(block, kind="stable")
        touched = np.union1d(np.array(list(values), np.int64), block)
        bounds = (
            np.searchsorted(block[order], touched, side="left"),
            np.searchsorted(block[order], touched, side="right"),
        )
        rows = []
        for i, number in enumerate(touched.tolist()):
            mine = order[bounds[0][i] : bounds[1][i]]
            if len(mine) == 0:
                if number in values:
                    self.blocks.removeKey((number,))
                continue
            part = kept.take(mine)
            value = part.pack()
            original = values.get(number)
            if original is None or any(bytes(a) != v for a, v in zip(original, value, strict=True)):
                self.blocks.updateValue((number,), value)
            rows.append((number, len(part), int(part.trigger.min())))
        st.blocks = np.concatenate([unread, np.array(rows, np.int64).reshape(-1, 3)])
        return kept


# ---- the narrow group: the stream's counters and progress rows (F017E-R9) -------------------


@dataclass
class NarrowState:
    """What the narrow group keeps per stream: the cumulative counters and each bucket's latest
    number of open sessions."""

    buckets: int
    closed_by_timer: int = 0
    closed_by_watermark: int = 0
    late_events: int = 0
    open_sessions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __post_init__(self) -> None:
        if len(self.open_sessions) == 0:
            self.open_sessions = np.zeros(self.buckets, np.int64)

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, self.closed_by_timer, self.closed_by_watermark, self.late_events,
            np.ascontiguousarray(self.open_sessions, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> NarrowState:
        check_layout("session_windows", value, LAYOUT_VERSION, buckets, "stream")
        with decoding("session_windows", "stream"):
            open_sessions = np.frombuffer(bytes(value[5]), np.int64).copy()
            if len(open_sessions) != buckets:
                raise ValueError(f"open-session counts of {len(open_sessions)} buckets for {buckets} buckets")
            return cls(buckets, int(value[2]), int(value[3]), int(value[4]), open_sessions)


def summarise_batch(st: NarrowState, rows: pd.DataFrame, b: int, out: OutputRows) -> None:
    """F017E-R9, R19: one progress row from the buckets' summaries of batch ``b``."""
    st.open_sessions[rows["s_bucket"].to_numpy(np.int64)] = rows["s_open"].to_numpy(np.int64)
    st.closed_by_timer += int(rows["s_by_timer"].sum())
    st.closed_by_watermark += int(rows["s_by_watermark"].sum())
    st.late_events += int(rows["s_late"].sum())
    has = rows["s_has_watermark"].to_numpy(np.int64) != 0
    watermark = int(rows["s_watermark"].to_numpy(np.int64)[has].max()) if has.any() else None
    out.add(
        "progress", 1, batch=b, watermark=(np.array([watermark or 0]), np.array([watermark is None])),
        open_sessions=int(st.open_sessions.sum()), sessions_closed_by_timer=st.closed_by_timer,
        sessions_closed_by_watermark=st.closed_by_watermark, late_events=st.late_events,
    )  # fmt: skip


class StreamSummaryProcessor(BatchSummaryStage):
    """The second stage: route -1 is the stream's narrow group; other routes pass rows through."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)
    state_schema = STREAM_SCHEMA
    state_class = NarrowState
    string_cols = STRING_COLS
    summarise_batch = staticmethod(summarise_batch)


# ---- the Spark operator ----------------------------------------------------------------


@dataclass
class SessionWindowStreams(OperatorStreams):
    """The operator's output: ``output`` (combined) and its projections; ``write_tables``
    writes every table from one query."""

    table_columns = TABLE_COLUMNS

    output: Any
    sessions: Any
    late: Any
    late_output: Any
    timers: Any
    progress: Any
    errors: Any
    sink_rows: Any = None
    sink_step: Any = None


def session_windows(
    df: Any,
    key_col: str,
    event_time_col: str,
    gap_ms: int,
    allowed_lateness_ms: int = 0,
    bounded_delay_ms: int = 0,
    emit_strategy: str = "OnWindowClose",
    value_col: str | None = None,
    stream_id_col: str | None = None,
    seq_col: str | None = None,
    kind_col: str | None = None,
    batch_col: str | None = None,
    stream_configs: Mapping[str, Mapping[str, Any]] | None = None,
    report_timers: bool = False,
    buckets: int | None = None,
    block_sessions: int = DEFAULT_BLOCK_SESSIONS,
    chunk_rows: int | None = None,
    seq_unique: bool = False,
) -> SessionWindowStreams:
    """Applies F017E session windows to a streaming DataFrame (see the module docstring).

    ``report_timers``: also write the ``timers`` table (every open session after every
    micro-batch; it makes every bucket read all its sessions each time). ``buckets``: key
    groups per stream in the wide stage (default: 4 per shuffle partition of the session),
    fixed in the checkpoint. ``block_sessions``: the open sessions a state value holds on
    average before its bucket splits a block; ``chunk_rows``: the arrival positions one group
    of the order stage covers (with ``seq_col``; default 64 per bucket: each chunk sends one
    summary row to every bucket); both may change between runs. ``seq_unique``: the producer
    guarantees that ``seq_col`` is unique per stream and batch, which skips the duplicate check
    (TR-15: every row of a repeated seq is a ``duplicate_seq`` error row; the order stage finds
    them, with no extra shuffle).

    Raises ``harness.traces.InvalidConfig`` for a bad setting or column.
    """
    from pyspark.sql import functions as F

    default, per_stream = stream_settings(
        validate_config,
        {"gap": gap_ms, "allowed_lateness": allowed_lateness_ms, "bounded_delay": bounded_delay_ms,
         "emit_strategy": emit_strategy},
        stream_configs,
    )  # fmt: skip
    buckets = default_buckets(df.sparkSession) if buckets is None else require_int("buckets", buckets, 1)
    block_sessions = require_int("block_sessions", block_sessions, 1)
    if chunk_rows is None:
        chunk_rows = CHUNK_ROWS_PER_BUCKET * buckets
    chunk_rows = require_int("chunk_rows", chunk_rows, 1)
    fields = {f.name: f.dataType for f in df.schema.fields}
    prepare_session(df.sparkSession, "session_windows")
    warn_without_seq("session_windows", seq_col, "event-time order, ties by key")
    check_columns(
        fields,
        {"key_col": key_col, "event_time_col": event_time_col, "stream_id_col": stream_id_col,
         "seq_col": seq_col, "kind_col": kind_col, "value_col": value_col, "batch_col": batch_col},
        ("seq_col", "batch_col", "value_col"),
        kind_col, seq_col,
    )  # fmt: skip
    et = event_time_millis(fields, event_time_col)

    # Only the columns the input has cross into the Python worker; the order stage fills the rest.
    cols = [
        stream_id_column(stream_id_col, "sw_sid"),
        F.col(key_col).cast("string").alias("sw_key"),
        long_or_zero(et).alias("sw_et"),
        et.isNull().alias("sw_et_null"),
        (long_or_zero(batch_col) if batch_col else F.lit(0).cast("long")).alias("sw_batch"),
        *place_flags(seq_col, batch_col, "sw_"),
    ]
    for label, name in (("sw_seq", seq_col), ("sw_value", value_col)):
        if name:
            cols.append(long_or_zero(name).alias(label))
    if kind_col or value_col:
        kind_text = F.col(kind_col).cast("string") if kind_col else F.lit("event")
        cols.append((value_checked_kind(kind_text, value_col) if value_col else kind_text).alias("sw_kind"))
    rows, unplaced = split_unplaced(df.select(*cols), "sw_")  # TR-16: no seq or batch, no place
    rows = rows.withColumn("sw_hash", F.xxhash64(F.col("sw_key")))
    # A chunk never goes back in the micro-batch's order: seq div chunk_rows, or an event-time range.
    chunk = F.expr(f"sw_seq div {chunk_rows}") if seq_col else F.shiftright(F.col("sw_et"), CHUNK_TIME_BITS)
    ordered_rows = (
        rows.withColumn("sw_chunk", chunk.cast("long"))
        .groupBy("sw_sid", "sw_batch", "sw_chunk")
        .transformWithStateInPandas(
            statefulProcessor=ChunkOrderProcessor(buckets, seq_col is not None, not seq_unique),
            outputStructType=ORDER_SCHEMA, outputMode="Append", timeMode="None",
        )
    )  # fmt: skip
    wide = SessionBucketProcessor(
        default,
        per_stream,
        seq_col is not None,
        buckets,
        batch_col is not None,
        block_sessions,
        report_timers,
    )
    narrow = StreamSummaryProcessor(buckets)
    both = two_stages(ordered_rows, "sw_sid", "sw_bucket", wide, WIDE_SCHEMA, narrow, PASS_SCHEMA)
    output = with_unplaced_errors(restore_nulls(both, OUTPUT_COLUMNS, LONG_COLS), unplaced, "sw_")
    # write_tables and foreach_batch: the order and wide stages, the narrow step in the sink
    step = SinkStep("session_windows", narrow, "stream", STREAM_SCHEMA, OUTPUT_COLUMNS, LONG_COLS)
    sink_rows = with_unplaced_errors(
        one_stage(ordered_rows, "sw_sid", "sw_bucket", wide, WIDE_SCHEMA), unplaced, "sw_"
    )
    tables = table_projections(output, TABLE_COLUMNS)
    return SessionWindowStreams(
        output=output, late_output=tables["late"].filter(F.col("verdict") == "late_output"), **tables,
        sink_rows=sink_rows, sink_step=step,
    )  # fmt: skip


# ---- the three stages without Spark (the pure core) ----------------------------------------


@dataclass
class StreamState:
    """Everything one stream leaves in the state store, every group of the three stages (a
    ``MemoryStore``'s entries), for running ``process_rows`` without Spark; ``to_tuple`` and
    ``from_tuple`` stand for the checkpoint between micro-batches."""

    buckets: int = ENGINE_BUCKETS
    values: dict[tuple[Any, ...], tuple[Any, ...]] = field(default_factory=dict)

    def to_tuple(self) -> tuple[Any, ...]:
        return (LAYOUT_VERSION, self.buckets, tuple(sorted(self.values.items(), key=lambda kv: repr(kv[0]))))

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int | None = None) -> StreamState:
        check_layout("session_windows", value, LAYOUT_VERSION, int(value[1]) if buckets is None else buckets)
        return cls(int(value[1]), dict(value[2]))


def _key_hash(keys: np.ndarray) -> np.ndarray:
    """A stable signed 64-bit hash per key (BLAKE2b): the pure core's stand-in for Spark's
    xxhash64, which only decides which bucket and block a key's sessions live in."""
    codes, distinct = pd.factorize(keys)
    per_key = np.array(
        [int.from_bytes(hashlib.blake2b(str(k).encode(), digest_size=8).digest(), "big", signed=True)
         for k in distinct.tolist()], np.int64,
    )  # fmt: skip
    return np.where(codes >= 0, per_key[np.maximum(codes, 0)] if len(per_key) else 0, np.int64(0))


def process_rows(
    state: StreamState, rows: pd.DataFrame, cfg: StreamConfig, stream_id: str, has_batch: bool,
    report_timers: bool = True, block_sessions: int = ENGINE_BLOCK_SESSIONS,
    chunk_rows: int = ENGINE_CHUNK_ROWS, ordered: bool = True,
) -> pd.DataFrame:  # fmt: skip
    """One micro-batch of one stream through the operator's three stages without Spark: the
    processors' own code on ``state`` (a MemoryStore), each group's rows in Spark's grouping.

    ``rows`` has the columns the projection of ``session_windows`` makes: sw_seq (when
    ``ordered``), sw_kind, sw_key, sw_et, sw_et_null, sw_value and, with ``has_batch``,
    sw_batch; any physical order. Returns the output rows with nulls (OUTPUT_COLUMNS)."""
    if len(rows) == 0:  # Spark calls no group of a stream without rows in the micro-batch
        return pd.DataFrame({c: pd.array([], "Int64" if c in LONG_COLS else object) for c in OUTPUT_COLUMNS})
    pdf = with_defaults(rows, {"sw_batch": np.int64(0), **_ORDER_DEFAULTS}).reset_index(drop=True)
    if not has_batch:
        pdf["sw_batch"] = np.int64(0)
    pdf["sw_hash"] = _key_hash(pdf["sw_key"].to_numpy(object))
    if ordered:
        pdf["sw_chunk"] = pdf["sw_seq"].to_numpy(np.int64) // chunk_rows
    else:
        pdf["sw_chunk"] = np.right_shift(pdf["sw_et"].to_numpy(np.int64), CHUNK_TIME_BITS)
    store = MemoryStore(state.values)
    order = ChunkOrderProcessor(state.buckets, ordered)
    chunked = [
        frame
        for (b, chunk), group in pdf.groupby(["sw_batch", "sw_chunk"], sort=False)
        for frame in order.handleInputRows((stream_id, b, chunk), iter([group]), None)
    ]
    wide = SessionBucketProcessor(cfg, {}, ordered, state.buckets, has_batch, block_sessions, report_timers)
    widened: list[pd.DataFrame] = []
    for bucket, group in pd.concat(chunked, ignore_index=True).groupby("sw_bucket", sort=False):
        wide.init(store.handle(("wide", bucket)))
        widened.extend(wide.handleInputRows((stream_id, bucket), iter([group]), None))
    second = StreamSummaryProcessor(state.buckets)
    passed: list[pd.DataFrame] = []
    for route, group in pd.concat(widened, ignore_index=True).groupby(ROUTE, sort=False):
        second.init(store.handle(("second", route)))
        passed.extend(second.handleInputRows((stream_id, route), iter([group]), None))
    result = pd.concat(passed, ignore_index=True)
    mask = result[NULL_MASK].to_numpy(np.int64)
    restored: dict[str, Any] = {}
    for c in OUTPUT_COLUMNS:
        if c in LONG_COLS:
            null = (mask >> LONG_COLS.index(c)) & 1 == 1
            restored[c] = pd.arrays.IntegerArray(result[c].to_numpy(np.int64), null)
        else:
            restored[c] = result[c].to_numpy(object)
    return pd.DataFrame(restored)


def native_session_report(spark: Any, trace: Any) -> dict[str, list[dict[str, int | str]]]:
    """Runs a trace's events through Spark's OWN ``session_window`` and reports what it emits.

    ``trace``: an F017E ``Trace`` (its well-formed ``event`` items; ``gap`` and
    ``bounded_delay`` from its config, no lateness). One streaming query, one
    trace batch per micro-batch (AvailableNow), append mode::

        events.withWatermark(ts, delay).groupBy(key, session_window(ts, gap)).agg(count, sum)

    Returns ``sessions`` (batch_id, key, session_start, session_end, count,
    sum; times in ms) and ``batches`` (batch_id, watermark in ms, dropped_late:
    rows dropped by Spark's watermark). For the comparison test only: it reads
    its result back to the driver.
    """
    import datetime
    import os
    import shutil
    import tempfile

    import pyarrow as pa
    from pyspark.sql import functions as F

    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    cfg = validate_config(trace.config)
    cols: dict[str, list[Any]] = {"batch": [], "key": [], "event_time": [], "value": []}
    for b, batch in enumerate(trace.batches):
        for i in batch:
            if i.kind == "event" and i.key is not None and i.event_time is not None:
                for name, v in zip(cols, (b, i.key, i.event_time, i.value), strict=True):
                    cols[name].append(v)
    types = {"batch": pa.int64(), "key": pa.string(), "event_time": pa.int64(), "value": pa.int64()}
    work = tempfile.mkdtemp(prefix="sw-native-")
    try:
        path, sink = os.path.join(work, "events.parquet"), os.path.join(work, "sessions")
        write_trace_file(path, pa.table({k: pa.array(v, types[k]) for k, v in cols.items()}))
        sessions = (
            spark.readStream.format(SOURCE_NAME).option("path", path)
            .option("num_batches", str(len(trace.batches))).load()
            .withColumn("ts", F.timestamp_millis("event_time"))
            .withWatermark("ts", f"{cfg.bounded_delay} milliseconds")
            .groupBy("key", F.session_window("ts", f"{cfg.gap} milliseconds").alias("w"))
            .agg(F.count("*").alias("count"), F.sum("value").alias("sum"))
            .select("key", F.unix_millis("w.start").alias("session_start"),
                    F.unix_millis("w.end").alias("session_end"), "count", "sum")
        )  # fmt: skip

        def keep(frame: Any, batch_id: int) -> None:
            frame.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(sink)

        query = (
            sessions.writeStream.outputMode("append").foreachBatch(keep).trigger(availableNow=True)
            .option("checkpointLocation", os.path.join(work, "checkpoint")).start()
        )  # fmt: skip
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"native session_window query failed: {query.exception()}")
        progress = list(query.recentProgress)
        emitted = [r.asDict() for r in spark.read.parquet(sink).collect()] if os.path.exists(sink) else []
    finally:
        shutil.rmtree(work, ignore_errors=True)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    batches = []
    for p in progress:
        wm = datetime.datetime.fromisoformat(p.eventTime["watermark"].replace("Z", "+00:00"))
        batches.append({
            "batch_id": int(p.batchId),
            "watermark": (wm - epoch) // datetime.timedelta(milliseconds=1),
            "dropped_late": sum(int(s.numRowsDroppedByWatermark or 0) for s in p.stateOperators),
        })  # fmt: skip
    return {"sessions": emitted, "batches": batches}


def engine_streams(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> SessionWindowStreams:
    """The harness engine's call (spark_impl.engine.area_module): its input columns, one stream per
    trace, the timers table on (the conformance run compares it), and the engine's small layout;
    the engine writes a query of this area alone through ``foreach_batch`` (the narrow step in
    the sink) and a query mixing areas through ``output``. ``seq_unique``: the engine's seqs are
    trace positions, unique by construction; False checks them (TR-15)."""
    return session_windows(
        df, key_col="key", event_time_col="event_time", gap_ms=1, stream_id_col="trace_id", seq_col="seq",
        kind_col="kind", value_col="value", batch_col="batch", stream_configs=stream_configs,
        report_timers=True, buckets=buckets, block_sessions=ENGINE_BLOCK_SESSIONS,
        chunk_rows=ENGINE_CHUNK_ROWS, seq_unique=seq_unique,
    )  # fmt: skip


def engine_output(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> Any:
    """``engine_streams``'s combined stream with every stage (``output``)."""
    return engine_streams(df, stream_configs, seq_unique, buckets).output


# ---- the state layout as a checkpoint holds it (read by spark_impl/checkpoints.py) ----------

LAYOUT = register(
    Operator(
        "session_windows", LAYOUT_VERSION,
        Stage({
            "bucket": lambda v, k: BucketState.from_tuple(v, value_buckets(v)),
            "blocks": lambda v, k: Sessions.unpack([v]),
        }, ("bucket",)),
        Stage({"stream": lambda v, k: NarrowState.from_tuple(v, value_buckets(v))}, ("stream",)),
        schema_fields(STREAM_SCHEMA),
    )
)  # fmt: skip


__all__ = [
    "BucketState",
    "ChunkOrderProcessor",
    "LAYOUT_VERSION",
    "NarrowState",
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "SessionBucketProcessor",
    "SessionWindowStreams",
    "StreamConfig",
    "StreamState",
    "StreamSummaryProcessor",
    "engine_output",
    "engine_streams",
    "native_session_report",
    "process_rows",
    "session_windows",
    "validate_config",
]
