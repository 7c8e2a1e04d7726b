"""The Spark Structured Streaming implementation of the conformance areas.

Modules (one name per spec area, see DESIGN.md):

- ``session``: ``get_spark()``, the one shared SparkSession (classic local or
  Spark Connect when ``SPARK_REMOTE`` is set).
- ``trace_source``: the ``trace`` streaming data source, one trace batch per
  micro-batch.
- ``keyed_watermarks``: the F065 operator ``keyed_watermarks(df, ...)``.
- ``engine``: ``SparkEngine``, the harness engine running many traces in one
  streaming query.

Only the DataFrame API is used (no SparkContext, RDD or py4j), so everything
runs unchanged through Spark Connect and on a cluster.
"""

from __future__ import annotations

__all__ = ["engine", "keyed_watermarks", "session", "trace_source"]
