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
from typing import Any

import pytest

from harness.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, main
from harness.outputs import TABLES
from harness.pipeline_run import SampleShape, run_on_the_oracle, sample_trace
from harness.traces import Item

# the oracle only, so they may run beside the Spark pre-run; the Spark run of the command is not
ORACLE_ALONE = pytest.mark.oracle_alone

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


@ORACLE_ALONE
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


@ORACLE_ALONE
def test_the_same_seed_gives_the_same_sample_and_another_seed_another() -> None:
    shape = SampleShape(seconds=6, producers=8, seed=3)
    assert sample_trace(shape) == sample_trace(shape)
    assert sample_trace(shape) != sample_trace(SampleShape(seconds=6, producers=8, seed=4))
    assert run_on_the_oracle(sample_trace(shape), progress=False)["errors"] == []


@ORACLE_ALONE
@pytest.mark.parametrize("bad", [["--seconds", "1"], ["--producers", "3"]])
def test_a_sample_too_small_to_run_is_refused(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pipeline", "--no-progress", *bad]) == EXIT_BAD_INPUT
    assert "--seconds 2 or more" in capsys.readouterr().err


def test_on_spark_the_command_compares_every_table_with_the_oracle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's Spark command, small: the same summary, and every table agrees with the oracle."""
    small = ["--seconds", "6", "--producers", "8", "--no-progress", "--out", str(tmp_path)]
    assert main(["pipeline", "--engine", "spark", *small]) == EXIT_OK
    text = capsys.readouterr().out
    assert "pipeline on Spark" in text and "every table agrees" in text, text
    tables = _tables(tmp_path)
    assert _number(r"admitted (\d+)", text) == [r["decision"] for r in tables["ingress"]].count("admit") > 0


@ORACLE_ALONE
def test_a_spark_answer_that_loses_a_row_fails_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison convicts: Spark's answer with one pair lost is reported, and the command fails."""
    import harness.pipeline_run as pipeline_run

    def losing(trace: Any, progress: bool = True) -> tuple[Any, float]:
        found = run_on_the_oracle(trace, progress=False)
        return {**found, "pairs": found["pairs"][1:]}, 0.1

    monkeypatch.setattr(pipeline_run, "run_on_spark", losing)
    assert main(["pipeline", "--engine", "spark", *SMALL, "--out", str(tmp_path)]) == EXIT_FAILED
    assert "pairs: 1 rows of the oracle missing, 0 rows the oracle does not have" in capsys.readouterr().out


@ORACLE_ALONE
def test_longer_micro_batches_keep_the_clock_of_each_second() -> None:
    """Batches of five seconds hold each second's clock before its arrivals, so no event waits
    for the batch's end to be judged (lag, OXS-R6)."""
    one, five = (sample_trace(SampleShape(12, 8, 2, s)) for s in (1, 5))

    def timeline(trace: Any) -> list[Item]:  # events and clocks in arrival order
        return [i for b in trace.batches for i in b if i.kind in ("event", "clock")]

    assert timeline(one) == timeline(five)
    assert len(five.batches) == 5  # 17 seconds in 4 batches, then the closing watermarks
    assert five.restart_after == frozenset({1})
