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

from harness.traces import I64_MAX, I64_MIN, Item, Trace

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
) -> Trace:
    if invalid_config_rate and draw(st.integers(0, invalid_config_rate - 1)) == 0:
        config = draw(invalid_configs())
        return Trace(AREA, config, ((Item("watermark", key="src", time=1),),))
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

    batches = []
    for _ in range(draw(st.integers(1, max_batches))):
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


__all__ = ["AREA", "dags", "invalid_configs", "malformed_items", "sources_of", "watermark_propagation_traces"]
