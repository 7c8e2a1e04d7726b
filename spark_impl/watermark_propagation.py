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
        watermark_col="reported_wm",      # optional: direct watermark reports (LongType ms)
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

A row is a ``watermark`` report when ``kind_col`` says so, or, without
``kind_col``, when ``watermark_col`` is given and not null; otherwise it is an
event. Optional columns: ``stream_id_col`` (many independent streams in one
query, each with its own graph through ``stream_configs``: stream id ->
the trace config keys ``nodes``, ``edges``, ``advance_threshold``,
``max_out_of_order_ms``), ``seq_col`` (arrival order inside a micro-batch;
without it rows are taken in time order, ties by node), ``kind_col``
(event | watermark | batch_end), ``batch_col`` (the batch number reported;
without it the operator counts each stream's micro-batches).

Design (how Spark realises the clauses)
---------------------------------------
- ONE GROUP PER STREAM: ``groupBy(stream_id).transformWithStateInPandas(...,
  timeMode="None")``; the aligned and global watermarks need every source
  of the stream. Spark's own watermark is not used (it is one per query and
  would drop rows; ``native_watermark_report`` shows what it does).
- STATE: one ValueState per stream (RocksDB provider): layout version,
  micro-batches seen, violation count, the source ids it was written for,
  and per source the generator's event count and maximum event time and the
  last emitted watermark (JSON, exact for every i64). One read and one
  write per stream and micro-batch. Operator outputs are not stored: by
  OXW-R15 each is the minimum over the sources it depends on, so they are
  derived from the source columns with the graph's ancestor-source matrix,
  computed once per stream config on the driver.
- VECTORISED inside a micro-batch, in ``seq`` order: error masks; the
  generators as a grouped cumulative count and maximum per source; the
  candidate source updates (emissions and reports) judged against a
  grouped cumulative maximum of the earlier ones (violations, OXW-R12);
  the source values after every update as a forward-filled matrix; every
  operator's output after every update as a masked minimum over its
  ancestor sources; changes as a comparison with the previous row.
- SATURATING i64 arithmetic for ``max - delay`` (numpy would wrap).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN, InvalidConfig
from spark_impl.common import (
    OutputRows,
    StreamGroupProcessor,
    batches_in,
    check_columns,
    event_time_millis,
    long_or_zero,
    native_watermark_progress,
    one_group_per_stream,
    require_int,
    sat_sub,
    stream_id_column,
    stream_settings,
    table_projections,
    with_defaults,
)

LAYOUT_VERSION = 1
CONFIG_KEYS = ("nodes", "edges", "advance_threshold", "max_out_of_order_ms")

STRING_COLS = ("output", "stream_id", "key", "reason")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "key", "watermark", "reason",
    "aligned_watermark", "global_watermark", "violation_count",
)  # fmt: skip
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)
STATE_SCHEMA = "layout_version int, batches long, violation_count long, sources string, table string"

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
    # ancestors[n, s]: node n is reachable from source s (a source reaches itself), OXW-R15
    ancestors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    is_sink: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    advance_threshold: int = 1
    max_out_of_order_ms: int = 0


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
    has_up = {b for _, b in pairs}
    has_down = {a for a, _ in pairs}
    sources = [n for n in nodes if n not in has_up]
    reach: dict[str, set[str]] = {}
    for n in order:
        ups = [a for a, b in pairs if b == n]
        reach[n] = {n} if not ups else set().union(*(reach[u] for u in ups))  # OXW-R15
    ancestors = np.array([[s in reach[n] for s in sources] for n in nodes], bool).reshape(
        len(nodes), len(sources)
    )
    return StreamConfig(
        nodes=tuple(nodes), sources=tuple(sources), ancestors=ancestors,
        is_sink=np.array([n not in has_down for n in nodes], bool),
        advance_threshold=threshold, max_out_of_order_ms=delay,
    )  # fmt: skip


# ---- the stream state (OXW-R19) -----------------------------------------------


