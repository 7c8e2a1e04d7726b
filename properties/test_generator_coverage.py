"""Every area's generated traces reach the cases that matter (spec/traces.md TR-13).

The count runs the oracle on the traces the area's differential test sends
to the engines (the profile's budget, the run's seed; at least 1000 of them,
see strategies/generator_coverage.py for the floor each draw is held to), so
the numbers the conformance summary prints are those of this run.
"""

from __future__ import annotations

import pytest

from strategies.generator_coverage import AREAS, RECORDED, counted_for_this_run


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
