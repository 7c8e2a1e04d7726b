"""Watermark generation and propagation over an operator graph (oxirs) on Spark Structured Streaming.

Usage
-----
Give the graph as data and apply the operator to a streaming DataFrame of
per-source events and/or per-source watermark reports::

    from spark_impl.watermark_propagation import watermark_propagation

    wp = watermark_propagation(
        rows_df,                          # a streaming DataFrame
        nodes=["src", "map", "join", "other", "sink"],
        edges=[["src", "map"], ["map", "join"], ["other", "join"], ["join", "sink"]],
        node_col="source",                # which source node a row belongs to (string)
        event_time_col="ts",              # events: LongType ms or TimestampType
        watermark_col="reported_wm",      # optional: direct watermark reports (integral ms or timestamp)
        advance_threshold=1,              # a generator emits at every n-th event of its source
        max_out_of_order_ms=5000,
    )
    q = wp.output.writeStream.format("parquet").option("checkpointLocation", ckpt).start(path)

``wp.output`` is the one combined stream (schema ``OUTPUT_SCHEMA``); its
``output`` column names the table of a row, and the projections are:

- ``wp.generated``: every generator emission (OXW-R2), with the event's seq;
- ``wp.watermarks``: after each row, every operator whose output watermark
  changed, with its new output (OXW-R13, R18);
- ``wp.violations``: refused regressions (OXW-R12): source, refused value, reason;
- ``wp.progress``: per stream and micro-batch, the aligned watermark over the
  sources, the global watermark over the sinks and the violation count
  (OXW-R8, R16);
- ``wp.errors``: malformed rows (OXW-R17).

Every projection is a separate streaming plan: to get several tables from one
run, write ``wp.output`` once and split it by its ``output`` column.

A row is a ``watermark`` report when ``kind_col`` says so, or, without
``kind_col``, when ``watermark_col`` is given and not null; otherwise it is an
event. Optional columns: ``stream_id_col`` (many independent streams in one
query, each with its own graph through ``stream_configs``: stream id ->
the trace config keys ``nodes``, ``edges``, ``advance_threshold``,
``max_out_of_order_ms``), ``seq_col`` (arrival order inside a micro-batch;
without it the rows of a micro-batch are taken in time order (event time or
reported time), ties by node, and the output ``seq`` is null), ``kind_col``
(event | watermark | batch_end; needs ``seq_col``), ``batch_col`` (the batch
number reported; without it ``batch`` is the micro-batch's start instant in
epoch milliseconds, Spark's ``current_timestamp()``, the same in every row of
a micro-batch).

Nothing here reads processing time (spec: "Only event time matters here"), so
the operator has no ``processing_time_col``.

Design
------
``docs/architecture.md`` draws the two stages; here:

- WIDE STAGE, grouped by (stream, source bucket): a row goes to the bucket
  ``pmod(xxhash64(node), buckets)``; the harness's ``batch_end`` marker goes
  to bucket 0. No row is copied: nothing in this area concerns every source.
  Per source the bucket runs the generator (a grouped running count and
  maximum, OXW-R1..R3) and the regression check against the source's last
  emitted watermark (OXW-R12), in arrival order. Out of it come the
  ``generated``, ``violations`` and ``errors`` rows, the ``watermarks`` row of
  the source itself, and one summary row per accepted update that changes its
  source (its arrival position, source and new value), plus one final summary
  per bucket and batch with the bucket's violations of the batch.
  ``transformWithStateInPandas``, ``timeMode="None"``.
- STATE of a bucket: one ``ValueState`` with the layout version, the bucket
  count, a digest of the graph's source list, and one row per source of the
  bucket that has counted an event or emitted a watermark (source position,
  event count, maximum event time, last emitted watermark, whether it has
  one). A bucket holds about sources / buckets rows.
- NARROW STAGE, a second ``transformWithStateInPandas`` grouped by (stream,
  route): route -1 gets the summaries only and applies the updates in
  arrival order through the graph (OXW-R13..R16). An operator's output is
  the minimum over its upstreams, null while one is silent, so the stage
  works on blocks of updates: each block holds the source values after each
  update and every node's output after it, computed in topological order,
  and at most ``BLOCK_CELLS`` numbers, so memory is bounded by the updates
  plus the graph, never their product; its rows leave in frames of about
  ``FLUSH_ROWS`` rows. Its ``ValueState`` per stream holds
  the layout version, the bucket count, the source ids, each source's last
  emitted watermark and the violation count (OXW-R19); node outputs are
  derived from the sources (OXW-R15). The table rows cross the second stage
  in pass-through groups that touch no state.
- SINK STEP: ``write_tables`` and ``foreach_batch`` run the narrow group's work in
  the sink instead (``spark_impl.scaleout.SinkStep``): each micro-batch's rows of route
  -1 are collected to the driver and folded with the stream's state, kept in two
  slots under ``<checkpoint>/sink_step/``; ``output`` runs it in a second stateful stage.
- ORDER: inside a micro-batch a stream's rows are taken by ``seq``, never by
  their physical order. SATURATING i64 arithmetic for ``max - delay`` (numpy
  would wrap); long columns cross the stages as values and a null mask.
- RESTART (OXW-R19): everything is in the state store under the checkpoint;
  a checkpoint of another layout, bucket count or source list is refused
  with a message naming both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MIN, InvalidConfig
from spark_impl.checkpoints import (
    CheckpointError,
    IncompatibleCheckpoint,
    Operator,
    Stage,
    decoding,
    register,
    schema_fields,
    value_buckets,
)
from spark_impl.common import (
    OperatorStreams,
    OutputRows,
    StatefulProcessorHandle,
    batch_marker,
    batches_in,
    check_columns,
    event_time_millis,
    long_or_zero,
    millis_column,
    native_watermark_progress,
    place_flags,
    require_int,
    sat_sub,
    split_unplaced,
    stream_id_column,
    stream_settings,
    table_projections,
    warn_without_seq,
    with_unplaced_errors,
)
from spark_impl.scaleout import (
    DUPLICATE_SEQ,
    NULL_MASK,
    SUMMARY_ROUTE,
    SecondStage,
    SinkStep,
    WideStage,
    check_layout,
    default_buckets,
    flag_duplicate_seqs,
    one_frame,
    one_stage,
    restore_nulls,
    to_buckets,
    two_stages,
)
from spark_impl.session import prepare_session

LAYOUT_VERSION = 3  # 3: state under each bucket's spread label (scaleout.spread_labels)
CONFIG_KEYS = ("nodes", "edges", "advance_threshold", "max_out_of_order_ms")
# The numbers one block of updates may hold in the narrow stage (updates x (sources + nodes)).
BLOCK_CELLS = 1 << 16
FLUSH_ROWS = 1 << 16  # the narrow stage passes its rows on in frames of about this size

STRING_COLS = ("output", "stream_id", "key", "reason")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "key", "watermark", "reason",
    "aligned_watermark", "global_watermark", "violation_count",
)  # fmt: skip
LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)

# Between the stages: long columns as values with one null mask (bit i: LONG_COLS[i] is null);
# ``kw_route`` picks the second stage's group (the bucket for table rows, -1 for summaries).
# A summary is an update (s_final 0: the source at s_source now has s_value, at the arrival
# position s_order, s_tie, s_pos) or a bucket's last row of a batch (s_final 1, s_violations).
SUMMARY_COLS = ("s_final", "s_order", "s_tie", "s_pos", "s_source", "s_value", "s_violations")
PASS_SCHEMA = ", ".join(
    [f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS] + [f"`{NULL_MASK}` long"]
)
WIDE_SCHEMA = ", ".join([PASS_SCHEMA, "`kw_route` long"] + [f"`{c}` long" for c in SUMMARY_COLS])
BUCKET_SCHEMA = "layout_version int, buckets int, graph string, sources binary"
STREAM_SCHEMA = "layout_version int, buckets int, violation_count long, sources string, watermarks binary"

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "generated": ("stream_id", "batch", "seq", "key", "watermark"),
    "watermarks": ("stream_id", "batch", "seq", "key", "watermark"),
    "violations": ("stream_id", "batch", "seq", "key", "watermark", "reason"),
    "progress": ("stream_id", "batch", "aligned_watermark", "global_watermark", "violation_count"),
    "errors": ("stream_id", "batch", "seq", "reason"),
}


# ---- configuration and the graph (OXW-R4, R9, R10, R20) ------------------------


@dataclass(frozen=True, eq=False)
class StreamConfig:
    """A stream's validated settings and what the operator derives from its graph once."""

    nodes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    source_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # node index per source
    # The nodes with upstreams in topological order, each with its upstreams' node indices (OXW-R13).
    steps: tuple[tuple[int, np.ndarray], ...] = ()
    is_sink: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    source_rank: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # by id, for ties
    advance_threshold: int = 1
    max_out_of_order_ms: int = 0

    @cached_property
    def node_index(self) -> pd.Index:
        return pd.Index(self.nodes)

    @cached_property
    def source_index(self) -> pd.Index:
        return pd.Index(self.sources)

    @property
    def sources_digest(self) -> str:
        """What a bucket's state is bound to: its rows are positions in this source list."""
        return hashlib.sha256(json.dumps(list(self.sources)).encode()).hexdigest()[:16]


