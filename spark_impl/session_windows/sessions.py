"""The wide stage: one (stream, bucket)'s open sessions and what a batch does to them (events merged
into sessions, late events, sessions closed by the watermark, timers), vectorised per call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN
from spark_impl.checkpoints import decoding, missing_value
from spark_impl.common import VALUE_OUT_OF_RANGE, OutputRows, StatefulProcessorHandle, batches_in, sat_sub
from spark_impl.scaleout import (
    DUPLICATE_SEQ,
    NULL_MASK,
    ROUTE,
    SUMMARY_ROUTE,
    WideStage,
    block_of,
    check_layout,
    pack_text,
    unpack_text,
)
from spark_impl.session_windows.layout import (
    BLOCK_SCHEMA,
    BUCKET_SCHEMA,
    OUTPUT_COLUMNS,
    STRING_COLS,
    SUMMARY_COLS,
)
from spark_impl.session_windows.settings import LAYOUT_VERSION, StreamConfig, _sat_add

# ---- the wide stage: the state of one (stream, bucket) ------------------------------------

_NUMBERS = ("hash", "start", "last", "count", "sum", "trigger")  # a stored session's numbers


@dataclass
class Sessions:
    """Open sessions column-wise: key (str objects) and the int64 columns of ``_NUMBERS``."""

    key: np.ndarray = field(default_factory=lambda: np.empty(0, object))
    hash: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    start: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    last: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    count: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    sum: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    trigger: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def __len__(self) -> int:
        return len(self.key)

    def take(self, rows: np.ndarray) -> Sessions:
        return Sessions(self.key[rows], *(getattr(self, n)[rows] for n in _NUMBERS))

    def __add__(self, other: Sessions) -> Sessions:
        return Sessions(
            np.concatenate([self.key, other.key]),
            *(np.concatenate([getattr(self, n), getattr(other, n)]) for n in _NUMBERS),
        )

    def pack(self) -> tuple[bytes, bytes, bytes]:
        """One block's state value (BLOCK_SCHEMA)."""
        lengths, text = pack_text(self.key)
        numbers = np.column_stack([getattr(self, n) for n in _NUMBERS]).astype(np.int64)
        return lengths, text, numbers.tobytes()

    @classmethod
    def unpack(cls, values: list[tuple[Any, ...]]) -> Sessions:
        """Several blocks' values, concatenated."""
        if not values:
            return cls()
        with decoding("session_windows", "blocks"):
            keys = unpack_text(b"".join(bytes(v[0]) for v in values), b"".join(bytes(v[1]) for v in values))
            numbers = np.frombuffer(b"".join(bytes(v[2]) for v in values), np.int64)
            numbers = numbers.reshape(-1, len(_NUMBERS))
            if len(keys) != len(numbers):
                raise ValueError(f"{len(keys)} keys with {len(numbers)} rows of numbers")
            return cls(keys, *(numbers[:, i].copy() for i in range(len(_NUMBERS))))


