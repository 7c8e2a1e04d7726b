"""SLA admission's stages: one stream's events admitted, rejected, shed or throttled, one bucket's
batch (the clock, the load and each event's decision) in the wide stage's processor, and the per-
stream counters in the narrow one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN
from spark_impl.common import OutputRows, StatefulProcessorHandle, batches_in
from spark_impl.scaleout import DUPLICATE_SEQ, NULL_MASK, SUMMARY_ROUTE, SecondStage, WideStage
from spark_impl.sla_admission.layout import (
    BUCKET_SCHEMA,
    OUTPUT_COLUMNS,
    SLA_KEY_SCHEMA,
    SLA_VALUE_SCHEMA,
    STREAM_SCHEMA,
    STRING_COLS,
    SUMMARY_COLS,
    BucketState,
    SlaEntry,
    StreamState,
)
from spark_impl.sla_admission.rules import (
    draw_of,
    drop_probabilities,
    load_score,
    metrics_report,
    saturating_lag,
)
from spark_impl.sla_admission.settings import (
    ADMIT,
    BY_JITTER,
    BY_LAG,
    BY_RATE,
    COUNTERS,
    DECISIONS,
    NO_REASON,
    REASONS,
    REJECT,
    SHED,
    THROTTLE,
    UNREGISTERED,
    Agreement,
    Shedder,
    SlaConfig,
)

# ---- the per-stream checks (OXS-R5..R9, R12, R13) -------------------------------------------


def admit_stream(
    agreement: Agreement, entry: SlaEntry, now: list[int], lag_failed: list[bool], drop_p: list[int],
    shed_code: int, seed_key: bytes, prefix: bytes, decision: np.ndarray, reason: np.ndarray,
    level_after: np.ndarray, rows: list[int],
) -> None:  # fmt: skip
    """One SLA stream's events of a batch, in seq order: lag, jitter, rate, then the shedder.

    ``rows`` index the batch arrays (``now``, ``lag_failed``, ``drop_p``) and the outputs; a
    plain loop: the bucket level and the jitter reference carry from one event to the next."""
    level, last, reference, n = entry.level, entry.last_refill, entry.jitter_reference, entry.arrivals
    admitted = rej_lag = rej_jitter = rej_rate = shed = 0
    cap, refill, cost, fill_ms = (
        agreement.capacity,
        agreement.refill_per_ms,
        agreement.cost,
        agreement.fill_ms,
    )
    budget = agreement.jitter_budget
    for i in rows:
        position = n
        n += 1  # OXS-R12: every event of the stream counts
        if lag_failed[i]:  # OXS-R5, R6
            rej_lag += 1
            decision[i], reason[i] = REJECT, BY_LAG
            continue
        t = now[i]
        if budget is not None and reference is not None and min(t - reference, I64_MAX) > budget:
            reference = t  # OXS-R7: the event that finds the gap is the new reference
            rej_jitter += 1
            decision[i], reason[i] = REJECT, BY_JITTER
            continue
        if last is None or t > last:  # OXS-R8: an earlier arrival refills nothing
            if last is not None:
                level = cap if t - last >= fill_ms else min(cap, level + refill * (t - last))
            last = t
        if level < cost:
            rej_rate += 1
            decision[i], reason[i] = REJECT, BY_RATE
            continue
        level -= cost
        if budget is not None:
            reference = t
        admitted += 1
        level_after[i] = level
        if drop_p[i] and draw_of(seed_key, prefix, position) < drop_p[i]:  # OXS-R12, R13
            decision[i] = shed_code
            shed += 1
        else:
            decision[i] = ADMIT
    entry.level, entry.last_refill, entry.jitter_reference, entry.arrivals = level, last, reference, n
    c = entry.counters
    c[0] += admitted
    c[1] += rej_lag
    c[2] += rej_jitter
    c[3] += rej_rate
    c[4 if shed_code == SHED else 5] += shed


# ---- one batch of one bucket (the wide stage; numpy and one loop per SLA stream) ----------------


class _Out(OutputRows):
    """The wide stage's rows of one call: table rows and summaries (WIDE_SCHEMA)."""

    def __init__(self, stream_id: str | None) -> None:
        super().__init__(stream_id, (*OUTPUT_COLUMNS, "kw_route", *SUMMARY_COLS), STRING_COLS)


@dataclass
class _Call:
    """What one wide-stage call works with: its configuration, its bucket and the state it loaded."""

    cfg: SlaConfig
    bucket: int
    ordered: bool
    rows_as_items: bool  # kind_col given: clock and load rows instead of now and load columns
    has_load_col: bool
    st: BucketState
    entries: dict[str, SlaEntry]


