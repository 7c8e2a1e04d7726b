"""The oxirs pipeline of spec/pipeline.md: the area oracles wired together, item by item.

Every decision is the operator's own oracle: the SLA coordinator (reference.sla_admission), the
generators and the propagator (reference.watermark_propagation), the late-data handler
(reference.late_data), the two joins (reference.window_joins) and the exactly-once aggregator
(reference.exactly_once_aggregation). This module only routes items between them (OXP-R5, R6)
and writes the pipeline's tables (OXP-R10).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.outputs import TABLES
from harness.pipeline_settings import JoinOf, read_settings
from harness.traces import Item, Trace
from reference import late_data, sla_admission, watermark_propagation, window_joins
from reference.exactly_once_aggregation import (
    ExactlyOnceAggregator,
    ExactlyOnceAggregatorConfig,
    InMemoryStateBackend,
    MessageId,
    aggregate_row,
)
from reference.exactly_once_aggregation import validate_config as aggregation_config
from reference.sla_admission import (
    LoadSheddingManager,
    SlaBackpressureCoordinator,
    StreamAdmissionController,
    invalid_metrics,
)
from reference.traces import Row, TraceClock, play

AGGREGATOR = "aggregator"
ACCEPTED_KINDS = ("event", "watermark", "clock", "load")  # OXP-R14
#: the counters of the progress table, between its batch and its watermark (OXP-R10)
PROGRESS = TABLES["pipeline"]["progress"][1:-1]


JoinSpec = JoinOf[dict[str, Any]]  # a join and the streams of its sides (OXP-R3)


@dataclass(frozen=True)
class PipelineConfig:
    admission: sla_admission.SlaAdmissionConfig
    streams: tuple[str, ...]
    watermarks: dict[str, Any]
    late: late_data.Policy
    joins: tuple[JoinSpec, ...]
    aggregation: ExactlyOnceAggregatorConfig


def _admission(settings: Mapping[str, Any]) -> tuple[sla_admission.SlaAdmissionConfig, Sequence[str]]:
    admission = sla_admission.config_from_trace(settings)
    return admission, tuple(admission.streams)


def _generator(settings: dict[str, Any]) -> dict[str, Any]:
    watermark_propagation.WatermarkGenerator(**settings)  # OXW-R4 checks the two settings
    return settings


def _join(settings: dict[str, Any]) -> dict[str, Any]:
    window_joins.validate_config(settings)
    return settings


def config_from_trace(config: Mapping[str, Any]) -> PipelineConfig:
    """OXP-R13: the trace's settings, each operator's checked by its own area, before any item."""
    read = read_settings(
        config, _admission, _generator, lambda late: late_data.config_from_trace(late).policy, _join,
        aggregation_config,
    )  # fmt: skip
    joins = read.joins
    return PipelineConfig(read.admission, read.streams, read.generator, read.late, joins, read.aggregation)


def item_error(item: Item, streams: Sequence[str], clock: int, stream_watermark: int | None) -> str | None:
    """OXP-R14: the reasons, in this order; ``stream_watermark`` is the watermark item's stream's."""
    if item.kind == "duplicate_seq":
        return "duplicate_seq"  # TR-15
    if item.kind not in ACCEPTED_KINDS:
        return "unsupported_item"
    if item.kind == "event":
        if item.stream is None:
            return "missing_stream"
        if item.event_time is None:
            return "missing_event_time"
        if item.priority is not None and not 0 <= item.priority <= 3:
            return "invalid_priority"
        if item.key is None:
            return "missing_key"
        if item.producer is None or item.partition is None or item.sequence is None:
            return "missing_id"
        return "invalid_sequence" if item.sequence < 0 else None
    if item.kind == "watermark":
        if item.stream is None:
            return "missing_stream"
        if item.stream not in streams:
            return "unknown_stream"
        if item.time is None:
            return "missing_time"
        regressed = stream_watermark is not None and item.time < stream_watermark
        return "watermark_regressed" if regressed else None  # OXP-R8
    if item.kind == "clock":
        if item.time is None:
            return "missing_time"
        return "clock_went_backwards" if item.time < clock else None  # TR-4
    return "invalid_load" if invalid_metrics(item.metrics) else None


class PipelineStream:
    """Plays a pipeline trace batch by batch: each item through the whole graph (OXP-R6); what
    another cut of the same items into batches may change: OXP-R12."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config_from_trace(config)
        self.controller = StreamAdmissionController()
        for name, stream_config in self.config.admission.streams.items():
            self.controller.register(name, stream_config)
        self.shedder = LoadSheddingManager(self.config.admission.shedder)
        shedder = self.shedder if self.config.admission.shedder else None
        self.coordinator = SlaBackpressureCoordinator(self.controller, shedder, self.config.admission.policy)
        self.clock = TraceClock()
        settings = self.config.watermarks
        self.generators = {
            s: watermark_propagation.WatermarkGenerator(**settings) for s in self.config.streams
        }
        consumers = [j.name for j in self.config.joins] + [AGGREGATOR]
        edges = [[s, j.name] for j in self.config.joins for s in (*j.left, *j.right)]
        edges += [[s, AGGREGATOR] for s in self.config.streams]  # OXP-R2
        self.propagator = watermark_propagation.WatermarkPropagator([*self.config.streams, *consumers], edges)
        self.late = late_data.LateDataHandler(self.config.late)
        self.joins = {j.name: window_joins.join_from_config(j.join) for j in self.config.joins}
        self.backend = InMemoryStateBackend()
        self.aggregator = ExactlyOnceAggregator(self.config.aggregation, self.backend)
        self.totals = dict.fromkeys(PROGRESS, 0)
        self.out: dict[str, list[Row]] = {t: [] for t in TABLES["pipeline"]}

    def run_batch(self, b: int, batch: Sequence[Item]) -> None:
        folded_keys: dict[str, None] = {}
        for seq, item in enumerate(batch):
            stream = item.stream
            stream_watermark = None if stream is None else self.propagator.emitted.get(stream)
            error = item_error(item, self.config.streams, self.clock.now, stream_watermark)
            if error is not None:
                self.out["errors"].append((b, seq, error))  # OXP-R14: reaches no operator
            elif item.kind == "clock":
                assert item.time is not None
                self.clock.now = item.time
            elif item.kind == "load":
                self.shedder.report(dict(item.metrics or ()))
            elif item.kind == "watermark":
                assert item.stream is not None and item.time is not None
                self._stream_watermark(b, seq, item.stream, item.time)
            elif self._event(b, seq, item):
                assert item.key is not None
                folded_keys.setdefault(item.key)
        for key in folded_keys:  # OXE-R18: the key's value at the end of the batch
            value = self.aggregator.get(key)
            assert value is not None
            self.out["aggregates"].append(aggregate_row(b, key, value))
        consumers = [self.propagator.emitted[n] for n in self.propagator.sinks]
        watermark = None if any(w is None for w in consumers) else min(w for w in consumers if w is not None)
        self.out["progress"].append((b, *(self.totals[c] for c in PROGRESS), watermark))

    def _event(self, b: int, seq: int, item: Item) -> bool:
        """OXP-R5, R6: one event through the graph; True when the aggregator folded it."""
        assert item.stream is not None and item.event_time is not None and item.key is not None
        priority = 1 if item.priority is None else item.priority
        decision = self.coordinator.decide(item.stream, item.event_time, self.clock.now, priority)
        counted = {"admit": "admitted", "reject": "rejected", "shed": "shed", "throttle": "throttled"}
        self.totals[counted[decision.decision]] += 1
        row = (b, seq, item.stream, item.key, item.event_time, decision.decision, decision.reason)
        if decision.decision != "admit":
            self.out["ingress"].append((*row, None, None, None))  # OXP-R5: goes no further
            return False
        watermark = self.propagator.emitted[item.stream]
        verdict = self.late.handle(item.event_time, watermark)  # OXP-R7: the stream's own watermark
        self.out["ingress"].append((*row, verdict.verdict, watermark, verdict.assigned_time))
        late_counts = {"dropped": "dropped_late", "side_output": "side_output", "reassigned": "reassigned"}
        if verdict.verdict in late_counts:
            self.totals[late_counts[verdict.verdict]] += 1
        folded = False
        if verdict.assigned_time is not None:  # OXP-R5: stays in the main stream
            self._consume(b, seq, item, verdict.assigned_time)
            folded = self._fold(b, seq, item)
        emitted = self.generators[item.stream].on_event(item.event_time)  # OXW-R1: late or not
        if emitted is not None:
            self._stream_watermark(b, seq, item.stream, emitted)
        return folded

    def _consume(self, b: int, seq: int, item: Item, event_time: int) -> None:
        """OXP-R3: each join the event's stream feeds takes it on its side."""
        assert item.stream is not None and item.key is not None
        for spec in self.config.joins:
            side = spec.side_of(item.stream)
            if side is None:
                continue
            join = self.joins[spec.name]
            event = window_joins.JoinEvent(item.key, event_time, item.value, b, seq)
            outcome = join.process_left(event) if side == "left" else join.process_right(event)
            if outcome.late:  # OXP-R7: only at the session join's boundary
                self.out["join_late"].append((b, seq, spec.name, side, item.key, event_time, join.watermark))
            self._pairs(b, seq, spec.name, outcome.pairs)

    def _fold(self, b: int, seq: int, item: Item) -> bool:
        """OXP-R9: the event as a message; True when folded."""
        assert item.producer is not None and item.partition is not None and item.sequence is not None
        assert item.key is not None
        message_id = MessageId(item.producer, item.partition, item.sequence)
        verdict, _ = self.aggregator.deliver(message_id, item.key, float(item.value))
        self.totals["duplicates" if verdict == "duplicate" else verdict] += 1
        self.out["messages"].append((b, seq, item.producer, item.partition, item.sequence, item.key, verdict))
        return verdict == "folded"

    def _stream_watermark(self, b: int, seq: int, stream: str, watermark: int) -> None:
        """OXP-R8: a stream's watermark rises to the highest it was given; the change propagates."""
        current = self.propagator.emitted[stream]
        if current is not None and watermark <= current:
            return
        for node, value in self.propagator.update(stream, watermark).items():  # OXW-R13
            self.out["watermarks"].append((b, seq, node, value))
            if node in self.joins:
                self._pairs(b, seq, node, self.joins[node].advance_watermark(value))  # OXJ-R2

    def _pairs(self, b: int, seq: int, join: str, pairs: Sequence[window_joins.JoinPair]) -> None:
        for pair in pairs:  # OXJ-R20's row with the join named after its batch and seq (OXP-R10)
            row = window_joins.pair_row(b, seq, pair)
            self.out["pairs"].append((*row[:2], join, *row[2:]))
        self.totals["pairs"] += len(pairs)

    def checkpoint(self) -> dict[str, Any]:
        """OXP-R11: every operator's state and the totals, in one snapshot."""
        self.aggregator.checkpoint()
        return copy.deepcopy(
            {
                "clock": self.clock.now,
                "streams": self.controller.streams,
                "metrics": self.shedder.metrics,
                "generators": self.generators,
                "watermarks": self.propagator.emitted,
                "joins": {name: join.checkpoint() for name, join in self.joins.items()},
                "backend": self.backend.copy(),
                "totals": self.totals,
            }
        )

    def restore(self, snapshot: dict[str, Any]) -> None:
        """A NEW pipeline reads the checkpoint back: a restart loses everything else (TR-5)."""
        snapshot = copy.deepcopy(snapshot)
        self.clock = TraceClock(snapshot["clock"])
        self.controller.streams = snapshot["streams"]
        self.shedder.metrics = snapshot["metrics"]
        self.generators = snapshot["generators"]
        self.propagator.emitted = snapshot["watermarks"]
        for name, join in self.joins.items():
            join.restore(snapshot["joins"][name])
        self.backend = snapshot["backend"].copy()
        self.aggregator = ExactlyOnceAggregator(self.config.aggregation, self.backend)
        self.aggregator.restore()
        self.totals = snapshot["totals"]


def run_trace(trace: Trace) -> dict[str, list[Row]]:
    """Plays a pipeline trace and returns its observable output tables; batch cuts: OXP-R12."""
    return play(trace, PipelineStream)


__all__ = ["PipelineConfig", "PipelineStream", "config_from_trace", "item_error", "run_trace"]
