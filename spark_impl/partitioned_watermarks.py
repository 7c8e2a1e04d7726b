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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN, PARTITIONED_REQUIRED_FIELDS, InvalidConfig
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
    OperatorStreams,
    OutputRows,
    StatefulProcessorHandle,
    batches_in,
    check_columns,
    event_time_millis,
    long_or_zero,
    millis_column,
    native_watermark_progress,
    opt,
    place_flags,
    require_int,
    sat_sub,
    split_unplaced,
    stream_id_column,
    stream_settings,
    table_projections,
    warn_once,
    warn_without_seq,
    with_unplaced_errors,
)
from spark_impl.scaleout import (
    CURRENT_TIMESTAMP,
    DUPLICATE_SEQ,
    NULL_MASK,
    SecondStage,
    SinkStep,
    WideStage,
    check_layout,
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

LAYOUT_VERSION = 2
DEFAULT_BLOCK_PARTITIONS = 128
U32_MAX = 2**32 - 1
CONFIG_KEYS = ("idle_timeout", "max_lateness")
UPDATE_KINDS = ("event", "watermark")
PARTITION_KINDS = ("idle", "active", "add_partition", "remove_partition", "assign_core")
MARKER = "batch_end"  # the harness's end-of-batch row: no effect, no output of its own
TICK = "tick"  # the operator's own processing-time row (processing_time_col)
PROBE = "probe"  # the operator's own row: the partitions an input partition's updates name

STRING_COLS = ("output", "stream_id", "state", "reason")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "source", "partition", "combined_watermark",
    "total_partitions", "active_partitions", "idle_partitions", "watermark_advances", "rebalances",
    "watermark", "state", "core", "reason",
)  # fmt: skip
LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "progress": (
        "stream_id", "batch", "combined_watermark", "total_partitions", "active_partitions",
        "idle_partitions", "watermark_advances", "rebalances",
    ),
    "partitions": ("stream_id", "batch", "source", "partition", "watermark", "state", "core"),
    "sources": ("stream_id", "batch", "source", "watermark", "active_partitions"),
    "errors": ("stream_id", "batch", "seq", "reason"),
}  # fmt: skip

# Between the stages: long columns as values with one null mask (bit i: LONG_COLS[i] is null);
# ``kw_route`` picks the second stage's group (the bucket for table rows, -1 for summaries);
# ``s_*`` are the summary columns: the bucket, the call (position, part), whether the row is
# the bucket's figures (kind 0) or one source's (kind 1), the figures (AGG_FIELDS), the
# bucket's rebalances in the batch and whether a source was registered in it.
AGG_FIELDS = ("total", "idle", "nowm", "min_active", "known", "max_wm")
SUMMARY_COLS = (
    "s_bucket", "s_pos", "s_part", "s_kind", "s_source", *(f"s_{f}" for f in AGG_FIELDS),
    "s_rebalances", "s_new",
)  # fmt: skip
PASS_SCHEMA = ", ".join(
    [f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS] + [f"`{NULL_MASK}` long"]
)
WIDE_SCHEMA = ", ".join([PASS_SCHEMA, "`kw_route` long"] + [f"`{c}` long" for c in SUMMARY_COLS])
BUCKET_SCHEMA = (
    "layout_version int, buckets int, block_partitions int, clock long, sources binary, "
    "tracked binary, blocks binary"
)
BLOCK_SCHEMA = "parts binary, numbers binary, flags binary"
STREAM_SCHEMA = (
    "layout_version int, buckets int, combined long, has_combined boolean, advances long, "
    "rebalances long, figures binary"
)
SOURCE_KEY_SCHEMA = "source long"
SOURCE_SCHEMA = "buckets binary, figures binary"

# The parts of a call position (seq, part), in the order they happen at one seq.
BEFORE = 0  # the step that the row at seq ends
AFTER = 1  # the control row at seq
CHANGE = 2  # after the update at seq: a bucket's figures, no call boundary (the narrow stage waits)
FINAL = 3  # the bucket's last summary of the batch (seq LAST), with its counters
LAST = I64_MAX


# ---- configuration (F064-R24) -----------------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    idle_timeout: int = 60000
    max_lateness: int = 0


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (F064-R24) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown partitioned_watermarks settings {sorted(unknown)}")
    return StreamConfig(
        idle_timeout=require_int("idle_timeout", config.get("idle_timeout", 60000), 0),
        max_lateness=require_int("max_lateness", config.get("max_lateness", 0), 0),
    )


# ---- the figures of a set of partitions (F064-R6) ----------------------------

EMPTY = np.array([0, 0, 0, I64_MAX, 0, I64_MIN], np.int64)  # AGG_FIELDS of no partition


def figures_of(wm: np.ndarray, has_wm: np.ndarray, idle: np.ndarray) -> np.ndarray:
    """AGG_FIELDS of some partitions: enough to combine sets and to find their candidate."""
    if len(wm) == 0:
        return EMPTY.copy()
    active = ~idle
    with_wm = active & has_wm
    return np.array([
        len(wm), int(idle.sum()), int((active & ~has_wm).sum()),
        int(wm[with_wm].min()) if with_wm.any() else I64_MAX, int(has_wm.sum()),
        int(wm[has_wm].max()) if has_wm.any() else I64_MIN,
    ], np.int64)  # fmt: skip


