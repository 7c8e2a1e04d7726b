"""The Spark-native engine on one vector of each area, every run: so that the adapter of Spark's
built-in operators cannot rot between regenerations of docs/conformance/ (tox -e engine-reports).

Each case must pass, be a deviation that expectations/spark-native.toml explains, or be declined
with a reason (by the engine, or by the file showing none of the area's result tables): an
unexplained failure fails this test.
"""

from __future__ import annotations

from pathlib import Path

from harness.engine_runner import run_in_process
from harness.expectations import load_expectations
from harness.outputs import TABLES
from harness.vector_check import apply_expectations, check_all
from harness.vectors import ExpectedError, read_vectors

ROOT = Path(__file__).resolve().parents[1]


def _one_vector_per_area() -> list:
    """The first scenario vector of each area that expects tables (a refused configuration
    never reaches Spark)."""
    chosen = {}
    for v in read_vectors([ROOT / "vectors" / "features"]).vectors:
        if v.area not in chosen and not isinstance(v.expected, ExpectedError) and v.trace.batches:
            chosen[v.area] = v
    return [chosen[a] for a in TABLES if a in chosen]


def test_spark_native_one_vector_per_area_passes_or_is_explained() -> None:
    from spark_native.engine import SparkNativeEngine

    vectors = _one_vector_per_area()
    assert {v.area for v in vectors} == set(TABLES)
    engine = SparkNativeEngine(concurrent_queries=1)  # the smoke test needs no speed
    expectations = load_expectations(ROOT / "expectations", engine.name)
    assert expectations.path is not None and not expectations.problems, expectations.problems
    outcomes = apply_expectations(
        check_all(vectors, run_in_process(engine, vectors), expectations), expectations
    )
    wrong = [f"{o.id}: {o.status}: {o.reason}\n{o.detail}" for o in outcomes if o.status not in _FINE]
    assert not wrong, "\n\n".join(wrong)
    for o in outcomes:
        if o.status == "declined":  # by the engine or by the file's [shows]: it must say why
            assert o.reason.split(": ", 1)[-1].strip(), o.id


_FINE = ("pass", "deviation", "declined", "adapter")
