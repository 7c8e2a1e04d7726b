"""Fixtures and steps of the Gherkin suites (pytest-bdd 9).

``engine`` is autouse so that every collected scenario is multiplied by the
``--engine`` parametrization of harness.pytest_plugin (a parametrized fixture
that only steps request fails: pytest-bdd #618). The shared step library is
installed here once for every feature file.

A ``*.feature`` file in this folder that no test module here names (in its
``scenarios(...)`` call) is collected on its own, with the steps of every area
bound: a new scenario file needs no Python.
"""

from __future__ import annotations

import types
from fnmatch import fnmatch
from pathlib import Path

import pytest

from harness.outputs import TABLES
from harness.pytest_plugin import EngineHandle, engine_for, scenario_of
from harness.steps import LIBRARY, ScenarioState

LIBRARY.bind(globals())


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if file_path.suffix != ".feature" or _named_by_a_test_module(file_path, parent.config):
        return None
    return UnboundFeature.from_parent(parent, path=file_path)


def _named_by_a_test_module(feature: Path, config: pytest.Config) -> bool:
    """True when a test module beside the feature names it: that module collects it."""
    patterns = config.getini("python_files")
    modules = [p for p in feature.parent.glob("*.py") if any(fnmatch(p.name, g) for g in patterns)]
    return any(feature.name in module.read_text(encoding="utf-8") for module in modules)


class UnboundFeature(pytest.Module):
    """A feature file's scenarios in a module made at collection, with every area's steps."""

    def _getobj(self) -> types.ModuleType:
        module = types.ModuleType(f"{self.path.stem}_feature")
        module.__file__ = str(self.path)
        namespace = module.__dict__
        namespace.update(LIBRARY=LIBRARY, FEATURE=str(self.path))
        for area in TABLES:
            step_module = self.path.parent / f"test_{area}.py"
            if step_module.exists():
                # imported as pytest imports it, so each step is registered once
                owner = pytest.Module.from_parent(self.session, path=step_module).obj.__name__
                if not any(d.owner == owner for d in LIBRARY.defs):
                    continue  # the area has only shared steps
                # pytest-bdd puts steps and tests in the calling frame's locals: the module's own
                exec(f"LIBRARY.bind(globals(), owner={owner!r})", namespace)
        exec("from pytest_bdd import scenarios\nscenarios(FEATURE)", namespace)
        return module


@pytest.fixture(autouse=True)
def engine(request: pytest.FixtureRequest) -> EngineHandle:
    return engine_for(request)


@pytest.fixture
def scenario_state(engine: EngineHandle, request: pytest.FixtureRequest) -> ScenarioState:
    """The trace builder of one scenario run; its name is the scenario's, as in the pre-pass."""
    scenario = scenario_of(request.node)
    return ScenarioState(engine=engine, name=scenario.name if scenario is not None else request.node.name)
