"""The order stage: one chunk of a stream's rows given its arrival positions and its bucket (no state)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MIN
from spark_impl.common import StatefulProcessor, StatefulProcessorHandle
from spark_impl.scaleout import DUPLICATE_SEQ, one_frame

# ---- the order stage: one chunk of arrival positions (no state) ----------------------------

_ORDER_DEFAULTS: dict[str, Any] = {"sw_seq": np.int64(0), "sw_kind": "event", "sw_value": np.int64(0)}


def order_chunk(
    pdf: pd.DataFrame, stream_id: str | None, batch: int, chunk: int, buckets: int, ordered: bool,
    check_seq: bool = False,
) -> pd.DataFrame:  # fmt: skip
    """One chunk's rows in arrival order, each with the highest event time of the chunk before it
    and its bucket, plus one summary row per bucket (the chunk's highest event time and row count).

    ``ordered``: the rows carry arrival positions (``sw_seq``); otherwise the chunk is an
    event-time range, its rows are taken in event-time order, ties by key, and ``sw_seq``
    becomes the position inside the chunk (the wide stage adds the rows of the earlier chunks).
    ``check_seq``: every row of a seq shared by several becomes a ``duplicate_seq`` row (TR-15)."""
    if ordered:
        pdf = pdf.sort_values("sw_seq", kind="stable")
    else:
        pdf = pdf.sort_values(["sw_et", "sw_key"], kind="stable", na_position="last")
    n = len(pdf)
    seq = pdf["sw_seq"].to_numpy(np.int64) if ordered else np.arange(n, dtype=np.int64)
    kind = pdf["sw_kind"].to_numpy(object)
    if ordered and check_seq:  # TR-15: a chunk holds every row of its seqs, so repeats meet here
        item = kind != "batch_end"
        for flag in ("sw_seq_null", "sw_batch_null"):  # a row without a seq or batch is compared with none
            if flag in pdf.columns:
                item &= ~pdf[flag].to_numpy(bool)
        repeated = np.zeros(n, bool)
        repeated[item] = pd.Series(seq[item]).duplicated(keep=False).to_numpy(bool)
        kind = np.where(repeated, DUPLICATE_SEQ, kind).astype(object)
    key = pdf["sw_key"].to_numpy(object)
    et = pdf["sw_et"].to_numpy(np.int64)
    et_null = pdf["sw_et_null"].to_numpy(bool)
    key_hash = pdf["sw_hash"].to_numpy(np.int64)
    valid = (kind == "event") & pd.notna(key) & ~et_null  # F017E-R20: only these move the watermark
    upto = np.maximum.accumulate(np.where(valid, et, np.int64(I64_MIN)))
    run = np.empty(n, np.int64)
    run[:1] = I64_MIN
    run[1:] = upto[:-1]
    run_has = (np.cumsum(valid) - valid) > 0
    # An event goes to its key's bucket, an end row to every bucket (F017E-R23), the rest to 0.
    copies = np.where(kind == "end", buckets, 1)
    rows = np.repeat(np.arange(n), copies)
    within = np.arange(len(rows)) - np.repeat(np.cumsum(copies) - copies, copies)
    home = np.where(valid, np.mod(key_hash, buckets), 0)  # numpy's mod of a positive divisor is pmod
    bucket = np.where(copies[rows] > 1, within, home[rows])
    m = len(rows)
    top_has = bool(valid.any())
    every = np.arange(buckets, dtype=np.int64)
    data: dict[str, Any] = {
        "sw_sid": np.full(m + buckets, stream_id, dtype=object),
        "sw_bucket": np.concatenate([bucket, every]),
        "sw_batch": np.full(m + buckets, batch, np.int64),
        "sw_chunk": np.full(m + buckets, chunk, np.int64),
        "sw_seq": np.concatenate([seq[rows], np.full(buckets, n, np.int64)]),
        "sw_kind": np.concatenate([kind[rows], np.full(buckets, None, dtype=object)]),
        "sw_key": np.concatenate([key[rows], np.full(buckets, None, dtype=object)]),
        "sw_hash": np.concatenate([key_hash[rows], np.zeros(buckets, np.int64)]),
        "sw_et": np.concatenate([et[rows], np.zeros(buckets, np.int64)]),
        "sw_et_null": np.concatenate([et_null[rows], np.zeros(buckets, bool)]),
        "sw_value": np.concatenate([pdf["sw_value"].to_numpy(np.int64)[rows], np.zeros(buckets, np.int64)]),
        "sw_run": np.concatenate([run[rows], np.full(buckets, upto[-1] if top_has else 0, np.int64)]),
        "sw_run_has": np.concatenate([run_has[rows], np.full(buckets, top_has)]),
        "sw_summary": np.concatenate([np.zeros(m, bool), np.ones(buckets, bool)]),
    }
    return pd.DataFrame(data, copy=False)


class ChunkOrderProcessor(StatefulProcessor):  # type: ignore[misc]
    """The order stage: one call per (stream, batch, chunk) and micro-batch; it keeps no state."""

    def __init__(self, buckets: int, ordered: bool, check_seq: bool = False) -> None:
        self.buckets = buckets
        self.ordered = ordered
        self.check_seq = check_seq  # TR-15

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[pd.DataFrame]:
        # A null stream id stays null (TR-16): str() would merge it with the stream called "None".
        stream_id, batch, chunk = None if key[0] is None else str(key[0]), int(key[1]), int(key[2])
        pdf = one_frame(rows, _ORDER_DEFAULTS)
        yield order_chunk(pdf, stream_id, batch, chunk, self.buckets, self.ordered, self.check_seq)

    def close(self) -> None:
        pass
