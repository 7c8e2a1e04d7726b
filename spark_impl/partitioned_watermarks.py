"""Per-partition watermarks (F064) on Spark Structured Streaming.

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
are taken in event-time order, ties by source and partition), ``kind_col``
(needs ``seq_col``: event | watermark | clock | idle | active |
register_source | add_partition | remove_partition | assign_core, and the
harness's batch_end marker), ``time_col`` (the time of clock and watermark
rows), ``count_col`` (register_source), ``core_col`` (assign_core),
``batch_col`` (the batch number reported; without it the operator counts the
micro-batches of each stream). Rebalancing is expressed as control rows in
the stream itself (register_source re-registration, add_partition,
remove_partition, assign_core). ``stream_configs`` maps a stream id to its own
trace-style settings (``idle_timeout``, ``max_lateness``).

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

Processing time is the time of the latest ``clock`` row of the stream
(starting at 0), never the wall clock; a clock row runs the idle check
(F064-R11). Without clock rows no partition idles by timeout.

Design (how Spark realises the clauses)
---------------------------------------
- ONE GROUP PER STREAM (R6-R8, R11, R13, R16): the combined watermark is a
  min over every partition, "all idle means max", idle checks touch
  partitions that got no rows, and re-registration resizes a whole source,
  so all partitions of a stream live in ONE state value:
  ``groupBy(stream_id).transformWithStateInPandas(..., timeMode="None")``.
  ``timeMode="None"``: Spark's one global watermark would drop a slow
  partition's rows before the operator saw them (see
  ``native_watermark_report``); the watermarks are kept in state instead.
- STATE (R23): one ValueState per stream (RocksDB provider), one read and one
  write per stream and micro-batch. It holds a layout version, the scalars
  (clock, combined watermark, watermark_advances, rebalances, micro-batches
  seen), the registered sources, and the partition table as parallel arrays
  (source, partition, watermark + has-watermark flag, last_activity, idle,
  core or -1). Another layout version is refused with a clear message.
- ORDER (R20, R22): rows are sorted by the explicit seq column.
- VECTORISED STEPS (R4, R5, R20): consecutive event/watermark rows form one
  step. Their errors (missing fields, numbers out of range, unknown source or
  partition) are decided with vector operations against the tracked set,
  which no update changes; an error row ends the step. A step's updates
  reduce to one maximum per partition (a groupby), merged into the table
  with numpy (watermark = max(old, new), last_activity = clock, idle
  cleared), and the combined watermark is evaluated once per step (R7: it
  only rises; an advance is counted when it does, R16).
- CONTROL ROWS (R2, R9-R13, R17, R22) are applied one by one, in seq order;
  the idle check of a clock row is one vector comparison (strict >, R11).
- SATURATING i64: an event's watermark is max(i64 min, t - max_lateness)
  (R5); nullable longs cross into the worker as value + null flag.
- OUTPUT (R21): progress once per stream and micro-batch in which the stream
  has rows (the harness adds a batch_end row per trace and batch);
  partition and source rows from a vectorised comparison of the batch-start
  and batch-end views.
- Not kept: a partition's last event time (F064-R3 state, not observable in
  any output).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN, PARTITIONED_REQUIRED_FIELDS, InvalidConfig
from spark_impl.common import (
    OutputRows,
    StreamGroupProcessor,
    batches_in,
    check_columns,
    event_time_millis,
    long_or_zero,
    native_watermark_progress,
    one_group_per_stream,
    opt,
    require_int,
    sat_sub,
    stream_id_column,
    stream_settings,
    table_projections,
    with_defaults,
)

LAYOUT_VERSION = 1
STATE_NAME = "partitioned_watermarks"
U32_MAX = 2**32 - 1
CONFIG_KEYS = ("idle_timeout", "max_lateness")
UPDATE_KINDS = ("event", "watermark")
MARKER = "batch_end"  # the harness's end-of-batch row: no effect, no output of its own

STRING_COLS = ("output", "stream_id", "state", "reason")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "source", "partition", "combined_watermark",
    "total_partitions", "active_partitions", "idle_partitions", "watermark_advances", "rebalances",
    "watermark", "state", "core", "reason",
)  # fmt: skip
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)
STATE_SCHEMA = (
    "layout_version int, clock long, combined long, advances long, rebalances long, batches long, "
    "sources array<long>, src array<long>, part array<long>, wm array<long>, has_wm array<boolean>, "
    "last array<long>, idle array<boolean>, core array<long>"
)
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "progress": (
        "stream_id", "batch", "combined_watermark", "total_partitions", "active_partitions",
        "idle_partitions", "watermark_advances", "rebalances",
    ),
    "partitions": ("stream_id", "batch", "source", "partition", "watermark", "state", "core"),
    "sources": ("stream_id", "batch", "source", "watermark", "active_partitions"),
    "errors": ("stream_id", "batch", "seq", "reason"),
}  # fmt: skip


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


# ---- the partition table and the stream state -------------------------------


def _candidate(has: np.ndarray, wm: np.ndarray, idle: np.ndarray) -> int | None:
    """F064-R6: the watermark a set of partitions allows, None when it allows none."""
    active = ~idle
    if active.any():
        if not has[active].all():
            return None  # F064-R8: an active partition without a watermark holds everything
        return int(wm[active].min())
    return int(wm[has].max()) if has.any() else None  # all idle: the highest known watermark


def _lookup(src: np.ndarray, part: np.ndarray, q_src: np.ndarray, q_part: np.ndarray) -> np.ndarray:
    """Index of each (q_src, q_part) in the table (src, part), -1 when absent."""
    if len(src) == 0:
        return np.full(len(q_src), -1, np.int64)
    if len(q_src) == 0:
        return np.empty(0, np.int64)
    if max(int(src.max()), int(q_src.max())) < 2**31 and min(int(src.min()), int(q_src.min())) >= 0:
        # Partitions are < 2^32 once checked: one int64 key per pair.
        pos = pd.Index((src << 32) | part).get_indexer(pd.Index((q_src << 32) | (q_part & U32_MAX)))
        return np.where((q_part >= 0) & (q_part <= U32_MAX), pos, -1).astype(np.int64)
    table = pd.MultiIndex.from_arrays([src, part])
    return np.asarray(table.get_indexer(pd.MultiIndex.from_arrays([q_src, q_part])), np.int64)


@dataclass
class Partitions:
    """Every tracked partition of one stream, column-wise."""

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

    def candidate(self, mask: np.ndarray | None = None) -> int | None:
        if mask is None:
            return _candidate(self.has_wm, self.wm, self.idle)
        return _candidate(self.has_wm[mask], self.wm[mask], self.idle[mask])


@dataclass
class StreamState:
    """Everything one stream keeps across micro-batches (one ValueState)."""

    clock: int = 0
    combined: int | None = None
    advances: int = 0
    rebalances: int = 0
    batches: int = 0
    sources: set[int] = field(default_factory=set)
    parts: Partitions = field(default_factory=Partitions)

    def to_tuple(self) -> tuple[Any, ...]:
        t = self.parts
        return (
            LAYOUT_VERSION, self.clock, self.combined, self.advances, self.rebalances, self.batches,
            sorted(self.sources), *(getattr(t, c).tolist() for c in Partitions.COLUMNS),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...]) -> StreamState:
        version = value[0]
        if version != LAYOUT_VERSION:
            raise RuntimeError(
                f"partitioned_watermarks: the checkpoint holds state layout version {version}; this "
                f"release reads version {LAYOUT_VERSION} only. Start from a new checkpoint."
            )
        dtypes = (np.int64, np.int64, np.int64, bool, np.int64, bool, np.int64)
        cols = [np.asarray(list(v or ()), dtype=d) for v, d in zip(value[7:], dtypes, strict=True)]
        return cls(
            clock=int(value[1]), combined=None if value[2] is None else int(value[2]),
            advances=int(value[3]), rebalances=int(value[4]), batches=int(value[5]),
            sources={int(s) for s in value[6] or ()}, parts=Partitions(*cols),
        )  # fmt: skip

    def advance(self) -> None:
        """F064-R6, R7, R16: the combined watermark only rises; an advance is counted when it does."""
        c = self.parts.candidate()
        if c is not None and (self.combined is None or c > self.combined):
            self.combined = c
            self.advances += 1


# ---- processing one stream's rows (pure pandas/numpy; runs in the worker) ---


@dataclass
class _Rows:
    """A micro-batch of one stream in seq order, as numpy columns (null flags beside longs)."""

    kind: np.ndarray
    seq: np.ndarray
    vals: dict[str, np.ndarray]
    nulls: dict[str, np.ndarray]

    LONGS = ("source", "partition", "event_time", "time", "count", "core")

    @classmethod
    def of(cls, rows: pd.DataFrame) -> _Rows:
        rows = rows.sort_values("pw_seq", kind="stable")
        vals = {c: rows[f"pw_{c}"].to_numpy(np.int64) for c in cls.LONGS}
        nulls = {c: rows[f"pw_{c}_null"].to_numpy(bool) for c in cls.LONGS}
        return cls(rows["pw_kind"].to_numpy(object), rows["pw_seq"].to_numpy(np.int64), vals, nulls)

    def get(self, name: str, i: int) -> int | None:
        return None if self.nulls[name][i] else int(self.vals[name][i])


def process_rows(
    state: StreamState, rows: pd.DataFrame, cfg: StreamConfig, stream_id: str, has_batch: bool,
    auto_register: bool = False,
) -> pd.DataFrame:  # fmt: skip
    """Applies one call's rows of one stream to its state; returns the output rows.

    ``rows`` has the normalised columns built by ``partitioned_watermarks``:
    pw_batch, pw_seq, pw_kind and, for each of source, partition, event_time,
    time, count, core, ``pw_<name>`` (long) and ``pw_<name>_null``.
    """
    out = OutputRows(stream_id, OUTPUT_COLUMNS, STRING_COLS)
    for b, part in batches_in(rows, "pw_batch", has_batch, state.batches):
        _Batch(state, cfg, b, out, auto_register).run(_Rows.of(part))
        state.batches += 1
    return out.frame()


class _Batch:
    """One micro-batch of one stream (F064-R20..R22)."""

    def __init__(self, st: StreamState, cfg: StreamConfig, b: int, out: OutputRows, auto: bool) -> None:
        self.st, self.cfg, self.b, self.out, self.auto = st, cfg, b, out, auto

    def run(self, r: _Rows) -> None:
        st = self.st
        start_parts, start_sources = st.parts.copy(), self._source_view()
        is_update = np.isin(r.kind, UPDATE_KINDS)
        prev = 0
        n = len(r.kind)
        for c in [*np.flatnonzero(~is_update).tolist(), n]:
            if c > prev:
                self._updates(r, prev, c)
            if c < n:
                self._control(r, c)
            prev = c + 1
        t = st.parts
        idle = int(t.idle.sum())
        self.out.add(
            "progress", 1, batch=self.b, combined_watermark=opt(st.combined), total_partitions=len(t),
            active_partitions=len(t) - idle, idle_partitions=idle, watermark_advances=st.advances,
            rebalances=st.rebalances,
        )  # fmt: skip
        self._partition_changes(start_parts)
        self._source_changes(start_sources)

    # -- steps of updates (F064-R4, R5, R20) --

    def _updates(self, r: _Rows, lo: int, hi: int) -> None:
        st = self.st
        kind = r.kind[lo:hi]
        v = {c: a[lo:hi] for c, a in r.vals.items()}
        nul = {c: a[lo:hi] for c, a in r.nulls.items()}
        src, part = v["source"], v["partition"]
        is_event = kind == "event"
        m = hi - lo
        pos = _lookup(st.parts.src, st.parts.part, src, part)
        err = np.full(m, None, dtype=object)
        # Assigned from the last check to the first, so the first failing check wins (F064-R22).
        if not self.auto:
            err[pos < 0] = "unknown_partition"
            err[~np.isin(src, np.fromiter(st.sources, np.int64, len(st.sources)))] = "unknown_source"
        err[(src < 0) | (part < 0) | (part > U32_MAX)] = "invalid_partition"  # F064-R1
        err[is_event & nul["event_time"]] = "missing_event_time"
        err[~is_event & nul["time"]] = "missing_time"
        err[nul["partition"]] = "missing_partition"
        err[nul["source"]] = "missing_source"
        value = np.where(is_event, sat_sub(v["event_time"], self.cfg.max_lateness), v["time"])  # F064-R5
        bad = np.flatnonzero(err != None)  # noqa: E711 - elementwise
        start = 0
        for e in [*bad.tolist(), m]:
            if e > start:  # an error row ends the step (F064-R22)
                self._step(src[start:e], part[start:e], pos[start:e], value[start:e])
            start = e + 1
        if len(bad):
            self.out.add("errors", len(bad), batch=self.b, seq=r.seq[lo:hi][bad], reason=err[bad])

    def _step(self, src: np.ndarray, part: np.ndarray, pos: np.ndarray, value: np.ndarray) -> None:
        st = self.st
        t = st.parts
        if self.auto and (pos < 0).any():
            self._discover(src[pos < 0], part[pos < 0])
            pos = _lookup(t.src, t.part, src, part)
        top = pd.Series(value).groupby(pos, sort=False).max()  # one maximum per partition
        i = top.index.to_numpy(np.int64)
        w = top.to_numpy(np.int64)
        t.wm[i] = np.where(t.has_wm[i], np.maximum(t.wm[i], w), w)  # F064-R4: never goes back
        t.has_wm[i] = True
        t.last[i] = st.clock  # F064-R4: activity
        t.idle[i] = False  # F064-R4: reactivates
        st.advance()  # F064-R20: once per step

    def _discover(self, src: np.ndarray, part: np.ndarray) -> None:
        """auto_register: unknown sources registered, unknown partitions added fresh."""
        pairs = pd.DataFrame({"s": src, "p": part}).drop_duplicates()
        self.st.sources.update(int(s) for s in pairs["s"].unique())
        self.st.parts.add_fresh(pairs["s"].to_numpy(np.int64), pairs["p"].to_numpy(np.int64), self.st.clock)

    # -- control rows (F064-R2, R9..R13, R17, R22), one at a time --

    def _control(self, r: _Rows, i: int) -> None:
        kind = r.kind[i]
        if kind == MARKER:
            return
        reason = self._control_error(r, kind, i)
        if reason is not None:
            self.out.add("errors", 1, batch=self.b, seq=r.seq[i : i + 1], reason=reason)
            return
        st, t = self.st, self.st.parts
        s, p, time = r.get("source", i), r.get("partition", i), r.get("time", i)
        if kind == "clock":
            assert time is not None
            st.clock = time
            t.idle |= (time - t.last) > self.cfg.idle_timeout  # F064-R11: strict >
            st.advance()
        elif kind == "register_source":
            self._register(int(s), int(r.vals["count"][i]))  # type: ignore[arg-type]
        elif kind == "add_partition":  # F064-R12
            t.add_fresh(s, np.array([p], np.int64), st.clock)  # type: ignore[arg-type]
            st.rebalances += 1
        elif kind == "remove_partition":  # F064-R13: untracked -> no-op
            j = t.find(s, p)  # type: ignore[arg-type]
            if j >= 0:
                t.keep(np.arange(len(t)) != j)
                st.rebalances += 1
                st.advance()
        else:
            j = t.find(s, p)  # type: ignore[arg-type]
            if kind == "idle":  # F064-R9
                t.idle[j] = True
                st.advance()
            elif kind == "active":  # F064-R10
                t.idle[j] = False
                t.last[j] = st.clock
            else:  # assign_core, F064-R17
                t.core[j] = r.vals["core"][i]

    def _register(self, s: int, count: int) -> None:
        """F064-R2: a first registration tracks 0..count-1; a later one resizes the source."""
        st, t = self.st, self.st.parts
        first = s not in st.sources
        st.sources.add(s)
        mine = t.src == s
        dropped = mine & (t.part >= count)
        t.keep(~dropped)
        new = np.setdiff1d(np.arange(count, dtype=np.int64), t.part[t.src == s])
        t.add_fresh(s, new, st.clock)
        if not first:
            st.rebalances += int(dropped.sum()) + len(new)
        st.advance()

    def _control_error(self, r: _Rows, kind: str, i: int) -> str | None:
        required = PARTITIONED_REQUIRED_FIELDS.get(kind)
        if required is None:
            return "unsupported_item"
        for name in required:
            if r.nulls[name][i]:
                return f"missing_{name}"
        st = self.st
        if kind == "clock":
            return "clock_went_backwards" if r.vals["time"][i] < st.clock else None
        s = int(r.vals["source"][i])
        p = r.get("partition", i) or 0  # register_source: a given partition is range-checked too
        if s < 0 or not 0 <= p <= U32_MAX:
            return "invalid_partition"  # F064-R1
        if kind == "register_source":
            return None if 0 <= r.vals["count"][i] <= U32_MAX + 1 else "invalid_partition"
        if kind == "assign_core" and r.vals["core"][i] < 0:
            return "invalid_partition"  # F064-R17
        if s not in st.sources:
            return None if kind == "remove_partition" else "unknown_source"  # F064-R13
        tracked = st.parts.find(s, p) >= 0
        if kind == "add_partition":
            return "invalid_partition" if tracked else None  # F064-R12
        if kind != "remove_partition" and not tracked:
            return "unknown_partition"
        return None

    # -- the batch's output (F064-R21) --

    def _source_view(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per registered source: its R14 watermark (value, null flag) and active partitions."""
        st, t = self.st, self.st.parts
        sources = np.array(sorted(st.sources), np.int64)
        active = ~t.idle
        per = pd.DataFrame(
            {
                "s": t.src, "active": active, "held": active & ~t.has_wm,
                "amin": np.where(active, t.wm, I64_MAX), "known": t.has_wm,
                "kmax": np.where(t.has_wm, t.wm, I64_MIN),
            }
        ).groupby("s").agg(active=("active", "sum"), held=("held", "sum"), amin=("amin", "min"),
                          known=("known", "sum"), kmax=("kmax", "max"))  # fmt: skip
        j = per.index.get_indexer(pd.Index(sources))
        has = j >= 0  # a source registered with no partitions: no watermark, none active
        jj = np.where(has, j, 0)

        def col(name: str) -> np.ndarray:
            values = per[name].to_numpy(np.int64)
            return np.where(has, values[jj], 0) if len(values) else np.zeros(len(sources), np.int64)

        act, amin, kmax = col("active"), col("amin"), col("kmax")
        null = np.where(act > 0, col("held") > 0, col("known") == 0)  # F064-R6 per source
        wm = np.where(null, 0, np.where(act > 0, amin, kmax))
        return sources, wm, null, act

    def _source_changes(self, start: tuple[np.ndarray, ...]) -> None:
        s_src, s_wm, s_null, s_act = start
        src, wm, null, act = self._source_view()
        j = pd.Index(s_src).get_indexer(pd.Index(src))
        jj = np.where(j >= 0, j, 0)
        if len(s_src):
            same = (j >= 0) & (s_null[jj] == null) & (s_wm[jj] == wm) & (s_act[jj] == act)
        else:
            same = np.zeros(len(src), bool)
        c = ~same
        if c.any():
            self.out.add(
                "sources", int(c.sum()), batch=self.b, source=src[c], watermark=(wm[c], null[c]),
                active_partitions=act[c],
            )  # fmt: skip

    def _partition_changes(self, s: Partitions) -> None:
        e = self.st.parts
        j = _lookup(e.src, e.part, s.src, s.part)
        gone = j < 0
        if gone.any():
            self.out.add("partitions", int(gone.sum()), batch=self.b, source=s.src[gone],
                         partition=s.part[gone], watermark=None, state="removed", core=None)  # fmt: skip
        k = j[~gone]
        same = (
            (s.has_wm[~gone] == e.has_wm[k]) & ((s.wm[~gone] == e.wm[k]) | ~e.has_wm[k])
            & (s.idle[~gone] == e.idle[k]) & (s.core[~gone] == e.core[k])
        )  # fmt: skip
        changed = np.ones(len(e), bool)
        changed[k[same]] = False
        if changed.any():
            c = changed
            self.out.add(
                "partitions", int(c.sum()), batch=self.b, source=e.src[c], partition=e.part[c],
                watermark=(e.wm[c], ~e.has_wm[c]), state=np.where(e.idle[c], "idle", "active").astype(object),
                core=(e.core[c], e.core[c] < 0),
            )  # fmt: skip


