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
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN, InvalidConfig
from spark_impl.checkpoints import (
    IncompatibleCheckpoint,
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
    StatefulProcessorHandle,
    batches_in,
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
from spark_impl.common import sat_sub as _sat_sub
from spark_impl.scaleout import (
    CURRENT_TIMESTAMP,
    DUPLICATE_SEQ,
    NULL_MASK,
    SecondStage,
    SinkStep,
    WideStage,
    block_of,
    check_layout,
    default_buckets,
    flag_duplicate_seqs,
    one_stage,
    pack_text,
    processing_time,
    restore_nulls,
    to_buckets,
    two_stages,
    unpack_text,
    with_ticks,
)
from spark_impl.session import prepare_session

LAYOUT_VERSION = 4  # 4: the ended flag and each block's open-window count (F065-R38)
POLICIES = ("LeastRecentlyActive", "LowestWatermark", "RejectNew")
DEFAULT_POLICY = POLICIES[0]
CONFIG_KEYS = ("bounded_delay", "idle_timeout", "max_keys", "eviction_policy", "window_size")
COMPACT_KEYS = ("exact_key_count", "sketch_error_rate", "sketch_depth", "shards")  # F065-R26
DEFAULT_BLOCK_KEYS = 128
DEFAULT_SKETCH_ERROR_RATE = 0.01
DEFAULT_SKETCH_DEPTH = 4
MAX_SKETCH_DEPTH = 6  # F065-R27: digest words w2..w7 give the cells of six rows at most
COMPACT_DOMAIN = b"F065-compact\x00"  # F065-R27: prefixes every key's digest
HLL_REGISTERS = 4096  # F065-R34: precision 12
HLL_INDEX_SHIFT = 52

STRING_COLS = ("output", "stream_id", "key", "verdict", "state", "reason")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "key", "event_time", "key_watermark", "verdict",
    "global_watermark", "total_keys", "active_keys", "idle_keys", "evicted_keys",
    "global_advances", "key_advances", "estimated_keys", "watermark", "state",
    "window_start", "window_end", "count", "sum", "reason", "python_calls", "state_calls",
)  # fmt: skip
LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)

# Between the stages: long columns as values with one null mask (bit i: LONG_COLS[i] is null),
# so no nullable long becomes a float in pandas; ``kw_route`` picks the second stage's group
# (the bucket for table rows, -1 for summaries); ``s_*`` are the summary columns
# (``s_estimated``: the sum of the bucket's shard estimates, F065-R34, in its final summary).
SUMMARY_COLS = (
    "s_bucket", "s_call_seq", "s_call_part", "s_keys", "s_idle", "s_min_active", "s_max",
    "s_key_advances", "s_evicted", "s_state_calls", "s_python_calls", "s_estimated",
)  # fmt: skip
PASS_SCHEMA = ", ".join(
    [f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS] + ["`kw_nulls` long"]
)
WIDE_SCHEMA = ", ".join([PASS_SCHEMA, "`kw_route` long"] + [f"`{c}` long" for c in SUMMARY_COLS])
BUCKET_SCHEMA = (
    "layout_version int, buckets int, level int, split int, clock long, activity long, blocks binary, "
    "ended boolean"
)
BLOCK_SCHEMA = (
    "key_lengths binary, key_bytes binary, numbers binary, idle binary, "
    "window_key_lengths binary, window_key_bytes binary, window_numbers binary"
)
STREAM_SCHEMA = (
    "layout_version int, buckets int, global_advances long, evicted long, key_advances long, "
    "bucket_summaries binary"
)

# Column projections of the convenience DataFrames (the harness tables plus stream_id).
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "events": ("stream_id", "batch", "seq", "key", "event_time", "key_watermark", "verdict"),
    "progress": (
        "stream_id", "batch", "global_watermark", "total_keys", "active_keys", "idle_keys",
        "evicted_keys", "global_advances", "key_advances", "estimated_keys",
    ),
    "metrics": ("stream_id", "batch", "python_calls", "state_calls"),
    "keys": ("stream_id", "batch", "key", "watermark", "state"),
    "windows": ("stream_id", "batch", "key", "window_start", "window_end", "count", "sum"),
    "errors": ("stream_id", "batch", "seq", "reason"),
}  # fmt: skip


# ---- configuration (F065-R20, R26) -----------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    bounded_delay: int = 5000
    idle_timeout: int = 60000
    max_keys: int | None = None
    eviction_policy: str = DEFAULT_POLICY
    window_size: int | None = None
    # F065-R26: the compact tracker when exact_key_count is set.
    exact_key_count: int | None = None
    sketch_error_rate: float = DEFAULT_SKETCH_ERROR_RATE
    sketch_depth: int = DEFAULT_SKETCH_DEPTH
    shards: int = 1

    @property
    def compact(self) -> bool:
        return self.exact_key_count is not None

    @property
    def width(self) -> int:
        return math.ceil(math.e / self.sketch_error_rate)  # F065-R27: the count-min width

    @property
    def exact_per_shard(self) -> int:
        return (self.exact_key_count or 0) // self.shards  # F065-R27

    @property
    def aging_period(self) -> int:
        return 10 * self.exact_per_shard  # F065-R28


