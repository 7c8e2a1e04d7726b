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
``SPARK_ARROW_MAX_RECORDS_PER_BATCH`` when set (Spark's default is 10,000; the
suites run a selection of traces again at chunks of one row through
``query_settings``, properties/test_layouts.py). Workers run this
interpreter: ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` are set to
``sys.executable`` before the session starts.

A session the user builds: ``configure(SparkSession.builder)`` adds the two
settings the operators need, and every operator calls ``check_session`` when it
is applied, so a session without them fails at once with one line saying what to
set, not with a Java stack trace when the query starts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
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


_settings_lock = threading.Lock()


@contextlib.contextmanager
def settings_applied(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` on ``spark``'s SQL conf for the ``with`` block, the old values back after it."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextlib.contextmanager
def query_settings(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """Starts the queries of the ``with`` block with ``settings`` (``settings_applied``). A
    streaming query runs on a copy of its session taken when it starts, so the settings stay
    with the query whatever the session holds later; the lock keeps two such blocks from mixing
    their settings (TR-18: a layout per query)."""
    if not settings:
        yield
        return
    with _settings_lock, settings_applied(spark, settings):
        yield


#: the settings of a session that decide its answers or its speed, shown with an engine's run
PROVENANCE_SETTINGS = (
    "spark.master",
    "spark.sql.shuffle.partitions",
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.execution.arrow.maxRecordsPerBatch",
    "spark.sql.session.timeZone",
)


def session_provenance(spark: Any) -> dict[str, str]:
    """What ran: the versions of Spark, Java and Python and the session's settings that matter."""
    out = {"pyspark": spark.version, "python": sys.version.split()[0]}
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        out["spark connect"] = remote
    else:  # classic: the driver's JVM answers
        out["java"] = spark.sparkContext._jvm.java.lang.System.getProperty("java.version")
    for key in PROVENANCE_SETTINGS:
        try:
            out[key] = str(spark.conf.get(key))  # its default when nobody set it
        except Exception:  # noqa: BLE001 - a setting this Spark does not know, or Connect keeps to itself
            continue
    return out


# ---- a session the user builds -----------------------------------------------------------------


class SessionNotReady(RuntimeError):
    """The session lacks a setting the operators need; the message says which and how."""


def configure(builder: Any) -> Any:
    """``builder`` with what the operators need: the RocksDB state store provider, and (classic
    Spark) Python workers running this interpreter, which has pandas and pyarrow::

        spark = configure(SparkSession.builder).getOrCreate()
    """
    builder = builder.config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    if "spark.remote" not in getattr(builder, "_options", {}) and not os.environ.get("SPARK_REMOTE"):
        builder = builder.config("spark.pyspark.python", sys.executable)
        # transformWithState's driver-side runner starts the context's pythonExec, which pyspark
        # reads from PYSPARK_PYTHON when a context starts (else `python3` from PATH), not the setting
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return builder


_checked_interpreters: dict[tuple[str, str], str | None] = {}


def _interpreter_problem(python: str, modules: str) -> str | None:
    """Why ``python`` cannot import ``modules`` (None when it can); probed once per process."""
    if (python, modules) not in _checked_interpreters:
        probe = subprocess.run(
            [python, "-c", f"import {modules}"], capture_output=True, text=True, check=False, timeout=120
        ) if shutil.which(python) or os.path.exists(python) else None  # fmt: skip
        if probe is None:
            _checked_interpreters[(python, modules)] = "it is not found"
        elif probe.returncode != 0:
            _checked_interpreters[(python, modules)] = (probe.stderr.strip().splitlines() or ["it fails"])[-1]
        else:
            _checked_interpreters[(python, modules)] = None
    return _checked_interpreters[(python, modules)]


def check_session(spark: Any, operator: str) -> None:
    """Raises SessionNotReady, saying what to set, when ``spark`` cannot run ``operator``: the
    state store provider is not RocksDB, or (classic Spark, local master) the Python workers'
    interpreter cannot import pandas and pyarrow, or the interpreter of Spark's driver-side
    runner of transformWithState cannot import them and this project."""
    how = "spark_impl.session.configure(SparkSession.builder) builds a session with it"
    provider = spark.conf.get("spark.sql.streaming.stateStore.providerClass", None)
    if provider != ROCKSDB_PROVIDER:
        raise SessionNotReady(
            f"{operator} keeps its state through transformWithStateInPandas, which needs the RocksDB "
            f"state store: set spark.sql.streaming.stateStore.providerClass={ROCKSDB_PROVIDER} "
            f"before starting the query (it is {provider!r}); {how}"
        )
    if is_connect(spark):
        return  # the workers belong to the server
    context = spark.sparkContext
    runner = getattr(context, "pythonExec", None) or "python3"
    problem = _interpreter_problem(runner, "pandas, pyarrow, spark_impl")
    if problem:
        raise SessionNotReady(
            f"{operator} has Spark plan its state on the driver by starting {runner!r} (the "
            f"interpreter PYSPARK_PYTHON named when the session started, else python3 on PATH), and "
            f"there: {problem}. Set PYSPARK_PYTHON={sys.executable} before the session starts; {how}"
        )
    if not str(context.master).startswith("local"):
        return  # the executors' interpreters are not visible from here
    python = (
        context.getConf().get("spark.pyspark.python", None) or os.environ.get("PYSPARK_PYTHON") or "python3"
    )
    problem = _interpreter_problem(python, "pandas, pyarrow")
    if problem:
        raise SessionNotReady(
            f"{operator} runs pandas code in Spark's Python workers, which start {python!r}, and "
            f"there: {problem}. Set spark.pyspark.python (or PYSPARK_PYTHON) to {sys.executable!r} "
            f"before the session starts; {how}"
        )


# Spark's state server logs this at WARN each time a new group reads its empty ValueState, which
# the operators do on purpose (one call, no exists()); a user's console would fill with it
STATE_SERVER_LOGGER = "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer"


def prepare_session(spark: Any, operator: str) -> None:
    """``check_session``, then (classic Spark) the state server's per-group WARN lines about an
    empty ValueState silenced in this JVM, which in local mode also hosts the executors; its
    errors still show. A cluster's executors log to their own files."""
    check_session(spark, operator)
    if not is_connect(spark):
        jvm = spark.sparkContext._jvm
        log4j = jvm.org.apache.logging.log4j
        log4j.core.config.Configurator.setLevel(STATE_SERVER_LOGGER, log4j.Level.ERROR)


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (its code runs in the server's processes)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


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
