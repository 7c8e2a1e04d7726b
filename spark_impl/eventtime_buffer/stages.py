"""The reorder buffer's two stages: one bucket's batch (tuples buffered, late ones dropped, the
released ones in event-time order) in the wide stage's processor, and the per-stream summary in the
narrow one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN
from spark_impl.common import VALUE_OUT_OF_RANGE, OutputRows, StatefulProcessorHandle, opt, sat_sub
from spark_impl.eventtime_buffer.layout import (
    BUCKET_SCHEMA,
    CLOCK,
    DUPLICATE,
    END,
    EVENT,
    LONG_COLS,
    MARKER,
    OTHER,
    OUTPUT_COLUMNS,
    PROBE,
    STREAM_SCHEMA,
    STRING_COLS,
    VALUE_RANGE,
    BucketState,
    Buffer,
    StreamState,
)
from spark_impl.eventtime_buffer.settings import StreamConfig
from spark_impl.scaleout import DUPLICATE_SEQ, NULL_MASK, ROUTE, SUMMARY_ROUTE, BatchSummaryStage, WideStage

# ---- the wide stage: one bucket's batch (pure numpy/pandas; runs in the worker) --------------


class _Out(OutputRows):
    """The wide stage's rows of one call: table rows (route = the bucket) and summaries."""

    def __init__(self, stream_id: str | None, bucket: int, ordered: bool) -> None:
        super().__init__(stream_id, (*OUTPUT_COLUMNS, ROUTE), STRING_COLS)
        self.bucket = bucket
        self.ordered = ordered

    def add(self, output: str, n: int, **cols: Any) -> None:
        cols.setdefault(ROUTE, self.bucket)
        super().add(output, n, **cols)

    def seq(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """An arrival position as output: null without seq_col (no arrival order is known)."""
        return values, np.full(len(values), not self.ordered)

    def tuples(self, b: int, released: Buffer) -> None:
        """VELO-R17: released tuples, each with the arrival of its event."""
        self.add(
            "emitted", len(released), batch=b, kind="tuple", key=released.key, event_time=released.ts,
            value=released.value, arrival_batch=released.arrival_batch,
            arrival_seq=self.seq(released.arrival_seq),
        )  # fmt: skip


@dataclass
class _Batch:
    """One batch of one bucket, in arrival order, with the masks every rule reads."""

    seq: np.ndarray
    kind: np.ndarray
    key: np.ndarray
    value: np.ndarray
    time: np.ndarray
    time_null: np.ndarray
    ts: np.ndarray
    reason: np.ndarray
    probe_max: int | None

    @classmethod
    def of(cls, rows: pd.DataFrame, at: np.ndarray, ordered: bool) -> _Batch:
        """The rows ``at`` of a call's frame (one batch): the probes' highest time, the rest in
        arrival order."""
        kind = rows["eb_kind"].to_numpy(np.int64)[at]
        ts = rows["eb_ts"].to_numpy(np.int64)[at]
        reason = rows["eb_reason"].to_numpy(object)[at]
        probes = kind == PROBE
        top = ts[probes & pd.isna(reason)]
        keep = np.flatnonzero(~probes)
        seq = rows["eb_seq"].to_numpy(np.int64)[at][keep]
        if ordered:
            order = np.argsort(seq, kind="stable")
            keep, seq = keep[order], seq[order]
        picked = at[keep]
        key, value = rows["eb_key"].to_numpy(object)[picked], rows["eb_value"].to_numpy(np.int64)[picked]
        time = rows["eb_time"].to_numpy(np.int64)[picked]
        time_null = rows["eb_time_null"].to_numpy(bool)[picked]
        probe_max = int(top.max()) if len(top) else None
        return cls(seq, kind[keep], key, value, time, time_null, ts[keep], reason[keep], probe_max)


def process_bucket(
    st: BucketState, pdf: pd.DataFrame, cfg: StreamConfig, bucket: int, ordered: bool, has_batch: bool,
    out: _Out,
) -> None:  # fmt: skip
    """One call of the wide stage: its rows split by batch (several only after a restart of a
    pipeline whose source delivers many batches at once), each applied in turn."""
    everything = np.arange(len(pdf))
    if has_batch:
        number = pdf["eb_batch"].to_numpy(np.int64)
        parts = [(int(b), everything[number == b]) for b in np.unique(number)]
    else:
        parts = [(st.batches, everything)]
    for b, at in parts:
        bucket_batch(st, _Batch.of(pdf, at, ordered), cfg, bucket, b, out)
        st.batches += 1


def bucket_batch(st: BucketState, r: _Batch, cfg: StreamConfig, bucket: int, b: int, out: _Out) -> None:
    """VELO-R9..R23 for one bucket's rows of batch ``b``: errors, late tuples, the bucket's share
    of the buffer and of the release, the watermark items (bucket 0), and the bucket's summary."""
    first = bucket == 0
    n = len(r.seq)
    is_event, is_clock = r.kind == EVENT, r.kind == CLOCK
    marker = r.kind == MARKER
    # VELO-R21, R23: the end's position; every later row is after_end, checked first.
    end_at: int | None = None
    if st.ended:
        after = ~marker
    else:
        ends = r.seq[r.kind == END]
        end_at = int(ends.min()) if len(ends) else None
        after = (r.seq > end_at) & ~marker if end_at is not None else np.zeros(n, bool)
    live = ~after
    err = np.full(n, None, dtype=object)
    err[after & (is_event | first)] = "after_end"  # an event lives in one bucket; copies in all
    # TR-4, VELO-R23: control rows; a clock is judged against every earlier clock of the stream.
    timed = is_clock & live & ~r.time_null
    running = np.maximum(
        np.maximum.accumulate(np.where(timed, r.time, np.int64(I64_MIN))), np.int64(st.clock)
    )
    before = np.concatenate([[np.int64(st.clock)], running[:-1]]).astype(np.int64)
    if first:
        err[live & (r.kind == OTHER)] = "unsupported_item"
        err[live & (r.kind == DUPLICATE)] = DUPLICATE_SEQ  # TR-15
        err[live & (r.kind == VALUE_RANGE)] = VALUE_OUT_OF_RANGE  # TR-16
        err[is_clock & live & r.time_null] = "missing_time"
        err[timed & (r.time < before)] = "clock_went_backwards"
    if n:
        st.clock = int(running[-1])
    bad = np.flatnonzero(err != None)  # noqa: E711 - elementwise
    out.add("errors", len(bad), batch=b, seq=out.seq(r.seq[bad]), reason=err[bad])

    ev = is_event & live
    if cfg.eventtime_enabled:
        late, own_max, emitted = _eventtime(st, r, ev, end_at, cfg.late_tolerance, first, b, out)
    else:
        late, own_max, emitted = _processing_time(st, r, ev, timed, running, before, end_at, first, b, out)
    if end_at is not None:
        if first and (st.watermark is None or st.watermark < I64_MAX):
            out.add("emitted", 1, batch=b, kind="watermark", watermark=I64_MAX)  # VELO-R21
            emitted += 1
        st.watermark, st.ended = I64_MAX, True
    out.add(
        "summary", 1, batch=b, **{ROUTE: SUMMARY_ROUTE}, seq=bucket, buffer_size=len(st.buffer),
        late_dropped_count=late, watermark_emitted_count=emitted, max_timestamp_seen=opt(own_max),
        watermark=opt(st.watermark),
    )  # fmt: skip


def _eventtime(
    st: BucketState, r: _Batch, ev: np.ndarray, end_at: int | None, tolerance: int, first: bool, b: int,
    out: _Out,
) -> tuple[int, int | None, int]:  # fmt: skip
    """VELO-R10..R19, R21: (tuples dropped, highest time buffered, watermarks emitted)."""
    failed = ev & (r.reason != None)  # noqa: E711 - elementwise
    bad = np.flatnonzero(failed)  # VELO-R12: one error row and one error item each
    out.add("errors", len(bad), batch=b, seq=out.seq(r.seq[bad]), reason=r.reason[bad])
    out.add(
        "emitted", len(bad), batch=b, kind="error", key=r.key[bad], value=r.value[bad], reason=r.reason[bad],
        arrival_batch=b, arrival_seq=out.seq(r.seq[bad]),
    )  # fmt: skip
    well_formed = ev & ~failed
    late = well_formed & (r.ts <= st.watermark) if st.watermark is not None else np.zeros(len(ev), bool)
    dropped = np.flatnonzero(late)  # VELO-R14: judged by the watermark before the batch
    out.add(
        "late", len(dropped), batch=b, seq=out.seq(r.seq[dropped]), key=r.key[dropped],
        event_time=r.ts[dropped], watermark=st.watermark,
    )  # fmt: skip
    keep = np.flatnonzero(well_formed & ~late)
    own_max = int(r.ts[keep].max()) if len(keep) else None
    st.buffer = st.buffer.merged(
        Buffer(r.ts[keep], np.full(len(keep), b, np.int64), r.seq[keep], r.key[keep], r.value[keep])
    )  # VELO-R15
    if end_at is not None:  # VELO-R21: everything leaves; the final watermark replaces the target
        out.tuples(b, st.buffer)
        st.buffer = Buffer()
        return len(dropped), own_max, 0
    if r.probe_max is not None:  # the probes cover every well-formed tuple of the batch
        st.max_seen = r.probe_max if st.max_seen is None else max(st.max_seen, r.probe_max)
    if st.max_seen is None:
        return len(dropped), own_max, 0  # VELO-R16: no target without a buffered tuple
    candidate = int(sat_sub(np.array([st.max_seen], np.int64), tolerance)[0])
    target = candidate if st.watermark is None else max(st.watermark, candidate)
    if st.watermark is not None and target <= st.watermark:
        return len(dropped), own_max, 0
    cut = int(np.searchsorted(st.buffer.ts, target, side="right"))  # VELO-R17
    out.tuples(b, st.buffer.take(slice(0, cut)))
    st.buffer = st.buffer.take(slice(cut, None))
    st.watermark = target
    if first:
        out.add("emitted", 1, batch=b, kind="watermark", watermark=target)
        return len(dropped), own_max, 1
    return len(dropped), own_max, 0


def _processing_time(
    st: BucketState, r: _Batch, ev: np.ndarray, timed: np.ndarray, running: np.ndarray, before: np.ndarray,
    end_at: int | None, first: bool, b: int, out: _Out,
) -> tuple[int, int | None, int]:  # fmt: skip
    """VELO-R9: (0, the latest stamp, watermarks emitted): tuples stamped with the clock at their
    arrival leave at once; a forward move of the clock to T emits Watermark(T - 1) (bucket 0)."""
    at = np.flatnonzero(ev)
    stamps = running[at]
    out.add(
        "emitted", len(at), batch=b, kind="tuple", key=r.key[at], event_time=stamps, value=r.value[at],
        arrival_batch=b, arrival_seq=out.seq(r.seq[at]),
    )  # fmt: skip
    forward = np.flatnonzero(timed & (r.time > before))
    if len(forward):
        st.watermark = int(r.time[forward[-1]]) - 1
    emitted = 0
    if first:
        out.add("emitted", len(forward), batch=b, kind="watermark", watermark=r.time[forward] - 1)
        emitted = len(forward)
    return 0, int(stamps.max()) if len(at) else None, emitted


# ---- the narrow stage: a stream's progress (VELO-R22) ---------------------------------------


def summarise_batch(st: StreamState, rows: pd.DataFrame, b: int, out: OutputRows) -> None:
    """The buckets' summaries of batch ``b``: counters, highest time ingested, buffer sizes."""
    st.sizes[rows["seq"].to_numpy(np.int64)] = rows["buffer_size"].to_numpy(np.int64)
    st.late_dropped += int(rows["late_dropped_count"].to_numpy(np.int64).sum())
    st.watermarks_emitted += int(rows["watermark_emitted_count"].to_numpy(np.int64).sum())
    nulls = rows[NULL_MASK].to_numpy(np.int64)
    has_max = (nulls & (np.int64(1) << np.int64(LONG_COLS.index("max_timestamp_seen")))) == 0
    if has_max.any():
        top = int(rows["max_timestamp_seen"].to_numpy(np.int64)[has_max].max())
        st.max_seen = top if st.max_seen is None else max(st.max_seen, top)
    has_watermark = (nulls & (np.int64(1) << np.int64(LONG_COLS.index("watermark")))) == 0
    if has_watermark.any():  # the same in every bucket
        st.watermark = int(rows["watermark"].to_numpy(np.int64)[has_watermark].max())
    out.add(
        "progress", 1, batch=b, watermark=opt(st.watermark), max_timestamp_seen=opt(st.max_seen),
        buffer_size=int(st.sizes.sum()), late_dropped_count=st.late_dropped,
        watermark_emitted_count=st.watermarks_emitted,
    )  # fmt: skip


# ---- the Spark operator ----------------------------------------------------------------


class BufferBucketProcessor(WideStage):
    """The wide stage: one call per (stream, bucket) and micro-batch."""

    def __init__(
        self, default: StreamConfig, per_stream: Mapping[str, StreamConfig], ordered: bool, buckets: int,
        has_batch: bool,
    ) -> None:  # fmt: skip
        super().__init__(default, per_stream, ordered, buckets)
        self.has_batch = has_batch

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("bucket", BUCKET_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, config: Any, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        stored = self.state.get()
        st = BucketState.from_tuple(stored, self.buckets) if stored is not None else BucketState(self.buckets)
        out = _Out(stream_id, bucket, self.ordered)
        process_bucket(st, pdf, config, bucket, self.ordered, self.has_batch, out)
        self.state.update(st.to_tuple())
        yield out.masked_frame(NULL_MASK)


class BufferSummaryProcessor(BatchSummaryStage):
    """The narrow stage (route -1): one progress row per stream and batch."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)
    state_schema = STREAM_SCHEMA
    state_class = StreamState
    string_cols = STRING_COLS
    summarise_batch = staticmethod(summarise_batch)
