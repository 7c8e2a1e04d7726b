"""Watermark generation, alignment and propagation (oxirs): invariants, differential and native tests.

Invariants run on the oracle (reference/watermark_propagation.py) over generated
DAGs and update streams with regressions; they are derived from the clauses,
not from the oracle's code:

* per node, the reported outputs strictly increase (OXW-R12, R13: per-edge
  non-decreasing, and a row only when the output changes);
* after every item, every operator's output is the minimum of its upstreams'
  outputs, or none while one of them is silent (OXW-R13, R14);
* a violation names a source and its watermark is below that source's output
  at that moment; the output does not move (OXW-R12);
* the global watermark never exceeds any source's watermark, and equals the
  aligned one (OXW-R16);
* generators emit exactly at multiples of the threshold (OXW-R2);
* restarts change nothing (OXW-R19); cycles and bad settings are refused (OXW-R10, TR-6);
* batch cuts change nothing but the numbering, on the oracle and on every engine, with planted
  batch-dependent propagators the comparison must still convict, and an operator fused into its
  only upstream changes only its own rows (OXW-R21).

The differential test runs the generated traces through an engine chosen with
``--engine`` in ONE run and compares with the oracle. The native test runs a real
two-source Spark query with ``withWatermark`` on both inputs and checks Spark's
own global watermark against the oracle's aligned watermark (spec: "Spark's own
watermark, compared").
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.outputs import TABLES
from harness.traces import I64_MIN, InvalidConfig, Item, Trace, saturating_sub
from properties import batch_cuts
from properties.batch_cuts import batch_ends, draw_cuts, item_places, kept_differences
from reference.watermark_propagation import (
    GraphCycle,
    NotASource,
    UnknownOperator,
    WatermarkAligner,
    WatermarkPropagator,
    WatermarkViolation,
    run_trace,
)
from strategies.common import check_generated
from strategies.watermark_propagation import (
    DIFFERENTIAL,
    dags,
    invalid_configs,
    sources_of,
    watermark_propagation_traces,
)

Outputs = dict[str, list[tuple[Any, ...]]]


def _replay(trace: Trace, out: Outputs) -> list[tuple[tuple[int, int], dict[str, int | None]]]:
    """Every node's output after every item, folded from the watermarks change table."""
    nodes = trace.config["nodes"]
    state: dict[str, int | None] = {n: None for n in nodes}
    changes: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for b, seq, node, wm in out["watermarks"]:
        changes.setdefault((b, seq), []).append((node, wm))
    after = []
    for b, batch in enumerate(trace.batches):
        for seq in range(len(batch)):
            for node, wm in changes.get((b, seq), []):
                state[node] = wm
            after.append(((b, seq), dict(state)))
    return after


def _upstreams(trace: Trace) -> dict[str, list[str]]:
    ups: dict[str, list[str]] = {n: [] for n in trace.config["nodes"]}
    for a, b in trace.config["edges"]:
        ups[b].append(a)
    return ups


@pytest.mark.clauses("OXW-R12", "OXW-R13", "OXW-R14", "OXW-R15")
@given(watermark_propagation_traces())
def test_outputs_only_rise_and_each_operator_is_the_minimum_of_its_upstreams(trace: Trace) -> None:
    out = run_trace(trace)
    ups = _upstreams(trace)
    last: dict[str, int] = {}
    for _, _, node, wm in out["watermarks"]:  # rows come in arrival order
        assert node not in last or wm > last[node]  # OXW-R12: strictly up, only changes are rows
        last[node] = wm
    for _, state in _replay(trace, out):
        for node, upstream in ups.items():
            if not upstream:
                continue
            inputs = [state[u] for u in upstream]
            expected = None if None in inputs else min(w for w in inputs if w is not None)
            assert state[node] == expected  # OXW-R13, R14