# ---- the Spark operator -----------------------------------------------------

_DEFAULTS: dict[str, Any] = {"pw_batch": np.int64(0), "pw_seq": np.int64(0), "pw_kind": "event"}
for _name in _Rows.LONGS:
    _DEFAULTS[f"pw_{_name}"] = np.int64(0)
    _DEFAULTS[f"pw_{_name}_null"] = True


class PartitionedWatermarkProcessor(StreamGroupProcessor[StreamConfig]):
    """The stateful processor: one call per stream (group) and micro-batch."""

    state_name = STATE_NAME
    state_schema = STATE_SCHEMA
    state_class = StreamState

    def __init__(
        self, default: StreamConfig, per_stream: Mapping[str, StreamConfig], has_batch: bool,
        ordered: bool, auto_register: bool,
    ) -> None:  # fmt: skip
        super().__init__(default, per_stream, has_batch)
        self.ordered, self.auto_register = ordered, auto_register

    def prepare(self, pdf: pd.DataFrame) -> pd.DataFrame:
        pdf = with_defaults(pdf, _DEFAULTS)
        if not self.ordered:  # no seq column: event-time order, ties by source and partition
            pdf = pdf.sort_values(["pw_event_time", "pw_source", "pw_partition"], kind="stable")
            pdf["pw_seq"] = np.arange(len(pdf), dtype=np.int64)
        return pdf

    def process(self, st: StreamState, pdf: pd.DataFrame, cfg: StreamConfig, stream_id: str) -> pd.DataFrame:
        return process_rows(st, pdf, cfg, stream_id, self.has_batch, self.auto_register)


