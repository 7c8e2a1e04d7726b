"""Window joins (oxirs): the stateful processors: the wide stage of a (stream, bucket) and the
narrow stage that keeps a stream's totals (or the sink step in its place)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from spark_impl.common import (
    OutputRows,
    StatefulProcessorHandle,
    batches_in,
)
from spark_impl.scaleout import (
    NULL_MASK,
    SUMMARY_ROUTE,
    BatchSummaryStage,
    WideStage,
)
from spark_impl.window_joins.joins import (
    _Out,
    classify,
    pane_batch,
    session_batch,
)
from spark_impl.window_joins.layout import (
    BUCKET_SCHEMA,
    DUE_KEY_SCHEMA,
    DUE_SCHEMA,
    LONG_COLS,
    OUTPUT_COLUMNS,
    STREAM_SCHEMA,
    STRING_COLS,
    SUMMARY_COLS,
    WINDOW_KEY_SCHEMA,
    WINDOW_SCHEMA,
    BucketState,
    DueIndex,
    StreamState,
    Windows,
)
from spark_impl.window_joins.settings import (
    COUNTERS,
    LEFT,
    RIGHT,
    StreamConfig,
)

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