@pytest.mark.clauses("OXW-R12", "OXW-R13", "OXW-R18")
@given(watermark_propagation_traces())
def test_a_violation_names_a_source_below_its_output_and_moves_nothing(trace: Trace) -> None:
    out = run_trace(trace)
    sources = set(sources_of(trace.config["nodes"], trace.config["edges"]))
    states = dict(_replay(trace, out))
    changed_at = {(b, seq) for b, seq, _, _ in out["watermarks"]}
    for b, seq, node, wm, reason in out["violations"]:
        assert node in sources and reason == "regression"  # OXW-R12, R13
        assert (b, seq) not in changed_at  # OXW-R12: nothing changes
        current = states[(b, seq)][node]
        assert current is not None and wm < current
    assert [r[3] for r in out["progress"]][-1] == len(out["violations"])  # cumulative count


@pytest.mark.clauses("OXW-R5", "OXW-R6", "OXW-R7", "OXW-R8", "OXW-R16", "OXW-R18")
@given(watermark_propagation_traces())
def test_the_global_watermark_is_never_above_a_source_and_equals_the_aligned_one(trace: Trace) -> None:
    out = run_trace(trace)
    sources = sources_of(trace.config["nodes"], trace.config["edges"])
    states = _replay(trace, out)
    assert [r[0] for r in out["progress"]] == list(range(len(trace.batches)))  # OXW-R18
    for b, aligned, glob, _ in out["progress"]:
        assert glob == aligned  # OXW-R16
        mine = [s for (bb, _), s in states if bb == b]
        end = mine[-1] if mine else None
        if end is None:
            continue
        source_wms = [end[s] for s in sources]
        assert all(w is None or glob <= w for w in source_wms)  # sink global never above a source
        if not sources or None in source_wms:
            assert glob == I64_MIN  # OXW-R6, R7
        else:
            assert glob == min(w for w in source_wms if w is not None)  # OXW-R5


@pytest.mark.clauses("OXW-R1", "OXW-R2", "OXW-R3")
@given(watermark_propagation_traces())
def test_generators_emit_at_every_threshold_th_event_of_their_source(trace: Trace) -> None:
    out = run_trace(trace)
    threshold = trace.config.get("advance_threshold", 1)
    delay = trace.config.get("max_out_of_order_ms", 0)
    sources = set(sources_of(trace.config["nodes"], trace.config["edges"]))
    expected = []
    count: dict[str, int] = {}
    top: dict[str, int] = {}
    for b, batch in enumerate(trace.batches):
        for seq, item in enumerate(batch):
            if item.kind == "event" and item.key in sources and item.event_time is not None:
                count[item.key] = count.get(item.key, 0) + 1  # OXW-R1
                top[item.key] = max(top.get(item.key, item.event_time), item.event_time)
                if count[item.key] % threshold == 0:  # OXW-R2
                    expected.append((b, seq, item.key, saturating_sub(top[item.key], delay)))
    assert out["generated"] == expected


@pytest.mark.clauses("OXW-R19", "TR-5")
@given(watermark_propagation_traces())
def test_restarts_do_not_change_the_output(trace: Trace) -> None:
    assert run_trace(trace) == run_trace(replace(trace, restart_after=frozenset()))  # OXW-R19


# ---- batch cuts and fusion (OXW-R21) ----------------------------------------------

CUT_TRACES = st.one_of(
    watermark_propagation_traces(large_batch_rate=15), watermark_propagation_traces(near_bounds=True)
)
ITEM_TABLES = ("generated", "watermarks", "violations", "errors")


def _what_a_cut_keeps(trace: Trace, out: Outputs) -> dict[str, Any]:
    """What OXW-R21 says no cut changes: every row of the item tables with its (batch, seq) read
    as the item's place in the whole trace, and, keyed by how many items the trace had seen at the
    end of each batch, that batch's progress rows without their batch."""
    at = item_places(trace)
    kept: dict[str, Any] = {t: sorted((at[(r[0], r[1])], *r[2:]) for r in out[t]) for t in ITEM_TABLES}
    kept["progress"] = {}
    for b, n in enumerate(batch_ends(trace)):  # a batch without its row shows as an empty tuple
        kept["progress"].setdefault(n, set()).add(tuple(sorted(r[1:] for r in out["progress"] if r[0] == b)))
    return kept


