"""The pipeline's first stage: a stream's items checked, admitted by SLA admission's own bucket
processor, and given their stream watermark and late verdict.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MIN
from spark_impl import sla_admission
from spark_impl.common import OutputRows, sat_sub
from spark_impl.pipeline.layout import (
    _EACH_CALL,
    AGGREGATOR_WATERMARK,
    BUCKET_SCHEMA,
    INGRESS,
    NARROW,
    NARROW_BUCKET,
    NULLABLE_LONGS,
    PASS,
    BucketState,
    _out,
    _Stage,
    prefixed,
)
from spark_impl.pipeline.settings import ACCEPTED_KINDS, AGGREGATOR, INGRESS_COUNTERS, PipelineConfig
from spark_impl.scaleout import NULL_MASK

# ---- the ingress stage -------------------------------------------------------------------------


def item_errors(pdf: pd.DataFrame, streams: Sequence[str]) -> np.ndarray:
    """OXP-R14's stateless checks in its order: the reason per row, None where none holds."""
    kind = pdf["kind"].to_numpy(object)
    n = len(pdf)
    null = {c: pd.isna(pdf[c]).to_numpy(bool) for c in ("stream", "key")}
    null.update({c: pdf[c + "_null"].to_numpy(bool) for c in NULLABLE_LONGS})
    event, mark = kind == "event", kind == "watermark"
    priority = pdf["priority"].to_numpy(np.int64)
    sequence = pdf["sequence"].to_numpy(np.int64)
    registered = pdf["stream"].isin(list(streams)).to_numpy(bool)
    rules = (
        (kind == "duplicate_seq", "duplicate_seq"),
        (~np.isin(kind, np.array([*ACCEPTED_KINDS, "batch_end"], dtype=object)), "unsupported_item"),
        ((event | mark) & null["stream"], "missing_stream"),
        (event & null["event_time"], "missing_event_time"),
        (event & ~null["priority"] & ((priority < 0) | (priority > 3)), "invalid_priority"),
        (event & null["key"], "missing_key"),
        (event & (null["producer"] | null["partition"] | null["sequence"]), "missing_id"),
        (event & (sequence < 0), "invalid_sequence"),
        (mark & ~registered, "unknown_stream"),
        (mark & null["time"], "missing_time"),
    )
    reason = np.full(n, None, dtype=object)
    open_ = np.ones(n, bool)
    for mask, name in rules:
        hit = open_ & mask
        reason[hit] = name
        open_ &= ~hit
    return reason


def _sla_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The SLA operator's input columns (its harness form: clock and load rows as items)."""
    return pd.DataFrame(
        {
            "sa_batch": rows["batch"].to_numpy(np.int64),
            "sa_seq": rows["seq"].to_numpy(np.int64),
            "sa_kind": rows["kind"].to_numpy(object),
            "sa_stream": rows["stream"].to_numpy(object),
            "sa_et": rows["event_time"].to_numpy(np.int64),
            "sa_et_null": rows["event_time_null"].to_numpy(bool),
            "sa_priority": rows["priority"].to_numpy(np.int64),
            "sa_priority_null": rows["priority_null"].to_numpy(bool),
            "sa_time": rows["time"].to_numpy(np.int64),
            "sa_time_null": rows["time_null"].to_numpy(bool),
            "sa_metrics": rows["metrics"].to_numpy(object),
        }
    )


def _shift(after: Any, first: Any) -> np.ndarray:
    """The value before each position: ``first``, then ``after`` moved one on."""
    return np.concatenate([np.array([first], dtype=after.dtype), after[:-1]])


@dataclass
class StreamRun:
    """One ingress stream's rows of a call, in arrival order: generator and watermark (OXP-R8)."""

    before: np.ndarray  # the stream watermark before each row
    has_before: np.ndarray
    after: np.ndarray
    has_after: np.ndarray
    state: tuple[int, int, bool, int, bool]


def run_stream(
    state: tuple[int, int, bool, int, bool], is_event: np.ndarray, et: np.ndarray, reported: np.ndarray,
    threshold: int, delay: int,
) -> StreamRun:  # fmt: skip
    """OXW-R1..R3 per admitted event, the reported watermarks (``reported``, at rows that are no
    event) and OXP-R8's maximum: the stream watermark before and after each row."""
    seen, top, has_top, mark, has_mark = state
    count = seen + np.cumsum(is_event)
    running = np.maximum.accumulate(np.where(is_event, et, np.int64(I64_MIN)))
    if has_top:
        running = np.maximum(running, np.int64(top))
    has_running = has_top | (np.cumsum(is_event) > 0)
    emits = is_event & (count % threshold == 0)
    candidate = np.where(emits, sat_sub(running, delay), np.where(is_event, np.int64(I64_MIN), reported))
    has_candidate = emits | ~is_event
    after = np.maximum.accumulate(np.where(has_candidate, candidate, np.int64(I64_MIN)))
    if has_mark:
        after = np.maximum(after, np.int64(mark))
    has_after = has_mark | (np.cumsum(has_candidate) > 0)
    n = len(is_event)
    new_state = (
        int(count[-1]) if n else seen,
        int(running[-1]) if n and has_running[-1] else top,
        bool(has_running[-1]) if n else has_top,
        int(after[-1]) if n and has_after[-1] else mark,
        bool(has_after[-1]) if n else has_mark,
    )
    return StreamRun(_shift(after, np.int64(mark)), _shift(has_after, has_mark), after, has_after, new_state)


