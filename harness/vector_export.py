"""Exports test vectors (spec/vectors.md) from the Gherkin scenarios and from generated traces.

Scenarios: every scenario of ``features/<area>.feature`` that a stream can say
(not ``@oracle-only``, not an object-API scenario) gives one case per distinct
trace its Then steps look at, built by the same step library the suites use;
the case's clauses are the scenario's tags. Generated: the area's differential
mix (``strategies/<area>.py`` ``DIFFERENTIAL``) drawn with a seed,
as the differential tests draw it; a case's clauses are those of the cases it
reaches (``CASES``). The expected output of every case is the oracle's.

Exporting scenarios reads the project's ``features/`` folder, so it runs from a
checkout (``--project``, default the current folder). Generated traces come from the
installed ``strategies`` package, which needs Hypothesis (the ``generate`` extra), so the
tool-only install exports them anywhere.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

from harness.clauses import CLAUSE_ID, clause_sort_key, is_clause_id
from harness.engine import run_canonical
from harness.outputs import TABLES, Output
from harness.reference_engine import ReferenceEngine
from harness.traces import Trace
from harness.vectors import ExpectedError, Vector

AREAS = tuple(TABLES)
ORACLE_ONLY_TAG = "oracle-only"
COMMITTED_GENERATED = 6  # generated cases per area in the committed set (vectors/generated/)
COMMITTED_SEED = 0


class ExportError(RuntimeError):
    """The project folder lacks what an export reads, or a scenario cannot be replayed."""


def expected_output(traces: Sequence[Trace]) -> list[Output | ExpectedError]:
    """The oracle's answer to each trace: canonical tables, or the refused configuration's error."""
    out: list[Output | ExpectedError] = []
    for result in run_canonical(ReferenceEngine(), list(traces)):
        out.append(
            ExpectedError(type(result).__name__, str(result)) if isinstance(result, Exception) else result
        )
    return out


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80] or "case"


def _unique(case_id: str, taken: set[str]) -> str:
    candidate, n = case_id, 2
    while candidate in taken:
        candidate, n = f"{case_id}-{n}", n + 1
    taken.add(candidate)
    return candidate


# ---- scenarios ---------------------------------------------------------------------------


@contextlib.contextmanager
def _project_on_path(root: Path) -> Iterator[None]:
    added = str(root) not in sys.path
    if added:
        sys.path.insert(0, str(root))
    try:
        yield
    finally:
        if added:
            sys.path.remove(str(root))


@contextlib.contextmanager
def area_steps(root: Path, areas: Sequence[str]) -> Iterator[None]:
    """The step library with each area's own steps (``features/test_<area>.py``) for the export.

    The modules are loaded under private names with ``scenarios()`` switched off (it needs a
    pytest session), and the library is put back afterwards, so steps that pytest has loaded
    already, or loads later, are never registered twice.
    """
    import pytest_bdd

    from harness.steps import LIBRARY

    saved = list(LIBRARY.defs)
    LIBRARY.defs[:] = [d for d in saved if d.owner == "harness.steps"]
    try:
        with mock.patch.object(pytest_bdd, "scenarios", lambda *a, **k: None), _project_on_path(root):
            for area in areas:
                path = root / "features" / f"test_{area}.py"
                if not path.is_file():
                    continue
                spec = importlib.util.spec_from_file_location(f"_vector_export_steps_{area}", path)
                assert spec is not None and spec.loader is not None
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
        yield
    finally:
        LIBRARY.defs[:] = saved


def _scenario_clauses(feature: Any, template: Any) -> tuple[str, ...]:
    tags = set(template.tags) | set(getattr(feature, "tags", ()) or ())
    rule = getattr(template, "rule", None)
    if rule is not None:
        tags |= set(getattr(rule, "tags", ()) or ())
    return tuple(sorted((t for t in tags if is_clause_id(t)), key=clause_sort_key))


def feature_vectors(root: Path, areas: Sequence[str] = AREAS) -> list[Vector]:
    """One case per distinct trace of every stream scenario of the areas' feature files."""
    from pytest_bdd.parser import FeatureParser

    from harness.steps import traces_of_scenario

    features_dir = root / "features"
    if not features_dir.is_dir():
        raise ExportError(f"{features_dir}: no features folder; export from a checkout (--project DIR)")
    vectors: list[Vector] = []
    with area_steps(root, areas):
        for area in areas:
            file = features_dir / f"{area}.feature"
            if not file.is_file():
                continue
            feature = FeatureParser(str(features_dir), file.name).parse()
            taken: set[str] = set()
            cases: list[tuple[str, str, tuple[str, ...], Trace]] = []
            for template in feature.scenarios.values():
                if ORACLE_ONLY_TAG in template.tags:
                    continue
                contexts = [c for ex in template.examples for c in ex.as_contexts()] or [{}]
                for context in contexts:
                    scenario = template.render(context)
                    try:
                        traces = traces_of_scenario(scenario.steps, scenario.name)
                    except Exception as e:  # noqa: BLE001 - named with its scenario
                        raise ExportError(
                            f"{file}:{template.line_number}: scenario {scenario.name!r} "
                            f"cannot be replayed: {type(e).__name__}: {e}"
                        ) from None
                    base = f"{area}/{slug(scenario.name)}"
                    if context:  # a scenario outline: its example row tells the cases apart
                        base += "/" + slug(" ".join(context.values()))
                    origin = f"features/{file.name}:{template.line_number}: {scenario.name}"
                    for i, trace in enumerate(traces, start=1):
                        case_id = base if i == len(traces) else f"{base}/{i}"
                        cases.append(
                            (_unique(case_id, taken), origin, _scenario_clauses(feature, template), trace)
                        )
            expected = expected_output([t for *_, t in cases])
            for (case_id, origin, clauses, trace), answer in zip(cases, expected, strict=True):
                vectors.append(Vector(case_id, replace(trace, name=case_id), answer, clauses, origin))
    return vectors