@dataclass
class PartitionedWatermarkStreams:
    """The operator's output: ``output`` (combined) and its projections."""

    output: Any
    progress: Any
    partitions: Any
    sources: Any
    errors: Any


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
) -> PartitionedWatermarkStreams:
    """Applies F064 per-partition watermarks to a streaming DataFrame (see the module docstring).

    Raises ``harness.traces.InvalidConfig`` for a bad setting or column.
    """
    from pyspark.sql import functions as F

    default, per_stream = stream_settings(
        validate_config, {"idle_timeout": idle_timeout_ms, "max_lateness": max_lateness_ms}, stream_configs
    )
    if not isinstance(auto_register, bool):
        raise InvalidConfig(f"auto_register must be True or False, got {auto_register!r}")
    fields = {f.name: f.dataType for f in df.schema.fields}
    longs = {"source": source_col, "partition": partition_col, "time": time_col, "count": count_col,
             "core": core_col, "seq": seq_col, "batch": batch_col}  # fmt: skip
    named = {**{f"{k}_col": v for k, v in longs.items()}, "event_time_col": event_time_col,
             "stream_id_col": stream_id_col, "kind_col": kind_col}  # fmt: skip
    check_columns(fields, named, [f"{k}_col" for k in longs], kind_col, seq_col)
    et = event_time_millis(fields, event_time_col)

    # Only the columns the input has cross into the Python worker; nullable longs as value + flag.
    cols = [stream_id_column(stream_id_col, "pw_sid")]
    exprs = {"event_time": et, **{k: F.col(v).cast("long") for k, v in longs.items() if v is not None}}
    for name, expr in exprs.items():
        cols.append(long_or_zero(expr).alias(f"pw_{name}"))
        if name not in ("seq", "batch"):
            cols.append(expr.isNull().alias(f"pw_{name}_null"))
    if kind_col:
        cols.append(F.col(kind_col).cast("string").alias("pw_kind"))
    processor = PartitionedWatermarkProcessor(
        default, per_stream, batch_col is not None, seq_col is not None, auto_register
    )
    output = one_group_per_stream(df, cols, "pw_sid", processor, OUTPUT_SCHEMA)
    return PartitionedWatermarkStreams(output=output, **table_projections(output, TABLE_COLUMNS))


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


__all__ = [
    "LAYOUT_VERSION",
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "PartitionedWatermarkProcessor",
    "PartitionedWatermarkStreams",
    "StreamConfig",
    "StreamState",
    "partitioned_watermarks",
    "native_watermark_report",
    "process_rows",
    "validate_config",
]


def engine_output(df: Any, stream_configs: Mapping[str, Mapping[str, Any]]) -> Any:
    """The harness engine's call (spark_impl.engine.area_module): its input columns, one stream per trace."""
    return partitioned_watermarks(
        df, source_col="source", partition_col="partition", event_time_col="event_time",
        stream_id_col="trace_id", seq_col="seq", kind_col="kind", time_col="time", count_col="count",
        core_col="core", batch_col="batch", stream_configs=stream_configs,
    ).output  # fmt: skip
