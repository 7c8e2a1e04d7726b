"""``--engine spark-native``: each area's traces answered by Spark's own built-in operators.

Where Spark has a built-in for an area (``withWatermark`` and its drop of late rows,
``session_window``, stream-stream joins, ``dropDuplicatesWithinWatermark``), the area's module
``spark_native.<area>`` builds one query of it per trace and maps what the query writes and
reports to the area's tables; where it has none, the module declines every case with the
reason (``harness.engine.Unsupported``), which a probe in its test shows. Its expectation
file, ``expectations/spark-native.toml``, states each deviation by clause.

The configuration is checked by the area's rules (spec/<area>.md, the checks ``spark_impl``
shares) before Spark sees it: that check is the adapter's job, translating the spec's settings
into Spark's, not Spark's.

Cost: Spark's watermark is one per query, so a trace is a query of its own (about 1 to 3 s
for a short trace) where ``spark_impl`` runs a whole area's traces as one query.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harness.engine import Unsupported
from harness.outputs import TABLES, Output
from harness.traces import InvalidConfig, Trace

#: queries at once: on 2 cores one plans or restarts while the other computes
CONCURRENT_QUERIES = 2
#: progress reports a query keeps (Spark's default, 100, is fewer than a long trace's batches)
PROGRESS_KEPT = 10_000


def area_module(area: str) -> Any:
    """``spark_native.<area>``: ``answer(spark, trace, config) -> Output | Unsupported``, where
    ``config`` is what ``spark_impl.<area>.validate_config`` made of the trace's settings."""
    return importlib.import_module(f"spark_native.{area}")


class SparkNativeEngine:
    name = "spark-native"
    areas = frozenset(TABLES)

    def __init__(self, spark: Any = None, concurrent_queries: int = CONCURRENT_QUERIES) -> None:
        self._spark = spark
        self.concurrent_queries = concurrent_queries

    @property
    def description(self) -> str:
        return f"Spark {self.spark.version}, built-in operators, one query per trace"

    @property
    def provenance(self) -> dict[str, str]:
        """Versions and settings of the run, for the reports."""
        from spark_impl.session import session_provenance

        return {**session_provenance(self.spark), "engine": "Spark's built-in operators, one query per trace",
                "concurrent queries": str(self.concurrent_queries)}  # fmt: skip

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from spark_impl.session import get_spark

            self._spark = get_spark()
        return self._spark

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]:
        spark = self.spark  # the session starts here, not in a pool thread
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(PROGRESS_KEPT))
        with ThreadPoolExecutor(
            max_workers=self.concurrent_queries, thread_name_prefix="spark-native"
        ) as pool:
            return list(pool.map(lambda t: self.answer(spark, t), traces))

    def answer(self, spark: Any, trace: Trace) -> Output | Exception:
        module = area_module(trace.area)
        # the spec's checks, shared with spark_impl; an area without a Spark operator brings its own
        own = hasattr(module, "validate_config")
        rules = module if own else importlib.import_module(f"spark_impl.{trace.area}")
        try:
            config = rules.validate_config(trace.config)
        except InvalidConfig as error:
            return error
        answer: Output | Unsupported = module.answer(spark, trace, config)
        return answer
