"""SLA admission's columns and state values: the output columns, what crosses between the stages, and
the per-bucket, per-agreement and per-stream state with how they pack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spark_impl.checkpoints import decoding
from spark_impl.scaleout import NULL_MASK, check_layout
from spark_impl.sla_admission.settings import COUNTERS, DECISIONS, LAYOUT_VERSION, METRIC_NAMES

STRING_COLS = ("output", "stream_id", "stream", "decision", "reason")


OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "stream", "event_time", "now", "decision", "reason",
    "tokens_left", "lag", *COUNTERS, "tokens", "rejected", "load_score",
)  # fmt: skip


FLOAT_COLS = ("tokens_left", "tokens")  # nano-token longs until the last projection


LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)


OUTPUT_SCHEMA = ", ".join(
    f"`{c}` {'string' if c in STRING_COLS else 'double' if c in FLOAT_COLS else 'long'}"
    for c in OUTPUT_COLUMNS
)


PASS_SCHEMA = ", ".join(
    [f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS] + [f"`{NULL_MASK}` long"]
)


# A bucket's summary of one batch: decision count deltas, and the load score it saw last
# (``s_has_score``; ``s_score_order`` ranks the buckets' scores by arrival).
SUMMARY_COLS = (*(f"s_{d}" for d in DECISIONS), "s_score", "s_score_order", "s_has_score")


WIDE_SCHEMA = ", ".join([PASS_SCHEMA, "`kw_route` long"] + [f"`{c}` long" for c in SUMMARY_COLS])


BUCKET_SCHEMA = "layout_version int, buckets int, clock long, " + ", ".join(f"{m} long" for m in METRIC_NAMES)


SLA_KEY_SCHEMA = "stream string"


SLA_VALUE_SCHEMA = (
    "level long, last_refill long, has_last_refill boolean, jitter_reference long, "
    "has_jitter_reference boolean, arrivals long, " + ", ".join(f"{c} long" for c in COUNTERS)
)


STREAM_SCHEMA = "layout_version int, buckets int, totals binary, load_score long"


TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "decisions": (
        "stream_id", "batch", "seq", "stream", "event_time", "now", "decision", "reason", "tokens_left",
        "lag",
    ),
    "streams": ("stream_id", "batch", "stream", *COUNTERS, "tokens"),
    "progress": ("stream_id", "batch", "admitted", "rejected", "shed", "throttled", "load_score"),
    "errors": ("stream_id", "batch", "seq", "reason"),
}  # fmt: skip


# ---- state layouts (OXS-R18) ----------------------------------------------------------------


@dataclass
class BucketState:
    """A wide group's ValueState: the processing clock and the last reported metrics."""

    buckets: int
    clock: int = 0
    metrics: dict[str, int] = field(default_factory=lambda: dict.fromkeys(METRIC_NAMES, 0))

    def to_tuple(self) -> tuple[Any, ...]:
        return (LAYOUT_VERSION, self.buckets, self.clock, *(self.metrics[m] for m in METRIC_NAMES))

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout("sla_admission", value, LAYOUT_VERSION, buckets, "bucket")
        with decoding("sla_admission", "bucket"):
            metrics = {m: int(v) for m, v in zip(METRIC_NAMES, value[3:7], strict=True)}
            return cls(buckets, int(value[2]), metrics)


@dataclass
class SlaEntry:
    """One SLA stream's MapState value: its bucket, jitter reference, arrival counter, counters."""

    level: int
    last_refill: int | None = None
    jitter_reference: int | None = None
    arrivals: int = 0
    counters: list[int] = field(default_factory=lambda: [0] * len(COUNTERS))

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            self.level, self.last_refill or 0, self.last_refill is not None, self.jitter_reference or 0,
            self.jitter_reference is not None, self.arrivals, *self.counters,
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...]) -> SlaEntry:
        with decoding("sla_admission", "sla_streams"):
            counters = [int(v) for v in value[6:]]
            if len(counters) != len(COUNTERS):
                raise ValueError(f"{len(counters)} counters for {len(COUNTERS)}")
            return cls(
                int(value[0]), int(value[1]) if value[2] else None, int(value[3]) if value[4] else None,
                int(value[5]), counters,
            )  # fmt: skip


@dataclass
class StreamState:
    """The narrow stage's value per stream id: decision totals and the load score in effect."""

    buckets: int
    totals: np.ndarray = field(default_factory=lambda: np.zeros(len(DECISIONS), np.int64))
    load_score: int = 0  # OXS-R10: every metric is 0 until reported

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION,
            self.buckets,
            np.ascontiguousarray(self.totals, np.int64).tobytes(),
            self.load_score,
        )

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> StreamState:
        check_layout("sla_admission", value, LAYOUT_VERSION, buckets, "totals")
        with decoding("sla_admission", "totals"):
            totals = np.frombuffer(bytes(value[2]), np.int64).copy()
            if len(totals) != len(DECISIONS):
                raise ValueError(f"{len(totals)} totals for {len(DECISIONS)} decisions")
            return cls(buckets, totals, int(value[3]))
