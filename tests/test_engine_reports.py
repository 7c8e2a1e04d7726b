"""scripts/engine_reports.py's merge: the pages say what each engine ran with, and every engine's
raw answers are kept beside them, readable by the tool without running anything."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.cli import EXIT_FAILED, main

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


COMMITTED = ROOT / "docs" / "conformance" / "answers"


@pytest.mark.clauses("TR-11")
def test_an_engine_without_a_run_is_merged_from_its_committed_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine that has run no engine, the merge judges every engine's committed answers again
    instead of leaving them out of the pages (the counts are the committed pages' own)."""
    script = _script()
    runs, out = tmp_path / "runs", tmp_path / "pages"
    monkeypatch.setattr(script, "RUNS", runs)
    monkeypatch.setattr(script, "OUT", out)
    (out / "answers").mkdir(parents=True)
    for engine in ("reference", "flink"):
        (out / "answers" / f"{engine}.jsonl.gz").write_bytes((COMMITTED / f"{engine}.jsonl.gz").read_bytes())
    assert script.main(["--merge-only"]) == 0
    summary = (out / "summary.md").read_text(encoding="utf-8")
    committed = (ROOT / "docs" / "conformance" / "summary.md").read_text(encoding="utf-8")

    def share_rows(page: str, engine: str) -> list[str]:  # the engine's row of the share table
        return [
            line
            for line in page.splitlines()
            if re.match(rf"\| {engine} \| \d+ \| \d+ \| \d+ \| \d+ \| \d+% \|", line)
        ]

    for engine in ("reference", "flink"):
        [row] = share_rows(committed, engine)
        assert row in summary
    assert not share_rows(summary, "spark")  # no run and no committed answers here: left out


@pytest.mark.clauses("TR-11")
def test_a_summary_judged_from_committed_answers_is_judged_again_at_the_next_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A judged-again summary left in reports/engines/ is no run: a later merge, perhaps after the
    vectors changed, judges the committed answers again instead of reusing it (it once kept an
    engine at the previous number of vectors)."""
    script = _script()
    runs, out = tmp_path / "runs", tmp_path / "pages"
    monkeypatch.setattr(script, "RUNS", runs)
    monkeypatch.setattr(script, "OUT", out)
    (out / "answers").mkdir(parents=True)
    (out / "answers" / "flink.jsonl.gz").write_bytes((COMMITTED / "flink.jsonl.gz").read_bytes())
    assert script.main(["--merge-only"]) == 0
    assert script.judged_marker("flink").is_file()
    stale = {"engines": [], "rows": [], "tests": [], "expectations": []}  # as stale as a summary gets
    (runs / "flink.json").write_text(json.dumps(stale), encoding="utf-8")
    capsys.readouterr()
    assert script.main(["--merge-only"]) == 0
    assert "no run of flink" in capsys.readouterr().out
    committed = (ROOT / "docs" / "conformance" / "summary.md").read_text(encoding="utf-8")
    [row] = [line for line in committed.splitlines() if re.match(r"\| flink \| \d+ \| \d+ \| \d+ \|", line)]
    assert row in (out / "summary.md").read_text(encoding="utf-8")


def _check(answers: Path, engine: str) -> int:
    """``eventtime-conformance check`` of an answers file against the committed vectors."""
    return main(["--project", str(ROOT), "check", str(ROOT / "vectors"), "--outputs", str(answers),
                 "--name", engine])  # fmt: skip


@pytest.mark.clauses("TR-11")
@pytest.mark.parametrize("answered_by", ["reference", "spark", "spark-native", "flink", "beam", "bytewax"])
def test_the_committed_answers_pass_as_the_pages_say(
    answered_by: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The raw answers beside the pages, judged by today's vectors and expectation files: every
    case answered, no unexplained failure, and every entry's witness still showing its difference
    (a new vector or a changed entry since the last regeneration fails here, not in a reader's hands)."""
    code = _check(COMMITTED / f"{answered_by}.jsonl.gz", answered_by)
    assert code == 0, capsys.readouterr().out[-3000:]


@pytest.mark.clauses("TR-11")
@pytest.mark.parametrize("answered_by", ["flink", "beam", "bytewax"])
def test_the_committed_answers_with_every_row_lost_fail(
    answered_by: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same check convicts: an engine's committed answers with every table emptied fail, in every
    area the engine answers (a case whose expected tables are empty where the engine shows them
    still passes)."""
    lines = gzip.decompress((COMMITTED / f"{answered_by}.jsonl.gz").read_bytes()).decode("utf-8").splitlines()
    emptied = [lines[0]]
    for line in lines[1:]:
        answer = json.loads(line)
        if "tables" in answer:
            answer["tables"] = {name: [] for name in answer["tables"]}
        emptied.append(json.dumps(answer))
    path = tmp_path / "lost.jsonl"
    path.write_text("\n".join(emptied) + "\n", encoding="utf-8")
    answered = {json.loads(line)["id"].split("/")[0] for line in emptied[1:] if "tables" in json.loads(line)}
    code = main(["--project", str(ROOT), "check", str(ROOT / "vectors"), "--outputs", str(path),
                 "--name", answered_by, "--max-failures", "100000"])  # fmt: skip
    assert code == EXIT_FAILED
    failing = set(re.findall(r"^FAIL (\w+)/", capsys.readouterr().out, flags=re.MULTILINE))
    assert answered and failing == answered, (answered, failing)


@pytest.mark.clauses("TR-11")
def test_one_case_of_a_whole_runs_answers_is_checked_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """``check --case ID`` over the committed answers of every case (what docs/conformance/README.md
    tells a reader to do): the other cases' answers are passed over, not refused."""
    case = "late_data/the-processing-clock-closes-no-window"
    code = main(["--project", str(ROOT), "check", str(ROOT / "vectors"), "--case", case,
                 "--outputs", str(COMMITTED / "flink.jsonl.gz"), "--name", "flink"])  # fmt: skip
    assert code == 0
    assert (
        capsys.readouterr()
        .out.strip()
        .splitlines()[-1]
        .endswith(": 0 passed, 0 failed, 1 deviations, 0 unexpected passes, 0 skipped")
    )


def test_every_headline_example_is_an_entrys_smallest_case_shown_with_both_answers() -> None:
    """Each case docs/conformance/README.md cites in its headline findings is the smallest case of
    some expectation entry on examples.md, where both answers of the entry's table are shown."""
    readme = (ROOT / "docs" / "conformance" / "README.md").read_text(encoding="utf-8")
    findings = readme[readme.index("## Headline findings") : readme.index("## What was not compared")]
    areas = "|".join(path.stem for path in (ROOT / "vectors" / "features").glob("*.jsonl"))
    cited = set(re.findall(rf"`((?:{areas})/[^`]+)`", findings))
    examples = (ROOT / "docs" / "conformance" / "examples.md").read_text(encoding="utf-8")
    shown = set(re.findall(r"^`([^`]+)` \(\d+ items?\)", examples, flags=re.MULTILINE))
    assert len(cited) >= 10 and cited <= shown, sorted(cited - shown)