def combine(rows: np.ndarray) -> np.ndarray:
    """The figures of the union of disjoint sets, from an (m, 6) array of their figures."""
    if len(rows) == 0:
        return EMPTY.copy()
    return np.array([
        rows[:, 0].sum(), rows[:, 1].sum(), rows[:, 2].sum(), rows[:, 3].min(), rows[:, 4].sum(),
        rows[:, 5].max(),
    ], np.int64)  # fmt: skip


def candidate(f: np.ndarray) -> int | None:
    """F064-R6 from figures: the minimum over active partitions (none while one has no
    watermark, R8), else the maximum over all of them, else none."""
    if f[0] > f[1]:
        return None if f[2] > 0 else int(f[3])
    return int(f[5]) if f[4] > 0 else None


# ---- the partitions a bucket reads in a batch ----------------------------------


def _lookup(src: np.ndarray, part: np.ndarray, q_src: np.ndarray, q_part: np.ndarray) -> np.ndarray:
    """Index of each (q_src, q_part) in the table (src, part), -1 when absent."""
    if len(src) == 0:
        return np.full(len(q_src), -1, np.int64)
    if len(q_src) == 0:
        return np.empty(0, np.int64)
    table = pd.MultiIndex.from_arrays([src, part])
    return np.asarray(table.get_indexer(pd.MultiIndex.from_arrays([q_src, q_part])), np.int64)


@dataclass
class Partitions:
    """Some partitions of one bucket, column-wise."""

    src: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    part: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    wm: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    has_wm: np.ndarray = field(default_factory=lambda: np.empty(0, bool))
    last: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    idle: np.ndarray = field(default_factory=lambda: np.empty(0, bool))
    core: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # -1: none

    COLUMNS = ("src", "part", "wm", "has_wm", "last", "idle", "core")

    def __len__(self) -> int:
        return len(self.src)

    def copy(self) -> Partitions:
        return Partitions(*(getattr(self, c).copy() for c in self.COLUMNS))

    def find(self, source: int, partition: int) -> int:
        hits = np.flatnonzero((self.src == source) & (self.part == partition))
        return int(hits[0]) if len(hits) else -1

    def add_fresh(self, source: int | np.ndarray, parts: np.ndarray, now: int) -> None:
        """F064-R3: no watermark, last_activity = now, active, no core."""
        m = len(parts)
        new = (np.broadcast_to(np.asarray(source, np.int64), (m,)), np.asarray(parts, np.int64),
               np.zeros(m, np.int64), np.zeros(m, bool), np.full(m, now, np.int64),
               np.zeros(m, bool), np.full(m, -1, np.int64))  # fmt: skip
        for name, values in zip(self.COLUMNS, new, strict=True):
            setattr(self, name, np.concatenate([getattr(self, name), values]))

    def keep(self, mask: np.ndarray) -> None:
        for name in self.COLUMNS:
            setattr(self, name, getattr(self, name)[mask])

    def figures(self) -> np.ndarray:
        return figures_of(self.wm, self.has_wm, self.idle)


def pack_block(t: Partitions, rows: np.ndarray) -> tuple[bytes, bytes, bytes]:
    numbers = np.column_stack([t.wm[rows], t.last[rows], t.core[rows]]).astype(np.int64)
    flags = np.column_stack([t.has_wm[rows], t.idle[rows]]).astype(bool)
    return t.part[rows].astype(np.int64).tobytes(), numbers.tobytes(), flags.tobytes()


def unpack_blocks(sources: list[int], blocks: list[tuple[Any, ...]]) -> Partitions:
    if not blocks:
        return Partitions()
    with decoding("partitioned_watermarks", "blocks"):
        parts = [np.frombuffer(bytes(b[0]), np.int64) for b in blocks]
        src = np.concatenate([np.full(len(p), s, np.int64) for s, p in zip(sources, parts, strict=True)])
        nums = np.frombuffer(b"".join(bytes(b[1]) for b in blocks), np.int64).reshape(-1, 3)
        flags = np.frombuffer(b"".join(bytes(b[2]) for b in blocks), bool).reshape(-1, 2)
        if not len(src) == len(nums) == len(flags):
            raise ValueError(f"{len(src)} partitions, {len(nums)} rows of numbers, {len(flags)} of flags")
        return Partitions(
            src, np.concatenate(parts), nums[:, 0].copy(), flags[:, 0].copy(), nums[:, 1].copy(),
            flags[:, 1].copy(), nums[:, 2].copy(),
        )  # fmt: skip


# ---- the tracked set, kept by every bucket ---------------------------------------


class Tracked:
    """The tracked partitions of a stream as intervals [lo, hi) per source: what decides,
    in every bucket, whether an update can name an untracked partition (F064-R22)."""

    def __init__(self, rows: np.ndarray | None = None) -> None:
        self.spans: dict[int, list[tuple[int, int]]] = {}
        for s, lo, hi in (rows if rows is not None else np.zeros((0, 3), np.int64)).tolist():
            self.spans.setdefault(s, []).append((lo, hi))

    def to_array(self) -> np.ndarray:
        rows = [(s, lo, hi) for s, spans in sorted(self.spans.items()) for lo, hi in spans]
        return np.array(rows, np.int64).reshape(-1, 3)

    def covers(self, source: int, lo: int, hi: int) -> bool:
        """Every partition from lo to hi (inclusive) is tracked."""
        return any(a <= lo and hi < b for a, b in self.spans.get(source, ()))

    def register(self, source: int, count: int) -> None:
        self.spans[source] = [(0, count)] if count > 0 else []

    def add(self, source: int, p: int) -> None:
        if not self.covers(source, p, p):
            spans = sorted([*self.spans.get(source, []), (p, p + 1)])
            merged: list[tuple[int, int]] = []
            for a, b in spans:
                if merged and a <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], b))
                else:
                    merged.append((a, b))
            self.spans[source] = merged

    def remove(self, source: int, p: int) -> None:
        spans = []
        for a, b in self.spans.get(source, []):
            if a <= p < b:
                spans += [s for s in ((a, p), (p + 1, b)) if s[0] < s[1]]
            else:
                spans.append((a, b))
        self.spans[source] = spans


