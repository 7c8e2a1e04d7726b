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


def test_micro_batches_count_with_the_trace_batch_they_read() -> None:
    """A query continued after trace batch 0 first runs a micro-batch without input (1), then reads
    batch 1 as micro-batch 2 and batch 2 as 3, and ends with one more without input (4): the
    progress Spark reported in such a run (offsets are the trace batches delivered so far)."""
    from spark_native.common import NativeRun

    offsets = [(None, 1), (1, 1), (1, 2), (2, 3), (3, 3)]
    progress = [
        {"batchId": m, "sources": [{"startOffset": None if s is None else f'{{"batch": {s}}}',
                                    "endOffset": f'{{"batch": {e}}}'}]}
        for m, (s, e) in enumerate(offsets)
    ]  # fmt: skip
    run = NativeRun(rows=[(m, {"m": m}) for m in range(5)], progress=progress)
    assert [run.micro_batch(b) for b in range(3)] == [0, 2, 3]
    assert [run.trace_batch(m) for m in range(5)] == [0, 1, 1, 2, 3]
    assert [b for b, _ in run.batch_rows()] == [0, 1, 1, 2, 3]
    assert [(run.progress_before(b) or {}).get("batchId") for b in range(3)] == [None, 1, 2]
    assert [(run.progress_after(b) or {}).get("batchId") for b in range(3)] == [1, 3, 4]
    assert (run.progress_of(1) or {}).get("batchId") == 2
