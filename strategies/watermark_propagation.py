"""Hypothesis strategies for watermark propagation traces: random DAGs and per-source update streams.

* ``dags``: a random acyclic graph. Nodes get a hidden rank and edges only go
  from a lower to a higher rank, so the graph is acyclic by construction; the
  node list is shuffled so that its order is not a topological one.
* ``watermark_propagation_traces``: a DAG, generator settings, and batches of
  per-source events and direct watermark reports. Each source advances from
  its own base with bounded disorder; reports fall back now and then, so
  regressions (violations) and equal repeats are common; a few items are
  malformed (a non-source, an unknown node, missing fields, another kind).
  Batches may be empty; half the traces of three batches or more restart
  after batch 1. Times stay
  in a bounded positive range (Spark compares them natively, TR-2) unless
  ``near_bounds`` asks for times at the i64 bounds.
* ``invalid_configs``: configurations every engine must refuse (TR-6),
  cycles included.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace
from strategies.common import LARGE_BATCH, LONG_TIE_RUN
from strategies.generator_coverage import batch_shape_cases

AREA = "watermark_propagation"
NAMES = ("src", "map", "filter", "join", "sink", "side", "agg", "out")


@st.composite
def dags(draw: st.DrawFn, max_nodes: int = 7) -> tuple[list[str], list[list[str]]]:
    n = draw(st.integers(0, max_nodes))
    ranked = [NAMES[i] for i in range(n)]
    density = draw(st.sampled_from((0.0, 0.25, 0.5, 0.8)))
    edges = [
        [ranked[i], ranked[j]] for i in range(n) for j in range(i + 1, n) if draw(st.floats(0, 1)) < density
    ]
    nodes = draw(st.permutations(ranked))
    return list(nodes), list(draw(st.permutations(edges)))


def sources_of(nodes: list[str], edges: list[list[str]]) -> list[str]:
    return [n for n in nodes if all(b != n for _, b in edges)]


@st.composite
def watermark_propagation_traces(
    draw: st.DrawFn,
    max_batches: int = 5,
    max_items: int = 10,
    invalid_config_rate: int = 0,
    near_bounds: bool = False,
    large_batch_rate: int = 0,
) -> Trace:
    """``large_batch_rate``: the percentage of traces with one batch of LARGE_BATCH or more
    events and a run of LONG_TIE_RUN or more equal event times."""
    if invalid_config_rate and draw(st.integers(0, invalid_config_rate - 1)) == 0:
        config = draw(invalid_configs())
        # a varied item keeps equal refused configs from collapsing when traces are deduplicated
        return Trace(AREA, config, ((Item("watermark", key="src", time=draw(st.integers(0, 10**6))),),))
    nodes, edges = draw(dags())
    grid = draw(st.sampled_from((1, 100, 1000)))
    config: dict[str, Any] = {"nodes": nodes, "edges": edges}
    if draw(st.booleans()):
        config["advance_threshold"] = draw(st.integers(1, 3))
    if draw(st.booleans()):
        config["max_out_of_order_ms"] = draw(st.sampled_from((0, 1, 2, 5))) * grid
    sources = sources_of(nodes, edges)
    others = [n for n in nodes if n not in sources]
    low, high = (I64_MIN, I64_MIN + 50 * grid) if near_bounds else (0, 10**7)
    base = {s: low + draw(st.integers(0, 20)) * grid for s in sources}

    def advance(s: str) -> int:
        base[s] = min(high, base[s] + draw(st.integers(0, 3)) * grid)
        return max(low, base[s] - draw(st.sampled_from((0, 0, 1, 3))) * grid)  # bounded disorder

    def large_batch() -> list[Item]:
        s = draw(st.sampled_from(sources))
        tie_time = advance(s)
        run_length = draw(st.integers(LONG_TIE_RUN, LONG_TIE_RUN + 4))
        items = [Item("event", key=s, event_time=tie_time)] * run_length
        while len(items) < LARGE_BATCH + draw(st.integers(0, 4)):
            other = draw(st.sampled_from(sources))
            items.append(Item("event", key=other, event_time=advance(other)))
        items += [Item("watermark", key=s, time=tie_time)] * draw(st.integers(0, 2))  # equal updates
        return list(draw(st.permutations(items)))

    n_batches = draw(st.integers(1, max_batches))
    wants_large = sources and draw(st.integers(0, 99)) < large_batch_rate
    large_at = draw(st.integers(0, n_batches - 1)) if wants_large else None
    batches = []
    for b in range(n_batches):
        if b == large_at:
            batches.append(large_batch())
            continue
        batch = []
        for _ in range(draw(st.integers(0, max_items))):
            roll = draw(st.integers(0, 99))
            if not sources or roll >= 92:
                batch.append(draw(malformed_items(sources, others)))
            elif roll < 50:
                s = draw(st.sampled_from(sources))
                batch.append(Item("event", key=s, event_time=advance(s)))
            else:
                s = draw(st.sampled_from(sources))
                batch.append(Item("watermark", key=s, time=advance(s)))
        batches.append(batch)
    # One restart position for every trace: each distinct position costs Spark a query restart.
    restarts = {1} if len(batches) > 2 and draw(st.booleans()) else set()
    return Trace(AREA, config, batches, frozenset(restarts))


def malformed_items(sources: list[str], others: list[str]) -> st.SearchStrategy[Item]:
    """OXW-R17: one item of every refused shape."""
    some_source = st.sampled_from(sources) if sources else st.just("ghost")
    options = [
        st.builds(lambda t: Item("watermark", key="ghost", time=t), st.integers(0, 1000)),
        st.builds(lambda t: Item("event", key=None, event_time=t), st.integers(0, 1000)),
        st.builds(lambda t: Item("clock", time=t), st.integers(0, 1000)),
        st.builds(lambda s: Item("event", key=s), some_source),
        st.builds(lambda s: Item("watermark", key=s), some_source),
    ]
    if others:
        options.append(st.builds(lambda n, t: Item("watermark", key=n, time=t), st.sampled_from(others),
                                 st.integers(0, 1000)))  # fmt: skip
    return st.one_of(options)


@st.composite
def invalid_configs(draw: st.DrawFn) -> dict[str, Any]:
    """TR-6: a cycle, a malformed graph or a bad generator setting."""
    nodes, edges = draw(dags(max_nodes=5).filter(lambda g: len(g[0]) >= 1))
    config: dict[str, Any] = {"nodes": nodes, "edges": edges}
    flaw = draw(st.sampled_from(("cycle", "self_loop", "threshold", "delay", "unknown", "edge", "node")))
    if flaw == "cycle" and edges:
        a, b = draw(st.sampled_from(edges))
        config["edges"] = [*edges, [b, a]]
    elif flaw in ("cycle", "self_loop"):
        n = draw(st.sampled_from(nodes))
        config["edges"] = [*edges, [n, n]]
    elif flaw == "threshold":
        config["advance_threshold"] = draw(st.sampled_from((0, -1, True, 1.5, I64_MAX + 1)))
    elif flaw == "delay":
        config["max_out_of_order_ms"] = draw(st.sampled_from((-1, I64_MIN, "5", None)))
    elif flaw == "unknown":
        config["bounded_delay"] = 10
    elif flaw == "edge":
        config["edges"] = [
            *edges,
            draw(st.sampled_from((["src", "nowhere"], ["src"], "src", [nodes[0]] * 3))),
        ]
    else:
        config["nodes"] = draw(st.sampled_from(([*nodes, nodes[0]], [*nodes, ""], [*nodes, 3], "src")))
    return config


# ---- the differential mix and the cases it must reach (spec/traces.md TR-13) ----------

DIFFERENTIAL = (
    (watermark_propagation_traces(invalid_config_rate=8, large_batch_rate=15), 0.88),
    (watermark_propagation_traces(near_bounds=True, large_batch_rate=15), 0.12),
)


CASES: dict[str, str] = {
    "regression": "a source update below its last watermark: a violation row (OXW-R12, R18)",
    "equal_update": "a source update equal to its last watermark: no regression, no change (OXW-R12, R3)",
    "silent_source_holds": "a batch ends with a silent source beside one that emitted (OXW-R7, R14, R16)",
    "emission_at_threshold": "a generator with advance_threshold >= 2 emits (OXW-R2)",
    "upstream_minimum_changes": "an operator of >= 2 upstreams re-emits as their minimum moves (OXW-R13)",
    "near_i64_bounds": "times at the lower i64 bound, saturating emissions (OXW-R2, TR-2)",
    "restart": "a restart point between batches (OXW-R19, TR-5)",
    "empty_batch": "an empty batch still has its progress row (OXW-R18, TR-5)",
    "large_batch": f">= {LARGE_BATCH} events in one batch (OXW-R1, R2: vectorised running counts and maxima)",
    "tied_event_times": "two events of one batch with the same event time (OXW-R1, R2)",
    "long_tie_run": f">= {LONG_TIE_RUN} events of one time in a batch of >= {LARGE_BATCH} (OXW-R1, R2)",
    "invalid_config": "a refused configuration (OXW-R4, R9, R10, R20, TR-6)",
    "error_rows": "a malformed item gives an error row (OXW-R11, R17, TR-7)",
}

RARE: dict[str, str] = {}


def cases_reached(trace: Trace, output: Any) -> set[str]:
    """The CASES one trace reaches, from the trace and the oracle's canonical output."""
    if isinstance(output, InvalidConfig):
        return {"invalid_config"}
    if not isinstance(output, dict):
        return set()
    reached = batch_shape_cases(trace, {(b, s) for b, s, _ in output["errors"]})
    nodes, edges = trace.config["nodes"], trace.config["edges"]
    sources = sources_of(nodes, edges)
    times = [t for b in trace.batches for i in b for t in (i.time, i.event_time) if t is not None]
    if any(t < I64_MIN + 10**9 for t in times):
        reached.add("near_i64_bounds")
    if output["violations"]:
        reached.add("regression")
    if output["errors"]:
        reached.add("error_rows")
    if trace.config.get("advance_threshold", 1) >= 2 and output["generated"]:
        reached.add("emission_at_threshold")
    upstream_count = {n: sum(1 for _, b in edges if b == n) for n in nodes}
    rows_per_node: dict[str, int] = {}
    for _, _, node, _ in output["watermarks"]:
        rows_per_node[node] = rows_per_node.get(node, 0) + 1
    if any(upstream_count[n] >= 2 and k >= 2 for n, k in rows_per_node.items()):
        reached.add("upstream_minimum_changes")
    # replay the accepted source updates (direct items and emissions) in arrival order
    refused = {(b, seq) for b, seq, _ in output["errors"]}
    updates = list(output["generated"]) + [
        (b, seq, item.key, item.time)
        for b, batch in enumerate(trace.batches)
        for seq, item in enumerate(batch)
        if item.kind == "watermark" and (b, seq) not in refused
    ]
    last: dict[str, int] = {}
    for b in range(len(trace.batches)):
        for _, _, key, wm in sorted(u for u in updates if u[0] == b):
            if key in last and wm == last[key]:
                reached.add("equal_update")
            last[key] = max(wm, last.get(key, wm))
        if 0 < len(last) < len(sources):  # the batch's progress row shows the held aligner
            reached.add("silent_source_holds")
    return reached


__all__ = [
    "AREA",
    "CASES",
    "DIFFERENTIAL",
    "RARE",
    "cases_reached",
    "dags",
    "invalid_configs",
    "malformed_items",
    "sources_of",
    "watermark_propagation_traces",
]