def _graph(nodes: Any, edges: Any) -> tuple[list[str], list[tuple[str, str]]]:
    """OXW-R9: the shape of the graph."""
    if not isinstance(nodes, (list, tuple)):
        raise InvalidConfig(f"nodes must be a list of operator ids, got {nodes!r}")
    if not isinstance(edges, (list, tuple)):
        raise InvalidConfig(f"edges must be a list of [upstream, downstream] pairs, got {edges!r}")
    if not all(isinstance(n, str) and n for n in nodes):
        raise InvalidConfig(f"nodes: every operator id must be a non-empty string, got {list(nodes)!r}")
    if len(set(nodes)) != len(nodes):
        repeated = sorted({n for n in nodes if list(nodes).count(n) > 1})
        raise InvalidConfig(f"nodes: {repeated} listed more than once")
    known = set(nodes)
    pairs = []
    for e in edges:
        if not isinstance(e, (list, tuple)) or len(e) != 2:
            raise InvalidConfig(f"edges: an edge must be an [upstream, downstream] pair, got {e!r}")
        if not all(isinstance(x, str) and x in known for x in e):
            raise InvalidConfig(f"edges: {e!r} names an operator that is not in nodes")
        pairs.append((str(e[0]), str(e[1])))
    if len(set(pairs)) != len(pairs):
        raise InvalidConfig("edges: an edge is listed more than once")
    return list(nodes), pairs