def _cut_differences(trace: Trace, out: Outputs, twin: Trace, again: Outputs) -> list[str]:
    """Where two cuts' answers differ beyond the numbering: the item tables item for item, and
    progress wherever both cuts end a batch after the same items."""
    one, other = _what_a_cut_keeps(trace, out), _what_a_cut_keeps(twin, again)
    return kept_differences(one, other, ITEM_TABLES, ("progress",))


@pytest.mark.clauses("OXW-R21", "OXW-R13", "OXW-R18", "OXW-R19", "TR-5")
@given(CUT_TRACES, st.data())
def test_batch_cuts_change_nothing_but_the_numbering(trace: Trace, data: st.DataObject) -> None:
    """The same items cut into other batches (split, merged, empty ones added, restarts moved):
    the same generated, watermark, violation and error rows item for item, and the same progress
    wherever both cuts end a batch after the same items."""
    twin = draw_cuts(data, trace)
    assert not _cut_differences(trace, run_trace(trace), twin, run_trace(twin))


RECUT_TRACES = 8


def recut_pairs() -> list[tuple[Trace, Trace]]:
    """Generated graphs with sources, their update streams and each one's re-cut twin
    (properties.batch_cuts): a graph without nodes has nothing but error rows to compare."""
    with_sources = CUT_TRACES.filter(lambda t: len(t.config["nodes"]) > 0)
    return batch_cuts.recut_pairs(with_sources, RECUT_TRACES, salt=16)


def recut_traces() -> list[Trace]:
    return [t for pair in recut_pairs() for t in pair]


# the traces and their twins join the session's pre-run
@pytest.mark.prerun_traces.with_args(recut_traces)  # with_args: the one argument is a function
@pytest.mark.clauses("OXW-R21", "OXW-R13", "OXW-R18", "OXW-R19", "TR-5")
def test_batch_cuts_change_nothing_but_the_numbering_on_the_engine(engine_under_test: Any) -> None:
    """The engine's answer to a trace and to its re-cut twin, compared as on the oracle above."""
    pairs = recut_pairs()
    assert len(pairs) == RECUT_TRACES
    batch_cuts.check_twins_on_the_engine(engine_under_test, pairs, _cut_differences)


def _first_item_of_each_batch_lost(out: Outputs) -> Outputs:
    """A propagator that loses whatever the first row of each batch gives (an offset read one past)."""
    return {t: [r for r in rows if t == "progress" or r[1] != 0] for t, rows in out.items()}


def _violations_counted_per_batch(out: Outputs) -> Outputs:
    """A violation count that starts again every batch (a counter not carried over)."""
    progress, before = [], 0
    for r in sorted(out["progress"]):
        progress.append((*r[:3], r[3] - before))
        before = r[3]
    return {**out, "progress": progress}


def _progress_from_the_batch_start(out: Outputs) -> Outputs:
    """Progress watermarks as they stood when the batch began, the one-batch lag of Spark's own
    watermark, where R18 reports them after the batch."""
    progress, before = [], (I64_MIN, I64_MIN)
    for r in sorted(out["progress"]):
        progress.append((r[0], *before, r[3]))
        before = (r[1], r[2])
    return {**out, "progress": progress}


@pytest.mark.clauses("OXW-R21", "OXW-R12", "OXW-R18")
@pytest.mark.parametrize(
    "planted", [_first_item_of_each_batch_lost, _violations_counted_per_batch, _progress_from_the_batch_start]
)
def test_the_batch_cut_comparison_convicts_a_propagator_that_depends_on_its_batches(planted: Any) -> None:
    """The comparison above drops the numbering and reads progress only where both cuts end a
    batch; it still catches a propagator whose answer depends on where its batches end."""
    caught = [
        trace.name for trace, twin in recut_pairs()
        if _cut_differences(trace, planted(run_trace(trace)), twin, planted(run_trace(twin)))
    ]  # fmt: skip
    assert caught, f"{planted.__name__}: no re-cut twin shows it"


FUSED = "fused"  # the id of the operator the fused graph no longer has