_ERRORS_OF_EVENTS = (
    "missing_stream",
    "missing_event_time",
    "invalid_priority",
    "missing_time",
    "invalid_load",
)


def _first_reason(checks: list[np.ndarray], reasons: tuple[str, ...], n: int) -> np.ndarray:
    """OXS-R15: per row the first reason whose check holds, None where none does."""
    reason = np.full(n, None, dtype=object)
    for check, name in reversed(list(zip(checks, reasons, strict=True))):
        reason[check] = name
    return reason


def process_batch(call: _Call, rows: pd.DataFrame, b: int, out: _Out) -> None:
    """One batch of one bucket: error rows, each event's now and load score, decisions, the
    streams rows of the SLA streams it named, and the bucket's summary."""
    if call.ordered:
        rows = rows.sort_values("sa_seq", kind="stable")
    else:  # no arrival order given: by arrival time, ties broken by every other input
        rows = rows.sort_values(["sa_now", "sa_et", "sa_stream", "sa_priority"], kind="stable")
    n = len(rows)
    seq = rows["sa_seq"].to_numpy(np.int64) if call.ordered else np.zeros(n, np.int64)
    kind = rows["sa_kind"].to_numpy(object)
    stream = rows["sa_stream"].to_numpy(object)
    et = rows["sa_et"].to_numpy(np.int64)
    priority = rows["sa_priority"].to_numpy(np.int64)
    priority_null = rows["sa_priority_null"].to_numpy(bool)
    is_event = kind == "event"
    bad_priority = ~priority_null & ((priority < 0) | (priority > 3))
    event_checks = [
        is_event & pd.isna(stream), is_event & rows["sa_et_null"].to_numpy(bool), is_event & bad_priority,
    ]  # fmt: skip
    if call.rows_as_items:
        now, score, score_at_end, copied_errors = _clock_and_load(call, rows, kind)
        reason = _first_reason(event_checks, _ERRORS_OF_EVENTS[:3], n)
        reason = np.where(copied_errors != None, copied_errors, reason)  # noqa: E711 - elementwise
        known = is_event | (kind == "clock") | (kind == "load") | (kind == "batch_end")
        reason[~known] = "unsupported_item"
    else:
        now = rows["sa_now"].to_numpy(np.int64)
        score = rows["sa_load"].to_numpy(np.int64) if call.has_load_col else np.zeros(n, np.int64)
        bad_load = np.zeros(n, bool)
        if call.has_load_col:
            bad_load = rows["sa_load_null"].to_numpy(bool) | (score < 0) | (score > 1000)
        checks = [*event_checks, is_event & rows["sa_now_null"].to_numpy(bool), is_event & bad_load]
        reason = _first_reason(checks, _ERRORS_OF_EVENTS, n)
        score_at_end = None
    reason[kind == DUPLICATE_SEQ] = DUPLICATE_SEQ  # TR-15: checked first
    erred = reason != None  # noqa: E711 - elementwise
    if erred.any():
        k = int(erred.sum())
        out.add("errors", k, batch=b, seq=(seq[erred], np.full(k, not call.ordered)), reason=reason[erred],
                kw_route=call.bucket)  # fmt: skip
    good = np.flatnonzero(is_event & ~erred)
    counts = _decide(call, b, out, good, seq, stream, et, now, score, np.where(priority_null, 1, priority))
    summary: dict[str, Any] = {f"s_{d}": int(c) for d, c in zip(DECISIONS, counts, strict=True)}
    if call.rows_as_items:
        if call.bucket == 0:  # the copied load rows: bucket 0 speaks for every bucket
            summary.update(s_score=score_at_end, s_score_order=I64_MAX, s_has_score=1)
    elif len(good):  # the last well-formed event's score in arrival order
        last = good[-1]
        summary.update(s_score=int(score[last]), s_score_order=int(seq[last] if call.ordered else now[last]),
                       s_has_score=1)  # fmt: skip
    out.add("summary", 1, batch=b, kw_route=SUMMARY_ROUTE, **{"s_score": 0, "s_score_order": 0,
                                                               "s_has_score": 0, **summary})  # fmt: skip


