"""A deliberately buggy in-process engine: what a new user's first adapter looks like.

It answers every area with the oracle's output, except that its keyed-watermark
verdicts use ``<=`` where F065-R3 says ``<``: an event exactly at its key's
watermark is reported late. Run the suites against it, record the deviation by
clause, and only the tests that show the bug turn into expected failures
(README, "Record a known deviation"):

    .bootstrap-venv/bin/tox -e conformance -- --engine examples.buggy_engine:BuggyEngine \\
        features/test_keyed_watermarks.py properties/test_keyed_watermarks.py
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.engine import run_canonical
from harness.outputs import TABLES, Output
from harness.reference_engine import ReferenceEngine
from harness.traces import Trace


class BuggyEngine:
    name = "buggy"
    areas = frozenset(TABLES)

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]:
        answers = run_canonical(ReferenceEngine(), traces)
        for trace, answer in zip(traces, answers, strict=True):
            if trace.area == "keyed_watermarks" and not isinstance(answer, Exception):
                answer["events"] = [_judged_with_less_or_equal(row) for row in answer["events"]]
        return answers


def _judged_with_less_or_equal(row: tuple) -> tuple:
    batch, seq, key, event_time, key_watermark, verdict = row
    if verdict == "on_time" and key_watermark is not None and event_time == key_watermark:
        verdict = "late"  # the bug: F065-R3 keeps an event at the watermark on time
    return (batch, seq, key, event_time, key_watermark, verdict)
