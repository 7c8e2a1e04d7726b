"""Watermark propagation (OXW) on Flink: a trace's graph as Flink operators, Flink's own watermarks.

Each source node of the trace is a source of its own (java/eventtime/flink/TraceSource.java) whose
generator is Flink's bounded-out-of-orderness one for events (``max - max_out_of_order_ms - 1``, the
spec's ``max - max_out_of_order_ms``: common.to_flink) and emits a watermark item's time (less one);
each other node is an operator fed by the union of its upstreams, where Flink combines its inputs'
watermarks (the minimum over its input channels, nothing until each has one, never going back). The
adapter computes no rule: it reads the watermark Flink has at each operator.

Flink propagates asynchronously: every source and operator is a task of its own, so what an operator
holds after the trace's k-th item depends on how far the other tasks have run. It holds still only
when the sources have nothing more to send. So the graph runs once per prefix of the trace (the first
k items, for k = 0..n), each run with its own sources, which send their part of the prefix, then an
``end`` row, and then stay open (an ending source would send Flink's end-of-input watermark); each
operator reports its watermark when the ``end`` rows of all its upstreams have reached it
(``TraceSource.NodeWatermark``); so do a reader over the union of all sources (the aligned
watermark) and one over the union of the sinks (the global watermark). The job is cancelled once
every reading is in. A run's readings are the spec's outputs after its prefix: ``watermarks`` lists,
for each item, the operators whose reading differs from the previous prefix's; ``progress`` takes
the readings after each batch's last item. ``violations`` stays empty: a source output drops a
watermark below its last one without a word (Flink's source operator keeps only increases).

Not shown, since nothing of Flink carries it: ``generated`` (a generator's emissions, repeats
included, never leave the source), the violation count, the error rows (the adapter's input checks:
a malformed item, or one for a node with upstreams, has no Flink record and is skipped). Declined:
``advance_threshold`` other than 1 (Flink's generators emit on every record or by the wall clock,
none every n-th event), a graph without nodes (nothing to run), times beyond TIME_LIMIT. Restart
points are not replayed: each run is one uninterrupted job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from flink_engine import common, trace_source
from harness.traces import InvalidConfig
from reference.watermark_propagation import WatermarkPropagationStream

AREA = "watermark_propagation"
SPLIT = "node"  # each source's one split: its records' split-local output
ALIGNED, GLOBAL = -1, -2  # the readers over every source and over every sink
I64_MIN = -(2**63)  # Flink's "no watermark yet" and the spec's lower bound of time (OXW-R7)
# Every run's operators are tasks of their own, each output a network buffer pool of its own:
# Flink's default 2,048 buffers run out at a few hundred tasks; small buffers, since few rows flow.
JOB_SETTINGS = {
    "taskmanager.memory.network.min": "256m",
    "taskmanager.memory.network.max": "256m",
    "taskmanager.memory.segment-size": "4kb",
}
NOT_EVERY_EVENT = (
    "Flink's watermark generators emit on every record or periodically by the wall clock; none emits "
    "at every n-th event of a source (OXW-R2 with advance_threshold > 1)"
)


@dataclass
class Prepared:
    case_id: str
    nodes: list[str]
    sources: list[str]
    sinks: list[str]
    upstreams: dict[str, list[str]]
    order: list[str]  # topological
    delay: int
    items: list[tuple[int, int, str, str, int]] = field(default_factory=list)  # batch, seq, node, kind, time
    batches: int = 0
    first_run: int = 0  # the job-wide id of this case's run of the empty prefix


def prepare(case: dict[str, Any], index: int) -> Prepared | dict[str, Any]:
    config = case.get("config", {})
    try:
        stream = WatermarkPropagationStream(config)  # the spec's config checks (OXW-R4, R9, R10, R20)
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    if stream.threshold != 1:
        return {"id": case["id"], "unsupported": NOT_EVERY_EVENT}
    graph = stream.propagator
    if not graph.nodes:
        return {"id": case["id"], "unsupported": "a graph without nodes has no operator to run in Flink"}
    prepared = Prepared(
        case["id"], graph.nodes, graph.sources, graph.sinks, graph.upstreams, graph.order, stream.delay
    )
    prepared.batches = len(case["batches"])
    times = [stream.delay]
    for b, batch in enumerate(case["batches"]):
        for seq, item in enumerate(batch):
            kind, node = item.get("kind"), item.get("key")
            timed = {"event": "event_time", "watermark": "time"}.get(kind or "")
            value = item.get(timed) if timed else None
            if node not in graph.sources or not isinstance(value, int) or isinstance(value, bool):
                continue  # malformed, or for a node with upstreams: no Flink record (OXW-R11, R17)
            times.append(value)
            prepared.items.append((b, seq, node, str(kind), value))
    if not common.fits(*times):
        return {
            "id": case["id"],
            "unsupported": f"times or durations of {common.TIME_LIMIT} ms or more (the i64 ends of TR-2)",
        }
    return prepared


def _script(case: Prepared, run: int, source: str, prefix: int) -> list[str]:
    """The lines of one source's TraceSource in the run of the first ``prefix`` items."""
    lines = [trace_source.line("open", SPLIT)]
    for b, seq, node, kind, value in case.items[:prefix]:
        if node != source:
            continue
        ts = value if kind == "event" else 0
        wm = common.to_flink(value) if kind == "watermark" else 0
        lines.append(trace_source.line("record", SPLIT, (kind, run, b, seq, "", ts, wm, case.delay, "")))
    lines.append(trace_source.line("record", SPLIT, ("end", run, 0, 0, "", 0, 0, 0, "")))
    return lines


