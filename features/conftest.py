"""Fixtures and steps of the Gherkin suites (pytest-bdd 9).

``engine`` is autouse so that every collected scenario is multiplied by the
``--engine`` parametrization of harness.pytest_plugin (a parametrized fixture
that only steps request fails: pytest-bdd #618). The shared step library is
installed here once for every feature file.
"""

from __future__ import annotations

import pytest

from harness.pytest_plugin import EngineHandle, engine_for, scenario_of
from harness.steps import LIBRARY, ScenarioState

LIBRARY.bind(globals())


@pytest.fixture(autouse=True)
def engine(request: pytest.FixtureRequest) -> EngineHandle:
    return engine_for(request)


@pytest.fixture
def scenario_state(engine: EngineHandle, request: pytest.FixtureRequest) -> ScenarioState:
    """The trace builder of one scenario run; its name is the scenario's, as in the pre-pass."""
    scenario = scenario_of(request.node)
    return ScenarioState(engine=engine, name=scenario.name if scenario is not None else request.node.name)
