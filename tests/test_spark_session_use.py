"""The Spark operators in a session the user builds, as README.md shows them.

Inside pytest ``getOrCreate()`` would return the suite's configured session, so the
README's pipeline runs in a fresh Python process, as a user's `python script.py` does: with this
interpreter but not its venv's bin/ on PATH, so a `python3` Spark finds there is another one.
First on a plain ``SparkSession.builder.getOrCreate()``, where the operator must refuse at once
with one line saying what to set (not a Java stack trace when the query starts), then with the
state store set by hand but no interpreter for Spark's driver-side runner (one line naming
PYSPARK_PYTHON), then on the builder plus the one documented step,
``spark_impl.session.configure``, where the snippet runs as written and ``write_tables`` writes
every table from one query.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
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

events_dir = "events"  # the snippet's folders, relative to the folder it runs in
plain = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
# two files, read one per micro-batch: (a, 9000) comes after a's 20000 has moved a's watermark
for rows in ([("a", 10_000), ("b", 12_000), ("a", 20_000)], [("a", 9_000), ("b", 30_000)]):
    plain.createDataFrame(rows, "tenant string, ts long").coalesce(1).write.mode("append").parquet(events_dir)
def refusal_of(session):  # what the operator says when applied on it; None: it accepts it
    from spark_impl.keyed_watermarks import keyed_watermarks

    try:
        stream = session.readStream.schema("tenant string, ts long").parquet(events_dir)
        keyed_watermarks(stream, key_col="tenant", event_time_col="ts", bounded_delay_ms=5_000)
    except SessionNotReady as e:
        return str(e)
    finally:
        session.stop()
    return None

refusal = refusal_of(plain)
# the state store set by hand, not by configure(): the driver-side runner's interpreter is the one
# PYSPARK_PYTHON named when the context started, else python3 from PATH
provider = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
by_hand = (
    SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    .config("spark.sql.streaming.stateStore.providerClass", provider).getOrCreate()
)
runner_refusal = refusal_of(by_hand)

SNIPPET
events = spark.read.parquet(os.path.join(out_dir, "events")).collect()
progress = spark.read.parquet(os.path.join(out_dir, "progress")).collect()
errors = spark.read.parquet(os.path.join(out_dir, "errors"))
print(json.dumps({
    "refusal": refusal,
    "runner_refusal": runner_refusal,
    "events": sorted([r["key"], r["event_time"], r["verdict"]] for r in events),
    "progress": len(progress),
    "errors": [errors.count(), errors.columns],
}))
"""


def users_env() -> dict[str, str]:
    """A user's shell: classic Spark (no Connect variables, which pyspark also sets for itself once
    a Connect session exists, as under `tox -e connect`), the workers' interpreter left to Spark,
    and `python script.py` with the venv's interpreter but not its bin/ on PATH (a cron job, a
    Jupyter kernel): a `python3` found on PATH is not this one."""
    spark_set = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "PYSPARK_PYTHON")
    env = {k: v for k, v in os.environ.items() if k not in spark_set}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env


_SCRIPT: dict[str, tuple[subprocess.Popen[str], tempfile.TemporaryDirectory[str]]] = {}


def start_script() -> None:
    """The script starts once the pre-run is over, in a process of its own beside the tests that
    follow (they leave most of a core idle), at nice 19; its test reads what it printed."""
    if "run" not in _SCRIPT:
        work = tempfile.TemporaryDirectory(prefix="readme-pipeline-")
        script = DRIVER.replace("SNIPPET", readme_snippet())
        # into files, not pipes: nobody reads a pipe until the test runs, and a full one would stall it
        folder = Path(work.name)
        with open(folder / "stdout", "w") as out, open(folder / "stderr", "w") as err:
            # at the lowest CPU priority: it takes what the tests leave idle instead of slowing them
            process = subprocess.Popen(
                [sys.executable, "-c", script], cwd=work.name, env=users_env(), stdout=out, stderr=err,
                preexec_fn=lambda: os.nice(19),
            )  # fmt: skip
        _SCRIPT["run"] = (process, work)


@pytest.mark.after_prerun.with_args(start_script)
@pytest.mark.clauses("F065-R3", "F065-R22")
def test_spark_readme_pipeline_runs_on_a_plain_session_plus_the_documented_step() -> None:
    start_script()
    process, work = _SCRIPT.pop("run")
    with work:
        try:
            process.wait(timeout=600)
        finally:
            process.kill()  # a no-op once it ended
        stdout, stderr = (Path(work.name, name).read_text() for name in ("stdout", "stderr"))
    env = users_env()
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    # no WARN line per group of the state server, none from inspecting a new checkpoint
    for chatter in ("doesn't contain a value", "Failed to find operator metadata"):
        assert chatter not in done.stderr, done.stderr[-6000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    refusal = result["refusal"]
    assert refusal is not None and "spark.sql.streaming.stateStore.providerClass" in refusal
    assert "configure(SparkSession.builder)" in refusal and "\n" not in refusal
    # without configure(), the operator stops before its query when python3 on PATH cannot run it
    probe = ["python3", "-c", "import pandas, pyarrow, spark_impl"]
    python3_runs_it = shutil.which("python3", path=env["PATH"]) is not None and (
        subprocess.run(probe, cwd=ROOT, env=env, capture_output=True, check=False).returncode == 0
    )
    runner_refusal = result["runner_refusal"]
    if python3_runs_it:
        assert runner_refusal is None, runner_refusal
    else:
        assert runner_refusal is not None and f"PYSPARK_PYTHON={sys.executable}" in runner_refusal
        assert "\n" not in runner_refusal
    # F065-R3: (a, 9000) arrives after a's 20000, below a's watermark 15000: late; the rest on time
    assert result["events"] == [
        ["a", 9000, "late"], ["a", 10000, "on_time"], ["a", 20000, "on_time"],
        ["b", 12000, "on_time"], ["b", 30000, "on_time"],
    ]  # fmt: skip
    assert result["progress"] >= 1
    # no error row, yet the table's folder is there to read, with its columns
    assert result["errors"][0] == 0 and "reason" in result["errors"][1], result["errors"]
