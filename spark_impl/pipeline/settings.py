"""The pipeline's settings: the operator name, the accepted item kinds, the progress counters, the
engine's bucket count, a pipeline's configuration and its validation, and the state layout version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.outputs import TABLES
from harness.pipeline_settings import JoinOf, read_settings
from spark_impl import exactly_once_aggregation as eoa
from spark_impl import late_data, sla_admission, window_joins
from spark_impl.common import require_int

OPERATOR = "pipeline"


LAYOUT_VERSION = 2  # its operators' (SLA admission, window joins, exactly-once aggregation), below


ACCEPTED_KINDS = ("event", "watermark", "clock", "load")  # OXP-R14


AGGREGATOR = "aggregator"


PROGRESS = TABLES[OPERATOR]["progress"][1:-1]  # the counters between batch and watermark


INGRESS_COUNTERS = PROGRESS[:7]  # admitted .. reassigned: the ingress stage's


ENGINE_BUCKETS = 3


# ---- configuration (OXP-R13) -------------------------------------------------------------------


JoinSpec = JoinOf[window_joins.StreamConfig]  # a join and the streams of its sides (OXP-R3)


@dataclass(frozen=True)
class PipelineConfig:
    admission: sla_admission.SlaConfig
    streams: tuple[str, ...]
    advance_threshold: int
    max_out_of_order_ms: int
    policy: str
    max_lateness: int
    joins: tuple[JoinSpec, ...]
    aggregation: eoa.StreamConfig


def _admission(settings: Mapping[str, Any]) -> tuple[sla_admission.SlaConfig, Sequence[str]]:
    admission = sla_admission.validate_config(settings)
    return admission, tuple(admission.streams)


def _generator(settings: dict[str, Any]) -> tuple[int, int]:
    """OXW-R4: (advance_threshold, max_out_of_order_ms)."""
    threshold = require_int("advance_threshold", settings.get("advance_threshold", 1), 1)
    return threshold, require_int("max_out_of_order_ms", settings.get("max_out_of_order_ms", 0), 0)


def validate_config(config: Mapping[str, Any]) -> PipelineConfig:
    """OXP-R13: each operator's settings checked by that operator's Spark validation."""
    read = read_settings(
        config, _admission, _generator, late_data.validate_config, window_joins.validate_config,
        eoa.validate_config,
    )  # fmt: skip
    (threshold, delay), policy = read.generator, read.late
    return PipelineConfig(
        read.admission,
        read.streams,
        threshold,
        delay,
        policy.policy,
        policy.max_lateness,
        read.joins,
        read.aggregation,
    )
