"""Keyed watermarks (F065): the stateful processors, the wide stage (one call per stream and
bucket) and the narrow step (one per stream, in a second stage or in the sink)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN
from spark_impl.checkpoints import (
    IncompatibleCheckpoint,
    missing_value,
)
from spark_impl.common import (
    OutputRows,
    StatefulProcessorHandle,
    batches_in,
)
from spark_impl.keyed_watermarks.compact import (
    COMPACT_LAYOUT,
    SHARD_KEYS_SCHEMA,
    SHARD_SKETCH_SCHEMA,
    _CompactBucket,
    _Shard,
    _Sketch,
    check_sketch_settings,
    pack_exact,
    process_compact_bucket,
    unpack_exact,
)
from spark_impl.keyed_watermarks.exact import (
    LAST_CALL,
    _after_end,
    _Bucket,
    _Out,
    process_bucket,
)
from spark_impl.keyed_watermarks.layout import (
    _SUMMARY_FIELDS,
    BLOCK_SCHEMA,
    BUCKET_SCHEMA,
    OUTPUT_COLUMNS,
    STREAM_SCHEMA,
    STRING_COLS,
    Aggregate,
    BucketState,
    StreamState,
    concat_keys,
    pack_block,
    unpack_blocks,
)
from spark_impl.keyed_watermarks.settings import StreamConfig
from spark_impl.scaleout import (
    NULL_MASK,
    SecondStage,
    WideStage,
    block_of,
)

# ---- the two stages -----------------------------------------------------------


def _collapse_ticks(pdf: pd.DataFrame) -> pd.DataFrame:
    """The ticks of a micro-batch (one per input partition) as one: the latest time wins."""
    tick = pdf["kw_kind"].to_numpy(object) == "tick"
    if tick.sum() <= 1:
        return pdf
    ticks = pdf[tick]
    latest = ticks.iloc[[int(np.argmax(ticks["kw_time"].to_numpy(np.int64)))]]
    return pd.concat([latest, pdf[~tick]], ignore_index=True)


_DEFAULTS: dict[str, Any] = {
    "kw_seq": np.int64(0), "kw_kind": "event", "kw_value": np.int64(0), "kw_time": np.int64(0),
    "kw_time_null": True, "kw_shard": np.int64(-1),
}  # fmt: skip


class KeyBucketProcessor(WideStage):
    """The wide stage: one call per (stream, bucket) and micro-batch."""

    defaults = _DEFAULTS

    def __init__(
        self, default: StreamConfig, per_stream: Mapping[str, StreamConfig], ordered: bool, buckets: int,
        block_keys: int,
    ) -> None:  # fmt: skip
        super().__init__(default, per_stream, ordered, buckets)
        self.block_keys = block_keys

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_state = handle.getValueState("bucket", BUCKET_SCHEMA)
        self.blocks = handle.getMapState("blocks", "sub int", BLOCK_SCHEMA)
        # F065-R37: a compact stream's shards, the exact keys apart from the sketches, so that a
        # clock, idle or remove_key row reads only the exact keys.
        self.shard_keys = handle.getMapState("shard_keys", "shard long", SHARD_KEYS_SCHEMA)
        self.shard_sketches = handle.getMapState("shard_sketches", "shard long", SHARD_SKETCH_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, cfg: StreamConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        pdf = _collapse_ticks(pdf)
        if not self.ordered:
            # No arrival order given: the tick first, then event-time order, ties by key.
            pdf = pdf.assign(kw_first=pdf["kw_kind"].to_numpy(object) != "tick")
            pdf = pdf.sort_values(["kw_first", "kw_et", "kw_key"], kind="stable").reset_index(drop=True)
            pdf["kw_seq"] = np.arange(len(pdf), dtype=np.int64)
        stored = self.bucket_state.get()
        st = (
            BucketState.from_tuple(stored, self.buckets) if stored is not None
            else BucketState(self.buckets)
        )  # fmt: skip
        if len(st.subs) and (st.level == COMPACT_LAYOUT) != cfg.compact:
            held, given = ("exact", "compact") if cfg.compact else ("compact", "exact")
            raise IncompatibleCheckpoint(
                f"keyed_watermarks: the checkpoint holds the {held} tracker's state; "
                f"this stream's settings ask for the {given} tracker",
                "Start from a new checkpoint, or keep the settings",
                "keyed_watermarks",
                "bucket",
            )
        out = _Out(stream_id)
        for b, part in batches_in(pdf, "kw_batch", True, 0):
            if cfg.compact:
                self._compact_batch(st, cfg, bucket, part, b, out)
            else:
                self._batch(st, cfg, bucket, part, b, out)
        self.bucket_state.update(st.to_tuple())
        yield out.masked_frame(NULL_MASK)

    def _compact_batch(
        self, st: BucketState, cfg: StreamConfig, bucket: int, rows: pd.DataFrame, b: int, out: _Out
    ) -> None:
        """F065-R26..R37: read the shards the batch touches, apply it, write them back."""
        st.level = COMPACT_LAYOUT
        kind = rows["kw_kind"].to_numpy(object)
        live = ~_after_end(kind, rows["kw_seq"].to_numpy(np.int64), st.ended)  # after the end: no reads
        keyed = pd.notna(rows["kw_key"].to_numpy(object)) & live
        shard = rows["kw_shard"].to_numpy(np.int64)
        with_events = np.unique(shard[keyed & (kind == "event") & ~rows["kw_et_null"].to_numpy(bool)])
        home = rows["kw_home"].to_numpy(np.int64) == bucket
        marked = shard[keyed & ((kind == "idle") | (kind == "remove_key")) & home]
        subs = st.subs
        known = subs[:, 0]
        want = np.union1d(with_events, np.intersect1d(marked, known))
        timed = ((kind == "clock") | (kind == "tick")) & ~rows["kw_time_null"].to_numpy(bool) & live
        if timed.any() and len(subs):
            cutoff = int(rows["kw_time"].to_numpy(np.int64)[timed].max()) - cfg.idle_timeout
            if cutoff > I64_MIN:  # shards with an active key whose activity may be older (F065-R10)
                may_idle = (subs[:, 1] > subs[:, 2]) & (subs[:, 5] < cutoff)
                want = np.union1d(want, known[may_idle])
        read = np.isin(known, want)
        stored = dict(zip(known[read].tolist(), subs[read, 6].tolist(), strict=True))
        state_calls = 1  # the bucket state read
        shards: dict[int, _Shard] = {}
        with_events_set = set(with_events.tolist())
        for number in want.tolist():
            exact: OrderedDict[str, list[Any]] = OrderedDict()
            sketch = None
            if number in stored:
                exact = unpack_exact(self._read_value(self.shard_keys, number, bucket))
                state_calls += 1
            if number in with_events_set:
                value = self._read_value(self.shard_sketches, number, bucket) if number in stored else None
                if value is not None:
                    check_sketch_settings(value, cfg, number)
                    state_calls += 1
                sketch = _Sketch(cfg, value)
            shards[number] = _Shard(exact, sketch, stored.get(number, 0))
        run = _CompactBucket(st, cfg, bucket, self.ordered, shards, rest=_rest(subs[~read]))
        run.emitted = run.aggregate()
        pieces = len(out.pieces)
        process_compact_bucket(run, rows, b, out)
        python_calls = 1 + any(cols["output"] != "summary" for _, cols in out.pieces[pieces:])
        new_rows = []
        for number, sh in shards.items():
            if sh.changed:
                self.shard_keys.updateValue((number,), pack_exact(sh.exact))
                state_calls += 1
            if sh.sketch is not None:
                self.shard_sketches.updateValue((number,), sh.sketch.to_tuple(cfg))
                state_calls += 1
            new_rows.append(sh.summary_row(number))
        st.subs = np.concatenate(
            [subs[~read], np.array(new_rows, np.int64).reshape(-1, len(_SUMMARY_FIELDS))]
        )
        run.estimated = int(st.subs[:, 6].sum())
        state_calls += 1  # the bucket state write
        run.summary(out, b, (LAST_CALL, 1), final=True, state_calls=state_calls, python_calls=python_calls)

    def _read_value(self, state: Any, number: int, bucket: int) -> tuple[Any, ...]:
        value = state.getValue((number,))
        if value is None:  # the summary lists only shards that hold a value
            variable = "shard_keys" if state is self.shard_keys else "shard_sketches"
            raise missing_value("keyed_watermarks", variable, f"shard {number} of bucket {bucket}")
        return tuple(value)

    def _batch(
        self, st: BucketState, cfg: StreamConfig, bucket: int, rows: pd.DataFrame, b: int, out: _Out
    ) -> None:
        kind = rows["kw_kind"].to_numpy(object)
        after = _after_end(kind, rows["kw_seq"].to_numpy(np.int64), st.ended)  # read nothing for these
        keyed = pd.notna(rows["kw_key"].to_numpy(object)) & (
            ((kind == "event") & ~rows["kw_et_null"].to_numpy(bool))
            | (((kind == "idle") | (kind == "remove_key")) & (rows["kw_home"].to_numpy(np.int64) == bucket))
        )
        keyed &= ~after
        subs = st.subs
        known = subs[:, 0]
        want = np.unique(block_of(rows["kw_hash"].to_numpy(np.int64)[keyed], st.level, st.split))
        if cfg.max_keys is not None and not st.ended:
            want = np.union1d(want, known)  # eviction reads the whole stream (F065-R12)
        if not st.ended and (kind == "end").any():
            want = np.union1d(want, known[subs[:, 7] > 0])  # F065-R38: the blocks whose windows fire
        timed = ((kind == "clock") | (kind == "tick")) & ~rows["kw_time_null"].to_numpy(bool) & ~after
        if timed.any() and len(subs):
            cutoff = int(rows["kw_time"].to_numpy(np.int64)[timed].max()) - cfg.idle_timeout
            if cutoff > I64_MIN:  # keys whose activity may be older than the timeout (F065-R10)
                may_idle = (subs[:, 1] > subs[:, 2]) & (subs[:, 5] < cutoff)
                want = np.union1d(want, known[may_idle])
        read = np.isin(known, want)
        state_calls = 1  # the bucket state read
        keys, windows = unpack_blocks(self._read(known[read], bucket))
        state_calls += int(read.sum())
        others = subs[~read]
        rest = _rest(others)
        run = _Bucket(st, cfg, bucket, self.ordered, keys, windows, rest)
        run.emitted = run.aggregate()
        pieces = len(out.pieces)
        process_bucket(run, rows, b, out)
        # This group's call, and the second stage's pass-through call if it sends table rows.
        python_calls = 1 + any(cols["output"] != "summary" for _, cols in out.pieces[pieces:])
        # Linear hashing: split blocks in order while they hold more than block_keys keys on
        # average, so a value never grows with the keys in state; a block to split is read.
        t, w = run.keys, run.windows
        total = int(others[:, 1].sum()) + len(t)
        while total > self.block_keys * st.blocks():
            victim = others[:, 0] == st.split
            if victim.any():
                more_keys, more_windows = unpack_blocks(self._read(others[victim, 0], bucket))
                state_calls += 1
                t = concat_keys(t, more_keys)
                w = pd.concat([w, more_windows], ignore_index=True)
                read[np.flatnonzero(~read)[victim]] = True
                others = others[~victim]
            st.split += 1
            if st.split == 1 << st.level:
                st.level, st.split = st.level + 1, 0
        # Write back every block read or created; drop those left empty.
        ksub = block_of(t.hash, st.level, st.split)
        wsub = block_of(w["hash"].to_numpy(np.int64), st.level, st.split)
        touched = np.union1d(known[read], np.union1d(ksub, wsub))
        korder = np.argsort(ksub, kind="stable")
        worder = np.argsort(wsub, kind="stable")
        kb = (
            np.searchsorted(ksub[korder], touched, side="left"),
            np.searchsorted(ksub[korder], touched, side="right"),
        )
        wb = (
            np.searchsorted(wsub[worder], touched, side="left"),
            np.searchsorted(wsub[worder], touched, side="right"),
        )
        rows_out = []
        for i, sub in enumerate(touched.tolist()):
            krows = korder[kb[0][i] : kb[1][i]]
            wrows = worder[wb[0][i] : wb[1][i]]
            if len(krows) == 0 and len(wrows) == 0:
                if sub in known:
                    self.blocks.removeKey((int(sub),))
                    state_calls += 1
                continue
            self.blocks.updateValue((int(sub),), pack_block(t, krows, w, wrows))
            state_calls += 1
            idle = t.idle[krows]
            act = ~idle
            rows_out.append((
                sub, len(krows), int(idle.sum()),
                int(t.wm[krows][act].min()) if act.any() else I64_MAX,
                int(t.wm[krows].max()) if len(krows) else I64_MIN,
                int(t.last[krows][act].min()) if act.any() else I64_MAX, 0, len(wrows),
            ))  # fmt: skip
        new_rows = np.array(rows_out, np.int64).reshape(-1, len(_SUMMARY_FIELDS))
        st.subs = np.concatenate([others, new_rows])
        state_calls += 1  # the bucket state write
        run.summary(out, b, (LAST_CALL, 1), final=True, state_calls=state_calls, python_calls=python_calls)

    def _read(self, blocks: np.ndarray, bucket: int) -> list[tuple[Any, ...]]:
        values = []
        for block in blocks.tolist():
            value = self.blocks.getValue((int(block),))
            if value is None:  # the summary lists only blocks that hold a value
                raise missing_value("keyed_watermarks", "blocks", f"block {block} of bucket {bucket}")
            values.append(value)
        return values


def _rest(others: np.ndarray) -> Aggregate:
    """The figures of the blocks a call did not read, from their summary rows."""
    active = others[:, 1] > others[:, 2]
    return Aggregate(
        int(others[:, 1].sum()), int(others[:, 2].sum()),
        int(others[active, 3].min()) if active.any() else I64_MAX,
        int(others[:, 4].max()) if len(others) else I64_MIN,
    )  # fmt: skip


class StreamSummaryProcessor(SecondStage):
    """The narrow stage (route -1): each bucket's summary and the stream's counters."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)

    def __init__(
        self, buckets: int, compact_default: bool = False, compact_streams: Mapping[str, bool] | None = None
    ) -> None:
        self.buckets = buckets
        self.compact_default = compact_default  # F065-R35: estimated_keys is null for other streams
        self.compact_streams = dict(compact_streams or {})

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("stream", STREAM_SCHEMA)

    def summarise(self, stream_id: str | None, rows: pd.DataFrame) -> pd.DataFrame:
        stored = self.state.get()
        st = StreamState.from_tuple(stored, self.buckets) if stored is not None else StreamState(self.buckets)
        out = OutputRows(stream_id, OUTPUT_COLUMNS, STRING_COLS)
        compact = self.compact_default
        if stream_id is not None:
            compact = self.compact_streams.get(stream_id, self.compact_default)
        for b, part in batches_in(rows, "batch", True, 0):
            summarise_batch(st, part, b, out, compact)
        self.state.update(st.to_tuple())
        return out.masked_frame(NULL_MASK)