def _topological(nodes: list[str], pairs: list[tuple[str, str]]) -> list[str]:
    """Kahn's algorithm; the nodes left over hold a cycle, which is named (OXW-R10)."""
    ups: dict[str, list[str]] = {n: [] for n in nodes}
    downs: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in pairs:
        ups[b].append(a)
        downs[a].append(b)
    pending = {n: len(ups[n]) for n in nodes}
    ready = [n for n in nodes if pending[n] == 0]
    order = []
    while ready:
        n = ready.pop()
        order.append(n)
        for d in downs[n]:
            pending[d] -= 1
            if pending[d] == 0:
                ready.append(d)
    if len(order) < len(nodes):
        # Every node left has an upstream left: walking upstream must meet a node twice.
        left = {n for n in nodes if pending[n] > 0}
        walk = [next(n for n in nodes if n in left)]
        while walk.count(walk[-1]) < 2:
            walk.append(next(u for u in ups[walk[-1]] if u in left))
        cycle = walk[walk.index(walk[-1]) :][::-1]
        raise InvalidConfig(f"the operator graph has a cycle: {' -> '.join(cycle)}")
    return order


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (OXW-R20) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown watermark_propagation settings {sorted(unknown)}")
    for name in ("nodes", "edges"):
        if name not in config:
            raise InvalidConfig(f"watermark_propagation needs the setting {name!r}")
    nodes, pairs = _graph(config["nodes"], config["edges"])
    order = _topological(nodes, pairs)
    threshold = require_int("advance_threshold", config.get("advance_threshold", 1), 1)
    delay = require_int("max_out_of_order_ms", config.get("max_out_of_order_ms", 0), 0)
    index = {n: i for i, n in enumerate(nodes)}
    ups: dict[str, list[int]] = {n: [] for n in nodes}
    for a, b in pairs:
        ups[b].append(index[a])
    has_down = {a for a, _ in pairs}
    sources = [n for n in nodes if not ups[n]]
    by_id = sorted(range(len(sources)), key=lambda i: sources[i])
    rank = np.empty(len(sources), np.int64)
    rank[by_id] = np.arange(len(sources))
    return StreamConfig(
        nodes=tuple(nodes), sources=tuple(sources),
        source_nodes=np.array([index[s] for s in sources], np.int64),
        steps=tuple((index[n], np.array(ups[n], np.int64)) for n in order if ups[n]),
        is_sink=np.array([n not in has_down for n in nodes], bool), source_rank=rank,
        advance_threshold=threshold, max_out_of_order_ms=delay,
    )  # fmt: skip


# ---- state layouts (OXW-R19) ----------------------------------------------------


_SOURCE_FIELDS = ("source", "count", "max_event_time", "watermark", "has_watermark")


@dataclass
class BucketState:
    """What one (stream, bucket) keeps: per source of the bucket that has state, its generator
    (events counted, maximum event time) and its last emitted watermark (OXW-R1..R3, R12)."""

    buckets: int
    graph: str  # StreamConfig.sources_digest of the graph the rows were written for
    rows: np.ndarray = field(default_factory=lambda: np.zeros((0, len(_SOURCE_FIELDS)), np.int64))

    def to_tuple(self) -> tuple[Any, ...]:
        return (LAYOUT_VERSION, self.buckets, self.graph, np.ascontiguousarray(self.rows, np.int64).tobytes())

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int, graph: str) -> BucketState:
        check_layout("watermark_propagation", value, LAYOUT_VERSION, buckets, "bucket")
        if value[2] != graph:
            raise IncompatibleCheckpoint(
                "watermark_propagation: the checkpoint was written for another list of source nodes "
                f"(digest {value[2]}, the graph now has {graph})", "Start from a new checkpoint",
                "watermark_propagation", "bucket",
            )  # fmt: skip
        with decoding("watermark_propagation", "bucket"):
            rows = np.frombuffer(bytes(value[3]), np.int64).reshape(-1, len(_SOURCE_FIELDS)).copy()
            return cls(buckets, graph, rows)


@dataclass
class StreamState:
    """What the narrow stage keeps per stream: each source's last emitted watermark and the
    violation count; every other node's output follows from them (OXW-R15)."""

    buckets: int
    sources: tuple[str, ...]
    violation_count: int = 0
    watermark: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    has_watermark: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    def __post_init__(self) -> None:
        if len(self.watermark) != len(self.sources):
            self.watermark = np.zeros(len(self.sources), np.int64)
            self.has_watermark = np.zeros(len(self.sources), bool)

    def to_tuple(self) -> tuple[Any, ...]:
        numbers = np.stack([self.watermark, self.has_watermark.astype(np.int64)]).astype(np.int64)
        return (
            LAYOUT_VERSION, self.buckets, self.violation_count, json.dumps(list(self.sources)),
            numbers.tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int, sources: tuple[str, ...]) -> StreamState:
        check_layout("watermark_propagation", value, LAYOUT_VERSION, buckets, "stream")
        stored = stored_sources(value)
        if stored != sources:
            raise IncompatibleCheckpoint(
                f"watermark_propagation: the checkpoint was written for the sources {list(stored)}, "
                f"the graph now has {list(sources)}", "Start from a new checkpoint",
                "watermark_propagation", "stream",
            )  # fmt: skip
        with decoding("watermark_propagation", "stream"):
            numbers = np.frombuffer(bytes(value[4]), np.int64).reshape(2, len(stored))
            return cls(buckets, stored, int(value[2]), numbers[0].copy(), numbers[1] != 0)