@dataclass
class StreamState:
    """Everything one stream keeps across micro-batches (one ValueState)."""

    batches: int = 0
    violation_count: int = 0
    sources: tuple[str, ...] | None = None  # the graph the state was written for
    count: list[int] = field(default_factory=list)  # generator events counted, per source
    max_et: list[int | None] = field(default_factory=list)  # generator maximum, per source
    wm: list[int | None] = field(default_factory=list)  # last emitted watermark, per source

    def to_tuple(self) -> tuple[Any, ...]:
        table = json.dumps({"count": self.count, "max_event_time": self.max_et, "watermark": self.wm})
        return (LAYOUT_VERSION, self.batches, self.violation_count, json.dumps(self.sources), table)

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...]) -> StreamState:
        if value[0] != LAYOUT_VERSION:
            raise RuntimeError(
                f"watermark_propagation: the checkpoint holds state layout version {value[0]}; this "
                f"release reads version {LAYOUT_VERSION} only. Start from a new checkpoint."
            )
        table = json.loads(value[4])
        sources = json.loads(value[3])
        return cls(
            batches=int(value[1]), violation_count=int(value[2]),
            sources=None if sources is None else tuple(sources),
            count=table["count"], max_et=table["max_event_time"], wm=table["watermark"],
        )  # fmt: skip

    def bind(self, cfg: StreamConfig) -> None:
        """A new stream starts empty; a stored one must have been written for the same sources."""
        if self.sources is None:
            k = len(cfg.sources)
            self.sources, self.count, self.max_et, self.wm = cfg.sources, [0] * k, [None] * k, [None] * k
        elif tuple(self.sources) != cfg.sources:
            raise RuntimeError(
                f"watermark_propagation: the checkpoint was written for the sources {list(self.sources)}, "
                f"the graph now has {list(cfg.sources)}. Start from a new checkpoint."
            )


# ---- processing one stream's rows (pure pandas/numpy; runs in the worker) ------


class _Out(OutputRows):
    def __init__(self, stream_id: str) -> None:
        super().__init__(stream_id, OUTPUT_COLUMNS, STRING_COLS)


def _nullable(values: Sequence[int | None]) -> tuple[np.ndarray, np.ndarray]:
    has = np.array([v is not None for v in values], bool)
    return np.array([0 if v is None else v for v in values], np.int64), has


