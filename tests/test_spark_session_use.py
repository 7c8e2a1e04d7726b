"""The Spark operators in a session the user builds, as README.md shows them.

Inside pytest ``getOrCreate()`` would return the suite's configured session, so the
README's pipeline runs in a fresh Python process: first on a plain
``SparkSession.builder.getOrCreate()``, where the operator must refuse at once with one
line saying what to set (not a Java stack trace when the query starts), then on the same
builder plus the one documented step, ``spark_impl.session.configure``, where the snippet
runs as written and ``write_tables`` writes every table from one query.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- the Spark pipeline snippet: tests/test_spark_session_use.py runs it -->"


def readme_snippet() -> str:
    """The fenced Python block that follows MARKER in README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert MARKER in text, f"README.md lost the marked Spark snippet ({MARKER})"
    found = re.search(r"```python\n(.*?)```", text[text.index(MARKER) :], re.DOTALL)
    assert found, "no ```python block after the marker"
    return found.group(1)


# Run by a fresh interpreter: the events the snippet reads, the plain session first, then the
# snippet itself; prints one JSON line for the test to read.
DRIVER = r"""
import json, os, sys, tempfile
from pyspark.sql import SparkSession
from spark_impl.session import SessionNotReady

work = sys.argv[1]
events_dir = os.path.join(work, "events")
plain = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
# two files, read one per micro-batch: (a, 9000) comes after a's 20000 has moved a's watermark
for rows in ([("a", 10_000), ("b", 12_000), ("a", 20_000)], [("a", 9_000), ("b", 30_000)]):
    plain.createDataFrame(rows, "tenant string, ts long").coalesce(1).write.mode("append").parquet(events_dir)
refusal = None
try:
    from spark_impl.keyed_watermarks import keyed_watermarks

    stream = plain.readStream.schema("tenant string, ts long").parquet(events_dir)
    keyed_watermarks(stream, key_col="tenant", event_time_col="ts", bounded_delay_ms=5_000)
except SessionNotReady as e:
    refusal = str(e)
plain.stop()

out_dir, checkpoint_dir = os.path.join(work, "out"), os.path.join(work, "checkpoint")
SNIPPET
query.awaitTermination()
spark = SparkSession.getActiveSession()
events = spark.read.parquet(os.path.join(out_dir, "events")).collect()
progress = spark.read.parquet(os.path.join(out_dir, "progress")).collect()
print(json.dumps({
    "refusal": refusal,
    "events": sorted([r["key"], r["event_time"], r["verdict"]] for r in events),
    "progress": len(progress),
}))
"""


@pytest.mark.clauses("F065-R3", "F065-R22")
def test_spark_readme_pipeline_runs_on_a_plain_session_plus_the_documented_step(tmp_path: Path) -> None:
    script = DRIVER.replace("SNIPPET", readme_snippet())
    # A user's shell: classic Spark (no Connect variables, which pyspark also sets for itself once a
    # Connect session exists, as under `tox -e connect`), and the workers' interpreter left to Spark.
    spark_set = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "PYSPARK_PYTHON")
    env = {k: v for k, v in os.environ.items() if k not in spark_set}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    refusal = result["refusal"]
    assert refusal is not None and "spark.sql.streaming.stateStore.providerClass" in refusal
    assert "configure(SparkSession.builder)" in refusal and "\n" not in refusal
    # F065-R3: (a, 9000) arrives after a's 20000, below a's watermark 15000: late; the rest on time
    assert result["events"] == [
        ["a", 9000, "late"], ["a", 10000, "on_time"], ["a", 20000, "on_time"],
        ["b", 12000, "on_time"], ["b", 30000, "on_time"],
    ]  # fmt: skip
    assert result["progress"] >= 1
