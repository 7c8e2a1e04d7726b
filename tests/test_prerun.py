"""The session's pre-run: scenarios and differential tests share one engine.run call.

An engine other than the oracle is asked, before its first test, for the traces of every
selected scenario and of every selected differential test (which register them); the tests
then read their answers from that run, so an expensive engine pays its fixed costs once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.hypothesis_profiles import differential_budget

ROOT = Path(__file__).resolve().parent.parent
# the oracle under another name: an engine the differential tests compare with the oracle
OTHER = "harness.reference_engine:ReferenceEngine"


@pytest.mark.clauses("TR-9")
def test_a_differential_test_and_a_scenario_share_the_engines_one_run(tmp_path: Path) -> None:
    report = tmp_path / "conformance.json"
    selected = "engine_agrees_with_the_oracle or at_the_watermark_is_on_time"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--engine", OTHER, "-k", selected,
         "features/test_late_data.py", "properties/test_late_data.py", "--conformance-report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout, done.stdout[-2000:]
    engine = next(e for e in json.loads(report.read_text(encoding="utf-8"))["engines"] if e["id"] == OTHER)
    generated = differential_budget().traces  # the profile's, which the child process loads too
    assert engine["engine_run_calls"] == 1, engine
    assert engine["traces_run"] == generated + 1, engine  # and the scenario's one trace
    assert f"(1 of scenarios, {generated} registered by tests) in one engine.run call" in done.stdout