_COMPACT_DEFAULTS: dict[str, Any] = {
    "sketch_error_rate": DEFAULT_SKETCH_ERROR_RATE, "sketch_depth": DEFAULT_SKETCH_DEPTH, "shards": 1,
}  # fmt: skip


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (F065-R20, R26) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS) - set(COMPACT_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown keyed_watermarks settings {sorted(unknown)}")
    if set(COMPACT_KEYS) & set(config):
        return _validate_compact(config)
    policy = config.get("eviction_policy", DEFAULT_POLICY)
    policy = getattr(policy, "value", policy)  # an enum member is accepted by its value
    if policy not in POLICIES:
        raise InvalidConfig(f"eviction_policy must be one of {list(POLICIES)}, got {policy!r}")
    max_keys = config.get("max_keys")
    window_size = config.get("window_size")
    return StreamConfig(
        bounded_delay=_require_int("bounded_delay", config.get("bounded_delay", 5000), 0),
        idle_timeout=_require_int("idle_timeout", config.get("idle_timeout", 60000), 0),
        max_keys=None if max_keys is None else _require_int("max_keys", max_keys, 1),
        eviction_policy=policy,
        window_size=None if window_size is None else _require_int("window_size", window_size, 1),
    )


def _validate_compact(config: Mapping[str, Any]) -> StreamConfig:
    """F065-R26: the compact tracker's settings; max_keys and window_size cannot join them."""
    if "exact_key_count" not in config:
        named = sorted(set(COMPACT_KEYS) & set(config))
        raise InvalidConfig(f"{named} need exact_key_count (the compact tracker, F065-R26)")
    # A null max_keys or window_size is "not set" (R20); an eviction policy has nothing to apply to.
    clash = sorted(k for k in ("max_keys", "window_size") if config.get(k) is not None)
    clash += ["eviction_policy"] if "eviction_policy" in config else []
    if clash:
        raise InvalidConfig(
            "the compact tracker (exact_key_count) bounds its own memory, picks its exact keys by its own "
            f"rule and keeps no windows; drop {clash}"
        )
    exact = _require_int("exact_key_count", config["exact_key_count"], 1)
    rate = config.get("sketch_error_rate", DEFAULT_SKETCH_ERROR_RATE)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.00001 <= rate < 1:
        raise InvalidConfig(f"sketch_error_rate must be a number from 0.00001 to below 1, got {rate!r}")
    depth = _require_int("sketch_depth", config.get("sketch_depth", DEFAULT_SKETCH_DEPTH), 1)
    if depth > MAX_SKETCH_DEPTH:
        raise InvalidConfig(f"sketch_depth must be at most {MAX_SKETCH_DEPTH}, got {depth}")
    shards = _require_int("shards", config.get("shards", 1), 1)
    if shards > exact:
        raise InvalidConfig(
            f"shards ({shards}) must be at most exact_key_count ({exact}): every shard holds at least one "
            "exact key"
        )
    return StreamConfig(
        bounded_delay=_require_int("bounded_delay", config.get("bounded_delay", 5000), 0),
        idle_timeout=_require_int("idle_timeout", config.get("idle_timeout", 60000), 0),
        exact_key_count=exact, sketch_error_rate=float(rate), sketch_depth=depth, shards=shards,
    )  # fmt: skip


# ---- saturating i64 arithmetic (TR-2) -------------------------------------


def _sat_sub1(a: int, d: int) -> int:
    return max(I64_MIN, a - d)


def _sat_add(a: np.ndarray, s: int | np.ndarray) -> np.ndarray:
    """min(i64 max, a + s) for s >= 0, without wrapping."""
    step = np.asarray(s, dtype=np.int64)
    with np.errstate(over="ignore"):
        return np.where(a > I64_MAX - step, np.int64(I64_MAX), a + step)


# ---- the loaded keys of a bucket ---------------------------------------------


class _Keys:
    """Keys column-wise: the blocks of one bucket read in this call."""

    def __init__(self, keys: np.ndarray | None = None, **cols: np.ndarray) -> None:
        self.keys = keys if keys is not None else np.empty(0, dtype=object)
        n = len(self.keys)
        self.hash = cols.get("hash", np.zeros(n, np.int64))
        self.max_et = cols.get("max_et", np.zeros(n, np.int64))
        self.wm = cols.get("wm", np.zeros(n, np.int64))
        self.last = cols.get("last", np.zeros(n, np.int64))
        self.order = cols.get("order", np.zeros(n, np.int64))
        self.idle = cols.get("idle", np.zeros(n, bool))
        self._pos: dict[str, int] | None = None

    NUMBERS = ("hash", "max_et", "wm", "last", "order")

    def __len__(self) -> int:
        return len(self.keys)

    def positions(self, keys: np.ndarray) -> np.ndarray:
        """Each key's row, -1 for an untracked key. A dict kept up to date by ``append``, so
        a segment that brings new keys costs what it adds, not a rebuild of the table."""
        if self._pos is None:
            self._pos = {k: i for i, k in enumerate(self.keys.tolist())}
        get = self._pos.get
        return np.fromiter((get(k, -1) for k in keys.tolist()), np.int64, len(keys))

    def find(self, key: str) -> int:
        return int(self.positions(np.array([key], dtype=object))[0])

    def append(self, new_keys: np.ndarray, new_hashes: np.ndarray) -> None:
        m = len(new_keys)
        self.keys = np.concatenate([self.keys, np.asarray(new_keys, dtype=object)])
        self.hash = np.concatenate([self.hash, np.asarray(new_hashes, np.int64)])
        for name in ("max_et", "wm", "last", "order"):
            setattr(self, name, np.concatenate([getattr(self, name), np.zeros(m, np.int64)]))
        self.idle = np.concatenate([self.idle, np.zeros(m, bool)])
        if self._pos is not None:
            self._pos.update((k, len(self.keys) - m + i) for i, k in enumerate(np.asarray(new_keys).tolist()))

    def keep(self, mask: np.ndarray) -> None:
        for name in ("keys", *self.NUMBERS, "idle"):
            setattr(self, name, getattr(self, name)[mask])
        self._pos = None


@dataclass(frozen=True)
class Aggregate:
    """The cross-key figures of a set of keys: enough to combine sets (F065-R5, R7)."""

    keys: int = 0
    idle: int = 0
    min_active: int = I64_MAX  # meaningful when keys > idle
    max_wm: int = I64_MIN  # meaningful when keys > 0

    def __add__(self, other: Aggregate) -> Aggregate:
        return Aggregate(
            self.keys + other.keys, self.idle + other.idle,
            min(self.min_active, other.min_active), max(self.max_wm, other.max_wm),
        )  # fmt: skip

    @staticmethod
    def of(t: _Keys) -> Aggregate:
        if len(t) == 0:
            return Aggregate()
        active = ~t.idle
        n_active = int(active.sum())
        return Aggregate(
            len(t), len(t) - n_active, int(t.wm[active].min()) if n_active else I64_MAX, int(t.wm.max())
        )


def global_watermark(keys: int, idle: int, min_active: int, max_wm: int) -> int | None:
    if keys == 0:
        return None  # F065-R5: no tracked key
    if keys > idle:
        return min_active  # F065-R5 (may go down: R6)
    return max_wm  # F065-R7: all idle


# ---- state layouts -----------------------------------------------------------


# A stored block's (or, for a compact stream, shard's) summary row; ``estimate`` is a compact
# shard's HyperLogLog estimate (F065-R34), 0 for a block; ``windows`` the block's open windows
# (F065-R38: the end reads only the blocks that hold some), 0 for a shard.
_SUMMARY_FIELDS = ("sub", "keys", "idle", "min_active", "max_wm", "min_active_last", "estimate", "windows")


@dataclass
class BucketState:
    """What one (stream, bucket) keeps in its ValueState: scalars, the block layout (linear
    hashing: ``2**level + split`` blocks) and the sparse summary of the blocks."""

    buckets: int
    level: int = 0
    split: int = 0
    clock: int = 0
    activity: int = 0
    # One row per stored block (or compact shard): _SUMMARY_FIELDS, as an (m, 8) int64 array.
    subs: np.ndarray = field(default_factory=lambda: np.zeros((0, len(_SUMMARY_FIELDS)), np.int64))
    ended: bool = False  # F065-R38: the stream's end was applied; every later row is an error

    def blocks(self) -> int:
        return (1 << self.level) + self.split

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, self.level, self.split, self.clock, self.activity,
            np.ascontiguousarray(self.subs, np.int64).tobytes(), self.ended,
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout("keyed_watermarks", value, LAYOUT_VERSION, buckets, "bucket")
        with decoding("keyed_watermarks", "bucket"):
            subs = np.frombuffer(bytes(value[6]), np.int64).reshape(-1, len(_SUMMARY_FIELDS)).copy()
            level, split, clock, activity = (int(value[i]) for i in range(2, 6))
            return cls(buckets, level, split, clock, activity, subs, bool(value[7]))


def pack_block(t: _Keys, rows: np.ndarray, w: pd.DataFrame, wrows: np.ndarray) -> tuple[Any, ...]:
    """One block: its keys (rows of ``t``) and open windows (rows of ``w``)."""
    lengths, data = pack_text(t.keys[rows])
    numbers = np.column_stack([getattr(t, n)[rows] for n in _Keys.NUMBERS]).astype(np.int64)
    wl, wd = pack_text(w["key"].to_numpy(object)[wrows])
    wn = np.column_stack([w[c].to_numpy(np.int64)[wrows] for c in _WINDOW_NUMBERS]).astype(np.int64)
    return (lengths, data, numbers.tobytes(), t.idle[rows].astype(bool).tobytes(), wl, wd, wn.tobytes())


def concat_keys(a: _Keys, b: _Keys) -> _Keys:
    return _Keys(
        np.concatenate([a.keys, b.keys]), idle=np.concatenate([a.idle, b.idle]),
        **{n: np.concatenate([getattr(a, n), getattr(b, n)]) for n in _Keys.NUMBERS},
    )  # fmt: skip


def unpack_blocks(blocks: list[tuple[Any, ...]]) -> tuple[_Keys, pd.DataFrame]:
    """The keys and open windows of several blocks, concatenated."""
    if not blocks:
        return _Keys(), _no_windows()
    with decoding("keyed_watermarks", "blocks"):
        keys = unpack_text(b"".join(bytes(b[0]) for b in blocks), b"".join(bytes(b[1]) for b in blocks))
        nums = np.frombuffer(b"".join(bytes(b[2]) for b in blocks), np.int64).reshape(-1, len(_Keys.NUMBERS))
        idle = np.frombuffer(b"".join(bytes(b[3]) for b in blocks), bool)
        _same_length(keys=len(keys), numbers=len(nums), idle_flags=len(idle))
        t = _Keys(keys, idle=idle.copy(), **{n: nums[:, i].copy() for i, n in enumerate(_Keys.NUMBERS)})
        wkeys = unpack_text(b"".join(bytes(b[4]) for b in blocks), b"".join(bytes(b[5]) for b in blocks))
        wn = np.frombuffer(b"".join(bytes(b[6]) for b in blocks), np.int64).reshape(-1, len(_WINDOW_NUMBERS))
        _same_length(window_keys=len(wkeys), window_numbers=len(wn))
        w = pd.DataFrame({"key": wkeys, **{c: wn[:, i].copy() for i, c in enumerate(_WINDOW_NUMBERS)}})
        return t, w


def _same_length(**counts: int) -> None:
    """The parallel arrays of a state value have one entry per key, or the value is damaged."""
    if len(set(counts.values())) > 1:
        lengths = ", ".join(f"{name} {count}" for name, count in counts.items())
        raise ValueError(f"parallel arrays of different lengths: {lengths}")


_WINDOW_NUMBERS = ("hash", "start", "count", "sum")


def _no_windows() -> pd.DataFrame:
    return pd.DataFrame({"key": np.empty(0, object), **{c: np.empty(0, np.int64) for c in _WINDOW_NUMBERS}})


_STREAM_FIELDS = 5


@dataclass
class StreamState:
    """What the narrow stage keeps per stream: counters and each bucket's last summary."""

    buckets: int
    global_advances: int = 0
    evicted: int = 0
    key_advances: int = 0
    # (buckets, 5) int64 per bucket: keys, idle, min_active, max_wm, and the sum of its compact
    # shards' estimates (F065-R34; 0 for a stream without the compact tracker).
    summaries: np.ndarray = field(default_factory=lambda: np.zeros((0, _STREAM_FIELDS), np.int64))

    def __post_init__(self) -> None:
        if len(self.summaries) == 0:
            self.summaries = np.tile(np.array([0, 0, I64_MAX, I64_MIN, 0], np.int64), (self.buckets, 1))

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, self.global_advances, self.evicted, self.key_advances,
            np.ascontiguousarray(self.summaries, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> StreamState:
        check_layout("keyed_watermarks", value, LAYOUT_VERSION, buckets, "stream")
        with decoding("keyed_watermarks", "stream"):
            summaries = np.frombuffer(bytes(value[5]), np.int64).reshape(-1, _STREAM_FIELDS).copy()
            _same_length(buckets=buckets, bucket_summaries=len(summaries))
            return cls(buckets, int(value[2]), int(value[3]), int(value[4]), summaries)

    def global_watermark(self) -> int | None:
        s = self.summaries
        active = s[:, 0] > s[:, 1]
        return global_watermark(
            int(s[:, 0].sum()), int(s[:, 1].sum()),
            int(s[active, 2].min()) if active.any() else I64_MAX, int(s[:, 3].max()),
        )  # fmt: skip


# ---- output assembly --------------------------------------------------------


class _Out(OutputRows):
    """The first stage's rows of one call: table rows and summaries (WIDE_SCHEMA)."""

    def __init__(self, stream_id: str | None) -> None:
        super().__init__(stream_id, (*OUTPUT_COLUMNS, "kw_route", *SUMMARY_COLS), STRING_COLS)


# ---- one bucket of one stream (the wide stage; pure pandas/numpy) ------------


class _Reports:
    """The summary rows of one (stream, bucket) in a batch; a subclass gives ``aggregate``."""

    bucket: int
    emitted: Aggregate
    key_advances: int
    evicted: int

    def aggregate(self) -> Aggregate:
        raise NotImplementedError

    def estimate(self) -> int:
        return 0  # F065-R34: only compact shards estimate

    def summary(
        self, out: _Out, b: int, call: tuple[int, int], final: bool = False, state_calls: int = 0,
        python_calls: int = 0,
    ) -> None:  # fmt: skip
        """A summary row after a call when the bucket's figures changed (always for the final row)."""
        agg = self.aggregate()
        if agg == self.emitted and not final:
            return
        self.emitted = agg
        out.add(
            "summary", 1, batch=b, kw_route=-1, s_bucket=self.bucket, s_call_seq=call[0],
            s_call_part=call[1], s_keys=agg.keys, s_idle=agg.idle, s_min_active=agg.min_active,
            s_max=agg.max_wm, s_key_advances=self.key_advances if final else 0,
            s_evicted=self.evicted if final else 0, s_state_calls=state_calls, s_python_calls=python_calls,
            s_estimated=self.estimate() if final else 0,
        )  # fmt: skip


@dataclass
class _Bucket(_Reports):
    """One call of the wide stage on one (stream, bucket): the loaded keys and the rest."""

    st: BucketState
    cfg: StreamConfig
    bucket: int
    ordered: bool
    keys: _Keys = field(default_factory=_Keys)
    windows: pd.DataFrame = field(default_factory=_no_windows)
    rest: Aggregate = field(default_factory=Aggregate)  # the blocks not read
    emitted: Aggregate = field(default_factory=Aggregate)
    key_advances: int = 0
    evicted: int = 0

    def aggregate(self) -> Aggregate:
        return self.rest + Aggregate.of(self.keys)


LAST_CALL = I64_MAX  # the call position of a segment that no control row ends


class _Calls(NamedTuple):
    """A bucket's rows of one batch in arrival order and the columns both trackers read."""

    rows: pd.DataFrame
    kind: np.ndarray
    key: np.ndarray
    et: np.ndarray
    tm: np.ndarray
    seq: np.ndarray
    home: np.ndarray  # the row's key belongs to this bucket
    is_tick: np.ndarray
    has_err: np.ndarray
    control: np.ndarray  # a call of its own: a control or error row (F065-R16, R22)


def _after_end(kind: np.ndarray, seq: np.ndarray, ended: bool) -> np.ndarray:
    """F065-R38: the rows that come after the stream's end (all of them once it has ended)."""
    if ended:
        return np.ones(len(kind), bool)
    ends = kind == "end"
    return seq > seq[ends].min() if ends.any() else np.zeros(len(kind), bool)


def _calls(
    rows: pd.DataFrame, bucket: int, ordered: bool, clock: int, ended: bool, b: int, out: _Out
) -> _Calls:
    """Sorts a bucket's rows and finds its calls, and writes the error rows (F065-R23): bucket 0
    those of the rows copied to every bucket, a bucket those of its own events (F065-R38)."""
    # A batch_end marker only makes bucket 0 report an empty batch; it is no call.
    rows = rows[rows["kw_kind"].to_numpy(object) != "batch_end"].sort_values("kw_seq", kind="stable")
    kind = rows["kw_kind"].to_numpy(object)
    key = rows["kw_key"].to_numpy(object)
    tm = rows["kw_time"].to_numpy(np.int64)
    seq = rows["kw_seq"].to_numpy(np.int64)
    et_null, tm_null = rows["kw_et_null"].to_numpy(bool), rows["kw_time_null"].to_numpy(bool)
    key_null = pd.isna(key)
    err = _errors(kind, key_null, et_null, tm, tm_null, clock)
    err[_after_end(kind, seq, ended)] = "after_end"  # F065-R38: checked before every other reason
    has_err = err != None  # noqa: E711 - elementwise
    control = ~(kind == "event") | has_err
    if not ordered:
        control &= ~has_err  # no arrival order: errors change nothing and end no segment
    # A well-formed event reaches its own bucket only, so that bucket reports its error.
    routed = (kind == "event") & ~key_null & ~et_null
    write = has_err & (routed | (bucket == 0))
    if write.any():
        e = np.flatnonzero(write)
        seq_null = np.full(len(e), not ordered)
        out.add("errors", len(e), batch=b, seq=(seq[e], seq_null), reason=err[e], kw_route=bucket)
    home = rows["kw_home"].to_numpy(np.int64) == bucket
    et = rows["kw_et"].to_numpy(np.int64)
    return _Calls(rows, kind, key, et, tm, seq, home, kind == "tick", has_err, control)


def process_bucket(run: _Bucket, rows: pd.DataFrame, b: int, out: _Out) -> None:
    """One batch of one bucket: segments of events and control rows, in order (F065-R16, R22)."""
    st = run.st
    calls = _calls(rows, run.bucket, run.ordered, st.clock, st.ended, b, out)
    rows, kind, key, et, tm, seq, home, is_tick, has_err, control = calls
    n = len(rows)
    val = rows["kw_value"].to_numpy(np.int64)
    khash = rows["kw_hash"].to_numpy(np.int64)
    start = (run.keys.keys.copy(), run.keys.wm.copy(), run.keys.idle.copy())

    prev = 0
    for c in np.flatnonzero(control).tolist():
        if c > prev:
            _segment(
                run, key[prev:c], khash[prev:c], et[prev:c], val[prev:c], seq[prev:c], b, out, run.ordered
            )
            run.summary(out, b, (int(seq[c]), 0))
        if not has_err[c]:
            _control(run, kind[c], key[c], int(tm[c]), bool(home[c]), bool(is_tick[c]), b, out)
            run.summary(out, b, (int(seq[c]), 1))
        prev = c + 1
    if prev < n:
        _segment(run, key[prev:], khash[prev:], et[prev:], val[prev:], seq[prev:], b, out, run.ordered)
        run.summary(out, b, (LAST_CALL, 0))
    _key_changes(*start, run.keys, b, out, run.bucket)


def _errors(
    kind: np.ndarray,
    key_null: np.ndarray,
    et_null: np.ndarray,
    tm: np.ndarray,
    tm_null: np.ndarray,
    clock: int,
) -> np.ndarray:
    """F065-R23, vectorised: the reason of each malformed row, None elsewhere."""
    n = len(kind)
    is_event = kind == "event"
    is_clock = kind == "clock"
    keyed = is_event | (kind == "idle") | (kind == "remove_key")
    known = keyed | is_clock | (kind == "tick") | (kind == "end")
    err = np.full(n, None, dtype=object)
    err[~known] = "unsupported_item"
    err[kind == DUPLICATE_SEQ] = DUPLICATE_SEQ  # TR-15: an error row that ends the segment
    err[kind == VALUE_OUT_OF_RANGE] = VALUE_OUT_OF_RANGE  # TR-16: so does an event refused for its value
    err[is_clock & tm_null] = "missing_time"
    cand = is_clock & ~tm_null
    if cand.any():
        running = np.maximum.accumulate(np.where(cand, tm, np.int64(I64_MIN)))
        before = np.empty(n, np.int64)
        before[0] = clock
        before[1:] = np.maximum(running[:-1], np.int64(clock))
        err[cand & (tm < before)] = "clock_went_backwards"  # valid clocks never go back
    err[keyed & key_null] = "missing_key"
    err[is_event & ~key_null & et_null] = "missing_event_time"
    return err


def _control(run: _Bucket, kind: str, key: Any, time: int, home: bool, tick: bool, b: int, out: _Out) -> None:
    t = run.keys
    if kind == "end":
        run.st.ended = True
        _fire_all(run, b, out)  # F065-R38: no watermark or key moves
    elif kind in ("clock", "tick"):
        if tick and time <= run.st.clock:
            return  # a processing-time tick never moves the clock back
        run.st.clock = time
        stale = ~t.idle & ((np.int64(time) - t.last) > run.cfg.idle_timeout)  # F065-R10: strict >
        t.idle[stale] = True
    elif not home:
        return  # idle / remove_key of a key that lives in another bucket
    elif kind == "idle":
        i = t.find(key)
        if i >= 0:  # F065-R9: an unknown key changes nothing
            t.idle[i] = True
    elif kind == "remove_key":
        i = t.find(key)
        if i >= 0:  # F065-R17: an unknown key is a no-op
            mask = np.ones(len(t), bool)
            mask[i] = False
            t.keep(mask)


def _segment(
    run: _Bucket, keys: np.ndarray, hashes: np.ndarray, t: np.ndarray, v: np.ndarray, seq: np.ndarray,
    b: int, out: _Out, ordered: bool,
) -> None:  # fmt: skip
    """F065-R16/R22: this bucket's events of one segment, applied as one update_batch."""
    cfg = run.cfg
    table = run.keys
    n0 = len(table)
    pos = table.positions(keys)
    new = pos < 0
    if new.any():
        new_keys, first = np.unique(keys[new].astype(str), return_index=True)
        if cfg.max_keys is not None and n0 + len(new_keys) > cfg.max_keys:
            kwm, kwm_null, verdict = _segment_sequential(run, keys, hashes, t)
        else:
            new_keys = new_keys.astype(object)
            table.append(new_keys, hashes[new][first])
            pos[new] = table.positions(keys[new])
            kwm, kwm_null, verdict = _segment_vectorised(run, pos, t, n0)
    else:
        kwm, kwm_null, verdict = _segment_vectorised(run, pos, t, n0)
    out.add(
        "events", len(keys), batch=b, seq=(seq, np.full(len(seq), not ordered)), key=keys, event_time=t,
        key_watermark=(kwm, kwm_null), verdict=verdict, kw_route=run.bucket,
    )  # fmt: skip
    if cfg.window_size is not None:
        _windows(run, keys, hashes, t, v, verdict == "on_time", b, out)


def _segment_vectorised(
    run: _Bucket, pos: np.ndarray, t: np.ndarray, n0: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """No eviction possible: every event's outcome from vector operations."""
    table = run.keys
    d = run.cfg.bounded_delay
    m = len(t)
    order = np.argsort(pos, kind="stable")
    cs = pos[order]
    ts = t[order]
    first = np.ones(m, bool)
    first[1:] = cs[1:] != cs[:-1]
    last = np.ones(m, bool)
    last[:-1] = cs[1:] != cs[:-1]
    cm = pd.Series(ts).groupby(cs, sort=False).cummax().to_numpy(np.int64)
    prev_run = np.empty(m, np.int64)
    prev_run[0] = 0
    prev_run[1:] = cm[:-1]
    has_prev = ~first
    base = cs < n0  # tracked before the segment
    base_max = table.max_et[cs]
    tracked = base | has_prev  # F065-R1: tracked before this event
    prior_max = np.where(base & has_prev, np.maximum(base_max, prev_run), np.where(base, base_max, prev_run))
    wm_before = _sat_sub(prior_max, d)  # F065-R2
    late = tracked & (ts < wm_before)  # F065-R3: strict <
    advanced = ~tracked | ((ts > prior_max) & (_sat_sub(ts, d) > wm_before))  # F065-R19
    run.key_advances += int(advanced.sum())
    gk = cs[last]
    gmax = cm[last]
    final = np.where(base[last], np.maximum(base_max[last], gmax), gmax)
    table.max_et[gk] = final
    table.wm[gk] = _sat_sub(final, d)
    table.last[gk] = run.st.clock  # F065-R10/R11: activity at the current clock
    table.order[gk] = run.st.activity + order[last] + 1  # F065-R13: arrival counter of the latest event
    table.idle[gk] = False  # F065-R11
    run.st.activity += m
    inv = np.empty(m, np.int64)
    inv[order] = np.arange(m)
    verdict = np.where(late, "late", "on_time").astype(object)[inv]
    return wm_before[inv], (~tracked)[inv], verdict


def _segment_sequential(
    run: _Bucket, keys: np.ndarray, hashes: np.ndarray, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact event-by-event path, used when max_keys eviction may happen (F065-R12..R15).

    Only a stream with ``max_keys`` gets here, and all of such a stream lives in bucket 0,
    which read every block: the whole key set (at most ``max_keys`` keys) is in ``run``."""
    cfg = run.cfg
    table = run.keys
    d = cfg.bounded_delay
    state: dict[Any, list[Any]] = {
        k: [int(a), int(w), int(la), int(o), bool(i), int(h)]
        for k, a, w, la, o, i, h in zip(
            table.keys.tolist(), table.max_et, table.wm, table.last, table.order, table.idle, table.hash
        )
    }
    m = len(t)
    kwm = np.zeros(m, np.int64)
    kwm_null = np.zeros(m, bool)
    verdict = np.empty(m, dtype=object)
    # F065-R13/R14: the victim is the key of lowest (watermark,) last activity, arrival
    # position. These only grow, so a heap with lazy deletion finds it without a scan:
    # an entry whose priority is no longer its key's is skipped when it reaches the top.
    lowest = cfg.eviction_policy == "LowestWatermark"

    def priority(s: list[Any]) -> tuple[int, ...]:
        return (s[1], s[2], s[3]) if lowest else (s[2], s[3])

    heap = [(*priority(s), k) for k, s in state.items()]
    heapq.heapify(heap)
    clock = run.st.clock
    for i, (k, e, h) in enumerate(zip(keys.tolist(), t.tolist(), hashes.tolist())):
        s = state.get(k)
        if s is None:
            kwm_null[i] = True
            if cfg.max_keys is not None and len(state) >= cfg.max_keys:
                if cfg.eviction_policy == "RejectNew":
                    verdict[i] = "rejected"  # F065-R15: nothing changes
                    continue
                while True:
                    *p, victim = heapq.heappop(heap)
                    if victim in state and priority(state[victim]) == tuple(p):
                        break
                del state[victim]
                run.evicted += 1
            run.key_advances += 1
            run.st.activity += 1
            s = state[k] = [e, _sat_sub1(e, d), clock, run.st.activity, False, h]
            heapq.heappush(heap, (*priority(s), k))
            verdict[i] = "on_time"
            continue
        kwm[i] = s[1]
        verdict[i] = "late" if e < s[1] else "on_time"
        run.st.activity += 1
        s[2], s[3], s[4] = clock, run.st.activity, False
        if e > s[0]:
            s[0] = e
            w = _sat_sub1(e, d)
            if w > s[1]:
                s[1] = w
                run.key_advances += 1
        heapq.heappush(heap, (*priority(s), k))
    names = list(state)
    vals = list(state.values())
    run.keys = _Keys(
        np.asarray(names, dtype=object) if names else np.empty(0, object),
        max_et=np.array([x[0] for x in vals], np.int64),
        wm=np.array([x[1] for x in vals], np.int64),
        last=np.array([x[2] for x in vals], np.int64),
        order=np.array([x[3] for x in vals], np.int64),
        idle=np.array([x[4] for x in vals], bool),
        hash=np.array([x[5] for x in vals], np.int64),
    )
    return kwm, kwm_null, verdict


def _window_end(start: np.ndarray, size: int) -> np.ndarray:
    """F065-R21: a window's end on the grid, also for a first window clamped to the range."""
    rest = np.mod(start, size)  # non-zero only for a clamped first window
    return _sat_add(start, np.where(rest == 0, size, size - rest))


def _fire_all(run: _Bucket, b: int, out: _Out) -> None:
    """F065-R38: every open window of the bucket fires (the call read every block that holds one)."""
    w = run.windows
    if len(w):
        start = w["start"].to_numpy(np.int64)
        out.add(
            "windows", len(w), batch=b, key=w["key"].to_numpy(object), window_start=start,
            window_end=_window_end(start, int(run.cfg.window_size or 1)),
            count=w["count"].to_numpy(np.int64), sum=w["sum"].to_numpy(np.int64), kw_route=run.bucket,
        )  # fmt: skip
    run.windows = _no_windows()


def _windows(
    run: _Bucket, keys: np.ndarray, hashes: np.ndarray, t: np.ndarray, v: np.ndarray,
    on_time: np.ndarray, b: int, out: _Out,
) -> None:  # fmt: skip
    """F065-R21: add the on-time events, then fire the segment keys' complete windows."""
    size = int(run.cfg.window_size or 1)
    w = run.windows
    if on_time.any():
        tt = t[on_time]
        offset = np.mod(tt, size)
        # F065-R21: the first window of time is clamped to I64_MIN instead of wrapping.
        start = np.where(tt < I64_MIN + offset, I64_MIN, tt - offset)
        add = pd.DataFrame(
            {
                "key": keys[on_time],
                "hash": hashes[on_time],
                "start": start,
                "count": np.ones(len(tt), np.int64),
                "sum": v[on_time],
            }  # fmt: skip
        )
        w = (
            pd.concat([w, add], ignore_index=True)
            .groupby(["key", "hash", "start"], sort=False, as_index=False)[["count", "sum"]]
            .sum()
        )
    if len(w):
        seg_keys = pd.unique(keys)
        kpos = run.keys.positions(seg_keys)
        present = kpos >= 0
        seg_index = pd.Index(seg_keys[present])
        wm = run.keys.wm[kpos[present]]
        j = seg_index.get_indexer(w["key"].to_numpy(object))
        start = w["start"].to_numpy(np.int64)
        end = _window_end(start, size)
        fire = j >= 0
        fire[fire] = end[fire] <= wm[j[fire]]
        if fire.any():
            f = w[fire]
            out.add(
                "windows", int(fire.sum()), batch=b, key=f["key"].to_numpy(object),
                window_start=start[fire], window_end=end[fire],
                count=f["count"].to_numpy(np.int64), sum=f["sum"].to_numpy(np.int64), kw_route=run.bucket,
            )  # fmt: skip
            w = w[~fire].reset_index(drop=True)
    run.windows = w[["key", *_WINDOW_NUMBERS]]


def _key_changes(
    start_keys: np.ndarray, start_wm: np.ndarray, start_idle: np.ndarray, t: _Keys, b: int, out: _Out,
    bucket: int,
) -> None:  # fmt: skip
    """F065-R22: keys whose (watermark, state) differ between batch start and end."""
    j = t.positions(start_keys)
    gone = j < 0
    kept = ~gone
    jk = j[kept]
    changed_kept = (start_wm[kept] != t.wm[jk]) | (start_idle[kept] != t.idle[jk])
    in_start = np.zeros(len(t), bool)
    in_start[jk] = True
    changed_end = np.zeros(len(t), bool)
    changed_end[jk[changed_kept]] = True
    changed_end |= ~in_start  # new keys
    n_end = int(changed_end.sum())
    if n_end:
        out.add(
            "keys", n_end, batch=b, key=t.keys[changed_end], watermark=t.wm[changed_end],
            state=np.where(t.idle[changed_end], "idle", "active").astype(object), kw_route=bucket,
        )  # fmt: skip
    n_gone = int(gone.sum())
    if n_gone:
        out.add(
            "keys", n_gone, batch=b, key=start_keys[gone], watermark=None, state="removed", kw_route=bucket
        )


# ---- the compact tracker (F065-R26..R37): the shards of one bucket ----------

COMPACT_LAYOUT = -1  # BucketState.level of a compact stream's bucket: its summary rows are shards
SHARD_KEYS_SCHEMA = "key_lengths binary, key_bytes binary, numbers binary, idle binary"
SHARD_SKETCH_SCHEMA = (
    "shards long, exact_per_shard long, depth int, width long, events long, frequency binary, high binary, "
    "empty binary, registers binary"
)


def digest_words(keys: list[str]) -> np.ndarray:
    """F065-R27: the eight big-endian 64-bit words of each key's SHA-512 digest, one row per key."""
    digests = b"".join(hashlib.sha512(COMPACT_DOMAIN + k.encode("utf-8")).digest() for k in keys)
    return np.frombuffer(digests, ">u8").reshape(-1, 8).astype(np.uint64)


def hll_estimate(registers: np.ndarray) -> int:
    """F065-R34: a shard's HyperLogLog estimate in exact integers, linear counting for small counts."""
    m = HLL_REGISTERS
    counts = np.bincount(registers, minlength=HLL_INDEX_SHIFT + 2).tolist()
    total = sum(c << (64 - r) for r, c in enumerate(counts) if c)
    raw = (7213 * m**3 << 64) // ((10000 * m + 10790) * total)
    zeros = counts[0]
    if 2 * raw <= 5 * m and zeros > 0:
        return round(m * math.log(m / zeros))  # Python's round: half to even, as the clause says
    return raw


class _KeyTable:
    """The digest facts of the keys a call meets, computed once per distinct key: each key's
    flat sketch cells (row i's cell at i * width + w(2 + i) mod width), its shard and its
    HyperLogLog register and rank."""

    def __init__(self, cfg: StreamConfig, keys: np.ndarray) -> None:
        self.cfg = cfg
        self.offsets = np.arange(cfg.sketch_depth, dtype=np.int64) * cfg.width
        codes, distinct = pd.factorize(keys)
        self.codes = codes.astype(np.int64)
        words = digest_words(distinct.tolist() if len(keys) else [])
        self.shard = (words[:, 0] % np.uint64(cfg.shards)).astype(np.int64)
        self.cells: list[list[int]] = self._cells(words).tolist()
        low = words[:, 1] & np.uint64((1 << HLL_INDEX_SHIFT) - 1)
        # frexp's exponent of a value below 2**52 is its bit length (exact in a double; 0 for 0).
        self.register = (words[:, 1] >> np.uint64(HLL_INDEX_SHIFT)).astype(np.int64)
        self.rank = (HLL_INDEX_SHIFT + 1 - np.frexp(low.astype(np.float64))[1]).astype(np.uint8)

    def _cells(self, words: np.ndarray) -> np.ndarray:
        depth = self.cfg.sketch_depth
        return (words[:, 2 : 2 + depth] % np.uint64(self.cfg.width)).astype(np.int64) + self.offsets

    def cells_of(self, key: str) -> list[int]:
        """The cells of one key (a victim of R30 read from state), without numpy's per-call cost."""
        digest = hashlib.sha512(COMPACT_DOMAIN + key.encode("utf-8")).digest()
        width = self.cfg.width
        return [
            int.from_bytes(digest[16 + 8 * row : 24 + 8 * row], "big") % width + row * width
            for row in range(self.cfg.sketch_depth)
        ]


def unpack_sketch(value: tuple[Any, ...]) -> tuple[int, list[int], list[int | None], np.ndarray]:
    """A shard's stored sketches: event count, frequency cells, max cells (None where empty),
    HyperLogLog registers; each of the sizes its settings give, or the value is damaged."""
    with decoding("keyed_watermarks", "shard_sketches"):
        cells = int(value[2]) * int(value[3])
        frequency = np.frombuffer(bytes(value[5]), np.int64).tolist()
        high: list[int | None] = np.frombuffer(bytes(value[6]), np.int64).tolist()
        empty = np.frombuffer(bytes(value[7]), bool)
        registers = np.frombuffer(bytes(value[8]), np.uint8).copy()
        _same_length(cells=cells, frequency_cells=len(frequency), max_cells=len(high), empty_flags=len(empty))
        _same_length(registers=HLL_REGISTERS, stored_registers=len(registers))
        for cell in np.flatnonzero(empty).tolist():
            high[cell] = None
        return int(value[4]), frequency, high, registers


class _Sketch:
    """A shard's frequency sketch (R28), max sketch (R29), registers (R34) and event count. A
    key has at most six cells, so the per-event rule reads and writes Python lists (a numpy
    call per cell costs more than the work); they come from and go back to raw arrays once per
    call. An empty max-sketch cell is None."""

    def __init__(self, cfg: StreamConfig, value: tuple[Any, ...] | None = None) -> None:
        if value is None:
            size = cfg.sketch_depth * cfg.width
            self.events = 0
            self.frequency: list[int] = [0] * size
            self.high: list[int | None] = [None] * size
            self.registers = np.zeros(HLL_REGISTERS, np.uint8)
            return
        self.events, self.frequency, self.high, self.registers = unpack_sketch(value)

    def to_tuple(self, cfg: StreamConfig) -> tuple[Any, ...]:
        empty = np.fromiter((v is None for v in self.high), bool, len(self.high))
        high = np.fromiter((0 if v is None else v for v in self.high), np.int64, len(self.high))
        return (
            cfg.shards, cfg.exact_per_shard, cfg.sketch_depth, cfg.width, self.events,
            np.array(self.frequency, np.int64).tobytes(), high.tobytes(), empty.tobytes(),
            self.registers.tobytes(),
        )  # fmt: skip

    def count(self, cells: list[int], aging_period: int) -> None:
        frequency = self.frequency
        for cell in cells:
            frequency[cell] += 1  # F065-R28: every event, before it is judged
        self.events += 1
        if self.events % aging_period == 0:
            frequency[:] = [c >> 1 for c in frequency]  # F065-R28: aging halves, rounding down

    def frequency_of(self, cells: list[int]) -> int:
        frequency = self.frequency
        return min([frequency[cell] for cell in cells])

    def estimate(self, cells: list[int]) -> int | None:
        values = [self.high[cell] for cell in cells]
        if None in values:
            return None  # F065-R29: an empty cell, no estimate
        return min(values)  # type: ignore[type-var]

    def write(self, cells: list[int], event_time: int) -> None:
        high = self.high
        for cell in cells:
            old = high[cell]
            if old is None or old < event_time:
                high[cell] = event_time  # F065-R29: cells only rise


def check_sketch_settings(value: tuple[Any, ...], cfg: StreamConfig, shard: int) -> None:
    """A shard's sketch was written with this stream's shards, exact set and sketch shape, or the
    checkpoint is refused: another shard count routes keys elsewhere, another width reads other cells."""
    stored = (int(value[0]), int(value[1]), int(value[2]), int(value[3]))
    expected = (cfg.shards, cfg.exact_per_shard, cfg.sketch_depth, cfg.width)
    if stored != expected:
        names = "(shards, exact keys per shard, sketch_depth, width)"
        raise IncompatibleCheckpoint(
            f"keyed_watermarks: shard {shard} of the checkpoint holds {names} = {stored}; this stream's "
            f"settings give {expected}", "Start from a new checkpoint, or keep the settings",
            "keyed_watermarks", "shard_sketches",
        )  # fmt: skip


class _Shard:
    """One shard of a compact stream as a call holds it (F065-R27). ``exact``: key -> [maximum
    event time, watermark, last activity, idle, its sketch cells or None until needed], least
    recently active first (R13: the clock never goes back, so arrival order alone ranks
    activity). ``sketch``: None when the call read only the exact keys (no event of the shard)."""

    def __init__(self, exact: OrderedDict[str, list[Any]], sketch: _Sketch | None, estimate: int) -> None:
        self.exact = exact
        self.sketch = sketch
        self.estimate = estimate
        self.start = {k: (e[1], e[3]) for k, e in exact.items()}
        self.changed = False
        self._aggregate: Aggregate | None = None

    def touch(self) -> None:
        self.changed = True
        self._aggregate = None

    def aggregate(self) -> Aggregate:
        if self._aggregate is None:
            idle, low, high = 0, I64_MAX, I64_MIN
            for _, wm, _, is_idle, _ in self.exact.values():
                if is_idle:
                    idle += 1
                elif wm < low:
                    low = wm
                high = max(high, wm)
            self._aggregate = Aggregate(len(self.exact), idle, low, high)
        return self._aggregate

    def summary_row(self, number: int) -> tuple[int, ...]:
        agg = self.aggregate()
        # Least recently active first: the first active entry has the earliest activity.
        first_active = next((e[2] for e in self.exact.values() if not e[3]), I64_MAX)
        return (number, agg.keys, agg.idle, agg.min_active, agg.max_wm, first_active, self.estimate, 0)


def pack_exact(exact: OrderedDict[str, list[Any]]) -> tuple[Any, ...]:
    keys = np.array(list(exact), dtype=object) if exact else np.empty(0, object)
    lengths, data = pack_text(keys)
    entries = list(exact.values())
    numbers = np.array([e[:3] for e in entries], np.int64).reshape(-1, 3)
    idle = np.array([e[3] for e in entries], bool)
    return (lengths, data, numbers.tobytes(), idle.tobytes())


def unpack_exact(value: tuple[Any, ...]) -> OrderedDict[str, list[Any]]:
    with decoding("keyed_watermarks", "shard_keys"):
        keys = unpack_text(bytes(value[0]), bytes(value[1])).tolist()
        numbers = np.frombuffer(bytes(value[2]), np.int64).reshape(-1, 3).tolist()
        idle = np.frombuffer(bytes(value[3]), bool).tolist()
        return OrderedDict((k, [*n, i, None]) for k, n, i in zip(keys, numbers, idle, strict=True))


@dataclass
class _CompactBucket(_Reports):
    """One call of the wide stage on one (stream, bucket) of a compact stream: the shards it
    read, and the figures of those it did not."""

    st: BucketState
    cfg: StreamConfig
    bucket: int
    ordered: bool
    shards: dict[int, _Shard]
    rest: Aggregate = field(default_factory=Aggregate)
    emitted: Aggregate = field(default_factory=Aggregate)
    key_advances: int = 0
    evicted: int = 0
    estimated: int = 0
    departures: dict[str, str] = field(default_factory=dict)  # F065-R35: how a key left the exact set

    def aggregate(self) -> Aggregate:
        total = self.rest
        for shard in self.shards.values():
            total = total + shard.aggregate()
        return total

    def estimate(self) -> int:
        return self.estimated


def process_compact_bucket(run: _CompactBucket, rows: pd.DataFrame, b: int, out: _Out) -> None:
    """One batch of one bucket of a compact stream: segments and control rows in order (R16, R22),
    the events of each shard one by one (R30)."""
    st = run.st
    calls = _calls(rows, run.bucket, run.ordered, st.clock, st.ended, b, out)
    rows, kind, key, et, tm, seq, home, is_tick, has_err, control = calls
    n = len(rows)
    shard = rows["kw_shard"].to_numpy(np.int64)
    events = ~control
    table = _KeyTable(run.cfg, key[events])
    if not np.array_equal(table.shard[table.codes], shard[events]):
        raise RuntimeError("keyed_watermarks: the JVM's shard of a key differs from its SHA-512 digest's")
    row = np.full(n, -1, np.int64)
    row[events] = table.codes

    prev = 0
    for c in np.flatnonzero(control).tolist():
        if c > prev:
            _compact_segment(
                run, table, key[prev:c], row[prev:c], shard[prev:c], et[prev:c], seq[prev:c], b, out
            )
            run.summary(out, b, (int(seq[c]), 0))
        if not has_err[c]:
            _compact_control(run, kind[c], key[c], int(shard[c]), int(tm[c]), bool(home[c]), bool(is_tick[c]))
            run.summary(out, b, (int(seq[c]), 1))
        prev = c + 1
    if prev < n:
        _compact_segment(run, table, key[prev:], row[prev:], shard[prev:], et[prev:], seq[prev:], b, out)
        run.summary(out, b, (LAST_CALL, 0))
    for number, sh in run.shards.items():
        if sh.sketch is None:
            continue
        # F065-R34: registers only grow and decide nothing within the batch: they take it at once.
        mine = np.flatnonzero(table.shard == number)
        if len(mine):
            np.maximum.at(sh.sketch.registers, table.register[mine], table.rank[mine])
            sh.estimate = hll_estimate(sh.sketch.registers)
            sh.changed = True
    _compact_key_changes(run, b, out)


def _compact_segment(
    run: _CompactBucket, table: _KeyTable, keys: np.ndarray, rows: np.ndarray, shards: np.ndarray,
    times: np.ndarray, seq: np.ndarray, b: int, out: _Out,
) -> None:  # fmt: skip
    """F065-R30: this bucket's events of one segment, each in arrival order against its shard."""
    cfg = run.cfg
    delay, capacity, period = cfg.bounded_delay, cfg.exact_per_shard, cfg.aging_period
    clock = run.st.clock
    m = len(keys)
    kwm = np.zeros(m, np.int64)
    kwm_null = np.zeros(m, bool)
    late = np.zeros(m, bool)
    for j, (k, r, s, t) in enumerate(zip(keys.tolist(), rows.tolist(), shards.tolist(), times.tolist())):
        sh = run.shards[s]
        sketch = sh.sketch
        assert sketch is not None  # a shard with events is read whole
        cells = table.cells[r]
        sketch.count(cells, period)  # step 1
        entry = sh.exact.get(k)
        if entry is not None:  # step 2: exactly the keyed tracker (R2, R3, R11)
            wm = entry[1]
            kwm[j] = wm
            late[j] = t < wm
            entry[2], entry[3], entry[4] = clock, False, cells
            sh.exact.move_to_end(k)
            if t > entry[0]:
                entry[0] = t
                if max(I64_MIN, t - delay) > wm:
                    entry[1] = max(I64_MIN, t - delay)
                    run.key_advances += 1
            continue
        estimate = sketch.estimate(cells)  # step 3: judged by the estimate (R29)
        judged = None if estimate is None else max(I64_MIN, estimate - delay)
        if judged is None:
            kwm_null[j] = True
        else:
            kwm[j] = judged
            late[j] = t < judged
        top = t if estimate is None else max(estimate, t)
        enters = len(sh.exact) < capacity
        if not enters:
            victim = next(iter(sh.exact))  # the least recently active exact key (R13)
            victim_cells = sh.exact[victim][4] or table.cells_of(victim)
            if sketch.frequency_of(cells) > sketch.frequency_of(victim_cells):  # strictly more
                sketch.write(victim_cells, sh.exact.pop(victim)[0])  # the demoted key's time stays
                run.evicted += 1
                run.departures[victim] = "sketched"
                enters = True
        if enters:
            # A promoted key keeps its estimate: a fresh start would let late events through.
            sh.exact[k] = [top, max(I64_MIN, top - delay), clock, False, cells]
            run.departures.pop(k, None)
        else:
            sketch.write(cells, t)
        if judged is None or max(I64_MIN, top - delay) > judged:
            run.key_advances += 1
    for s in np.unique(shards).tolist():
        run.shards[s].touch()
    out.add(
        "events", m, batch=b, seq=(seq, np.full(m, not run.ordered)), key=keys, event_time=times,
        key_watermark=(kwm, kwm_null), verdict=np.where(late, "late", "on_time").astype(object),
        kw_route=run.bucket,
    )  # fmt: skip


def _compact_control(
    run: _CompactBucket, kind: str, key: Any, shard: int, time: int, home: bool, tick: bool
) -> None:
    """F065-R31: clock, idle and remove_key concern exact keys only."""
    if kind == "end":
        run.st.ended = True  # F065-R38: no windows here, so only the later rows change
        return
    if kind in ("clock", "tick"):
        if tick and time <= run.st.clock:
            return  # a processing-time tick never moves the clock back
        run.st.clock = time
        timeout = run.cfg.idle_timeout
        for loaded in run.shards.values():
            for entry in loaded.exact.values():
                if time - entry[2] <= timeout:
                    break  # least recently active first: every later key is as recent (F065-R10)
                if not entry[3]:
                    entry[3] = True
                    loaded.touch()
        return
    sh = run.shards.get(shard) if home else None
    if sh is None or key not in sh.exact:
        return  # another bucket's key, or no exact key: nothing changes (R9, R17, R31)
    if kind == "idle":
        if not sh.exact[key][3]:
            sh.exact[key][3] = True
            sh.touch()
    elif kind == "remove_key":
        del sh.exact[key]  # F065-R31: its cells stay in the sketches
        run.departures[key] = "removed"
        sh.touch()


def _compact_key_changes(run: _CompactBucket, b: int, out: _Out) -> None:
    """F065-R22, R35: exact keys whose (watermark, state) changed; a key that left says how."""
    keys: list[str] = []
    wms: list[int | None] = []
    states: list[str] = []
    for sh in run.shards.values():
        end = {k: (e[1], e[3]) for k, e in sh.exact.items()}
        for k in sh.start.keys() | end.keys():
            now = end.get(k)
            if sh.start.get(k) == now:
                continue
            keys.append(k)
            wms.append(None if now is None else now[0])
            states.append(run.departures.get(k, "removed") if now is None else "idle" if now[1] else "active")
    if keys:
        gone = np.array([w is None for w in wms])
        out.add(
            "keys", len(keys), batch=b, key=np.array(keys, dtype=object),
            watermark=(np.array([w or 0 for w in wms], np.int64), gone),
            state=np.array(states, dtype=object), kw_route=run.bucket,
        )  # fmt: skip


# ---- the two stages -----------------------------------------------------------


def _collapse_ticks(pdf: pd.DataFrame) -> pd.DataFrame:
    """The ticks of a micro-batch (one per input partition) as one: the latest time wins."""
    tick = pdf["kw_kind"].to_numpy(object) == "tick"
    if tick.sum() <= 1:
        return pdf
    ticks = pdf[tick]
    latest = ticks.iloc[[int(np.argmax(ticks["kw_time"].to_numpy(np.int64)))]]
    return pd.concat([latest, pdf[~tick]], ignore_index=True)


_DEFAULTS: dict[str, Any] = {
    "kw_seq": np.int64(0), "kw_kind": "event", "kw_value": np.int64(0), "kw_time": np.int64(0),
    "kw_time_null": True, "kw_shard": np.int64(-1),
}  # fmt: skip


class KeyBucketProcessor(WideStage):
    """The wide stage: one call per (stream, bucket) and micro-batch."""

    defaults = _DEFAULTS

    def __init__(
        self, default: StreamConfig, per_stream: Mapping[str, StreamConfig], ordered: bool, buckets: int,
        block_keys: int,
    ) -> None:  # fmt: skip
        super().__init__(default, per_stream, ordered, buckets)
        self.block_keys = block_keys

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_state = handle.getValueState("bucket", BUCKET_SCHEMA)
        self.blocks = handle.getMapState("blocks", "sub int", BLOCK_SCHEMA)
        # F065-R37: a compact stream's shards, the exact keys apart from the sketches, so that a
        # clock, idle or remove_key row reads only the exact keys.
        self.shard_keys = handle.getMapState("shard_keys", "shard long", SHARD_KEYS_SCHEMA)
        self.shard_sketches = handle.getMapState("shard_sketches", "shard long", SHARD_SKETCH_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, cfg: StreamConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        pdf = _collapse_ticks(pdf)
        if not self.ordered:
            # No arrival order given: the tick first, then event-time order, ties by key.
            pdf = pdf.assign(kw_first=pdf["kw_kind"].to_numpy(object) != "tick")
            pdf = pdf.sort_values(["kw_first", "kw_et", "kw_key"], kind="stable").reset_index(drop=True)
            pdf["kw_seq"] = np.arange(len(pdf), dtype=np.int64)
        stored = self.bucket_state.get()
        st = (
            BucketState.from_tuple(stored, self.buckets) if stored is not None
            else BucketState(self.buckets)
        )  # fmt: skip
        if len(st.subs) and (st.level == COMPACT_LAYOUT) != cfg.compact:
            held, given = ("exact", "compact") if cfg.compact else ("compact", "exact")
            raise IncompatibleCheckpoint(
                f"keyed_watermarks: the checkpoint holds the {held} tracker's state; "
                f"this stream's settings ask for the {given} tracker",
                "Start from a new checkpoint, or keep the settings",
                "keyed_watermarks",
                "bucket",
            )
        out = _Out(stream_id)
        for b, part in batches_in(pdf, "kw_batch", True, 0):
            if cfg.compact:
                self._compact_batch(st, cfg, bucket, part, b, out)
            else:
                self._batch(st, cfg, bucket, part, b, out)
        self.bucket_state.update(st.to_tuple())
        yield out.masked_frame(NULL_MASK)

    def _compact_batch(
        self, st: BucketState, cfg: StreamConfig, bucket: int, rows: pd.DataFrame, b: int, out: _Out
    ) -> None:
        """F065-R26..R37: read the shards the batch touches, apply it, write them back."""
        st.level = COMPACT_LAYOUT
        kind = rows["kw_kind"].to_numpy(object)
        live = ~_after_end(kind, rows["kw_seq"].to_numpy(np.int64), st.ended)  # after the end: no reads
        keyed = pd.notna(rows["kw_key"].to_numpy(object)) & live
        shard = rows["kw_shard"].to_numpy(np.int64)
        with_events = np.unique(shard[keyed & (kind == "event") & ~rows["kw_et_null"].to_numpy(bool)])
        home = rows["kw_home"].to_numpy(np.int64) == bucket
        marked = shard[keyed & ((kind == "idle") | (kind == "remove_key")) & home]
        subs = st.subs
        known = subs[:, 0]
        want = np.union1d(with_events, np.intersect1d(marked, known))
        timed = ((kind == "clock") | (kind == "tick")) & ~rows["kw_time_null"].to_numpy(bool) & live
        if timed.any() and len(subs):
            cutoff = int(rows["kw_time"].to_numpy(np.int64)[timed].max()) - cfg.idle_timeout
            if cutoff > I64_MIN:  # shards with an active key whose activity may be older (F065-R10)
                may_idle = (subs[:, 1] > subs[:, 2]) & (subs[:, 5] < cutoff)
                want = np.union1d(want, known[may_idle])
        read = np.isin(known, want)
        stored = dict(zip(known[read].tolist(), subs[read, 6].tolist(), strict=True))
        state_calls = 1  # the bucket state read
        shards: dict[int, _Shard] = {}
        with_events_set = set(with_events.tolist())
        for number in want.tolist():
            exact: OrderedDict[str, list[Any]] = OrderedDict()
            sketch = None
            if number in stored:
                exact = unpack_exact(self._read_value(self.shard_keys, number, bucket))
                state_calls += 1
            if number in with_events_set:
                value = self._read_value(self.shard_sketches, number, bucket) if number in stored else None
                if value is not None:
                    check_sketch_settings(value, cfg, number)
                    state_calls += 1
                sketch = _Sketch(cfg, value)
            shards[number] = _Shard(exact, sketch, stored.get(number, 0))
        run = _CompactBucket(st, cfg, bucket, self.ordered, shards, rest=_rest(subs[~read]))
        run.emitted = run.aggregate()
        pieces = len(out.pieces)
        process_compact_bucket(run, rows, b, out)
        python_calls = 1 + any(cols["output"] != "summary" for _, cols in out.pieces[pieces:])
        new_rows = []
        for number, sh in shards.items():
            if sh.changed:
                self.shard_keys.updateValue((number,), pack_exact(sh.exact))
                state_calls += 1
            if sh.sketch is not None:
                self.shard_sketches.updateValue((number,), sh.sketch.to_tuple(cfg))
                state_calls += 1
            new_rows.append(sh.summary_row(number))
        st.subs = np.concatenate(
            [subs[~read], np.array(new_rows, np.int64).reshape(-1, len(_SUMMARY_FIELDS))]
        )
        run.estimated = int(st.subs[:, 6].sum())
        state_calls += 1  # the bucket state write
        run.summary(out, b, (LAST_CALL, 1), final=True, state_calls=state_calls, python_calls=python_calls)

    def _read_value(self, state: Any, number: int, bucket: int) -> tuple[Any, ...]:
        value = state.getValue((number,))
        if value is None:  # the summary lists only shards that hold a value
            variable = "shard_keys" if state is self.shard_keys else "shard_sketches"
            raise missing_value("keyed_watermarks", variable, f"shard {number} of bucket {bucket}")
        return tuple(value)

    def _batch(
        self, st: BucketState, cfg: StreamConfig, bucket: int, rows: pd.DataFrame, b: int, out: _Out
    ) -> None:
        kind = rows["kw_kind"].to_numpy(object)
        after = _after_end(kind, rows["kw_seq"].to_numpy(np.int64), st.ended)  # read nothing for these
        keyed = pd.notna(rows["kw_key"].to_numpy(object)) & (
            ((kind == "event") & ~rows["kw_et_null"].to_numpy(bool))
            | (((kind == "idle") | (kind == "remove_key")) & (rows["kw_home"].to_numpy(np.int64) == bucket))
        )
        keyed &= ~after
        subs = st.subs
        known = subs[:, 0]
        want = np.unique(block_of(rows["kw_hash"].to_numpy(np.int64)[keyed], st.level, st.split))
        if cfg.max_keys is not None and not st.ended:
            want = np.union1d(want, known)  # eviction reads the whole stream (F065-R12)
        if not st.ended and (kind == "end").any():
            want = np.union1d(want, known[subs[:, 7] > 0])  # F065-R38: the blocks whose windows fire
        timed = ((kind == "clock") | (kind == "tick")) & ~rows["kw_time_null"].to_numpy(bool) & ~after
        if timed.any() and len(subs):
            cutoff = int(rows["kw_time"].to_numpy(np.int64)[timed].max()) - cfg.idle_timeout
            if cutoff > I64_MIN:  # keys whose activity may be older than the timeout (F065-R10)
                may_idle = (subs[:, 1] > subs[:, 2]) & (subs[:, 5] < cutoff)
                want = np.union1d(want, known[may_idle])
        read = np.isin(known, want)
        state_calls = 1  # the bucket state read
        keys, windows = unpack_blocks(self._read(known[read], bucket))
        state_calls += int(read.sum())
        others = subs[~read]
        rest = _rest(others)
        run = _Bucket(st, cfg, bucket, self.ordered, keys, windows, rest)
        run.emitted = run.aggregate()
        pieces = len(out.pieces)
        process_bucket(run, rows, b, out)
        # This group's call, and the second stage's pass-through call if it sends table rows.
        python_calls = 1 + any(cols["output"] != "summary" for _, cols in out.pieces[pieces:])
        # Linear hashing: split blocks in order while they hold more than block_keys keys on
        # average, so a value never grows with the keys in state; a block to split is read.
        t, w = run.keys, run.windows
        total = int(others[:, 1].sum()) + len(t)
        while total > self.block_keys * st.blocks():
            victim = others[:, 0] == st.split
            if victim.any():
                more_keys, more_windows = unpack_blocks(self._read(others[victim, 0], bucket))
                state_calls += 1
                t = concat_keys(t, more_keys)
                w = pd.concat([w, more_windows], ignore_index=True)
                read[np.flatnonzero(~read)[victim]] = True
                others = others[~victim]
            st.split += 1
            if st.split == 1 << st.level:
                st.level, st.split = st.level + 1, 0
        # Write back every block read or created; drop those left empty.
        ksub = block_of(t.hash, st.level, st.split)
        wsub = block_of(w["hash"].to_numpy(np.int64), st.level, st.split)
        touched = np.union1d(known[read], np.union1d(ksub, wsub))
        korder = np.argsort(ksub, kind="stable")
        worder = np.argsort(wsub, kind="stable")
        kb = (
            np.searchsorted(ksub[korder], touched, side="left"),
            np.searchsorted(ksub[korder], touched, side="right"),
        )
        wb = (
            np.searchsorted(wsub[worder], touched, side="left"),
            np.searchsorted(wsub[worder], touched, side="right"),
        )
        rows_out = []
        for i, sub in enumerate(touched.tolist()):
            krows = korder[kb[0][i] : kb[1][i]]
            wrows = worder[wb[0][i] : wb[1][i]]
            if len(krows) == 0 and len(wrows) == 0:
                if sub in known:
                    self.blocks.removeKey((int(sub),))
                    state_calls += 1
                continue
            self.blocks.updateValue((int(sub),), pack_block(t, krows, w, wrows))
            state_calls += 1
            idle = t.idle[krows]
            act = ~idle
            rows_out.append((
                sub, len(krows), int(idle.sum()),
                int(t.wm[krows][act].min()) if act.any() else I64_MAX,
                int(t.wm[krows].max()) if len(krows) else I64_MIN,
                int(t.last[krows][act].min()) if act.any() else I64_MAX, 0, len(wrows),
            ))  # fmt: skip
        new_rows = np.array(rows_out, np.int64).reshape(-1, len(_SUMMARY_FIELDS))
        st.subs = np.concatenate([others, new_rows])
        state_calls += 1  # the bucket state write
        run.summary(out, b, (LAST_CALL, 1), final=True, state_calls=state_calls, python_calls=python_calls)

    def _read(self, blocks: np.ndarray, bucket: int) -> list[tuple[Any, ...]]:
        values = []
        for block in blocks.tolist():
            value = self.blocks.getValue((int(block),))
            if value is None:  # the summary lists only blocks that hold a value
                raise missing_value("keyed_watermarks", "blocks", f"block {block} of bucket {bucket}")
            values.append(value)
        return values


def _rest(others: np.ndarray) -> Aggregate:
    """The figures of the blocks a call did not read, from their summary rows."""
    active = others[:, 1] > others[:, 2]
    return Aggregate(
        int(others[:, 1].sum()), int(others[:, 2].sum()),
        int(others[active, 3].min()) if active.any() else I64_MAX,
        int(others[:, 4].max()) if len(others) else I64_MIN,
    )  # fmt: skip


class StreamSummaryProcessor(SecondStage):
    """The narrow stage (route -1): each bucket's summary and the stream's counters."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)

    def __init__(
        self, buckets: int, compact_default: bool = False, compact_streams: Mapping[str, bool] | None = None
    ) -> None:
        self.buckets = buckets
        self.compact_default = compact_default  # F065-R35: estimated_keys is null for other streams
        self.compact_streams = dict(compact_streams or {})

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("stream", STREAM_SCHEMA)

    def summarise(self, stream_id: str | None, rows: pd.DataFrame) -> pd.DataFrame:
        stored = self.state.get()
        st = StreamState.from_tuple(stored, self.buckets) if stored is not None else StreamState(self.buckets)
        out = OutputRows(stream_id, OUTPUT_COLUMNS, STRING_COLS)
        compact = self.compact_default
        if stream_id is not None:
            compact = self.compact_streams.get(stream_id, self.compact_default)
        for b, part in batches_in(rows, "batch", True, 0):
            summarise_batch(st, part, b, out, compact)
        self.state.update(st.to_tuple())
        return out.masked_frame(NULL_MASK)


def summarise_batch(
    st: StreamState, rows: pd.DataFrame, b: int, out: OutputRows, compact: bool = False
) -> None:
    """F065-R5..R8, R19, R22: the global watermark after every call, the progress row; for a
    compact stream also estimated_keys, the sum of the buckets' latest estimates (R34, R35)."""
    rows = rows.sort_values(["s_call_seq", "s_call_part"], kind="stable")
    call = rows[["s_call_seq", "s_call_part"]].to_numpy(np.int64)
    bucket = rows["s_bucket"].to_numpy(np.int64)
    figures = rows[["s_keys", "s_idle", "s_min_active", "s_max"]].to_numpy(np.int64)
    ends = np.flatnonzero(np.any(call[1:] != call[:-1], axis=1)).tolist() + [len(rows) - 1]
    start = 0
    for end in ends:
        before = st.global_watermark()
        st.summaries[bucket[start : end + 1], :4] = figures[start : end + 1]  # later rows win
        after = st.global_watermark()
        if after is not None and (before is None or after > before):  # F065-R8
            st.global_advances += 1
        start = end + 1
    st.key_advances += int(rows["s_key_advances"].sum())
    st.evicted += int(rows["s_evicted"].sum())
    final = (call[:, 0] == LAST_CALL) & (call[:, 1] == 1)
    st.summaries[bucket[final], 4] = rows["s_estimated"].to_numpy(np.int64)[final]
    s = st.summaries
    total, idle = int(s[:, 0].sum()), int(s[:, 1].sum())
    g = st.global_watermark()
    estimated = int(s[:, 4].sum())
    out.add(
        "progress", 1, batch=b, global_watermark=(np.array([g or 0]), np.array([g is None])),
        total_keys=total, active_keys=total - idle, idle_keys=idle, evicted_keys=st.evicted,
        global_advances=st.global_advances, key_advances=st.key_advances,
        estimated_keys=(np.array([estimated]), np.array([not compact])),
    )  # fmt: skip
    out.add(
        "metrics", 1, batch=b,
        python_calls=int(rows["s_python_calls"].sum()) + 1, state_calls=int(rows["s_state_calls"].sum()) + 2,
    )  # fmt: skip


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
        (long_or_zero(batch_col) if batch_col else F.unix_millis(F.current_timestamp())).alias("kw_batch"),
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
    "keyed_watermarks",
    "validate_config",
]


def engine_streams(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True
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
        stream_configs=stream_configs, buckets=ENGINE_BUCKETS, block_keys=ENGINE_BLOCK_KEYS,
        seq_unique=seq_unique,
    )  # fmt: skip


def engine_output(df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True) -> Any:
    """``engine_streams``'s combined stream with both stages (``output``), the spec's tables only
    (the metrics table is the operator's own)."""
    from pyspark.sql import functions as F

    return engine_streams(df, stream_configs, seq_unique).output.filter(F.col("output") != "metrics")


ENGINE_BUCKETS = 3
ENGINE_BLOCK_KEYS = 2
