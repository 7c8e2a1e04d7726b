"""``eventtime-conformance pipeline``: the README's pipeline command, run small.

The summary must say what the tables hold, the tables must be there with their headers, the
sample must be the same for the same seed, and the sample must reach what it is made to show: a
burst that the sensors' agreement rejects, a shedder that drops, re-deliveries the aggregator does
not fold again, pairs of both joins.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from harness.cli import EXIT_BAD_INPUT, EXIT_OK, main
from harness.outputs import TABLES
from harness.pipeline_run import SampleShape, run_on_the_oracle, sample_trace

pytestmark = pytest.mark.oracle_alone  # the oracle only: it may run beside the Spark pre-run

SMALL = ["--seconds", "12", "--producers", "8", "--no-progress"]


def _tables(folder: Path) -> dict[str, list[dict[str, str]]]:
    out = {}
    for path in sorted(folder.glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as f:
            out[path.stem] = list(csv.DictReader(f))
    return out


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in the summary:\n{text}"
    return int(found.group(1))


@pytest.mark.clauses("OXP-R5", "OXP-R9", "OXP-R10")
def test_the_summary_says_what_the_tables_hold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pipeline", *SMALL, "--out", str(tmp_path)]) == EXIT_OK
    text = capsys.readouterr().out
    tables = _tables(tmp_path)
    assert set(tables) == set(TABLES["pipeline"])
    decisions = [r["decision"] for r in tables["ingress"]]
    assert _number(r"admitted (\d+)", text) == decisions.count("admit")
    assert _number(r"rejected (\d+)", text) == decisions.count("reject")
    assert _number(r"shed (\d+)", text) == decisions.count("shed") > 0
    assert _number(r"(\d+) rate", text) == sum(r["reason"] == "rate" for r in tables["ingress"]) > 0
    pairs = [r["join"] for r in tables["pairs"]]
    assert _number(r"(\d+) tumbling", text) == pairs.count("tumbling_join") > 0
    assert _number(r"(\d+) session", text) == pairs.count("session_join") > 0
    verdicts = [r["verdict"] for r in tables["messages"]]
    assert _number(r"(\d+) re-deliveries not folded again", text) == verdicts.count("duplicate") > 0
    assert _number(r"(\d+) messages folded", text) == verdicts.count("folded")
    assert _number(r"(\d+) events in", text) == len(tables["ingress"])  # the sample has no malformed item
    assert str(tmp_path) in text


def test_the_same_seed_gives_the_same_sample_and_another_seed_another() -> None:
    shape = SampleShape(seconds=6, producers=8, seed=3)
    assert sample_trace(shape) == sample_trace(shape)
    assert sample_trace(shape) != sample_trace(SampleShape(seconds=6, producers=8, seed=4))
    assert run_on_the_oracle(sample_trace(shape), progress=False)["errors"] == []


@pytest.mark.parametrize("bad", [["--seconds", "1"], ["--producers", "3"]])
def test_a_sample_too_small_to_run_is_refused(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pipeline", "--no-progress", *bad]) == EXIT_BAD_INPUT
    assert "--seconds 2 or more" in capsys.readouterr().err
