"""OXW watermark generation, alignment and propagation: declined on Spark's built-ins.

What Spark has of it: each ``withWatermark`` input keeps its largest event time minus its delay
and the query's one watermark is the minimum over its inputs (``multipleWatermarkPolicy`` min),
computed between micro-batches (spec/watermark_propagation.md, "Spark's own watermark,
compared"). That is one value per micro-batch for the whole query. Every table of this area
reports more than that: per-event emissions of each source's generator (``generated``, with its
``advance_threshold``), explicit ``watermark`` items from sources, each operator's watermark
(``watermarks``) and the regressions it refuses (``violations``); Spark exposes none of them
(a probe in tests/test_spark_native_watermarks.py: one ``eventTime.watermark`` per progress
report, however many inputs). So every case is declined rather than answered with empty tables.
"""

from __future__ import annotations

from typing import Any

from harness.engine import Unsupported
from harness.outputs import Output
from harness.traces import Trace

REASON = (
    "Spark exposes one watermark per query and micro-batch (the min over its withWatermark inputs): "
    "no per-source generator emissions, source watermark items, per-operator watermarks or violations"
)


def answer(spark: Any, trace: Trace, config: Any) -> Output | Unsupported:
    return Unsupported(REASON)
