"""harness/input_checks.py, the malformed-item checks the Flink and Beam adapters share, agrees with
the oracle: over every committed vector of late data and window joins, the items it finds are the
rows of the errors table the oracle expects, with the same reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.input_checks import late_data_errors, window_join_errors
from harness.vectors import read_vectors

pytestmark = pytest.mark.oracle_alone  # no engine: it may run beside the Spark pre-run

ROOT = Path(__file__).resolve().parent.parent
CHECKS = {"late_data": late_data_errors, "window_joins": window_join_errors}


@pytest.mark.parametrize("area", sorted(CHECKS))
def test_the_adapters_input_checks_find_the_oracles_error_rows(area: str) -> None:
    vectors = [v for v in read_vectors([ROOT / "vectors"]).vectors if v.area == area]
    checked = with_errors = 0
    for vector in vectors:
        if not isinstance(vector.expected, dict):
            continue  # a refused configuration: no items are judged
        batches = [[item.to_json() for item in batch] for batch in vector.trace.batches]
        found = {(b, seq, reason) for (b, seq), reason in CHECKS[area](batches).items()}
        assert found == {tuple(row) for row in vector.expected.get("errors", [])}, vector.id
        checked += 1
        with_errors += bool(found)
    assert checked >= 20 and with_errors >= 3, (checked, with_errors)  # the vectors reach the checks
