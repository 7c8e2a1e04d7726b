"""The Spark Structured Streaming implementation of the conformance areas.

Modules (one per spec area, named like the area's spec/<area>.md and reference/<area>.py):

- ``session``: ``get_spark()``, the one shared SparkSession (classic local or
  Spark Connect when ``SPARK_REMOTE`` is set).
- ``trace_source``: the ``trace`` streaming data source, one trace batch per
  micro-batch.
- ``keyed_watermarks``: the F065 operator ``keyed_watermarks(df, ...)``.
- ``partitioned_watermarks``: the F064 operator ``partitioned_watermarks(df, ...)``
  and ``native_watermark_report``, Spark's own watermark on the same rows.
- ``eventtime_buffer``: the veloFlux reorder stage ``eventtime_buffer(df, ...)``.
- ``session_windows``: F017E session windows ``session_windows(df, ...)`` and
  ``native_session_report``, Spark's own ``session_window`` on the same events.
- ``watermark_propagation``: oxirs generation, alignment and propagation
  ``watermark_propagation(df, ...)`` and ``native_watermark_report`` (two sources).
- ``late_data``: oxirs late-data routing ``late_data(df, ...)``.
- ``sla_admission``: oxirs SLA admission with load shedding ``sla_admission(df, ...)``.
- ``exactly_once_aggregation``: oxirs exactly-once aggregation with de-duplication by
  message id ``exactly_once_aggregation(df, ...)``.
- ``window_joins``: oxirs window joins (tumbling x tumbling, tumbling x sliding, session x
  session) ``window_joins(left_df, right_df, ...)`` and ``window_join_rows(df, ...)``.
- ``load_signal``: a real load score for ``sla_admission``'s ``load_col``:
  ``ProgressLoadSignal`` (a listener publishing the score of each progress of a
  query) and ``with_load_score(df, signal)``.
- ``scaleout``: the shared two-stage shape (a wide stage per key bucket, a narrow
  stage per stream reading summaries) of operators that grow with the cluster
  (docs/architecture.md).
- ``common``: saturating arithmetic, setting checks, the per-stream processor,
  output assembly and the native watermark runner shared by the operators.
- ``engine``: ``SparkEngine``, the harness engine running many traces in one
  streaming query.

Only the DataFrame API is used (no SparkContext, RDD or py4j), so everything
runs unchanged through Spark Connect and on a cluster.
"""

from __future__ import annotations

__all__ = [
    "common",
    "engine",
    "eventtime_buffer",
    "exactly_once_aggregation",
    "keyed_watermarks",
    "late_data",
    "load_signal",
    "partitioned_watermarks",
    "scaleout",
    "session",
    "session_windows",
    "sla_admission",
    "trace_source",
    "watermark_propagation",
    "window_joins",
]