def run_all(cases: list[Prepared]) -> dict[tuple[int, int], int]:
    """One Flink job of every case's runs; the watermark each operator reported, by (run, node index)."""
    from pyflink.common import Types
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    env, _ = common.new_environment(JOB_SETTINGS)
    trace_source.add_jar(env)
    jvm = get_gateway().jvm
    row_type = Types.ROW_NAMED(common.FIELD_NAMES, common.field_types())

    def node(upstream: list[Any], run: int, index: int) -> Any:
        joined = upstream[0].union(*upstream[1:]) if len(upstream) > 1 else upstream[0]
        fn = jvm.eventtime.flink.TraceSource.NodeWatermark(run, index, len(upstream))
        return DataStream(joined._j_data_stream.process(fn, row_type.get_java_type_info()))

    readings: list[Any] = []
    run = 0
    for case in cases:
        case.first_run = run
        for prefix in range(len(case.items) + 1):
            out: dict[str, Any] = {}
            for name in case.order:
                i = case.nodes.index(name)
                if name in case.sources:
                    script = _script(case, run, name, prefix)
                    source = trace_source.stream(env, script, row_type, hold_open=True, name=f"{run}/{name}")
                    out[name] = node([source], run, i)
                else:
                    out[name] = node([out[u] for u in case.upstreams[name]], run, i)
            readings += out.values()
            readings.append(node([out[s] for s in case.sources], run, ALIGNED))
            readings.append(node([out[s] for s in case.sinks], run, GLOBAL))
            run += 1
    merged = readings[0].union(*readings[1:])
    expected = len(readings)
    found: dict[tuple[int, int], int] = {}
    started = time.monotonic()
    with merged.execute_and_collect("eventtime-conformance watermark propagation") as results:
        for row in results:
            found[(row[1], row[7])] = row[6]
            if len(found) == expected:
                break  # the sources stay open: the job is cancelled as the results close
    took = time.monotonic() - started
    common.log(f"watermark propagation: one job, {run} runs of {len(cases)} cases, {took:.1f} s")
    return found


def _spec(flink_watermark: int | None) -> int | None:
    """The spec's output watermark from Flink's, None while Flink has none (OXW-R14)."""
    if flink_watermark is None or flink_watermark == I64_MIN:
        return None
    return common.from_flink(flink_watermark)


def assemble(case: Prepared, readings: dict[tuple[int, int], int]) -> dict[str, Any]:
    def reading(prefix: int, index: int) -> int | None:
        return _spec(readings.get((case.first_run + prefix, index)))

    watermarks = []
    for k, (b, seq, _, _, _) in enumerate(case.items, start=1):
        for name in case.order:
            i = case.nodes.index(name)
            now = reading(k, i)
            if now != reading(k - 1, i):
                watermarks.append([b, seq, name, now])
    progress = []
    prefix = 0
    for b in range(case.batches):
        while prefix < len(case.items) and case.items[prefix][0] <= b:
            prefix += 1
        aligned, global_ = reading(prefix, ALIGNED), reading(prefix, GLOBAL)
        progress.append(
            [b, I64_MIN if aligned is None else aligned, I64_MIN if global_ is None else global_, None]
        )
    return {
        "id": case.case_id,
        "tables": {
            "generated": [],
            "watermarks": watermarks,
            "violations": [],
            "progress": progress,
            "errors": [],
        },
    }
