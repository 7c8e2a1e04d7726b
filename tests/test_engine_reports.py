"""scripts/engine_reports.py's merge: the pages say what each engine ran with, and every engine's
raw answers are kept beside them, readable by the tool without running anything."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.cli import main

pytestmark = pytest.mark.oracle_alone  # the oracle only: it may run beside the Spark pre-run

ROOT = Path(__file__).resolve().parent.parent
LATE_DATA = str(ROOT / "vectors" / "features" / "late_data.jsonl")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("engine_reports", ROOT / "scripts" / "engine_reports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.clauses("TR-11")
def test_the_merged_pages_carry_provenance_and_the_raw_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script()
    runs, out = tmp_path / "runs", tmp_path / "pages"
    monkeypatch.setattr(script, "RUNS", runs)
    monkeypatch.setattr(script, "OUT", out)
    runs.mkdir()
    # one engine's run as run_engine makes it: its summary and its answers
    assert main(["--project", str(ROOT), "run", LATE_DATA, "--engine", "reference", "--no-progress",
                 "--report", str(runs / "reference.json"),
                 "--output", str(script.answers_file("reference"))]) == 0  # fmt: skip
    assert script.main(["--merge-only"]) == 0
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert f"| python | {sys.version.split()[0]} |" in summary, summary
    assert "| command | `eventtime-conformance " in summary and "| date | " in summary, summary
    assert "<th>python</th>" in (out / "matrix.html").read_text(encoding="utf-8")
    # the committed answers: gzipped JSON Lines that the tool checks as the run did
    kept = out / "answers" / "reference.jsonl.gz"
    header = json.loads(gzip.decompress(kept.read_bytes()).splitlines()[0])
    assert header["engine"] == "reference" and header["provenance"]["python"] == sys.version.split()[0]
    capsys.readouterr()
    assert main(["--project", str(ROOT), "check", LATE_DATA, "--outputs", str(kept)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("reference: ")
