"""Every area's generated traces reach the cases that matter (spec/traces.md TR-13).

The count runs the oracle on the traces the area's differential test sends
to the engines (the profile's budget, the run's seed; at least 1000 of them,
see strategies/generator_coverage.py for the floor each draw is held to), so
the numbers the conformance summary prints are those of this run. The ci
run's draw (seed 0) is committed with its counts (strategies/coverage_counts.json)
and read while every source it was counted from is unchanged; one area a run
is counted afresh and compared with it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from harness.hypothesis_profiles import profile_name, run_seed
from strategies.generator_coverage import (
    AREAS,
    COMMITTED,
    MIN_TRACES,
    RECORDED,
    SPOT_TRACES,
    TUNED_SEED,
    CaseCounts,
    committed_counts,
    count_cases,
    count_conditions,
    counted_for_this_run,
    stale_sources,
)

REFRESH = "python -m strategies.generator_coverage --write-committed"


@pytest.mark.clauses("TR-13")
@pytest.mark.parametrize("area", AREAS)
def test_generated_traces_reach_every_case_that_matters(area: str) -> None:
    counted = counted_for_this_run(area)
    RECORDED[area] = counted
    low = counted.below_floor()
    assert not low, (
        f"{area}: cases under {100 * counted.floor:g}% of {counted.traces} generated traces: {low}\n"
        + "\n".join(counted.lines())
    )


@pytest.mark.clauses("TR-13")
def test_the_committed_counts_come_from_the_sources_as_they_are() -> None:
    """The ci run reads the committed counts instead of drawing 9,000 traces (about 100 s of
    one core), while every source file they were counted from is unchanged."""
    with open(COMMITTED, encoding="utf-8") as f:
        stale = stale_sources(json.load(f))
    assert not stale, f"changed since the committed counts: {stale}; refresh them: {REFRESH}"


@pytest.mark.clauses("TR-13")
def test_the_committed_counts_are_what_a_count_gives() -> None:
    """One area a run (the seed's), counted afresh: the committed counts are used exactly when
    they were made under this run's conditions, and then they are what a count gives. The
    conformance job counts all MIN_TRACES traces; the other profiles the SPOT_TRACES the file
    also holds, where a draw or an oracle changed behind the hashes shows too, at a tenth of the
    cost (about 20 s of the test job's serial phase)."""
    area = AREAS[run_seed() % len(AREAS)]
    part, traces = ("areas", MIN_TRACES) if profile_name() == "thorough" else ("spot", SPOT_TRACES)
    fresh = _count(area, traces, TUNED_SEED)
    committed = committed_counts(MIN_TRACES, TUNED_SEED, part=part)
    with open(COMMITTED, encoding="utf-8") as f:
        made_under = json.load(f)["conditions"]
    if made_under == count_conditions(MIN_TRACES, TUNED_SEED):
        assert committed is not None and committed[area] == fresh
    else:
        assert committed is None  # another Hypothesis or profile: the run counts for itself


@pytest.mark.clauses("TR-13")
def test_a_draw_changed_behind_the_hashes_shows_in_the_spot_count() -> None:
    """Planted: the seed's area drawn with another seed, as a change the hashes miss would draw;
    its spot count is another, so the recount above would fail."""
    area = AREAS[run_seed() % len(AREAS)]
    assert _count(area, SPOT_TRACES, TUNED_SEED + 1).counts != _count(area, SPOT_TRACES, TUNED_SEED).counts


@functools.cache
def _count(area: str, traces: int, seed: int) -> CaseCounts:
    return count_cases(area, traces, seed)


@pytest.mark.clauses("TR-13")
def test_a_changed_source_file_retires_the_committed_counts(tmp_path: Path) -> None:
    """Planted: the committed file with one source hash changed is not used."""
    with open(COMMITTED, encoding="utf-8") as f:
        data = json.load(f)
    first = sorted(data["sources"])[0]
    changed = dict(data, sources={**data["sources"], first: "0" * 64})
    (tmp_path / "stale.json").write_text(json.dumps(changed), encoding="utf-8")
    assert stale_sources(changed) == [first]
    assert committed_counts(MIN_TRACES, TUNED_SEED, str(tmp_path / "stale.json")) is None
