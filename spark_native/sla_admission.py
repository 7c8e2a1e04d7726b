"""OXS SLA admission (token buckets, lag and jitter checks, load shedding): Spark's built-ins
cannot express it, so every case is declined.

Spark's only input limits are per-source caps on how much one micro-batch reads
(``maxFilesPerTrigger`` on file sources, ``maxOffsetsPerTrigger`` on Kafka,
``rowsPerSecond`` of the rate source): they defer input to later micro-batches by count and
never reject, shed or throttle a record by its event-time lag, jitter, rate or priority.
``tests/test_spark_native_watermarks.py`` shows a capped file source admitting every record,
however far behind its event time is.
"""

from __future__ import annotations

from typing import Any

from harness.engine import Unsupported
from harness.outputs import Output
from harness.traces import Trace

REASON = (
    "Spark has no admission control: its per-trigger input caps (maxFilesPerTrigger, "
    "maxOffsetsPerTrigger) only defer input by count and never reject, shed or throttle a record "
    "by event-time lag, jitter, rate or priority"
)


def answer(spark: Any, trace: Trace, config: Any) -> Output | Unsupported:
    return Unsupported(REASON)