@pytest.mark.clauses("OXW-R21", "OXW-R13", "OXW-R15", "OXW-R17")
@given(CUT_TRACES.filter(lambda t: len(t.config["nodes"]) > 0), st.data())
def test_an_operator_fused_into_its_only_upstream_changes_only_its_own_rows(
    trace: Trace, data: st.DataObject
) -> None:
    """The graph with one more operator between a node and all its downstreams, against the graph
    itself (that operator fused into the node): the same tables, but for the operator's own
    watermark rows, each equal to the node's row of the same item, and an item naming it, which
    only the fused graph refuses as unknown_operator."""
    node = data.draw(st.sampled_from(trace.config["nodes"]), label="node")
    # the node's downstreams move behind the new operator, whose only upstream is the node
    split = [[FUSED if a == node else a, b] for a, b in trace.config["edges"]] + [[node, FUSED]]
    b = data.draw(st.integers(0, len(trace.batches) - 1), label="batch of the item naming it")
    s = data.draw(st.integers(0, len(trace.batches[b])), label="its seq")
    batches = [list(batch) for batch in trace.batches]
    batches[b].insert(s, Item("watermark", key=FUSED, time=0))
    fused = replace(trace, batches=tuple(tuple(batch) for batch in batches))
    nodes = [*trace.config["nodes"], FUSED]
    unfused = replace(fused, config={**trace.config, "nodes": nodes, "edges": split})
    one, other = run_trace(unfused), run_trace(fused)
    assert (b, s, "not_a_source") in one["errors"] and (b, s, "unknown_operator") in other["errors"]
    for table in ("generated", "violations", "progress"):
        assert one[table] == other[table]
    assert [e for e in one["errors"] if e[:2] != (b, s)] == [e for e in other["errors"] if e[:2] != (b, s)]
    assert sorted(r for r in one["watermarks"] if r[2] != FUSED) == sorted(other["watermarks"])
    own = [(bb, ss, w) for bb, ss, n, w in one["watermarks"] if n == FUSED]
    assert own == [(bb, ss, w) for bb, ss, n, w in other["watermarks"] if n == node]


@pytest.mark.clauses("OXW-R2", "TR-2")
@given(watermark_propagation_traces(near_bounds=True))
def test_near_the_i64_bounds_the_invariants_hold_and_nothing_wraps(trace: Trace) -> None:
    out = run_trace(trace)
    for _, _, _, wm in out["generated"] + out["watermarks"]:
        assert I64_MIN <= wm < I64_MIN + 10**9  # TR-2: saturated, never wrapped to the top


@pytest.mark.clauses("OXW-R4", "OXW-R9", "OXW-R10", "OXW-R20", "TR-6")
@given(invalid_configs())
def test_invalid_configurations_are_refused(config: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfig):
        run_trace(Trace("watermark_propagation", config, ((),)))  # OXW-R9, R10, R20, TR-6


@pytest.mark.clauses("OXW-R10")
@given(dags(), st.data())
def test_a_refused_cycle_is_a_real_cycle_of_the_graph(
    graph: tuple[list[str], list[list[str]]], data: Any
) -> None:
    nodes, edges = graph
    if not nodes:
        return
    a = data.draw(st.sampled_from(nodes))
    b = data.draw(st.sampled_from(nodes))
    try:
        WatermarkPropagator(nodes, [*edges, [a, b]])
    except GraphCycle as e:  # OXW-R10
        cycle = e.cycle
        assert cycle[0] == cycle[-1] and len(cycle) >= 2
        pairs = {(x, y) for x, y in [*edges, [a, b]]}
        assert all((x, y) in pairs for x, y in zip(cycle, cycle[1:], strict=False))
    except InvalidConfig:
        assert [a, b] in edges  # a repeated edge, not a cycle
    else:
        assert a != b  # a self-loop is always a cycle


# ---- the object API -------------------------------------------------------------


@pytest.mark.clauses("OXW-R5", "OXW-R6", "OXW-R7")
@given(
    st.lists(st.tuples(st.sampled_from("abcd"), st.one_of(st.none(), st.integers(-100, 100))), max_size=12)
)
def test_the_aligner_is_the_minimum_with_silent_sources_at_the_lower_bound(
    calls: list[tuple[str, Any]],
) -> None:
    aligner = WatermarkAligner()
    model: dict[str, int | None] = {}
    assert aligner.global_watermark() == I64_MIN  # OXW-R6
    for source, wm in calls:
        if wm is None:
            aligner.register_source(source)
            model.setdefault(source, None)  # OXW-R5: registering again changes nothing
        else:
            aligner.update(source, wm)
            model[source] = wm  # OXW-R5: kept as given, even lower
        silent = not model or None in model.values()
        expected = I64_MIN if silent else min(w for w in model.values() if w is not None)  # OXW-R6, R7
        assert aligner.global_watermark() == expected


