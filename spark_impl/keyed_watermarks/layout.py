"""Keyed watermarks (F065): the output columns, the columns between the stages and the state
layouts (layout version, values of each stage, how they pack and unpack)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN
from spark_impl.checkpoints import decoding
from spark_impl.keyed_watermarks.settings import LAYOUT_VERSION
from spark_impl.scaleout import (
    check_layout,
    pack_text,
    unpack_text,
)

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
