"""The micro-batch's start instant (``spark_impl.common.micro_batch_start_millis``) and what it
costs each micro-batch.

An operator without a batch column stamps every row with the micro-batch's start, Spark's
``current_timestamp()``. Spark writes that instant into the code it generates for the stage
that reads it, so each micro-batch compiled the first stage again, spread labels and all (about
0.3 s a micro-batch, measured on keyed watermarks). Checked on a query shaped like an operator's
first stage (the start instant, a bucket, the spread labels), one input file per micro-batch,
after a first query that compiled what the stage needs:

- a query of four micro-batches compiles exactly as much as a query of one (nothing in classic
  Spark; Spark Connect compiles again for each query, never for each micro-batch);
- the same query with the instant read directly compiles at least three more times, so the
  count can convict;
- each micro-batch's rows carry one instant, a different one for each, taken while it ran;
- no module of spark_impl reads the clock any other way.
"""

from __future__ import annotations

import ast
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_impl.common import micro_batch_start_millis
from spark_impl.scaleout import spread_labels

BUCKETS = 32
SPARK_CLOCKS = ("current_timestamp", "now", "localtimestamp", "current_date")
SPARK_MODULES = ("F", "functions")
SQL_CLOCK = re.compile(rf"\b({'|'.join(SPARK_CLOCKS)})\s*\(")
ROOT = Path(__file__).resolve().parent.parent


def _compilations() -> int:
    """Code compilations so far in the driver's JVM (Spark compiles each stage's generated code
    there before its tasks run; a local Spark Connect server runs in this process's JVM too)."""
    from pyspark import SparkContext

    jvm = SparkContext._active_spark_context._jvm  # type: ignore[union-attr]
    return int(jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount())


def _run(spark: Any, tmp: Path, start: Any, files: int) -> tuple[int, Any, tuple[float, float]]:
    """One query over ``files`` new input files, one micro-batch each: the compilations it
    caused, the rows it wrote and its wall-clock span."""
    from pyspark.sql import functions as F

    source = tmp / "in"
    source.mkdir(parents=True)
    for file in range(files):
        (source / f"batch-{file}.json").write_text(
            "".join(
                json.dumps({"stream": f"s{s}", "seq": file * 100 + i}) + "\n"
                for s in range(3)
                for i in range(20)
            ),
            encoding="utf-8",
        )
    df = spark.readStream.schema("stream string, seq long").option("maxFilesPerTrigger", 1).json(str(source))
    bucket = F.pmod(F.xxhash64("seq"), F.lit(BUCKETS)).cast("int")
    stage = spread_labels(
        df.select("stream", "seq", start.alias("start"), bucket.alias("bucket")), "bucket", BUCKETS, "stream"
    )
    before, began = _compilations(), time.time()
    query = (
        stage.writeStream.format("parquet").option("checkpointLocation", str(tmp / "checkpoint"))
        .trigger(availableNow=True).start(str(tmp / "out"))
    )  # fmt: skip
    query.awaitTermination()
    return _compilations() - before, spark.read.parquet(str(tmp / "out")), (began, time.time())


def _compiled_one_and_four(
    tmp: Path, instant: Callable[[], Any]
) -> tuple[int, int, Any, tuple[float, float]]:
    """Compilations of a query of one micro-batch and of one of four, after a first query that
    compiled what a stage needs: four must cost what one costs (a local Spark Connect session
    compiles again for each query, never for each micro-batch)."""
    from spark_impl.session import get_spark

    spark = get_spark()
    start = instant()  # a column needs the session
    _run(spark, tmp / "warm", start, 1)
    one, _, _ = _run(spark, tmp / "one", start, 1)
    four, rows, span = _run(spark, tmp / "four", start, 4)
    return one, four, rows, span


def test_spark_later_micro_batches_reuse_the_compiled_code(tmp_path: Path) -> None:
    one, four, written, (began, ended) = _compiled_one_and_four(tmp_path, micro_batch_start_millis)
    assert four == one, (one, four)
    starts: dict[int, set[int]] = {}
    for r in written.collect():
        starts.setdefault(r.seq // 100, set()).add(r.start)
    assert sorted(starts) == list(range(4)) and all(len(s) == 1 for s in starts.values()), starts
    instants = [s.pop() for s in starts.values()]
    assert len(set(instants)) == 4  # one instant a micro-batch
    assert all(began * 1000 - 1 <= t <= ended * 1000 + 1 for t in instants), (instants, began, ended)


def test_spark_the_instant_read_directly_compiles_every_micro_batch(tmp_path: Path) -> None:
    """The planted regression, ``unix_millis(current_timestamp())`` in the stage: each further
    micro-batch compiles, so the count can convict."""
    from pyspark.sql import functions as F

    one, four, _, _ = _compiled_one_and_four(tmp_path, lambda: F.unix_millis(F.current_timestamp()))
    assert four >= one + 3, (one, four)


def _reads_of_the_instant(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, enclosing function) of each call of ``current_timestamp``/``now`` or SQL text that
    names them."""
    found = []
    for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        for node in ast.walk(func):
            if not isinstance(node, ast.Call):
                continue
            called = node.func
            # F.current_timestamp(), functions.now(); datetime.now() is not Spark's clock
            module = getattr(called, "value", None)
            on_functions = isinstance(called, ast.Attribute) and getattr(module, "id", "") in SPARK_MODULES
            spark_call = on_functions and getattr(called, "attr", "") in SPARK_CLOCKS
            sql = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if spark_call or any(SQL_CLOCK.search(text) for text in sql):
                found.append((node.lineno, func.name))
    return found


def test_no_operator_reads_the_current_timestamp_another_way() -> None:
    """Only ``micro_batch_start_millis`` reads the clock; the planted read proves the search."""
    found = {
        f"{path.relative_to(ROOT)}:{func}"
        for path in sorted((ROOT / "spark_impl").rglob("*.py"))
        for _, func in _reads_of_the_instant(ast.parse(path.read_text(encoding="utf-8")))
    }
    assert found == {"spark_impl/common.py:micro_batch_start_millis"}
    planted = "def stage(F):\n    return F.unix_millis(F.current_timestamp())\n"
    assert [f for _, f in _reads_of_the_instant(ast.parse(planted))] == ["stage"]