class IngressProcessor(_Stage):
    """Admission, the generators and the late verdicts of the ingress streams of one bucket."""

    units = (INGRESS,)

    def open_state(self, handle: Any) -> None:
        self.sla = sla_admission.SlaBucketProcessor(_EACH_CALL, {}, True, self.buckets, True, False)
        self.sla.open_state(prefixed(handle, "sla_"))
        self.state = handle.getValueState("bucket", BUCKET_SCHEMA)

    def group(self, key: Any) -> tuple[str, int]:
        return INGRESS, int(key[1])

    def process(
        self, stream_id: str | None, unit: str, bucket: int, cfg: PipelineConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        stored = self.state.get()
        st = (
            BucketState(self.buckets, {})
            if stored is None
            else BucketState.from_tuple(tuple(stored), self.buckets)
        )
        pdf = pdf.sort_values(["batch", "seq"], kind="stable", ignore_index=True)
        out = _out(stream_id)
        reason = item_errors(pdf, cfg.streams)
        kind = pdf["kind"].to_numpy(object)
        clean = pd.isna(pd.Series(reason, dtype=object)).to_numpy(bool)
        to_sla = clean & np.isin(kind, np.array(["event", "clock", "load", "batch_end"], dtype=object))
        sla = pd.concat(list(self.sla.process(stream_id, bucket, cfg.admission, _sla_frame(pdf[to_sla]))),
                        ignore_index=True)  # fmt: skip
        sla_output = sla["output"].to_numpy(object)
        decided = sla[sla_output == "decisions"]
        # every SLA row has its seq: one row per (batch, seq) of this call
        where = pd.MultiIndex.from_arrays([pdf["batch"].to_numpy(np.int64), pdf["seq"].to_numpy(np.int64)])
        at = where.get_indexer(pd.MultiIndex.from_arrays([decided["batch"].to_numpy(np.int64),
                                                          decided["seq"].to_numpy(np.int64)]))  # fmt: skip
        decision = np.full(len(pdf), None, dtype=object)
        decision[at] = decided["decision"].to_numpy(object)
        sla_reason = np.full(len(pdf), None, dtype=object)
        sla_reason[at] = decided["reason"].to_numpy(object)
        sla_errors = sla[sla_output == "errors"]
        err_at = where.get_indexer(
            pd.MultiIndex.from_arrays(
                [sla_errors["batch"].to_numpy(np.int64), sla_errors["seq"].to_numpy(np.int64)]
            )
        )
        reason[err_at] = sla_errors["reason"].to_numpy(object)
        batch = pdf["batch"].to_numpy(np.int64)
        seq = pdf["seq"].to_numpy(np.int64)
        stream = pdf["stream"].to_numpy(object)
        admitted = decision == "admit"
        regressed = np.zeros(len(pdf), bool)
        verdict = np.full(len(pdf), None, dtype=object)
        watermark = np.zeros(len(pdf), np.int64)
        has_watermark = np.zeros(len(pdf), bool)
        assigned = np.zeros(len(pdf), np.int64)
        counts = {c: np.zeros(len(pdf), bool) for c in INGRESS_COUNTERS}
        et = pdf["event_time"].to_numpy(np.int64)
        times = pdf["time"].to_numpy(np.int64)
        reports = clean & (kind == "watermark")
        kept_rows, rises = [], []
        for name in cfg.streams:
            mine = (stream == name) & (admitted | reports)
            rows = np.flatnonzero(mine)
            if not len(rows):
                continue
            state = st.streams.get(name, (0, 0, False, 0, False))
            is_event = admitted[rows]
            run = run_stream(state, is_event, et[rows], times[rows], cfg.advance_threshold,  # type: ignore[arg-type]
                             cfg.max_out_of_order_ms)  # fmt: skip
            st.streams[name] = run.state
            regressed[rows] = ~is_event & run.has_before & (times[rows] < run.before)
            ev = rows[is_event]
            before, has = run.before[is_event], run.has_before[is_event]
            watermark[ev], has_watermark[ev] = before, has
            late = has & (et[ev] < before)  # OXL-R4: strictly below
            v = np.full(len(ev), "on_time", dtype=object)
            assigned[ev] = et[ev]
            if cfg.policy == "Reassign":  # OXL-R7: within the budget, at the watermark
                within = late & (et[ev] >= sat_sub(before, cfg.max_lateness))
                v[within] = "reassigned"
                v[late & ~within] = "dropped"
                assigned[ev[within]] = before[within]
            else:
                v[late] = "side_output" if cfg.policy == "SideOutput" else "dropped"
            verdict[ev] = v
            kept_rows.append(ev[(v == "on_time") | (v == "reassigned")])
            rise = run.has_after & (~run.has_before | (run.after > run.before))
            rises.append((name, rows[rise], run.after[rise]))
        reason[regressed] = "watermark_regressed"
        for decided_as, counter in (("admit", "admitted"), ("reject", "rejected"), ("shed", "shed"),
                                    ("throttle", "throttled")):  # fmt: skip
            counts[counter] = decision == decided_as
        for verdict_is, counter in (("dropped", "dropped_late"), ("side_output", "side_output"),
                                    ("reassigned", "reassigned")):  # fmt: skip
            counts[counter] = verdict == verdict_is
        bad = pd.notna(pd.Series(reason, dtype=object)).to_numpy(bool)
        out.add("errors", int(bad.sum()), batch=batch[bad], seq=seq[bad], reason=reason[bad], p_unit=PASS,
                p_bucket=bucket)  # fmt: skip
        d = np.flatnonzero(decision != None)  # noqa: E711 - elementwise
        if len(d):
            out.add(
                "ingress",
                len(d),
                batch=batch[d],
                seq=seq[d],
                stream=stream[d],
                key=pdf["key"].to_numpy(object)[d],
                event_time=et[d],
                decision=decision[d],
                reason=sla_reason[d],
                verdict=verdict[d],
                watermark=(watermark[d], ~has_watermark[d]),
                assigned_time=(
                    assigned[d],
                    ~admitted[d] | ((verdict[d] != "on_time") & (verdict[d] != "reassigned")),
                ),
                p_unit=PASS,
                p_bucket=bucket,
            )
        self.state.update(st.to_tuple())
        self._send(out, cfg, pdf, kept_rows, rises, assigned, bucket)
        for b in np.unique(batch).tolist():
            in_b = batch == b
            out.add("summary", 1, batch=b, p_unit=NARROW, p_bucket=NARROW_BUCKET,
                    **{c: int((counts[c] & in_b).sum()) for c in INGRESS_COUNTERS})  # fmt: skip
        yield out.masked_frame(NULL_MASK)

    def _send(
        self, out: OutputRows, cfg: PipelineConfig, pdf: pd.DataFrame, kept_rows: list[np.ndarray],
        rises: list[tuple[str, np.ndarray, np.ndarray]], assigned: np.ndarray, bucket: int,
    ) -> None:  # fmt: skip
        """The streams' watermark rows, and what goes on to the consumers (OXP-R2, R3, R5)."""
        batch, seq = pdf["batch"].to_numpy(np.int64), pdf["seq"].to_numpy(np.int64)
        stream, key = pdf["stream"].to_numpy(object), pdf["key"].to_numpy(object)
        buckets = np.arange(self.buckets, dtype=np.int64)
        for name, rows, values in rises:
            n = len(rows)
            out.add("watermarks", n, batch=batch[rows], seq=seq[rows], node=name, watermark=values,
                    p_unit=PASS, p_bucket=bucket)  # fmt: skip
            out.add("stream_watermark", n, batch=batch[rows], seq=seq[rows], stream=name, watermark=values,
                    p_unit=AGGREGATOR_WATERMARK, p_bucket=0)  # fmt: skip
            for join in cfg.joins:
                if join.side_of(name) is not None:
                    out.add("stream_watermark", n * self.buckets, batch=np.repeat(batch[rows], self.buckets),
                            seq=np.repeat(seq[rows], self.buckets), stream=name,
                            watermark=np.repeat(values, self.buckets), p_unit=join.name,
                            p_bucket=np.tile(buckets, n))  # fmt: skip
        kept = np.sort(np.concatenate(kept_rows)) if kept_rows else np.zeros(0, np.int64)
        if not len(kept):
            return
        value = pdf["value"].to_numpy(np.int64)[kept]
        # Spark's xxhash64 of the key and of the channel, taken before this stage: stable across
        # releases and processes, so a restarted query routes every key to the bucket holding it
        key_bucket = np.mod(pdf["key_hash"].to_numpy(np.int64), self.buckets)
        channel_bucket = np.mod(pdf["channel_hash"].to_numpy(np.int64), self.buckets)
        for join in cfg.joins:
            of = stream[kept]
            left, right = (
                np.isin(of, np.array(join.left, dtype=object)),
                np.isin(of, np.array(join.right, dtype=object)),
            )
            side = np.full(len(of), None, dtype=object)
            side[left], side[right] = "left", "right"
            on = np.flatnonzero(left | right)
            rows = kept[on]
            out.add(
                "join_event",
                len(rows),
                batch=batch[rows],
                seq=seq[rows],
                stream=stream[rows],
                side=side[on],
                key=key[rows],
                event_time=assigned[rows],
                value=value[on],
                p_unit=join.name,
                p_bucket=key_bucket[rows],
            )
        producer = pdf["producer"].to_numpy(np.int64)[kept]
        partition = pdf["partition"].to_numpy(np.int64)[kept]
        out.add("message", len(kept), batch=batch[kept], seq=seq[kept], key=key[kept], producer=producer,
                partition=partition, sequence=pdf["sequence"].to_numpy(np.int64)[kept], value=value,
                p_key_bucket=key_bucket[kept], p_unit=AGGREGATOR, p_bucket=channel_bucket[kept])  # fmt: skip
