"""The portable test vectors (spec/vectors.md) through the command-line tool.

* The committed set under vectors/ is what an export writes now (not stale), and it
  passes on the engine under test: all of it on the oracle through the command, a
  handful on Spark (the suites already run everything on Spark), answered from the
  session's pre-run through the same in-process runner.
* Every deliberately wrong vector of tests/wrong_expectations.jsonl is rejected.
* A malformed file stops with an error naming the file, the line and the problem.
* Arrow IPC files hold the same cases as JSON Lines.
* Generated vectors export from any folder, with the installed packages alone, and without
  Hypothesis the export says what to install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, main
from harness.engine_runner import run_in_process
from harness.pytest_plugin import EngineHandle, prerun_engine
from harness.vector_check import check_all, failure_text
from harness.vectors import Vector, read_vectors, vector_json

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "vectors"
WRONG = Path(__file__).resolve().parent / "wrong_expectations.jsonl"

# A handful of the committed set for Spark, one query for all of them: boundary verdicts, a Reassign
# budget, keyed state, a shed decided by the draw, re-deliveries across a restart, and a refused
# configuration (answered before Spark starts).
SPARK_SUBSET = (
    "late_data/an-event-at-the-watermark-is-on-time-one-millisecond-below-it-is-late",
    "late_data/reassign-keeps-an-event-late-by-at-most-the-budget-at-the-watermark",
    "keyed_watermarks/a-slow-tenant-is-judged-by-its-own-watermark",
    "watermark_propagation/a-graph-with-a-cycle-is-refused-when-it-is-built/a-a",
    "sla_admission/the-policy-decides-what-a-drop-means-and-a-shed-or-throttled-event-spent-its-tok/strict-shed-1-4-0",
    "exactly_once_aggregation/a-producer-that-re-sends-after-a-restart-point-sends-duplicates-never-a-second-f",
)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["--project", str(ROOT), *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.clauses("TR-8", "TR-13")
def test_the_committed_vectors_are_what_an_export_writes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "export", str(VECTORS), "--check")
    assert code == EXIT_OK, out
    assert "up to date" in out


def spark_subset() -> list[Vector]:
    chosen = [v for v in read_vectors([VECTORS]).vectors if v.id in SPARK_SUBSET]
    assert {v.id for v in chosen} == set(SPARK_SUBSET), sorted(set(SPARK_SUBSET) - {v.id for v in chosen})
    return chosen


@pytest.mark.clauses("TR-8", "TR-9")
# Spark's cases go with the session's pre-run, not in a query of their own
@pytest.mark.prerun_traces.with_args(lambda: [v.trace for v in spark_subset()])
def test_the_committed_vectors_pass_on_the_engine(
    engine: EngineHandle, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    if engine.id == "spark":
        # The command's in-process path is the same for every engine (the oracle's run below
        # goes through it); Spark's answers come from the pre-run, through the same runner.
        chosen = spark_subset()
        results = run_in_process(prerun_engine(request.config, engine.id), chosen)
        outcomes = check_all(chosen, results)
        assert [o.status for o in outcomes] == ["pass"] * len(chosen), [
            failure_text(o) for o in outcomes if o.status != "pass"
        ]
        return
    code, out, err = run_cli(capsys, "run", str(VECTORS), "--engine", engine.id, "--no-progress")
    assert code == EXIT_OK, out + err
    summary = out.strip().splitlines()[-1]
    cases = len(read_vectors([VECTORS]).vectors)
    closing = f": {cases} passed, 0 failed, 0 deviations, 0 unexpected passes, 0 skipped"
    assert summary.endswith(closing), summary


@pytest.mark.clauses("TR-8")
def test_every_wrong_vector_is_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = read_vectors([WRONG]).vectors
    assert len(wrong) >= 5 and all(v.note.startswith("deliberately wrong") for v in wrong)
    outputs = tmp_path / "oracle.jsonl"
    code, out, _ = run_cli(capsys, "run", str(WRONG), "--engine", "reference", "--output", str(outputs))
    assert code == EXIT_FAILED
    closing = f"reference: 0 passed, {len(wrong)} failed, 0 deviations, 0 unexpected passes, 0 skipped"
    assert out.strip().splitlines()[-1] == closing
    for v in wrong:
        assert f"FAIL {v.id}" in out
    # the same answers, checked from the outputs file: each case fails on its own
    code, out, _ = run_cli(capsys, "check", str(WRONG), "--outputs", str(outputs))
    assert code == EXIT_FAILED
    from harness.vectors import read_outputs

    _, results = read_outputs(outputs, read_vectors([WRONG]))
    assert [o.status for o in check_all(wrong, results)] == ["fail"] * len(wrong)


def _case_line(**changes: Any) -> str:
    """A real case of the committed set as one JSON line, with fields replaced."""
    lines = (VECTORS / "features" / "late_data.jsonl").read_text(encoding="utf-8").splitlines()
    case = json.loads(lines[1])
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = case
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[int(last) if isinstance(node, list) else last] = value
    return json.dumps(case)


HEADER = '{"format": "eventtime-conformance-vectors", "version": 1}'
MALFORMED = {
    "not JSON": ([HEADER, _case_line(), '{"id": "x", '], ":3: not valid JSON"),
    "NaN": ([HEADER, _case_line().replace('"event_time": 9999', '"event_time": NaN')], ":2: not valid JSON"),
    "duplicate key": ([HEADER, '{"id": "a", "id": "b"}'], "duplicate key 'id'"),
    "no header": ([_case_line()], ":1: the first line must be the header"),
    "newer version": ([HEADER.replace("1}", "2}")], "format version 2 is not supported"),
    "unknown item kind": (
        [HEADER, _case_line(trace__batches__1__0__kind="teleport")],
        ":2: case 'late_data/an-event-at-the-watermark-is-on-time-one-millisecond-below-it-is-late': "
        "batch 1 item 0: unknown item kind 'teleport'",
    ),
    "unknown item field": (
        [HEADER, _case_line(trace__batches__1__0__colour="red")],
        "unknown fields ['colour']",
    ),
    "a time as text": (
        [HEADER, _case_line(trace__batches__1__0__event_time="10s")],
        "event_time must be an integer",
    ),
    "bad restart point": (
        [HEADER, _case_line(trace__restart_after=[7])],
        "restart_after=7 must name a batch",
    ),
    "wrong columns": (
        [HEADER, _case_line(expected__tables__errors__columns=["batch", "reason"])],
        "table 'errors': columns must be ['batch', 'seq', 'reason']",
    ),
    "short row": ([HEADER, _case_line(expected__tables__progress__rows=[[0, 1]])], "row 0 has 2 cells"),
    "a table missing": (
        [HEADER, _case_line(expected__tables={})],
        "tables ['events', 'side_outputs', 'windows', 'progress', 'errors'] are missing",
    ),
    "unknown area": ([HEADER, _case_line(area="joins")], "unknown area 'joins'"),
    "code in a field": (
        [HEADER, _case_line(trace__config="__import__('os').system('true')")],
        "field 'config' must be an object",
    ),  # fmt: skip
    "twice the same id": ([HEADER, _case_line(), _case_line()], ":3: case id 'late_data/an-event-at-the"),
}


@pytest.mark.clauses("TR-3")
@pytest.mark.parametrize("problem", list(MALFORMED))
def test_a_malformed_vector_file_is_refused_naming_the_line(
    problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines, message = MALFORMED[problem]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "run", str(path), "--engine", "reference")
    assert code == EXIT_BAD_INPUT
    assert err.startswith(f"eventtime-conformance: {path}:"), err
    assert message in err
    assert "Traceback" not in out + err


@pytest.mark.clauses("TR-1", "TR-13")
def test_arrow_files_hold_the_same_cases_as_json_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--areas", "eventtime_buffer", "--generated", "20", "--seed", "5"]
    code, _, err = run_cli(capsys, "export", str(tmp_path / "big.arrow"), *common)
    assert code == EXIT_OK, err
    code, _, err = run_cli(capsys, "export", str(tmp_path / "big.jsonl"), *common)
    assert code == EXIT_OK, err
    arrow, jsonl = read_vectors([tmp_path / "big.arrow"]), read_vectors([tmp_path / "big.jsonl"])
    assert len(arrow.vectors) > 60  # the area's scenarios and 20 generated traces
    assert [vector_json(v) for v in arrow.vectors] == [vector_json(v) for v in jsonl.vectors]
    code, out, _ = run_cli(capsys, "run", str(tmp_path / "big.arrow"), "--engine", "reference")
    assert code == EXIT_OK, out
    (tmp_path / "broken.arrow").write_bytes(b"ARROW1 but not really")
    code, _, err = run_cli(capsys, "run", str(tmp_path / "broken.arrow"), "--engine", "reference")
    assert code == EXIT_BAD_INPUT and "not an Arrow IPC file" in err


def _export_elsewhere(folder: Path, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """The CLI's export of generated late-data vectors, run in ``folder`` (no checkout there, and
    the project folder off the path: only what is installed imports)."""
    argv = ["export", "out.jsonl", "--no-features", "--areas", "late_data", "--generated", "3", "--seed", "7"]
    code = f"import sys; {prelude}from harness.cli import main; sys.exit(main({argv!r}))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.clauses("TR-13")
def test_generated_vectors_export_from_any_folder_with_the_installed_packages(tmp_path: Path) -> None:
    done = _export_elsewhere(tmp_path)
    assert done.returncode == EXIT_OK, done.stderr
    exported = read_vectors([tmp_path / "out.jsonl"]).vectors
    assert [v.id for v in exported] == [f"late_data/generated/seed-7/{i}" for i in range(3)]
    assert all(v.origin.startswith("generated: strategies/late_data.py") for v in exported)
    # the same cases as an export from the checkout
    (tmp_path / "here").mkdir()
    code = main(["--project", str(ROOT), "export", str(tmp_path / "here" / "out.jsonl"), "--no-features",
                 "--areas", "late_data", "--generated", "3", "--seed", "7"])  # fmt: skip
    assert code == EXIT_OK
    here = read_vectors([tmp_path / "here" / "out.jsonl"]).vectors
    assert [vector_json(v) for v in exported] == [vector_json(v) for v in here]


def test_an_export_without_hypothesis_says_what_to_install(tmp_path: Path) -> None:
    done = _export_elsewhere(tmp_path, prelude="sys.modules['hypothesis'] = None; ")
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert "generated vectors need Hypothesis" in done.stderr and "pip install hypothesis" in done.stderr
    assert not (tmp_path / "out.jsonl").exists()