def summarise_batch(
    st: StreamState, rows: pd.DataFrame, b: int, out: OutputRows, compact: bool = False
) -> None:
    """F065-R5..R8, R19, R22: the global watermark after every call, the progress row; for a
    compact stream also estimated_keys, the sum of the buckets' latest estimates (R34, R35)."""
    rows = rows.sort_values(["s_call_seq", "s_call_part"], kind="stable")
    call = rows[["s_call_seq", "s_call_part"]].to_numpy(np.int64)
    bucket = rows["s_bucket"].to_numpy(np.int64)
    figures = rows[["s_keys", "s_idle", "s_min_active", "s_max"]].to_numpy(np.int64)
    ends = np.flatnonzero(np.any(call[1:] != call[:-1], axis=1)).tolist() + [len(rows) - 1]
    start = 0
    for end in ends:
        before = st.global_watermark()
        st.summaries[bucket[start : end + 1], :4] = figures[start : end + 1]  # later rows win
        after = st.global_watermark()
        if after is not None and (before is None or after > before):  # F065-R8
            st.global_advances += 1
        start = end + 1
    st.key_advances += int(rows["s_key_advances"].sum())
    st.evicted += int(rows["s_evicted"].sum())
    final = (call[:, 0] == LAST_CALL) & (call[:, 1] == 1)
    st.summaries[bucket[final], 4] = rows["s_estimated"].to_numpy(np.int64)[final]
    s = st.summaries
    total, idle = int(s[:, 0].sum()), int(s[:, 1].sum())
    g = st.global_watermark()
    estimated = int(s[:, 4].sum())
    out.add(
        "progress", 1, batch=b, global_watermark=(np.array([g or 0]), np.array([g is None])),
        total_keys=total, active_keys=total - idle, idle_keys=idle, evicted_keys=st.evicted,
        global_advances=st.global_advances, key_advances=st.key_advances,
        estimated_keys=(np.array([estimated]), np.array([not compact])),
    )  # fmt: skip
    out.add(
        "metrics", 1, batch=b,
        python_calls=int(rows["s_python_calls"].sum()) + 1, state_calls=int(rows["s_state_calls"].sum()) + 2,
    )  # fmt: skip
