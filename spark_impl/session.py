"""One shared SparkSession for the Spark implementation.

``get_spark()`` returns the same session on every call:

- ``SPARK_REMOTE`` set (``local[2]``, ``sc://host:15002``): a Spark Connect
  session (``SparkSession.builder.remote``). Everything in ``spark_impl``
  uses the DataFrame API only, so it runs there unchanged.
- otherwise a classic ``local[2]`` session (``SPARK_MASTER`` overrides the
  master).

Settings (both modes): the RocksDB state store provider (required by
``transformWithStateInPandas``), ``spark.sql.shuffle.partitions`` from
``SPARK_SHUFFLE_PARTITIONS`` (default 2) or the ``shuffle_partitions``
argument, the UI and console progress bar off, and
``spark.sql.execution.arrow.maxRecordsPerBatch`` from
``SPARK_ARROW_MAX_RECORDS_PER_BATCH`` when set (the test environments set it
to 2, so every group reaches an operator as many Arrow chunks; Spark's default
is 10,000). Workers run this
interpreter: ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` are set to
``sys.executable`` before the session starts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from typing import Any

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

_lock = threading.Lock()
_session: Any = None


JAVA_MISSING = "Spark needs Java 17 or newer: install a JDK and put `java` on PATH or set JAVA_HOME"


def _java_binary() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.path.exists(os.path.join(java_home, "bin", "java")):
        return os.path.join(java_home, "bin", "java")
    return shutil.which("java")


def _require_java() -> None:
    if _java_binary() is None:
        raise RuntimeError(JAVA_MISSING)


def java_problem() -> str | None:
    """One line saying why Spark cannot start here, or None when Java 17+ is found."""
    java = _java_binary()
    if java is None:
        return JAVA_MISSING
    probe = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    found = re.search(r'version "(\d+)', probe.stderr + probe.stdout)
    if found is None or int(found.group(1)) < 17:
        seen = found.group(1) if found else "unknown"
        return f"Spark needs Java 17 or newer, but {java} is version {seen}"
    return None


def _is_local_remote(remote: str) -> bool:
    return remote.startswith("local")


def get_spark(shuffle_partitions: int | None = None) -> Any:
    """The shared SparkSession (created on first call)."""
    global _session
    with _lock:
        if _session is not None and not _is_stopped(_session):
            return _session
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        partitions = shuffle_partitions or int(os.environ.get("SPARK_SHUFFLE_PARTITIONS", "2"))
        from pyspark.sql import SparkSession

        remote = os.environ.get("SPARK_REMOTE")
        if remote:
            if _is_local_remote(remote):
                _require_java()  # a local Connect server is a JVM on this machine
            builder = SparkSession.builder.remote(remote)
        else:
            _require_java()
            builder = SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
        builder = (
            builder.appName("eventtime-conformance")
            .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
            .config("spark.sql.shuffle.partitions", str(partitions))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
        )
        import warnings

        with warnings.catch_warnings():
            # Through Connect the static settings (UI) go to a local server at start; for a
            # remote server they cannot be set from the client, which only warns.
            warnings.filterwarnings("ignore", message="Failed to set spark.ui", category=UserWarning)
            spark = builder.getOrCreate()
        # Runtime settings, also applied when getOrCreate returned an existing session.
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
        chunk = os.environ.get("SPARK_ARROW_MAX_RECORDS_PER_BATCH", "").strip()
        if chunk:
            if not chunk.isdigit() or int(chunk) < 1:
                raise ValueError(f"SPARK_ARROW_MAX_RECORDS_PER_BATCH={chunk!r}: give a whole number >= 1")
            spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", chunk)
        from spark_impl.trace_source import register

        register(spark)
        _session = spark
        return spark


def _is_stopped(spark: Any) -> bool:
    try:
        return bool(getattr(spark, "is_stopped", False))
    except Exception:  # pragma: no cover - defensive
        return True


def stop_spark() -> None:
    """Stops the shared session (tests call it at the end of a run)."""
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None


if __name__ == "__main__":
    # `python -m spark_impl.session --check-java`: tox runs it before any suite.
    problem = java_problem()
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(1)