# ---- state layouts -----------------------------------------------------------------


# One row per stored block: source, block, then AGG_FIELDS, then the earliest activity of an
# active partition (which blocks a clock row may idle).
BLOCK_FIELDS = ("source", "block", *AGG_FIELDS, "min_active_last")


@dataclass
class BucketState:
    """What one (stream, bucket) keeps in its ValueState."""

    buckets: int
    block_partitions: int
    clock: int = 0
    sources: set[int] = field(default_factory=set)
    tracked: Tracked = field(default_factory=Tracked)
    blocks: np.ndarray = field(default_factory=lambda: np.zeros((0, len(BLOCK_FIELDS)), np.int64))

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, self.block_partitions, self.clock,
            np.array(sorted(self.sources), np.int64).tobytes(), self.tracked.to_array().tobytes(),
            np.ascontiguousarray(self.blocks, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout("partitioned_watermarks", value, LAYOUT_VERSION, buckets, "bucket")
        with decoding("partitioned_watermarks", "bucket"):
            return cls(
                buckets, int(value[2]), int(value[3]),
                set(np.frombuffer(bytes(value[4]), np.int64).tolist()),
                Tracked(np.frombuffer(bytes(value[5]), np.int64).reshape(-1, 3)),
                np.frombuffer(bytes(value[6]), np.int64).reshape(-1, len(BLOCK_FIELDS)).copy(),
            )  # fmt: skip

    def block_of(self, part: np.ndarray) -> np.ndarray:
        """A bucket's partitions of a source are spaced by ``buckets``: consecutive ones share
        a block."""
        return np.asarray(part, np.int64) // self.buckets // self.block_partitions


@dataclass
class StreamState:
    """What the narrow stage keeps per stream: the combined watermark, the counters and
    each bucket's latest figures."""

    buckets: int
    combined: int | None = None
    advances: int = 0
    rebalances: int = 0
    figures: np.ndarray = field(default_factory=lambda: np.zeros((0, 6), np.int64))

    def __post_init__(self) -> None:
        if len(self.figures) == 0:
            self.figures = np.tile(EMPTY, (self.buckets, 1))

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, 0 if self.combined is None else self.combined,
            self.combined is not None, self.advances, self.rebalances,
            np.ascontiguousarray(self.figures, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> StreamState:
        check_layout("partitioned_watermarks", value, LAYOUT_VERSION, buckets, "stream")
        with decoding("partitioned_watermarks", "stream"):
            figures = np.frombuffer(bytes(value[6]), np.int64).reshape(-1, 6).copy()
            if len(figures) != buckets:
                raise ValueError(f"figures of {len(figures)} buckets for {buckets} buckets")
            return cls(buckets, int(value[2]) if value[3] else None, int(value[4]), int(value[5]), figures)

    def evaluate(self) -> None:
        """F064-R6, R7, R16: the combined watermark only rises; an advance is counted when it does."""
        c = candidate(combine(self.figures))
        if c is not None and (self.combined is None or c > self.combined):
            self.combined = c
            self.advances += 1


# ---- one batch of one bucket (the wide stage; pure pandas/numpy) ---------------


class _Out(OutputRows):
    """The first stage's rows of one call: table rows and summaries (WIDE_SCHEMA)."""

    def __init__(self, stream_id: str | None) -> None:
        super().__init__(stream_id, (*OUTPUT_COLUMNS, "kw_route", *SUMMARY_COLS), STRING_COLS)


LONGS = ("source", "partition", "event_time", "time", "count", "core")


@dataclass
class _Rows:
    """A batch of one bucket in call order, as numpy columns (null flags beside longs)."""

    kind: np.ndarray
    seq: np.ndarray
    vals: dict[str, np.ndarray]
    nulls: dict[str, np.ndarray]
    home: np.ndarray

    @classmethod
    def of(cls, rows: pd.DataFrame) -> _Rows:
        vals = {c: rows[f"pw_{c}"].to_numpy(np.int64) for c in LONGS}
        nulls = {c: rows[f"pw_{c}_null"].to_numpy(bool) for c in LONGS}
        return cls(
            rows["pw_kind"].to_numpy(object), rows["pw_seq"].to_numpy(np.int64), vals, nulls,
            rows["pw_home"].to_numpy(np.int64),
        )  # fmt: skip

    def get(self, name: str, i: int) -> int | None:
        return None if self.nulls[name][i] else int(self.vals[name][i])


def stateless_errors(r: _Rows) -> np.ndarray:
    """F064-R22, the reasons no state decides: unsupported kinds, missing fields, numbers out
    of range, in the order the clause checks them; None elsewhere."""
    n = len(r.kind)
    err = np.full(n, None, dtype=object)
    kind = r.kind
    src, part = r.vals["source"], r.vals["partition"]
    part_given = ~r.nulls["partition"]
    no_clock = (kind != "clock") & (kind != TICK)
    out_of_range = (src < 0) | (part_given & ((part < 0) | (part > U32_MAX)))
    count = r.vals["count"]
    bad = no_clock & (
        out_of_range | ((kind == "register_source") & ((count < 0) | (count > U32_MAX + 1)))
        | ((kind == "assign_core") & (r.vals["core"] < 0))
    )  # fmt: skip
    err[bad] = "invalid_partition"
    for k, required in PARTITIONED_REQUIRED_FIELDS.items():
        of_kind = kind == k
        for name in reversed(required):  # the first missing field wins
            err[of_kind & r.nulls[name]] = f"missing_{name}"
    known = np.isin(kind, [*PARTITIONED_REQUIRED_FIELDS, TICK])
    err[~known] = "unsupported_item"
    err[kind == DUPLICATE_SEQ] = DUPLICATE_SEQ  # TR-15: checked first; it ends the step
    return err


@dataclass
class _Probes:
    """Per source named by a well-formed update of the batch: its first seq and the lowest
    and highest partition named (from the probe rows of every input partition)."""

    source: np.ndarray
    first: np.ndarray
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def of(cls, rows: pd.DataFrame) -> _Probes:
        if len(rows) == 0:
            e = np.empty(0, np.int64)
            return cls(e, e, e, e)
        g = rows.groupby("pw_source").agg(
            first=("pw_seq", "min"), low=("pw_partition", "min"), high=("pw_count", "max")
        )
        return cls(
            g.index.to_numpy(np.int64), g["first"].to_numpy(np.int64), g["low"].to_numpy(np.int64),
            g["high"].to_numpy(np.int64),
        )  # fmt: skip


class _BucketRun:
    """One batch of one (stream, bucket): the partitions read, the rest as figures, and the
    summaries the narrow stage needs (per call when they change)."""

    def __init__(
        self, st: BucketState, cfg: StreamConfig, bucket: int, table: Partitions, rest: np.ndarray,
        b: int, out: _Out, strict: bool, ordered: bool,
    ) -> None:  # fmt: skip
        self.st, self.cfg, self.bucket, self.t, self.rest = st, cfg, bucket, table, rest
        self.b, self.out, self.strict, self.ordered = b, out, strict, ordered
        self.emitted = self.figures()
        self.dirty = False  # figures sent as CHANGE rows since the last call boundary row
        self.every_change = False
        self.rebalances = 0

    def figures(self) -> np.ndarray:
        return combine(np.vstack([self.rest, self.t.figures()]))

    # -- summaries --

    def _summary(self, pos: int, part: int, f: np.ndarray) -> None:
        self.out.add(
            "summary", 1, batch=self.b, kw_route=-1, s_bucket=self.bucket, s_pos=pos, s_part=part,
            s_kind=0, s_source=0, **{f"s_{n}": int(v) for n, v in zip(AGG_FIELDS, f, strict=True)},
            s_rebalances=self.rebalances if part == FINAL else 0, s_new=0,
        )  # fmt: skip

    def boundary(self, pos: int, part: int, force: bool = False) -> None:
        """A call ends here: the figures if they changed since last sent, or if CHANGE rows were
        sent since the last boundary (the narrow stage evaluates at boundary rows only)."""
        f = self.figures()
        if force or self.dirty or not np.array_equal(f, self.emitted):
            self._summary(pos, part, f)
            self.emitted, self.dirty = f, False

    def changed(self, pos: int) -> None:
        """After one update, when another bucket may end the step here unseen (F064-R22)."""
        f = self.figures()
        if not np.array_equal(f, self.emitted):
            self._summary(pos, CHANGE, f)
            self.emitted, self.dirty = f, True

    # -- updates (F064-R4, R5, R20) --

    def updates(self, r: _Rows, lo: int, hi: int) -> None:
        """This bucket's well-formed updates between two rows every bucket sees."""
        st, t = self.st, self.t
        src, part = r.vals["source"][lo:hi], r.vals["partition"][lo:hi]
        is_event = r.kind[lo:hi] == "event"
        value = np.where(
            is_event, sat_sub(r.vals["event_time"][lo:hi], self.cfg.max_lateness), r.vals["time"][lo:hi]
        )  # F064-R5
        seq = r.seq[lo:hi]
        pos = _lookup(t.src, t.part, src, part)
        if not self.strict:
            if (pos < 0).any():  # auto_register: unknown sources registered, partitions added fresh
                pairs = pd.DataFrame({"s": src[pos < 0], "p": part[pos < 0]}).drop_duplicates()
                st.sources.update(pairs["s"].unique().tolist())
                t.add_fresh(pairs["s"].to_numpy(np.int64), pairs["p"].to_numpy(np.int64), st.clock)
                pos = _lookup(t.src, t.part, src, part)
            self._step(pos, value, seq)
            return
        err = np.full(hi - lo, None, dtype=object)
        err[pos < 0] = "unknown_partition"
        known = np.fromiter(st.sources, np.int64, len(st.sources))
        err[~np.isin(src, known)] = "unknown_source"
        bad = np.flatnonzero(err != None)  # noqa: E711 - elementwise
        if not self.ordered:  # no arrival order: the batch is one step, errors end none
            ok = err == None  # noqa: E711 - elementwise
            self._step(pos[ok], value[ok], seq[ok])
            if len(bad):
                self._errors(np.zeros(len(bad), np.int64), err[bad], null_seq=True)
            return
        start = 0
        for e in [*bad.tolist(), hi - lo]:
            if e > start:
                self._step(pos[start:e], value[start:e], seq[start:e])
            if e < hi - lo:  # an error ends the step (F064-R22): a boundary for every bucket
                self.boundary(int(seq[e]), BEFORE, force=True)
                self._errors(seq[e : e + 1], err[e : e + 1])
            start = e + 1

    def _step(self, pos: np.ndarray, value: np.ndarray, seq: np.ndarray) -> None:
        if self.every_change:
            for i in range(len(pos)):
                self._apply(pos[i : i + 1], value[i : i + 1])
                self.changed(int(seq[i]))
        elif len(pos):
            top = pd.Series(value).groupby(pos, sort=False).max()  # one maximum per partition
            self._apply(top.index.to_numpy(np.int64), top.to_numpy(np.int64))

    def _apply(self, i: np.ndarray, w: np.ndarray) -> None:
        t = self.t
        t.wm[i] = np.where(t.has_wm[i], np.maximum(t.wm[i], w), w)  # F064-R4: never goes back
        t.has_wm[i] = True
        t.last[i] = self.st.clock  # F064-R4: activity
        t.idle[i] = False  # F064-R4: reactivates

    def _errors(self, seq: np.ndarray, reason: np.ndarray, null_seq: bool = False) -> None:
        self.out.add(
            "errors", len(seq), batch=self.b, seq=(seq, np.full(len(seq), null_seq)), reason=reason,
            kw_route=self.bucket,
        )  # fmt: skip

    # -- control rows (F064-R2, R9..R13, R17, R22), seen by every bucket --

    def control(self, r: _Rows, i: int, reason: str | None) -> None:
        st, t, kind = self.st, self.t, r.kind[i]
        seq = int(r.seq[i])
        s, p = r.get("source", i), r.get("partition", i)
        mine = kind in PARTITION_KINDS and int(r.home[i]) == self.bucket
        reporter = int(r.home[i]) if kind in PARTITION_KINDS else 0
        self.boundary(seq, BEFORE)
        if reason is None:
            reason = self._refusal(kind, r, i, s, p, mine)
        if reason is not None:
            if reporter == self.bucket:
                self._errors(np.array([seq], np.int64), np.array([reason], object), not self.ordered)
            return
        j = t.find(s, p) if mine else -1  # type: ignore[arg-type]
        if kind in ("clock", TICK):
            time = int(r.vals["time"][i])
            if kind == TICK and time <= st.clock:
                return  # a processing-time tick never moves the clock back
            st.clock = time
            cutoff = time - self.cfg.idle_timeout
            if cutoff > I64_MIN:  # F064-R11: now - last_activity > idle_timeout
                t.idle |= t.last < cutoff
        elif kind == "register_source":
            self._register(int(s), int(r.vals["count"][i]))  # type: ignore[arg-type]
        elif kind == "add_partition":  # F064-R12
            if self.strict:
                st.tracked.add(s, p)  # type: ignore[arg-type]
            if mine:
                t.add_fresh(s, np.array([p], np.int64), st.clock)  # type: ignore[arg-type]
                self.rebalances += 1
        elif kind == "remove_partition":  # F064-R13: untracked -> no-op
            if self.strict:
                st.tracked.remove(s, p)  # type: ignore[arg-type]
            if j >= 0:
                t.keep(np.arange(len(t)) != j)
                self.rebalances += 1
        elif j >= 0 and kind == "idle":  # F064-R9
            t.idle[j] = True
        elif j >= 0 and kind == "active":  # F064-R10
            t.idle[j] = False
            t.last[j] = st.clock
        elif j >= 0:  # assign_core, F064-R17
            t.core[j] = r.vals["core"][i]
        self.boundary(seq, AFTER)

    def _refusal(self, kind: str, r: _Rows, i: int, s: int | None, p: int | None, mine: bool) -> str | None:
        """F064-R22, the reasons the state decides (the sources are in every bucket, a partition
        is known to its own bucket, which reports it)."""
        if kind == "clock":
            return "clock_went_backwards" if r.vals["time"][i] < self.st.clock else None
        if kind in (TICK, "register_source"):
            return None
        if s not in self.st.sources:
            return None if kind == "remove_partition" else "unknown_source"  # F064-R13
        if not mine:
            return None
        tracked = self.t.find(s, p) >= 0  # type: ignore[arg-type]
        if kind == "add_partition":
            return "invalid_partition" if tracked else None  # F064-R12
        if kind != "remove_partition" and not tracked:
            return "unknown_partition"
        return None

    def _register(self, s: int, count: int) -> None:
        """F064-R2: a first registration tracks 0..count-1; a later one resizes the source. Every
        block of the source is loaded; this bucket holds the partitions p with
        pmod(s, buckets) + p = bucket (mod buckets)."""
        st, t = self.st, self.t
        first = s not in st.sources
        st.sources.add(s)
        if self.strict:
            st.tracked.register(s, count)
        dropped = (t.src == s) & (t.part >= count)
        t.keep(~dropped)
        own = (self.bucket - s % st.buckets) % st.buckets
        new = np.setdiff1d(np.arange(own, count, st.buckets, dtype=np.int64), t.part[t.src == s])
        t.add_fresh(s, new, st.clock)
        if not first:
            self.rebalances += int(dropped.sum()) + len(new)


def _needs_every_change(st: BucketState, r: _Rows, err: np.ndarray, probes: _Probes) -> bool:
    """Whether an update of another bucket may name an untracked partition in this batch
    (F064-R22: it ends the step there): a source not registered at the batch's start, a
    partition named outside the tracked set, or a change of the tracked set in the batch."""
    if len(probes.source) == 0:
        return False
    rebalancing = np.isin(r.kind, ["register_source", "add_partition", "remove_partition"]) & (err == None)  # noqa: E711
    if rebalancing.any():
        return True
    for s, lo, hi in zip(probes.source.tolist(), probes.low.tolist(), probes.high.tolist(), strict=True):
        if s not in st.sources or not st.tracked.covers(s, lo, hi):
            return True
    return False


def _source_figures(blocks: np.ndarray) -> dict[int, np.ndarray]:
    """Per source, the figures of its blocks (rows of BLOCK_FIELDS)."""
    result = {}
    for s in np.unique(blocks[:, 0]).tolist():
        result[s] = combine(blocks[blocks[:, 0] == s, 2:8])
    return result


_DEFAULTS: dict[str, Any] = {"pw_seq": np.int64(0), "pw_kind": "event", "pw_home": np.int64(0)}


class PartitionBucketProcessor(WideStage):
    """The wide stage: one call per (stream, bucket) and micro-batch."""

    defaults = _DEFAULTS

    def __init__(
        self, default: StreamConfig, per_stream: Mapping[str, StreamConfig], ordered: bool, buckets: int,
        block_partitions: int, auto_register: bool,
    ) -> None:  # fmt: skip
        super().__init__(default, per_stream, ordered, buckets)
        self.block_partitions = block_partitions
        self.strict = not auto_register

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_state = handle.getValueState("bucket", BUCKET_SCHEMA)
        self.blocks = handle.getMapState("blocks", "source long, block long", BLOCK_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, cfg: StreamConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        stored = self.bucket_state.get()
        st = (
            BucketState.from_tuple(stored, self.buckets) if stored is not None
            else BucketState(self.buckets, self.block_partitions)
        )  # fmt: skip
        out = _Out(stream_id)
        for b, part in batches_in(pdf, "pw_batch", True, 0):
            self._batch(st, cfg, bucket, part, b, out)
        self.bucket_state.update(st.to_tuple())
        yield out.masked_frame(NULL_MASK)

    def _batch(
        self, st: BucketState, cfg: StreamConfig, bucket: int, pdf: pd.DataFrame, b: int, out: _Out
    ) -> None:
        kind = pdf["pw_kind"].to_numpy(object)
        probes = _Probes.of(pdf[kind == PROBE])
        pdf = _collapse_ticks(pdf[(kind != PROBE) & (kind != MARKER)])
        if self.ordered:
            pdf = pdf.sort_values("pw_seq", kind="stable")
        else:  # the tick first, then event-time order, ties by source and partition
            first = pdf["pw_kind"].to_numpy(object) != TICK
            pdf = pdf.assign(pw_first=first).sort_values(
                ["pw_first", "pw_event_time", "pw_source", "pw_partition"], kind="stable"
            )
        r = _Rows.of(pdf)
        err = stateless_errors(r)
        ok = err == None  # noqa: E711 - elementwise
        own = np.isin(r.kind, UPDATE_KINDS) & ok  # the routing sends only this bucket's here

        # The blocks this batch needs: those its rows name, every block of a source it
        # registers, and those with an active partition a clock row may idle.
        blocks = st.blocks
        named = own | (np.isin(r.kind, PARTITION_KINDS) & ok & (r.home == bucket))
        want = set(zip(r.vals["source"][named].tolist(), st.block_of(r.vals["partition"][named]).tolist()))
        read = np.isin(blocks[:, 0], r.vals["source"][(r.kind == "register_source") & ok])
        timed = np.isin(r.kind, ["clock", TICK]) & ok
        if timed.any() and len(blocks):
            cutoff = int(r.vals["time"][timed].max()) - cfg.idle_timeout
            if cutoff > I64_MIN:  # blocks with an active partition older than the timeout
                read |= (blocks[:, 2] > blocks[:, 3]) & (blocks[:, 8] < cutoff)
        if want:
            keys = pd.MultiIndex.from_arrays([blocks[:, 0], blocks[:, 1]])
            read |= keys.isin(list(want))
        table = unpack_blocks(blocks[read, 0].tolist(), self._read(blocks[read]))
        start = table.copy()
        start_sources = set(st.sources)
        start_figures = _source_figures(blocks)
        run = _BucketRun(st, cfg, bucket, table, blocks[~read, 2:8], b, out, self.strict, self.ordered)
        run.every_change = self.strict and self.ordered and _needs_every_change(st, r, err, probes)

        breaks = np.flatnonzero(~own).tolist()
        registered = 0  # probes applied (auto_register: a source registers with its first update)
        lo = 0
        for c in [*breaks, len(own)]:
            if c > lo:
                run.updates(r, lo, c)
            if c < len(own):
                if not self.strict:
                    registered = _register_probes(st, probes, registered, int(r.seq[c]))
                if not self.ordered and err[c] is not None:
                    if bucket == 0:  # no arrival order: an error ends no step
                        run._errors(np.zeros(1, np.int64), err[c : c + 1], null_seq=True)
                else:
                    run.control(r, c, err[c])
            lo = c + 1
        if not self.strict:
            _register_probes(st, probes, registered, LAST)
        run.boundary(LAST, BEFORE)

        self._write(st, run.t, blocks, read)
        run._summary(LAST, FINAL, run.figures())
        self._source_summaries(st, start_figures, start_sources, bucket, b, out)
        _partition_changes(start, run.t, b, out, bucket)

    def _read(self, rows: np.ndarray) -> list[tuple[Any, ...]]:
        values = []
        for s, k in rows[:, :2].tolist():
            value = self.blocks.getValue((s, k))
            if value is None:  # the summary lists only blocks that hold a value
                raise missing_value("partitioned_watermarks", "blocks", f"block {k} of source {s}")
            values.append(value)
        return values

    def _write(self, st: BucketState, t: Partitions, blocks: np.ndarray, read: np.ndarray) -> None:
        """Every block read or created goes back (an emptied one is removed); the summary
        gets their new rows."""
        blk = st.block_of(t.part)
        order = np.lexsort((t.part, blk, t.src))
        keys = np.column_stack([t.src[order], blk[order]]) if len(t) else np.zeros((0, 2), np.int64)
        rows_out = []
        if len(keys):
            starts = np.flatnonzero(np.r_[True, np.any(keys[1:] != keys[:-1], axis=1)])
            ends = np.r_[starts[1:], len(keys)]
            for a, e in zip(starts.tolist(), ends.tolist(), strict=True):
                rows = order[a:e]
                s, k = int(keys[a, 0]), int(keys[a, 1])
                self.blocks.updateValue((s, k), pack_block(t, rows))
                active = ~t.idle[rows]
                rows_out.append((
                    s, k, *figures_of(t.wm[rows], t.has_wm[rows], t.idle[rows]).tolist(),
                    int(t.last[rows][active].min()) if active.any() else I64_MAX,
                ))  # fmt: skip
        kept = {(int(s), int(k)) for s, k in keys.tolist()} if len(keys) else set()
        for s, k in blocks[read, :2].tolist():
            if (s, k) not in kept:
                self.blocks.removeKey((s, k))
        new_rows = np.array(rows_out, np.int64).reshape(-1, len(BLOCK_FIELDS))
        st.blocks = np.concatenate([blocks[~read], new_rows])

    @staticmethod
    def _source_summaries(
        st: BucketState, start: dict[int, np.ndarray], start_sources: set[int], bucket: int, b: int,
        out: _Out,
    ) -> None:  # fmt: skip
        """Per source whose figures in this bucket changed: its new figures (F064-R14); bucket 0
        also names the sources registered in the batch, partitions or not."""
        end = _source_figures(st.blocks)
        new = st.sources - start_sources if bucket == 0 else set()
        for s in sorted(set(start) | set(end) | new):
            f = end.get(s, EMPTY)
            if s in new or not np.array_equal(start.get(s, EMPTY), f):
                out.add(
                    "summary", 1, batch=b, kw_route=-1, s_bucket=bucket, s_pos=LAST, s_part=FINAL,
                    s_kind=1, s_source=s, **{f"s_{n}": int(v) for n, v in zip(AGG_FIELDS, f, strict=True)},
                    s_rebalances=0, s_new=int(s in new),
                )  # fmt: skip


def _register_probes(st: BucketState, probes: _Probes, done: int, before: int) -> int:
    """auto_register: the sources whose first update comes before ``before`` are registered
    (probes sorted by first seq); returns how many probes are applied."""
    order = np.argsort(probes.first, kind="stable")
    while done < len(order) and probes.first[order[done]] < before:
        st.sources.add(int(probes.source[order[done]]))
        done += 1
    return done


def _collapse_ticks(pdf: pd.DataFrame) -> pd.DataFrame:
    """The ticks of a micro-batch (one per input partition) as one: the latest time wins."""
    tick = pdf["pw_kind"].to_numpy(object) == TICK
    if tick.sum() <= 1:
        return pdf
    ticks = pdf[tick]
    latest = ticks.iloc[[int(np.argmax(ticks["pw_time"].to_numpy(np.int64)))]]
    return pd.concat([latest, pdf[~tick]], ignore_index=True)


def _partition_changes(s: Partitions, e: Partitions, b: int, out: _Out, bucket: int) -> None:
    """F064-R21: the partitions read whose (watermark, state, core) differ from the batch's start."""
    j = _lookup(e.src, e.part, s.src, s.part)
    gone = j < 0
    if gone.any():
        out.add("partitions", int(gone.sum()), batch=b, source=s.src[gone], partition=s.part[gone],
                watermark=None, state="removed", core=None, kw_route=bucket)  # fmt: skip
    k = j[~gone]
    same = (
        (s.has_wm[~gone] == e.has_wm[k]) & ((s.wm[~gone] == e.wm[k]) | ~e.has_wm[k])
        & (s.idle[~gone] == e.idle[k]) & (s.core[~gone] == e.core[k])
    )  # fmt: skip
    changed = np.ones(len(e), bool)
    changed[k[same]] = False
    if changed.any():
        c = changed
        out.add(
            "partitions", int(c.sum()), batch=b, source=e.src[c], partition=e.part[c],
            watermark=(e.wm[c], ~e.has_wm[c]), state=np.where(e.idle[c], "idle", "active").astype(object),
            core=(e.core[c], e.core[c] < 0), kw_route=bucket,
        )  # fmt: skip


# ---- the narrow stage ------------------------------------------------------------


class StreamSummaryProcessor(SecondStage):
    """The narrow stage (route -1): each bucket's figures, the combined watermark, the counters
    and, per source, each bucket's figures of it."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)

    def __init__(self, buckets: int) -> None:
        self.buckets = buckets

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("stream", STREAM_SCHEMA)
        self.sources = handle.getMapState("sources", SOURCE_KEY_SCHEMA, SOURCE_SCHEMA)

    def summarise(self, stream_id: str | None, rows: pd.DataFrame) -> pd.DataFrame:
        stored = self.state.get()
        st = StreamState.from_tuple(stored, self.buckets) if stored is not None else StreamState(self.buckets)
        out = OutputRows(stream_id, OUTPUT_COLUMNS, STRING_COLS)
        for b, part in batches_in(rows, "batch", True, 0):
            summarise_batch(st, part[part["s_kind"].to_numpy(np.int64) == 0], b, out)
            self._sources(part[part["s_kind"].to_numpy(np.int64) == 1], b, out)
        self.state.update(st.to_tuple())
        return out.masked_frame(NULL_MASK)

    def _sources(self, rows: pd.DataFrame, b: int, out: OutputRows) -> None:
        """F064-R14, R21: the sources whose (watermark, active partitions) changed."""
        if len(rows) == 0:
            return
        changed = []
        fig_cols = [f"s_{n}" for n in AGG_FIELDS]
        for source, g in rows.groupby("s_source", sort=True):
            s = int(source)  # type: ignore[arg-type]
            stored = self.sources.getValue((s,))
            if stored is None:
                buckets, figs = np.empty(0, np.int64), np.zeros((0, 6), np.int64)
            else:
                buckets, figs = unpack_source_figures(stored)
            before = None if stored is None else _source_view(combine(figs))
            update = pd.DataFrame(figs, index=buckets, columns=fig_cols)
            new = g.set_index("s_bucket")[fig_cols]
            merged = pd.concat([update[~update.index.isin(new.index)], new])
            merged = merged[merged["s_total"].to_numpy(np.int64) > 0]
            figs = merged.to_numpy(np.int64).reshape(-1, 6)
            after = _source_view(combine(figs))
            self.sources.updateValue(
                (s,), (merged.index.to_numpy(np.int64).tobytes(), np.ascontiguousarray(figs).tobytes())
            )
            if after != before:
                changed.append((s, *after))
        if changed:
            wm = [c[1] for c in changed]
            out.add(
                "sources", len(changed), batch=b, source=np.array([c[0] for c in changed], np.int64),
                watermark=(np.array([w or 0 for w in wm], np.int64), np.array([w is None for w in wm])),
                active_partitions=np.array([c[2] for c in changed], np.int64),
            )  # fmt: skip


def unpack_source_figures(stored: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A source's entry of the narrow stage: the buckets that report it and their figures."""
    with decoding("partitioned_watermarks", "sources"):
        buckets = np.frombuffer(bytes(stored[0]), np.int64)
        figs = np.frombuffer(bytes(stored[1]), np.int64).reshape(-1, 6)
        if len(buckets) != len(figs):
            raise ValueError(f"{len(buckets)} buckets with {len(figs)} rows of figures")
        return buckets, figs


def _source_view(f: np.ndarray) -> tuple[int | None, int]:
    return candidate(f), int(f[0] - f[1])


def summarise_batch(st: StreamState, rows: pd.DataFrame, b: int, out: OutputRows) -> None:
    """F064-R6..R8, R16, R20: the combined watermark after every call, the progress row."""
    rows = rows.sort_values(["s_pos", "s_part"], kind="stable")
    call = rows[["s_pos", "s_part"]].to_numpy(np.int64)
    bucket = rows["s_bucket"].to_numpy(np.int64)
    figures = rows[[f"s_{n}" for n in AGG_FIELDS]].to_numpy(np.int64)
    if len(rows):
        ends = np.flatnonzero(np.any(call[1:] != call[:-1], axis=1)).tolist() + [len(rows) - 1]
        start = 0
        for end in ends:
            st.figures[bucket[start : end + 1]] = figures[start : end + 1]
            if call[end, 1] != CHANGE:  # a call ends here
                st.evaluate()
            start = end + 1
    st.rebalances += int(rows["s_rebalances"].sum())
    f = combine(st.figures)
    out.add(
        "progress", 1, batch=b, combined_watermark=opt(st.combined), total_partitions=int(f[0]),
        active_partitions=int(f[0] - f[1]), idle_partitions=int(f[1]), watermark_advances=st.advances,
        rebalances=st.rebalances,
    )  # fmt: skip


for _name in LONGS:
    _DEFAULTS[f"pw_{_name}"] = np.int64(0)
    _DEFAULTS[f"pw_{_name}_null"] = True


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
            k: absent if v is None else millis_column(fields, "time_col", v) if k == "time"
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
        cols.append(F.unix_millis(F.current_timestamp()).alias("pw_batch"))
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
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "BucketState",
    "PartitionBucketProcessor",
    "PartitionedWatermarkStreams",
    "StreamConfig",
    "StreamState",
    "StreamSummaryProcessor",
    "Tracked",
    "partitioned_watermarks",
    "native_watermark_report",
    "validate_config",
    "with_probes",
]


ENGINE_BUCKETS = 3
ENGINE_BLOCK_PARTITIONS = 2


def engine_streams(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
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
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> Any:
    """``engine_streams``'s combined stream with both stages (``output``)."""
    return engine_streams(df, stream_configs, seq_unique, buckets).output

