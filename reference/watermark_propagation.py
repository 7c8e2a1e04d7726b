"""Watermark generation, alignment and propagation (oxirs): the oracle of spec/watermark_propagation.md.

Deliberately simple: dictionaries and loops, one clause at a time. Every rule
names its clause id. Times are integer milliseconds; an operator that has
emitted nothing has the output ``None``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace, saturating_sub
from reference.traces import Row, play


class WatermarkViolation(Exception):
    """OXW-R12: an operator was offered a watermark below its last emitted one."""

    def __init__(self, operator_id: str, reason: str, watermark: int, last: int) -> None:
        self.operator_id = operator_id
        self.reason = reason
        self.watermark = watermark
        self.last = last
        super().__init__(f"{operator_id}: {reason}: watermark {watermark} is below the last emitted {last}")


class GraphCycle(InvalidConfig):
    """OXW-R10: the graph has a cycle; ``cycle`` lists it, first node repeated at the end."""

    def __init__(self, cycle: Sequence[str]) -> None:
        self.cycle = list(cycle)
        super().__init__(f"the operator graph has a cycle: {' -> '.join(self.cycle)}")


class UnknownOperator(KeyError):
    """OXW-R11: an update names a node the graph does not have."""


class NotASource(ValueError):
    """OXW-R11: an update names a node with upstreams."""


def _require_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= I64_MAX:
        raise InvalidConfig(f"{name} must be an integer from {minimum} to {I64_MAX}, got {value!r}")
    return value


class WatermarkGenerator:
    """OXW-R1..R4: one source's watermark from its events."""

    def __init__(self, max_out_of_order_ms: int = 0, advance_threshold: int = 1) -> None:
        self.max_out_of_order_ms = _require_int("max_out_of_order_ms", max_out_of_order_ms, 0)  # OXW-R4
        self.advance_threshold = _require_int("advance_threshold", advance_threshold, 1)  # OXW-R4
        self.events_seen = 0
        self.max_observed: int | None = None
        self.last_emitted: int | None = None

    def on_event(self, event_time: int) -> int | None:
        """Counts the event; returns the emitted watermark, or None when this event emits nothing."""
        self.events_seen += 1  # OXW-R1: every event counts, late or not
        if self.max_observed is None or event_time > self.max_observed:
            self.max_observed = event_time  # OXW-R3: the maximum never goes down
        if self.events_seen % self.advance_threshold != 0:
            return None  # OXW-R2: only every advance_threshold-th event emits
        self.last_emitted = saturating_sub(self.max_observed, self.max_out_of_order_ms)  # OXW-R2
        return self.last_emitted


class WatermarkAligner:
    """OXW-R5..R7: the minimum rule over registered sources."""

    def __init__(self) -> None:
        self.sources: dict[str, int | None] = {}

    def register_source(self, source_id: str) -> None:
        self.sources.setdefault(source_id, None)  # OXW-R5: registering again changes nothing

    def update(self, source_id: str, watermark: int) -> None:
        self.sources[source_id] = watermark  # OXW-R5: kept as given, registering an unknown source

    def global_watermark(self) -> int:
        if not self.sources:
            return I64_MIN  # OXW-R6
        # OXW-R7: a source without a watermark counts as the lower bound.
        return min(I64_MIN if w is None else w for w in self.sources.values())  # OXW-R5


