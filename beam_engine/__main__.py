"""`python -m beam_engine`: cases as JSON lines on stdin, one answer line per case on stdout.

The answered cases of one window operator run in one Beam pipeline (common.py): one TestStream that
plays them one after another, each in its own stretch of event time and with its own keys, so each
runs as if alone (TR-9).
"""

from __future__ import annotations

import json
import sys
import time
from types import ModuleType
from typing import Any

from beam_engine import common, late_data, window_joins

AREAS: dict[str, ModuleType] = {
    "late_data": late_data,
    "window_joins": window_joins,
}
NO_GENERATOR = (
    "the spec derives this area's watermark from event times ({how}), and Beam's Python SDK has no "
    "generator that the bundle-based DirectRunner runs: TestStream moves the watermark only where it is "
    "told to, and a splittable DoFn with a watermark estimator (MonotonicWatermarkEstimator) is refused "
    "by the runner; the adapter does not compute the watermark itself"
)
NO_WATERMARK_READING = (
    "this area's results are watermark values ({what}), and Beam's Python SDK gives user code no reading "
    "of a watermark: a DoFn sees an element's timestamp, window and pane, and an event-time timer fires "
    "with its own time, not the watermark that passed it"
)
DECLINED = {
    "session_windows": NO_GENERATOR.format(how="F017E-R5: the largest event time minus bounded_delay"),
    "keyed_watermarks": NO_GENERATOR.format(how="F065: per key, the largest event time minus bounded_delay"),
    "eventtime_buffer": NO_GENERATOR.format(how="VELO: the largest event time minus late_tolerance"),
    "partitioned_watermarks": NO_WATERMARK_READING.format(
        what="F064: the combined watermark of a source's partitions, with idleness by the trace's clock"
    ),
    "watermark_propagation": NO_WATERMARK_READING.format(
        what="OXW: each operator's output watermark, with generators over event counts"
    ),
    "sla_admission": "Beam has no admission control: every element a source emits reaches the next "
    "transform whatever its lag behind the watermark, with no verdict, reject channel or shedding (OXS)",
    "exactly_once_aggregation": "Beam's DeduplicatePerKey forgets an id by a duration of event or "
    "processing time, not by a window of recent sequences per (producer, partition) channel, and it gives "
    "no verdict: a duplicate just does not come out (OXE-R2)",
    "pipeline": "the pipeline starts with SLA admission, which Beam has no built-in for (every element "
    "reaches the next transform whatever its lag); Beam's joins behind an admission the adapter computed "
    "would be the adapter deciding the area's first rule (OXP-R1, R5)",
}


def answer_all(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    prepared: dict[str, list[Any]] = {area: [] for area in AREAS}
    for index, case in enumerate(cases):
        area = case.get("area")
        if area not in AREAS:
            reason = DECLINED.get(str(area), f"unknown area {area!r}")
            answers.append({"id": case["id"], "unsupported": reason})
            continue
        result = AREAS[area].prepare(case, index)
        if isinstance(result, dict):
            answers.append(result)
        else:
            prepared[area].append(result)
    # one pipeline per window operator: the runner visits every transform at every TestStream step,
    # so a pipeline with every operator of the run takes ten times longer than these together
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for area, cases_of in prepared.items():
        for case in cases_of:
            groups.setdefault((area, *AREAS[area].operator(case)), []).append(case)
    for (area, *operator), members in sorted(groups.items(), key=lambda g: tuple(map(str, g[0]))):
        module = AREAS[area]
        script = common.Script()
        for case in members:  # cases one after another, in input order
            module.script(case, script)
        started = time.monotonic()
        outputs = common.attribute(common.run(script, [module.builder(members)]))
        elapsed = time.monotonic() - started
        common.log(f"{area} {operator}: {len(members)} cases, {len(script.steps)} steps, {elapsed:.1f} s")
        answers += [module.assemble(case, outputs.get(case.index, [])) for case in members]
    return answers


def main() -> None:
    cases = [json.loads(line) for line in sys.stdin if line.strip()]
    for answer in answer_all(cases):
        print(json.dumps(answer), flush=True)
    print(json.dumps({"provenance": common.provenance()}), flush=True)


if __name__ == "__main__":
    main()
