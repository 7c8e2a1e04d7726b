"""Per-partition watermarks (F064): the output columns, the columns between the stages, the
figures of a set of partitions, the partitions a bucket reads, and the state layouts (how each
stage's values pack and unpack)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN
from spark_impl.checkpoints import (
    decoding,
)
from spark_impl.partitioned_watermarks.settings import (
    LAYOUT_VERSION,
)
from spark_impl.scaleout import (
    NULL_MASK,
    check_layout,
)

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