@dataclass
class BucketState:
    """What one (stream, bucket) keeps in its ValueState: the block layout (linear hashing,
    ``2**level + split`` blocks), the stream's highest event time (every bucket sees every
    chunk's), the ended flag (F017E-R23), the micro-batches seen, and per stored block its
    number, sessions and lowest trigger time."""

    buckets: int
    level: int = 0
    split: int = 0
    max_event_time: int | None = None
    ended: bool = False
    batches: int = 0
    blocks: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))

    def block_count(self) -> int:
        return (1 << self.level) + self.split

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, self.level, self.split, self.max_event_time is not None,
            self.max_event_time or 0, self.ended, self.batches,
            np.ascontiguousarray(self.blocks, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout("session_windows", value, LAYOUT_VERSION, buckets, "bucket")
        with decoding("session_windows", "bucket"):
            return cls(
                buckets, int(value[2]), int(value[3]), int(value[5]) if value[4] else None, bool(value[6]),
                int(value[7]), np.frombuffer(bytes(value[8]), np.int64).reshape(-1, 3).copy(),
            )  # fmt: skip


class _WideOut(OutputRows):
    """The wide stage's rows of one call: table rows (route = the bucket) and summaries (route -1)."""

    def __init__(self, stream_id: str | None) -> None:
        super().__init__(stream_id, (*OUTPUT_COLUMNS, ROUTE, *SUMMARY_COLS), STRING_COLS)


# ---- sessions as components (F017E-R3, R12, R22) --------------------------------------------


def _grouped_running_max(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` within runs of equal ``codes`` (codes sorted ascending)."""
    distinct, rank = np.unique(values, return_inverse=True)
    # codes ascending, so code * n + rank only grows from one run to the next: one accumulate for all.
    packed = codes.astype(np.int64) * len(distinct) + rank
    return distinct[np.maximum.accumulate(packed) - codes.astype(np.int64) * len(distinct)]


@dataclass
class _Components:
    code: np.ndarray
    start: np.ndarray
    last: np.ndarray
    count: np.ndarray
    sum: np.ndarray
    trigger: np.ndarray


def components(
    cfg: StreamConfig, stored_code: np.ndarray, stored: Sessions, code: np.ndarray, time: np.ndarray,
    value: np.ndarray,
) -> _Components:  # fmt: skip
    """F017E-R3/R12/R22: the sessions made of the stored ones and the on-time events (keys as
    codes), in any order: per key, blocks [start, last] sorted by start; a block more than
    ``gap`` after everything before it starts a new session. An untouched session keeps its
    stored trigger time; a grown or merged one gets end + allowed lateness."""
    n_stored, n_new = len(stored_code), len(code)
    block_code = np.concatenate([stored_code, code]).astype(np.int64)
    start = np.concatenate([stored.start, time])
    last = np.concatenate([stored.last, time])
    count = np.concatenate([stored.count, np.ones(n_new, np.int64)])
    total = np.concatenate([stored.sum, value])
    stored_trigger = np.concatenate([stored.trigger, np.zeros(n_new, np.int64)])
    if n_stored + n_new == 0:
        empty = np.empty(0, np.int64)
        return _Components(empty, empty, empty, empty, empty, empty)
    is_stored = np.arange(n_stored + n_new) < n_stored
    order = np.lexsort((start, block_code))
    code_s, start_s, last_s = block_code[order], start[order], last[order]
    first = np.ones(len(order), bool)
    first[1:] = code_s[1:] != code_s[:-1]
    reach = _grouped_running_max(code_s, last_s)
    before = np.empty_like(reach)
    before[0] = 0
    before[1:] = reach[:-1]
    heads = np.flatnonzero(first | (start_s > _sat_add(before, cfg.gap)))
    c_last = np.maximum.reduceat(last_s, heads)
    size = np.diff(np.append(heads, len(order)))
    untouched = (size == 1) & is_stored[order][heads]
    end = _sat_add(c_last, cfg.gap)  # F017E-R2
    return _Components(
        code=code_s[heads], start=start_s[heads], last=c_last,
        count=np.add.reduceat(count[order], heads), sum=np.add.reduceat(total[order], heads),
        trigger=np.where(untouched, stored_trigger[order][heads], _sat_add(end, cfg.allowed_lateness)),
    )  # fmt: skip


# ---- the wide stage: one batch of one bucket --------------------------------------------


@dataclass
class _Chunks:
    """A batch's chunk summaries, by chunk number: the highest event time before each chunk
    (the stored maximum and the earlier chunks') and the rows before it."""

    number: np.ndarray
    prior: np.ndarray
    prior_has: np.ndarray
    rows_before: np.ndarray
    top: int
    top_has: bool

    @classmethod
    def of(cls, summaries: pd.DataFrame, stored: int | None) -> _Chunks:
        order = np.argsort(summaries["sw_chunk"].to_numpy(np.int64), kind="stable")
        number = summaries["sw_chunk"].to_numpy(np.int64)[order]
        if len(number) and (np.diff(number) == 0).any():
            raise RuntimeError("session_windows: a chunk summary reached a bucket twice")
        has = summaries["sw_run_has"].to_numpy(bool)[order]
        tops = np.where(has, summaries["sw_run"].to_numpy(np.int64)[order], np.int64(I64_MIN))
        start = np.int64(I64_MIN if stored is None else stored)
        upto = np.maximum.accumulate(np.concatenate([[start], tops]))
        rows = summaries["sw_seq"].to_numpy(np.int64)[order]
        return cls(
            number, upto[:-1], (stored is not None) | ((np.cumsum(has) - has) > 0), np.cumsum(rows) - rows,
            int(upto[-1]), stored is not None or bool(has.any()),
        )  # fmt: skip

    def index(self, chunk: np.ndarray) -> np.ndarray:
        at = np.searchsorted(self.number, chunk)
        if len(chunk) and (
            (at >= len(self.number)).any()
            or (self.number[np.minimum(at, len(self.number) - 1)] != chunk).any()
        ):
            raise RuntimeError("session_windows: a row reached its bucket without its chunk's summary")
        return at


def _errors(
    kind: np.ndarray, key: np.ndarray, et_null: np.ndarray, after_end: np.ndarray, own: np.ndarray
) -> np.ndarray:
    """F017E-R20, vectorised: the reason of each malformed row this bucket reports, None elsewhere."""
    err = np.full(len(kind), None, dtype=object)
    is_event = kind == "event"
    key_null = pd.isna(key)
    err[~is_event & (kind != "end")] = "unsupported_item"
    err[kind == DUPLICATE_SEQ] = DUPLICATE_SEQ  # TR-15
    err[kind == VALUE_OUT_OF_RANGE] = VALUE_OUT_OF_RANGE  # TR-16
    err[is_event & key_null] = "missing_key"
    err[is_event & ~key_null & et_null] = "missing_event_time"
    err[after_end] = "after_end"  # F017E-R20, R23: checked first
    err[~own] = None
    return err


class SessionBucketProcessor(WideStage):
    """The wide stage: one call per (stream, bucket) and micro-batch."""

    def __init__(
        self, default: StreamConfig, per_stream: Mapping[str, StreamConfig], ordered: bool, buckets: int,
        has_batch: bool, block_sessions: int, report_timers: bool,
    ) -> None:  # fmt: skip
        super().__init__(default, per_stream, ordered, buckets)
        self.has_batch = has_batch
        self.block_sessions = block_sessions
        self.report_timers = report_timers

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_state = handle.getValueState("bucket", BUCKET_SCHEMA)
        self.blocks = handle.getMapState("blocks", "block long", BLOCK_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, cfg: StreamConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        stored = self.bucket_state.get()
        st = BucketState.from_tuple(stored, self.buckets) if stored is not None else BucketState(self.buckets)
        out = _WideOut(stream_id)
        for b, part in batches_in(pdf, "sw_batch", self.has_batch, st.batches):
            self._batch(st, cfg, bucket, part, b, out)
            st.batches += 1
        self.bucket_state.update(st.to_tuple())
        yield out.masked_frame(NULL_MASK)

    def _batch(
        self, st: BucketState, cfg: StreamConfig, bucket: int, rows: pd.DataFrame, b: int, out: _WideOut
    ) -> None:
        summary = rows["sw_summary"].to_numpy(bool)
        chunks = _Chunks.of(rows[summary], st.max_event_time)
        items = rows[~summary].sort_values(["sw_chunk", "sw_seq"], kind="stable")
        kind = items["sw_kind"].to_numpy(object)
        key = items["sw_key"].to_numpy(object)
        at = chunks.index(items["sw_chunk"].to_numpy(np.int64))
        seq = items["sw_seq"].to_numpy(np.int64)
        if not self.ordered:
            seq = seq + chunks.rows_before[at]  # the position in the micro-batch's event-time order

        # F017E-R23: the end row reaches every bucket; what follows it (here or later) is after_end.
        is_end = kind == "end"
        if st.ended:
            after_end = np.ones(len(kind), bool)
        elif is_end.any():
            after_end = seq > seq[is_end].min()
        else:
            after_end = np.zeros(len(kind), bool)
        ended = st.ended or bool(is_end.any())
        et_null = items["sw_et_null"].to_numpy(bool)
        # Bucket 0 alone gets malformed rows and reports the end rows; every bucket its own events.
        own = (kind != "batch_end") & ((bucket == 0) | ~is_end)
        err = _errors(kind, key, et_null, after_end, own)
        bad = err != None  # noqa: E711 - elementwise
        if bad.any():
            out.add("errors", int(bad.sum()), batch=b, seq=seq[bad], reason=err[bad], kw_route=bucket)

        # F017E-R5/R6/R22: the watermark just before and just after each own event, in arrival order.
        ev = (kind == "event") & pd.notna(key) & ~et_null & ~after_end
        e_key, e_time, e_seq, e_at = key[ev], items["sw_et"].to_numpy(np.int64)[ev], seq[ev], at[ev]
        e_value = items["sw_value"].to_numpy(np.int64)[ev]
        e_hash = items["sw_hash"].to_numpy(np.int64)[ev]
        run_has = items["sw_run_has"].to_numpy(bool)[ev]
        run = items["sw_run"].to_numpy(np.int64)[ev]
        before_has = run_has | chunks.prior_has[e_at]
        before = np.where(run_has, np.maximum(chunks.prior[e_at], run), chunks.prior[e_at])
        after = np.where(before_has, np.maximum(before, e_time), e_time)
        wm_before = sat_sub(before, cfg.bounded_delay)
        wm_after = sat_sub(after, cfg.bounded_delay)
        late = e_time < sat_sub(wm_after, cfg.allowed_lateness)  # F017E-R10: t + lateness < watermark
        n_late = int(late.sum())
        if n_late:
            verdict = "late_output" if cfg.emit_strategy == "OnWindowClose" else "dropped"  # F017E-R11
            out.add("late", n_late, batch=b, seq=e_seq[late], key=e_key[late], event_time=e_time[late],
                    watermark=wm_after[late], verdict=verdict, kw_route=bucket)  # fmt: skip

        # F017E-R7, R23: the watermark after the batch; the end makes it the end of time.
        if ended:
            final: int | None = I64_MAX
        elif chunks.top_has:
            final = int(sat_sub(np.array([chunks.top], np.int64), cfg.bounded_delay)[0])
        else:
            final = None

        # Only the blocks that hold keys of the batch's events or a timer the batch passes.
        known = st.blocks[:, 0]
        want = np.unique(block_of(e_hash, st.level, st.split))
        if self.report_timers:
            want = known
        elif final is not None:
            want = np.union1d(want, known[st.blocks[:, 2] < final])
        read = np.isin(known, want)
        values = {int(block): self._read(int(block), bucket) for block in known[read].tolist()}
        stored = Sessions.unpack(list(values.values()))

        codes, found = pd.factorize(np.concatenate([stored.key, e_key]))
        uniques = np.asarray(found, dtype=object)
        stored_code, e_code = codes[: len(stored)], codes[len(stored) :]
        code_hash = np.zeros(len(uniques), np.int64)
        code_hash[stored_code] = stored.hash
        code_hash[e_code] = e_hash
        c = components(cfg, stored_code, stored, e_code[~late], e_time[~late], e_value[~late])
        closing = c.trigger < final if final is not None else np.zeros(len(c.trigger), bool)
        n_closed = int(closing.sum())
        n_by_watermark = 0
        if n_closed:
            # F017E-R8, R22: by the watermark iff the event whose watermark first passes the timer
            # is of the session's key: that event's watermark before is at or below the timer.
            trigger = c.trigger[closing]
            first = np.searchsorted(wm_after, trigger, side="right")
            inside = first < len(wm_after)
            at_first = np.minimum(first, max(len(wm_after) - 1, 0))
            by_watermark = inside
            if len(wm_after):
                by_watermark = (
                    inside
                    & (e_code[at_first] == c.code[closing])
                    & (~before_has[at_first] | (wm_before[at_first] <= trigger))
                )
            n_by_watermark = int(by_watermark.sum())
            out.add(
                "sessions", n_closed, batch=b, key=uniques[c.code[closing]], session_start=c.start[closing],
                session_end=_sat_add(c.last[closing], cfg.gap), count=c.count[closing], sum=c.sum[closing],
                reason=np.where(by_watermark, "watermark", "timer").astype(object), kw_route=bucket,
            )  # fmt: skip
        keep = ~closing
        kept = Sessions(
            uniques[c.code[keep]], code_hash[c.code[keep]], c.start[keep], c.last[keep], c.count[keep],
            c.sum[keep], c.trigger[keep],
        )  # fmt: skip
        kept = self._store(st, kept, values, bucket)
        if self.report_timers and len(kept):
            out.add("timers", len(kept), batch=b, key=kept.key, session_start=kept.start,
                    trigger_time=kept.trigger, kw_route=bucket)  # fmt: skip
        st.max_event_time = chunks.top if chunks.top_has else None
        st.ended = ended
        out.add(
            "summary", 1, batch=b, kw_route=SUMMARY_ROUTE, s_bucket=bucket, s_open=int(st.blocks[:, 1].sum()),
            s_by_timer=n_closed - n_by_watermark, s_by_watermark=n_by_watermark, s_late=n_late,
            s_watermark=final or 0, s_has_watermark=int(final is not None),
        )  # fmt: skip

    def _read(self, block: int, bucket: int) -> tuple[Any, ...]:
        value = self.blocks.getValue((block,))
        if value is None:  # the summary lists only blocks that hold a value
            raise missing_value("session_windows", "blocks", f"block {block} of bucket {bucket}")
        return tuple(value)

    def _store(
        self, st: BucketState, kept: Sessions, values: dict[int, tuple[Any, ...]], bucket: int
    ) -> Sessions:
        """Writes back the open sessions of the blocks read (and of new ones), after splitting
        blocks in order while they hold more than ``block_sessions`` sessions on average (linear
        hashing: a block to split is read first). Returns every session it holds in memory."""
        unread = st.blocks[~np.isin(st.blocks[:, 0], list(values))]
        total = int(unread[:, 1].sum()) + len(kept)
        while total > self.block_sessions * st.block_count():
            victim = unread[:, 0] == st.split
            if victim.any():
                values[st.split] = self._read(st.split, bucket)
                kept = kept + Sessions.unpack([values[st.split]])
                unread = unread[~victim]
            st.split += 1
            if st.split == 1 << st.level:
                st.level, st.split = st.level + 1, 0
        block = block_of(kept.hash, st.level, st.split)
        order = np.argsort(block, kind="stable")
        touched = np.union1d(np.array(list(values), np.int64), block)
        bounds = (
            np.searchsorted(block[order], touched, side="left"),
            np.searchsorted(block[order], touched, side="right"),
        )
        rows = []
        for i, number in enumerate(touched.tolist()):
            mine = order[bounds[0][i] : bounds[1][i]]
            if len(mine) == 0:
                if number in values:
                    self.blocks.removeKey((number,))
                continue
            part = kept.take(mine)
            value = part.pack()
            original = values.get(number)
            if original is None or any(bytes(a) != v for a, v in zip(original, value, strict=True)):
                self.blocks.updateValue((number,), value)
            rows.append((number, len(part), int(part.trigger.min())))
        st.blocks = np.concatenate([unread, np.array(rows, np.int64).reshape(-1, 3)])
        return kept
