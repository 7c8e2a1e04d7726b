"""The oxirs pipeline (spec/pipeline.md): Spark's built-ins cannot express it, so every case is declined.

The pipeline starts with SLA admission, for which Spark has no built-in (``spark_native.sla_admission``:
its per-trigger input caps defer input by count and never reject or shed a record), and it gives
every ingress stream and every operator a watermark of its own (OXP-R2, R8), where Spark keeps one
watermark per query. Composing ``withWatermark``, ``session_window`` and a stream-stream join behind
an admission this adapter computed would be the adapter, not Spark, deciding the first rule of the
area.
"""

from __future__ import annotations

from typing import Any

from harness.engine import Unsupported
from harness.outputs import Output
from harness.traces import Trace

REASON = (
    "the pipeline starts with SLA admission, which Spark has no built-in for (its per-trigger input "
    "caps only defer input by count), and gives every stream and operator its own watermark, where "
    "Spark keeps one per query"
)

def answer(spark: Any, trace: Trace, config: Any) -> Output | Unsupported:
    return Unsupported(REASON)