# ---- generated traces ----------------------------------------------------------------------

_CLAUSE_GROUP = re.compile(r"\(([^()]*)\)")
_SHORT_ID = re.compile(r"^[A-Z]*\d+$")


def clauses_in(text: str) -> list[str]:
    """Clause ids in the parentheses of a case description: ``(OXL-R4, R5, TR-2)`` names
    OXL-R4, OXL-R5 and TR-2 (a short id takes the prefix of the id before it)."""
    found: list[str] = []
    for group in _CLAUSE_GROUP.findall(text):
        prefix = None
        for token in (t.strip() for t in group.split(",")):
            if re.fullmatch(CLAUSE_ID, token):
                prefix = token.rsplit("-", 1)[0]
                found.append(token)
            elif prefix and _SHORT_ID.match(token):
                found.append(f"{prefix}-{token}")
    return found


def generated_vectors(areas: Sequence[str], count: int, seed: int) -> list[Vector]:
    """``count`` traces per area from its differential mix and ``seed`` (spec/traces.md TR-13)."""
    if count <= 0:
        return []
    try:
        # the trace generators (strategies/) need Hypothesis: the `generate` extra
        from harness.hypothesis_profiles import load_profile
        from strategies.common import differential_traces
    except ImportError as error:
        raise ExportError(
            f"generated vectors need Hypothesis ({error}): pip install hypothesis, "
            "or install the tool with its `generate` extra"
        ) from error

    load_profile()  # the same draws whatever was imported before (no local constants)
    vectors: list[Vector] = []
    for area in areas:
        module = importlib.import_module(f"strategies.{area}")
        traces = differential_traces(module.DIFFERENTIAL, count, seed, every_restart=True)
        expected = expected_output(traces)
        for i, (trace, answer) in enumerate(zip(traces, expected, strict=True)):
            reached = module.cases_reached(trace, _as_result(answer))
            clauses = {c for case in reached for c in clauses_in(module.CASES[case])}
            case_id = f"{area}/generated/seed-{seed}/{i}"
            origin = f"generated: strategies/{area}.py DIFFERENTIAL, seed {seed}, trace {i}"
            note = "reaches: " + ", ".join(sorted(reached)) if reached else ""
            vectors.append(
                Vector(
                    case_id,
                    replace(trace, name=case_id),
                    answer,
                    tuple(sorted(clauses, key=clause_sort_key)),
                    origin,
                    note,
                )
            )
    return vectors


def _as_result(answer: Output | ExpectedError) -> Any:
    """What ``cases_reached`` expects: the output, or an InvalidConfig for a refused trace."""
    from harness.traces import InvalidConfig

    return InvalidConfig(answer.message) if isinstance(answer, ExpectedError) else answer


# ---- the committed set ------------------------------------------------------------------------


def committed_files(root: Path) -> dict[str, tuple[list[Vector], dict[str, Any]]]:
    """The committed set under vectors/, file name -> (cases, header): one file per area from
    the scenarios, one per area from ``COMMITTED_GENERATED`` generated traces of seed 0."""
    files: dict[str, tuple[list[Vector], dict[str, Any]]] = {}
    scenario_cases = feature_vectors(root)
    generated = generated_vectors(AREAS, COMMITTED_GENERATED, COMMITTED_SEED)
    for area in AREAS:
        mine = [v for v in scenario_cases if v.area == area]
        if mine:
            files[f"features/{area}.jsonl"] = (mine, {"origin": f"features/{area}.feature"})
        files[f"generated/{area}.jsonl"] = (
            [v for v in generated if v.area == area],
            {
                "origin": f"strategies/{area}.py",
                "seed": COMMITTED_SEED,
                "traces": COMMITTED_GENERATED,
            },
        )
    return files
