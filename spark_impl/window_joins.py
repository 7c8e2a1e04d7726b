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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.outputs import TABLES
from harness.traces import I64_MAX, I64_MIN, InvalidConfig
from spark_impl.checkpoints import (
    NEW_LOCATION,
    IncompatibleCheckpoint,
    Operator,
    Stage,
    decoding,
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
    pack_text,
    restore_nulls,
    two_stages,
    unpack_text,
)
from spark_impl.session import prepare_session

LAYOUT_VERSION = 1
OPERATOR = "window_joins"
JOINS: dict[str, tuple[str, ...]] = {  # OXJ-R18: each join's required settings
    "tumbling_tumbling": ("size_ms",),
    "tumbling_sliding": ("left_size_ms", "right_size_ms", "right_slide_ms"),
    "session_session": ("gap_ms",),
}
LATENESS = "allowed_lateness_ms"
SETTINGS = ("size_ms", "left_size_ms", "right_size_ms", "right_slide_ms", "gap_ms", LATENESS)
MAX_RIGHT_SIZE_IN_LEFT_PANES = 256
SIDES = ("left", "right")
LEFT, RIGHT = 0, 1
COUNTERS = ("left_events", "right_events", "pairs_emitted", "late_events_dropped", "open_windows")

STRING_COLS = ("output", "stream_id", "key", "side", "reason")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "key", "left_batch", "left_seq", "left_time", "left_value",
    "right_batch", "right_seq", "right_time", "right_value", "side", "event_time", "watermark", *COUNTERS,
    "reason",
)  # fmt: skip
LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)

# Between the stages: long columns as values with one null mask (bit i: LONG_COLS[i] is null);
# ``kw_route`` picks the narrow stage's group (-1) or a pass-through group (the bucket);
# ``s_*`` are a bucket's counter deltas of one batch (its watermark rides in ``watermark``).
SUMMARY_COLS = tuple(f"s_{c}" for c in COUNTERS)
WIDE_COLUMNS = (*OUTPUT_COLUMNS, ROUTE, *SUMMARY_COLS)
WIDE_SCHEMA = ", ".join(
    [f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in WIDE_COLUMNS] + [f"`{NULL_MASK}` long"]
)
PASS_SCHEMA = OUTPUT_SCHEMA + f", `{NULL_MASK}` long"
BUCKET_SCHEMA = (
    "layout_version int, buckets int, join string, settings binary, watermark long, "
    "has_watermark boolean, slots binary"
)
WINDOW_KEY_SCHEMA = "key string, pane long"
WINDOW_SCHEMA = "left_events binary, right_events binary"
DUE_KEY_SCHEMA = "slot long"
DUE_SCHEMA = "key_lengths binary, key_bytes binary, panes binary, deadlines binary"
STREAM_SCHEMA = (
    "layout_version int, buckets int, join_watermark long, join_has_watermark boolean, "
    + ", ".join(f"{c} long" for c in COUNTERS)
)

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    name: ("stream_id", *cols) for name, cols in TABLES[OPERATOR].items()
}
EVENT_FIELDS = 4  # a held event: batch, seq, time, value (int64 each)


# ---- configuration (OXJ-R18) -------------------------------------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    join: str
    size_ms: int = 0
    left_size_ms: int = 0
    right_size_ms: int = 0
    right_slide_ms: int = 0
    gap_ms: int = 0
    allowed_lateness_ms: int = 0

    def settings(self) -> np.ndarray:
        """The settings a checkpoint is bound to, in ``SETTINGS`` order."""
        return np.array([getattr(self, s) for s in SETTINGS], np.int64)

    @property
    def granularity(self) -> int:
        """The width of a slot of the purge index: a pane, or the gap."""
        return {"tumbling_tumbling": self.size_ms, "tumbling_sliding": self.left_size_ms}.get(
            self.join, self.gap_ms
        )


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (OXJ-R18) -> StreamConfig, or InvalidConfig naming the setting."""
    if "join" not in config:
        raise InvalidConfig(f"the setting join is required: one of {list(JOINS)}")
    join = config["join"]
    if not isinstance(join, str) or join not in JOINS:
        raise InvalidConfig(f"join must be one of {list(JOINS)}, got {join!r}")
    unknown = sorted(set(config) - {"join", *SETTINGS})
    if unknown:
        raise InvalidConfig(f"unknown window_joins settings {unknown}")
    unused = sorted(set(config) - {"join", LATENESS, *JOINS[join]})
    if unused:
        raise InvalidConfig(f"settings {unused} are not used by the join {join}")
    values = {}
    for setting in JOINS[join]:
        if setting not in config:
            raise InvalidConfig(f"the join {join} needs the setting {setting}")
        values[setting] = require_int(setting, config[setting], 1)
    values[LATENESS] = require_int(LATENESS, config.get(LATENESS, 0), 0)
    if join == "tumbling_sliding":
        if values["right_slide_ms"] > values["right_size_ms"]:
            raise InvalidConfig(
                f"right_slide_ms {values['right_slide_ms']} is above right_size_ms {values['right_size_ms']}"
            )
        if values["right_size_ms"] > MAX_RIGHT_SIZE_IN_LEFT_PANES * values["left_size_ms"]:
            raise InvalidConfig(
                f"right_size_ms {values['right_size_ms']} is above {MAX_RIGHT_SIZE_IN_LEFT_PANES} * "
                f"left_size_ms ({values['left_size_ms']})"
            )
    return StreamConfig(join, **values)


# ---- saturating time arithmetic (TR-2) ---------------------------------------------------------


def sat_add(a: Any, b: Any) -> np.ndarray:
    """a + b elementwise on int64, clamped to the i64 bounds instead of wrapping."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    with np.errstate(over="ignore"):
        total = a + b
    return np.where(
        (b > 0) & (total < a), np.int64(I64_MAX), np.where((b < 0) & (total > a), np.int64(I64_MIN), total)
    )