def _clock_and_load(
    call: _Call, rows: pd.DataFrame, kind: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """TR-4, OXS-R10, R15 from copied rows: per row the clock and the load score in effect,
    the score at the end of the batch, and the errors of clock and load rows (bucket 0 only)."""
    n = len(kind)
    st = call.st
    errors = np.full(n, None, dtype=object)
    is_clock = kind == "clock"
    time = rows["sa_time"].to_numpy(np.int64)
    time_null = rows["sa_time_null"].to_numpy(bool)
    moves = is_clock & ~time_null
    running = np.maximum(np.maximum.accumulate(np.where(moves, time, np.int64(I64_MIN))), np.int64(st.clock))
    before = np.concatenate([[np.int64(st.clock)], running[:-1]])
    errors[is_clock & time_null] = "missing_time"
    errors[moves & (time < before)] = "clock_went_backwards"  # TR-4: moves nothing
    if n:
        st.clock = int(running[-1])
    shedder = call.cfg.shedder or Shedder()
    score_at_start = score_now = load_score(st.metrics, shedder)
    at, scores = [], []
    metrics = rows["sa_metrics"].to_numpy(object)
    for i in np.flatnonzero(kind == "load").tolist():
        report = metrics_report(metrics[i])
        if report is None:
            errors[i] = "invalid_load"
            continue
        st.metrics.update(report)  # a metric left out keeps its value
        score_now = load_score(st.metrics, shedder)
        at.append(i)
        scores.append(score_now)
    if call.bucket != 0:
        errors[:] = None  # each copied row's error is reported once, by bucket 0
    score = np.full(n, score_at_start, np.int64)
    if at:  # forward fill: each row sees the last accepted report before it
        last = np.searchsorted(np.array(at), np.arange(n), side="right") - 1
        score = np.where(last >= 0, np.array(scores, np.int64)[np.maximum(last, 0)], score)
    return running, score, score_now, errors


def _decide(
    call: _Call, b: int, out: _Out, good: np.ndarray, seq: np.ndarray, stream: np.ndarray, et: np.ndarray,
    now: np.ndarray, score: np.ndarray, priority: np.ndarray,
) -> list[int]:  # fmt: skip
    """OXS-R5..R13 for the well-formed events ``good`` (indices in seq order): decisions rows,
    the streams rows, and the decision counts."""
    m = len(good)
    if not m:
        return [0, 0, 0, 0]
    cfg = call.cfg
    s, t, e = stream[good], now[good], et[good]
    names, code = np.unique(s.astype(str), return_inverse=True)
    specs = [cfg.streams.get(str(name)) for name in names.tolist()]
    registered = np.array([a is not None for a in specs], bool)[code]
    lag = saturating_lag(t, e)
    max_lag = np.array([a.max_lag if a is not None else I64_MAX for a in specs], np.int64)[code]
    lag_failed = lag > max_lag
    decision = np.full(m, REJECT, np.int64)
    reason = np.full(m, UNREGISTERED, np.int64)
    level_after = np.full(m, -1, np.int64)
    if cfg.asks_shedder:
        assert cfg.shedder is not None
        drop_p = drop_probabilities(score[good], priority[good], cfg.shedder)
        seed_key = cfg.shedder.seed.to_bytes(8, "big", signed=True)
    else:
        drop_p, seed_key = np.zeros(m, np.int64), b""
    shed_code = THROTTLE if cfg.policy == "PreferThrottle" else SHED
    order = np.argsort(code, kind="stable")  # events of one SLA stream together, in seq order
    bounds = np.flatnonzero(np.diff(code[order])) + 1
    now_l, failed_l, drop_l = t.tolist(), lag_failed.tolist(), drop_p.tolist()
    reason[registered] = NO_REASON
    touched: list[str] = []
    for group in np.split(order, bounds):
        name = str(names[code[group[0]]])
        agreement = cfg.streams.get(name)
        if agreement is None:
            continue
        entry = call.entries.get(name)
        if entry is None:
            entry = call.entries[name] = SlaEntry(agreement.capacity)
        prefix = name.encode("utf-8") + b"\x00"
        admit_stream(agreement, entry, now_l, failed_l, drop_l, shed_code, seed_key, prefix, decision, reason,
                     level_after, group.tolist())  # fmt: skip
        touched.append(name)
    out.add(
        "decisions", m, batch=b, seq=(seq[good], np.full(m, not call.ordered)), stream=s, event_time=e,
        now=t, decision=np.array(DECISIONS, dtype=object)[decision],
        reason=np.array(REASONS, dtype=object)[reason],
        tokens_left=(np.maximum(level_after, 0), level_after < 0), lag=(lag, ~registered),
        kw_route=call.bucket,
    )  # fmt: skip
    if touched:
        entries = [call.entries[name] for name in touched]
        counters = np.array([en.counters for en in entries], np.int64).reshape(-1, len(COUNTERS))
        out.add(
            "streams", len(touched), batch=b, stream=np.array(touched, dtype=object),
            tokens=np.array([en.level for en in entries], np.int64), kw_route=call.bucket,
            **{c: counters[:, j] for j, c in enumerate(COUNTERS)},
        )  # fmt: skip
    return np.bincount(decision, minlength=len(DECISIONS)).tolist()


# ---- the two stages -----------------------------------------------------------------------------

_DEFAULTS: dict[str, Any] = {
    "sa_kind": "event", "sa_seq": np.int64(0), "sa_priority": np.int64(0), "sa_priority_null": True,
    "sa_time": np.int64(0), "sa_time_null": True, "sa_metrics": None, "sa_now": np.int64(0),
    "sa_now_null": True, "sa_load": np.int64(0), "sa_load_null": True,
}  # fmt: skip


class SlaBucketProcessor(WideStage):
    """The wide stage: one call per (stream id, bucket) and micro-batch."""

    defaults = _DEFAULTS

    def __init__(
        self, default: SlaConfig, per_stream: Mapping[str, SlaConfig], ordered: bool, buckets: int,
        rows_as_items: bool, has_load_col: bool,
    ) -> None:  # fmt: skip
        super().__init__(default, per_stream, ordered, buckets)
        self.rows_as_items = rows_as_items
        self.has_load_col = has_load_col

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_state = handle.getValueState("bucket", BUCKET_SCHEMA)
        self.sla_streams = handle.getMapState("sla_streams", SLA_KEY_SCHEMA, SLA_VALUE_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, cfg: SlaConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        stored = self.bucket_state.get()
        st = BucketState.from_tuple(stored, self.buckets) if stored is not None else BucketState(self.buckets)
        # The registered SLA streams this call names: the only entries it reads and writes.
        kind = pdf["sa_kind"].to_numpy(object)
        named = pdf["sa_stream"].to_numpy(object)[kind == "event"]
        wanted = sorted({s for s in named.tolist() if s is not None and s in cfg.streams})
        loaded: dict[str, tuple[Any, ...]] = {}
        for name in wanted:
            value = self.sla_streams.getValue((name,))
            if value is not None:
                loaded[name] = tuple(value)
        entries = {name: SlaEntry.from_tuple(v) for name, v in loaded.items()}
        call = _Call(cfg, bucket, self.ordered, self.rows_as_items, self.has_load_col, st, entries)
        out = _Out(stream_id)
        for b, part in batches_in(pdf, "sa_batch", True, 0):
            process_batch(call, part, b, out)
        for name, entry in entries.items():
            value = entry.to_tuple()
            if loaded.get(name) != value:
                self.sla_streams.updateValue((name,), value)
        self.bucket_state.update(st.to_tuple())
        yield out.masked_frame(NULL_MASK)


class SlaSummaryProcessor(SecondStage):
    """The narrow stage (route -1): decision totals and the load score, one progress row per batch."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)

    def __init__(self, default: SlaConfig, per_stream: Mapping[str, SlaConfig], buckets: int) -> None:
        self.default = default
        self.per_stream = dict(per_stream)
        self.buckets = buckets

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("totals", STREAM_SCHEMA)

    def summarise(self, stream_id: str | None, rows: pd.DataFrame) -> pd.DataFrame:
        stored = self.state.get()
        st = StreamState.from_tuple(stored, self.buckets) if stored is not None else StreamState(self.buckets)
        config = self.default if stream_id is None else self.per_stream.get(stream_id, self.default)
        has_shedder = config.shedder is not None
        out = OutputRows(stream_id, OUTPUT_COLUMNS, STRING_COLS)
        for b, part in batches_in(rows, "batch", True, 0):
            summarise_batch(st, part, b, out, has_shedder)
        self.state.update(st.to_tuple())
        return out.masked_frame(NULL_MASK)


def summarise_batch(st: StreamState, rows: pd.DataFrame, b: int, out: OutputRows, has_shedder: bool) -> None:
    """OXS-R17: the buckets' count deltas added to the totals; the score of the latest report."""
    st.totals += rows[[f"s_{d}" for d in DECISIONS]].to_numpy(np.int64).sum(axis=0)
    scored = rows[rows["s_has_score"].to_numpy(np.int64) == 1]
    if len(scored):  # the latest in arrival order; equal ranks (no seq_col) take the highest score
        latest = scored.sort_values(["s_score_order", "s_score"], kind="stable").iloc[-1]
        st.load_score = int(latest["s_score"])
    admitted, rejected, shed, throttled = st.totals.tolist()
    out.add(
        "progress", 1, batch=b, admitted=admitted, rejected=rejected, shed=shed, throttled=throttled,
        load_score=(np.array([st.load_score], np.int64), np.array([not has_shedder])),
    )  # fmt: skip
