"""Per-partition watermarks (F064): the stateful processors: one batch of one bucket (the wide
stage, pure pandas and numpy) and the per-stream step (the narrow stage, or the sink step)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN, PARTITIONED_REQUIRED_FIELDS
from spark_impl.checkpoints import (
    decoding,
    missing_value,
)
from spark_impl.common import (
    OutputRows,
    StatefulProcessorHandle,
    batches_in,
    opt,
    sat_sub,
)
from spark_impl.partitioned_watermarks.layout import (
    AFTER,
    AGG_FIELDS,
    BEFORE,
    BLOCK_FIELDS,
    BLOCK_SCHEMA,
    BUCKET_SCHEMA,
    CHANGE,
    EMPTY,
    FINAL,
    LAST,
    MARKER,
    OUTPUT_COLUMNS,
    PARTITION_KINDS,
    PROBE,
    SOURCE_KEY_SCHEMA,
    SOURCE_SCHEMA,
    STREAM_SCHEMA,
    STRING_COLS,
    SUMMARY_COLS,
    TICK,
    UPDATE_KINDS,
    BucketState,
    Partitions,
    StreamState,
    _lookup,
    candidate,
    combine,
    figures_of,
    pack_block,
    unpack_blocks,
)
from spark_impl.partitioned_watermarks.settings import (
    U32_MAX,
    StreamConfig,
)
from spark_impl.scaleout import (
    DUPLICATE_SEQ,
    NULL_MASK,
    SecondStage,
    WideStage,
)

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