@pytest.mark.clauses("OXW-R11", "OXW-R12")
def test_the_propagator_api_refuses_regressions_non_sources_and_unknown_nodes() -> None:
    p = WatermarkPropagator(["a", "b", "j"], [["a", "j"], ["b", "j"]])
    assert p.update("a", 10) == {"a": 10}
    assert p.update("b", 5) == {"b": 5, "j": 5}
    assert p.update("a", 10) == {}  # OXW-R12: equal is no regression and changes nothing
    with pytest.raises(WatermarkViolation) as v:
        p.update("b", 4)
    assert (v.value.operator_id, v.value.reason) == ("b", "regression")
    assert (p.output_watermark("b"), p.output_watermark("j"), p.global_watermark()) == (5, 5, 5)
    with pytest.raises(NotASource):
        p.update("j", 50)  # OXW-R11
    with pytest.raises(UnknownOperator):
        p.update("x", 50)


# ---- engine versus oracle -------------------------------------------------------


@pytest.mark.clauses(*(f"OXW-R{i}" for i in range(1, 21)))
def test_engine_agrees_with_the_oracle(engine_under_test: Any) -> None:
    """All generated traces in ONE engine.run call; a difference is shrunk and printed as Gherkin."""
    check_generated(engine_under_test, *DIFFERENTIAL)


# ---- the Spark operator's two stages (OXW-R19) ------------------------------------


@pytest.mark.clauses("OXW-R19")
def test_spark_state_is_versioned_and_bound_to_its_buckets_and_graph() -> None:
    """A checkpoint of another layout version, bucket count or source list is refused with
    both values named, never misread."""
    from spark_impl.watermark_propagation import LAYOUT_VERSION, BucketState, StreamState, validate_config

    cfg = validate_config({"nodes": ["a", "b", "j"], "edges": [["a", "j"], ["b", "j"]]})
    other = validate_config({"nodes": ["c"], "edges": []})
    rows = np.array([[1, 3, 40, 39, 1]], np.int64)
    bucket = BucketState(8, cfg.sources_digest, rows).to_tuple()
    assert BucketState.from_tuple(bucket, 8, cfg.sources_digest).to_tuple() == bucket
    stream = StreamState(8, cfg.sources, 2, np.array([5, 0], np.int64), np.array([True, False])).to_tuple()
    assert StreamState.from_tuple(stream, 8, cfg.sources).to_tuple() == stream
    newer = LAYOUT_VERSION + 1
    with pytest.raises(RuntimeError, match=f"version {newer}.*version {LAYOUT_VERSION} only"):
        BucketState.from_tuple((newer, *bucket[1:]), 8, cfg.sources_digest)
    with pytest.raises(RuntimeError, match=f"version {newer}.*version {LAYOUT_VERSION} only"):
        StreamState.from_tuple((newer, *stream[1:]), 8, cfg.sources)
    with pytest.raises(RuntimeError, match="buckets 8.*buckets 4 only"):
        BucketState.from_tuple(bucket, 4, cfg.sources_digest)
    with pytest.raises(RuntimeError, match="buckets 8.*buckets 16 only"):
        StreamState.from_tuple(stream, 16, cfg.sources)
    with pytest.raises(RuntimeError, match="another list of source nodes"):
        BucketState.from_tuple(bucket, 8, other.sources_digest)
    with pytest.raises(RuntimeError, match=r"written for the sources \['a', 'b'\].*now has \['c'\]"):
        StreamState.from_tuple(stream, 8, other.sources)


class _StoredValue:
    """One ValueState of Spark's store, as the processors use it."""

    def __init__(self) -> None:
        self.value: Any = None

    def get(self) -> Any:
        return self.value

    def update(self, value: Any) -> None:
        self.value = value