def _grouped_cummax_before(groups: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the maximum of the earlier values of its group, and whether there is one (int64 only:
    a pandas shift would pass through float and lose large times)."""
    n = len(values)
    order = np.argsort(groups, kind="stable")
    g, v = groups[order], values[order]
    running = pd.Series(v).groupby(g, sort=False).cummax().to_numpy(np.int64)
    has_sorted = np.zeros(n, bool)
    has_sorted[1:] = g[1:] == g[:-1]
    before_sorted = np.zeros(n, np.int64)
    before_sorted[1:] = np.where(has_sorted[1:], running[:-1], 0)
    before, has = np.empty(n, np.int64), np.empty(n, bool)
    before[order], has[order] = before_sorted, has_sorted
    return before, has


def process_rows(
    state: StreamState, rows: pd.DataFrame, cfg: StreamConfig, stream_id: str, has_batch: bool
) -> pd.DataFrame:
    """Applies one call's rows of one stream to its state; returns the output rows.

    ``rows`` has the normalised columns wp_batch, wp_seq, wp_kind, wp_node,
    wp_et, wp_et_null, wp_time, wp_time_null.
    """
    state.bind(cfg)
    out = _Out(stream_id)
    for b, part in batches_in(rows, "wp_batch", has_batch, state.batches):
        _process_batch(state, part, cfg, b, out)
        state.batches += 1
    return out.frame()


def _process_batch(st: StreamState, rows: pd.DataFrame, cfg: StreamConfig, b: int, out: _Out) -> None:
    rows = rows.sort_values("wp_seq", kind="stable")
    kind = rows["wp_kind"].to_numpy(object)
    node = rows["wp_node"].to_numpy(object)
    et = rows["wp_et"].to_numpy(np.int64)
    et_null = rows["wp_et_null"].to_numpy(bool)
    tm = rows["wp_time"].to_numpy(np.int64)
    tm_null = rows["wp_time_null"].to_numpy(bool)
    seq = rows["wp_seq"].to_numpy(np.int64)
    k = len(cfg.sources)

    # OXW-R17: the checks in their order, the first failing one wins (np.select picks the first).
    is_event, is_report, marker = kind == "event", kind == "watermark", kind == "batch_end"
    node_null = pd.isna(node)
    names = pd.Index(np.where(node_null, "", node).astype(object))
    node_pos, src_pos = pd.Index(cfg.nodes).get_indexer(names), pd.Index(cfg.sources).get_indexer(names)
    err = np.select(
        [~(is_event | is_report), node_null, node_pos < 0, src_pos < 0, is_event & et_null,
         is_report & tm_null],
        ["unsupported_item", "missing_key", "unknown_operator", "not_a_source", "missing_event_time",
         "missing_time"],
        default="",
    ).astype(object)  # fmt: skip
    err[marker] = ""
    bad = err != ""
    if bad.any():
        out.add("errors", int(bad.sum()), batch=b, seq=seq[bad], reason=err[bad])

    # OXW-R1, R2: the generators, a grouped running count and maximum per source.
    ev = is_event & ~bad
    ev_src, ev_t, ev_seq = src_pos[ev], et[ev], seq[ev]
    stored_count = np.array(st.count, np.int64)
    stored_max, stored_has_max = _nullable(st.max_et)
    counted = pd.Series(np.ones(len(ev_src), np.int64)).groupby(ev_src, sort=False).cumsum().to_numpy()
    n_th = stored_count[ev_src] + counted if len(ev_src) else np.zeros(0, np.int64)
    run_max = pd.Series(ev_t).groupby(ev_src, sort=False).cummax().to_numpy(np.int64)
    run_max = np.where(stored_has_max[ev_src], np.maximum(run_max, stored_max[ev_src]), run_max)
    emits = n_th % cfg.advance_threshold == 0  # OXW-R2
    gen_value = sat_sub(run_max[emits], cfg.max_out_of_order_ms)
    if emits.any():
        src_names = np.asarray(cfg.sources, dtype=object)
        out.add("generated", int(emits.sum()), batch=b, seq=ev_seq[emits], key=src_names[ev_src[emits]],
                watermark=gen_value)  # fmt: skip
    for s in np.unique(ev_src).tolist():
        mine = ev_src == s
        st.count[s] += int(mine.sum())
        st.max_et[s] = int(run_max[mine][-1])

    # OXW-R11, R12: candidate source updates in seq order, judged against the running maximum.
    rep = is_report & ~bad
    c_seq = np.concatenate([ev_seq[emits], seq[rep]])
    order = np.argsort(c_seq, kind="stable")
    c_seq = c_seq[order]
    c_src = np.concatenate([ev_src[emits], src_pos[rep]])[order]
    c_val = np.concatenate([gen_value, tm[rep]])[order]
    stored_wm, stored_has_wm = _nullable(st.wm)
    before, has_before = _grouped_cummax_before(c_src, c_val)
    prev_has = has_before | stored_has_wm[c_src]
    prev = np.where(
        has_before & stored_has_wm[c_src], np.maximum(before, stored_wm[c_src]),
        np.where(has_before, before, stored_wm[c_src]),
    )  # fmt: skip
    violation = prev_has & (c_val < prev)
    if violation.any():
        source_names = np.asarray(cfg.sources, dtype=object)
        out.add(
            "violations", int(violation.sum()), batch=b, seq=c_seq[violation],
            key=source_names[c_src[violation]], watermark=c_val[violation], reason="regression",
        )  # fmt: skip
        st.violation_count += int(violation.sum())
    new_val = np.where(prev_has, np.maximum(prev, c_val), c_val)

    # Source values after each candidate: row 0 is the stored state, forward-filled per source.
    m = len(c_val)
    vals = np.zeros((m + 1, k), np.int64)
    has = np.zeros((m + 1, k), bool)
    vals[0], has[0] = stored_wm, stored_has_wm
    set_at = np.zeros((m + 1, k), bool)
    set_at[0] = True
    if m:
        rows_i = np.arange(1, m + 1)
        vals[rows_i, c_src], has[rows_i, c_src], set_at[rows_i, c_src] = new_val, True, True
    last_set = np.maximum.accumulate(np.where(set_at, np.arange(m + 1)[:, None], 0), axis=0)
    cols = np.arange(k)[None, :]
    vals, has = vals[last_set, cols], has[last_set, cols]

    # OXW-R13..R15: each operator's output = min over its ancestor sources, null while one is silent.
    n_nodes = len(cfg.nodes)
    outs = np.zeros((m + 1, n_nodes), np.int64)
    silent = np.zeros((m + 1, n_nodes), bool)
    for j in range(n_nodes):
        anc = cfg.ancestors[j]
        outs[:, j] = np.where(anc[None, :], vals, np.int64(I64_MAX)).min(axis=1) if anc.any() else I64_MAX
        silent[:, j] = (~has[:, anc]).any(axis=1)
    if m:
        changed = (silent[1:] != silent[:-1]) | (~silent[1:] & (outs[1:] != outs[:-1]))  # OXW-R18
        ci, cj = np.nonzero(changed)
        if len(ci):
            node_names = np.asarray(cfg.nodes, dtype=object)
            out.add("watermarks", len(ci), batch=b, seq=c_seq[ci], key=node_names[cj],
                    watermark=outs[1:][ci, cj])  # fmt: skip
    st.wm = [int(v) if h else None for v, h in zip(vals[-1], has[-1], strict=True)]

    # OXW-R8, R16: the aligner over the sources and over the sinks (I64_MIN for none or a silent one).
    aligned = I64_MIN if k == 0 or not has[-1].all() else int(vals[-1].min())
    sinks = cfg.is_sink
    final_silent, final_out = silent[-1][sinks], outs[-1][sinks]
    glob = I64_MIN if not sinks.any() or final_silent.any() else int(final_out.min())
    out.add("progress", 1, batch=b, aligned_watermark=aligned, global_watermark=glob,
            violation_count=st.violation_count)  # fmt: skip


# ---- the Spark operator ----------------------------------------------------------


class WatermarkPropagationProcessor(StreamGroupProcessor[StreamConfig]):
    """The stateful processor: one call per stream (group) and micro-batch."""

    state_name = "watermark_propagation"
    state_schema = STATE_SCHEMA
    state_class = StreamState

    def prepare(self, pdf: pd.DataFrame) -> pd.DataFrame:
        return with_defaults(pdf, _DEFAULTS)

    def process(self, st: StreamState, pdf: pd.DataFrame, cfg: StreamConfig, stream_id: str) -> pd.DataFrame:
        return process_rows(st, pdf, cfg, stream_id, self.has_batch)


class _UnorderedProcessor(WatermarkPropagationProcessor):
    """Without a seq column: rows in time order (event time or reported time), ties by node."""

    def prepare(self, pdf: pd.DataFrame) -> pd.DataFrame:
        pdf = super().prepare(pdf)
        when = np.where(pdf["wp_kind"].to_numpy(object) == "watermark", pdf["wp_time"], pdf["wp_et"])
        pdf = pdf.assign(wp_when=when).sort_values(["wp_when", "wp_node"], kind="stable")
        pdf = pdf.reset_index(drop=True)
        pdf["wp_seq"] = np.arange(len(pdf), dtype=np.int64)
        return pdf


_DEFAULTS: dict[str, Any] = {
    "wp_batch": np.int64(0), "wp_seq": np.int64(0), "wp_et": np.int64(0), "wp_et_null": True,
    "wp_time": np.int64(0), "wp_time_null": True,
}  # fmt: skip


@dataclass
class WatermarkPropagationStreams:
    """The operator's output: ``output`` (combined) and its projections."""

    output: Any
    generated: Any
    watermarks: Any
    violations: Any
    progress: Any
    errors: Any


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
) -> WatermarkPropagationStreams:
    """Generates per-source watermarks and propagates them over the graph (see the module docstring).

    Raises ``harness.traces.InvalidConfig`` for a bad setting, graph or column.
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
    fields = {f.name: f.dataType for f in df.schema.fields}
    check_columns(
        fields,
        {"node_col": node_col, "event_time_col": event_time_col, "watermark_col": watermark_col,
         "stream_id_col": stream_id_col, "seq_col": seq_col, "kind_col": kind_col, "batch_col": batch_col},
        ("watermark_col", "seq_col", "batch_col"), kind_col, seq_col,
    )  # fmt: skip
    cols = [
        stream_id_column(stream_id_col, "wp_sid"),
        F.col(node_col).cast("string").alias("wp_node"),
    ]
    if event_time_col is not None:
        et = event_time_millis(fields, event_time_col)
        cols += [long_or_zero(et).alias("wp_et"), et.isNull().alias("wp_et_null")]
    if watermark_col is not None:
        wm = F.col(watermark_col).cast("long")
        cols += [long_or_zero(wm).alias("wp_time"), wm.isNull().alias("wp_time_null")]
    if kind_col is not None:
        cols.append(F.col(kind_col).cast("string").alias("wp_kind"))
    elif watermark_col is not None:
        cols.append(F.when(F.col(watermark_col).isNotNull(), "watermark").otherwise("event").alias("wp_kind"))
    else:
        cols.append(F.lit("event").alias("wp_kind"))
    if seq_col is not None:
        cols.append(long_or_zero(seq_col).alias("wp_seq"))
    if batch_col is not None:
        cols.append(long_or_zero(batch_col).alias("wp_batch"))
    processor_class = WatermarkPropagationProcessor if seq_col else _UnorderedProcessor
    processor = processor_class(default, per_stream, batch_col is not None)
    output = one_group_per_stream(df, cols, "wp_sid", processor, OUTPUT_SCHEMA)
    return WatermarkPropagationStreams(output=output, **table_projections(output, TABLE_COLUMNS))


def engine_output(df: Any, stream_configs: Mapping[str, Mapping[str, Any]]) -> Any:
    """The harness engine's call (spark_impl.engine.area_module): one stream per trace, its graph
    from the trace config."""
    return watermark_propagation(
        df, nodes=[], edges=[], node_col="key", event_time_col="event_time", watermark_col="time",
        stream_id_col="trace_id", seq_col="seq", kind_col="kind", batch_col="batch",
        stream_configs=stream_configs,
    ).output  # fmt: skip


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


__all__ = [
    "LAYOUT_VERSION",
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "StreamConfig",
    "StreamState",
    "WatermarkPropagationProcessor",
    "WatermarkPropagationStreams",
    "engine_output",
    "native_watermark_report",
    "process_rows",
    "validate_config",
    "watermark_propagation",
]
