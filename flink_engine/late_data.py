"""OXL on Flink: TumblingEventTimeWindows with allowed lateness and a late side output.

The trace's watermark items are the stream's watermark (a Flink SQL source watermark on a column that
only watermark rows raise, each item less one: common.to_flink), emitted after each record. Observed
from Flink: the watermark each event met, which events the window operator sent to its late side
output, and each firing of each window (count, watermark). Mapped by the adapter: verdicts from those
facts (kept events at or below their Flink watermark are Flink's late elements, `allowed_late`),
side-output positions in arrival order, the batch and seq of each firing, and the error rows of
malformed items (input checking, not Flink). Declined: no window_size (Flink has late data only in
window operators), Reassign (Flink cannot move a late element's time), several sources (one watermark
per Flink stream).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flink_engine import common
from harness.input_checks import late_data_errors
from harness.traces import InvalidConfig
from reference.late_data import config_from_trace

AREA = "late_data"
VERDICTS = ("on_time", "allowed_late", "reassigned", "dropped", "side_output")
NO_WINDOWS = (
    "Flink has late data only in window operators (WindowedStream.allowed_lateness and "
    "side_output_late_data); without window_size there is no Flink operator that judges lateness"
)
NO_REASSIGN = (
    "Flink's window operator can only drop a late element or send it to a side output; it has no "
    "policy that moves a late element's timestamp up to the watermark"
)
MANY_SOURCES = (
    "Flink has one watermark per stream (the minimum over its inputs), not one per source "
    "inside a stream; this adapter runs one source per case"
)


@dataclass
class Prepared:
    case_id: str
    index: int
    base: int
    size: int
    lateness: int
    channel: str | None
    source: int | None
    batches: int
    items: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # accepted events, watermarks
    rows: list[common.Row] = field(default_factory=list)
    errors: list[common.Row] = field(default_factory=list)


def prepare(case: dict[str, Any], index: int) -> Prepared | dict[str, Any]:
    try:
        config = config_from_trace(case.get("config", {}))
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    policy = case["config"].get("policy", "Drop")
    if config.window_size is None:
        return {"id": case["id"], "unsupported": NO_WINDOWS}
    if policy == "Reassign":
        return {"id": case["id"], "unsupported": NO_REASSIGN}
    batches = case["batches"]
    errors = late_data_errors(batches)
    accepted = [
        (b, seq, it)
        for b, batch in enumerate(batches)
        for seq, it in enumerate(batch)
        if (b, seq) not in errors and it.get("kind") in ("event", "watermark")
    ]
    sources = {it.get("source") for _, _, it in accepted}
    if len(sources) > 1:
        return {"id": case["id"], "unsupported": MANY_SOURCES}
    times = [it.get("event_time", it.get("time")) for _, _, it in accepted]
    if not common.fits(config.window_size, config.allowed_lateness, *times):
        return {
            "id": case["id"],
            "unsupported": (
                f"times or durations of {common.TIME_LIMIT} ms or more: this adapter gives each case its own "
                "stretch of Flink event time, so the i64 ends of TR-2 are out of reach"
            ),
        }
    size = config.window_size
    base = common.case_base(index) // size * size  # tumbling windows stay aligned to the case's own times
    prepared = Prepared(
        case["id"],
        index,
        base,
        size,
        config.allowed_lateness,
        case["config"].get("channel"),
        next(iter(sources), None),
        len(batches),
        accepted,
    )
    prepared.errors = [(b, seq, reason) for (b, seq), reason in sorted(errors.items())]
    for b, seq, item in accepted:
        if item["kind"] == "event":
            prepared.rows.append(("event", index, b, seq, str(index), base + item["event_time"], 0, 0, ""))
        else:
            t = common.to_flink(base + item["time"])
            prepared.rows.append(("watermark", index, b, seq, "", 0, t, 0, ""))
    return prepared


def build(env: Any, t_env: Any, cases: list[Prepared]) -> list[Any]:
    """One source for every case; one tumbling window operator per (window size, allowed lateness)."""
    from pyflink.common import Time, Types
    from pyflink.datastream import OutputTag
    from pyflink.datastream.functions import ProcessWindowFunction
    from pyflink.datastream.window import TumblingEventTimeWindows

    rows = [row for case in cases for row in case.rows]
    observed = common.observed_source(env, t_env, rows)

    class EmitWindow(ProcessWindowFunction):
        def process(self, key: str, context: Any, elements: Any) -> Any:
            window = context.window()
            yield json.dumps(
                {
                    "t": "window",
                    "case": int(key),
                    "start": window.start,
                    "end": window.end,
                    "count": len(list(elements)),
                    "wm": context.current_watermark(),
                }
            )

    events = observed.filter(lambda r: r[0] == "event")
    outputs = [
        events.map(
            lambda r: json.dumps({"t": "event", "case": r[1], "batch": r[2], "seq": r[3], "wm": r[9]}),
            output_type=Types.STRING(),
        )
    ]
    for size, lateness in sorted({(case.size, case.lateness) for case in cases}):
        members = {case.index for case in cases if (case.size, case.lateness) == (size, lateness)}
        late_tag = OutputTag(f"late_{size}_{lateness}", common.observed_type())
        windows = (
            events.filter(lambda r, members=members: r[1] in members)
            .key_by(lambda r: r[4], key_type=Types.STRING())
            .window(TumblingEventTimeWindows.of(Time.milliseconds(size)))
            .allowed_lateness(lateness)
            .side_output_late_data(late_tag)
            .process(EmitWindow(), Types.STRING())
        )
        late = windows.get_side_output(late_tag).map(
            lambda r: json.dumps({"t": "late", "case": r[1], "batch": r[2], "seq": r[3]}),
            output_type=Types.STRING(),
        )
        outputs += [windows, late]
    return outputs


def assemble(case: Prepared, records: list[dict[str, Any]]) -> dict[str, Any]:
    base = case.base
    met = {(r["batch"], r["seq"]): r["wm"] for r in records if r["t"] == "event"}
    sent_late = {(r["batch"], r["seq"]) for r in records if r["t"] == "late"}
    late_verdict = "side_output" if case.channel is not None else "dropped"
    events: list[list[Any]] = []
    side_outputs: list[list[Any]] = []
    counts_by_batch = [dict.fromkeys(VERDICTS, 0) for _ in range(case.batches)]
    late_kept: list[
        tuple[int, int, int]
    ] = []  # kept elements of an already fired window: (start, batch, seq)
    for b, seq, item in case.items:
        if item["kind"] != "event":
            continue
        t = item["event_time"]
        watermark = common.case_watermark(met[(b, seq)], base)
        # Flink's late element: at or below its watermark, the spec's less one
        late = watermark is not None and t <= common.to_flink(watermark)
        lateness = watermark - t if late and watermark is not None else None
        if (b, seq) in sent_late:
            verdict = late_verdict
            channel = case.channel
            if channel is not None:
                side_outputs.append([b, channel, len(side_outputs), seq, case.source, t])
            events.append([b, seq, case.source, t, watermark, verdict, lateness, None, channel])
        else:
            verdict = "allowed_late" if late else "on_time"
            events.append([b, seq, case.source, t, watermark, verdict, lateness, t, None])
            start = t - t % case.size
            if watermark is not None and start + case.size - 1 <= common.to_flink(watermark):
                late_kept.append((start, b, seq))  # EventTimeTrigger.onElement fires this window again
        counts_by_batch[b][verdict] += 1
    watermark_items = [
        (b, seq, common.to_flink(base + it["time"])) for b, seq, it in case.items if it["kind"] == "watermark"
    ]
    windows = []
    fired: dict[int, int] = {}
    for r in records:
        if r["t"] != "window" or r["wm"] >= base + common.CASE_SPAN // 2:
            continue  # fired by a later case or the job's end: still open when the trace stops
        start = r["start"] - base
        firing = fired.get(start, 0)
        fired[start] = firing + 1
        if firing == 0:
            cause: tuple[int | None, int | None] = next(
                (b, seq) for b, seq, w in watermark_items if w >= r["wm"]
            )
        else:
            causes = [(b, seq) for s, b, seq in late_kept if s == start]
            # a late firing is caused by the k-th kept element of an already fired window; else unexplained
            cause = causes[firing - 1] if firing <= len(causes) else (None, None)
        fired_at = common.case_watermark(r["wm"], base)
        windows.append([*cause, case.source, start, r["end"] - base, fired_at, r["count"]])
    progress = []
    totals = dict.fromkeys(VERDICTS, 0)
    for b in range(case.batches):
        for verdict in VERDICTS:
            totals[verdict] += counts_by_batch[b][verdict]
        progress.append([b, *(totals[v] for v in VERDICTS), None])
    tables = {
        "events": events,
        "side_outputs": side_outputs,
        "windows": windows,
        "progress": progress,
        "errors": [list(e) for e in case.errors],
    }
    return {"id": case.case_id, "tables": tables}
