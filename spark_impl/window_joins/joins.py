"""Window joins (oxirs): one batch of one bucket, pure pandas and numpy: the rows classified, the
panes of tumbling and sliding joins and the sessions of session joins, late events and pairs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN
from spark_impl.common import (
    OutputRows,
)
from spark_impl.scaleout import (
    DUPLICATE_SEQ,
)
from spark_impl.window_joins.layout import (
    EVENT_FIELDS,
    STRING_COLS,
    WIDE_COLUMNS,
    DueIndex,
    Windows,
)
from spark_impl.window_joins.panes import (
    pane_deadline,
    reached_left_panes,
    sat_add,
)
from spark_impl.window_joins.settings import (
    LEFT,
    RIGHT,
    SIDES,
    StreamConfig,
)

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