class _Handle:
    def __init__(self) -> None:
        self.values: dict[str, _StoredValue] = {}

    def getValueState(self, name: str, schema: str) -> _StoredValue:  # noqa: N802 - Spark's name
        return self.values.setdefault(name, _StoredValue())


def _two_stages_in_process(trace: Trace, placement: dict[str, int], buckets: int) -> Outputs:
    """The Spark operator's two processors on ``trace`` without Spark: ``placement`` puts each
    node's rows in a bucket (the hash's job), the routes play the second shuffle, and new
    processors every batch leave only the stored state between batches (a restart each time)."""
    from spark_impl import watermark_propagation as wp
    from spark_impl.scaleout import NULL_MASK

    cfg = wp.validate_config(trace.config)
    handles: dict[tuple[str, int], Any] = {}  # Any: a stand-in for Spark's handle
    out: Outputs = {t: [] for t in wp.TABLE_COLUMNS}
    for b, batch in enumerate(trace.batches):
        wide = wp.SourceBucketProcessor(cfg, {}, True, buckets)
        narrow = wp.GraphProcessor(cfg, {}, True, buckets)
        items = [*batch, None]  # None: the batch_end marker

        rows = pd.DataFrame({
            "wp_batch": np.full(len(items), b, np.int64),
            "wp_seq": np.arange(len(items), dtype=np.int64),
            "wp_kind": ["batch_end" if i is None else i.kind for i in items],
            "wp_node": [None if i is None else i.key for i in items],
            "wp_et": _numbers(items, "event_time"),
            "wp_et_null": [i is None or i.event_time is None for i in items],
            "wp_time": _numbers(items, "time"),
            "wp_time_null": [i is None or i.time is None for i in items],
        })  # fmt: skip
        home = np.array([0 if i is None or i.key is None else placement.get(i.key, 0) for i in items])
        first: list[pd.DataFrame] = []
        for bucket in np.unique(home).tolist():
            wide.init(handles.setdefault(("wide", bucket), _Handle()))
            part = rows[home == bucket].reset_index(drop=True)
            first += wide.handleInputRows(("t", bucket), iter([part]), None)
        routed = pd.concat(first, ignore_index=True)
        route = routed["kw_route"].to_numpy(np.int64)
        for r in np.unique(route).tolist():
            narrow.init(handles.setdefault(("narrow", r), _Handle()))
            for frame in narrow.handleInputRows(("t", r), iter([routed[route == r]]), None):
                for row in frame.to_dict("records"):
                    table = row["output"]
                    cols = TABLES["watermark_propagation"][table]
                    nulls = int(row[NULL_MASK])
                    out[table].append(tuple(
                        None if c in wp.LONG_COLS and nulls >> wp.LONG_COLS.index(c) & 1 else _plain(row[c])
                        for c in cols
                    ))  # fmt: skip
    return {t: sorted(rows, key=repr) for t, rows in out.items()}


def _numbers(items: list[Any], name: str) -> np.ndarray:
    """A long field of the items (None for the marker), null read as 0 as the projection does."""
    return np.array(
        [0 if i is None or getattr(i, name) is None else getattr(i, name) for i in items], np.int64
    )


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


