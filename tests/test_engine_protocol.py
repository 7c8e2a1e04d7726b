"""The out-of-process engine protocol (spec/engine-protocol.md), driven as a user would.

* The example adapter in Node (examples/late_data_engine.js) runs as a separate
  process, started by the command-line tool, which itself runs as a process: it
  passes the committed late-data vectors, and its deliberately faulty variant is
  caught with a diff that names the case and the table.
* A misbehaving engine (tests/fake_engine.py) costs only the cases it
  misbehaves on: a hang is a timeout, an exit is a crash with its stderr, a bad
  line is malformed output; the other cases still pass, and nothing hangs or
  ends in a stack trace.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import EXIT_ENGINE, EXIT_FAILED, main
from harness.engine_runner import CommandEngine
from harness.vector_check import check_all
from harness.vectors import read_vectors, vector_json

pytestmark = pytest.mark.oracle_alone  # no Spark: it may run beside the Spark pre-run

ROOT = Path(__file__).resolve().parent.parent
LATE_DATA_VECTORS = [str(ROOT / "vectors" / "features" / "late_data.jsonl"),
                     str(ROOT / "vectors" / "generated" / "late_data.jsonl")]  # fmt: skip
FAKE_ENGINE = [sys.executable, str(Path(__file__).with_name("fake_engine.py"))]


def documented_counts(command: str) -> str:
    """The closing line's counts that docs/tutorial/your-engine.md shows for ``command``."""
    text = (ROOT / "docs" / "tutorial" / "your-engine.md").read_text(encoding="utf-8")
    found = re.search(rf"^{re.escape(command)}: (\d+ passed, .*)$", text, re.MULTILINE)
    assert found, f"docs/tutorial/your-engine.md shows no closing line of {command!r}"
    return found.group(1)


def node() -> str:
    found = shutil.which("node")
    assert found, "the example adapter needs Node.js (node on PATH); README: Validate your engine"
    return found


