"""Keyed watermarks (F065): the exact tracker of one bucket of one stream, as the wide stage runs it
(pure pandas and numpy; F065-R1..R25, R38)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN
from spark_impl.common import (
    VALUE_OUT_OF_RANGE,
    OutputRows,
)
from spark_impl.common import sat_sub as _sat_sub
from spark_impl.keyed_watermarks.layout import (
    _WINDOW_NUMBERS,
    OUTPUT_COLUMNS,
    STRING_COLS,
    SUMMARY_COLS,
    Aggregate,
    BucketState,
    _Keys,
    _no_windows,
)
from spark_impl.keyed_watermarks.settings import StreamConfig
from spark_impl.scaleout import DUPLICATE_SEQ

# ---- saturating i64 arithmetic (TR-2) -------------------------------------


def _sat_sub1(a: int, d: int) -> int:
    return max(I64_MIN, a - d)


def _sat_add(a: np.ndarray, s: int | np.ndarray) -> np.ndarray:
    """min(i64 max, a + s) for s >= 0, without wrapping."""
    step = np.asarray(s, dtype=np.int64)
    with np.errstate(over="ignore"):
        return np.where(a > I64_MAX - step, np.int64(I64_MAX), a + step)


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
