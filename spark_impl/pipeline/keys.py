"""The pipeline's third stage: the exactly-once key processor and the narrow progress group."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from spark_impl import exactly_once_aggregation as eoa
from spark_impl.common import OutputRows
from spark_impl.pipeline.layout import (
    _EACH_CALL,
    COLUMNS,
    KEYS,
    LONG_COLS,
    NARROW,
    NARROW_BUCKET,
    PASS,
    TOTALS_SCHEMA,
    StreamState,
    _longs,
    _out,
    _Stage,
    prefixed,
)
from spark_impl.pipeline.settings import AGGREGATOR, PROGRESS, PipelineConfig
from spark_impl.scaleout import NULL_MASK

# ---- the key stage -----------------------------------------------------------------------------


class KeyProcessor(_Stage):
    """The aggregator's key buckets and the narrow group of each stream id (progress)."""

    units = (KEYS, NARROW)

    def open_state(self, handle: Any) -> None:
        self.keys = eoa.KeyBucketProcessor(_EACH_CALL, {}, self.buckets)
        self.keys.init(prefixed(handle, AGGREGATOR + "_"))
        self.totals = handle.getValueState("totals", TOTALS_SCHEMA)

    def group(self, key: Any) -> tuple[str, int]:
        """Route -1 is the narrow group; any other holds a key bucket's folds and table rows."""
        route = int(key[1])
        return (NARROW if route == NARROW_BUCKET else KEYS), route

    def process(
        self, stream_id: str | None, unit: str, bucket: int, cfg: PipelineConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        out = _out(stream_id)
        if unit == KEYS:
            is_fold = pdf["output"].to_numpy(object) == "fold"
            if not is_fold.all():
                yield pdf.loc[~is_fold, [*COLUMNS, NULL_MASK]]
            if not is_fold.any():
                return
            pdf = pdf[is_fold]
            folds = pd.DataFrame(
                {
                    "output": "fold",
                    "batch": pdf["batch"].to_numpy(np.int64),
                    "key": pdf["key"].to_numpy(object),
                    "eoa_bits": pdf["p_bits"].to_numpy(np.int64),
                    "eoa_order": pdf["p_order"].to_numpy(np.int64),
                }
            )
            told = self.keys.fold(stream_id, bucket, cfg.aggregation, folds)
            rows = told[told["output"].to_numpy(object) == "aggregates"]
            out.add("aggregates", len(rows), batch=rows["batch"].to_numpy(np.int64),
                    key=rows["key"].to_numpy(object), kind=rows["kind"].to_numpy(object),
                    number=rows[eoa.VALUE].to_numpy(object), count=_longs(rows, eoa.LONG_COLS, "count"),
                    p_unit=PASS, p_bucket=bucket)  # fmt: skip
        else:
            self._progress(pdf, out)
        yield out.masked_frame(NULL_MASK)

    def _progress(self, pdf: pd.DataFrame, out: OutputRows) -> None:
        """OXP-R10: the totals after each batch and the consumers' minimum watermark."""
        stored = self.totals.get()
        st = (
            StreamState(self.buckets, [0] * len(PROGRESS))
            if stored is None
            else StreamState.from_tuple(tuple(stored), self.buckets)
        )
        totals, mark, has_mark = st.totals, st.watermark, st.has_watermark
        watermark, null = _longs(pdf, LONG_COLS, "watermark")
        batch = pdf["batch"].to_numpy(np.int64)
        for b in np.unique(batch).tolist():
            in_b = batch == b
            for i, c in enumerate(PROGRESS):
                totals[i] += int(pdf[c].to_numpy(np.int64)[in_b].sum())
            given = watermark[in_b & ~null]
            if len(given):
                top = int(given.max())
                mark, has_mark = (max(mark, top) if has_mark else top), True
            out.add("progress", 1, batch=b, watermark=(np.array([mark], np.int64), np.array([not has_mark])),
                    p_unit=PASS, p_bucket=NARROW_BUCKET, **dict(zip(PROGRESS, totals)))  # fmt: skip
        self.totals.update(StreamState(self.buckets, totals, mark, has_mark).to_tuple())
