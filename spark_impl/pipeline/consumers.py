"""The pipeline's second stage: each consumer's watermark from the streams it reads, and the window
joins' and exactly-once channels' processors fed through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from harness.pipeline_settings import JOINS
from harness.traces import I64_MIN
from spark_impl import exactly_once_aggregation as eoa
from spark_impl import window_joins
from spark_impl.checkpoints import layout_refusal
from spark_impl.common import OutputRows
from spark_impl.pipeline.ingress import _shift
from spark_impl.pipeline.layout import (
    _EACH_CALL,
    AGGREGATOR_WATERMARK,
    KEYS,
    NARROW,
    NARROW_BUCKET,
    NODE_SCHEMA,
    PASS,
    NodeState,
    _longs,
    _out,
    _Stage,
    prefixed,
)
from spark_impl.pipeline.settings import AGGREGATOR, OPERATOR, JoinSpec, PipelineConfig
from spark_impl.scaleout import NULL_MASK

# ---- the consumer stage ------------------------------------------------------------------------


def node_steps(
    streams: tuple[str, ...], stored: tuple[np.ndarray, np.ndarray], rows: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """OXW-R13: a node's watermark after each stream rise in ``rows`` (arrival order), the
    minimum over ``streams``, none while one has none. Returns (positions of ``rows`` where
    the node's watermark rises, its value there, the streams' watermarks after the rows)."""
    values, present = stored
    n = len(rows)
    which = pd.Categorical(rows["stream"].to_numpy(object), categories=list(streams)).codes.astype(np.int64)
    given = rows["watermark"].to_numpy(np.int64)
    grid = np.tile(values, (n, 1))
    known = np.tile(present, (n, 1))
    for j in range(len(streams)):  # each stream's watermark forward-filled over the rows
        mine = which == j
        if mine.any():
            filled = np.maximum.accumulate(np.where(mine, given, np.int64(I64_MIN)))
            since = np.cumsum(mine) > 0
            grid[:, j] = np.where(since, np.maximum(filled, values[j]) if present[j] else filled, values[j])
            known[:, j] = since | present[j]
    everyone = known.all(axis=1)
    node = np.where(everyone, np.where(known, grid, np.int64(I64_MIN)).min(axis=1), np.int64(I64_MIN))
    start_known = bool(present.all())
    start = np.int64(values.min()) if start_known and len(values) else np.int64(I64_MIN)
    before, had = _shift(node, start), _shift(everyone, start_known)
    rise = everyone & (~had | (node > before))
    after = (grid[-1], known[-1]) if n else stored
    return np.flatnonzero(rise), node[rise], after


class ConsumerProcessor(_Stage):
    """The joins' buckets, the aggregator's channel buckets and the aggregator's watermark."""

    units = (*JOINS, AGGREGATOR, AGGREGATOR_WATERMARK)

    def open_state(self, handle: Any) -> None:
        self.joins = {}
        self.node_state = {}
        for name in JOINS:
            join = window_joins.JoinBucketProcessor(_EACH_CALL, {}, True, self.buckets)
            join.open_state(prefixed(handle, name + "_"))
            self.joins[name] = join
            self.node_state[name] = handle.getValueState(name + "_node", NODE_SCHEMA)
        self.node_state[AGGREGATOR] = handle.getValueState(AGGREGATOR + "_node", NODE_SCHEMA)
        self.channels = eoa.ChannelBucketProcessor(_EACH_CALL, {}, True, self.buckets)
        self.channels.open_state(prefixed(handle, AGGREGATOR + "_"))

    def process(
        self, stream_id: str | None, unit: str, bucket: int, cfg: PipelineConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        pdf = pdf.sort_values(["batch", "seq"], kind="stable", ignore_index=True)
        out = _out(stream_id)
        if unit == AGGREGATOR:
            self._aggregate(stream_id, bucket, cfg, pdf, out)
        elif unit == AGGREGATOR_WATERMARK:
            rises = self._node(AGGREGATOR, cfg.streams, pdf, out, write=True)
            batches, marks = rises["batch"].to_numpy(np.int64), rises["watermark"].to_numpy(np.int64)
            for b in np.unique(batches).tolist():  # the batch's last rise: the narrow group's watermark
                top = int(marks[batches == b].max())
                out.add("summary", 1, batch=b, watermark=top, p_unit=NARROW, p_bucket=NARROW_BUCKET)
        else:
            spec = next(j for j in cfg.joins if j.name == unit)
            self._join(stream_id, bucket, spec, pdf, out)
        yield out.masked_frame(NULL_MASK)

    def _node(self, node: str, streams: tuple[str, ...], pdf: pd.DataFrame, out: OutputRows,
              write: bool) -> pd.DataFrame:  # fmt: skip
        """The node's watermark rises from the stream rises in ``pdf``; ``write``: its rows too."""
        rows = pdf[pdf["output"].to_numpy(object) == "stream_watermark"].reset_index(drop=True)
        state, variable = self.node_state[node], node + "_node"
        stored = state.get()
        if stored is None:
            st = NodeState(
                self.buckets, streams, np.zeros(len(streams), np.int64), np.zeros(len(streams), bool)
            )
        else:
            st = NodeState.from_tuple(tuple(stored), self.buckets, variable)
            if st.streams != streams:  # the join's lists are fixed in its checkpoint
                raise layout_refusal(OPERATOR, "streams", list(st.streams), list(streams), variable)
        at, values, (st.watermarks, st.present) = node_steps(streams, (st.watermarks, st.present), rows)
        state.update(st.to_tuple())
        rises = pd.DataFrame(
            {
                "batch": rows["batch"].to_numpy(np.int64)[at],
                "seq": rows["seq"].to_numpy(np.int64)[at],
                "watermark": values,
            }
        )
        if write:
            out.add(
                "watermarks",
                len(rises),
                batch=rises["batch"].to_numpy(np.int64),
                seq=rises["seq"].to_numpy(np.int64),
                node=node,
                watermark=values,
                p_unit=PASS,
                p_bucket=0,
            )
        return rises

    def _join(
        self, stream_id: str | None, bucket: int, spec: JoinSpec, pdf: pd.DataFrame, out: OutputRows
    ) -> None:
        """The window-join operator on the join's events and watermark steps (OXP-R3, R6)."""
        rises = self._node(spec.name, (*spec.left, *spec.right), pdf, out, write=bucket == 0)
        events = pdf[pdf["output"].to_numpy(object) == "join_event"]
        n, m = len(events), len(rises)
        frame = pd.DataFrame({
            "wj_batch": np.r_[events["batch"].to_numpy(np.int64), rises["batch"].to_numpy(np.int64)],
            "wj_seq": np.r_[2 * events["seq"].to_numpy(np.int64), 2 * rises["seq"].to_numpy(np.int64) + 1],
            "wj_kind": np.r_[np.full(n, "event", dtype=object), np.full(m, "watermark", dtype=object)],
            "wj_side": np.r_[events["side"].to_numpy(object), np.full(m, None, dtype=object)],
            "wj_key": np.r_[events["key"].to_numpy(object), np.full(m, None, dtype=object)],
            "wj_et": np.r_[events["event_time"].to_numpy(np.int64), np.zeros(m, np.int64)],
            "wj_et_null": np.zeros(n + m, bool),
            "wj_value": np.r_[events["value"].to_numpy(np.int64), np.zeros(m, np.int64)],
            "wj_time": np.r_[np.zeros(n, np.int64), rises["watermark"].to_numpy(np.int64)],
            "wj_time_null": np.r_[np.zeros(n, bool), np.zeros(m, bool)],
        })  # fmt: skip
        frame = frame.sort_values(["wj_batch", "wj_seq"], kind="stable", ignore_index=True)
        joined = pd.concat(list(self.joins[spec.name].process(stream_id, bucket, spec.join, frame)),
                           ignore_index=True)  # fmt: skip
        kinds = joined["output"].to_numpy(object)
        long_cols = window_joins.LONG_COLS
        if (kinds == "errors").any():  # the pipeline hands the join well-formed rows only
            raise AssertionError(f"window join refused rows: {joined[kinds == 'errors']['reason'].tolist()}")
        pairs = joined[kinds == "pairs"]
        if len(pairs):
            cols: dict[str, Any] = {}
            for side in window_joins.SIDES:
                for f in ("batch", "seq", "time", "value"):
                    values = pairs[f"{side}_{f}"].to_numpy(np.int64)
                    cols[f"{side}_{f}"] = values // 2 if f == "seq" else values
            out.add(
                "pairs",
                len(pairs),
                batch=pairs["batch"].to_numpy(np.int64),
                seq=pairs["seq"].to_numpy(np.int64) // 2,
                join=spec.name,
                key=pairs["key"].to_numpy(object),
                p_unit=PASS,
                p_bucket=bucket,
                **cols,
            )
        late = joined[kinds == "late"]
        if len(late):
            out.add(
                "join_late",
                len(late),
                batch=late["batch"].to_numpy(np.int64),
                seq=late["seq"].to_numpy(np.int64) // 2,
                join=spec.name,
                side=late["side"].to_numpy(object),
                key=late["key"].to_numpy(object),
                event_time=late["event_time"].to_numpy(np.int64),
                watermark=_longs(late, long_cols, "watermark"),
                p_unit=PASS,
                p_bucket=bucket,
            )
        summaries = joined[kinds == "summary"]
        for b, emitted in summaries.groupby("batch", sort=True)["s_pairs_emitted"].sum().items():
            out.add("summary", 1, batch=int(b), pairs=int(emitted), p_unit=NARROW, p_bucket=NARROW_BUCKET)

    def _aggregate(
        self, stream_id: str | None, bucket: int, cfg: PipelineConfig, pdf: pd.DataFrame, out: OutputRows
    ) -> None:
        """The exactly-once operator's channel processor on the kept events (OXP-R9)."""
        n = len(pdf)
        key = pdf["key"].to_numpy(object)
        frame = pd.DataFrame({
            "eoa_batch": pdf["batch"].to_numpy(np.int64), "eoa_seq": pdf["seq"].to_numpy(np.int64),
            "eoa_kind": np.full(n, "event", dtype=object), "eoa_key": key,
            "eoa_producer": pdf["producer"].to_numpy(np.int64), "eoa_producer_null": np.zeros(n, bool),
            "eoa_partition": pdf["partition"].to_numpy(np.int64), "eoa_partition_null": np.zeros(n, bool),
            "eoa_sequence": pdf["sequence"].to_numpy(np.int64), "eoa_sequence_null": np.zeros(n, bool),
            "eoa_amount": pdf["value"].to_numpy(np.int64).astype(str).astype(object),
            eoa.KEY_BUCKET: pdf["p_key_bucket"].to_numpy(np.int64),
        })  # fmt: skip
        told = pd.concat(
            list(self.channels.process(stream_id, bucket, cfg.aggregation, frame)), ignore_index=True
        )
        kinds = told["output"].to_numpy(object)
        if (kinds == "errors").any():
            raise AssertionError(f"aggregator refused rows: {told[kinds == 'errors']['reason'].tolist()}")
        messages = told[kinds == "messages"]
        out.add(
            "messages",
            len(messages),
            batch=messages["batch"].to_numpy(np.int64),
            seq=messages["seq"].to_numpy(np.int64),
            producer=messages["producer"].to_numpy(np.int64),
            partition=messages["partition"].to_numpy(np.int64),
            sequence=messages["sequence"].to_numpy(np.int64),
            key=messages["key"].to_numpy(object),
            verdict=messages["verdict"].to_numpy(object),
            p_unit=PASS,
            p_bucket=bucket,
        )
        folds = told[kinds == "fold"]
        out.add(
            "fold",
            len(folds),
            batch=folds["batch"].to_numpy(np.int64),
            seq=folds["seq"].to_numpy(np.int64),
            key=folds["key"].to_numpy(object),
            p_bits=folds["eoa_bits"].to_numpy(np.int64),
            p_order=folds["eoa_order"].to_numpy(np.int64),
            p_unit=KEYS,
            p_bucket=folds[eoa.KEY_BUCKET].to_numpy(np.int64),
        )
        summaries = told[kinds == "summary"]
        sums = summaries.groupby("batch", sort=True)[["s_folded", "s_duplicates", "s_outside_window"]].sum()
        for b, row in sums.iterrows():
            out.add(
                "summary",
                1,
                batch=int(b),
                folded=int(row["s_folded"]),
                duplicates=int(row["s_duplicates"]),
                outside_window=int(row["s_outside_window"]),
                p_unit=NARROW,
                p_bucket=NARROW_BUCKET,
            )
