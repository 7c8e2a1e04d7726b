"""Exactly-once aggregation's three stages: the channel stage (a message's checks and its verdict
against its channel's window), the key stage (the aggregates of accepted messages) and the per-
stream totals.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd

from spark_impl.common import OutputRows, StatefulProcessor, StatefulProcessorHandle
from spark_impl.exactly_once_aggregation.amounts import (
    AMOUNT_INVALID,
    AMOUNT_MISSING,
    AMOUNT_OK,
    canonical_nan,
    double_text,
    parse_amounts,
)
from spark_impl.exactly_once_aggregation.folds import Folds, fold_values
from spark_impl.exactly_once_aggregation.layout import (
    AGGREGATE_KEY_SCHEMA,
    AGGREGATE_SCHEMA,
    BUCKET_SCHEMA,
    CHANNEL_KEY_SCHEMA,
    CHANNEL_SCHEMA,
    KEY_BUCKET,
    KEY_BUCKET_SCHEMA,
    OUTPUT_COLUMNS,
    STREAM_SCHEMA,
    STRING_COLS,
    SUMMARY_COLS,
    VALUE,
    WIDE_COLUMNS,
    BucketState,
    KeyBucketState,
    StreamState,
    bound_setting,
    unpack_aggregate,
)
from spark_impl.exactly_once_aggregation.settings import KIND_CODES, VERDICTS, StreamConfig
from spark_impl.exactly_once_aggregation.windows import _stored_bits, pack_channel, unpack_channel, verdicts
from spark_impl.scaleout import (
    DUPLICATE_SEQ,
    NULL_MASK,
    SUMMARY_ROUTE,
    BatchSummaryStage,
    WideStage,
    bucket_of,
    one_frame,
)

# ---- the channel stage -------------------------------------------------------------------------

_DEFAULTS: dict[str, Any] = {"eoa_kind": "event"}


_VERDICT_NAMES = np.array(VERDICTS, dtype=object)


def message_checks(pdf: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OXE-R16 in its order: (the error reason per row, None for none; whether the row is a
    message to judge; the amounts). The harness's ``batch_end`` marker is neither."""
    n = len(pdf)
    kind = pdf["eoa_kind"].to_numpy(object)
    reason = np.full(n, None, dtype=object)
    marker = kind == "batch_end"
    open_ = ~marker
    for name, mask in (
        (DUPLICATE_SEQ, kind == DUPLICATE_SEQ),
        ("unsupported_item", kind != "event"),
        ("missing_id", pdf["eoa_producer_null"].to_numpy(bool) | pdf["eoa_partition_null"].to_numpy(bool)
         | pdf["eoa_sequence_null"].to_numpy(bool)),
        ("invalid_sequence", pdf["eoa_sequence"].to_numpy(np.int64) < 0),
        ("missing_key", pd.isna(pdf["eoa_key"]).to_numpy(bool)),
    ):  # fmt: skip
        hit = open_ & mask
        reason[hit] = name
        open_ &= ~hit
    amounts = np.zeros(n, np.float64)
    at = np.flatnonzero(open_)
    values, status = parse_amounts(pdf["eoa_amount"].to_numpy(object)[at])
    amounts[at] = values
    reason[at[status == AMOUNT_MISSING]] = "missing_amount"
    reason[at[status == AMOUNT_INVALID]] = "invalid_amount"
    well_formed = np.zeros(n, bool)
    well_formed[at[status == AMOUNT_OK]] = True
    return reason, well_formed, amounts


