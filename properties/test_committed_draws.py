"""The ci run's differential traces, committed (strategies/differential_draws.json.gz), are what a
draw gives. Beside the pre-run, not with the coverage tests at the end: one area's fresh draw takes
up to 13 s of one core."""

from __future__ import annotations

import gzip
import json

import pytest

from harness.hypothesis_profiles import differential_budget, profile_name, run_seed
from strategies.common import COMMITTED_DRAWS, committed_draw, draw, draw_key
from strategies.generator_coverage import AREAS, TUNED_SEED, strategies_module
from strategies.provenance import draw_conditions, stale_sources

REFRESH = "python -m strategies.generator_coverage --write-committed"


@pytest.mark.clauses("TR-13")
def test_the_committed_draws_are_what_a_draw_gives() -> None:
    """The ci run's differential traces are read from strategies/differential_draws.json.gz (about
    a minute of one core less before the pre-run starts) while the sources and versions they were
    drawn under are unchanged; one area a run is drawn afresh and must give them trace by trace.
    Under another profile the draw's budget differs, so nothing is read."""
    with gzip.open(COMMITTED_DRAWS, "rt", encoding="utf-8") as f:
        data = json.load(f)
    stale = stale_sources(data)
    assert not stale, f"changed since the committed draws: {stale}; refresh them: {REFRESH}"
    area = AREAS[run_seed() % len(AREAS)]
    budget = differential_budget()
    parts = strategies_module(area).DIFFERENTIAL
    committed = committed_draw(draw_key(parts, budget.traces, TUNED_SEED, budget.restart_positions))
    if profile_name() == "ci" and data["conditions"] == draw_conditions():
        fresh = draw(parts, budget.traces, TUNED_SEED, budget.restart_positions)
        assert committed is not None and [t.dumps() for t in committed] == [t.dumps() for t in fresh]
    else:
        assert committed is None