@pytest.mark.spark_only  # the Spark operator's processors, run without Spark
@pytest.mark.clauses("OXW-R1", "OXW-R2", "OXW-R12", "OXW-R13", "OXW-R16", "OXW-R19")
@settings(max_examples=max(5, settings().max_examples // 5))  # each example runs ~10 processor calls
@given(
    st.one_of(
        watermark_propagation_traces(large_batch_rate=5),
        watermark_propagation_traces(near_bounds=True, large_batch_rate=5),
    ),
    st.integers(1, 4),
    st.data(),
)
def test_the_spark_stages_agree_with_the_oracle_wherever_the_sources_are_placed(
    trace: Trace, buckets: int, data: Any
) -> None:
    """The wide stage sees only its bucket's sources and the narrow stage only accepted updates:
    any placement of the sources over the buckets gives the oracle's output."""
    nodes = trace.config["nodes"]
    placement = {n: data.draw(st.integers(0, buckets - 1)) for n in nodes}
    expected = {t: sorted(rows, key=repr) for t, rows in run_trace(trace).items()}
    assert _two_stages_in_process(trace, placement, buckets) == expected


@pytest.mark.clauses("OXW-R13", "OXW-R15")
def test_spark_narrow_stage_memory_does_not_grow_with_updates_times_graph_size() -> None:
    """100k accepted updates over 32 sources and 49 nodes: one dense matrix of updates x (sources +
    nodes) would take 62 MiB; the narrow stage works on blocks of BLOCK_CELLS numbers."""
    import tracemalloc

    from spark_impl import watermark_propagation as wp
    from spark_impl.common import OutputRows

    sources = [f"s{i}" for i in range(32)]
    joins = [f"j{i}" for i in range(16)]
    edges = [[s, joins[i // 2]] for i, s in enumerate(sources)] + [[j, "sink"] for j in joins]
    cfg = wp.validate_config({"nodes": [*sources, *joins, "sink"], "edges": edges})
    updates = 100_000
    source = np.random.default_rng(1).integers(0, len(sources), updates)
    rows = pd.DataFrame({
        "s_final": np.r_[np.zeros(updates, np.int64), 1], "s_order": np.arange(updates + 1),
        "s_tie": 0, "s_pos": 0, "s_source": np.r_[source, 0], "s_value": np.arange(updates + 1) * 10,
        "s_violations": 0,
    })  # fmt: skip
    state = wp.StreamState(1, cfg.sources)
    tracemalloc.start()
    try:
        out = OutputRows("s", wp.OUTPUT_COLUMNS, wp.STRING_COLS)
        changes = 0
        for _ in wp.propagate_batch(state, rows, cfg, 0, True, out):
            changes += sum(n for n, _ in out.pieces)  # what the processor passes on per block
            out.pieces.clear()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert changes > updates // 4  # the joins and the sink move often: the blocks do real work
    assert peak < 16 * 2**20
    assert state.has_watermark.all() and state.watermark.max() == (updates - 1) * 10


# ---- Spark's own watermark over two sources ---------------------------------------

DELAY = 1000


def _native_batches() -> list[tuple[list[int], list[int]]]:
    """Source A from the start; B silent for two batches, then behind A, then ahead; negative
    watermarks early on (event times below the delay)."""
    rng = random.Random(6)
    a = [[200, 700], [3000, 2500], [6000], [9000, 8000], [], [12_000]]
    b = [[], [], [400], [4000, 3500], [20_000], [15_000]]
    return [(x + [rng.randrange(0, 200)], y) for x, y in zip(a, b, strict=True)]


@pytest.mark.clauses("OXW-R5", "OXW-R7", "OXW-R16")
def test_spark_global_watermark_is_the_lagged_aligned_minimum() -> None:
    """Spark's query watermark of micro-batch k is max(0, the oracle's aligned watermark after
    batch k - 1), and 0 in batch 0 (spec: "Spark's own watermark, compared")."""
    from spark_impl.session import get_spark
    from spark_impl.watermark_propagation import native_watermark_report

    batches = _native_batches()
    trace = Trace(
        "watermark_propagation",
        {
            "nodes": ["a", "b", "union"],
            "edges": [["a", "union"], ["b", "union"]],
            "max_out_of_order_ms": DELAY,
        },
        tuple((*[_event("a", t) for t in xs], *[_event("b", t) for t in ys]) for xs, ys in batches),
    )
    aligned = [row[1] for row in sorted(run_trace(trace)["progress"])]
    report = native_watermark_report(get_spark(), batches, DELAY)
    spark = [r["watermark"] for r in report if r["batch_id"] < len(batches)]
    assert [r["input_rows"] for r in report[: len(batches)]] == [len(x) + len(y) for x, y in batches]
    expected = [0] + [max(0, w) for w in aligned[:-1]]
    assert spark == expected
    # the relation is not vacuous: B's silence holds both at their floor, then both move
    assert aligned[:2] == [I64_MIN, I64_MIN] and expected[:3] == [0, 0, 0] and expected[-1] > 0


def _event(source: str, t: int) -> Any:
    from harness.traces import Item

    return Item("event", key=source, event_time=t)