class WatermarkPropagator:
    """OXW-R9..R16: the minimum rule across an acyclic operator graph."""

    def __init__(self, nodes: Sequence[str], edges: Iterable[Sequence[str]]) -> None:
        self.nodes, edge_list = _checked_graph(nodes, edges)  # OXW-R9
        self.upstreams: dict[str, list[str]] = {n: [] for n in self.nodes}
        self.downstreams: dict[str, list[str]] = {n: [] for n in self.nodes}
        for a, b in edge_list:
            self.upstreams[b].append(a)
            self.downstreams[a].append(b)
        self.order = self._topological_order()  # OXW-R10: raises GraphCycle
        self.sources = [n for n in self.nodes if not self.upstreams[n]]  # OXW-R9
        self.sinks = [n for n in self.nodes if not self.downstreams[n]]  # OXW-R9
        self.emitted: dict[str, int | None] = {n: None for n in self.nodes}

    def _topological_order(self) -> list[str]:
        """Depth-first search; a node met again on the current path closes a cycle (OXW-R10)."""
        done: set[str] = set()
        order: list[str] = []

        def visit(node: str, path: list[str]) -> None:
            if node in path:
                raise GraphCycle([*path[path.index(node) :], node])  # OXW-R10
            if node in done:
                return
            for nxt in self.downstreams[node]:
                visit(nxt, [*path, node])
            done.add(node)
            order.append(node)

        for root in self.nodes:
            visit(root, [])
        return order[::-1]

    def output_watermark(self, operator_id: str) -> int | None:
        return self.emitted[operator_id]

    def update(self, source_id: str, watermark: int) -> dict[str, int]:
        """A source's new watermark; returns every operator whose output changed, with its new output."""
        if source_id not in self.emitted:
            raise UnknownOperator(source_id)  # OXW-R11
        if self.upstreams[source_id]:
            raise NotASource(source_id)  # OXW-R11: outputs of other nodes follow OXW-R13
        last = self.emitted[source_id]
        if last is not None and watermark < last:
            raise WatermarkViolation(source_id, "regression", watermark, last)  # OXW-R12: nothing changes
        changed: dict[str, int] = {}
        if watermark != last:
            self.emitted[source_id] = watermark
            changed[source_id] = watermark
        for node in self.order:  # OXW-R13: synchronous, in topological order
            if not self.upstreams[node]:
                continue
            inputs = [self.emitted[u] for u in self.upstreams[node]]
            if any(w is None for w in inputs):
                continue  # OXW-R14: silent upstream, no output
            out = min(w for w in inputs if w is not None)  # OXW-R13
            if out != self.emitted[node]:
                self.emitted[node] = out
                changed[node] = out
        return changed

    def global_watermark(self) -> int:
        """OXW-R16: the aligner's rule over the sinks."""
        aligner = WatermarkAligner()
        for sink in self.sinks:
            aligner.register_source(sink)
            w = self.emitted[sink]
            if w is not None:
                aligner.update(sink, w)
        return aligner.global_watermark()


def _checked_graph(nodes: Any, edges: Any) -> tuple[list[str], list[tuple[str, str]]]:
    """OXW-R9: the graph's shape, refused with InvalidConfig naming the problem."""
    if not isinstance(nodes, (list, tuple)):
        raise InvalidConfig(f"nodes must be a list of operator ids, got {nodes!r}")
    if not isinstance(edges, (list, tuple)):
        raise InvalidConfig(f"edges must be a list of [upstream, downstream] pairs, got {edges!r}")
    seen: set[str] = set()
    for n in nodes:
        if not isinstance(n, str) or not n:
            raise InvalidConfig(f"nodes: an operator id must be a non-empty string, got {n!r}")
        if n in seen:
            raise InvalidConfig(f"nodes: operator {n!r} is listed twice")
        seen.add(n)
    pairs: list[tuple[str, str]] = []
    for e in edges:
        if not isinstance(e, (list, tuple)) or len(e) != 2:
            raise InvalidConfig(f"edges: an edge must be an [upstream, downstream] pair, got {e!r}")
        for end in e:
            if not isinstance(end, str) or end not in seen:
                raise InvalidConfig(f"edges: {e!r} names {end!r}, which is not a node")
        if (e[0], e[1]) in pairs:
            raise InvalidConfig(f"edges: {list(e)!r} is listed twice")
        pairs.append((e[0], e[1]))
    return list(nodes), pairs


# ---- the stream (OXW-R17..R20) ----------------------------------------------

CONFIG_KEYS = {"nodes", "edges", "advance_threshold", "max_out_of_order_ms"}
TABLE_NAMES = ("generated", "watermarks", "violations", "progress", "errors")