class ChannelBucketProcessor(WideStage):
    """The channel stage: one call per (stream, channel bucket) and micro-batch."""

    defaults = _DEFAULTS

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_state = handle.getValueState("bucket", BUCKET_SCHEMA)
        self.channels = handle.getMapState("channels", CHANNEL_KEY_SCHEMA, CHANNEL_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, cfg: StreamConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        window = cfg.dedup_window
        stored = self.bucket_state.get()
        if stored is not None:
            found = BucketState.from_tuple(stored, self.buckets)
            if found.dedup_window != window:
                raise bound_setting("dedup_window", found.dedup_window, window, "bucket")
        else:
            self.bucket_state.update(BucketState(self.buckets, window).to_tuple())
        if not self.ordered:
            pdf = pdf.assign(eoa_seq=np.arange(len(pdf), dtype=np.int64))
        pdf = pdf.sort_values(["eoa_batch", "eoa_seq"], kind="stable", ignore_index=True)
        reason, well_formed, amounts = message_checks(pdf)
        out = OutputRows(stream_id, WIDE_COLUMNS, STRING_COLS)
        batch_all = pdf["eoa_batch"].to_numpy(np.int64)
        seq_all = pdf["eoa_seq"].to_numpy(np.int64)
        seq_null = np.full(len(pdf), not self.ordered)
        order_all = seq_all if self.ordered else np.int64(bucket) * np.int64(1 << 40) + seq_all
        bad = np.flatnonzero(pd.notna(pd.Series(reason, dtype=object)).to_numpy(bool))
        if len(bad):
            out.add(
                "errors", len(bad), batch=batch_all[bad], seq=(seq_all[bad], seq_null[bad]),
                reason=reason[bad], kw_route=bucket, eoa_key_bucket=bucket,
            )  # fmt: skip
        at = np.flatnonzero(well_formed)
        producer = pdf["eoa_producer"].to_numpy(np.int64)[at]
        partition = pdf["eoa_partition"].to_numpy(np.int64)[at]
        sequence = pdf["eoa_sequence"].to_numpy(np.int64)[at]
        pairs = pd.DataFrame({"p": producer, "q": partition})
        channel = pairs.groupby(["p", "q"], sort=False).ngroup().to_numpy(np.int64)
        names = pairs.drop_duplicates().to_numpy(np.int64)  # row i is channel i (first appearance)
        entries = [self.channels.getValue((int(p), int(q))) for p, q in names.tolist()]
        stored_high = np.array([-1 if e is None else int(e[0]) for e in entries], np.int64)
        stored_bits = [None if e is None else _stored_bits(e, window) for e in entries]
        code = verdicts(channel, sequence, stored_high, stored_bits, window)
        folded = code == 0
        batch, seq = batch_all[at], seq_all[at]
        keys = pdf["eoa_key"].to_numpy(object)[at]
        if len(at):
            out.add(
                "messages", len(at), batch=batch, seq=(seq, seq_null[at]), producer=producer,
                partition=partition, sequence=sequence, key=keys, verdict=_VERDICT_NAMES[code],
                kw_route=bucket, eoa_key_bucket=bucket,
            )  # fmt: skip
        f = np.flatnonzero(folded)
        if len(f):
            out.add(
                "fold", len(f), batch=batch[f], seq=(seq[f], seq_null[at][f]), key=keys[f],
                eoa_key_bucket=pdf[KEY_BUCKET].to_numpy(np.int64)[at][f], kw_route=bucket,
                eoa_bits=canonical_nan(amounts[at][f]).view(np.int64), eoa_order=order_all[at][f],
            )  # fmt: skip
        for b in np.unique(batch_all).tolist():  # a summary per batch the call holds, markers included
            in_b = batch == b
            counts = [int((in_b & (code == v)).sum()) for v in range(3)]
            out.add(
                "summary", 1, batch=b, kw_route=SUMMARY_ROUTE, eoa_key_bucket=bucket, s_folded=counts[0],
                s_duplicates=counts[1], s_outside_window=counts[2], s_keys=0,
            )  # fmt: skip
        self._write(names, entries, stored_high, channel, sequence, folded, window)
        yield out.masked_frame(NULL_MASK)

    def _write(
        self, names: np.ndarray, entries: list[Any], stored_high: np.ndarray, channel: np.ndarray,
        sequence: np.ndarray, folded: np.ndarray, window: int,
    ) -> None:  # fmt: skip
        """Each channel with a folded message: its new ``high`` and window back to its entry."""
        if not folded.any():
            return
        fc, fs = channel[folded], sequence[folded]
        order = np.argsort(fc, kind="stable")
        fc, fs = fc[order], fs[order]
        bounds = np.flatnonzero(np.r_[True, fc[1:] != fc[:-1], True])
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            c = int(fc[lo])
            new = fs[lo:hi]
            old_high = int(stored_high[c])
            high = max(old_high, int(new.max()))
            old = unpack_channel(entries[c])[1] if entries[c] is not None else new[:0]
            kept = np.unique(np.concatenate([old, new]))
            kept = kept[kept > high - window]
            self.channels.updateValue((int(names[c][0]), int(names[c][1])), pack_channel(high, kept, window))


# ---- the key stage -----------------------------------------------------------------------------


class KeyBucketProcessor(StatefulProcessor):  # type: ignore[misc]
    """The key stage: one call per (stream, key bucket) and micro-batch. Fold rows update the
    bucket's keys; every other row passes through."""

    def __init__(self, default: StreamConfig, per_stream: Mapping[str, StreamConfig], buckets: int) -> None:
        self.default = default
        self.per_stream = dict(per_stream)
        self.buckets = buckets

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_state = handle.getValueState("key_bucket", KEY_BUCKET_SCHEMA)
        self.aggregates = handle.getMapState("aggregates", AGGREGATE_KEY_SCHEMA, AGGREGATE_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[pd.DataFrame]:
        from spark_impl.checkpoints import CheckpointError

        stream_id, bucket = None if key[0] is None else str(key[0]), bucket_of(key[1], self.buckets)
        cfg = self.default if stream_id is None else self.per_stream.get(stream_id, self.default)
        pdf = one_frame(rows)
        is_fold = pdf["output"].to_numpy(object) == "fold"
        if not is_fold.all():
            yield pdf.loc[~is_fold, [*WIDE_COLUMNS, NULL_MASK]]
        if is_fold.any():
            try:
                yield self.fold(stream_id, bucket, cfg, pdf[is_fold])
            except CheckpointError as error:
                raise error.in_stream(stream_id) from None

    def fold(self, stream_id: str | None, bucket: int, cfg: StreamConfig, pdf: pd.DataFrame) -> pd.DataFrame:
        stored = self.bucket_state.get()
        if stored is not None:
            found = KeyBucketState.from_tuple(stored, self.buckets)
            if found.aggregate != cfg.aggregate:
                raise bound_setting("aggregate", found.aggregate, cfg.aggregate, "key_bucket")
        else:
            self.bucket_state.update(KeyBucketState(self.buckets, cfg.aggregate).to_tuple())
        pdf = pdf.sort_values(["batch", "eoa_order"], kind="stable")
        code, distinct = pd.factorize(pd.Series(pdf["key"].to_numpy(object), dtype=object), sort=False)
        keys = np.asarray(distinct, dtype=object)
        entries = [self.aggregates.getValue((k,)) for k in keys.tolist()]
        stored_value = np.zeros(len(keys), np.float64)
        stored_count = np.zeros(len(keys), np.int64)
        has = np.zeros(len(keys), bool)
        for i, entry in enumerate(entries):
            if entry is None:
                continue
            kind, number, entry_count = unpack_aggregate(entry)
            if kind != cfg.aggregate:
                raise bound_setting("aggregate", kind, cfg.aggregate, "aggregates")
            has[i], stored_value[i], stored_count[i] = True, number, entry_count
        folds = Folds(
            keys, code.astype(np.int64), pdf["batch"].to_numpy(np.int64),
            pdf["eoa_bits"].to_numpy(np.int64).view(np.float64), has, stored_value, stored_count,
        )  # fmt: skip
        batch, value, count, key_code = fold_values(folds, cfg.aggregate)
        value = canonical_nan(value)
        out = OutputRows(stream_id, WIDE_COLUMNS, STRING_COLS)
        n = len(batch)
        has_value = cfg.aggregate != "count"
        has_count = cfg.aggregate in ("count", "mean")
        text = np.array([double_text(v) for v in value.tolist()], dtype=object) if has_value else None
        out.add(
            "aggregates", n, batch=batch, key=keys[key_code], kind=cfg.aggregate, **{VALUE: text},
            count=(count, np.full(n, not has_count)), kw_route=bucket,
        )  # fmt: skip
        # a key's first batch among its rows is its first value unless it had an entry already
        first_row = np.ones(n, bool)
        first_row[1:] = key_code[1:] != key_code[:-1]
        new_key_batches = batch[first_row & ~has[key_code]]
        for b in np.unique(batch).tolist():
            out.add("summary", 1, batch=b, kw_route=SUMMARY_ROUTE, s_folded=0, s_duplicates=0,
                    s_outside_window=0, s_keys=int((new_key_batches == b).sum()))  # fmt: skip
        last_row = np.ones(n, bool)
        last_row[:-1] = key_code[1:] != key_code[:-1]
        kind_code = KIND_CODES[cfg.aggregate]
        for i in np.flatnonzero(last_row).tolist():
            entry = (kind_code, float(value[i]) if has_value else 0.0, int(count[i]) if has_count else 0)
            self.aggregates.updateValue((keys[key_code[i]],), entry)
        return out.masked_frame(NULL_MASK)

    def close(self) -> None:
        pass


# ---- the narrow stage --------------------------------------------------------------------------


def summarise_batch(st: StreamState, rows: pd.DataFrame, b: int, out: OutputRows) -> None:
    """OXE-R18: the batch's counter deltas added to the totals, then its progress row."""
    summaries = rows[rows["output"].to_numpy(object) == "summary"]
    deltas = summaries[list(SUMMARY_COLS)].to_numpy(np.int64).sum(axis=0)
    st.folded += int(deltas[0])
    st.duplicates += int(deltas[1])
    st.outside_window += int(deltas[2])
    st.keys += int(deltas[3])
    out.add("progress", 1, batch=b, folded=st.folded, duplicates=st.duplicates,
            outside_window=st.outside_window, keys=st.keys)  # fmt: skip


class StreamTotalsProcessor(BatchSummaryStage):
    """The narrow stage (route -1): the progress totals; other routes pass through."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)
    state_schema = STREAM_SCHEMA
    state_class = StreamState
    string_cols = STRING_COLS
    summarise_batch = staticmethod(summarise_batch)

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        # named ``totals`` (not ``stream``): the checkpoint inspection lists it under that name
        self.state = handle.getValueState("totals", self.state_schema)