def stored_sources(value: tuple[Any, ...]) -> tuple[str, ...]:
    """The source nodes a stream's narrow-stage value was written for (its JSON list)."""
    with decoding("watermark_propagation", "stream"):
        sources = json.loads(value[3])
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise ValueError(f"the source list is {type(sources).__name__}, not a list of names")
        return tuple(sources)


# ---- rows between the stages ------------------------------------------------------


# ---- the wide stage: generators and regression checks per source (pure numpy) ---------


class _WideOut(OutputRows):
    """The first stage's rows of one call: table rows and summaries (WIDE_SCHEMA)."""

    def __init__(self, stream_id: str | None) -> None:
        super().__init__(stream_id, (*OUTPUT_COLUMNS, "kw_route", *SUMMARY_COLS), STRING_COLS)


def _grouped_runs(groups: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row (rows in arrival order): its 1-based rank among the rows of its group, the running
    maximum of its group's values up to it, and the one before it (0 for a group's first row).
    int64 throughout: a pandas groupby shift would pass through float and lose large times."""
    n = len(groups)
    order = np.argsort(groups, kind="stable")
    g, v = groups[order], values[order]
    first = np.ones(n, bool)
    first[1:] = g[1:] != g[:-1]
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], n)
    rank_sorted = np.arange(1, n + 1) - np.repeat(starts, ends - starts)
    run_sorted = np.empty(n, np.int64)
    for a, e in zip(starts.tolist(), ends.tolist()):  # one slice per source of the call
        np.maximum.accumulate(v[a:e], out=run_sorted[a:e])
    before_sorted = np.zeros(n, np.int64)
    before_sorted[1:] = np.where(first[1:], 0, run_sorted[:-1])
    rank, run, before = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    rank[order], run[order], before[order] = rank_sorted, run_sorted, before_sorted
    return rank, run, before


def _last_of_each(groups: np.ndarray) -> np.ndarray:
    """Marks the last row of each group value (rows in arrival order)."""
    last = np.ones(len(groups), bool)
    order = np.argsort(groups, kind="stable")
    last[order[:-1]] = groups[order][1:] != groups[order][:-1]
    return last


def process_bucket_batch(
    st: BucketState, rows: pd.DataFrame, cfg: StreamConfig, b: int, bucket: int, ordered: bool, out: _WideOut
) -> None:
    """One batch of one bucket: its sources' generators and regression checks, in arrival order.

    ``rows`` has the normalised columns wp_seq, wp_kind, wp_node, wp_et, wp_et_null, wp_time,
    wp_time_null; without an arrival order (``ordered`` false) they are taken by time, ties by node.
    """
    kind = rows["wp_kind"].to_numpy(object)
    node = rows["wp_node"].to_numpy(object)
    et = rows["wp_et"].to_numpy(np.int64)
    tm = rows["wp_time"].to_numpy(np.int64)
    item = kind != "batch_end"  # the marker is no item
    if ordered:
        seq = rows["wp_seq"].to_numpy(np.int64)
        arrival = np.flatnonzero(item)[np.argsort(seq[item], kind="stable")]
    else:
        seq = np.where(kind == "watermark", tm, et)
        by_time = pd.DataFrame({"when": seq, "node": node})[item]
        arrival = by_time.sort_values(["when", "node"], kind="stable").index.to_numpy()
    kind, node, et, tm, seq = kind[arrival], node[arrival], et[arrival], tm[arrival], seq[arrival]
    et_null = rows["wp_et_null"].to_numpy(bool)[arrival]
    tm_null = rows["wp_time_null"].to_numpy(bool)[arrival]
    n = len(arrival)
    # The arrival position: (seq, 0, 0), or (time, rank of the node id, position in this bucket).
    seq_out = (seq, np.full(n, not ordered))
    k = len(cfg.sources)

    # OXW-R17: the checks in their order, the first failing one wins (np.select picks the first).
    is_event, is_report = kind == "event", kind == "watermark"
    node_null = pd.isna(node)
    names = pd.Index(np.where(node_null, "", node).astype(object))
    node_pos, src_pos = cfg.node_index.get_indexer(names), cfg.source_index.get_indexer(names)
    err = np.select(
        [kind == DUPLICATE_SEQ, ~(is_event | is_report), node_null, node_pos < 0, src_pos < 0,
         is_event & et_null, is_report & tm_null],
        [DUPLICATE_SEQ, "unsupported_item", "missing_key", "unknown_operator", "not_a_source",
         "missing_event_time", "missing_time"],
        default="",
    ).astype(object)  # fmt: skip
    bad = err != ""
    if bad.any():
        out.add("errors", int(bad.sum()), batch=b, seq=(seq_out[0][bad], seq_out[1][bad]), reason=err[bad],
                kw_route=bucket)  # fmt: skip

    # This bucket's sources, as columns over the whole source list for the call.
    count = np.zeros(k, np.int64)
    top = np.zeros(k, np.int64)
    wm = np.zeros(k, np.int64)
    has_wm = np.zeros(k, bool)
    held = st.rows[:, 0]
    count[held], top[held], wm[held] = st.rows[:, 1], st.rows[:, 2], st.rows[:, 3]
    has_wm[held] = st.rows[:, 4] != 0

    # OXW-R1, R2: the generators, a grouped running count and maximum per source.
    ev = is_event & ~bad
    ev_src, ev_t, ev_at = src_pos[ev], et[ev], np.flatnonzero(ev)
    counted, run_max, _ = _grouped_runs(ev_src, ev_t)
    n_th = count[ev_src] + counted
    run_max = np.where(count[ev_src] > 0, np.maximum(run_max, top[ev_src]), run_max)
    emits = n_th % cfg.advance_threshold == 0  # OXW-R2
    gen_value = sat_sub(run_max[emits], cfg.max_out_of_order_ms)
    src_names = np.asarray(cfg.sources, dtype=object)
    if emits.any():
        at = ev_at[emits]
        out.add("generated", int(emits.sum()), batch=b, seq=(seq_out[0][at], seq_out[1][at]),
                key=src_names[ev_src[emits]], watermark=gen_value, kw_route=bucket)  # fmt: skip
    if len(ev_src):
        last = _last_of_each(ev_src)
        count[ev_src[last]] = n_th[last]
        top[ev_src[last]] = run_max[last]

    # OXW-R11, R12: candidate updates in arrival order, judged against the source's running maximum.
    rep = is_report & ~bad
    c_at = np.concatenate([ev_at[emits], np.flatnonzero(rep)])
    order = np.argsort(c_at, kind="stable")
    c_at = c_at[order]
    c_src = np.concatenate([ev_src[emits], src_pos[rep]])[order]
    c_val = np.concatenate([gen_value, tm[rep]])[order]
    rank, _, before = _grouped_runs(c_src, c_val)
    has_before = rank > 1
    prev_has = has_before | has_wm[c_src]
    prev = np.where(
        has_before & has_wm[c_src], np.maximum(before, wm[c_src]), np.where(has_before, before, wm[c_src])
    )
    violation = prev_has & (c_val < prev)
    if violation.any():
        at = c_at[violation]
        out.add(
            "violations", int(violation.sum()), batch=b, seq=(seq_out[0][at], seq_out[1][at]),
            key=src_names[c_src[violation]], watermark=c_val[violation], reason="regression", kw_route=bucket,
        )  # fmt: skip
    changes = ~prev_has | (c_val > prev)  # an equal update changes nothing (OXW-R12)
    if changes.any():
        at, src, val = c_at[changes], c_src[changes], c_val[changes]
        m = len(at)
        out.add("watermarks", m, batch=b, seq=(seq_out[0][at], seq_out[1][at]), key=src_names[src],
                watermark=val, kw_route=bucket)  # fmt: skip
        tie = np.zeros(m, np.int64) if ordered else cfg.source_rank[src]
        out.add(
            "summary", m, batch=b, kw_route=SUMMARY_ROUTE, s_final=0, s_order=seq[at], s_tie=tie,
            s_pos=np.zeros(m, np.int64) if ordered else at, s_source=src, s_value=val,
        )  # fmt: skip
        last = _last_of_each(src)
        wm[src[last]], has_wm[src[last]] = val[last], True
    out.add("summary", 1, batch=b, kw_route=SUMMARY_ROUTE, s_final=1, s_violations=int(violation.sum()))

    keep = np.flatnonzero((count > 0) | has_wm)
    st.rows = np.column_stack([keep, count[keep], top[keep], wm[keep], has_wm[keep]]).astype(np.int64)
    st.rows = st.rows.reshape(-1, len(_SOURCE_FIELDS))


# ---- the narrow stage: the graph, on accepted updates only (pure numpy) -------------


def node_outputs(cfg: StreamConfig, values: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every node's output (nodes x points) from the sources' watermarks (sources x points), and
    whether it is silent: a node with upstreams has their minimum, silent while one is (OXW-R13, R14)."""
    points = values.shape[1]
    out = np.zeros((len(cfg.nodes), points), np.int64)
    silent = np.ones((len(cfg.nodes), points), bool)
    out[cfg.source_nodes] = values
    silent[cfg.source_nodes] = ~has
    for j, ups in cfg.steps:  # topological order: the upstreams are done
        out[j] = out[ups].min(axis=0)
        silent[j] = silent[ups].any(axis=0)
    return out, silent