def pane_deadline(index: np.ndarray, size: int, lateness: int) -> np.ndarray:
    """OXJ-R4: the watermark that purges pane ``index``: its end (saturating) plus the lateness."""
    index = np.asarray(index, np.int64)
    with np.errstate(over="ignore"):  # an index from I64_MAX // size up ends beyond i64 max
        end = np.where(index >= I64_MAX // size, np.int64(I64_MAX), (index + 1) * np.int64(size))
    return sat_add(end, lateness)


def reached_left_panes(t: np.ndarray, cfg: StreamConfig) -> tuple[np.ndarray, np.ndarray]:
    """OXJ-R8, R11: the first and last left pane index a right event at ``t`` reaches (the left
    panes its sliding panes' union overlaps, within the representable times)."""
    ls, rs, slide = cfg.left_size_ms, cfg.right_size_ms, cfg.right_slide_ms
    t = np.asarray(t, np.int64)
    safe = (t >= I64_MIN + 2 * rs) & (t <= I64_MAX - 2 * rs) if rs < I64_MAX // 4 else np.zeros(len(t), bool)
    first = np.zeros(len(t), np.int64)
    last = np.zeros(len(t), np.int64)
    ts = t[safe]
    start = (np.floor_divide(ts - rs, slide) + 1) * slide
    end = np.floor_divide(ts, slide) * slide + rs
    first[safe] = np.floor_divide(start, ls)
    last[safe] = np.floor_divide(end - 1, ls)
    for i in np.flatnonzero(~safe).tolist():  # near the bounds: exact integers
        x = int(t[i])
        lo = max(I64_MIN, ((x - rs) // slide + 1) * slide)
        hi = min(I64_MAX, (x // slide) * slide + rs - 1)
        first[i], last[i] = lo // ls, hi // ls
    return first, last


# ---- state layouts (OXJ-R21) -------------------------------------------------------------------


def bound_setting(setting: str, found: Any, expected: Any) -> IncompatibleCheckpoint:
    """The refusal of a checkpoint written with another value of a setting it is bound to."""
    return IncompatibleCheckpoint(
        f"{OPERATOR}: the checkpoint holds {setting} {found!r}; this query has {setting} {expected!r}",
        f"A checkpoint is bound to its join and settings (OXJ-R21): pass {setting}={found!r}, "
        f"or {NEW_LOCATION}",
        OPERATOR, "bucket",
    )  # fmt: skip


@dataclass
class BucketState:
    """What one (stream, bucket) keeps in its ValueState; its windows and index are MapStates."""

    buckets: int
    join: str
    settings: np.ndarray
    watermark: int | None = None
    slots: np.ndarray = field(
        default_factory=lambda: np.zeros(0, np.int64)
    )  # sorted slots of the ``due`` index held

    def to_tuple(self) -> tuple[Any, ...]:
        wm = self.watermark
        return (
            LAYOUT_VERSION, self.buckets, self.join, np.ascontiguousarray(self.settings, np.int64).tobytes(),
            0 if wm is None else wm, wm is not None, np.ascontiguousarray(self.slots, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, "bucket")
        with decoding(OPERATOR, "bucket"):
            settings = np.frombuffer(bytes(value[3]), np.int64).copy()
            if len(settings) != len(SETTINGS) or str(value[2]) not in JOINS:
                raise ValueError(f"join {value[2]!r} with {len(settings)} settings")
            slots = np.frombuffer(bytes(value[6]), np.int64).copy()
            return cls(buckets, str(value[2]), settings, int(value[4]) if value[5] else None, slots)

    def check(self, cfg: StreamConfig) -> None:
        if self.join != cfg.join:
            raise bound_setting("join", self.join, cfg.join)
        for name, found, expected in zip(SETTINGS, self.settings.tolist(), cfg.settings().tolist()):
            if found != expected:
                raise bound_setting(name, found, expected)


@dataclass
class StreamState:
    """What the narrow stage keeps per stream: the watermark and the counters (OXJ-R17)."""

    buckets: int
    watermark: int | None = None
    counts: tuple[int, ...] = (0, 0, 0, 0, 0)

    def to_tuple(self) -> tuple[Any, ...]:
        wm = self.watermark
        return (LAYOUT_VERSION, self.buckets, 0 if wm is None else wm, wm is not None, *self.counts)

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> StreamState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, "totals")
        with decoding(OPERATOR, "totals"):
            if len(value) != 4 + len(COUNTERS):
                raise ValueError(f"{len(value)} fields for {4 + len(COUNTERS)}")
            return cls(buckets, int(value[2]) if value[3] else None, tuple(int(v) for v in value[4:9]))


def pack_events(events: np.ndarray) -> bytes:
    return np.ascontiguousarray(events, np.int64).tobytes()


def unpack_window(value: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A ``windows`` entry -> (left events, right events), each rows of (batch, seq, time, value)."""
    with decoding(OPERATOR, "windows"):
        if len(value) != 2:
            raise ValueError(f"{len(value)} fields for the two sides")
        return tuple(  # type: ignore[return-value]
            np.frombuffer(bytes(v), np.int64).reshape(-1, EVENT_FIELDS).copy() for v in value[:2]
        )


def unpack_due(value: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A ``due`` entry -> (keys, pane indices, deadlines)."""
    with decoding(OPERATOR, "due"):
        keys = unpack_text(bytes(value[0]), bytes(value[1]))
        panes = np.frombuffer(bytes(value[2]), np.int64).copy()
        deadlines = np.frombuffer(bytes(value[3]), np.int64).copy()
        if not len(keys) == len(panes) == len(deadlines):
            raise ValueError(f"{len(keys)} keys, {len(panes)} panes, {len(deadlines)} deadlines")
        return keys, panes, deadlines


class Windows:
    """The ``windows`` MapState of one call: read on first use, written back once."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.held: dict[tuple[str, int], tuple[np.ndarray, np.ndarray] | None] = {}
        self.existed: dict[tuple[str, int], bool] = {}

    def get(self, key: str, pane: int) -> tuple[np.ndarray, np.ndarray] | None:
        k = (key, pane)
        if k not in self.held:
            stored = self.state.getValue(k)
            self.existed[k] = stored is not None
            self.held[k] = None if stored is None else unpack_window(stored)
        return self.held[k]

    def put(self, key: str, pane: int, events: tuple[np.ndarray, np.ndarray] | None) -> None:
        self.get(key, pane)
        self.held[(key, pane)] = events

    def drop(self, key: str, pane: int) -> bool:
        """Forgets a window the purge index lists (so it is held, unless this call dropped it
        already): no read. Returns whether it was held."""
        k = (key, pane)
        if k in self.held:
            was = self.held[k] is not None
        else:
            was = self.existed[k] = True
        self.held[k] = None
        return was

    def flush(self) -> None:
        for k, events in self.held.items():
            if events is not None:
                self.state.updateValue(k, (pack_events(events[0]), pack_events(events[1])))
            elif self.existed[k]:
                self.state.removeKey(k)


class DueIndex:
    """The ``due`` MapState: slot -> the windows whose deadline lies in it. Only the slots a
    watermark reaches are read; the sorted slot list lives in the bucket's value."""

    def __init__(self, state: Any, slots: np.ndarray, granularity: int) -> None:
        self.state = state
        self.slots = set(slots.tolist())
        self.stored = set(self.slots)
        self.granularity = granularity
        self.entries: dict[int, dict[tuple[str, int], int]] = {}

    def _entry(self, slot: int) -> dict[tuple[str, int], int]:
        if slot not in self.entries:
            found: dict[tuple[str, int], int] = {}
            if slot in self.stored:
                value = self.state.getValue((slot,))
                if value is not None:
                    keys, panes, deadlines = unpack_due(value)
                    found = dict(zip(zip(keys.tolist(), panes.tolist()), deadlines.tolist()))
            self.entries[slot] = found
        return self.entries[slot]

    def add(self, keys: Any, panes: Any, deadlines: Any) -> None:
        for key, pane, deadline in zip(keys, panes, deadlines):
            entry = self._entry(int(deadline) // self.granularity)
            k = (str(key), int(pane))
            entry[k] = min(entry.get(k, int(deadline)), int(deadline))
            self.slots.add(int(deadline) // self.granularity)

    def pop_due(self, watermark: int) -> list[tuple[str, int, int]]:
        """Every entry of the slots ``watermark`` reaches (some of them may not be due yet)."""
        reached = watermark // self.granularity
        found: list[tuple[str, int, int]] = []
        for slot in sorted(s for s in self.slots if s <= reached):
            found += [(k, p, d) for (k, p), d in self._entry(slot).items()]
            self.entries[slot] = {}
            self.slots.discard(slot)
        return found

    def flush(self) -> np.ndarray:
        """Writes the changed slots; returns the sorted slots held."""
        for slot, entry in self.entries.items():
            if entry:
                keys = np.array([k for k, _ in entry], dtype=object)
                lengths, data = pack_text(keys)
                panes = np.array([p for _, p in entry], np.int64)
                deadlines = np.array(list(entry.values()), np.int64)
                self.state.updateValue((slot,), (lengths, data, panes.tobytes(), deadlines.tobytes()))
            elif slot in self.stored:
                self.state.removeKey((slot,))
        return np.array(sorted(self.slots), np.int64)


# ---- one batch of one bucket -------------------------------------------------------------------


class _Out(OutputRows):
    def __init__(self, stream_id: str | None) -> None:
        super().__init__(stream_id, WIDE_COLUMNS, STRING_COLS)


@dataclass
class Batch:
    """One batch's rows of a bucket, classified (OXJ-R19), with the watermark at every row (OXJ-R2)."""

    b: int
    seq: np.ndarray
    errors: np.ndarray  # reason or None per row
    is_event: np.ndarray
    wm_seq: np.ndarray  # the watermark rows that set it (not regressed), in order
    wm_value: np.ndarray  # the watermark after each of them
    start: int | None  # the watermark before the batch
    end: int | None  # after it


def classify(pdf: pd.DataFrame, b: int, start: int | None, bucket: int) -> Batch:
    kind = pdf["wj_kind"].to_numpy(object)
    side = pdf["wj_side"].to_numpy(object)
    key_null = pd.isna(pdf["wj_key"]).to_numpy(bool)
    et_null = pdf["wj_et_null"].to_numpy(bool)
    time_null = pdf["wj_time_null"].to_numpy(bool)
    n = len(pdf)
    errors = np.full(n, None, dtype=object)
    event = kind == "event"
    wm = kind == "watermark"
    side_null = pd.isna(pd.Series(side, dtype=object)).to_numpy(bool)
    side_known = np.isin(side, np.array(SIDES, dtype=object)) & ~side_null
    rules = (
        (kind == DUPLICATE_SEQ, DUPLICATE_SEQ),
        (~(event | wm | (kind == "value_out_of_range") | (kind == "batch_end")), "unsupported_item"),
        (kind == "value_out_of_range", "value_out_of_range"),
        (event & side_null, "missing_side"),
        (event & ~side_known, "unknown_side"),
        (event & key_null, "missing_key"),
        (event & et_null, "missing_event_time"),
        (wm & time_null, "missing_time"),
    )
    for mask, reason in rules:
        errors[mask & pd.isna(pd.Series(errors, dtype=object)).to_numpy(bool)] = reason
    marker = kind == "batch_end"
    good = pd.isna(pd.Series(errors, dtype=object)).to_numpy(bool) & ~marker
    seq = pdf["wj_seq"].to_numpy(np.int64)
    w_rows = np.flatnonzero(good & wm)
    times = pdf["wj_time"].to_numpy(np.int64)[w_rows]
    # OXJ-R2: the watermark after each row is a running maximum; below it, a row changes nothing
    running = np.maximum.accumulate(np.r_[np.int64(I64_MIN if start is None else start), times])
    regressed = times < running[:-1]
    if bucket == 0:  # every bucket sees the regression; one reports it
        errors[w_rows[regressed]] = "watermark_regressed"
    sets = w_rows[~regressed]
    values = running[1:][~regressed]
    end = int(values[-1]) if len(values) else start
    return Batch(
        b=b,
        seq=seq,
        errors=errors,
        is_event=good & event,
        wm_seq=seq[sets],
        wm_value=values,
        start=start,
        end=end,
    )


def watermark_at(batch: Batch, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(watermark, present) when each row of ``seqs`` arrives."""
    before = np.searchsorted(batch.wm_seq, seqs, side="left")
    start = np.int64(0 if batch.start is None else batch.start)
    if len(batch.wm_value):
        value = np.where(before > 0, batch.wm_value[np.maximum(before - 1, 0)], start)
    else:
        value = np.full(len(seqs), start, np.int64)
    return value.astype(np.int64), (before > 0) | (batch.start is not None)


def add_late(out: _Out, b: int, ev: pd.DataFrame, late: np.ndarray, wm: np.ndarray, route: int) -> None:
    n = int(late.sum())
    out.add(
        "late", n, batch=b, seq=ev["seq"].to_numpy(np.int64)[late],
        side=ev["side_name"].to_numpy(object)[late],
        key=ev["key"].to_numpy(object)[late], event_time=ev["time"].to_numpy(np.int64)[late],
        watermark=wm[late], kw_route=route,
    )  # fmt: skip


def add_pairs(out: _Out, b: int, pairs: pd.DataFrame, route: int) -> None:
    out.add(
        "pairs", len(pairs), batch=b, seq=pairs["emit"].to_numpy(np.int64), key=pairs["key"].to_numpy(object),
        **{f"{side}_{f}": pairs[f"{f}_{side[0]}"].to_numpy(np.int64) for side in SIDES
           for f in ("batch", "seq", "time", "value")},
        kw_route=route,
    )  # fmt: skip


EVENT_COLS = ["batch", "seq", "time", "value"]


def _events_frame(rows: list[tuple[str, int, int, np.ndarray]]) -> pd.DataFrame:
    """Held events as one frame: (key, pane, side, batch, seq, time, value, pos, held=True); a
    held event has no position in this batch (``pos`` is never read for it: a seq may be any
    int64, so no value of it can mark one)."""
    if not rows:
        frame = pd.DataFrame({c: pd.Series(dtype=object if c == "key" else np.int64) for c in
                              ["key", "pane", "side", *EVENT_COLS, "pos"]})  # fmt: skip
        frame["held"] = pd.Series(dtype=bool)
        return frame
    keys = np.concatenate([np.full(len(ev), k, dtype=object) for k, _, _, ev in rows])
    panes = np.concatenate([np.full(len(ev), p, np.int64) for _, p, _, ev in rows])
    sides = np.concatenate([np.full(len(ev), s, np.int64) for _, _, s, ev in rows])
    events = np.concatenate([ev for _, _, _, ev in rows]).reshape(-1, EVENT_FIELDS)
    frame = pd.DataFrame({"key": keys, "pane": panes, "side": sides})
    for i, c in enumerate(EVENT_COLS):
        frame[c] = events[:, i]
    frame["pos"] = np.int64(I64_MIN)
    frame["held"] = True
    return frame


def _cross(held: pd.DataFrame, on: list[str]) -> pd.DataFrame:
    """Every (left, right) of the same ``on`` values."""
    left = held[held["side"] == LEFT]
    right = held[held["side"] == RIGHT]
    pairs = left.merge(right, on=on, suffixes=("_l", "_r"))
    return pairs


def _store_groups(held: pd.DataFrame, windows: Windows, key_pane: list[str]) -> None:
    """Writes each (key, pane) group of ``held`` back as its window value."""
    if not len(held):
        return
    held = held.sort_values([*key_pane, "side", "batch", "seq"], kind="stable")
    keys = held["key"].to_numpy(object)
    panes = held["pane"].to_numpy(np.int64)
    sides = held["side"].to_numpy(np.int64)
    events = held[EVENT_COLS].to_numpy(np.int64)
    cut = np.flatnonzero(np.r_[True, (keys[1:] != keys[:-1]) | (panes[1:] != panes[:-1]), True])
    for lo, hi in zip(cut[:-1].tolist(), cut[1:].tolist()):
        part_sides = sides[lo:hi]
        part = events[lo:hi]
        windows.put(str(keys[lo]), int(panes[lo]), (part[part_sides == LEFT], part[part_sides == RIGHT]))


def pane_batch(
    cfg: StreamConfig,
    batch: Batch,
    ev: pd.DataFrame,
    windows: Windows,
    index: DueIndex,
    out: _Out,
    route: int,
) -> np.ndarray:
    """OXJ-R4..R11 for one batch: returns the counter deltas (left, right, pairs, late, open)."""
    lateness = cfg.allowed_lateness_ms
    size = cfg.size_ms if cfg.join == "tumbling_tumbling" else cfg.left_size_ms
    seqs = ev["seq"].to_numpy(np.int64)
    times = ev["time"].to_numpy(np.int64)
    sides = ev["side"].to_numpy(np.int64)
    wm, has = watermark_at(batch, seqs)
    own = np.floor_divide(times, size)
    # assignments: (event row, pane); a right event of the sliding join reaches several panes
    if cfg.join == "tumbling_sliding" and (sides == RIGHT).any():
        right = np.flatnonzero(sides == RIGHT)
        first, last = reached_left_panes(times[right], cfg)
        counts = last - first + 1
        rows = np.concatenate([np.flatnonzero(sides == LEFT), np.repeat(right, counts)])
        offsets = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        panes = np.concatenate([own[sides == LEFT], np.repeat(first, counts) + offsets])
    else:
        rows = np.arange(len(ev))
        panes = own
    deadlines = pane_deadline(panes, size, lateness)
    open_at = ~has[rows] | (wm[rows] < deadlines)  # OXJ-R7, R11: the pane not purged at arrival
    taken = np.zeros(len(ev), bool)
    taken[rows[open_at]] = True
    late = ~taken  # a left (or tumbling) event has one pane; a right one is late when none is open
    add_late(out, batch.b, ev, late, wm, route)
    rows, panes, deadlines = rows[open_at], panes[open_at], deadlines[open_at]
    new = pd.DataFrame({
        "key": ev["key"].to_numpy(object)[rows], "pane": panes, "side": sides[rows],
        "batch": np.int64(batch.b), "seq": seqs[rows], "time": times[rows],
        "value": ev["value"].to_numpy(np.int64)[rows], "pos": seqs[rows], "held": False,
    })  # fmt: skip
    touched = new[["key", "pane"]].drop_duplicates()
    touched_deadlines = pane_deadline(touched["pane"].to_numpy(np.int64), size, lateness)
    stored_rows = []
    created = 0
    for key, pane in zip(touched["key"].tolist(), touched["pane"].tolist()):
        found = windows.get(key, pane)
        if found is None:
            created += 1
            continue
        stored_rows += [(key, pane, LEFT, found[0]), (key, pane, RIGHT, found[1])]
    held = pd.concat([_events_frame(stored_rows), new], ignore_index=True)
    pairs = _cross(held, ["key", "pane"])
    pairs = pairs[~(pairs["held_l"].to_numpy(bool) & pairs["held_r"].to_numpy(bool))]
    pos_l, pos_r = pairs["pos_l"].to_numpy(np.int64), pairs["pos_r"].to_numpy(np.int64)
    held_l, held_r = pairs["held_l"].to_numpy(bool), pairs["held_r"].to_numpy(bool)
    # a pair is made when its later event arrives: the new one, or the later of two new ones
    pairs = pairs.assign(emit=np.where(held_l, pos_r, np.where(held_r, pos_l, np.maximum(pos_l, pos_r))))
    add_pairs(out, batch.b, pairs, route)
    _store_groups(held, windows, ["key", "pane"])
    purged = 0
    if batch.end is not None:  # OXJ-R4: purged at the watermark; lazily at the batch's end, unseen
        w = batch.end
        gone = touched_deadlines <= w
        for key, pane in zip(touched["key"].to_numpy(object)[gone].tolist(),
                             touched["pane"].to_numpy(np.int64)[gone].tolist()):  # fmt: skip
            windows.put(key, pane, None)
            purged += 1
        fresh = ~gone
        for key, pane, deadline in index.pop_due(w):
            if deadline <= w:  # the index lists exactly the panes held, each once
                purged += windows.drop(key, pane)
            else:
                index.add([key], [pane], [deadline])
    else:
        fresh = np.ones(len(touched), bool)
    is_new = np.array([not windows.existed[(k, p)] for k, p in zip(touched["key"], touched["pane"])], bool)
    keep = fresh & is_new
    index.add(touched["key"].to_numpy(object)[keep], touched["pane"].to_numpy(np.int64)[keep],
              touched_deadlines[keep])  # fmt: skip
    return np.array([
        int((taken & (sides == LEFT)).sum()), int((taken & (sides == RIGHT)).sum()), len(pairs),
        int(late.sum()), created - purged,
    ], np.int64)  # fmt: skip


def _runs(held: pd.DataFrame, gap: int) -> np.ndarray:
    """OXJ-R12: the session of each row of ``held`` (sorted by key, side, time): a new run where
    the key or side changes or the time is more than the gap after the previous one."""
    keys = held["key"].to_numpy(object)
    sides = held["side"].to_numpy(np.int64)
    times = held["time"].to_numpy(np.int64)
    n = len(held)
    starts = np.ones(n, bool)
    if n > 1:
        starts[1:] = (
            (keys[1:] != keys[:-1]) | (sides[1:] != sides[:-1]) | (times[1:] > sat_add(times[:-1], gap))
        )
    return np.cumsum(starts) - 1


def session_batch(
    cfg: StreamConfig,
    batch: Batch,
    ev: pd.DataFrame,
    windows: Windows,
    index: DueIndex,
    out: _Out,
    route: int,
) -> np.ndarray:
    """OXJ-R12..R16 for one batch: returns the counter deltas (left, right, pairs, late, open)."""
    gap, lateness = cfg.gap_ms, cfg.allowed_lateness_ms
    seqs = ev["seq"].to_numpy(np.int64)
    times = ev["time"].to_numpy(np.int64)
    sides = ev["side"].to_numpy(np.int64)
    wm, has = watermark_at(batch, seqs)
    late = has & (sat_add(times, lateness) <= wm)  # OXJ-R14
    add_late(out, batch.b, ev, late, wm, route)
    taken = ~late
    keys = set(ev["key"].to_numpy(object)[taken].tolist())
    if batch.end is not None:
        for key, _, _ in index.pop_due(batch.end):
            keys.add(key)
    stored_rows = []
    for key in sorted(keys):
        found = windows.get(key, 0)
        if found is not None:
            stored_rows += [(key, 0, LEFT, found[0]), (key, 0, RIGHT, found[1])]
    old = _events_frame(stored_rows)
    new = pd.DataFrame({
        "key": ev["key"].to_numpy(object)[taken], "pane": np.int64(0), "side": sides[taken],
        "batch": np.int64(batch.b), "seq": seqs[taken], "time": times[taken],
        "value": ev["value"].to_numpy(np.int64)[taken], "pos": seqs[taken], "held": False,
    })  # fmt: skip
    before = int(_runs(old.sort_values(["key", "side", "time"], kind="stable"), gap).max(initial=-1)) + 1
    held = pd.concat([old, new], ignore_index=True).sort_values(["key", "side", "time"], kind="stable")
    held = held.reset_index(drop=True)
    held["run"] = _runs(held, gap)
    runs = held.groupby("run", sort=True).agg(
        key=("key", "first"), side=("side", "first"), first=("time", "min"), last=("time", "max"),
        arrival=("pos", "max"), held_only=("held", "all"),
    )  # fmt: skip
    end = sat_add(runs["last"].to_numpy(np.int64), gap)
    deadline = sat_add(end, lateness)
    runs["end"] = end
    runs["deadline"] = deadline
    # OXJ-R14, R15: closed at the first watermark row after its last arrival that reaches the deadline
    closed_before = (batch.start is not None) & (deadline <= (0 if batch.start is None else batch.start))
    # the first watermark row after the run's last arrival; a run of held events only arrived
    # before every row of this batch
    after = np.searchsorted(batch.wm_seq, runs["arrival"].to_numpy(np.int64), side="right")
    after[runs["held_only"].to_numpy(bool)] = 0
    reach = np.searchsorted(batch.wm_value, deadline, side="left")
    at = np.maximum(after, reach)
    closes = at < len(batch.wm_seq)
    closing_seq = batch.wm_seq[np.minimum(at, len(batch.wm_seq) - 1)] if len(batch.wm_seq) else 0
    close_pos = np.where(closed_before, I64_MIN, np.where(closes, closing_seq, I64_MAX))
    runs["closed"] = closed_before | closes
    runs["closed_before"] = np.broadcast_to(closed_before, len(runs))
    runs["close_pos"] = close_pos.astype(np.int64)
    runs = runs.reset_index()
    sessions_l = runs[runs["side"] == LEFT]
    sessions_r = runs[runs["side"] == RIGHT]
    both = sessions_l.merge(sessions_r, on="key", suffixes=("_l", "_r"))
    overlap = (both["first_l"].to_numpy(np.int64) <= both["end_r"].to_numpy(np.int64)) & (
        both["first_r"].to_numpy(np.int64) <= both["end_l"].to_numpy(np.int64)
    )
    both = both[overlap]
    emit = np.maximum(both["close_pos_l"].to_numpy(np.int64), both["close_pos_r"].to_numpy(np.int64))
    # made in this batch: both closed, not both before it (those pairs were made already)
    both_before = both["closed_before_l"].to_numpy(bool) & both["closed_before_r"].to_numpy(bool)
    ready = both["closed_l"].to_numpy(bool) & both["closed_r"].to_numpy(bool) & ~both_before
    chosen = both[ready].assign(emit=emit[ready])[["run_l", "run_r", "emit", "key"]]
    left_events = held[held["side"] == LEFT][["run", *EVENT_COLS]]
    right_events = held[held["side"] == RIGHT][["run", *EVENT_COLS]]
    pairs = chosen.merge(
        left_events.rename(columns={"run": "run_l", **{c: f"{c}_l" for c in EVENT_COLS}}), on="run_l"
    ).merge(right_events.rename(columns={"run": "run_r", **{c: f"{c}_r" for c in EVENT_COLS}}), on="run_r")
    add_pairs(out, batch.b, pairs, route)
    # OXJ-R16: a closed session goes once every overlapping session of the other side is closed
    open_partner = np.zeros(len(runs), bool)
    waiting = both[~(both["closed_l"].to_numpy(bool) & both["closed_r"].to_numpy(bool))]
    open_partner[waiting["run_l"].to_numpy(np.int64)[~waiting["closed_r"].to_numpy(bool)]] = True
    open_partner[waiting["run_r"].to_numpy(np.int64)[~waiting["closed_l"].to_numpy(bool)]] = True
    keep_run = ~(runs["closed"].to_numpy(bool) & ~open_partner)
    kept = held[keep_run[held["run"].to_numpy(np.int64)]]
    for key in keys - set(kept["key"].tolist()):
        windows.put(key, 0, None)
    _store_groups(kept, windows, ["key", "pane"])
    open_runs = runs[~runs["closed"].to_numpy(bool)]
    if len(open_runs):
        next_due = open_runs.groupby("key", sort=False)["deadline"].min()
        index.add(next_due.index.to_numpy(object), np.zeros(len(next_due), np.int64),
                  next_due.to_numpy(np.int64))  # fmt: skip
    after_count = int(keep_run.sum())
    return np.array([
        int((taken & (sides == LEFT)).sum()), int((taken & (sides == RIGHT)).sum()), len(pairs),
        int(late.sum()), after_count - before,
    ], np.int64)  # fmt: skip


# ---- the wide stage ----------------------------------------------------------------------------

_DEFAULTS = {"wj_kind": "event", "wj_time": np.int64(0), "wj_time_null": True, "wj_value": np.int64(0)}


_SEQ_BITS = np.int64(sum(1 << LONG_COLS.index(c) for c in ("seq", "left_seq", "right_seq")))


class JoinBucketProcessor(WideStage):
    """The wide stage: one call per (stream, key bucket) and micro-batch."""

    defaults = _DEFAULTS

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_state = handle.getValueState("bucket", BUCKET_SCHEMA)
        self.windows = handle.getMapState("windows", WINDOW_KEY_SCHEMA, WINDOW_SCHEMA)
        self.due = handle.getMapState("due", DUE_KEY_SCHEMA, DUE_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, cfg: StreamConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        if not self.ordered:
            pdf = pdf.assign(wj_seq=np.arange(len(pdf), dtype=np.int64))
        stored = self.bucket_state.get()
        if stored is not None:
            st = BucketState.from_tuple(stored, self.buckets)
            st.check(cfg)
        else:
            st = BucketState(self.buckets, cfg.join, cfg.settings())
        windows = Windows(self.windows)
        index = DueIndex(self.due, st.slots, cfg.granularity)
        out = _Out(stream_id)
        pdf = pdf.sort_values(["wj_batch", "wj_seq"], kind="stable")
        for b, part in batches_in(pdf, "wj_batch", True, 0):
            batch = classify(part, b, st.watermark, bucket)
            bad = pd.notna(pd.Series(batch.errors, dtype=object)).to_numpy(bool)
            out.add(
                "errors",
                int(bad.sum()),
                batch=b,
                seq=batch.seq[bad],
                reason=batch.errors[bad],
                kw_route=bucket,
            )
            events = part[batch.is_event]
            side = events["wj_side"].to_numpy(object)
            ev = pd.DataFrame({
                "key": events["wj_key"].to_numpy(object), "side": np.where(side == "left", LEFT, RIGHT),
                "side_name": side, "seq": events["wj_seq"].to_numpy(np.int64),
                "time": events["wj_et"].to_numpy(np.int64), "value": events["wj_value"].to_numpy(np.int64),
            })  # fmt: skip
            step = session_batch if cfg.join == "session_session" else pane_batch
            deltas = step(cfg, batch, ev, windows, index, out, bucket)
            st.watermark = batch.end
            wm = batch.end
            out.add(
                "summary", 1, batch=b, kw_route=SUMMARY_ROUTE,
                watermark=(np.array([0 if wm is None else wm], np.int64), np.array([wm is None])),
                **dict(zip(SUMMARY_COLS, deltas.tolist())),
            )  # fmt: skip
        windows.flush()
        st.slots = index.flush()
        self.bucket_state.update(st.to_tuple())
        frame = out.masked_frame(NULL_MASK)
        if not self.ordered:  # without an arrival-order column no seq is reported
            frame[NULL_MASK] = frame[NULL_MASK].to_numpy(np.int64) | _SEQ_BITS
        yield frame


# ---- the narrow stage --------------------------------------------------------------------------

_WATERMARK_BIT = np.int64(1 << LONG_COLS.index("watermark"))


def summarise_batch(st: StreamState, rows: pd.DataFrame, b: int, out: OutputRows) -> None:
    """OXJ-R17: the batch's counter deltas added to the totals, then its progress row."""
    summaries = rows[rows["output"].to_numpy(object) == "summary"]
    deltas = summaries[list(SUMMARY_COLS)].to_numpy(np.int64).sum(axis=0)
    st.counts = tuple(int(c + d) for c, d in zip(st.counts, deltas.tolist()))
    present = (summaries[NULL_MASK].to_numpy(np.int64) & _WATERMARK_BIT) == 0
    marks = summaries["watermark"].to_numpy(np.int64)[present]
    if len(marks):
        top = int(marks.max())
        st.watermark = top if st.watermark is None else max(st.watermark, top)
    wm = st.watermark
    out.add(
        "progress", 1, batch=b,
        watermark=(np.array([0 if wm is None else wm], np.int64), np.array([wm is None])),
        **dict(zip(COUNTERS, st.counts)),
    )  # fmt: skip


class StreamTotalsProcessor(BatchSummaryStage):
    """The narrow stage (route -1): the watermark and the totals; other routes pass through."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)
    state_schema = STREAM_SCHEMA
    state_class = StreamState
    string_cols = STRING_COLS
    summarise_batch = staticmethod(summarise_batch)

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("totals", self.state_schema)


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
        (long_or_zero(batch_col) if batch_col else F.unix_millis(F.current_timestamp())).alias("wj_batch"),
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
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
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
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
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
    "ENGINE_BUCKETS",
    "LAYOUT_VERSION",
    "OUTPUT_SCHEMA",
    "BucketState",
    "JoinBucketProcessor",
    "StreamConfig",
    "StreamState",
    "StreamTotalsProcessor",
    "WindowJoinStreams",
    "engine_output",
    "engine_streams",
    "pane_deadline",
    "reached_left_panes",
    "unpack_due",
    "unpack_window",
    "validate_config",
    "window_join_rows",
    "window_joins",
]
