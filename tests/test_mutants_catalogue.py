"""The mutant catalogue (mutants/catalogue.toml, scripts/mutants.py) still applies to the tree:
every mutant's snippet stands exactly once in its file, so a rewrite of an operator is noticed
here and its mutants are re-expressed as the same bugs in the new code."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

from spark_impl.engine import implemented_areas

pytestmark = pytest.mark.oracle_alone  # no Spark: it may run beside the Spark pre-run

ROOT = Path(__file__).resolve().parents[1]


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("mutants_script", ROOT / "scripts" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.clauses("TR-12")
def test_every_mutant_applies_once_and_every_area_has_its_share() -> None:
    script = _script()
    catalogue = script.load()  # stops when a snippet is missing or stands twice
    per_area = Counter(m.area for m in catalogue)
    # mutants are bugs planted in Spark operators: every area with one has its share
    assert all(per_area[a] >= 2 for a in implemented_areas()), per_area
    assert per_area["shared"] >= 4, per_area
    for m in catalogue:
        assert m.original != m.mutated, m.id
        source = (ROOT / m.file).read_text(encoding="utf-8")
        compile(source.replace(m.original, m.mutated), m.file, "exec")  # a mutant still runs
        assert script.suites(m.areas), m.id  # and has suites to catch it