def propagate_batch(
    st: StreamState, rows: pd.DataFrame, cfg: StreamConfig, b: int, ordered: bool, out: OutputRows
) -> Iterator[None]:
    """One batch of one stream's summaries: the updates through the graph in arrival order, block
    by block (OXW-R13..R16, R18), then the progress row, all added to ``out``. Yields after each
    block, so the caller may pass on and clear what ``out`` holds."""
    final = rows["s_final"].to_numpy(np.int64) == 1
    order, tie, pos, src, val = (
        rows[c].to_numpy(np.int64)[~final] for c in ("s_order", "s_tie", "s_pos", "s_source", "s_value")
    )
    arrival = np.lexsort((pos, tie, order))  # stable, the last key first
    order, src, val = order[arrival], src[arrival], val[arrival]
    k, n_nodes = len(cfg.sources), len(cfg.nodes)
    with_ups = np.array([j for j, _ in cfg.steps], np.int64)
    node_names = np.asarray(cfg.nodes, dtype=object)
    block = max(1, BLOCK_CELLS // max(1, k + n_nodes))
    for start in range(0, len(src), block):
        m = min(block, len(src) - start)
        # Sources x (1 + m): column 0 holds the values before the block, column i those after update i.
        values = np.repeat(st.watermark[:, None], m + 1, axis=1)
        has = np.repeat(st.has_watermark[:, None], m + 1, axis=1)
        set_at = np.zeros((k, m + 1), bool)
        cols = np.arange(1, m + 1)
        s = src[start : start + m]
        values[s, cols], has[s, cols], set_at[s, cols] = val[start : start + m], True, True
        set_at[:, 0] = True
        last_set = np.maximum.accumulate(np.where(set_at, np.arange(m + 1)[None, :], 0), axis=1)
        values = np.take_along_axis(values, last_set, axis=1)
        has = np.take_along_axis(has, last_set, axis=1)
        outputs, silent = node_outputs(cfg, values, has)
        o, q = outputs[with_ups], silent[with_ups]
        changed = (q[:, 1:] != q[:, :-1]) | (~q[:, 1:] & (o[:, 1:] != o[:, :-1]))  # OXW-R18
        nj, ni = np.nonzero(changed)
        if len(ni):
            out.add(
                "watermarks", len(ni), batch=b, seq=(order[start + ni], np.full(len(ni), not ordered)),
                key=node_names[with_ups[nj]], watermark=o[nj, ni + 1],
            )  # fmt: skip
        st.watermark, st.has_watermark = values[:, -1].copy(), has[:, -1].copy()
        yield
    st.violation_count += int(rows["s_violations"].to_numpy(np.int64)[final].sum())
    # OXW-R8, R16: the aligner over the sources and over the sinks (I64_MIN for none or a silent one).
    aligned = I64_MIN if k == 0 or not st.has_watermark.all() else int(st.watermark.min())
    outputs, silent = node_outputs(cfg, st.watermark[:, None], st.has_watermark[:, None])
    sinks = cfg.is_sink
    glob = I64_MIN if not sinks.any() or silent[sinks, 0].any() else int(outputs[sinks, 0].min())
    out.add("progress", 1, batch=b, aligned_watermark=aligned, global_watermark=glob,
            violation_count=st.violation_count)  # fmt: skip


# ---- the Spark operator ----------------------------------------------------------


_DEFAULTS: dict[str, Any] = {
    "wp_seq": np.int64(0), "wp_et": np.int64(0), "wp_et_null": True, "wp_time": np.int64(0),
    "wp_time_null": True,
}  # fmt: skip


class SourceBucketProcessor(WideStage):
    """The wide stage: one call per (stream, source bucket) and micro-batch."""

    defaults = _DEFAULTS

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("bucket", BUCKET_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, cfg: StreamConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        stored = self.state.get()
        st = (
            BucketState.from_tuple(stored, self.buckets, cfg.sources_digest) if stored is not None
            else BucketState(self.buckets, cfg.sources_digest)
        )  # fmt: skip
        before = st.to_tuple()
        out = _WideOut(stream_id)
        for b, part in batches_in(pdf, "wp_batch", True, 0):
            process_bucket_batch(st, part, cfg, b, bucket, self.ordered, out)
        after = st.to_tuple()
        if after != before:
            self.state.update(after)  # a call that changed nothing (errors, markers) writes nothing
        yield out.masked_frame(NULL_MASK)


class GraphProcessor(SecondStage):
    """The narrow stage (route -1): the graph over each stream's accepted updates."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)

    def __init__(
        self, default: StreamConfig, per_stream: Mapping[str, StreamConfig], ordered: bool, buckets: int
    ) -> None:
        self.default = default
        self.per_stream = dict(per_stream)
        self.ordered = ordered
        self.buckets = buckets

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("stream", STREAM_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[pd.DataFrame]:
        if int(key[1]) != SUMMARY_ROUTE:
            yield from super().handleInputRows(key, rows, timerValues)
            return
        stream_id = None if key[0] is None else str(key[0])  # TR-16: a null stream id stays null
        yield from self.propagate(stream_id, one_frame(rows))

    def summarise(self, stream_id: str | None, rows: pd.DataFrame) -> pd.DataFrame:
        """The narrow step as ``SinkStep`` runs it: one frame."""
        return pd.concat(list(self.propagate(stream_id, rows)), ignore_index=True)

    def propagate(self, stream_id: str | None, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        """The graph over one stream's rows of route -1, in frames of at most about FLUSH_ROWS."""
        cfg = self.default if stream_id is None else self.per_stream.get(stream_id, self.default)
        stored = self.state.get()
        try:
            st = (
                StreamState.from_tuple(stored, self.buckets, cfg.sources) if stored is not None
                else StreamState(self.buckets, cfg.sources)
            )  # fmt: skip
        except CheckpointError as error:  # raised here, the worker's report is the message alone
            raise error.in_stream(stream_id) from None
        before = st.to_tuple()
        out = OutputRows(stream_id, OUTPUT_COLUMNS, STRING_COLS)
        for b, part in batches_in(pdf, "batch", True, 0):
            for _ in propagate_batch(st, part, cfg, b, self.ordered, out):
                if sum(n for n, _ in out.pieces) >= FLUSH_ROWS:
                    yield out.masked_frame(NULL_MASK)
                    out.pieces.clear()
        after = st.to_tuple()
        if after != before or stored is None:
            self.state.update(after)
        yield out.masked_frame(NULL_MASK)


@dataclass
class WatermarkPropagationStreams(OperatorStreams):
    """The operator's output: ``output`` (combined) and its projections; ``write_tables``
    writes every table from one query."""

    table_columns = TABLE_COLUMNS

    output: Any
    generated: Any
    watermarks: Any
    violations: Any
    progress: Any
    errors: Any
    sink_rows: Any = None
    sink_step: Any = None


def watermark_propagation(
    df: Any,
    nodes: Sequence[str],
    edges: Sequence[Sequence[str]],
    node_col: str,
    event_time_col: str | None = None,
    watermark_col: str | None = None,
    advance_threshold: int = 1,
    max_out_of_order_ms: int = 0,
    stream_id_col: str | None = None,
    seq_col: str | None = None,
    kind_col: str | None = None,
    batch_col: str | None = None,
    stream_configs: Mapping[str, Mapping[str, Any]] | None = None,
    buckets: int | None = None,
    seq_unique: bool = False,
) -> WatermarkPropagationStreams:
    """Generates per-source watermarks and propagates them over the graph (see the module docstring).

    ``buckets``: wide-stage groups per stream (default: 4 per shuffle partition of the session),
    fixed in the checkpoint. ``seq_unique``: the producer guarantees that ``seq_col`` is unique
    per stream and batch, which skips the duplicate check (TR-15: every row of a repeated seq is
    a ``duplicate_seq`` error row), one shuffle less. Raises ``harness.traces.InvalidConfig``
    for a bad setting, graph or column.
    """
    from pyspark.sql import functions as F

    default, per_stream = stream_settings(
        validate_config,
        {"nodes": list(nodes), "edges": [list(e) for e in edges], "advance_threshold": advance_threshold,
         "max_out_of_order_ms": max_out_of_order_ms},
        stream_configs,
    )  # fmt: skip
    if event_time_col is None and watermark_col is None:
        raise InvalidConfig("give event_time_col, watermark_col or both")
    buckets = default_buckets(df.sparkSession) if buckets is None else require_int("buckets", buckets, 1)
    fields = {f.name: f.dataType for f in df.schema.fields}
    prepare_session(df.sparkSession, "watermark_propagation")
    warn_without_seq("watermark_propagation", seq_col, "time order, ties by node")
    check_columns(
        fields,
        {"node_col": node_col, "event_time_col": event_time_col, "watermark_col": watermark_col,
         "stream_id_col": stream_id_col, "seq_col": seq_col, "kind_col": kind_col, "batch_col": batch_col},
        ("seq_col", "batch_col"), kind_col, seq_col,
    )  # fmt: skip
    cols = [
        stream_id_column(stream_id_col, "wp_sid"),
        F.col(node_col).cast("string").alias("wp_node"),
        batch_marker(batch_col).alias("wp_batch"),
        *place_flags(seq_col, batch_col, "wp_"),
    ]
    if event_time_col is not None:
        et = event_time_millis(fields, event_time_col)
        cols += [long_or_zero(et).alias("wp_et"), et.isNull().alias("wp_et_null")]
    if watermark_col is not None:
        wm = millis_column(fields, "watermark_col", watermark_col)
        cols += [long_or_zero(wm).alias("wp_time"), wm.isNull().alias("wp_time_null")]
    if kind_col is not None:
        cols.append(F.col(kind_col).cast("string").alias("wp_kind"))
    elif watermark_col is not None:
        cols.append(F.when(F.col(watermark_col).isNotNull(), "watermark").otherwise("event").alias("wp_kind"))
    else:
        cols.append(F.lit("event").alias("wp_kind"))
    if seq_col is not None:
        cols.append(long_or_zero(seq_col).alias("wp_seq"))
    rows, unplaced = split_unplaced(df.select(*cols), "wp_")  # TR-16: no seq or batch, no place
    if seq_col is not None and not seq_unique:
        rows = flag_duplicate_seqs(rows, "wp_")  # TR-15
    # Every row belongs to its node's bucket; only the batch marker goes to bucket 0.
    is_item = F.coalesce(F.col("wp_kind") != "batch_end", F.lit(True))
    rows = to_buckets(
        rows, buckets, F.xxhash64(F.col("wp_node")), is_item, F.lit(True), F.lit(False), "wp_bucket"
    )
    ordered = seq_col is not None
    wide = SourceBucketProcessor(default, per_stream, ordered, buckets)
    narrow = GraphProcessor(default, per_stream, ordered, buckets)
    both = two_stages(rows, "wp_sid", "wp_bucket", wide, WIDE_SCHEMA, narrow, PASS_SCHEMA)
    output = with_unplaced_errors(restore_nulls(both, OUTPUT_COLUMNS, LONG_COLS), unplaced, "wp_")
    # write_tables and foreach_batch: the wide stage alone, the narrow step in the sink
    step = SinkStep("watermark_propagation", narrow, "stream", STREAM_SCHEMA, OUTPUT_COLUMNS, LONG_COLS)
    alone = one_stage(rows, "wp_sid", "wp_bucket", wide, WIDE_SCHEMA)
    sink_rows = with_unplaced_errors(alone, unplaced, "wp_")
    return WatermarkPropagationStreams(
        output=output, **table_projections(output, TABLE_COLUMNS), sink_rows=sink_rows, sink_step=step
    )


ENGINE_BUCKETS = 3


def engine_streams(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> WatermarkPropagationStreams:
    """The harness engine's call (spark_impl.engine.area_module): one stream per trace, its graph
    from the trace config; the engine writes a query of this area alone through
    ``foreach_batch`` (one stateful stage, the narrow step in the sink) and a query mixing areas
    through ``output``. Few buckets: a trace has a handful of sources and every group costs a
    Python call per micro-batch; three still spread a trace's sources over groups.
    ``seq_unique``: the engine's seqs are trace positions, unique by construction; False checks
    them (TR-15)."""
    return watermark_propagation(
        df, nodes=[], edges=[], node_col="key", event_time_col="event_time", watermark_col="time",
        stream_id_col="trace_id", seq_col="seq", kind_col="kind", batch_col="batch",
        stream_configs=stream_configs, buckets=buckets, seq_unique=seq_unique,
    )  # fmt: skip


def engine_output(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> Any:
    """``engine_streams``'s combined stream with both stages (``output``)."""
    return engine_streams(df, stream_configs, seq_unique, buckets).output


# ---- Spark's own watermark over two sources, for comparison ------------------------


def native_watermark_report(
    spark: Any, batches: Sequence[tuple[Sequence[int], Sequence[int]]], delay_ms: int
) -> list[dict[str, int]]:
    """Runs two sources through Spark's OWN watermark and reports the query's watermark per micro-batch.

    ``batches``: per micro-batch, the event times of source A and of source B
    (either may be empty). One query reads two ``trace`` sources in step (one
    trace batch of each per micro-batch, Trigger.AvailableNow)::

        a.withWatermark(ts, delay).union(b.withWatermark(ts, delay))
         .groupBy(window(ts, 1 s)).count()        # append mode, the default min policy

    Per micro-batch: ``batch_id``, ``input_rows`` and ``watermark`` (ms, the
    progress field ``eventTime.watermark``: the watermark the batch runs
    with). Spark's extra no-data batch at the end, if any, is included.
    """
    import os
    import shutil
    import tempfile

    import pyarrow as pa
    from pyspark.sql import functions as F

    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    require_int("delay_ms", delay_ms, 0)
    work = tempfile.mkdtemp(prefix="wp-native-")
    try:
        frames = []
        for side in (0, 1):
            cols: dict[str, list[int]] = {"batch": [], "event_time": []}
            for b, pair in enumerate(batches):
                cols["batch"] += [b] * len(pair[side])
                cols["event_time"] += list(pair[side])
            path = os.path.join(work, f"source{side}.parquet")
            write_trace_file(path, pa.table({c: pa.array(v, pa.int64()) for c, v in cols.items()}))
            frames.append(
                spark.readStream.format(SOURCE_NAME).option("path", path)
                .option("num_batches", str(len(batches))).load()
                .withColumn("ts", F.timestamp_millis("event_time"))
                .withWatermark("ts", f"{delay_ms} milliseconds")
            )  # fmt: skip
        counts = frames[0].union(frames[1]).groupBy(F.window("ts", "1 second")).count()
        progress = native_watermark_progress(counts, "append", os.path.join(work, "checkpoint"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return [{k: p[k] for k in ("batch_id", "input_rows", "watermark")} for p in progress]


# ---- the state layout as a checkpoint holds it (read by spark_impl/checkpoints.py) ----------

LAYOUT = register(
    Operator(
        "watermark_propagation", LAYOUT_VERSION,
        # The graph a value was written for is checked against the stream's settings when
        # the query runs; here each value is read against its own.
        Stage({"bucket": lambda v, k: BucketState.from_tuple(v, value_buckets(v), v[2])}, ("bucket",)),
        Stage({"stream": lambda v, k: StreamState.from_tuple(v, value_buckets(v), stored_sources(v))},
              ("stream",)),  # fmt: skip
        schema_fields(STREAM_SCHEMA),
    )
)  # fmt: skip


__all__ = [
    "ENGINE_BUCKETS",
    "LAYOUT_VERSION",
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "BucketState",
    "GraphProcessor",
    "SourceBucketProcessor",
    "StreamConfig",
    "StreamState",
    "WatermarkPropagationStreams",
    "engine_output",
    "native_watermark_report",
    "node_outputs",
    "process_bucket_batch",
    "propagate_batch",
    "validate_config",
    "watermark_propagation",
]