def cli_process(*argv: str) -> subprocess.CompletedProcess[str]:
    """The installed console script's code, as a process of its own (no progress bar: not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.clauses("TR-8", "TR-9", "OXL-R4")
def test_the_node_example_engine_passes_the_late_data_vectors(tmp_path: Path) -> None:
    command = f"{node()} examples/late_data_engine.js"
    report = tmp_path / "run.json"
    done = cli_process(
        "run", *LATE_DATA_VECTORS, "--command", command, "--name", "mylate", "--report", str(report)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    cases = len(read_vectors(LATE_DATA_VECTORS).vectors)
    # the cases at the i64 ends are declined (JavaScript numbers); every other case passes
    passed, failed, deviations, unexpected, skipped = (
        int(part.split()[0]) for part in summary.split(": ")[1].split(", ")
    )
    assert (failed, deviations, unexpected, passed + skipped) == (0, 0, 0, cases), summary
    assert passed >= 30 and skipped <= 8, summary
    # the tutorial shows what a run prints
    assert summary.split(": ", 1)[1] == documented_counts("node examples/late_data_engine.js")
    # the skipped cases' reason, grouped, on the console
    reasons = done.stdout.split("skipped, by reason:\n")[1].splitlines()[0].split(maxsplit=1)
    assert reasons[0] == str(skipped) and "unsupported by the engine" in reasons[1], reasons
    # --name names the engine in the report, and so the expectation file drafted from it
    assert json.loads(report.read_text(encoding="utf-8"))["engines"][0]["name"] == "mylate"
    drafted = cli_process("expectations", str(report), "--directory", str(tmp_path))
    assert drafted.returncode == 0 and (tmp_path / "mylate.toml").is_file(), drafted.stdout + drafted.stderr


@pytest.mark.clauses("TR-8", "OXL-R4")
def test_the_faulty_node_engine_is_caught_with_a_readable_diff(tmp_path: Path) -> None:
    command = f"{node()} examples/late_data_engine.js --fault=boundary"
    report = tmp_path / "report.md"
    done = cli_process("run", *LATE_DATA_VECTORS, "--command", command, "--report", str(report))
    assert done.returncode == EXIT_FAILED, done.stdout + done.stderr
    out = done.stdout
    case = "late_data/an-event-at-the-watermark-is-on-time-one-millisecond-below-it-is-late"
    assert f"FAIL {case}" in out
    assert "table 'events': 4 rows expected, 4 actual; first diverging row" in out
    assert "expected: batch=1, seq=0, source=1, event_time=10000, watermark=10000, *verdict=on_time" in out
    assert "actual:   batch=1, seq=0, source=1, event_time=10000, watermark=10000, *verdict=dropped" in out
    assert "Traceback" not in out + done.stderr
    counts = out.strip().splitlines()[-1].split(": ", 1)[1]
    assert counts == documented_counts("node examples/late_data_engine.js --fault=boundary")
    text = report.read_text(encoding="utf-8")
    assert (
        f"**{case}** (failed)" in text
        and "| **OXL-R4** Late means strictly below the watermark | FAIL |" in text
    )
    assert "VELO-R1" not in text  # only the clauses of the areas that ran


@pytest.mark.clauses("TR-11", "OXL-R4")
def test_the_faulty_node_engine_with_its_deviation_recorded_passes(tmp_path: Path) -> None:
    """The same fault, recorded by clause in the engine's expectation file: the failing cases are
    known deviations and the run passes; the reports say so in every format."""
    command = f"{node()} examples/late_data_engine.js --fault=boundary"
    expectations = tmp_path / "node-boundary.toml"
    witness = "late_data/an-event-at-the-watermark-is-on-time-one-millisecond-below-it-is-late"
    expectations.write_text(
        "".join(
            f'[[deviation]]\nclause = "{clause}"\ntable = "{table}"\ncolumns = {json.dumps(columns)}\n'
            f'witness = "{witness}"\nreason = "judges <= at the watermark"\n\n'
            for clause, table, columns in (
                ("OXL-R4", "events", ["verdict", "lateness"]), ("OXL-R4", "progress", ["on_time"]),
                ("OXL-R7", "events", ["assigned_time"]), ("OXL-R7", "progress", ["reassigned", "dropped"]),
            )
        )
    )  # fmt: skip
    html, junit = tmp_path / "report.html", tmp_path / "report.xml"
    args = ("run", *LATE_DATA_VECTORS, "--command", command, "--expectations", str(expectations))
    done = cli_process(*args, "--report", str(html), "--report", str(junit))
    assert done.returncode == 0, done.stdout + done.stderr
    # the four excused cases are deviations, each case counted once
    assert (
        done.stdout.strip()
        .splitlines()[-1]
        .endswith(": 32 passed, 0 failed, 4 deviations, 0 unexpected passes, 6 skipped")
    )
    assert "deviation" in html.read_text(encoding="utf-8")
    assert 'failures="0"' in junit.read_text(encoding="utf-8")
    # without the fault the witness no longer differs: an unexpected pass, and the run fails
    done = cli_process("run", *LATE_DATA_VECTORS, "--command", f"{node()} examples/late_data_engine.js",
                       "--expectations", str(expectations))  # fmt: skip
    assert done.returncode == EXIT_FAILED, done.stdout + done.stderr
    assert f"OXL-R4 at events.verdict+lateness: unexpected-pass (witness {witness})" in done.stdout
    # the witness the four entries share is the one unexpected pass; the other cases pass
    assert (
        done.stdout.strip()
        .splitlines()[-1]
        .endswith(": 35 passed, 0 failed, 0 deviations, 1 unexpected passes, 6 skipped")
    )


def _cases_with_endings(tmp_path: Path, endings: list[str]) -> Path:
    """Committed late-data cases renamed so that the fake engine misbehaves on some."""
    source = read_vectors(LATE_DATA_VECTORS[:1]).vectors
    lines = ['{"format": "eventtime-conformance-vectors", "version": 1}']
    for vector, ending in zip(source, endings, strict=False):
        case = vector_json(vector)
        case["id"] = f"{vector.id}/{ending}"
        lines.append(json.dumps(case))
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.clauses("TR-9")
def test_hangs_crashes_and_bad_lines_cost_only_their_own_case(tmp_path: Path) -> None:
    endings = ["ok-1", "hang", "ok-2", "crash", "ok-3", "garbage", "ok-4", "wrong-table", "ok-5"]
    vectors = read_vectors([_cases_with_endings(tmp_path, endings)]).vectors
    engine = CommandEngine(FAKE_ENGINE, timeout=3.0, cwd=ROOT)
    results = engine.run(vectors)
    outcomes = {o.id.rsplit("/", 1)[-1]: o for o in check_all(vectors, results)}
    assert {e: outcomes[e].status for e in endings} == {
        **{e: "pass" for e in endings if e.startswith("ok")},
        **{e: "fail" for e in ("hang", "crash", "garbage", "wrong-table")},
    }
    assert outcomes["hang"].reason.startswith("timeout: no answer within 3 s")
    assert (
        outcomes["crash"].reason
        == "crash: the engine exited with code 3 before answering this case; its stderr ends:"
    )
    assert outcomes["crash"].detail == "fake engine: out of memory (on purpose)"
    # the process started after the crash answered ok-3 on its line 1, then wrote the bad line 2
    assert outcomes["garbage"].reason.startswith("malformed: engine output line 2 is not a JSON answer")
    assert outcomes["garbage"].reason.endswith(": this is not JSON")
    assert "has no tables ['no_such_table']" in outcomes["wrong-table"].reason
    assert engine.starts == 5  # a fresh process after each of the four misbehaviours


@pytest.mark.clauses("TR-9")
def test_an_engine_that_cannot_start_is_reported_not_retried_forever(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vectors = read_vectors([_cases_with_endings(tmp_path, ["a", "b", "c", "d", "e", "f"])]).vectors
    engine = CommandEngine([*FAKE_ENGINE, "--crash-always"], timeout=5.0, cwd=ROOT)
    outcomes = check_all(vectors, engine.run(vectors))
    assert engine.starts == 3
    assert [o.status for o in outcomes] == ["fail"] * 6
    assert "exited with code 4" in outcomes[0].reason and "fake engine: cannot start" in outcomes[0].detail
    assert outcomes[-1].reason.startswith("crash: not run: the engine failed 3 times in a row")
    code = main(["run", str(tmp_path / "cases.jsonl"), "--command", "no-such-engine-command --serve"])
    assert code == EXIT_ENGINE
    assert "cannot start no-such-engine-command --serve" in capsys.readouterr().err


@pytest.mark.clauses("TR-9")
@pytest.mark.parametrize("case_format", ["jsonl", "arrow"])
def test_an_engine_can_read_and_write_files(tmp_path: Path, case_format: str) -> None:
    endings = ["ok-1", "garbage", "ok-2", "wrong-table", "ok-3", "crash", "ok-4"]
    vectors = read_vectors([_cases_with_endings(tmp_path, endings)]).vectors
    command = [*FAKE_ENGINE, "--files", "{cases}", "{answers}"]
    engine = CommandEngine(command, timeout=60.0, cwd=ROOT, case_format=case_format)
    outcomes = {o.id.rsplit("/", 1)[-1]: o for o in check_all(vectors, engine.run(vectors))}
    assert [outcomes[e].status for e in endings] == ["pass", "fail", "pass", "fail", "pass", "fail", "fail"]
    assert outcomes["garbage"].reason.startswith("malformed: answers file line 2 is not a JSON answer")
    assert "has no tables ['no_such_table']" in outcomes["wrong-table"].reason
    # one process for all: the crash ends it, so the case after it is not answered either
    assert outcomes["crash"].reason.startswith("crash: the engine exited with code 3")
    assert outcomes["ok-4"].reason.startswith("crash: the engine exited with code 3")
    assert engine.starts == 1


@pytest.mark.clauses("TR-9")
def test_a_provenance_line_answers_no_case_and_reaches_the_report_and_answers(tmp_path: Path) -> None:
    endings = ["ok-1", "provenance", "ok-2", "bad-provenance", "ok-3"]
    cases = _cases_with_endings(tmp_path, endings)
    vectors = read_vectors([cases]).vectors
    engine = CommandEngine(FAKE_ENGINE, timeout=10.0, cwd=ROOT)
    outcomes = {o.id.rsplit("/", 1)[-1]: o for o in check_all(vectors, engine.run(vectors))}
    assert [outcomes[e].status for e in endings] == ["pass", "pass", "pass", "fail", "pass"]
    # the line before an answer, and the one after the last answer (the tool reads on for it)
    assert engine.provenance == {"fake": "1.0", "bundle": "7", "last": "after every answer"}
    assert outcomes["bad-provenance"].reason.startswith("malformed: engine output line")
    bad = outcomes["bad-provenance"].reason
    assert "provenance values are strings or numbers, not those of ['fake']" in bad, bad
    # through the tool: the report's engine and the answers file's header carry it, gzipped or not
    report, answers = tmp_path / "run.json", tmp_path / "answers.jsonl.gz"
    command = " ".join(FAKE_ENGINE)
    done = cli_process("run", str(cases), "--command", command, "--report", str(report),
                       "--output", str(answers))  # fmt: skip
    assert done.returncode == EXIT_FAILED, done.stdout + done.stderr  # the bad line's case
    engine_entry = json.loads(report.read_text(encoding="utf-8"))["engines"][0]
    assert engine_entry["provenance"] == {"fake": "1.0", "bundle": "7", "last": "after every answer"}
    assert engine_entry["command"].startswith("eventtime-conformance run ") and engine_entry["date"]
    # a report made later from the answers file shows the run's command and date, not its own
    markdown = tmp_path / "run.md"
    done = cli_process("report", str(cases), "--outputs", str(answers), "--output", str(markdown))
    text = markdown.read_text(encoding="utf-8")
    assert "| fake | 1.0 |" in text, done.stdout + done.stderr
    assert f"| date | {engine_entry['date']} |" in text and f"`{engine_entry['command']}`" in text, text


class _DecliningEngine:
    """The oracle, except that it declines every case with a Drop policy (as an adapter declines
    what its engine cannot express)."""

    name = "declining"
    areas = frozenset({"late_data"})

    def run(self, traces):  # type: ignore[no-untyped-def]
        from harness.engine import Unsupported
        from harness.reference_engine import ReferenceEngine

        answers = ReferenceEngine().run(traces)
        return [
            Unsupported("no drop here") if t.config.get("policy") == "Drop" else a
            for t, a in zip(traces, answers, strict=True)
        ]


@pytest.mark.clauses("TR-9")
def test_an_in_process_engine_declines_one_case_with_unsupported() -> None:
    from harness.engine_runner import run_in_process

    vectors = read_vectors(LATE_DATA_VECTORS).vectors
    outcomes = check_all(vectors, run_in_process(_DecliningEngine(), vectors))
    drop = [o for o in outcomes if o.vector.trace.config.get("policy") == "Drop"]
    assert drop and all(o.status == "declined" and "no drop here" in o.reason for o in drop)
    assert all(o.status == "pass" for o in outcomes if o not in drop)
