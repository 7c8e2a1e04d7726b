"""VELO event-time reorder buffer: Spark's built-ins cannot express it, so every case is declined.

The area releases buffered tuples in event-time order once the watermark passes them. Spark
has no reorder buffer: a streaming ``orderBy``/``sort`` is refused unless it follows an
aggregation in complete output mode (which re-emits the whole result every batch and keeps
nothing per tuple), and what a stateful operator emits in append mode comes in no order.
``tests/test_spark_native_watermarks.py`` shows the refusal (the AnalysisException).
"""

from __future__ import annotations

from typing import Any

from harness.engine import Unsupported
from harness.outputs import Output
from harness.traces import Trace

REASON = (
    "Spark has no event-time reorder buffer: sorting a streaming DataFrame is refused unless it is "
    "aggregated in complete output mode (AnalysisException), and append-mode output is not ordered"
)


def answer(spark: Any, trace: Trace, config: Any) -> Output | Unsupported:
    return Unsupported(REASON)