class WatermarkPropagationStream:
    """Plays a watermark_propagation trace item by item and collects its output tables; what another cut of
    the same items into batches may change: OXW-R21."""

    def __init__(self, config: dict[str, Any]) -> None:
        unknown = set(config) - CONFIG_KEYS
        if unknown:
            raise InvalidConfig(f"unknown watermark_propagation settings {sorted(unknown)}")  # OXW-R20
        for name in ("nodes", "edges"):
            if name not in config:
                raise InvalidConfig(f"watermark_propagation needs the setting {name!r}")  # OXW-R20
        self.threshold = _require_int("advance_threshold", config.get("advance_threshold", 1), 1)
        self.delay = _require_int("max_out_of_order_ms", config.get("max_out_of_order_ms", 0), 0)
        try:
            self.propagator = WatermarkPropagator(config["nodes"], config["edges"])
        except GraphCycle as e:
            raise InvalidConfig(str(e)) from None  # TR-6: a trace is refused with InvalidConfig itself
        # OXW-R1: one generator per source, same settings (OXW-R4).
        self.generators = {s: WatermarkGenerator(self.delay, self.threshold) for s in self.propagator.sources}
        self.violation_count = 0
        self.out: dict[str, list[Row]] = {t: [] for t in TABLE_NAMES}

    def run_batch(self, b: int, batch: Sequence[Item]) -> None:
        for seq, item in enumerate(batch):
            error = self._item_error(item)
            if error is not None:
                self.out["errors"].append((b, seq, error))  # OXW-R17: nothing changes
                continue
            assert item.key is not None
            if item.kind == "event":
                assert item.event_time is not None
                emitted = self.generators[item.key].on_event(item.event_time)  # OXW-R1, R2
                if emitted is None:
                    continue
                self.out["generated"].append((b, seq, item.key, emitted))  # OXW-R18, repeats too (R3)
                self._offer(b, seq, item.key, emitted)  # OXW-R11
            else:
                assert item.time is not None
                self._offer(b, seq, item.key, item.time)  # OXW-R11
        aligner = WatermarkAligner()  # OXW-R8: the graph's sources are the registered ones
        for s in self.propagator.sources:
            aligner.register_source(s)
            w = self.propagator.output_watermark(s)
            if w is not None:
                aligner.update(s, w)
        self.out["progress"].append(
            (b, aligner.global_watermark(), self.propagator.global_watermark(), self.violation_count)
        )  # OXW-R18: one row per batch

    def _offer(self, b: int, seq: int, source: str, watermark: int) -> None:
        try:
            changed = self.propagator.update(source, watermark)
        except WatermarkViolation as v:
            self.violation_count += 1
            self.out["violations"].append((b, seq, v.operator_id, v.watermark, v.reason))  # OXW-R12
            return
        for node, w in changed.items():
            self.out["watermarks"].append((b, seq, node, w))  # OXW-R18

    def _item_error(self, item: Item) -> str | None:
        """OXW-R17: the checks in their order; the first failing one names the reason."""
        if item.kind == "duplicate_seq":
            return "duplicate_seq"  # TR-15
        if item.kind not in ("event", "watermark"):
            return "unsupported_item"
        if item.key is None:
            return "missing_key"
        if item.key not in self.propagator.upstreams:
            return "unknown_operator"
        if self.propagator.upstreams[item.key]:
            return "not_a_source"
        if item.kind == "event" and item.event_time is None:
            return "missing_event_time"
        if item.kind == "watermark" and item.time is None:
            return "missing_time"
        return None

    def checkpoint(self) -> dict[str, Any]:
        """OXW-R19: everything that crosses a restart."""
        state = {"generators": self.generators, "emitted": self.propagator.emitted}
        return copy.deepcopy({**state, "violations": self.violation_count})

    def restore(self, snapshot: dict[str, Any]) -> None:
        snapshot = copy.deepcopy(snapshot)
        self.generators = snapshot["generators"]
        self.propagator.emitted = snapshot["emitted"]
        self.violation_count = snapshot["violations"]


def run_trace(trace: Trace) -> dict[str, list[Row]]:
    """Plays a watermark_propagation trace and returns its observable output tables."""
    return play(trace, WatermarkPropagationStream)


__all__ = [
    "GraphCycle",
    "NotASource",
    "UnknownOperator",
    "WatermarkAligner",
    "WatermarkGenerator",
    "WatermarkPropagationStream",
    "WatermarkPropagator",
    "WatermarkViolation",
    "run_trace",
]
